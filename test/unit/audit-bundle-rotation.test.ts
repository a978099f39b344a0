import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { auditFilePath } from '../../audit/file';
import { agentKeyPin } from '../../core/agent-auth';
import { makeProof } from '../../core/agent-rotation';
import { toBase64 } from '../../core/bytes';
import { keyPairFromSeed } from '../../core/signing';
import { PROOFS_TYPE } from '../../intake/rotation-proofs';
import { runCli } from '../support/cli';
import { receiptsFixture, ROLLOUT, type EntryPlan } from '../support/receipts-bundle';

/**
 * `wavegate audit export --rotation-proofs` and `audit verify --receipts` in a separate process, across an agent
 * identity key rotation: a-01 signed its first receipt with its old key, its second with the new one it proved to
 * the gateway (the gateway's <id>.proofs.json); the inventory's agentKey is the new key (after `rotation activate`).
 */
const scratch = mkdtempSync(join(tmpdir(), 'wg-audit-bundle-rotation-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
const fx = receiptsFixture(join(scratch, 'fixture'));
const ROT = 'agent-id-1';
const oldPair = fx.devices.get('a-01')!.pair!;
const newPair = keyPairFromSeed(new Uint8Array(32).fill(77));
fx.devices.set('a-01-new', {
  id: 'a-01-new',
  kind: 'agent',
  key: `ed25519:${toBase64(newPair.publicKey)}`,
  pair: newPair,
});
const again: EntryPlan = { device: 's-01', request: '22', state: 'applied', over: { result: 'already-applied' } };
const records = fx.seal(
  fx.events({
    3: [{ device: 'a-01', request: '7', state: 'applied' }],
    6: [
      { device: 'a-01', request: '21', state: 'applied', over: { result: 'already-applied' }, signer: 'a-01-new' },
      again,
    ],
  }),
);
const auditDir = join(scratch, 'audit');
const trailFile = auditFilePath(auditDir, ROLLOUT);
mkdirSync(dirname(trailFile), { recursive: true, mode: 0o700 });
writeFileSync(trailFile, records.map((r) => `${JSON.stringify(r)}\n`).join(''), { mode: 0o600 });
const inventory = join(scratch, 'inventory.yaml');
writeFileSync(
  inventory,
  stringify({
    defaults: { user: 'ops', pool: 'lab' },
    devices: [...fx.devices.values()]
      .filter((d) => d.id !== 'a-01-new')
      .map((d) =>
        d.kind === 'agent'
          ? { id: d.id, transport: 'agent', agentKey: d.id === 'a-01' ? agentKeyPin(newPair.publicKey) : d.key }
          : { id: d.id, host: `${d.id}.lab`, receipts: { key: d.key } },
      ),
  }),
);
const proofsFile = (name: string, proof = makeProof(ROT, 'a-01', oldPair, newPair)) => {
  const path = join(scratch, name, `${ROT}.proofs.json`);
  mkdirSync(dirname(path), { recursive: true });
  const at = new Date(Date.now() - 45_000).toISOString();
  const file = { type: PROOFS_TYPE, id: ROT, schedule: 'a'.repeat(64), devices: { 'a-01': { at, proof } } };
  writeFileSync(path, `${JSON.stringify(file, null, 2)}\n`);
  return path;
};

const exportTo = (bundle: string, ...more: string[]) =>
  runCli([
    'audit',
    'export',
    ROLLOUT,
    '--bundle',
    join(scratch, bundle),
    '--inventory',
    inventory,
    '--profiles',
    fx.profile.root,
    '--audit-dir',
    auditDir,
    ...more,
  ]);
// The trail is exported from a file store a checkpointing worker never wrote to: it has no checkpoints.
const verify = (bundle: string) =>
  runCli(['audit', 'verify', '--receipts', join(scratch, bundle), '--no-checkpoints-expected']);

describe('a receipts bundle across an agent identity key rotation', () => {
  it("with the rotation's proofs every receipt is proven; without them, or with a forged proof, the old-key receipt is refused, named", async () => {
    const exported = await exportTo('with', '--rotation-proofs', proofsFile('rotations'));
    expect(exported.code, exported.stderr).toBe(0);
    const enrolment = JSON.parse(readFileSync(join(scratch, 'with/enrolment.json'), 'utf8'));
    expect(enrolment.devices[0]).toMatchObject({
      id: 'a-01',
      key: agentKeyPin(newPair.publicKey),
      history: [{ rotation: ROT, proof: { old: agentKeyPin(oldPair.publicKey), new: agentKeyPin(newPair.publicKey) } }],
    });
    const ok = await verify('with');
    expect(ok.stdout).toMatch(/receipts: 7 checked for 6 devices; 7 proven, 1 claimed/);
    expect(ok.code).toBe(0);

    expect((await exportTo('without')).code).toBe(0);
    const without = await verify('without');
    expect(without.code).toBe(1);
    expect(without.stdout).toMatch(/^a-01: key: record 3: signed by agent key \S+, not the device's enrolled/m);

    const forged = makeProof(ROT, 'a-01', oldPair, newPair);
    forged.byOld = makeProof(ROT, 'a-01', newPair, oldPair).byNew;
    expect((await exportTo('forged', '--rotation-proofs', proofsFile('forged-proofs', forged))).code).toBe(0);
    const refused = await verify('forged');
    expect(refused.code).toBe(1);
    expect(refused.stdout).toMatch(
      /^a-01: enrolment: key history: rotation agent-id-1: byOld: not signed by the old key$/m,
    );
    expect(refused.stdout).toMatch(/^a-01: key: record 3: .*names but does not prove/m);
  });

  it('a --rotation-proofs file that is not a proofs file exits 2 naming it, and writes nothing', async () => {
    const path = join(scratch, 'not-proofs.json');
    writeFileSync(path, '{"devices": {}}\n');
    const run = await exportTo('never', '--rotation-proofs', path);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain(`--rotation-proofs ${path}: not a rotation's proofs file`);
    expect(existsSync(join(scratch, 'never'))).toBe(false);
  });
});
