import { sha256 } from '@noble/hashes/sha2.js';
import { bytesToHex } from '@noble/hashes/utils.js';
import { describe, expect, it } from 'vitest';
import {
  AUDIT_EVENTS,
  GENESIS_HASH,
  parseAuditLog,
  redactSecrets,
  sealRecord,
  serializeAuditRecord,
  verifyAuditChain,
  verifyAuditLog,
  type AuditEvent,
  type AuditRecord,
} from '../../../core/audit';
import { canonicalize } from '../../../core/canonical';
import { WavegateError } from '../../../core/errors';
import { refusal } from '../../support/refusal';
import { keyPairFromSeed, secretKeyFile } from '../../../core/signing';

/** The events the workflow writes by itself (an override needs fields of its own). */
const ROUTINE = AUDIT_EVENTS.filter((name) => name !== 'audit.override');

const event = (seq: number, extra: Partial<AuditEvent> = {}): AuditEvent => ({
  seq,
  at: new Date(Date.UTC(2026, 0, 1, 0, 0, seq)).toISOString(),
  rolloutId: 'rollout:demo',
  runId: 'run-1',
  event: ROUTINE[seq % ROUTINE.length]!,
  phase: seq === 1 ? null : `phase-${seq}`,
  by: 'wavegate',
  reason: null,
  counts: { total: 12, applied: seq },
  evidence: { step: seq },
  ...extra,
});

function chain(n: number): AuditRecord[] {
  const out: AuditRecord[] = [];
  for (let seq = 1; seq <= n; seq++) out.push(sealRecord(event(seq), out.at(-1)?.hash ?? GENESIS_HASH));
  return out;
}

const jsonl = (records: AuditRecord[]) => records.map((r) => `${serializeAuditRecord(r)}\n`).join('');

describe('sealRecord', () => {
  it('hashes the canonical JSON of every field but hash, and chains prev', () => {
    const [first, second] = chain(2);
    expect(first!.prev).toBe(GENESIS_HASH);
    const { hash, ...body } = first!;
    expect(hash).toBe(bytesToHex(sha256(new TextEncoder().encode(canonicalize(body)))));
    expect(second!.prev).toBe(first!.hash);
    expect(verifyAuditChain(chain(5))).toEqual({ ok: true, count: 5 });
    expect(verifyAuditChain([])).toEqual({ ok: true, count: 0 });
  });

  it('stores what it hashed: a serialized line reads back to an intact record', () => {
    const records = chain(3);
    const back = parseAuditLog(jsonl(records));
    expect(back.unreadable).toBeNull();
    expect(back.records).toEqual(records);
    expect(verifyAuditLog(jsonl(records))).toEqual({ ok: true, count: 3 });
  });

  it('refuses an event out of bounds, naming the field and value', () => {
    const bad: Array<[Partial<AuditEvent>, RegExp]> = [
      [{ seq: 0 }, /seq: 0 .*integer ≥ 1/],
      [{ at: 'yesterday' }, /at: "yesterday"/],
      [{ event: 'rollout.exploded' as never }, /event: "rollout.exploded".*rollout\.started/],
      [{ by: '' }, /by: ""/],
      [{ counts: { applied: -1 } }, /counts\.applied: -1/],
      [{ evidence: { n: Number.NaN } }, /audit event evidence\.n: NaN is not a finite number/],
    ];
    for (const [patch, message] of bad) {
      const caught = refusal(() => sealRecord(event(1, patch), GENESIS_HASH));
      expect(caught).toBeInstanceOf(WavegateError);
      expect(caught.code).toBe('INVALID_INPUT');
      expect(caught.message).toMatch(message);
    }
    expect(() => sealRecord(event(1), 'a'.repeat(64))).toThrow(/prev.*seq 1 starts a chain/);
    expect(() => sealRecord(event(2), 'not-hex')).toThrow(/prev: "not-hex"/);
  });
});

