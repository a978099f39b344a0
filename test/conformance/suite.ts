import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readAuditFile } from '../../audit/file';
import { parseFloor, type DeviceFloor } from '../../core/floor';
import {
  parseReceipt,
  RECEIPT_GENESIS,
  receiptHash,
  receiptNonce,
  receiptSignatureValid,
  type Receipt,
} from '../../core/receipt';
import type { RevertOf, RevisionSteps, RolloutInput } from '../../core/rollout/input';
import type { RolloutStatus } from '../../core/rollout/status';
import { parseRolloutSpec } from '../../core/spec';
import { REVOCATIONS_TYPE } from '../../core/revocation';
import { ROOT_TYPE } from '../../core/trust-root';
import { signDocument } from '../../core/signed-document';
import { keyPairFromSeed, pinOf, type Envelope, type KeyPair } from '../../core/signing';
import { rolloutInputFromFiles } from '../../intake/prepare';
import { profileDir } from '../../intake/profile-dir';
import { profileTrustState } from '../../intake/trust';
import { revertRolloutInput } from '../../intake/revert';
import { startDevServerEnv } from '../../workers/dev-server';
import { runCli, spawnCliUntil, type CliRun } from '../support/cli';
import { scratchDir } from '../support/harness';
import { writeSignedProfile, type RevisionSource, type SignedProfile } from '../support/signed-profile';
import { until } from '../support/until';
import type { ConformanceBackend, SuiteContext, WorkerProcess } from './backend';

/**
 * The channel conformance suite (test/conformance/README.md): one set of cases, written once against
 * ConformanceBackend, run by each backend's own test file. Every case asserts on the device's own files
 * (its marker, its floor, the counter its signed apply appends to) and on the rollout's result.
 *
 * The profile `conf` is signed 2-of-2 by keys made here. r1..r3 install `$HOME/etc/conf` from their
 * payload ("conf r<n>") and verify it; every apply first appends `r<n>` to `$HOME/apply-runs` (the
 * count of real runs) and sleeps `$(cat $HOME/slow)` seconds when that file exists; the signed check
 * `conf-ok` fails while `$HOME/unhealthy` exists. r4's apply exits 3, r5's verify never passes after
 * its apply, r6's verify reads its fact back but is not provable (non-ASCII text).
 */
export const PROFILE = 'conf';
const SLOW = '{ [ ! -f "$HOME/slow" ] || sleep "$(cat "$HOME/slow")"; }';
const CHECKS = { checks: [{ name: 'conf-ok', command: 'test ! -e "$HOME/unhealthy"' }] };
export const REVISIONS: RevisionSource[] = [
  ...[1, 2, 3].map((n) => ({
    revision: n,
    apply: `echo r${n} >> "$HOME/apply-runs" && ${SLOW} && mkdir -p "$HOME/etc" && install -m 0644 "$WAVEGATE_STAGING/conf" "$HOME/etc/conf"`,
    verify: `grep -qx 'conf r${n}' "$HOME/etc/conf"`,
    payload: { conf: `conf r${n}\n` },
    health: CHECKS,
  })),
  {
    revision: 4,
    apply: 'echo r4 >> "$HOME/apply-runs" && echo "no space left on device" >&2 && exit 3',
    verify: `grep -qx 'conf r4' "$HOME/etc/conf"`,
    health: CHECKS,
  },
  {
    revision: 5,
    apply: 'echo r5 >> "$HOME/apply-runs" && mkdir -p "$HOME/etc" && echo draft > "$HOME/etc/conf5"',
    verify: `grep -qx 'conf r5' "$HOME/etc/conf5"`,
    health: CHECKS,
  },
  // A real check of the fact, but its non-ASCII text makes it prose to the provability rule (NON_ASCII):
  // verify-first fails, the apply runs, verify passes, and still the device only claims it.
  // Signs a way back of 3 s: the rollout that brings it can take a device back only within 3 s of its confirmation.
  {
    revision: 7,
    apply: `echo r7 >> "$HOME/apply-runs" && mkdir -p "$HOME/etc" && install -m 0644 "$WAVEGATE_STAGING/conf" "$HOME/etc/conf"`,
    verify: `grep -qx 'conf r7' "$HOME/etc/conf"`,
    payload: { conf: 'conf r7\n' },
    health: CHECKS,
    previous: 1,
    wayBack: 3_000,
  },
  {
    revision: 6,
    apply: 'echo r6 >> "$HOME/apply-runs" && mkdir -p "$HOME/etc" && cp "$WAVEGATE_STAGING/conf" "$HOME/etc/conf6"',
    verify: `grep -qx 'conf r6 ✓' "$HOME/etc/conf6"`,
    payload: { conf: 'conf r6 ✓\n' },
    health: CHECKS,
  },
];

/** Every device of the suite, by case: each case has devices of its own, so one failing case leaves the others' devices alone. */
export const DEVICES = {
  once: ['once-1', 'once-2'],
  inPlace: ['inplace-1', 'inplace-2'],
  applyFails: ['applyfail-1'],
  verifyFails: ['verifyfail-1'],
  claimed: ['claimed-1'],
  refusals: ['refuse-1'],
  floor: ['floor-1'],
  rollback: ['rollback-1'],
  revert: ['revert-1'],
  checks: ['checks-1'],
  reverify: ['reverify-1'],
  crash: ['crash-1'],
  chain: ['chain-1'],
  wayBack: ['wayback-1'],
  receipts: ['receipt-1', 'receipt-2'],
  revoked: ['revoked-1'],
  rotated: ['rotated-1'],
  forgedTrust: ['forged-trust-1'],
} as const;
const ALL = Object.values(DEVICES).flat();

const DAY = 86_400_000;

