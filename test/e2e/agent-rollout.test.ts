import { chmodSync, copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { agentChecks, agentErrorRate } from '../../device/twin/health';
import { readTwin, twinStartOptions } from '../../clients/twin';
import { readAuditFile } from '../../audit/file';
import type { RolloutStatus } from '../../contracts/rollout';
import { demoDevices, fleetInventory, startFleet, type Fleet } from '../../sim';
import { startDevServerEnv } from '../../workers/dev-server';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { scratchDir, startTestWorker } from '../support/harness';
import { runCli, spawnCliUntil, stopChild } from '../support/cli';
import { markerOf, waitForStatus } from '../support/rollout-helpers';
import { until } from '../support/until';
import { parseAgentKey } from '../../core/agent-auth';
import {
  parseReceipt,
  RECEIPT_GENESIS,
  receiptHash,
  receiptNonce,
  receiptSignatureValid,
  type Receipt,
} from '../../core/receipt';

/**
 * Rollouts over real `wavegate agent` processes (each its own state directory and device home), a real
 * `wavegate gateway`, a dev server and a worker, started by the real `wavegate start`: the demo profile
 * r1 -> r2, signed, verified by each agent against its OWN pins. Every device's apply runs are counted by
 * an `install` wrapper first on the agents' PATH (`$HOME/apply-runs`); `sim-runtime-health` there reads
 * `$HOME/unhealthy` so a test can make a device's runtime check fail, `sim-error-rate` prints
 * `$HOME/error-rate` (else 0).
 */
const PROFILES = join(PROJECT_ROOT, 'profiles');

describe('rollouts over real agents and a real gateway', () => {
  const scratch = scratchDir('agent-rollout');
  let env: TestWorkflowEnvironment;
  let worker: Awaited<ReturnType<typeof startTestWorker>>;
  let gateway: { child: ChildProcess; output: () => string };
  let gatewayUrl: string;
  let fleet: Fleet;
  const agents = new Map<string, ChildProcess>();
  const pins = new Map<string, string>();
  const bin = join(scratch.dir, 'bin');
  const devicePins = join(scratch.dir, 'device-pins');
  const home = (d: string) => join(scratch.dir, 'homes', d);
  const stateDir = (d: string) => join(scratch.dir, 'state', d);
  const runs = (d: string) =>
    existsSync(join(home(d), 'apply-runs'))
      ? readFileSync(join(home(d), 'apply-runs'), 'utf8')
          .split('\n')
          .filter(Boolean)
      : [];
  const marker = (d: string) => {
    const f = join(home(d), '.wavegate/profiles/demo/revision');
    return existsSync(f) ? Number(readFileSync(f, 'utf8').trim()) : null;
  };
  const motd = (d: string) =>
    existsSync(join(home(d), 'etc/motd')) ? readFileSync(join(home(d), 'etc/motd'), 'utf8') : '';
  const temporal = () => [
    '--address',
    env.address,
    '--namespace',
    env.namespace ?? 'default',
    '--task-queue',
    worker.taskQueue,
  ];

  const A = ['a1', 'a2', 'a3', 'a4', 'a5'];
  const OFFLINE = 'a6';
  const MIXED = ['b1', 'b2'];
  const CANARY = ['c1', 'c2', 'c3'];
  const ABORT = ['d1', 'd2'];
  /** Enrolled, in the gateway's inventory, but first started after the first rollout completed. */
  const LATE = 'e1';
  const ALL = [...A, OFFLINE, ...MIXED, ...CANARY, ...ABORT, LATE];

  const agentDevice = (id: string) => ({
    id,
    transport: 'agent',
    agentKey: pins.get(id)!,
    pool: `pool-${id[0]}`,
    class: 'edge',
    labels: { group: id[0]! },
  });
  function writeInventory(name: string, devices: object[], pools: Record<string, number> = {}): string {
    const path = join(scratch.dir, `${name}.yaml`);
    const poolNames = new Set(devices.map((d) => (d as { pool: string }).pool));
    writeFileSync(
      path,
      stringify({
        pools: Object.fromEntries([...poolNames].map((p) => [p, { disruptionBudget: pools[p] ?? 1 }])),
        devices,
      }),
    );
    return path;
  }
  function writeSpec(name: string, rollout: Record<string, unknown>): string {
    const path = join(scratch.dir, `${name}.spec.yaml`);
    writeFileSync(
      path,
      stringify({ rollout: { profile: 'demo', fromRevision: 1, toRevision: 2, gate: '1s', ...rollout } }),
    );
    return path;
  }
  async function start(spec: string, inventory: string): Promise<string> {
    const run = await runCli([
      'start',
      '-f',
      spec,
      '--inventory',
      inventory,
      '--profiles',
      PROFILES,
      '--json',
      ...temporal(),
    ]);
    expect(run.code, `${run.stdout}\n${run.stderr}`).toBe(0);
    return JSON.parse(run.stdout).rolloutId as string;
  }
  const result = (id: string) => env.client.workflow.getHandle(id).result() as Promise<RolloutStatus>;

  /**
   * Each device's answers to a rollout's applies, in order, as the rollout got them (its history: ApplyResults, and a
   * failure's details), with the nonce its request had: the gateway's completion or the worker's own watch.
   */
  async function applyAnswers(id: string) {
    const handle = env.client.workflow.getHandle(id);
    const { runId } = await handle.describe();
    const json = (p?: { data?: Uint8Array | null } | null) => JSON.parse(Buffer.from(p!.data!).toString('utf8'));
    const asked = new Map<string, { device: string; nonce: string }>();
    const answers: Array<{ device: string; nonce: string; receipt?: string; receiptProblem?: string }> = [];
    for (const e of (await handle.fetchHistory()).events ?? []) {
      const scheduled = e.activityTaskScheduledEventAttributes;
      if (scheduled?.activityType?.name === 'applyRevision') {
        const device = (json(scheduled.input!.payloads![0]) as { device: { id: string } }).device.id;
        const nonce = receiptNonce({ rollout: id, run: runId, activity: scheduled.activityId!, device });
        asked.set(String(e.eventId), { device, nonce });
      }
      const completed = e.activityTaskCompletedEventAttributes;
      const failed = e.activityTaskFailedEventAttributes;
      const request = asked.get(String((completed ?? failed)?.scheduledEventId));
      if (!request) continue;
      // A success's ApplyResult, or a failure's details[0] (a refusal's or a failed step's receipt rides there).
      const details = failed?.failure?.cause?.applicationFailureInfo?.details?.payloads?.[0];
      const said = completed ? json(completed.result!.payloads![0]) : details ? json(details) : {};
      answers.push({ ...request, receipt: said.receipt, receiptProblem: said.receiptProblem });
    }
    return answers;
  }
  /** The receipt verified with the device's enrolled agentKey, for the request the rollout sent. */
  function verified(answer: { device: string; nonce: string; receipt?: string; receiptProblem?: string }): Receipt {
    expect(answer.receiptProblem, answer.device).toBeUndefined();
    const parsed = parseReceipt(answer.receipt);
    if (!parsed.ok) throw new Error(`${answer.device}: ${parsed.problem}`);
    expect(receiptSignatureValid(parsed.receipt, parseAgentKey(pins.get(answer.device)!)!), answer.device).toBe(true);
    expect(parsed.receipt.fields).toMatchObject({ device: answer.device, keyKind: 'agent', nonce: answer.nonce });
    return parsed.receipt;
  }

  async function startAgent(device: string): Promise<ChildProcess> {
    const { child } = await spawnCliUntil(
      [
        'agent',
        '--device-id',
        device,
        '--gateway',
        gatewayUrl,
        '--trust',
        devicePins,
        '--state-dir',
        stateDir(device),
        '--key',
        join(stateDir(device), 'identity.key'),
        '--home',
        home(device),
      ],
      /syncing with the gateway/,
      120_000,
      { PATH: `${bin}:${process.env.PATH}` },
    );
    agents.set(device, child);
    return child;
  }
  async function killAgent(device: string): Promise<void> {
    const child = agents.get(device)!;
    const gone = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await gone;
    agents.delete(device);
  }
  const seen = (ids: readonly string[]) =>
    until(
      `${ids.join(', ')} synced`,
      async () =>
        (await Promise.all(ids.map((id) => readTwin(env.client, id)))).every((v) => v?.lastSeenAt) ? true : undefined,
      120_000,
    );

  beforeAll(async () => {
    env = await startDevServerEnv();
    worker = await startTestWorker(env, { auditDir: join(scratch.dir, 'audit') });
    mkdirSync(bin, { recursive: true });
    // The apply's `install`, counted (and slowed down when $HOME/slow names seconds), then the real one.
    writeFileSync(
      join(bin, 'install'),
      `#!/bin/sh\necho "install $*" >> "$HOME/apply-runs"\n[ -f "$HOME/slow" ] && sleep "$(cat "$HOME/slow")"\nexec /usr/bin/install "$@"\n`,
    );
    writeFileSync(join(bin, 'sim-runtime-health'), `#!/bin/sh\n[ ! -e "$HOME/unhealthy" ]\n`);
    // The demo revisions' signed error-rate command: what $HOME/error-rate says, else 0.
    writeFileSync(join(bin, 'sim-error-rate'), `#!/bin/sh\ncat "$HOME/error-rate" 2>/dev/null || echo 0\n`);
    for (const f of ['install', 'sim-runtime-health', 'sim-error-rate']) chmodSync(join(bin, f), 0o755);
    // The devices' own pins for the demo profile (the same release keys the profile is signed by).
    mkdirSync(join(devicePins, 'demo'), { recursive: true });
    copyFileSync(join(PROFILES, 'demo', 'trust.yaml'), join(devicePins, 'demo', 'trust.yaml'));
    for (const d of ALL) {
      mkdirSync(home(d), { recursive: true });
      const run = await runCli(['agent', 'enroll', '--state-dir', stateDir(d)]);
      expect(run.code, run.stderr).toBe(0);
      pins.set(d, run.stdout.trim());
    }
    // Every device but LATE was enrolled before any rollout: its twin exists before the first one
    // completes, so only LATE's first sync starts a twin (and converges it to the fleet's revision).
    for (const d of ALL.filter((x) => x !== LATE))
      await env.client.workflow.start('deviceTwinWorkflow', twinStartOptions(d, worker.taskQueue));
    const gatewayInventory = writeInventory('gateway-inventory', ALL.map(agentDevice));
    gateway = await spawnCliUntil(
      ['gateway', '--listen', '127.0.0.1:0', '--inventory', gatewayInventory, '--profiles', PROFILES, ...temporal()],
      /gateway listening on (http:\/\/\S+)/,
    );
    gatewayUrl = /gateway listening on (http:\/\/\S+)/.exec(gateway.output())![1]!;
    fleet = await startFleet({ devices: demoDevices(2), dir: join(scratch.dir, 'fleet') });
  }, 300_000);

  afterAll(async () => {
    for (const child of agents.values()) await stopChild(child);
    if (gateway) await stopChild(gateway.child);
    await fleet?.stop();
    await worker?.stop();
    await env?.teardown();
    scratch.cleanup();
  });

  it('a phased rollout over 5 agents completes (file and marker at r2 on every device, one apply each, one through a SIGKILL); an agent stopped before it is offline and converges when started', async () => {
    for (const d of A) await startAgent(d);
    await seen(A);
    // a3's apply takes 8 s: its agent is SIGKILLed in the middle and restarted.
    writeFileSync(join(home('a3'), 'slow'), '8');
    const inventory = writeInventory('a', [...A, OFFLINE].map(agentDevice));
    const spec = writeSpec('a', {
      phases: [
        { canary: '1 device', healthGate: ['devices-online', 'all-runtimes-healthy'] },
        { bulk: '50%' },
        { bulk: 'remainder', healthGate: ['devices-online', 'all-runtimes-healthy', 'check: motd-present'] },
      ],
    });
    const id = await start(spec, inventory);
    await until('a3 applying', async () => (runs('a3').length > 0 ? true : undefined), 180_000);
    await killAgent('a3');
    rmSync(join(home('a3'), 'slow'));
    await new Promise((r) => setTimeout(r, 2_000));
    await startAgent('a3');
    const status = await result(id);
    expect(status.state).toBe('completed');
    for (const d of A) {
      expect(
        status.devices.find((x) => x.id === d),
        d,
      ).toMatchObject({ state: 'applied' });
      expect(marker(d), d).toBe(2);
      expect(motd(d), d).toContain('revision 2');
      expect(runs(d), `${d} apply runs`).toHaveLength(1);
    }
    // Each device's answer carries its receipt, signed by its own key for the request it was sent: its first (counter 1,
    // a3's too, answered once through its SIGKILL), naming the device's phase; the twin holds the same receipt.
    // (The offline device's apply answered `offline`, asking it nothing: no receipt, nothing of the device's.)
    const answers = await applyAnswers(id);
    expect(answers.map((a) => a.device).sort()).toEqual([...A, OFFLINE]);
    expect(answers.find((a) => a.device === OFFLINE)).toMatchObject({ receipt: undefined, receiptProblem: undefined });
    for (const answer of answers.filter((a) => a.device !== OFFLINE)) {
      const receipt = verified(answer);
      expect(receipt.fields, answer.device).toMatchObject({
        rollout: id,
        phase: status.devices.find((x) => x.id === answer.device)!.phase,
        counter: 1,
        prev: RECEIPT_GENESIS,
        profile: 'demo',
        revision: 2,
        result: 'applied',
      });
      expect(receipt.fields.observed).toBe(receipt.fields.requested);
      expect((await readTwin(env.client, answer.device))?.report?.profiles.demo?.receipt).toBe(answer.receipt);
    }
    const offline = status.devices.find((x) => x.id === OFFLINE)!;
    expect(offline.state).toBe('skipped');
    expect(marker(OFFLINE)).toBeNull();
    // The offline device keeps the rollout's revision as desired state; started now, it converges.
    expect((await readTwin(env.client, OFFLINE))?.desired.demo).toMatchObject({ revision: 2, rollout: id });
    await startAgent(OFFLINE);
    await until('the offline agent converged', async () => (marker(OFFLINE) === 2 ? true : undefined), 120_000);
    expect(motd(OFFLINE)).toContain('revision 2');
    expect(runs(OFFLINE)).toHaveLength(1);
    // The board reads the agents' reports: every device applied, none pending.
    const board = await runCli([
      'fleet',
      'status',
      '--profile',
      'demo',
      '--inventory',
      inventory,
      '--profiles',
      PROFILES,
      '--revision',
      '2',
      '--json',
      ...temporal(),
    ]);
    expect(board.code, board.stdout + board.stderr).toBe(0);
    expect(JSON.parse(board.stdout).counts).toMatchObject({ applied: 6, pending: 0 });
  }, 600_000);

  it('a mixed rollout: SSH (simulated) and agent devices in one phased rollout, one budget, one audit trail', async () => {
    for (const d of MIXED) await startAgent(d);
    await seen(MIXED);
    const ssh = fleetInventory(fleet);
    const inventory = writeInventory(
      'mixed',
      [
        ...ssh.devices.map((d) => ({
          ...d,
          pool: 'mixed',
          ssh: { ...d.ssh, key: fleet.clientKeyPath },
          user: fleet.user,
        })),
        ...MIXED.map((id) => ({ ...agentDevice(id), pool: 'mixed' })),
      ],
      { mixed: 0.5 },
    );
    const spec = writeSpec('mixed', {
      phases: [
        { canary: '1 device', healthGate: ['devices-online', 'all-runtimes-healthy'] },
        { bulk: 'remainder', healthGate: ['devices-online'] },
      ],
    });
    const id = await start(spec, inventory);
    const status = await result(id);
    expect(status.state).toBe('completed');
    for (const d of fleet.devices) expect(markerOf(fleet, d.id)).toBe(2);
    for (const d of MIXED) {
      expect(marker(d)).toBe(2);
      expect(runs(d)).toHaveLength(1);
    }
    expect(status.counts.applied).toBe(fleet.devices.length + MIXED.length);
    // One trail: every device's apply outcome, SSH and agent alike, is in the rollout's one audit trail.
    const applied = readAuditFile(join(scratch.dir, 'audit'), id)
      .filter((r) => r.event === 'devices.outcome' && (r.evidence as { mode: string }).mode === 'apply')
      .flatMap((r) => (r.evidence as { devices: Array<{ id: string; state: string }> }).devices);
    expect(applied.map((d) => d.id).sort()).toEqual([...fleet.devices.map((d) => d.id), ...MIXED].sort());
    expect(applied.every((d) => d.state === 'applied')).toBe(true);
  }, 600_000);

  it('a canary health-gate failure on an agent device rolls back only the canary; pause and resume hold and continue agent devices', async () => {
    for (const d of CANARY) await startAgent(d);
    await seen(CANARY);
    for (const d of CANARY) writeFileSync(join(home(d), 'unhealthy'), '');
    const inventory = writeInventory('c', CANARY.map(agentDevice));
    const failing = await start(
      writeSpec('c-fail', {
        phases: [{ canary: '1 device', healthGate: ['all-runtimes-healthy'] }, { bulk: 'remainder' }],
      }),
      inventory,
    );
    const failed = await result(failing);
    expect(failed.state).toBe('rolled-back');
    const canary = failed.devices.find((d) => d.phase === 0)!.id;
    expect(failed.devices.find((d) => d.id === canary)).toMatchObject({ state: 'rolled-back' });
    expect(marker(canary)).toBe(1);
    expect(motd(canary)).toContain('revision 1');
    for (const d of CANARY.filter((x) => x !== canary)) {
      expect(runs(d), d).toEqual([]);
      expect(marker(d)).toBeNull();
    }

    for (const d of CANARY) rmSync(join(home(d), 'unhealthy'));
    const id = await start(
      writeSpec('c-pause', { phases: [{ canary: '1 device', gate: '20s' }, { bulk: 'remainder' }] }),
      inventory,
    );
    const handle = env.client.workflow.getHandle(id);
    await waitForStatus(handle, (s) => s.devices.some((d) => d.phase === 0 && d.state === 'applied'), 180_000);
    const pause = await runCli(['pause', id, '--reason', 'agent test', ...temporal()]);
    expect(pause.code, pause.stderr).toBe(0);
    await waitForStatus(handle, (s) => s.state === 'paused', 120_000);
    const before = CANARY.map((d) => runs(d).length);
    await new Promise((r) => setTimeout(r, 25_000)); // past the canary's gate: still held
    expect(CANARY.map((d) => runs(d).length)).toEqual(before);
    const resume = await runCli(['resume', id, ...temporal()]);
    expect(resume.code, resume.stderr).toBe(0);
    const done = await result(id);
    expect(done.state).toBe('completed');
    for (const d of CANARY) expect(marker(d), d).toBe(2);
  }, 600_000);

  it('abort on agent devices: no new device starts, the changed canary goes back to r1', async () => {
    for (const d of ABORT) await startAgent(d);
    await seen(ABORT);
    const inventory = writeInventory('d', ABORT.map(agentDevice));
    const id = await start(
      writeSpec('d-abort', { phases: [{ canary: '1 device', gate: '5m' }, { bulk: 'remainder' }] }),
      inventory,
    );
    const handle = env.client.workflow.getHandle(id);
    await waitForStatus(handle, (s) => s.devices.some((d) => d.phase === 0 && d.state === 'applied'), 180_000);
    const abort = await runCli(['abort', id, '--reason', 'agent abort test', ...temporal()]);
    expect(abort.code, abort.stderr).toBe(0);
    const status = await result(id);
    expect(status.state).toBe('aborted');
    const canary = status.devices.find((d) => d.phase === 0)!.id;
    const other = ABORT.find((d) => d !== canary)!;
    expect(status.devices.find((d) => d.id === canary)).toMatchObject({ state: 'rolled-back' });
    expect(marker(canary)).toBe(1);
    expect(motd(canary)).toContain('revision 1');
    // Two answers of the canary, two receipts: the apply (phase 0) and the compensation (no phase), counters one by
    // one, the second chained to the first.
    const [applied, compensated, ...more] = await applyAnswers(id);
    expect(more).toEqual([]);
    const first = verified(applied!);
    const second = verified(compensated!);
    expect(first.fields).toMatchObject({ device: canary, phase: 0, counter: 1, revision: 2, result: 'applied' });
    expect(second.fields).toMatchObject({ device: canary, phase: null, counter: 2, revision: 1, result: 'applied' });
    expect(second.fields.prev).toBe(receiptHash(first));
    expect(runs(other)).toEqual([]);
    expect(marker(other)).toBeNull();
    // Aborted, not completed: the device it never started keeps no desired state from it.
    expect((await readTwin(env.client, other))?.desired.demo).toBeUndefined();
  }, 600_000);

  it('a device enrolled after the rollouts converges to the latest completed one on its first sync (the gateway starts its twin and looks the rollout up)', async () => {
    expect(await readTwin(env.client, LATE)).toBeNull();
    await startAgent(LATE);
    await until('the late device converged', async () => (marker(LATE) === 2 ? true : undefined), 180_000);
    expect(motd(LATE)).toContain('revision 2');
    expect(runs(LATE)).toHaveLength(1);
    const view = await readTwin(env.client, LATE);
    expect(view?.desired.demo).toMatchObject({ revision: 2, requestId: expect.stringMatching(/:converge:e1$/) });
    expect(gateway.output()).toContain(`${LATE}: first sync: converging to the latest completed rollout of demo`);
  }, 300_000);
  it('agents report the signed checks and error rate; a drift `fleet status --reverify` finds reads applied again on the next --reverify once the fact is restored, with no apply in between', async () => {
    const d = 'a1';
    expect(marker(d)).toBe(2);
    // Every device-side gate is answered from a1's report: the runtime, the signed check, the error rate.
    writeFileSync(join(home(d), 'error-rate'), '0.25\n');
    const rated = await until(
      'a1 reports its error rate',
      async () => {
        const v = await readTwin(env.client, d);
        return v?.report?.health.some((h) => h.kind === 'error-rate' && h.value === 0.25) ? v : undefined;
      },
      120_000,
    );
    expect(rated.report!.health).toEqual(
      expect.arrayContaining([
        { name: 'motd', kind: 'runtime', ok: true },
        { name: 'motd-present', kind: 'check', ok: true },
        { name: 'error-rate:demo', kind: 'error-rate', ok: true, value: 0.25 },
      ]),
    );
    expect(agentErrorRate(rated, 'demo', 2, Date.now())).toEqual({ ok: true, value: 0.25 });
    expect(agentChecks(rated, ['motd', 'motd-present'], 'demo', 2, Date.now())).toEqual({ ok: true, value: [] });
    // Output that is no number is reported unread, never as a rate.
    writeFileSync(join(home(d), 'error-rate'), 'n/a\n');
    const unread = await until(
      'a1 reports an unread error rate',
      async () => {
        const v = await readTwin(env.client, d);
        return v?.report?.health.some((h) => h.kind === 'error-rate' && !h.ok) ? v : undefined;
      },
      120_000,
    );
    expect(unread.report!.health.find((h) => h.kind === 'error-rate')).toEqual({
      name: 'error-rate:demo',
      kind: 'error-rate',
      ok: false,
      detail: 'not a number: "n/a"',
    });
    expect(agentErrorRate(unread, 'demo', 2, Date.now())).toEqual({
      ok: false,
      reason: 'error-rate command on the device gave no number: not a number: "n/a"',
    });
    rmSync(join(home(d), 'error-rate'));

    const inventory = writeInventory('reverify', [agentDevice(d)]);
    const board = async () => {
      const run = await runCli([
        'fleet',
        'status',
        '--profile',
        'demo',
        '--inventory',
        inventory,
        '--profiles',
        PROFILES,
        '--revision',
        '2',
        '--reverify',
        '--json',
        ...temporal(),
      ]);
      expect(run.stderr).toContain('re-verify: 1 of 1 online agents answered');
      return {
        code: run.code,
        row: (JSON.parse(run.stdout) as { rows: Array<{ id: string; state: string; reason?: string }> }).rows.find(
          (r) => r.id === d,
        )!,
      };
    };
    const applies = runs(d).length;
    const motdFile = join(home(d), 'etc/motd');
    const good = readFileSync(motdFile);
    writeFileSync(motdFile, 'tampered\n');
    const drifted = await board();
    expect(drifted.code).not.toBe(0);
    expect(drifted.row).toMatchObject({ state: 'pending', reason: expect.stringContaining('failed VERIFY') });
    expect((await readTwin(env.client, d))?.report?.profiles.demo).toMatchObject({
      state: 'failed',
      reason: 'VERIFY',
      steps: ['reverify'],
      revision: 2,
    });
    // Restored by hand: the next re-verify finds the fact back and reports it in place.
    writeFileSync(motdFile, good);
    const recovered = await board();
    expect(recovered.code, JSON.stringify(recovered.row)).toBe(0);
    expect(recovered.row).toMatchObject({ state: 'applied', reason: expect.stringMatching(/^verified by its agent/) });
    const report = (await readTwin(env.client, d))?.report?.profiles.demo;
    expect(report).toMatchObject({ state: 'applied', steps: ['reverify'], revision: 2 });
    expect(report?.reason).toBeUndefined();
    expect(runs(d), 'no apply between the two re-verifies').toHaveLength(applies);
  }, 300_000);
});
