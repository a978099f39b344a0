import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  parseReceipt,
  RECEIPT_GENESIS,
  type ReceiptClaim,
  receiptHash,
  receiptNonce,
  receiptSignatureValid,
  sshEd25519Key,
  sshsigArmor,
} from '../../core/receipt';
import { claimText } from '../../device/channel/ssh-receipt';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { scratchDir } from '../support/harness';

/**
 * The SSH device's receipt signer (device/receipt-signer/wavegate-sign-receipt), run as it is shipped, with a state
 * directory of the test's own: what it prints is a receipt core/receipt.ts reads and ssh-keygen -Y verify accepts,
 * its counter goes up by one per receipt and is on disk before the receipt is out, a retry of the last request gets
 * the same receipt, and a claim that is not one is refused with nothing kept.
 */
const SIGNER = join(PROJECT_ROOT, 'device', 'receipt-signer', 'wavegate-sign-receipt');
const SETUP = join(PROJECT_ROOT, 'device', 'receipt-signer', 'wavegate-receipt-setup');
const scratch = scratchDir('receipt-signer');
afterAll(() => scratch.cleanup());

let dirs = 0;
/** A state directory as wavegate-receipt-setup leaves it (0700, the signing user's), with its own key. */
function stateDir(): { dir: string; key: Uint8Array; pub: string } {
  const dir = join(scratch.dir, `state-${++dirs}`);
  mkdirSync(dir, { mode: 0o700 });
  execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', 'device', '-f', join(dir, 'key')]);
  const pub = readFileSync(join(dir, 'key.pub'), 'utf8');
  return { dir, key: sshEd25519Key(pub)!, pub };
}

const hex = (c: string) => c.repeat(64);
function claim(over: Partial<ReceiptClaim> = {}): ReceiptClaim {
  return {
    device: 'web-01',
    rollout: 'rollout:web:20261207-101500',
    phase: 0,
    nonce: receiptNonce({ rollout: 'rollout:web:20261207-101500', run: 'run-1', activity: '7', device: 'web-01' }),
    profile: 'web',
    revision: 2,
    requested: hex('a'),
    observed: hex('a'),
    result: 'applied',
    reason: null,
    ...over,
  };
}

function sign(dir: string, input: string) {
  const res = spawnSync('sh', [SIGNER, dir], { input, encoding: 'utf8' });
  return { code: res.status, stdout: res.stdout, stderr: res.stderr };
}

function signed(dir: string, c: ReceiptClaim) {
  const res = sign(dir, claimText(c));
  expect(res.stderr).toBe('');
  expect(res.code).toBe(0);
  const parsed = parseReceipt(res.stdout);
  if (!parsed.ok) throw new Error(parsed.problem);
  return { text: res.stdout, receipt: parsed.receipt };
}

const lastOf = (dir: string) => readFileSync(join(dir, 'last'), 'utf8');

