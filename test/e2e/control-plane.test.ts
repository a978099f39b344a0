import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  copyFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { Client } from 'pg';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { temporal } from '@temporalio/proto';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { RolloutStatus } from '../../core/rollout/status';
import { demoDevices, fleetInventory, startFleet, type Fleet } from '../../sim';
import { startDevServerEnv } from '../../workers/dev-server';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { runCli, spawnCliUntil, stopChild, type CliRun } from '../support/cli';
import { scratchDir } from '../support/harness';
import { startPostgres, type Postgres } from '../support/postgres';
import { APPLY_COMMAND, waitForStatus } from '../support/rollout-helpers';

/**
 * Issue 11 "Must show" #1: wavegate as a control plane of several hosts, on one machine. Three real
 * `wavegate worker` processes, each in its own directory with its own HOME, profiles root (pins and
 * payload), SSH client key, known_hosts and copy of the audit MAC key — no file of one is a file of
 * another — share one Temporal dev server and one PostgreSQL audit store. The CLI runs from a fourth
 * directory holding only the spec, the inventory and its own profiles copy; the inventory is deleted once
 * `start` returns. A 300-device rollout on the simulator completes while one worker is SIGKILLed in the
 * 25% phase and another is stopped with SIGTERM in the remainder phase. Then the audit in PostgreSQL is
 * one chain with one record per transition, `wavegate audit --verify` passes from the CLI's directory,
 * and every device ran the apply command exactly once (retried activities reattach, never re-apply).
 *
 * The inventory's key references are relative (`keys/id_ed25519`, `keys/known_hosts`): the worker uses
 * them as written, so each resolves against that worker's own working directory. (`~` is not expanded;
 * production inventories use the same absolute path on every worker host, see docs/production.md
 * "Files on a worker host".)
 */
const DEVICES = 300;
const TASK_QUEUE = 'control-plane';
const scratch = scratchDir('control-plane');
const operatorDir = join(scratch.dir, 'operator');
const workerDirs = ['worker-1', 'worker-2', 'worker-3'].map((name) => join(scratch.dir, name));
const spec = {
  rollout: {
    profile: 'demo',
    fromRevision: 1,
    toRevision: 2,
    phases: [{ canary: '1 device' }, { bulk: '25%' }, { bulk: 'remainder' }],
    gate: '1s',
    disruptionBudget: { 'pool-a': 0.1, 'pool-b': 0.1 },
  },
};

/** `install`, counted: one line in ~/.applies per run, before it does anything (a killed apply still counts). */
const INSTALL_COUNTER = '#!/bin/sh\necho "$$" >> "$HOME/.applies"\nexec /usr/bin/install "$@"\n';

/** How many times the device really ran the apply. */
function appliesRan(fleet: Fleet, id: string): number {
  const file = join(fleet.device(id).sandbox, '.applies');
  return existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean).length : 0;
}

let pg: Postgres;
let env: TestWorkflowEnvironment;
let fleet: Fleet;
const workers: Array<{ child: ChildProcess; output: () => string; identity: string }> = [];

/** No Temporal, profiles or audit settings leak in from the test's own environment. */
function cleanEnv(extra: Record<string, string>): Record<string, string> {
  return {
    TEMPORAL_ADDRESS: '',
    TEMPORAL_NAMESPACE: '',
    TEMPORAL_PROFILE: '',
    TEMPORAL_CONFIG_FILE: join(scratch.dir, 'none.toml'),
    WAVEGATE_PROFILES: '',
    WAVEGATE_AUDIT_DIR: '',
    WAVEGATE_AUDIT_KEY_FILE: '',
    WAVEGATE_AUDIT_STORE: '',
    WAVEGATE_AUDIT_STORE_PASSWORD_FILE: '',
    PGPASSWORD: '',
    ...extra,
  };
}

