import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Connection } from '@temporalio/client';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort, portFree } from '../../sim/ports';
import { GRACE_MS } from '../../sim/reaper';
import { spawnCliUntil } from '../support/cli';
import { scratchDir } from '../support/harness';
import { until } from '../support/until';

/**
 * A process that starts a long-lived server takes it down when it dies by any cause: here SIGKILL, which
 * runs no handler of its own (sim/reaper.ts). Each case kills the parent and then looks for the
 * server by pid and by port.
 */

/** Live (not zombie) processes whose command line mentions `text`, from /proc. */
function livePidsMentioning(text: string): number[] {
  const pids: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (readFileSync(`/proc/${name}/cmdline`, 'utf8').includes(text)) pids.push(Number(name));
    } catch {
      /* gone meanwhile */
    }
  }
  return pids;
}

/** Whether `pid` is still a running process (a zombie waiting for its reaper is not). */
function running(pid: number): boolean {
  if (!existsSync(`/proc/${pid}/stat`)) return false;
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

const scratches: Array<{ dir: string; cleanup: () => void }> = [];
const parents: ChildProcess[] = [];

afterAll(() => {
  // Whatever a failed case left: the parents, then every process of a scratch dir, by pid.
  for (const p of parents) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
  for (const s of scratches) {
    for (const pid of livePidsMentioning(s.dir)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
    s.cleanup();
  }
});

function killed(child: ChildProcess): Promise<void> {
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  child.kill('SIGKILL');
  return exited;
}

/** Within the watchdog's grace and a margin: every pid gone and every port free again. */
async function nothingLeft(pids: number[], ports: number[]): Promise<void> {
  const started = Date.now();
  await until(
    `pids ${pids.join(', ')} and ports ${ports.join(', ')} to be gone`,
    async () => {
      if (pids.some(running)) return undefined;
      for (const port of ports) if (!(await portFree(port))) return undefined;
      return true;
    },
    GRACE_MS + 7_000,
  );
  expect(Date.now() - started).toBeLessThan(GRACE_MS + 7_000);
}

describe('SIGKILL of a process leaves none of its servers running', () => {
  it('`wavegate dev` killed with SIGKILL: its Temporal server is gone within seconds, ports free', async () => {
    const scratch = scratchDir('dev-sigkill');
    scratches.push(scratch);
    const port = await freePort();
    const { child, output } = await spawnCliUntil(
      ['dev', '--state-dir', scratch.dir, '--port', String(port)],
      /Ctrl-C to stop/,
    );
    parents.push(child);
    const address = /Temporal address: (127\.0\.0\.1:\d+)/.exec(output())![1]!;
    const uiPort = Number(/Web UI: +http:\/\/127\.0\.0\.1:(\d+)/.exec(output())![1]);
    // The server answers, and it is a process of its own (the one the kill must not leave behind).
    const conn = await Connection.connect({ address, connectTimeout: 5_000 });
    await conn.workflowService.getSystemInfo({});
    await conn.close();
    const servers = livePidsMentioning(scratch.dir).filter((pid) =>
      readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('start-dev'),
    );
    expect(servers).toHaveLength(1);
    expect(servers[0]).not.toBe(child.pid);

    await killed(child);
    await nothingLeft(servers, [port, uiPort]);
    expect(livePidsMentioning(scratch.dir)).toEqual([]);
  });

  /** A process of its own that starts a 3-device OpenSSH fleet (and with `crash` dies of a fatal error). */
  async function fleetOwner(crash = false) {
    const scratch = scratchDir('sshd-sigkill');
    scratches.push(scratch);
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        join(__dirname, '..', 'support', 'openssh-fleet-child.ts'),
        scratch.dir,
        '3',
        ...(crash ? ['crash'] : []),
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    parents.push(child);
    let stderr = '';
    child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    const started = await new Promise<{ pids: number[]; ports: number[] }>((resolve, reject) => {
      let out = '';
      child.stdout!.on('data', (c: Buffer) => {
        out += c.toString();
        if (out.includes('\n')) resolve(JSON.parse(out.split('\n')[0]!) as { pids: number[]; ports: number[] });
      });
      child.once('exit', (code) => reject(new Error(`fleet child exited ${code} before it was up: ${out}`)));
    });
    expect(started.pids).toHaveLength(3);
    for (const pid of started.pids) expect(running(pid)).toBe(true);
    for (const port of started.ports) expect(await portFree(port)).toBe(false);
    return { child, started, exited, stderr: () => stderr };
  }

  it('a process running an OpenSSH fleet killed with SIGKILL: every sshd is gone, ports free', async () => {
    const { child, started } = await fleetOwner();
    await killed(child);
    await nothingLeft(started.pids, started.ports);
  });

  it('a process running an OpenSSH fleet that dies of a fatal error: every sshd is gone, ports free', async () => {
    const { started, exited, stderr } = await fleetOwner(true);
    expect(await exited).toBe(1);
    expect(stderr()).toContain('a fatal error of the fleet owner');
    await nothingLeft(started.pids, started.ports);
  });
});