describe('wavegate-sign-receipt', () => {
  it('prints a receipt of the claim that core/receipt.ts and ssh-keygen -Y verify both accept under the device key', () => {
    const { dir, key, pub } = stateDir();
    const c = claim({ phase: null, observed: null, result: 'failed', reason: 'VERIFY' });
    const { text, receipt } = signed(dir, c);
    expect(receipt.fields).toMatchObject({ ...c, keyKind: 'ssh', counter: 1, prev: RECEIPT_GENESIS });
    const fingerprint = execFileSync('ssh-keygen', ['-l', '-f', join(dir, 'key.pub')])
      .toString()
      .split(' ')[1];
    expect(receipt.fields.keyId).toBe(fingerprint);
    expect(Math.abs(receipt.fields.clock - Date.now())).toBeLessThan(60_000);
    expect(Buffer.byteLength(text)).toBeLessThanOrEqual(1024);
    expect(receiptSignatureValid(receipt, key)).toBe(true);
    expect(receiptSignatureValid(receipt, stateDir().key)).toBe(false);

    const [type, blob] = pub.trim().split(' ');
    writeFileSync(join(scratch.dir, 'allowed'), `web-01 ${type} ${blob}\n`);
    writeFileSync(join(scratch.dir, 'receipt.sig'), sshsigArmor(receipt.sig));
    const verify = (body: string) =>
      spawnSync(
        'ssh-keygen',
        ['-Y', 'verify', '-f', join(scratch.dir, 'allowed'), '-I', 'web-01', '-n', 'wavegate-receipt'].concat([
          '-s',
          join(scratch.dir, 'receipt.sig'),
        ]),
        { input: body, encoding: 'utf8' },
      );
    expect(verify(receipt.body).stdout).toMatch(/Good "wavegate-receipt" signature for web-01/);
    expect(verify(receipt.body.replace('result failed', 'result applied')).status).not.toBe(0);
  });

  it('counts one up per receipt and chains each to the last, the state on disk before the receipt is printed', () => {
    const { dir } = stateDir();
    const first = signed(dir, claim());
    expect(lastOf(dir)).toBe(first.text);
    // Nobody reads the second receipt (the reader is gone before it is printed): it was made all the same, so
    // its counter is never made again.
    const nonce2 = receiptNonce({ rollout: 'r', run: 'x', activity: '2', device: 'web-01' });
    const lost = spawnSync('sh', ['-c', `sh "$0" "$1" | true`, SIGNER, dir], {
      input: claimText(claim({ nonce: nonce2 })),
    });
    expect(lost.status).toBe(0);
    const kept = parseReceipt(lastOf(dir));
    expect(kept).toMatchObject({ ok: true, receipt: { fields: { counter: 2, nonce: nonce2 } } });
    const third = signed(dir, claim({ nonce: hex('b').slice(0, 32) }));
    expect(third.receipt.fields.counter).toBe(3);
    expect(third.receipt.fields.prev).toBe(receiptHash((kept as { ok: true; receipt: { body: string } }).receipt));
    expect(kept.ok && kept.receipt.fields.prev).toBe(receiptHash(first.receipt));
  });

  it('the same nonce and claim as the last receipt print that receipt again; anything else is a new one', () => {
    const { dir } = stateDir();
    const first = signed(dir, claim());
    const again = signed(dir, claim());
    expect(again.text).toBe(first.text);
    expect(lastOf(dir)).toBe(first.text);
    // The same request with another answer is another statement: counted.
    const other = signed(dir, claim({ result: 'already-applied' }));
    expect(other.receipt.fields.counter).toBe(2);
    // A request before the last one is not the last receipt: a new receipt, never an old counter.
    expect(signed(dir, claim()).receipt.fields.counter).toBe(3);
  });

  it('signers at once each get their own counter (the lock)', async () => {
    const { dir } = stateDir();
    const run = (i: number) =>
      new Promise<string>((done, failed) => {
        const child = spawn('sh', [SIGNER, dir]);
        let out = '';
        child.stdout.on('data', (b: Buffer) => (out += b));
        child.on('error', failed);
        child.on('close', (code) => (code === 0 ? done(out) : failed(new Error(`exit ${code}`))));
        child.stdin.end(claimText(claim({ nonce: `${i}`.padStart(32, '0') })));
      });
    const texts = await Promise.all([1, 2, 3, 4, 5].map(run));
    const receipts = texts.map(
      (t) => (parseReceipt(t) as { ok: true; receipt: { fields: { counter: number } } }).receipt,
    );
    expect(receipts.map((r) => r.fields.counter).sort()).toEqual([1, 2, 3, 4, 5]);
    expect(existsSync(join(dir, 'lock'))).toBe(false);
  });

  it('refuses a claim that is not one, naming the field, and keeps nothing', () => {
    const { dir } = stateDir();
    const first = signed(dir, claim());
    const good = claimText(claim({ nonce: hex('c').slice(0, 32) }));
    const cases: Array<[string, RegExp]> = [
      [good.replace('result applied', 'result great'), /claim result "great"/],
      [good.replace(/nonce [0-9a-f]+/, 'nonce zz'), /claim nonce "zz"/],
      [good.replace('revision 2', 'revision 02'), /claim revision "02"/],
      [good.replace('phase 0', 'phase 1000'), /claim phase "1000"/],
      [good.replace('device web-01', 'device web 01;rm'), /claim device "web 01;rm"/],
      [good.replace('device web-01', `device ${'d'.repeat(129)}`), /claim device/],
      [good.replace('profile web', 'profile Web'), /claim profile "Web"/],
      [good.replace(/observed [0-9a-f]+/, 'observed A'.padEnd(73, 'A')), /claim observed/],
      [good.replace('reason -', 'reason $(id)'), /claim reason "\$\(id\)"/],
      [good.replace('reason -', `reason ${'R'.repeat(25)}`), /claim reason/],
      [good.replace(/^rollout .*\n/m, ''), /claim line 2: must be "rollout <value>"/],
      [`${good}extra line\n`, /more than 10 lines/],
      [good.split('\n').slice(0, 9).join('\n'), /9 lines, must be 10 \(missing: reason\)/],
      [good + 'x'.repeat(1024), /more than 1024 bytes/],
      ['', /claim line 1: must be "device <value>"/],
    ];
    for (const [input, problem] of cases) {
      const res = sign(dir, input);
      expect(res.code, input).toBe(2);
      expect(res.stdout).toBe('');
      expect(res.stderr).toMatch(problem);
      expect(res.stderr.length).toBeLessThan(300);
    }
    expect(lastOf(dir)).toBe(first.text);
  });

  it('signs only from a state directory that is its own alone, with a key in it', () => {
    const { dir } = stateDir();
    chmodSync(dir, 0o755);
    expect(sign(dir, claimText(claim()))).toMatchObject({ code: 1, stdout: '', stderr: /mode drwxr-xr-x.*0700/ });
    chmodSync(dir, 0o700);
    expect(sign('relative/dir', claimText(claim())).stderr).toMatch(/must be an absolute path/);
    const empty = join(scratch.dir, 'empty');
    mkdirSync(empty, { mode: 0o700 });
    expect(sign(empty, claimText(claim()))).toMatchObject({
      code: 1,
      stderr: /no receipt key.*wavegate-receipt-setup/,
    });
    expect(existsSync(join(empty, 'last'))).toBe(false);
    // A damaged record is not a fresh start (that would make counter 1 again).
    writeFileSync(join(dir, 'last'), 'garbage\n');
    expect(sign(dir, claimText(claim()))).toMatchObject({ code: 1, stdout: '', stderr: /damaged/ });
  });
});