/** `wavegate <args>` run to completion in `cwd`. */
function wavegate(args: string[], cwd: string, extraEnv: Record<string, string> = {}): Promise<CliRun> {
  return runCli(args, { cwd, env: cleanEnv(extraEnv), timeoutMs: 180_000 });
}

const temporalFlags = () => [
  '--address',
  env.address,
  '--namespace',
  env.namespace ?? 'default',
  '--task-queue',
  TASK_QUEUE,
];

/** One worker host: its directory holds everything it reads, under the same relative names as the others. */
function provisionWorkerHost(dir: string, auditKey: string): void {
  mkdirSync(join(dir, 'home'), { recursive: true });
  mkdirSync(join(dir, 'keys'), { recursive: true, mode: 0o700 });
  cpSync(join(PROJECT_ROOT, 'profiles', 'demo'), join(dir, 'profiles', 'demo'), { recursive: true });
  copyFileSync(fleet.clientKeyPath, join(dir, 'keys', 'id_ed25519'));
  chmodSync(join(dir, 'keys', 'id_ed25519'), 0o600);
  writeFileSync(
    join(dir, 'keys', 'known_hosts'),
    `${fleet.devices.map((d) => `[${d.host}]:${d.port} ${d.hostPublicKey}`).join('\n')}\n`,
  );
  writeFileSync(join(dir, 'audit.key'), auditKey, { mode: 0o600 });
  writeFileSync(join(dir, 'pg.password'), pg.password, { mode: 0o600 });
}

async function startWorker(dir: string): Promise<void> {
  const args = [
    'worker',
    ...temporalFlags(),
    '--profiles',
    'profiles',
    '--audit-dir',
    'audit',
    '--audit-key-file',
    'audit.key',
    '--audit-store',
    pg.url,
  ];
  const started = await spawnCliUntil(
    args,
    /worker \S+ polling/,
    120_000,
    cleanEnv({ HOME: join(dir, 'home'), WAVEGATE_AUDIT_STORE_PASSWORD_FILE: 'pg.password' }),
    dir,
  );
  workers.push({ ...started, identity: /worker (\S+) polling/.exec(started.output())![1]! });
}

async function adminQuery<T extends object>(sql: string): Promise<T[]> {
  const client = new Client({ connectionString: pg.adminUrl });
  await client.connect();
  try {
    return (await client.query<T>(sql)).rows;
  } finally {
    await client.end();
  }
}

/** The rollout's id, as `start` printed it. */
let rolloutId = 'not started';

/** The rollout's history and each of its slice children's (event ids are per history). */
async function allHistories(): Promise<temporal.api.history.v1.IHistoryEvent[][]> {
  const parent = (await env.client.workflow.getHandle(rolloutId).fetchHistory()).events ?? [];
  const children = parent.flatMap((e) =>
    e.childWorkflowExecutionStartedEventAttributes
      ? [e.childWorkflowExecutionStartedEventAttributes.workflowExecution!]
      : [],
  );
  const childEvents = await Promise.all(
    children.map(
      async (c) => (await env.client.workflow.getHandle(c.workflowId!, c.runId!).fetchHistory()).events ?? [],
    ),
  );
  return [parent, ...childEvents];
}

/** The started events of every applyRevision activity (one per activity: its last attempt). */
function applyStartsOf(
  events: temporal.api.history.v1.IHistoryEvent[],
): temporal.api.history.v1.IActivityTaskStartedEventAttributes[] {
  const scheduled = new Set(
    events
      .filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'applyRevision')
      .map((e) => String(e.eventId)),
  );
  return events.flatMap((e) =>
    e.activityTaskStartedEventAttributes && scheduled.has(String(e.activityTaskStartedEventAttributes.scheduledEventId))
      ? [e.activityTaskStartedEventAttributes]
      : [],
  );
}

/** A live worker's resident memory in MB (Linux /proc), for the sizing notes in docs/production.md. */
function rssMb(child: ChildProcess): number {
  return Math.round(Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))![1]) / 1024);
}

