import { cpSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { readAuditFile } from '../../audit/file';
import { dependencyChecker } from '../../device/dependencies';
import { applyToDevice, EnvelopeRejected } from '../../device/steps';
import { createPreflightActivities } from '../../activities/preflight';
import { parseRevision } from '../../core/revision';
import type { DeviceTarget } from '../../core/rollout-state';
import { parseRolloutSpec } from '../../core/spec';
import { keyPairFromSeed, pinOf, signRevision } from '../../core/signing';
import { rolloutInputFromFiles } from '../../intake/prepare';
import { loadRolloutInventory } from '../../intake/inventory';
import { targetOf } from '../../device/fleet';
import type { Fleet } from '../../sim';
import { renderFrame } from '../../cli/watch';
import { runCli } from '../support/cli';
import { until } from '../support/until';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { abortUpdate, pauseUpdate, resumeUpdate, type RolloutStatus } from '../../contracts/rollout';
import { rolloutWorkflow, type RolloutInput } from '../../workflows/rollout';
import { realRollouts } from '../support/real-rollouts';
import { recordHistory } from '../support/histories';
import { rejection } from '../support/refusal';
import { mockDevices, mockInput } from '../support/mock-activities';
import { mockedRolloutWorker } from '../support/mocked-worker';
import { startTimeSkippingEnv } from '../support/temporal';
import { APPLY_COMMAND, markerOf, verifiesAt, waitForStatus } from '../support/rollout-helpers';

/**
 * Ordering between profiles (spec `after`) on a real Temporal dev server, with the real activities over
 * SSH to the simulator: two profiles on the same devices. `demo` r1 → r2 waits for `base` r2. A device
 * that already verifies base r2 is applied; one that does not waits (state `waiting`, nothing run on it
 * but base's signed verify), and proceeds once base's own rollout has put base r2 there.
 */
describe('ordering between profiles over SSH', () => {
  // The worker's own profiles root: the demo profile as shipped, and base.
  const real = realRollouts('ordering', {
    profilesRoot: () => profilesRoot,
    prepare: () => {
      cpSync(join(PROJECT_ROOT, 'profiles', 'demo'), join(profilesRoot, 'demo'), { recursive: true });
      writeBaseProfile();
    },
  });
  const profilesRoot = join(real.dir, 'profiles');
  let n = 0;

  /** The `base` profile: revisions 1 and 2 write $HOME/etc/base, verified by its content; signed by a key made here. */
  function writeBaseProfile(): void {
    const dir = join(profilesRoot, 'base');
    mkdirSync(join(dir, 'envelopes'), { recursive: true });
    const key = keyPairFromSeed(new Uint8Array(randomBytes(32)));
    writeFileSync(
      join(dir, 'profile.yaml'),
      stringify({ name: 'base', description: 'what demo needs first', scope: {} }),
    );
    writeFileSync(join(dir, 'trust.yaml'), stringify({ threshold: 1, pins: [pinOf(key, 'test-signer')] }));
    for (const revision of [1, 2]) {
      const content = parseRevision(
        {
          profile: 'base',
          revision,
          apply: `mkdir -p "$HOME/etc" && printf 'base ${revision}\\n' > "$HOME/etc/base"`,
          verify: `grep -qx 'base ${revision}' "$HOME/etc/base"`,
          risk: 'safe',
          ...(revision === 2 ? { previous: 1 } : {}),
        },
        `base r${revision}`,
      );
      writeFileSync(
        join(dir, 'envelopes', `${revision}.json`),
        JSON.stringify(signRevision(content, key, { now: Date.now(), validityDays: 30 })),
      );
    }
  }

  function inputFor(rollout: Record<string, unknown>, inventoryPath: string, rolloutId: string): RolloutInput {
    const specSource = `${rolloutId} spec`;
    const spec = parseRolloutSpec({ rollout: { gate: 0, ...rollout } }, specSource);
    return rolloutInputFromFiles({ spec, specSource, inventoryPath, profilesRoot, startedBy: 'test', rolloutId });
  }

  /** Two devices in one pool with room for one apply at a time: a waiting device must free its slot. */
  async function setup() {
    n++;
    const { fleet, inventoryPath } = await real.fleet(
      [
        { id: 'ready', pool: 'edge' },
        { id: 'behind', pool: 'edge' },
      ],
      { edge: 0.5 },
    );
    const targets = new Map<string, DeviceTarget>(
      loadRolloutInventory(inventoryPath).devices.map((d) => [d.id, targetOf(d)]),
    );
    // `ready` already verifies base r2: applied by the real apply unit from the worker's own envelope.
    const baseSteps = inputFor(
      { profile: 'base', fromRevision: 1, toRevision: 2, phases: [{ canary: '1 device' }] },
      inventoryPath,
      'rollout:base-setup',
    ).steps;
    const done = await applyToDevice(targets.get('ready')!, baseSteps, {
      commandTimeoutMs: 20_000,
      profilesRoot,
      requireEnvelope: true,
    });
    expect(done.outcome).toBe('applied');
    const demo = inputFor(
      {
        profile: 'demo',
        fromRevision: 1,
        toRevision: 2,
        phases: [{ canary: '2 devices' }],
        after: [{ profile: 'base', revision: 2 }],
      },
      inventoryPath,
      `rollout:demo-ordering-${n}`,
    );
    return { fleet, inventoryPath, demo, targets };
  }

  const { start } = real;
  const device = (s: RolloutStatus, id: string) => s.devices.find((d) => d.id === id)!;
  const baseIn = (fleet: Fleet, id: string) => {
    const path = join(fleet.device(id).sandbox, 'etc', 'base');
    return existsSync(path) ? readFileSync(path, 'utf8').trim() : null;
  };

  it('the device that verifies the dependency is applied while the other waits; once base r2 is rolled out there, it proceeds and the rollout completes', async () => {
    const { fleet, inventoryPath, demo } = await setup();
    expect(demo.steps.after).toEqual([{ profile: 'base', revision: 2 }]);
    expect(demo.rollbackSteps.after).toBeUndefined();
    const handle = await start(demo);

    const waiting = await waitForStatus(
      handle,
      (s) => device(s, 'ready')?.state === 'applied' && device(s, 'behind')?.state === 'waiting',
    );
    expect(waiting.state).toBe('running');
    expect(device(waiting, 'behind').reason).toMatch(/^waiting for base r2 \(base r2 verify failed, no marker\)$/);
    expect(waiting.counts).toMatchObject({ applied: 1, waiting: 1 });
    // Nothing of demo ran on the waiting device: no apply, no lock, no marker; base's verify did run.
    expect(fleet.count('behind', APPLY_COMMAND)).toBe(0);
    expect(fleet.count('behind', /grep -qx 'base 2'/)).toBeGreaterThanOrEqual(1);
    expect(existsSync(join(fleet.device('behind').sandbox, '.wavegate/profiles/demo/apply.lock'))).toBe(false);
    expect(markerOf(fleet, 'behind')).toBeNull();
    expect(verifiesAt(fleet, 'ready', 2)).toBe(true);
    // Visible in watch and the Web UI's current details, with the reason.
    expect(renderFrame(waiting).join('\n')).toMatch(/behind\s+0\s+waiting\s+waiting for base r2/);
    expect(renderFrame(waiting)[1]).toContain('1 waiting');
    const meta = await handle.query<{ currentDetails?: string }>('__temporal_workflow_metadata');
    expect(meta.currentDetails).toContain('| behind | waiting | waiting for base r2');

    // base's own rollout over the same devices: `ready` verifies already, `behind` gets base r2.
    const base = inputFor(
      { profile: 'base', fromRevision: 1, toRevision: 2, phases: [{ canary: '2 devices' }] },
      inventoryPath,
      `rollout:base-ordering-${n}`,
    );
    const baseResult = await (await start(base)).result();
    expect(baseResult.state).toBe('completed');
    expect(baseIn(fleet, 'behind')).toBe('base 2');

    // The waiting device is retried after its backoff (15 s, then 30 s) and now proceeds.
    const result = await handle.result();
    await recordHistory(handle, 'profile-ordering-wait-then-proceed');
    expect(result.state).toBe('completed');
    expect(result.devices.map((d) => [d.id, d.state]).sort()).toEqual([
      ['behind', 'applied'],
      ['ready', 'applied'],
    ]);
    expect(markerOf(fleet, 'behind')).toBe(2);
    expect(verifiesAt(fleet, 'behind', 2)).toBe(true);
    expect(fleet.count('behind', APPLY_COMMAND)).toBe(1);
    // The audit's per-device outcomes: each device applied once, neither recorded as skipped.
    const audit = readAuditFile(real.auditDir, demo.rolloutId);
    expect(audit.map((r) => r.event)).toContain('rollout.completed');
    expect(audit.filter((r) => r.event === 'devices.skipped')).toEqual([]);
  }, 180_000);

  it('an abort ends the wait: the waiting device is not started, never applied and never rolled back; the applied one is put back', async () => {
    const { fleet, demo } = await setup();
    const handle = await start(demo);
    await waitForStatus(
      handle,
      (s) => device(s, 'ready')?.state === 'applied' && device(s, 'behind')?.state === 'waiting',
    );
    await handle.executeUpdate(abortUpdate, { args: [{ by: 'test', reason: 'base is late', rollback: true }] });
    const result = await handle.result();
    await recordHistory(handle, 'profile-ordering-abort-while-waiting');
    expect(result.state).toBe('aborted');
    expect(device(result, 'behind')).toMatchObject({ state: 'not-started', reason: 'aborted by test' });
    expect(device(result, 'ready')).toMatchObject({ state: 'rolled-back' });
    // Neither apply nor rollback ran on the waiting device (both would install the motd file).
    expect(fleet.count('behind', APPLY_COMMAND)).toBe(0);
    expect(markerOf(fleet, 'ready')).toBe(1);
    expect(verifiesAt(fleet, 'ready', 1)).toBe(true);
    // base was never touched by demo's rollout.
    expect(baseIn(fleet, 'ready')).toBe('base 2');
    expect(baseIn(fleet, 'behind')).toBeNull();
  }, 120_000);
  it('on the worker: a marker naming a newer signed revision lets its verify decide; a dependency the worker has no envelope of is refused with nothing run', async () => {
    const { fleet, demo, targets } = await setup();
    const opts = {
      commandTimeoutMs: 20_000,
      profilesRoot,
      requireEnvelope: true,
      dependencies: dependencyChecker({ profilesRoot, requireEnvelope: true, timeoutMs: 10_000 }),
    };
    // `ready` holds base r2 (marker 2): r1's verify fails there, r2's passes, so "after base r1" is met.
    const met = await applyToDevice(
      targets.get('ready')!,
      { ...demo.steps, after: [{ profile: 'base', revision: 1 }] },
      opts,
    );
    expect(met.outcome).toBe('applied');
    // `behind` has no base at all: unmet, and only verify commands ran there.
    const unmet = await applyToDevice(targets.get('behind')!, demo.steps, opts);
    expect(unmet).toMatchObject({
      outcome: 'dependency-unmet',
      unmet: [{ profile: 'base', revision: 2 }],
      detail: 'base r2 verify failed, no marker',
    });
    // A revision the worker does not hold signed: refused before the device runs anything.
    fleet.resetCounters();
    const refused = await rejection(
      applyToDevice(targets.get('behind')!, { ...demo.steps, after: [{ profile: 'base', revision: 3 }] }, opts),
      EnvelopeRejected,
    );
    expect(refused).toBeInstanceOf(EnvelopeRejected);
    expect(refused.reason).toBe('NO_DEPENDENCY');
    expect(refused.message).toContain('base/envelopes/3.json');
    expect(fleet.count('behind', /grep|install/)).toBe(0);
    expect(fleet.count('behind', APPLY_COMMAND)).toBe(0);
    // The preflight `start` asks finds the same before any device is contacted.
    const preflight = createPreflightActivities({ profilesRoot, identity: 'test-worker' });
    await expect(
      preflight.checkWorkerContent({
        profile: 'demo',
        revision: 2,
        envelope: demo.steps.envelope!,
        after: [{ profile: 'base', revision: 2 }],
      }),
    ).resolves.toMatchObject({ ok: true });
    await expect(
      preflight.checkWorkerContent({
        profile: 'demo',
        revision: 2,
        envelope: demo.steps.envelope!,
        after: [{ profile: 'nosuch', revision: 1 }],
      }),
    ).resolves.toMatchObject({ ok: false, reason: 'NO_TRUST' });
  }, 120_000);

  it('start refuses (exit 2) an after that closes a cycle with a running rollout, read from its workflow input; nothing is started', async () => {
    const { inventoryPath } = await setup();
    // rollout:base runs, waiting on its devices for demo r2 (none has it).
    const base = inputFor(
      {
        profile: 'base',
        fromRevision: 1,
        toRevision: 2,
        phases: [{ canary: '2 devices' }],
        after: [{ profile: 'demo', revision: 2 }],
      },
      inventoryPath,
      'rollout:base',
    );
    const baseHandle = await start(base);
    try {
      await waitForStatus(baseHandle, (s) => s.devices.some((d) => d.state === 'waiting'));
      const specFile = join(real.dir, `demo-after-base-${n}.yaml`);
      writeFileSync(
        specFile,
        stringify({
          rollout: {
            profile: 'demo',
            fromRevision: 1,
            toRevision: 2,
            gate: 0,
            phases: [{ canary: '2 devices' }],
            after: [{ profile: 'base', revision: 2 }],
          },
        }),
      );
      const run = await runCli([
        'start',
        '-f',
        specFile,
        '--inventory',
        inventoryPath,
        '--profiles',
        profilesRoot,
        ...real.cliFlags(),
      ]);
      expect(run.code, run.stderr).toBe(2);
      expect(run.stderr).toContain(
        'rollout.after: cycle demo -> base -> demo (through the running rollouts of "base")',
      );
      // Nothing started: the lock of demo, which every start takes first, was never taken.
      await expect(real.env.client.workflow.getHandle('profile-lock:demo').describe()).rejects.toThrow(/not found/i);
    } finally {
      await baseHandle.executeUpdate(abortUpdate, {
        args: [{ by: 'test', reason: 'cycle test done', rollback: true }],
      });
      expect((await baseHandle.result()).state).toBe('aborted');
    }
  }, 120_000);
});

/**
 * The wait's decisions with mocked activities on the time-skipping server: the backoff's timers pass in
 * skipped time, so what is shown is that a pause holds the rechecks however long it lasts, and that a
 * resume rechecks at once.
 */
describe('ordering between profiles: the wait under pause (mocked activities, time-skipping)', () => {
  const worker = mockedRolloutWorker('ordering-mock', { startEnv: startTimeSkippingEnv });
  const { mocks, taskQueue } = worker;

  it('a pause holds the rechecks (10 minutes of skipped time, no recheck); after resume the device is rechecked at once and applied', async () => {
    const base = mockInput('rollout:ordering-pause', {
      gate: 0,
      phases: [{ canary: '3 devices' }],
      after: [{ profile: 'base', revision: 2 }],
    });
    const input = { ...base, steps: { ...base.steps, after: base.spec.after } };
    const s = mocks.add(input.rolloutId, { devices: mockDevices(3), dependencyUnmet: new Set(['dev-02']) });
    const handle = await worker.env.client.workflow.start(rolloutWorkflow, {
      workflowId: input.rolloutId,
      taskQueue,
      args: [input],
    });
    const rechecks = () => s.log.filter((l) => l === 'dependencies:dev-02').length;
    const waiting = await waitForStatus(
      handle,
      (st) =>
        st.devices.filter((d) => d.state === 'applied').length === 2 && st.devices.some((d) => d.state === 'waiting'),
    );
    expect(waiting.devices.find((d) => d.id === 'dev-02')).toMatchObject({
      state: 'waiting',
      reason: 'waiting for base r2 (base r2 verify failed, no marker)',
    });
    // Unpaused, the backoff's timer (15 s) passes in skipped time and the device is rechecked.
    expect(rechecks()).toBe(1);
    await worker.env.sleep(16_000);
    await until('a second recheck', async () => (rechecks() >= 2 ? true : undefined), 20_000);
    await handle.executeUpdate(pauseUpdate, { args: [{ by: 'test', reason: 'hold the wait' }] });
    const before = rechecks();
    await worker.env.sleep(600_000);
    expect(rechecks()).toBe(before);
    expect((await handle.query<RolloutStatus>('status')).devices.find((d) => d.id === 'dev-02')?.state).toBe('waiting');
    s.dependencyUnmet!.delete('dev-02');
    await handle.executeUpdate(resumeUpdate, { args: [{ by: 'test' }] });
    const result = await handle.result();
    expect(result.state).toBe('completed');
    expect(result.counts).toMatchObject({ applied: 3, waiting: 0 });
    expect(rechecks()).toBe(before);
    expect(s.log.filter((l) => l === 'apply:dev-02')).toHaveLength(1);
    // Compensation would have put back only what ran: the waiting attempts are not in the devices' records.
    expect(s.audit.filter((r) => r.event === 'devices.skipped')).toEqual([]);
  }, 120_000);
});
