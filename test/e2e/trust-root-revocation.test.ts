import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { beforeAll, describe, expect, it } from 'vitest';
import type { RolloutInput } from '../../core/rollout/input';
import type { RolloutStatus } from '../../core/rollout/status';
import { cosignEnvelope, keyPairFromSeed, pinOf, secretKeyFile, type Envelope, type KeyPair } from '../../core/signing';
import { prepareRollout } from '../../intake/prepare';
import { demoDevices, type Fleet } from '../../sim';
import { runCli, type CliRun } from '../support/cli';
import { realRollouts } from '../support/real-rollouts';
import { writeSignedProfile, type SignedProfile } from '../support/signed-profile';

/**
 * Issue 45 items 1-2 end to end, the operator's side: a real Temporal dev server, a real worker reading the same
 * profiles root as the CLI, simulated devices over real SSH, and the real `wavegate` command.
 *
 *   1. a root rotation replacing a signer: trust.yaml (A, B; 2) -> `trust init` -> v1 -> `trust rotate/cosign/publish`
 *      -> v2 (A, C; 2), signed by A, B (v1's) and A, C (its own). Then a revision signed by A and C is accepted by
 *      plan, start and the worker; one signed by A and B only is refused by plan and by the worker (B is not pinned).
 *   2. `trust revoke` of r2 (A and C): plan, start, start --registry, register and converge refuse it naming REVOKED;
 *      the worker refuses a forged rollout of it (EnvelopeRejected (REVOKED), nothing runs); `fleet status` lists
 *      the devices on r2 as revoked and counts them; `converge -f <spec to r3>` rolls them forward.
 */
const real = realRollouts('trust-root-revocation', {
  profilesRoot: () => ROOT,
  prepare: () => {
    profile = writeSignedProfile({
      root: ROOT,
      name: PROFILE,
      revisions: [1, 2, 3, 4].map((n) => ({
        revision: n,
        apply: `mkdir -p "$HOME/etc" && echo r${n} >> "$HOME/etc/${PROFILE}.runs" && install -m 0644 "$WAVEGATE_STAGING/conf" "$HOME/etc/${PROFILE}.conf"`,
        verify: `grep -qx '${PROFILE} revision ${n}' "$HOME/etc/${PROFILE}.conf"`,
        payload: { conf: `${PROFILE} revision ${n}\n` },
      })),
      now: NOW,
    });
    [A, B] = profile.keys as [KeyPair, KeyPair];
    for (const [name, pair] of [
      ['a', A],
      ['b', B],
      ['c', C],
    ] as const) {
      writeFileSync(keyPath(name), JSON.stringify(secretKeyFile(pair)), { mode: 0o600 });
      writeFileSync(`${keyPath(name)}.pub.yaml`, stringify(pinOf(pair, name)));
    }
  },
});
const PROFILE = 'trs';
const NOW = Date.now();
const ROOT = join(real.dir, 'profiles'); // the worker's and the CLI's
const C = keyPairFromSeed(randomBytes(32));
let A: KeyPair;
let B: KeyPair;
let profile: SignedProfile;
const keyPath = (name: string) => join(real.dir, `${name}.key`);
const OFFLINE = 'edge-04';

/** `wavegate trust …`: no Temporal flags (it talks to none). */
const trust = (...args: string[]) =>
  runCli(['trust', ...args, '--profile', PROFILE, '--profiles', ROOT], { env: { WAVEGATE_PROFILES: '' } });
/** Any other command, against this file's server and worker, with this profiles root. */
const wg = (args: string[]): Promise<CliRun> => real.cli([...args, '--profiles', ROOT], 240_000);
const refusedFor = (run: CliRun, reason: string) => {
  expect(run.code, run.stdout + run.stderr).toBe(2);
  expect(run.stderr).toContain(reason);
};

function spec(from: number, to: number): string {
  const path = join(real.dir, `spec-${from}-${to}.yaml`);
  writeFileSync(
    path,
    stringify({
      rollout: {
        profile: PROFILE,
        fromRevision: from,
        toRevision: to,
        disruptionBudget: { 'pool-a': 1, 'pool-b': 1 },
        gate: '0s',
        applyTimeout: '2m',
        // A device's refusal is the outcome looked at, not a reason to hold the rollout for an operator.
        maxFailureRatio: 1,
        phases: [{ bulk: 'remainder' }],
      },
    }),
  );
  return path;
}

const envelopePath = (n: number) => join(ROOT, PROFILE, 'envelopes', `${n}.json`);
const writeEnvelope = (n: number, envelope: Envelope) =>
  writeFileSync(envelopePath(n), `${JSON.stringify(envelope, null, 2)}\n`);
const readEnvelope = (n: number) => JSON.parse(readFileSync(envelopePath(n), 'utf8')) as Envelope;

