import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { toBase64 } from '../../../core/bytes';
import {
  chainAfter,
  parseReceipt,
  RECEIPT_CHAIN_START,
  RECEIPT_GENESIS,
  RECEIPT_MAX_BYTES,
  type ReceiptFields,
  receiptBody,
  receiptHash,
  receiptKeyId,
  receiptNonce,
  receiptSignatureValid,
  receiptText,
  signAgentReceipt,
  sshsigArmor,
  sshEd25519Key,
  sshsigFromArmor,
} from '../../../core/receipt';
import { keyPairFromSeed } from '../../../core/signing';

const key = keyPairFromSeed(new Uint8Array(32).fill(7));
const other = keyPairFromSeed(new Uint8Array(32).fill(8));
const hex = (c: string) => c.repeat(64);

function claim(over: Partial<ReceiptFields> = {}) {
  const request = {
    rollout: 'rollout:web:20261207-101500',
    run: '0b5c1e1e-8a1f-4b11-9a53-3a3d0c7c1a11',
    activity: '12',
    device: 'web-01',
  };
  return {
    device: request.device,
    rollout: request.rollout,
    phase: 1,
    nonce: receiptNonce(request),
    counter: 3,
    profile: 'web',
    revision: 2,
    requested: hex('a'),
    observed: hex('a'),
    result: 'applied' as const,
    reason: null,
    prev: RECEIPT_GENESIS,
    clock: 1_796_000_000_000,
    ...over,
  };
}

