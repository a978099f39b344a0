import type { ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { demoDevices } from '../../sim';
import { spawnCliUntil } from '../support/cli';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy';
import { startTestWorker, writeDemoSpec } from '../support/harness';
import { realRollouts } from '../support/real-rollouts';
import { until } from '../support/until';

/**
 * `wavegate start --wait` outlives a status query that fails while the rollout runs (issue 29, where it
 * died of `ServiceError: Failed to query Workflow`): real dev server, real workers of the test's own on
 * one task queue, the simulated SSH fleet, the real CLI in a child process. Each failure is a real one:
 * the worker stopped (the server holds each query ~30 s, then answers FAILED_PRECONDITION "no poller
 * seen"), and the network path from the CLI to Temporal cut for longer than the SDK's own retries last.
 */
const real = realRollouts('wait-failures', { worker: false });
type TestWorker = Awaited<ReturnType<typeof startTestWorker>>;
let worker: TestWorker | undefined;
let taskQueue = '';
let proxy: TcpProxy | undefined;
const clis: ChildProcess[] = [];

beforeAll(async () => {
  worker = await startTestWorker(real.env, { auditDir: real.auditDir });
  taskQueue = worker.taskQueue;
  proxy = await startTcpProxy([real.env.address]);
});
afterAll(async () => {
  for (const cli of clis) if (cli.exitCode === null && cli.signalCode === null) cli.kill('SIGKILL');
  await proxy?.close();
  await worker?.stop();
});

/** `start --wait` of a two-phase rollout on a fresh fleet, against `address`; resolves once it has started. */
async function startWaiting(address: string) {
  const { inventoryPath, dir } = await real.fleet(demoDevices(4), { 'pool-a': 0.5, 'pool-b': 0.5 });
  const spec = writeDemoSpec(dir, 'spec', {
    phases: [
      { canary: '1 device', gate: '5s' },
      { bulk: 'remainder', gate: '0s' },
    ],
  });
  const blind = { TEMPORAL_ADDRESS: '', TEMPORAL_PROFILE: '', TEMPORAL_CONFIG_FILE: join(dir, 'none.toml') };
  const { child, output } = await spawnCliUntil(
    ['start', '-f', spec, '--inventory', inventoryPath, '--wait', '--interval', '300'].concat([
      '--address',
      address,
      '--task-queue',
      taskQueue,
    ]),
    /^rollout \S+ started$/m,
    180_000,
    { ...blind, WAVEGATE_PROFILES: '' },
  );
  clis.push(child);
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const id = /^rollout (\S+) started$/m.exec(output())![1]!;
  return { id, child, output, exited };
}

/** The wait said its failure on one line, went on, and ended with the rollout's outcome: exit 0, no stack trace. */
function expectWaitedThrough(code: number | null, text: string, failure: RegExp): void {
  expect(code, text).toBe(0);
  expect(text).toMatch(/rollout completed: 4\/4 applied — exit 0/);
  const notes = text.split('\n').filter((line) => line.startsWith('wavegate: '));
  expect(notes.length, text).toBeGreaterThan(0);
  for (const note of notes) expect(note).toMatch(/^wavegate: \S+ .*of rollout:demo:\S+ failed \(.*\); retrying$/);
  expect(
    notes.some((note) => failure.test(note)),
    text,
  ).toBe(true);
  expect(text).not.toMatch(/^\s+at /m); // no stack trace
  expect(text).not.toContain('unexpected error');
}

describe('start --wait through failures of its status query', () => {
  it('the worker stopped mid-rollout: the query fails (no poller), the wait says so and goes on; the worker back, exit 0', async () => {
    const { id, child, output, exited } = await startWaiting(real.env.address);
    await new Promise((r) => setTimeout(r, 1_000)); // the CLI is in its wait, polling
    await worker!.stop();
    // The server holds a query for a worker ~30 s before it fails it: wait for the CLI to say so.
    await until(
      'the wait to note its failed query',
      async () => {
        if (/retrying$/m.test(output())) return true;
        if (child.exitCode !== null) throw new Error(`the wait ended (exit ${child.exitCode}):\n${output()}`);
        return undefined;
      },
      90_000,
    );
    const running = await real.env.client.workflow.getHandle(id).describe();
    expect(running.status.name).toBe('RUNNING'); // nothing moves it without a worker
    worker = await startTestWorker(real.env, { auditDir: real.auditDir, taskQueue });

    // How the server fails a query with no worker depends on when it last saw a poller: at once (no poller
    // seen) or once the query's deadline passes (under load, the 4-file run at 00ec5d9 saw the second).
    expectWaitedThrough(
      await exited,
      output(),
      /FAILED_PRECONDITION: no poller seen|DEADLINE_EXCEEDED: query timed out before a worker could process it/,
    );
    expect((await real.env.client.workflow.getHandle(id).describe()).status.name).toBe('COMPLETED');
  });

  it("the network path to Temporal cut for 30 s mid-rollout (past the SDK's own retries): the wait goes on, exit 0", async () => {
    const { id, output, exited } = await startWaiting(proxy!.address);
    await new Promise((r) => setTimeout(r, 1_000));
    const resetsBefore = proxy!.resets;
    await proxy!.cut(30_000);
    expect(proxy!.resets).toBeGreaterThan(resetsBefore); // the CLI's connection was open, and was cut

    expectWaitedThrough(await exited, output(), /UNAVAILABLE/);
    expect((await real.env.client.workflow.getHandle(id).describe()).status.name).toBe('COMPLETED');
  });
});
