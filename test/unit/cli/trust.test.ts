import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { describe, expect, it } from 'vitest';
import { keyPairFromSeed, pinOf, secretKeyFile, type KeyPair } from '../../../core/signing';
import { runCli } from '../../support/cli';

/**
 * `wavegate trust init|rotate|cosign|publish|revoke|status` as an operator runs them: real processes, real files.
 * Exit 2 names the field and value and writes nothing; a publish below either threshold says what is signed.
 */
const dir = mkdtempSync(join(tmpdir(), 'wavegate-trust-cli-'));
const profiles = join(dir, 'profiles');
const P = join(profiles, 'edge');
mkdirSync(P, { recursive: true });
writeFileSync(join(P, 'profile.yaml'), stringify({ name: 'edge', scope: {} }));

/** A key file and its pin file, as keygen writes them (made here: a spawn each would cost more than the test). */
function keyFile(name: string): KeyPair {
  const pair = keyPairFromSeed(randomBytes(32));
  writeFileSync(join(dir, `${name}.key`), JSON.stringify(secretKeyFile(pair)), { mode: 0o600 });
  writeFileSync(join(dir, `${name}.key.pub.yaml`), stringify(pinOf(pair, name)));
  return pair;
}
const [, , C] = [keyFile('a'), keyFile('b'), keyFile('c'), keyFile('ts')];

const wg = (...args: string[]) => runCli(args, { cwd: dir, env: { WAVEGATE_PROFILES: profiles } });
const status = async () => {
  const run = await wg('trust', 'status', '--profile', 'edge', '--json');
  expect(run.code, run.stderr).toBe(0);
  return JSON.parse(run.stdout) as {
    root: { version: number; threshold: number; pins: Array<{ kid: string }>; timestamp: unknown };
    revocations: { version: number; revisions: Array<{ revision: number; reason: string }> } | null;
    held: { root?: { version: number } } | null;
  };
};