const dir = mkdtempSync(join(tmpdir(), 'wg-receipt-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('receipts', () => {
  it('an agent receipt reads back as signed and verifies only under its own key', () => {
    const r = signAgentReceipt(claim(), key);
    const parsed = parseReceipt(receiptText(r));
    expect(parsed).toEqual({ ok: true, receipt: r });
    expect(receiptSignatureValid(r, key.publicKey)).toBe(true);
    // Another device's key: the key line names a key that is not the enrolled one.
    expect(receiptSignatureValid(r, other.publicKey)).toBe(false);
    // A changed field breaks the signature even with the key line kept.
    const forged = { ...r, body: r.body.replace('result applied', 'result failed') };
    expect(receiptSignatureValid(forged, key.publicKey)).toBe(false);
  });

  it('the text is strict: order, canonical numbers, every field named', () => {
    const text = receiptText(signAgentReceipt(claim(), key));
    expect(parseReceipt(text.replace('counter 3', 'counter 03'))).toMatchObject({ ok: false, problem: /counter/ });
    expect(parseReceipt(text.replace(/^device .*\n/m, ''))).toMatchObject({ ok: false });
    expect(parseReceipt(text.replace('result applied', 'result great'))).toMatchObject({
      ok: false,
      problem: /result "great"/,
    });
    expect(parseReceipt(text.replace(/nonce [0-9a-f]+/, 'nonce zz'))).toMatchObject({ ok: false, problem: /nonce/ });
    expect(parseReceipt(text + 'x'.repeat(RECEIPT_MAX_BYTES))).toMatchObject({ ok: false, problem: /at most 1024/ });
    expect(parseReceipt(42)).toMatchObject({ ok: false });
  });

  it('the largest receipt a request can make fits in 1 KB, with an SSH signature', () => {
    const long = (c: string, n: number) => c.repeat(n);
    const fields = claim({
      device: long('d', 128),
      rollout: `rollout:${long('p', 63)}:20261207-101500-99`,
      profile: long('p', 63),
      revision: 999_999_999,
      counter: 999_999_999_999,
      reason: long('R', 24),
      result: 'already-applied',
      clock: 9_999_999_999_999,
    });
    const body = receiptBody({ ...fields, keyKind: 'ssh', keyId: receiptKeyId('ssh', key.publicKey) });
    // An SSHSIG blob of an ssh-ed25519 key in this namespace is 186 bytes: 248 base64 characters.
    const text = receiptText({ body, sig: toBase64(new Uint8Array(186)) });
    expect(Buffer.byteLength(text)).toBeLessThanOrEqual(RECEIPT_MAX_BYTES);
  });

  it('the nonce changes with the run, the request and the device', () => {
    const base = { rollout: 'r', run: 'a', activity: '1', device: 'd' };
    const seen = new Set(
      [
        base,
        { ...base, run: 'b' },
        { ...base, activity: '2' },
        { ...base, device: 'e' },
        { ...base, rollout: 's' },
      ].map(receiptNonce),
    );
    expect(seen.size).toBe(5);
  });

  it('the chain state after a receipt names its hash and counter', () => {
    const r = signAgentReceipt(claim({ counter: 1 }), key);
    expect(chainAfter(r)).toEqual({ counter: 1, last: receiptHash(r) });
    expect(RECEIPT_CHAIN_START.last).toBe(RECEIPT_GENESIS);
  });

  it('an SSH receipt signed by ssh-keygen -Y sign verifies here, and ours verifies with ssh-keygen -Y verify', () => {
    const keyFile = join(dir, 'receipt_key');
    execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', 'web-01', '-f', keyFile]);
    const pubText = readFileSync(`${keyFile}.pub`, 'utf8');
    const pubLine = pubText.trim().split(' ');
    const publicKey = sshEd25519Key(pubText)!;
    // The key line is the fingerprint ssh-keygen -l prints: a device's shell can write it with no wavegate.
    const fingerprint = execFileSync('ssh-keygen', ['-l', '-f', `${keyFile}.pub`])
      .toString()
      .split(' ')[1];
    expect(receiptKeyId('ssh', publicKey)).toBe(fingerprint);
    const body = receiptBody({ ...claim(), keyKind: 'ssh', keyId: receiptKeyId('ssh', publicKey) });
    const msg = join(dir, 'receipt.txt');
    writeFileSync(msg, body);
    execFileSync('ssh-keygen', ['-q', '-Y', 'sign', '-f', keyFile, '-n', 'wavegate-receipt', msg]);
    const blob = sshsigFromArmor(readFileSync(`${msg}.sig`, 'utf8'))!;
    expect(blob.length).toBe(186);
    const receipt = { fields: parseReceipt(receiptText({ body, sig: toBase64(blob) })), body, sig: toBase64(blob) };
    expect(receipt.fields.ok).toBe(true);
    const r = {
      fields: (receipt.fields as { ok: true; receipt: { fields: ReceiptFields } }).receipt.fields,
      body,
      sig: receipt.sig,
    };
    expect(receiptSignatureValid(r, publicKey)).toBe(true);
    expect(receiptSignatureValid({ ...r, body: body.replace('counter 3', 'counter 4') }, publicKey)).toBe(false);
    // The other way round: the receipt's own sig, re-armored, is what ssh-keygen -Y verify reads.
    writeFileSync(join(dir, 'allowed'), `web-01 ${pubLine[0]} ${pubLine[1]}\n`);
    writeFileSync(join(dir, 'again.sig'), sshsigArmor(r.sig));
    const out = execFileSync(
      'ssh-keygen',
      [
        '-Y',
        'verify',
        '-f',
        join(dir, 'allowed'),
        '-I',
        'web-01',
        '-n',
        'wavegate-receipt',
        '-s',
        join(dir, 'again.sig'),
      ],
      { input: body },
    ).toString();
    expect(out).toMatch(/Good "wavegate-receipt" signature for web-01/);
    // Another namespace is another statement.
    expect(() =>
      execFileSync(
        'ssh-keygen',
        ['-Y', 'verify', '-f', join(dir, 'allowed'), '-I', 'web-01', '-n', 'file', '-s', join(dir, 'again.sig')],
        {
          input: body,
          stdio: 'pipe',
        },
      ),
    ).toThrow();
  });
});