/** How many of a phase's devices have run the apply (a slice child's progress is not in the parent's status until it returns). */
function appliesRunIn(status: RolloutStatus, phase: number): number {
  return status.devices.filter((d) => d.phase === phase && appliesRan(fleet, d.id) > 0).length;
}

beforeAll(async () => {
  const startedAt = Date.now();
  [pg, env, fleet] = await Promise.all([
    startPostgres(),
    startDevServerEnv(),
    startFleet({ devices: demoDevices(DEVICES), dir: join(scratch.dir, 'fleet') }),
  ]);
  // Every exec waits a little, so a phase lasts long enough to stop workers in the middle of it.
  await Promise.all(fleet.devices.map((d) => fleet.setFaults(d.id, { latencyMs: 100 })));
  // The demo apply is the only command that runs `install`: a wrapper first on each device's PATH
  // counts the applies that really ran (the simulator's exec log also lists launches it never ran,
  // their connection gone before they started).
  await Promise.all(
    fleet.devices.map(async (d) =>
      writeFileSync(join(await fleet.ensureSandbox(d.id), '.sim', 'bin', 'install'), INSTALL_COUNTER, { mode: 0o755 }),
    ),
  );
  const auditKey = `${randomBytes(32).toString('hex')}\n`;
  for (const dir of workerDirs) provisionWorkerHost(dir, auditKey);
  // The operator's laptop: the spec, the inventory, its own profiles copy, the audit key for --verify.
  mkdirSync(operatorDir, { recursive: true });
  cpSync(join(PROJECT_ROOT, 'profiles', 'demo'), join(operatorDir, 'profiles', 'demo'), { recursive: true });
  writeFileSync(join(operatorDir, 'audit.key'), auditKey, { mode: 0o600 });
  writeFileSync(join(operatorDir, 'spec.yaml'), stringify(spec));
  const inventory = fleetInventory(fleet, { budgets: spec.rollout.disruptionBudget });
  inventory.defaults.ssh = { key: 'keys/id_ed25519', knownHosts: 'keys/known_hosts' } as typeof inventory.defaults.ssh;
  for (const device of inventory.devices) delete (device as { ssh?: unknown }).ssh;
  writeFileSync(join(operatorDir, 'fleet.yaml'), stringify(inventory));
  await Promise.all(workerDirs.map((dir) => startWorker(dir)));
  console.log(
    `control-plane: setup (PostgreSQL, dev server, ${DEVICES} devices, 3 workers) ${((Date.now() - startedAt) / 1000).toFixed(1)} s`,
  );
}, 300_000);

afterAll(async () => {
  for (const w of workers) await stopChild(w.child);
  await fleet?.stop();
  await env?.teardown();
  await pg?.stop();
  scratch.cleanup();
});