export function conformanceSuite(makeBackend: () => ConformanceBackend): void {
  const backend = makeBackend();
  describe(`channel conformance: ${backend.name}`, () => {
    const scratch = scratchDir(`conformance-${backend.transport}`);
    const root = join(scratch.dir, 'profiles');
    let env: TestWorkflowEnvironment;
    let profile: SignedProfile;
    let worker: ReturnType<typeof workerProcess> | undefined;
    let ctx: SuiteContext;

    // --- the device's own files ----------------------------------------------------------------
    const home = (id: string) => backend.home(id);
    const file = (id: string, rel: string) => join(home(id), rel);
    const read = (id: string, rel: string) => (existsSync(file(id, rel)) ? readFileSync(file(id, rel), 'utf8') : null);
    const marker = (id: string): number | null => {
      const text = read(id, `.wavegate/profiles/${PROFILE}/revision`);
      return text === null ? null : Number(text.trim());
    };
    const floor = (id: string): DeviceFloor | null => {
      const text = read(id, `.wavegate/profiles/${PROFILE}/floor`);
      return text === null ? null : parseFloor(text);
    };
    /** How many times revision n's apply really ran on the device (every apply appends `r<n>` first). */
    const runs = (id: string, n: number) =>
      (read(id, 'apply-runs') ?? '').split('\n').filter((l) => l === `r${n}`).length;
    const allRuns = (id: string) => (read(id, 'apply-runs') ?? '').split('\n').filter(Boolean).length;
    const conf = (id: string) => read(id, 'etc/conf');
    /** The device holds revision n's fact (what r<n>'s verify reads), its marker saying so. */
    function seed(id: string, n: number, opts: { marker?: boolean } = {}) {
      mkdirSync(file(id, 'etc'), { recursive: true });
      writeFileSync(file(id, 'etc/conf'), `conf r${n}\n`);
      if (opts.marker !== false) {
        mkdirSync(file(id, `.wavegate/profiles/${PROFILE}`), { recursive: true });
        writeFileSync(file(id, `.wavegate/profiles/${PROFILE}/revision`), `${n}\n`);
      }
    }

    // --- rollouts ------------------------------------------------------------------------------
    const cli = (args: string[], timeoutMs = 240_000): Promise<CliRun> =>
      runCli(args, {
        timeoutMs,
        env: {
          TEMPORAL_ADDRESS: '',
          TEMPORAL_PROFILE: '',
          TEMPORAL_CONFIG_FILE: join(scratch.dir, 'none.toml'),
          WAVEGATE_PROFILES: '',
        },
      });
    function inventory(name: string, ids: readonly string[]): string {
      const path = join(scratch.dir, `${name}.inventory.yaml`);
      writeFileSync(
        path,
        stringify({
          pools: { conf: { disruptionBudget: 1 } },
          devices: ids.map((id) => ({
            ...backend.inventoryEntry(id),
            pool: 'conf',
            class: 'edge',
            labels: { case: name },
          })),
        }),
      );
      return path;
    }
    function spec(name: string, from: number, to: number, rollout: Record<string, unknown> = {}): string {
      const path = join(scratch.dir, `${name}.spec.yaml`);
      writeFileSync(
        path,
        stringify({
          rollout: {
            profile: PROFILE,
            fromRevision: from,
            toRevision: to,
            phases: [{ bulk: 'remainder', gate: '1s' }],
            maxFailureRatio: 1,
            applyTimeout: '3m',
            ...rollout,
          },
        }),
      );
      return path;
    }
    /** `wavegate start` (the real command): the rollout's id and run. */
    async function start(
      name: string,
      ids: readonly string[],
      from: number,
      to: number,
      rollout: Record<string, unknown> = {},
    ) {
      const run = await cli([
        'start',
        '-f',
        spec(name, from, to, rollout),
        '--inventory',
        inventory(name, ids),
        '--profiles',
        root,
        '--json',
        ...ctx.temporalArgs(),
      ]);
      expect(run.code, `${run.stdout}\n${run.stderr}`).toBe(0);
      const started = JSON.parse(run.stdout) as { rolloutId: string; runId: string };
      return { rolloutId: started.rolloutId, runId: started.runId };
    }
    const result = (r: { rolloutId: string; runId: string }) =>
      env.client.workflow.getHandle(r.rolloutId, r.runId).result() as Promise<RolloutStatus>;
    /** Start r<from> -> r<to> over `ids` and wait for its end. */
    async function rollout(
      name: string,
      ids: readonly string[],
      from: number,
      to: number,
      extra: Record<string, unknown> = {},
    ) {
      const started = await start(name, ids, from, to, extra);
      return { ...started, status: await result(started) };
    }
    /** What intake would hand the workflow for this spec: the base of the inputs a control plane can forge. */
    function inputFor(
      name: string,
      ids: readonly string[],
      from: number,
      to: number,
      extra: Record<string, unknown> = {},
    ): RolloutInput {
      const specSource = `${name} (conformance)`;
      return rolloutInputFromFiles({
        spec: parseRolloutSpec(
          {
            rollout: {
              profile: PROFILE,
              fromRevision: from,
              toRevision: to,
              phases: [{ bulk: 'remainder', gate: '1s' }],
              maxFailureRatio: 1,
              applyTimeout: '3m',
              ...extra,
            },
          },
          specSource,
        ),
        specSource,
        inventoryPath: inventory(name, ids),
        profilesRoot: root,
        startedBy: 'conformance',
      });
    }
    /** Start a workflow input directly through the client (what a compromised or buggy control plane could send) and wait for its end. */
    async function forged(input: RolloutInput): Promise<RolloutStatus> {
      const handle = await env.client.workflow.start('rolloutWorkflow', {
        workflowId: input.rolloutId,
        taskQueue: ctx.taskQueue,
        args: [input],
      });
      return (await handle.result()) as RolloutStatus;
    }
    function revertInput(name: string, ids: readonly string[], reverts: RevertOf): RolloutInput {
      return revertRolloutInput({
        original: inputFor(name, ids, 1, 2),
        reverts,
        devices: [...ids],
        fast: true,
        profilesRoot: root,
        startedBy: 'conformance',
      });
    }
    const device = (s: RolloutStatus, id: string) => {
      const d = s.devices.find((x) => x.id === id);
      expect(d, `${id} in ${JSON.stringify(s.devices)}`).toBeDefined();
      return d!;
    };
    const closedAt = async (r: { rolloutId: string; runId: string }) =>
      (await env.client.workflow.getHandle(r.rolloutId, r.runId).describe()).closeTime!.getTime();
    const board = async (name: string, ids: readonly string[], revision: number) => {
      const run = await cli([
        'fleet',
        'status',
        '--profile',
        PROFILE,
        '--inventory',
        inventory(name, ids),
        '--profiles',
        root,
        '--revision',
        String(revision),
        '--json',
        ...backend.boardArgs(ctx),
      ]);
      expect(run.code === 0 || run.code === 1, `${run.stdout}\n${run.stderr}`).toBe(true);
      const parsed = JSON.parse(run.stdout) as { rows: Array<{ id: string; state: string; reason?: string }> };
      return { code: run.code, rows: Object.fromEntries(parsed.rows.map((r) => [r.id, r])) };
    };

    /** Rollouts, CLI processes and (case 9) a revert window: far more than the default 2 minutes on a loaded machine. */
    const test = (name: string, fn: () => Promise<void>) => it(name, fn, 480_000);

    beforeAll(async () => {
      // Three signers, two to sign (keys A and B sign every revision): case 16 revokes B, and A with C still make two.
      profile = writeSignedProfile({ root, name: PROFILE, revisions: REVISIONS, keys: 3, threshold: 2 });
      const devicePins = profile.writePins(join(scratch.dir, 'device-pins'));
      env = await startDevServerEnv();
      const taskQueue = `conformance-${backend.transport}-${process.pid}`;
      const temporalArgs = () => [
        '--address',
        env.address,
        '--namespace',
        env.namespace ?? 'default',
        '--task-queue',
        taskQueue,
      ];
      worker = workerProcess([...temporalArgs(), '--profiles', root, '--audit-dir', join(scratch.dir, 'audit')]);
      await worker.restart();
      ctx = {
        scratch: scratch.dir,
        address: env.address,
        namespace: env.namespace ?? 'default',
        taskQueue,
        client: env.client,
        profilesRoot: root,
        profile: PROFILE,
        devicePins,
        worker,
        temporalArgs,
      };
      await backend.start(ctx, ALL);
    }, 600_000);

    afterAll(async () => {
      await backend.stop();
      await worker?.stop();
      await env?.teardown();
      scratch.cleanup();
    }, 120_000);

    test('1. apply once: r1 -> r2 runs the apply exactly once per device; marker 2; the floor raised by this rollout and run', async () => {
      const ids = DEVICES.once;
      for (const id of ids) seed(id, 1);
      const r = await rollout('once', ids, 1, 2, { revertWindow: '1h' });
      expect(r.status.state).toBe('completed');
      for (const id of ids) {
        expect(device(r.status, id).state, id).toBe('applied');
        expect(runs(id, 2), `${id}: r2 apply runs`).toBe(1);
        expect(allRuns(id), `${id}: apply runs of any revision`).toBe(1);
        expect(marker(id), id).toBe(2);
        expect(conf(id), id).toBe('conf r2\n');
        expect(floor(id), `${id} floor`).toMatchObject({
          revision: 2,
          from: 1,
          revertUntil: 0,
          rollout: r.rolloutId,
          run: r.runId,
          window: 3_600_000,
        });
        expect(floor(id)!.at, `${id} floor at`).toEqual(expect.any(Number));
      }
    });

    test('2. already in place: a device whose verify passes is applied with nothing re-applied; its floor rises to r2 with no way back, and a revert leaves it alone', async () => {
      const [inPlace, behind] = DEVICES.inPlace;
      seed(inPlace, 2, { marker: false }); // the fact, no marker: only its verify can tell
      seed(behind, 1);
      const r = await rollout('inplace', DEVICES.inPlace, 1, 2, { revertWindow: '1h' });
      expect(r.status.state).toBe('completed');
      expect(device(r.status, inPlace).state).toBe('applied');
      expect(allRuns(inPlace), 'nothing ran on the device already in place').toBe(0);
      expect(marker(inPlace)).toBe(2);
      expect(floor(inPlace)).toMatchObject({ revision: 2, from: 2 });
      expect(device(r.status, behind).state).toBe('applied');
      expect(runs(behind, 2)).toBe(1);
      expect(floor(behind)).toMatchObject({ revision: 2, from: 1, run: r.runId });
      // Reverted: only the device the rollout changed goes back; the one found in place is never touched.
      const revert = await cli([
        'revert',
        r.rolloutId,
        '--profiles',
        root,
        '--wait',
        '--interval',
        '300',
        ...ctx.temporalArgs(),
      ]);
      expect(revert.code, `${revert.stdout}\n${revert.stderr}`).toBe(0);
      expect(marker(behind)).toBe(1);
      expect(runs(behind, 1)).toBe(1);
      expect(marker(inPlace)).toBe(2);
      expect(allRuns(inPlace), 'the revert left the device found in place alone').toBe(0);
      expect(conf(inPlace)).toBe('conf r2\n');
    });

    test('3. apply fails: the apply exits 3 -> the device failed; marker and fact unchanged; no floor raised', async () => {
      const [id] = DEVICES.applyFails;
      seed(id, 1);
      const r = await rollout('applyfail', DEVICES.applyFails, 1, 4);
      expect(r.status.state).not.toBe('running');
      expect(device(r.status, id)).toMatchObject({ state: 'failed', reason: expect.stringMatching(/apply exited 3/) });
      expect(runs(id, 4), 'the failing apply ran once, never retried').toBe(1);
      expect(marker(id)).toBe(1);
      expect(conf(id)).toBe('conf r1\n');
      expect(floor(id)).toBeNull();
    });

    test('4. verify fails after apply -> the device failed; marker unchanged; no floor raised', async () => {
      const [id] = DEVICES.verifyFails;
      seed(id, 1);
      const r = await rollout('verifyfail', DEVICES.verifyFails, 1, 5);
      expect(device(r.status, id)).toMatchObject({ state: 'failed', reason: expect.stringMatching(/verify/) });
      expect(runs(id, 5)).toBe(1);
      expect(read(id, 'etc/conf5'), 'the apply did run').toBe('draft\n');
      expect(marker(id)).toBe(1);
      expect(floor(id)).toBeNull();
    });

    test('5. a non-provable revision ends claimed, never applied (its apply ran once)', async () => {
      const [id] = DEVICES.claimed;
      seed(id, 1);
      const r = await rollout('claimed', DEVICES.claimed, 1, 6);
      expect(device(r.status, id).state).toBe('claimed');
      expect(r.status.counts.applied).toBe(0);
      expect(r.status.counts.claimed).toBe(1);
      expect(runs(id, 6)).toBe(1);
    });

    test('6. envelope refusals (unsigned, below threshold, tampered, expired): refused before anything runs, with the reason code', async () => {
      const [id] = DEVICES.refusals;
      seed(id, 1);
      const now = Date.now();
      const { expiresAt: _expires, issuedAt: _issued, ...r2 } = profile.revision(2);
      const bad: Array<[string, Envelope | undefined]> = [
        ['UNSIGNED', undefined],
        ['BELOW_THRESHOLD', profile.sign(profile.revision(2), { signers: [profile.keys[0]!] })],
        ['BAD_SIGNATURE', profile.tampered(2, 'echo r2 >> "$HOME/apply-runs" && echo owned > "$HOME/etc/conf"')],
        ['EXPIRED', profile.sign(r2, { now: now - 10 * DAY, validityDays: 1 })],
      ];
      for (const [reason, envelope] of bad) {
        const input = inputFor(`refuse-${reason}`, DEVICES.refusals, 1, 2);
        const { envelope: _good, ...unsigned } = input.steps;
        const status = await forged({ ...input, steps: envelope ? { ...unsigned, envelope } : unsigned });
        expect(device(status, id), reason).toMatchObject({
          state: 'failed',
          reason: expect.stringContaining(`EnvelopeRejected (${reason})`),
        });
        expect(allRuns(id), `${reason}: nothing ran`).toBe(0);
        expect(marker(id), reason).toBe(1);
        expect(conf(id), reason).toBe('conf r1\n');
      }
    });

    test("7. below the floor: after r1 -> r2 completed, r1 by anything but that rollout's compensation or revert is refused BELOW_FLOOR; the device stays at r2", async () => {
      const ids = DEVICES.floor;
      const [id] = ids;
      seed(id, 1);
      const done = await rollout('floor', ids, 1, 2, { revertWindow: '1h' });
      expect(done.status.state).toBe('completed');
      expect(floor(id)).toMatchObject({ revision: 2, from: 1, run: done.runId });
      // A "revert" naming another run of the same rollout id: not the rollout that raised the floor.
      const other = await forged(
        revertInput('floor-other-run', ids, {
          rolloutId: done.rolloutId,
          runId: '00000000-0000-4000-8000-000000000000',
          closedAt: await closedAt(done),
        }),
      );
      expect(device(other, id)).toMatchObject({ state: 'failed', reason: expect.stringContaining('BELOW_FLOOR') });
      // The device asked directly (no rollout at all: SSH transport / a twin desire).
      const outside = await backend.applyOutsideRollout(ctx, id, inputFor('floor-outside', ids, 1, 2).rollbackSteps);
      expect(outside).toBe('BELOW_FLOOR');
      expect(runs(id, 1), 'r1 never ran').toBe(0);
      expect(marker(id)).toBe(2);
      expect(conf(id)).toBe('conf r2\n');
      expect(floor(id)).toMatchObject({ revision: 2, from: 1, run: done.runId });
    });

    test('8. a rollback only by its own rollout: a failed health gate rolls the device back to r1 (its own compensation); the floor steps down to r1 with no way further back', async () => {
      const [id] = DEVICES.rollback;
      seed(id, 1);
      writeFileSync(file(id, 'unhealthy'), '');
      // A manual gate holds the rollout after the apply: the floor it raised is on the device then.
      const started = await start('rollback', DEVICES.rollback, 1, 2, {
        phases: [{ bulk: 'remainder', gate: 'manual', healthGate: ['check: conf-ok'] }],
      });
      const raised = await until(
        'the floor raised by the apply',
        async () => (floor(id)?.revision === 2 ? floor(id)! : undefined),
        180_000,
      );
      expect(raised).toMatchObject({ revision: 2, from: 1, rollout: started.rolloutId, run: started.runId });
      const approve = await cli(['approve', started.rolloutId, ...ctx.temporalArgs()]);
      expect(approve.code, `${approve.stdout}\n${approve.stderr}`).toBe(0);
      const r = { ...started, status: await result(started) };
      expect(r.status.state).toBe('rolled-back');
      expect(device(r.status, id).state).toBe('rolled-back');
      expect(runs(id, 2)).toBe(1);
      expect(runs(id, 1), 'the compensation ran r1 once').toBe(1);
      expect(marker(id)).toBe(1);
      expect(conf(id)).toBe('conf r1\n');
      expect(floor(id), 'the floor it raised, stepped down for good').toMatchObject({
        revision: 1,
        from: 1,
        wayBack: 0,
        run: started.runId,
      });
      rmSync(file(id, 'unhealthy'));
    });

    test('9. a revert inside its window brings the device back to r1; after the window `wavegate revert` exits 2, and forced with a forged close time, the device refuses BELOW_FLOOR', async () => {
      const ids = DEVICES.revert;
      const [id] = ids;
      seed(id, 1);
      const inside = await rollout('revert-inside', ids, 1, 2, { revertWindow: '1h' });
      expect(inside.status.state).toBe('completed');
      expect(marker(id)).toBe(2);
      const revert = await cli([
        'revert',
        inside.rolloutId,
        '--profiles',
        root,
        '--wait',
        '--interval',
        '300',
        ...ctx.temporalArgs(),
      ]);
      expect(revert.code, `${revert.stdout}\n${revert.stderr}`).toBe(0);
      expect(marker(id)).toBe(1);
      expect(conf(id)).toBe('conf r1\n');
      expect(runs(id, 1), 'the revert ran r1 once').toBe(1);

      const late = await rollout('revert-late', ids, 1, 2, { revertWindow: '2s' });
      expect(late.status.state).toBe('completed');
      expect(marker(id)).toBe(2);
      const closed = await closedAt(late);
      await until('the 2 s revert window to close', async () => (Date.now() > closed + 3_000 ? true : undefined));
      const refused = await cli(['revert', late.rolloutId, '--profiles', root, ...ctx.temporalArgs()]);
      expect(refused.code, `${refused.stdout}\n${refused.stderr}`).toBe(2);
      expect(refused.stderr).toMatch(/revert window/);
      expect(marker(id)).toBe(2);
      // Forced past the CLI: the revert's own input, for this very rollout and run, after its window, saying
      // the rollout closed just now. The worker reads the close time from Temporal, not from the input.
      const forcedStatus = await forged(
        revertInput('revert-forced', ids, { rolloutId: late.rolloutId, runId: late.runId, closedAt: Date.now() }),
      );
      expect(device(forcedStatus, id)).toMatchObject({
        state: 'failed',
        reason: expect.stringContaining('BELOW_FLOOR'),
      });
      expect(runs(id, 1), 'r1 did not run again').toBe(1);
      expect(marker(id)).toBe(2);
      expect(conf(id)).toBe('conf r2\n');
    });

    test("10. a named health check (`check: conf-ok`, signed) passes on a healthy device and fails the gate when it fails there; the failed rollout's compensation leaves the device at r2 with no way back", async () => {
      const ids = DEVICES.checks;
      const [id] = ids;
      seed(id, 1);
      const gate = { phases: [{ bulk: 'remainder', gate: '1s', healthGate: ['check: conf-ok'] }] };
      const healthy = await rollout('checks-pass', ids, 1, 2, gate);
      expect(healthy.status.state).toBe('completed');
      expect(healthy.status.phases[0]).toMatchObject({ gateOutcome: 'pass' });
      expect((healthy.status.phases[0]!.evidence ?? []).join(' ')).toContain('conf-ok');
      const floorAtR2 = read(id, `.wavegate/profiles/${PROFILE}/floor`);
      expect(parseFloor(floorAtR2 ?? '')).toMatchObject({ revision: 2, run: healthy.runId });

      writeFileSync(file(id, 'unhealthy'), '');
      const failing = await rollout('checks-fail', ids, 2, 3, gate);
      expect(failing.status.state).toBe('rolled-back');
      expect(failing.status.phases[0]).toMatchObject({ gateOutcome: 'fail' });
      expect((failing.status.phases[0]!.evidence ?? []).join(' ')).toContain('conf-ok');
      expect(runs(id, 3)).toBe(1);
      expect(runs(id, 2), "r2 applied by the first rollout, then again by the second one's compensation").toBe(2);
      expect(marker(id)).toBe(2);
      // Back at r2 by the second rollout's compensation, with no way further back to r1.
      expect(floor(id), 'the floor stepped down to r2 for good').toMatchObject({
        revision: 2,
        from: 2,
        wayBack: 0,
        run: failing.runId,
      });
      rmSync(file(id, 'unhealthy'));
    });

    test('11. re-verify: a broken fact reads not applied on the board; restored, applied again', async () => {
      const ids = DEVICES.reverify;
      const [id] = ids;
      seed(id, 1);
      const r = await rollout('reverify', ids, 1, 2);
      expect(r.status.state).toBe('completed');
      expect((await board('reverify', ids, 2)).rows[id]).toMatchObject({ state: 'applied' });
      writeFileSync(file(id, 'etc/conf'), 'hand-edited\n');
      const broken = await board('reverify', ids, 2);
      expect(broken.code).toBe(1);
      expect(broken.rows[id]!.state).not.toBe('applied');
      writeFileSync(file(id, 'etc/conf'), 'conf r2\n');
      const restored = await board('reverify', ids, 2);
      expect(restored.code).toBe(0);
      expect(restored.rows[id]).toMatchObject({ state: 'applied' });
      expect(allRuns(id), 'reading never applies').toBe(1);
    });

    test('12. killed mid-apply (SSH: the worker; agent: the agent) and restarted: the apply ran exactly once and the device is applied', async () => {
      const ids = DEVICES.crash;
      const [id] = ids;
      seed(id, 1);
      writeFileSync(file(id, 'slow'), '8');
      const started = await start('crash', ids, 1, 2);
      await until('the slow apply running', async () => (runs(id, 2) > 0 ? true : undefined), 180_000);
      await backend.crashAndRestart(ctx, id);
      const status = await result(started);
      rmSync(file(id, 'slow'));
      expect(status.state).toBe('completed');
      expect(device(status, id).state).toBe('applied');
      expect(runs(id, 2), 'one apply, reattached after the crash').toBe(1);
      expect(marker(id)).toBe(2);
      expect(conf(id)).toBe('conf r2\n');
    });

    /** Steps that go back to `to` naming a compensation of rollout `r` (what anyone who knows its names can send). */
    const compensationOf = (r: { rolloutId: string; runId: string }, to: number): RevisionSteps => ({
      ...inputFor(`forged-${to}`, DEVICES.chain, to, to + 1).rollbackSteps,
      floor: {
        rollout: r.rolloutId,
        run: r.runId,
        below: { kind: 'compensation', rollout: r.rolloutId, run: r.runId },
      },
    });

    test('13. a forged chain of compensations: the device goes back one step, once, and never below the floor it stepped down to; its floor is never removed', async () => {
      const ids = DEVICES.chain;
      const [id] = ids;
      seed(id, 1);
      const first = await rollout('chain-1-2', ids, 1, 2, { revertWindow: '1h' });
      expect(first.status.state).toBe('completed');
      const second = await rollout('chain-2-3', ids, 2, 3, { revertWindow: '1h' });
      expect(second.status.state).toBe('completed');
      expect(floor(id)).toMatchObject({ revision: 3, from: 2, run: second.runId });
      // The one way back the device's floor holds (r3 -> r2, named by the run that raised it): taken once.
      expect(await backend.applyOutsideRollout(ctx, id, compensationOf(second, 2))).toBe('applied');
      expect(marker(id)).toBe(2);
      expect(conf(id)).toBe('conf r2\n');
      expect(floor(id)).toMatchObject({ revision: 2, from: 2, wayBack: 0 });
      // Then every name a request could give: the rollout that raised r2 before, the same run again, a revert.
      expect(await backend.applyOutsideRollout(ctx, id, compensationOf(first, 1))).toBe('BELOW_FLOOR');
      expect(await backend.applyOutsideRollout(ctx, id, compensationOf(second, 1))).toBe('BELOW_FLOOR');
      const revertFirst = compensationOf(first, 1);
      revertFirst.floor = {
        ...revertFirst.floor!,
        below: { kind: 'revert', rollout: first.rolloutId, run: first.runId, closedAt: Date.now() },
      };
      expect(await backend.applyOutsideRollout(ctx, id, revertFirst)).toBe('BELOW_FLOOR');
      expect(runs(id, 1), 'r1 never ran').toBe(0);
      expect(marker(id)).toBe(2);
      expect(conf(id)).toBe('conf r2\n');
      expect(floor(id), 'the floor is still there').toMatchObject({ revision: 2, from: 2 });
    });

    test("14. the way back is the device's: r7 signs 3 s; its own compensation is refused BELOW_FLOOR once 3 s have passed on the device since it confirmed r7", async () => {
      const ids = DEVICES.wayBack;
      const [id] = ids;
      seed(id, 1);
      const done = await rollout('wayback', ids, 1, 7, { revertWindow: '1h' });
      expect(done.status.state).toBe('completed');
      const raised = floor(id)!;
      expect(raised).toMatchObject({ revision: 7, from: 1, wayBack: 3_000, run: done.runId });
      await until('3 s past the confirmation', async () => (Date.now() > raised.at! + 4_000 ? true : undefined));
      const back: RevisionSteps = {
        ...inputFor('wayback-back', ids, 1, 7).rollbackSteps,
        floor: {
          rollout: done.rolloutId,
          run: done.runId,
          below: { kind: 'compensation', rollout: done.rolloutId, run: done.runId },
        },
      };
      expect(await backend.applyOutsideRollout(ctx, id, back)).toBe('BELOW_FLOOR');
      expect(runs(id, 1)).toBe(0);
      expect(marker(id)).toBe(7);
    });

    /** The receipt each device's `devices.outcome` entry of an apply carries, checked as an auditor would. */
    function receiptsOf(rolloutId: string): Map<string, Receipt> {
      const out = new Map<string, Receipt>();
      for (const r of readAuditFile(join(scratch.dir, 'audit'), rolloutId)) {
        const evidence = r.evidence as { mode?: string; devices?: Array<Record<string, unknown>> } | null;
        if (r.event !== 'devices.outcome' || evidence?.mode !== 'apply') continue;
        for (const entry of evidence.devices ?? []) {
          const id = entry.id as string;
          const parsed = parseReceipt(entry.receipt);
          expect(parsed.ok, `${id}: ${JSON.stringify(parsed)}`).toBe(true);
          if (!parsed.ok) continue;
          const receipt = parsed.receipt;
          const key = backend.receiptKey(id);
          expect(receipt.fields.keyKind, id).toBe(key.kind);
          expect(receiptSignatureValid(receipt, key.publicKey), `${id}: signed by its enrolled key`).toBe(true);
          // The nonce is the request's: derived from the run Temporal made and the apply activity that asked.
          const nonce = receiptNonce({ rollout: rolloutId, run: r.runId, activity: String(entry.request), device: id });
          expect(receipt.fields, id).toMatchObject({ device: id, rollout: rolloutId, profile: PROFILE, nonce });
          expect(receipt.fields.phase, id).toBe(entry.phaseIndex);
          out.set(id, receipt);
        }
      }
      return out;
    }

    test("15. receipts: every answer carries the device's own receipt (its enrolled key, the request's nonce, its counter up by one, chained to its last); requireReceipts counts the proven", async () => {
      const ids = DEVICES.receipts;
      const [a, b] = ids;
      for (const id of ids) seed(id, 1);
      const first = await rollout('receipts', ids, 1, 2, { requireReceipts: true });
      expect(first.status.state).toBe('completed');
      const got = receiptsOf(first.rolloutId);
      for (const id of ids) {
        expect(device(first.status, id), id).toMatchObject({ state: 'applied', proven: true });
        // The device's first receipt: counter 1, chained to nothing before it.
        expect(got.get(id)!.fields, id).toMatchObject({
          counter: 1,
          prev: RECEIPT_GENESIS,
          revision: 2,
          result: 'applied',
          phase: 0,
        });
        expect(got.get(id)!.fields.observed, `${id}: what its verify read is the requested revision`).toBe(
          got.get(id)!.fields.requested,
        );
      }
      // The next answer of each device: its counter up by one, chained to the receipt before it.
      const second = await rollout('receipts-2', [a], 2, 3, { requireReceipts: true });
      expect(device(second.status, a)).toMatchObject({ state: 'applied', proven: true });
      const next = receiptsOf(second.rolloutId).get(a)!;
      expect(next.fields).toMatchObject({ counter: 2, prev: receiptHash(got.get(a)!), revision: 3, result: 'applied' });
      // A failure the device saw is its word too: the apply that exits 3 is a receipt saying failed.
      const failing = await rollout('receipts-fail', [b], 2, 4);
      expect(device(failing.status, b)).toMatchObject({ state: 'failed', proven: true });
      const failed = receiptsOf(failing.rolloutId).get(b)!;
      expect(failed.fields).toMatchObject({
        counter: 2,
        prev: receiptHash(got.get(b)!),
        revision: 4,
        result: 'failed',
      });
      expect(failed.fields.observed, 'no verify of r4 passed').toBeNull();
    });

    /** The profile's signed revocation list, version `version`, signed by keys A and C (2 of 3): `revocations.json`. */
    function writeRevocations(version: number, revisions: { revision: number; reason: string }[], keys: KeyPair[]) {
      const content = {
        type: REVOCATIONS_TYPE,
        profile: PROFILE,
        version,
        revisions,
        keys: keys.map((k) => ({ kid: k.kid, reason: 'the key left with its holder' })),
        issuedAt: new Date().toISOString(),
      };
      const envelope = signDocument(content, [profile.keys[0]!, profile.keys[2]!]);
      writeFileSync(join(root, PROFILE, 'revocations.json'), `${JSON.stringify(envelope)}\n`);
      return envelope;
    }

    test("16. revocation by k-of-n: once the signers' list revokes r2, then key B, the device refuses r2 (REVOKED) and anything B's signature would carry (REVOKED_KEY), asked by a rollout or directly; nothing runs; r3 signed by A and C still applies", async () => {
      const ids = DEVICES.revoked;
      const [id] = ids;
      seed(id, 1);
      // The inputs as a control plane would forge them: made before the lists, which intake itself would refuse.
      const r2 = inputFor('revoked-r2', ids, 1, 2);
      const r3ByB = inputFor('revoked-key', ids, 1, 3);
      const byAC = (n: number) => profile.sign(profile.revision(n), { signers: [profile.keys[0]!, profile.keys[2]!] });
      const r3 = inputFor('revoked-r3-by-ac', ids, 1, 3);
      const r3ByAC: RolloutInput = {
        ...r3,
        steps: { ...r3.steps, envelope: byAC(3) },
        ...(r3.rollbackSteps ? { rollbackSteps: { ...r3.rollbackSteps, envelope: byAC(1) } } : {}),
      };
      writeRevocations(1, [{ revision: 2, reason: 'r2 breaks the conf parser' }], []);
      // Asked directly (SSH: the transport with the worker's profiles; agent: a desire, with the list in its sync).
      expect(await backend.applyOutsideRollout(ctx, id, r2.steps)).toBe('REVOKED');
      const byRollout = await forged(r2);
      expect(device(byRollout, id)).toMatchObject({
        state: 'failed',
        reason: expect.stringContaining('EnvelopeRejected (REVOKED)'),
      });
      expect(allRuns(id), 'r2 never ran').toBe(0);
      // Key B revoked (list v2 keeps r2 revoked): r3 signed by A and B no longer makes the threshold.
      writeRevocations(2, [{ revision: 2, reason: 'r2 breaks the conf parser' }], [profile.keys[1]!]);
      expect(await backend.applyOutsideRollout(ctx, id, r3ByB.steps)).toBe('REVOKED_KEY');
      const byB = await forged(r3ByB);
      expect(device(byB, id)).toMatchObject({
        state: 'failed',
        reason: expect.stringContaining('EnvelopeRejected (REVOKED_KEY)'),
      });
      expect(allRuns(id), 'nothing signed by B ran').toBe(0);
      expect(marker(id)).toBe(1);
      // The same r3 signed by A and C: applied, once.
      const done = await forged(r3ByAC);
      expect(device(done, id)).toMatchObject({ state: 'applied' });
      expect(runs(id, 3)).toBe(1);
      expect(marker(id)).toBe(3);
      // Lifted the only way there is, a newer list by the same threshold (v3, empty; deleting the file is refused
      // once a list was verified): the cases after this one start from nothing revoked.
      writeRevocations(3, [], []);
    });

    function writeJson(path: string, value: unknown) {
      writeFileSync(path, `${JSON.stringify(value)}\n`);
    }
    /** The versions of the profile's trust as a verifier in this process walks them (and marks them held). */
    function loadProfileTrustState(): { root: number; revocations: number } {
      const state = profileTrustState(profileDir(root, PROFILE));
      return { root: state?.trust.root?.version ?? 0, revocations: state?.revocations?.content.version ?? 0 };
    }

    /** Trust root version `version` of the profile, written to `root/<version>.json`: `pins` at threshold 2. */
    function writeRoot(version: number, pins: KeyPair[], signers: KeyPair[], removes: KeyPair[] = []) {
      const content = {
        type: ROOT_TYPE,
        profile: PROFILE,
        version,
        threshold: 2,
        pins: pins.map((k) => pinOf(k)),
        issuedAt: new Date().toISOString(),
        ...(removes.length ? { removes: removes.map((k) => k.kid) } : {}),
      };
      mkdirSync(join(root, PROFILE, 'root'), { recursive: true });
      writeFileSync(
        join(root, PROFILE, 'root', `${version}.json`),
        `${JSON.stringify(signDocument(content, signers))}\n`,
      );
    }

    test('17. a trust root that rotates: v1 (A, B, C) signed from trust.yaml, v2 replacing B by D signed by a threshold of v1 and of its own; the device then applies r3 signed by A and D, and refuses r3 signed by B and D (B no longer pinned)', async () => {
      const ids = DEVICES.rotated;
      const [id] = ids;
      seed(id, 1);
      const [a, b, c] = profile.keys as [KeyPair, KeyPair, KeyPair];
      const d = keyPairFromSeed(randomBytes(32));
      const by = (name: string, signers: KeyPair[]): RolloutInput => {
        const input = inputFor(name, ids, 1, 3);
        const sign = (n: number) => profile.sign(profile.revision(n), { signers });
        return {
          ...input,
          steps: { ...input.steps, envelope: sign(3) },
          ...(input.rollbackSteps ? { rollbackSteps: { ...input.rollbackSteps, envelope: sign(1) } } : {}),
        };
      };
      // Made before the rotation, as a forged control plane would send them (intake refuses both once D is in).
      const byBD = by('rotated-by-bd', [b, d]);
      const byAD = by('rotated-by-ad', [a, d]);
      writeRoot(1, [a, b, c], [a, c]);
      writeRoot(2, [a, c, d], [a, c, d], [b]);
      // Asked directly (SSH: the worker's profiles; agent: the roots reach it with its sync).
      expect(await backend.applyOutsideRollout(ctx, id, byBD.steps)).toBe('BELOW_THRESHOLD');
      const refused = await forged(byBD);
      expect(device(refused, id)).toMatchObject({
        state: 'failed',
        reason: expect.stringContaining('EnvelopeRejected (BELOW_THRESHOLD)'),
      });
      expect(allRuns(id), 'nothing signed by B ran').toBe(0);
      const done = await forged(byAD);
      expect(device(done, id)).toMatchObject({ state: 'applied' });
      expect(runs(id, 3)).toBe(1);
      expect(marker(id)).toBe(3);
    });

    test("18. forged trust metadata beside the profile fails closed: a root signed below threshold, a root skipping a version, another profile's root, an oversized root, a revocation list rolled back; each refused and named, nothing runs; the genuine metadata back, the device applies", async () => {
      const ids = DEVICES.forgedTrust;
      const [id] = ids;
      seed(id, 1);
      const [a, , c] = profile.keys as [KeyPair, KeyPair, KeyPair];
      const rootDir = join(root, PROFILE, 'root');
      // Root v2 (A, C, D) and list v3 stand from cases 16-17 when the suite runs whole; alone, make them here.
      const held = () => loadProfileTrustState();
      if (!existsSync(join(rootDir, '2.json'))) {
        const d = keyPairFromSeed(randomBytes(32));
        writeRoot(1, [a, profile.keys[1]!, c], [a, c]);
        writeRoot(2, [a, c, d], [a, c, d], [profile.keys[1]!]);
      }
      const listV4 = writeRevocations(4, [], []);
      expect(held()).toMatchObject({ root: 2, revocations: 4 });
      // The signers re-sign r1 and r2 after the rotation (B is gone): what intake and the device verify from now on.
      for (const n of [1, 2])
        writeJson(
          join(root, PROFILE, 'envelopes', `${n}.json`),
          profile.sign(profile.revision(n), { signers: [a, c] }),
        );
      const signedByAC = (name: string): RolloutInput => inputFor(name, ids, 1, 2);
      const root3 = (over: Record<string, unknown>, signers: KeyPair[]) =>
        signDocument(
          {
            type: ROOT_TYPE,
            profile: PROFILE,
            version: 3,
            threshold: 2,
            pins: [a, c].map((k) => pinOf(k)),
            issuedAt: new Date().toISOString(),
            ...over,
          },
          signers,
        );
      const listV2 = signDocument(
        {
          type: REVOCATIONS_TYPE,
          profile: PROFILE,
          version: 2,
          revisions: [],
          keys: [],
          issuedAt: new Date().toISOString(),
        },
        [a, c],
      );
      const attacks: Array<[string, string, () => void, () => void]> = [
        [
          'below threshold',
          'BELOW_THRESHOLD',
          () => writeJson(join(rootDir, '3.json'), root3({}, [a])),
          () => rmSync(join(rootDir, '3.json')),
        ],
        [
          'skipping v3',
          'ROOT_GAP',
          () => writeJson(join(rootDir, '4.json'), root3({ version: 4 }, [a, c])),
          () => rmSync(join(rootDir, '4.json')),
        ],
        [
          "another profile's",
          'WRONG_SUBJECT',
          () => writeJson(join(rootDir, '3.json'), root3({ profile: 'other' }, [a, c])),
          () => rmSync(join(rootDir, '3.json')),
        ],
        [
          'oversized',
          'bytes',
          () => writeFileSync(join(rootDir, '3.json'), ' '.repeat(2 * 1024 * 1024)),
          () => rmSync(join(rootDir, '3.json')),
        ],
        [
          'list rolled back',
          'METADATA_ROLLBACK',
          () => writeJson(join(root, PROFILE, 'revocations.json'), listV2),
          () => writeJson(join(root, PROFILE, 'revocations.json'), listV4),
        ],
      ];
      for (const [what, named, forge, restore] of attacks) {
        const input = signedByAC(`forged-trust-${what.replace(/[^a-z0-9]+/g, '-')}`);
        forge();
        const status = await forged(input);
        expect(device(status, id), what).toMatchObject({ state: 'failed', reason: expect.stringContaining(named) });
        expect(allRuns(id), `${what}: nothing ran`).toBe(0);
        restore();
      }
      expect(held()).toMatchObject({ root: 2, revocations: 4 });
      const done = await forged(signedByAC('forged-trust-restored'));
      expect(device(done, id)).toMatchObject({ state: 'applied' });
      expect(runs(id, 2)).toBe(1);
    });
  });
}

/** `wavegate worker` as a child process of the suite: SIGKILLed and restarted by the crash case. */
function workerProcess(args: string[]): WorkerProcess & { stop(): Promise<void> } {
  let child: ChildProcess | undefined;
  let out = () => '';
  const gone = async (signal: NodeJS.Signals) => {
    const c = child;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    const exited = new Promise((r) => c.once('exit', r));
    c.kill(signal);
    const timer = setTimeout(() => c.kill('SIGKILL'), 15_000);
    await exited;
    clearTimeout(timer);
  };
  return {
    kill: () => gone('SIGKILL'),
    async restart() {
      await gone('SIGKILL');
      const started = await spawnCliUntil(['worker', ...args], /polling .*task queue/, 180_000);
      child = started.child;
      out = started.output;
    },
    output: () => out(),
    stop: () => gone('SIGTERM'),
  };
}
