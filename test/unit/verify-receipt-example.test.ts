import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { writeReceiptsBundle } from '../../audit/bundle';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { receiptsFixture } from '../support/receipts-bundle';

/**
 * docs/formats.md says how to check a receipt with no wavegate: an agent's with any Ed25519 library, an SSH
 * device's with `ssh-keygen -Y verify`. examples/verify-receipt.mjs does exactly that with Node's crypto and fs
 * alone; here it runs as a reader would run it, on a good bundle and on forged receipts.
 */
const SCRIPT = join(PROJECT_ROOT, 'examples', 'verify-receipt.mjs');
const scratch = mkdtempSync(join(tmpdir(), 'wg-verify-receipt-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
const fx = receiptsFixture(join(scratch, 'fixture'));
const events = fx.events();
const good = join(scratch, 'good');
writeReceiptsBundle(good, fx.content(fx.bundle(fx.seal(events))));

/** The good trail with one device's receipt text changed by `change` (resealed: the store's own lie). */
function forged(name: string, device: string, change: (text: string) => string): string {
  const copy = structuredClone(events);
  for (const e of copy) {
    const devices = (e.evidence as { devices?: { id: string; receipt?: string }[] } | null)?.devices ?? [];
    for (const d of devices) if (d.id === device && d.receipt) d.receipt = change(d.receipt);
  }
  const dir = join(scratch, name);
  writeReceiptsBundle(dir, fx.content(fx.bundle(fx.seal(copy))));
  return dir;
}

const run = (...args: string[]) => spawnSync(process.execPath, [SCRIPT, ...args], { encoding: 'utf8' });
/** The command line the script prints for an SSH receipt, run by the shell as a reader would paste it. */
const sshVerify = (printed: string) =>
  spawnSync('sh', ['-c', printed.trim().split('\n').at(-1)!], { encoding: 'utf8' });

describe('examples/verify-receipt.mjs: a receipt checked without wavegate', () => {
  it('imports nothing but node:crypto and node:fs', () => {
    const imports = [...readFileSync(SCRIPT, 'utf8').matchAll(/^import .* from '([^']+)';$/gm)].map((m) => m[1]);
    expect(imports).toEqual(['node:crypto', 'node:fs']);
  });

  it("checks an agent receipt's Ed25519 signature with Node's crypto: good, then a flipped signature byte", () => {
    const ok = run(good, 'a-02');
    expect(ok.stdout).toMatch(/^a-02: good agent receipt: counter 1, applied web r2$/m);
    expect(ok.status).toBe(0);
    const bad = run(
      forged('agent-forged', 'a-02', (t) => t.replace(/sig (.)/, (_, c: string) => `sig ${c === 'A' ? 'B' : 'A'}`)),
      'a-02',
    );
    expect(bad.stdout).toMatch(/a-02: BAD: the Ed25519 signature does not verify/);
    expect(bad.status).toBe(1);
    // A receipt answering another request: its nonce is not the one the record's run and request make.
    const other = run(
      forged('agent-nonce', 'a-02', (t) => t.replace(/^nonce .*$/m, `nonce ${'0'.repeat(32)}`)),
      'a-02',
    );
    expect(other.stdout).toMatch(/a-02: BAD: nonce 0{32} is not the request's/);
  });

  it('checks an SSH receipt with ssh-keygen -Y verify, as the script prints it: good, then a changed line', () => {
    const out = join(scratch, 'ssh-good');
    const ok = run(good, 's-01', out);
    expect(ok.status).toBe(0);
    const checked = sshVerify(ok.stdout);
    expect(checked.stdout + checked.stderr).toMatch(/Good "wavegate-receipt" signature for s-01/);
    expect(checked.status).toBe(0);
    const badOut = join(scratch, 'ssh-bad');
    const written = run(
      forged('ssh-forged', 's-01', (t) => t.replace(/^result already-applied$/m, 'result applied')),
      's-01',
      badOut,
    );
    expect(written.status).toBe(0);
    const refused = sshVerify(written.stdout);
    expect(refused.status).not.toBe(0);
    expect(refused.stdout + refused.stderr).not.toMatch(/Good/);
    // The re-armored signature is what ssh-keygen itself writes: the same bytes.
    expect(
      execFileSync('ssh-keygen', ['-Y', 'check-novalidate', '-n', 'wavegate-receipt', '-s', join(out, 'receipt.sig')], {
        input: readFileSync(join(out, 'receipt.txt')),
      }).toString(),
    ).toMatch(/Good/);
  });
});