describe('three workers, one Temporal, one PostgreSQL, the CLI elsewhere', () => {
  it('a 300-device rollout completes through a SIGKILL and a SIGTERM; one audit chain, one record per transition, one apply per device', async () => {
    const startedAt = Date.now();
    const start = await wavegate(
      ['start', '-f', 'spec.yaml', '--inventory', 'fleet.yaml', '--profiles', 'profiles', ...temporalFlags()],
      operatorDir,
    );
    expect(start.code, `${start.stdout}\n${start.stderr}`).toBe(0);
    rmSync(join(operatorDir, 'fleet.yaml')); // no worker can have read it: it was never on their disks
    rolloutId = /^rollout (rollout:demo:\S+) started$/m.exec(start.stdout)?.[1] ?? 'no id printed';
    const handle = env.client.workflow.getHandle(rolloutId);
    const [w1, w2, w3] = workers as [(typeof workers)[0], (typeof workers)[0], (typeof workers)[0]];

    // SIGKILL worker 1 in the middle of the 25% phase (inline: its devices' states are live in status).
    const atKill = await waitForStatus(
      handle,
      (s) =>
        s.phase === s.phases[1]?.name && s.devices.filter((d) => d.phase === 1 && d.state === 'applied').length >= 20,
      180_000,
    );
    w1.child.kill('SIGKILL');
    const bulkSize = atKill.phases[1]!.devices;
    const appliedAtKill = atKill.devices.filter((d) => d.phase === 1 && d.state === 'applied').length;
    expect(appliedAtKill, 'the SIGKILL came after the 25% phase was over').toBeLessThan(bulkSize);

    // SIGTERM worker 2 in the middle of the remainder phase (run as slice children: watch the simulator).
    const atTerm = await waitForStatus(
      handle,
      (s) => s.phase === s.phases[2]?.name && appliesRunIn(s, 2) >= 20,
      180_000,
    );
    const termExit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      w2.child.once('exit', (code, signal) => resolve({ code, signal })),
    );
    w2.child.kill('SIGTERM');
    const remainderSize = atTerm.phases[2]!.devices;
    const appliedAtTerm = appliesRunIn(atTerm, 2);
    const rssAtTerm = [w2, w3].map((w) => rssMb(w.child));
    expect(appliedAtTerm, 'the SIGTERM came after the remainder phase was over').toBeLessThan(remainderSize);
    // Graceful: the worker exits by itself (the SDK's shutdown), it is not killed.
    expect(await termExit).toEqual({ code: 0, signal: null });

    const status = (await handle.result()) as RolloutStatus;
    const elapsed = (Date.now() - startedAt) / 1000;
    console.log(
      `control-plane: ${DEVICES} devices in ${elapsed.toFixed(1)} s; SIGKILL at ${appliedAtKill}/${bulkSize} of phase 2, SIGTERM at ${appliedAtTerm}/${remainderSize} of phase 3; worker RSS then ${rssAtTerm.join(' / ')} MB`,
    );
    expect(status.state, JSON.stringify(status.counts)).toBe('completed');
    const notApplied = status.devices.filter((d) => d.state !== 'applied');
    expect(
      notApplied.map((d) => ({
        ...d,
        commands: fleet
          .commands(d.id)
          .map((c) => `${c.command.slice(0, 120)} -> ${JSON.stringify(c.exitCode ?? null)}`),
        logs: workers.flatMap((w) =>
          w
            .output()
            .split('\n')
            .filter((l) => l.includes(d.id)),
        ),
      })),
      'devices not applied',
    ).toEqual([]);
    expect(status.counts).toMatchObject({ total: DEVICES, applied: DEVICES });
    expect(w3.child.exitCode).toBeNull();

    // Every device ran the apply exactly once, whatever worker attempts came and went.
    const applies = new Map(fleet.devices.map((d) => [d.id, appliesRan(fleet, d.id)]));
    expect(
      [...applies]
        .filter(([, n]) => n !== 1)
        .map(([id, n]) => ({
          id,
          n,
          commands: fleet
            .commands(id)
            .map(
              (c) =>
                `${new Date(c.startedAt).toISOString()} ${c.command.slice(0, 300)} -> ${JSON.stringify(c.exitCode)}`,
            ),
        })),
      'devices whose apply did not run exactly once',
    ).toEqual([]);
    // Launch requests (the launch script carries the apply command) that never ran: cut off by a stop.
    const launchesCutOff = fleet.devices.reduce(
      (n, d) => n + fleet.commands(d.id).filter((c) => APPLY_COMMAND.test(c.command) && c.exitCode === null).length,
      0,
    );

    // The stops really hit work in flight: some applyRevision activities needed another attempt, and
    // the attempts that finished were answered by more than one worker.
    const applyStarts = (await allHistories()).flatMap(applyStartsOf);
    expect(applyStarts.length).toBe(DEVICES);
    const retried = applyStarts.filter((e) => (e.attempt ?? 1) > 1).length;
    expect(retried, 'no apply was retried: the stops hit nothing in flight').toBeGreaterThan(0);
    const answeredBy = new Set(applyStarts.map((e) => e.identity));
    expect(answeredBy.size).toBeGreaterThanOrEqual(2);
    expect([...answeredBy].every((id) => workers.some((w) => w.identity === id))).toBe(true);
    console.log(
      `control-plane: ${retried} applies retried after a stop, ${launchesCutOff} launch requests cut off before they ran; applies answered by ${[...answeredBy].join(', ')}`,
    );

    // The audit in PostgreSQL: one chain, one segment, seq 1..n, ending at the head the workflow holds.
    const rows = await adminQuery<{
      chain_run: string;
      segment: number;
      seq: string;
      event: string;
      hash: string;
      record: string;
    }>(
      `SELECT chain_run, segment, seq, event, hash, record FROM wavegate_audit_records WHERE rollout_id = '${rolloutId}' ORDER BY seq`,
    );
    expect(new Set(rows.map((r) => r.chain_run)).size).toBe(1);
    expect(new Set(rows.map((r) => r.segment))).toEqual(new Set([1]));
    expect(rows.map((r) => Number(r.seq))).toEqual(rows.map((_, i) => i + 1));
    expect({ seq: Number(rows.at(-1)!.seq), hash: rows.at(-1)!.hash }).toEqual(status.auditHead);
    // One record per transition: the rollout's start and end once, each phase's start, apply and gate once.
    const records = rows.map(
      (r) =>
        JSON.parse(r.record) as {
          event: string;
          phase: string | null;
          evidence: { mode?: string; devices?: Array<{ id: string; state: string }> };
        },
    );
    const count = (event: string, phase?: string) =>
      records.filter((r) => r.event === event && (phase === undefined || r.phase === phase)).length;
    expect(count('rollout.started')).toBe(1);
    expect(count('rollout.completed')).toBe(1);
    expect(rows[0]!.event).toBe('rollout.started');
    expect(rows.at(-1)!.event).toBe('rollout.completed');
    expect(status.phases.map((p) => p.name)).toHaveLength(3);
    for (const phase of status.phases) {
      expect(
        [count('phase.started', phase.name), count('phase.applied', phase.name), count('gate.passed', phase.name)],
        phase.name,
      ).toEqual([1, 1, 1]);
    }
    for (const event of [
      'gate.failed',
      'gate.inconclusive',
      'rollout.paused',
      'rollback.started',
      'rollout.failed',
      'audit.override',
    ])
      expect(count(event), event).toBe(0);
    // Each device's outcome is recorded once, as applied.
    const outcomes = records
      .filter((r) => r.event === 'devices.outcome' && r.evidence.mode === 'apply')
      .flatMap((r) => r.evidence.devices ?? []);
    expect(outcomes.map((d) => d.id).sort()).toEqual(fleet.devices.map((d) => d.id).sort());
    expect(new Set(outcomes.map((d) => d.state))).toEqual(new Set(['applied']));
    // No worker fell back to a file store on its own disk.
    for (const dir of workerDirs)
      expect(existsSync(join(dir, 'audit')) ? readdirSync(join(dir, 'audit')) : []).toEqual([]);

    // The operator verifies the chain (and every MAC) from the CLI's directory.
    const verify = await wavegate(
      ['audit', rolloutId, '--verify', '--audit-store', pg.url, '--audit-key-file', 'audit.key', ...temporalFlags()],
      operatorDir,
      { PGPASSWORD: pg.password },
    );
    expect(verify.code, `${verify.stdout}\n${verify.stderr}`).toBe(0);
    expect(verify.stdout).toContain(`audit ${rolloutId}: ${rows.length} records, chain intact`);
    expect(verify.stdout).toContain('MAC: every record checked against the audit key');
  }, 420_000);
});