describe('wavegate trust (spawned)', () => {
  it('trust.yaml -> root v1 (init) -> v2 replacing b by c (rotate, cosign, publish) -> a revocation list (revoke)', async () => {
    const noOut = await wg('trust', 'a.key.pub.yaml', 'b.key.pub.yaml', '--threshold', '2');
    expect(noOut.code).toBe(2);
    expect(noOut.stderr).toContain('--out: required');
    const made = await wg(
      'trust',
      'a.key.pub.yaml',
      'b.key.pub.yaml',
      '--threshold',
      '2',
      '--out',
      join(P, 'trust.yaml'),
    );
    expect(made.code, made.stderr).toBe(0);

    // Below trust.yaml's threshold: refused, naming --key, nothing written.
    const below = await wg('trust', 'init', '--profile', 'edge', '--key', 'a.key');
    expect(below.code).toBe(2);
    expect(below.stderr).toMatch(/--key: 1 key\(s\) given, .*trust\.yaml's threshold is 2 \(BELOW_THRESHOLD/);
    expect(existsSync(join(P, 'root'))).toBe(false);
    const init = await wg(
      'trust',
      'init',
      '--profile',
      'edge',
      '--key',
      'a.key',
      '--key',
      'b.key',
      '--timestamp-pub',
      'ts.key.pub.yaml',
    );
    expect(init.code, init.stderr).toBe(0);
    expect(init.stdout).toContain('verified (init): edge is now trusted by root v1');
    expect(existsSync(join(P, 'root', '1.json'))).toBe(true);
    const v1 = await status();
    expect(v1.root).toMatchObject({ version: 1, threshold: 2, timestamp: { threshold: 1 } });
    expect(v1.held?.root?.version).toBe(1);
    const again = await wg('trust', 'init', '--profile', 'edge', '--key', 'a.key', '--key', 'b.key');
    expect(again.code).toBe(2);
    expect(again.stderr).toContain('CONFLICT: --profile edge: already at trust root v1');

    // Replace b by c: a draft signed by a alone, published only once both thresholds are met.
    const next = await wg('trust', 'a.key.pub.yaml', 'c.key.pub.yaml', '--threshold', '2', '--out', 'next.yaml');
    expect(next.code, next.stderr).toBe(0);
    const draft = await wg(
      'trust',
      'rotate',
      '--profile',
      'edge',
      '--trust',
      'next.yaml',
      '--key',
      'a.key',
      '--out',
      'v2.json',
    );
    expect(draft.code, draft.stderr).toBe(0);
    expect(draft.stdout).toContain("signed: 1 of 2 of v1's keys, 1 of 2 of its own");
    const early = await wg('trust', 'publish', 'v2.json', '--profile', 'edge');
    expect(early.code).toBe(2);
    expect(early.stderr).toContain("(signed: 1 of 2 of v1's keys, 1 of 2 of its own); nothing was written");
    expect(existsSync(join(P, 'root', '2.json'))).toBe(false);
    const cosign = await wg('trust', 'cosign', 'v2.json', '--key', 'b.key', '--key', 'c.key');
    expect(cosign.code, cosign.stderr).toBe(0);
    expect(cosign.stdout).toContain("signed: 2 of 2 of v1's keys, 2 of 2 of its own");
    const published = await wg('trust', 'publish', 'v2.json', '--profile', 'edge');
    expect(published.code, published.stderr).toBe(0);
    const v2 = await status();
    expect(v2.root.version).toBe(2);
    expect(v2.root.pins.map((p) => p.kid)).toContain(C.kid);
    expect(v2.root.timestamp).toMatchObject({ threshold: 1 }); // carried over from v1

    // Revoke r2: below the root's threshold refused (nothing written), with a and c published at once.
    const short = await wg(
      'trust',
      'revoke',
      '--profile',
      'edge',
      '--revision',
      '2',
      '--reason',
      'leaks',
      '--key',
      'a.key',
    );
    expect(short.code).toBe(2);
    expect(short.stderr).toContain("1 of 2 of root v2's keys");
    expect(existsSync(join(P, 'revocations.json'))).toBe(false);
    const badRevision = await wg(
      'trust',
      'revoke',
      '--profile',
      'edge',
      '--revision',
      'two',
      '--reason',
      'x',
      '--key',
      'a.key',
    );
    expect(badRevision.code).toBe(2);
    expect(badRevision.stderr).toContain('--revision: must be a revision number (got "two")');
    const oldKey = await wg(
      'trust',
      'revoke',
      '--profile',
      'edge',
      '--revision',
      '2',
      '--reason',
      'x',
      '--key',
      'b.key',
    );
    expect(oldKey.code).toBe(2);
    expect(oldKey.stderr).toContain('is not a key of root v2');
    const revoked = await wg(
      'trust',
      'revoke',
      '--profile',
      'edge',
      '--revision',
      '2',
      '--reason',
      'leaks memory',
      '--key',
      'a.key',
      '--key',
      'c.key',
    );
    expect(revoked.code, revoked.stderr).toBe(0);
    expect(revoked.stdout).toContain('revoked r2: leaks memory');
    const last = await status();
    expect(last.revocations).toMatchObject({ version: 1, revisions: [{ revision: 2, reason: 'leaks memory' }] });

    // A root draft published twice, and a stale list draft: refused, nothing changed.
    const twice = await wg('trust', 'publish', 'v2.json', '--profile', 'edge');
    expect(twice.code).toBe(2);
    expect(twice.stderr).toContain('ROOT_ROLLBACK');
    const listDraft = await wg(
      'trust',
      'revoke',
      '--profile',
      'edge',
      '--revision',
      '3',
      '--reason',
      'x',
      '--key',
      'a.key',
      '--out',
      'list.json',
    );
    expect(listDraft.code, listDraft.stderr).toBe(0);
    expect(listDraft.stdout).toContain('draft of revocation list v2');
    const listShort = await wg('trust', 'publish', 'list.json', '--profile', 'edge');
    expect(listShort.code).toBe(2);
    expect(listShort.stderr).toContain("signed: 1 of 2 of root v2's keys");
    expect((await status()).revocations?.version).toBe(1);

    // A root the current list would not verify under (c out, b back: the list's a and c leave 1 of 2) is refused
    // until the new keys cosign the list in place (its body, version and marks unchanged).
    const back = await wg('trust', 'a.key.pub.yaml', 'b.key.pub.yaml', '--threshold', '2', '--out', 'back.yaml');
    expect(back.code, back.stderr).toBe(0);
    const v3 = await wg(
      'trust',
      'rotate',
      '--profile',
      'edge',
      '--trust',
      'back.yaml',
      '--key',
      'a.key',
      '--key',
      'c.key',
      '--key',
      'b.key',
      '--out',
      'v3.json',
    );
    expect(v3.code, v3.stderr).toBe(0);
    const stranded = await wg('trust', 'publish', 'v3.json', '--profile', 'edge');
    expect(stranded.code).toBe(2);
    expect(stranded.stderr).toContain('revocations.json: does not verify under trust root v3 (BELOW_THRESHOLD');
    expect(existsSync(join(P, 'root', '3.json'))).toBe(false);
    const listCosign = await wg('trust', 'cosign', join(P, 'revocations.json'), '--key', 'b.key');
    expect(listCosign.code, listCosign.stderr).toBe(0);
    const v3published = await wg('trust', 'publish', 'v3.json', '--profile', 'edge');
    expect(v3published.code, v3published.stderr).toBe(0);
    expect(await status()).toMatchObject({ root: { version: 3 }, revocations: { version: 1 } });
  });
});