describe('wavegate-receipt-setup (as root)', () => {
  it('makes the root-only key directory and key, installs the signer, and prints the sudoers rule and the inventory entry', () => {
    expect(process.getuid?.()).toBe(0);
    const dir = join(scratch.dir, 'setup', 'receipt');
    const signer = join(scratch.dir, 'setup', 'sbin', 'wavegate-sign-receipt');
    const setup = () => execFileSync('sh', [SETUP, '--login', 'nobody', '--dir', dir, '--signer', signer]).toString();
    const out = setup();
    const mode = (p: string) => statSync(p).mode & 0o7777;
    expect([mode(dir), statSync(dir).uid]).toEqual([0o700, 0]);
    expect([mode(join(dir, 'key')), statSync(join(dir, 'key')).uid]).toEqual([0o600, 0]);
    expect([mode(signer), statSync(signer).uid]).toEqual([0o755, 0]);
    expect(readFileSync(signer, 'utf8')).toBe(readFileSync(SIGNER, 'utf8'));
    // The rule pins the state directory as the signer's only argument.
    expect(out).toContain(`\nnobody ALL=(root) NOPASSWD: ${signer} ${dir}\n`);
    const pub = readFileSync(join(dir, 'key.pub'), 'utf8').trim().split(' ').slice(0, 2).join(' ');
    expect(out).toContain(`receipts:\n  key: "${pub}"\n  command: "sudo -n ${signer} ${dir}"\n`);
    expect(out).not.toContain(readFileSync(join(dir, 'key'), 'utf8').split('\n')[1]!);
    // Run again (a new signer): the key stays, and so does the device's record.
    const key = readFileSync(join(dir, 'key'));
    writeFileSync(join(dir, 'last'), 'kept\n');
    expect(setup()).toBe(out);
    expect(readFileSync(join(dir, 'key'))).toEqual(key);
    expect(readFileSync(join(dir, 'last'), 'utf8')).toBe('kept\n');
  });

  it('refuses a root login, an unknown login and a path sudoers would read as syntax (exit 2)', () => {
    const run = (...args: string[]) => spawnSync('sh', [SETUP, ...args], { encoding: 'utf8' });
    expect(run()).toMatchObject({ status: 2, stderr: /--login: required/ });
    expect(run('--login', 'root')).toMatchObject({ status: 2, stderr: /is root/ });
    expect(run('--login', 'no-such-user-wg')).toMatchObject({ status: 2, stderr: /no such user/ });
    expect(run('--login', 'nobody', '--dir', '/tmp/a b')).toMatchObject({ status: 2, stderr: /"\/tmp\/a b"/ });
    expect(run('--login', 'nobody', '--dir', 'rel')).toMatchObject({ status: 2, stderr: /absolute path/ });
  });
});