let fleet: Fleet;
let inventory = '';
const home = (id: string) => fleet.device(id).sandbox;
const runs = (id: string) => {
  const path = join(home(id), 'etc', `${PROFILE}.runs`);
  return existsSync(path) ? readFileSync(path, 'utf8').split('\n').filter(Boolean) : [];
};
const marker = (id: string) => {
  const path = join(home(id), '.wavegate', 'profiles', PROFILE, 'revision');
  return existsSync(path) ? Number(readFileSync(path, 'utf8').trim()) : null;
};

/** The rollout input intake makes now, with its own id, over `devices`: what a forged control plane could send later. */
function inputNow(from: number, to: number, name: string, devices: string[]): RolloutInput {
  const input = prepareRollout({
    specPath: spec(from, to),
    inventoryPath: inventory,
    profilesRoot: ROOT,
    startedBy: 'test',
  });
  return { ...input, rolloutId: `rollout:${PROFILE}:${name}`, onlyDevices: devices };
}

/** Start an input straight on the worker (no intake) and wait for its end. */
async function forged(input: RolloutInput): Promise<RolloutStatus> {
  return (await (await real.start(input)).result()) as RolloutStatus;
}

beforeAll(async () => {
  // Made outside a test: the devices live through both.
  ({ fleet, inventoryPath: inventory } = await real.fleet(demoDevices(4), { 'pool-a': 1, 'pool-b': 1 }));
});