describe('verifyAuditChain: each tampering is named with its seq', () => {
  it('edited field → edited at that record', () => {
    const records = chain(5);
    records[2] = { ...records[2]!, by: 'mallory' };
    expect(verifyAuditChain(records)).toMatchObject({ ok: false, problem: 'edited', seq: 3 });
  });

  it('edited field inside evidence → edited', () => {
    const records = chain(4);
    records[1] = { ...records[1]!, evidence: { step: 99 } };
    expect(verifyAuditChain(records)).toMatchObject({ ok: false, problem: 'edited', seq: 2 });
  });

  it('added field → edited (the hash covers the whole record, not a projection)', () => {
    const records = chain(3);
    records[0] = { ...records[0]!, note: 'sneaky' } as AuditRecord;
    expect(verifyAuditChain(records)).toMatchObject({ ok: false, problem: 'edited', seq: 1 });
  });

  it('edited and resealed → broken-chain at the record after it', () => {
    const records = chain(5);
    records[2] = sealRecord({ ...records[2]!, reason: 'nothing happened' }, records[1]!.hash);
    expect(verifyAuditChain(records)).toMatchObject({ ok: false, problem: 'broken-chain', seq: 4 });
  });

  it('dropped record → dropped, naming the missing seq', () => {
    const records = chain(6);
    records.splice(3, 1);
    const verdict = verifyAuditChain(records);
    expect(verdict).toMatchObject({ ok: false, problem: 'dropped', seq: 4 });
    expect(!verdict.ok && verdict.message).toMatch(/record 4 is missing/);
  });

  it('several records dropped, including the first → dropped at 1', () => {
    const records = chain(6);
    expect(verifyAuditChain(records.slice(2))).toMatchObject({ ok: false, problem: 'dropped', seq: 1 });
    expect(verifyAuditChain([...records.slice(0, 2), ...records.slice(4)])).toMatchObject({
      ok: false,
      problem: 'dropped',
      seq: 3,
    });
  });

  it('reordered records → reordered at the first seq out of place', () => {
    const records = chain(6);
    [records[3], records[4]] = [records[4]!, records[3]!];
    expect(verifyAuditChain(records)).toMatchObject({ ok: false, problem: 'reordered', seq: 4 });
    const reversed = chain(3).reverse();
    expect(verifyAuditChain(reversed)).toMatchObject({ ok: false, problem: 'reordered', seq: 1 });
  });

  it('a sealed record inserted → broken-chain where the original record follows it', () => {
    const records = chain(5);
    const forged = sealRecord(event(3, { event: 'gate.passed', by: 'mallory' }), records[1]!.hash);
    records.splice(2, 0, forged);
    const verdict = verifyAuditChain(records);
    expect(verdict).toMatchObject({ ok: false, problem: 'broken-chain', seq: 3 });
    expect(!verdict.ok && verdict.message).toMatch(/inserted or duplicated/);
  });

  it('a record duplicated → broken-chain', () => {
    const records = chain(4);
    records.splice(2, 0, records[1]!);
    expect(verifyAuditChain(records)).toMatchObject({ ok: false, problem: 'broken-chain', seq: 2 });
  });

  it('wrong seq → bad-seq: a record chained right but sealed with another seq, or a seq that is no integer', () => {
    const records = chain(3);
    const skipped = sealRecord(event(5), records[2]!.hash);
    expect(verifyAuditChain([...records, skipped])).toMatchObject({ ok: false, problem: 'bad-seq', seq: 4 });
    const reused = sealRecord(event(2), records[2]!.hash);
    expect(verifyAuditChain([...records, reused])).toMatchObject({ ok: false, problem: 'bad-seq', seq: 4 });
    const nonInteger = [...records, { ...sealRecord(event(4), records[2]!.hash), seq: 3.5 }];
    expect(verifyAuditChain(nonInteger)).toMatchObject({ ok: false, problem: 'bad-seq', seq: 4 });
    const firstAtFive = sealRecord(event(5), GENESIS_HASH);
    expect(verifyAuditChain([firstAtFive])).toMatchObject({ ok: false, problem: 'bad-seq', seq: 1 });
  });

  it('truncated file: a torn last line, or records cut off the end against the acknowledged head', () => {
    const records = chain(5);
    const text = jsonl(records);
    const torn = text.slice(0, text.length - 40);
    const verdict = verifyAuditLog(torn);
    expect(verdict).toMatchObject({ ok: false, problem: 'truncated', seq: 5 });
    expect(!verdict.ok && verdict.message).toMatch(/line 5 .*cut off mid-record/);

    // Whole lines cut off the end leave a valid shorter chain: only the head held elsewhere shows it.
    const head = { seq: 5, hash: records[4]!.hash };
    expect(verifyAuditChain(records.slice(0, 3))).toEqual({ ok: true, count: 3 });
    expect(verifyAuditChain(records.slice(0, 3), head)).toMatchObject({ ok: false, problem: 'truncated', seq: 4 });
    expect(verifyAuditChain(records, head)).toEqual({ ok: true, count: 5 });
    expect(verifyAuditChain(records, { seq: 5, hash: 'f'.repeat(64) })).toMatchObject({
      ok: false,
      problem: 'edited',
      seq: 5,
    });
  });

  it('a garbage line in the middle → edited at its position', () => {
    const lines = jsonl(chain(4)).split('\n');
    lines[1] = '{"seq":2, oops';
    expect(verifyAuditLog(lines.join('\n'))).toMatchObject({ ok: false, problem: 'edited', seq: 2 });
  });
});

