import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { auditFilePath } from '../../audit/file';
import { readReceiptsBundle, writeReceiptsBundle } from '../../audit/bundle';
import { keyId, keyPairFromSeed } from '../../core/signing';
import { parsePinnedKey, pinnedKeyText } from '../../core/trail-checkpoints';
import { runCli } from '../support/cli';
import { LOG_NAME, receiptsFixture, ROLLOUT, WITNESS_NAME } from '../support/receipts-bundle';

/**
 * `wavegate audit export <id> --bundle` and `wavegate audit verify --receipts`, as a user runs them: a trail in the
 * file store, an inventory with the devices' enrolled keys (agentKey, receipts.key), a signed profile; the export
 * read back whole, verified by a separate process that reads nothing but the bundle.
 */
const scratch = mkdtempSync(join(tmpdir(), 'wg-audit-bundle-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
const fx = receiptsFixture(join(scratch, 'fixture'));
const records = fx.seal(fx.events());
const auditDir = join(scratch, 'audit');
const trailFile = auditFilePath(auditDir, ROLLOUT);
mkdirSync(dirname(trailFile), { recursive: true, mode: 0o700 });
writeFileSync(trailFile, records.map((r) => `${JSON.stringify(r)}\n`).join(''), { mode: 0o600 });
const inventory = join(scratch, 'inventory.yaml');
writeFileSync(
  inventory,
  stringify({
    defaults: { user: 'ops', pool: 'lab' },
    devices: [...fx.devices.values()].map((d) =>
      d.kind === 'agent'
        ? { id: d.id, transport: 'agent', agentKey: d.key }
        : { id: d.id, host: `${d.id}.lab`, receipts: { key: d.key } },
    ),
  }),
);
const logKey = join(scratch, 'log.pub');
writeFileSync(logKey, `${pinnedKeyText({ name: LOG_NAME, publicKey: fx.log.publicKey })}\n`);
const witnessKey = join(scratch, 'witness.pub');
writeFileSync(witnessKey, `${pinnedKeyText({ name: WITNESS_NAME, publicKey: fx.witness.publicKey })}\n`);

const exportTo = (bundle: string, ...more: string[]) =>
  runCli([
    'audit',
    'export',
    ROLLOUT,
    '--bundle',
    bundle,
    '--inventory',
    inventory,
    '--profiles',
    fx.profile.root,
    '--audit-dir',
    auditDir,
    '--log-key',
    logKey,
    '--witness-key',
    witnessKey,
    ...more,
  ]);
const verify = (bundle: string, ...more: string[]) => runCli(['audit', 'verify', '--receipts', bundle, ...more]);

describe('audit export and audit verify --receipts', () => {
  it('exports a rollout from the file store and a separate process verifies it: every receipt proven', async () => {
    const bundle = join(scratch, 'exported');
    const exported = await exportTo(bundle);
    expect(exported.stderr).toBe('');
    expect(exported.stdout).toMatch(/7 records, 7 receipts of 6 devices, 2 signed revision\(s\)/);
    expect(exported.code).toBe(0);
    expect(readdirSync(bundle).sort()).toEqual([
      'bundle.json',
      'checkpoints.jsonl',
      'enrolment.json',
      'keys',
      'revisions',
      'trail.jsonl',
      'trust',
    ]);
    // The trail as the store holds it, byte for byte; the envelopes and pins as the profile holds them.
    expect(readFileSync(join(bundle, 'trail.jsonl'), 'utf8')).toBe(readFileSync(trailFile, 'utf8'));
    expect(readFileSync(join(bundle, 'revisions/web/2.json'), 'utf8')).toBe(
      readFileSync(join(fx.profile.dir, 'envelopes/2.json'), 'utf8'),
    );
    expect(readReceiptsBundle(bundle).enrolment).toEqual(fx.enrolment());
    // The store kept no checkpoint of this trail: the verification fails closed, naming the check and the flag.
    const closed = await verify(bundle);
    expect(closed.code).toBe(1);
    expect(closed.stdout).toMatch(/^-: checkpoint: the bundle holds no checkpoint: .*--no-checkpoints-expected$/m);
    // Told the rollout ran without checkpoints: every receipt holds, inclusion said not checked.
    const checked = await verify(bundle, '--no-checkpoints-expected');
    expect(checked.stdout).toMatch(/receipts: 7 checked for 6 devices; 7 proven, 1 claimed/);
    expect(checked.stdout).toMatch(/verdict: every receipt holds/);
    expect(checked.stdout).toMatch(/inclusion: NOT checked/);
    expect(checked.stderr).toMatch(
      /--no-checkpoints-expected: the bundle holds no checkpoint, so inclusion was not checked/,
    );
    expect(checked.code).toBe(0);
    // --strict requires checkpoints: with the flag that says there are none, a refusal naming both.
    const both = await verify(bundle, '--strict', '--no-checkpoints-expected');
    expect(both.code).toBe(2);
    expect(both.stderr).toContain('--strict and --no-checkpoints-expected');
  });

  it('refuses to write over a bundle, and leaves nothing behind when the export fails', async () => {
    const bundle = join(scratch, 'exported-twice');
    expect((await exportTo(bundle)).code).toBe(0);
    const again = await exportTo(bundle);
    expect(again.code).toBe(2);
    expect(again.stderr).toContain(`--bundle ${bundle}: exists and is not an empty directory`);
    const missing = join(scratch, 'never');
    const failed = await exportTo(missing, '--log-key', join(scratch, 'no-such.pub'));
    expect(failed.code).toBe(2);
    expect(existsSync(missing)).toBe(false);
    expect(readdirSync(scratch).filter((n) => n.startsWith('.never'))).toEqual([]);
  });

  it('with checkpoints: each record proved under the last one; a tampered receipt prints <device>: <check>: <message>', async () => {
    const good = join(scratch, 'with-checkpoints');
    writeReceiptsBundle(good, fx.content(fx.bundle(records)));
    const ok = await verify(good);
    expect(ok.stdout).toMatch(
      /inclusion: 3 record\(s\) proved under the last checkpoint \(size 7\), largest proof \d+ bytes/,
    );
    expect(ok.code).toBe(0);
    // Unpinned, the keys the checkpoints were checked under are the bundle's own word: said so, by key id.
    const content = fx.content(fx.bundle(records));
    const logId = keyId(parsePinnedKey(content.logKey!, 'log', 'log')!.publicKey);
    const witnessId = keyId(parsePinnedKey(content.witnessKey!, 'witness', 'witness')!.publicKey);
    expect(ok.stdout).toContain(`log key: ${logId} (from the bundle's keys/log.pub)`);
    expect(ok.stdout).toContain(`witness key: ${witnessId} (from the bundle's keys/witness.pub)`);
    expect(ok.stdout).toMatch(/keys: those from the bundle are its own word: compare their key ids/);
    // Pinned: the auditor's own copies (a file holding the key, the form the bundle uses), equal to the bundle's.
    const logFile = join(scratch, 'log.pub');
    const witnessFile = join(scratch, 'witness.pub');
    writeFileSync(logFile, `${content.logKey}\n`);
    writeFileSync(witnessFile, `${content.witnessKey}\n`);
    const pinned = await verify(good, '--log-key', logFile, '--witness-key', witnessFile);
    expect(pinned.code).toBe(0);
    expect(pinned.stdout).toContain(`log key: ${logId} (pinned with --log-key)`);
    expect(pinned.stdout).toContain(`witness key: ${witnessId} (pinned with --witness-key)`);
    expect(pinned.stdout).not.toMatch(/its own word/);
    // Another key pinned: fails naming the key.
    const other = pinnedKeyText({ publicKey: keyPairFromSeed(new Uint8Array(32).fill(9)).publicKey });
    const wrong = await verify(good, '--witness-key', other);
    expect(wrong.code).toBe(1);
    expect(wrong.stdout).toMatch(
      /^-: pinned-key: keys\/witness\.pub: the witness's key .* is not the pinned --witness-key/m,
    );
    // Bad flag input: exit 2 naming the flag and the value.
    const missing = join(scratch, 'no-such-key.pub');
    const unreadable = await verify(good, '--log-key', missing);
    expect(unreadable.code).toBe(2);
    expect(unreadable.stderr).toContain(`--log-key ${missing}`);
    const json = JSON.parse((await verify(good, '--json')).stdout);
    expect(json).toMatchObject({ rollout: ROLLOUT, ok: true, receipts: 7, proven: 7, findings: [] });

    const tampered = join(scratch, 'tampered');
    writeReceiptsBundle(tampered, fx.content(fx.bundle(records)));
    const trail = join(tampered, 'trail.jsonl');
    writeFileSync(
      trail,
      readFileSync(trail, 'utf8').replace(/(result )applied(\\nreason -\\nprev 0{64})/, '$1claimed$2'),
    );
    const bad = await verify(tampered);
    expect(bad.code).toBe(1);
    expect(bad.stdout).toMatch(/^-: trail: edited at seq 3/m);
    expect(bad.stdout).toMatch(/^a-01: signature: record 3: the signature does not verify/m);
  });

  it('a revoked key given at export is refused at verify, naming the device', async () => {
    const revoked = join(scratch, 'revoked.yaml');
    const s01 = fx.devices.get('s-01')!;
    writeFileSync(
      revoked,
      stringify([{ key: s01.key, at: new Date(Date.now() - 3_600_000).toISOString(), reason: 'device stolen' }]),
    );
    const bundle = join(scratch, 'revoked-bundle');
    expect((await exportTo(bundle, '--revoked', revoked)).code).toBe(0);
    const checked = await verify(bundle, '--no-checkpoints-expected');
    expect(checked.code).toBe(1);
    expect(checked.stdout).toMatch(/^s-01: revoked: record 5: the device's key was revoked at .* \(device stolen\)/m);
  });

  it('a bundle that cannot be read exits 2 naming the file', async () => {
    const bundle = join(scratch, 'unreadable');
    writeReceiptsBundle(bundle, fx.content(fx.bundle(records)));
    rmSync(join(bundle, 'enrolment.json'));
    const gone = await verify(bundle);
    expect(gone.code).toBe(2);
    expect(gone.stderr).toContain(join(bundle, 'enrolment.json'));
    writeFileSync(join(bundle, 'enrolment.json'), '{"devices": []}');
    writeFileSync(join(bundle, 'trail.jsonl'), `${readFileSync(join(bundle, 'trail.jsonl'), 'utf8')}{}\n`);
    const longer = await verify(bundle);
    expect(longer.code).toBe(2);
    expect(longer.stderr).toMatch(/trail\.jsonl: 8 lines, bundle\.json's segments say 7/);
  });
});