describe('a trust root rotated with a signer replaced, then a revision revoked, through the wavegate CLI', () => {
  it('rotation: A,C-signed revisions are accepted by plan, start and the worker; A,B-only is refused by plan and by the worker', async () => {
    // Made under trust.yaml (A, B), valid then; sent after the rotation as a forged control plane would.
    const r4ByAB = inputNow(1, 4, 'forged-r4', ['edge-01']);

    const init = await trust('init', '--key', keyPath('a'), '--key', keyPath('b'), '--note', 'from trust.yaml');
    expect(init.code, init.stderr).toBe(0);
    writeFileSync(join(real.dir, 'next.yaml'), stringify({ threshold: 2, pins: [pinOf(A, 'a'), pinOf(C, 'c')] }));
    const draft = join(real.dir, 'root-v2.json');
    const rotate = await trust(
      'rotate',
      '--trust',
      join(real.dir, 'next.yaml'),
      '--key',
      keyPath('a'),
      '--key',
      keyPath('b'),
      '--out',
      draft,
      '--note',
      'b leaves',
    );
    expect(rotate.code, rotate.stderr).toBe(0);
    expect(rotate.stdout).toContain("signed: 2 of 2 of v1's keys, 1 of 2 of its own");
    refusedFor(await trust('publish', draft), "2 of 2 of v1's keys, 1 of 2 of its own");
    const cosign = await runCli(['trust', 'cosign', draft, '--key', keyPath('c'), '--profiles', ROOT]);
    expect(cosign.code, cosign.stderr).toBe(0);
    const publish = await trust('publish', draft);
    expect(publish.code, publish.stderr).toBe(0);
    expect(publish.stdout).toContain(`${PROFILE} is now trusted by root v2`);

    // After a signer leaves, what stays in use is signed again by the new one (r1, r2: A, B and now C); r3 is
    // signed by A and C only; r4 stays signed by A and B only.
    for (const n of [1, 2]) writeEnvelope(n, cosignEnvelope(readEnvelope(n), C));
    writeEnvelope(3, profile.sign(profile.revision(3), { signers: [A, C], now: NOW }));

    refusedFor(await wg(['plan', '-f', spec(1, 4), '--inventory', inventory]), 'BELOW_THRESHOLD');
    const planR3 = await wg(['plan', '-f', spec(1, 3), '--inventory', inventory]);
    expect(planR3.code, planR3.stdout + planR3.stderr).toBe(0);
    const byAB = await forged(r4ByAB);
    expect(byAB.devices.find((d) => d.id === 'edge-01')).toMatchObject({
      state: 'failed',
      reason: expect.stringContaining('EnvelopeRejected (BELOW_THRESHOLD)'),
    });
    expect(runs('edge-01'), 'nothing signed by A and B alone ran').toEqual([]);
    // The operator drops what no pinned threshold signs any more (the board would refuse to read it).
    rmSync(envelopePath(4));
    rmSync(join(ROOT, PROFILE, 'revisions', '4.yaml'));

    // r2 to every device but one, offline through the rollout: it stays behind.
    await fleet.setFaults(OFFLINE, { offline: true });
    const start = await wg(['start', '-f', spec(1, 2), '--inventory', inventory, '--wait', '--interval', '300']);
    expect(start.code, start.stdout + start.stderr).toBe(1); // completed, one device skipped
    expect(start.stdout).toContain('completed with pending work: 1 skipped');
    await fleet.setFaults(OFFLINE, {});
    for (const id of ['edge-01', 'edge-02', 'edge-03']) expect(marker(id)).toBe(2);
    expect(marker(OFFLINE)).toBeNull();
    // The registry, created with the pins of now (root v2's), holds r1 and r2.
    for (const n of [1, 2]) {
      const reg = await wg(['register', envelopePath(n), '--trust', join(real.dir, 'next.yaml'), '--by', 'test']);
      expect(reg.code, reg.stderr).toBe(0);
    }
  }, 300_000);

  it('revocation: r2 is refused by plan, start, start --registry, register, converge and the worker; fleet status lists its devices; converge to r3 rolls them forward', async () => {
    // Made before the revocation, valid then: the worker must refuse it at apply.
    const r2ToOffline = inputNow(1, 2, 'forged-r2', [OFFLINE]);
    const revoke = await trust(
      'revoke',
      '--revision',
      '2',
      '--reason',
      'r2 corrupts the conf',
      '--key',
      keyPath('a'),
      '--key',
      keyPath('c'),
    );
    expect(revoke.code, revoke.stderr).toBe(0);
    const status = await trust('status', '--json');
    expect(JSON.parse(status.stdout)).toMatchObject({
      root: { version: 2 },
      revocations: { version: 1, revisions: [{ revision: 2, reason: 'r2 corrupts the conf' }] },
    });

    const before = Object.fromEntries(fleet.devices.map((d) => [d.id, runs(d.id).length]));
    const [plan, start, fromRegistry, register, converge] = await Promise.all([
      wg(['plan', '-f', spec(1, 2), '--inventory', inventory]),
      wg(['start', '-f', spec(1, 2), '--inventory', inventory]),
      wg(['start', '-f', spec(1, 2), '--inventory', inventory, '--registry']),
      wg(['register', envelopePath(2), '--trust', join(real.dir, 'next.yaml'), '--by', 'test']),
      wg(['converge', '--profile', PROFILE, '-f', spec(1, 2), '--inventory', inventory]),
    ]);
    for (const run of [plan, start, fromRegistry, register, converge]) {
      refusedFor(run, 'REVOKED');
      expect(run.stderr).toContain('r2 corrupts the conf');
    }
    const forgedR2 = await forged(r2ToOffline);
    expect(forgedR2.devices.find((d) => d.id === OFFLINE)).toMatchObject({
      state: 'failed',
      reason: expect.stringContaining('EnvelopeRejected (REVOKED)'),
    });
    expect(Object.fromEntries(fleet.devices.map((d) => [d.id, runs(d.id).length])), 'nothing ran').toEqual(before);

    // The board: not the revoked r2 but the newest revision its signers stand behind, r2's devices listed and counted.
    const board = await wg(['fleet', 'status', '--profile', PROFILE, '--inventory', inventory]);
    expect(board.code, board.stdout + board.stderr).toBe(1);
    expect(board.stdout).toMatch(
      /checking r3: newest signed; r2 \(left by rollout \S+ completed .*\) is revoked: r2 corrupts the conf/,
    );
    expect(board.stdout).toContain('  revoked     3 (on a revision its signers revoked)');
    for (const id of ['edge-01', 'edge-02', 'edge-03'])
      expect(board.stdout).toMatch(new RegExp(`${id} .*revoked: r2 \\(r2 corrupts the conf\\)`));
    expect(board.stdout).toContain('3 device(s) on revoked r2 (r2 corrupts the conf): edge-01, edge-02, edge-03');
    const json = JSON.parse(
      (await wg(['fleet', 'status', '--profile', PROFILE, '--inventory', inventory, '--json'])).stdout,
    );
    expect(json.revoked).toEqual(
      ['edge-01', 'edge-02', 'edge-03'].map((id) => ({ id, revision: 2, reason: 'r2 corrupts the conf' })),
    );

    // Forward: a spec to r3 (its way back r1, not the revoked r2) moves every device behind r3 there.
    const forward = await wg([
      'converge',
      '--profile',
      PROFILE,
      '-f',
      spec(1, 3),
      '--inventory',
      inventory,
      '--wait',
      '--interval',
      '300',
    ]);
    expect(forward.code, forward.stdout + forward.stderr).toBe(0);
    expect(forward.stdout).toContain('device(s) behind r3, rolled forward from revoked r2');
    for (const d of fleet.devices) expect(marker(d.id), d.id).toBe(3);
    expect(runs(OFFLINE)).toEqual(['r3']);
    const green = await wg(['fleet', 'status', '--profile', PROFILE, '--inventory', inventory]);
    expect(green.code, green.stdout).toBe(0);
    expect(green.stdout).toMatch(/checking r3: left by rollout rollout:trs:converge-1/);
    expect(green.stdout).not.toContain('revoked');
  }, 300_000);
});