describe('redactSecrets', () => {
  const pem = [
    '-----BEGIN OPENSSH PRIVATE KEY-----',
    'b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ',
    '-----END OPENSSH PRIVATE KEY-----',
  ].join('\n');

  it('strips secret-named fields and PEM private key blocks anywhere in the evidence', () => {
    const signingKey = secretKeyFile(keyPairFromSeed(new Uint8Array(32).fill(7)));
    const evidence = {
      device: 'laptop-01',
      ssh: { key: '/home/ops/.ssh/id_ed25519', hostKey: 'SHA256:abc', privateKey: pem, passphrase: 'hunter2' },
      signing: signingKey,
      output: [`stderr: ${pem}\ndone`, 'ok'],
      env: { DB_PASSWORD: 'pw', API_TOKEN: 't0k', path: '/usr/bin' },
      unterminated: `-----BEGIN RSA PRIVATE KEY-----\nMIIEow`,
    };
    const out = redactSecrets(evidence) as typeof evidence;
    const text = JSON.stringify(out);
    for (const secret of ['hunter2', 'b3BlbnNzaC1rZXkt', signingKey.secretKey, '"pw"', 't0k', 'MIIEow'])
      expect(text).not.toContain(secret);
    expect(out.ssh).toEqual({
      key: '/home/ops/.ssh/id_ed25519',
      hostKey: 'SHA256:abc',
      privateKey: '[redacted]',
      passphrase: '[redacted]',
    });
    expect(out.output).toEqual(['stderr: [redacted private key]\ndone', 'ok']);
    expect(out.env.path).toBe('/usr/bin');
    expect(out.signing.publicKey).toBe(signingKey.publicKey);
    expect(evidence.ssh.passphrase).toBe('hunter2'); // a copy: the caller's value is untouched
  });

  it('is applied by sealRecord to evidence, and to PEM blocks in the reason', () => {
    const record = sealRecord(
      event(1, { reason: `pasted by mistake: ${pem}`, evidence: { password: 'pw', ok: true } }),
      GENESIS_HASH,
    );
    expect(record.reason).toBe('pasted by mistake: [redacted private key]');
    expect(record.evidence).toEqual({ password: '[redacted]', ok: true });
    expect(serializeAuditRecord(record)).not.toContain('PRIVATE KEY-----\nb3B');
    expect(verifyAuditChain([record])).toEqual({ ok: true, count: 1 });
  });

  it('refuses a circular value instead of looping', () => {
    const loop: Record<string, unknown> = { a: 1 };
    loop.self = loop;
    expect(() => redactSecrets(loop)).toThrow(/evidence\.self: circular/);
  });
});
