import { spawn } from 'node:child_process';
import {
  appendFileSync,
  chmodSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  archivedAuditRuns,
  auditFilePath,
  auditFileStem,
  createAuditActivities,
  ensureAuditKeyFile,
  readAuditFile,
  readAuditKey,
  rolloutIdOfStem,
} from '../../audit/file';
import {
  AUDIT_EVENTS,
  GENESIS_HASH,
  sealRecord,
  serializeAuditRecord,
  verifyAuditChain,
  verifyAuditLog,
  type AuditEvent,
} from '../../core/audit';
import { WavegateError } from '../../core/errors';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { refusal, rejection } from '../support/refusal';

/** The events the workflow writes by itself (an override needs fields of its own). */
const ROUTINE = AUDIT_EVENTS.filter((name) => name !== 'audit.override');

const event = (seq: number, extra: Partial<AuditEvent> = {}): AuditEvent => ({
  seq,
  at: new Date(Date.UTC(2026, 0, 1, 0, 0, seq)).toISOString(),
  rolloutId: 'rollout:demo',
  runId: 'run-1',
  event: ROUTINE[seq % ROUTINE.length]!,
  phase: `phase-${seq}`,
  by: 'wavegate',
  reason: null,
  counts: { total: 20, applied: seq },
  evidence: { seq },
  ...extra,
});

/** The ApplicationFailure an append fails with. */
const failureOf = (promise: Promise<unknown>) => rejection(promise, ApplicationFailure);

let dir: string;
let logs: string[];
let audit: ReturnType<typeof createAuditActivities>;
const file = () => auditFilePath(dir, 'rollout:demo');

beforeEach(() => {
  dir = join(mkdtempSync(join(tmpdir(), 'wavegate-audit-')), 'audit');
  logs = [];
  audit = createAuditActivities({ auditDir: dir, log: (line) => logs.push(line) });
});
afterEach(() => rmSync(join(dir, '..'), { recursive: true, force: true }));

describe('audit file names', () => {
  it('encode ids reversibly and stably, with no separators, hidden names or case collisions', () => {
    expect(auditFileStem('rollout:demo')).toBe('rollout%3Ademo');
    const ids = [
      'rollout:demo',
      'rollout:Demo',
      'a/b',
      'a%2Fb',
      '..',
      '.hidden',
      'rollout:prod/eu-1',
      'ünïcode:x',
      'a@b',
    ];
    const stems = ids.map(auditFileStem);
    expect(new Set(stems).size).toBe(ids.length);
    for (const [i, stem] of stems.entries()) {
      expect(stem).toMatch(/^(?:[a-z0-9_-]|%[0-9A-F]{2})(?:[a-z0-9._-]|%[0-9A-F]{2})*$/);
      expect(rolloutIdOfStem(stem)).toBe(ids[i]);
    }
    expect(auditFilePath('/x', 'rollout:demo')).toBe('/x/rollout%3Ademo.jsonl');
    expect(() => auditFileStem('')).toThrow(WavegateError);
    expect(() => auditFileStem('x'.repeat(1001))).toThrow(/too long/);
    // Up to 180 encoded characters an id keeps its name; past that, the encoded start, `~` and the id's digest.
    expect(auditFileStem('x'.repeat(180))).toBe('x'.repeat(180));
    const long = auditFileStem('x'.repeat(181));
    expect(long).toMatch(/^x{100}~[0-9a-f]{64}$/);
    expect(auditFileStem('x'.repeat(182))).not.toBe(long);
    // The encoded start is never cut inside a %XX.
    expect(auditFileStem(`${'x'.repeat(99)}:${'y'.repeat(100)}`)).toMatch(/^x{99}~[0-9a-f]{64}$/);
    expect(() => rolloutIdOfStem(long)).toThrow(/digest of a long id/);
  });
});

describe('appendAudit on real files', () => {
  it('appends a chain, one fsynced line per record, each prev the hash before it', async () => {
    const results = [];
    for (let seq = 1; seq <= 5; seq++) results.push(await audit.appendAudit(event(seq)));
    const records = readAuditFile(dir, 'rollout:demo');
    expect(records.map((r) => r.seq)).toEqual([1, 2, 3, 4, 5]);
    expect(results).toEqual(records.map((r) => ({ seq: r.seq, hash: r.hash })));
    expect(records[0]!.prev).toBe(GENESIS_HASH);
    for (let i = 1; i < 5; i++) expect(records[i]!.prev).toBe(records[i - 1]!.hash);
    expect(verifyAuditLog(readFileSync(file(), 'utf8'))).toEqual({ ok: true, count: 5 });
    expect(readFileSync(file(), 'utf8').split('\n')[0]).toMatch(
      /^\{"seq":1,"at":"2026-01-01T00:00:01.000Z","rolloutId":"rollout:demo"/,
    );
    expect(existsSync(`${file()}.lock`)).toBe(false);
  });

  it('a repeated append of the same seq is a no-op returning the same hash', async () => {
    await audit.appendAudit(event(1));
    const second = await audit.appendAudit(event(2));
    const before = readFileSync(file(), 'utf8');
    expect(await audit.appendAudit(event(2))).toEqual(second);
    expect(await audit.appendAudit(structuredClone(event(2)))).toEqual(second);
    expect(readFileSync(file(), 'utf8')).toBe(before);
  });

  it('other content under a written seq is refused as a non-retryable AuditConflict', async () => {
    await audit.appendAudit(event(1));
    await audit.appendAudit(event(2));
    const before = readFileSync(file(), 'utf8');
    const failure = await failureOf(audit.appendAudit(event(2, { reason: 'different' })));
    expect(failure.type).toBe('AuditConflict');
    expect(failure.nonRetryable).toBe(true);
    expect(failure.message).toMatch(/record 2 already exists with other content/);
    const sameRunSeq1 = await failureOf(audit.appendAudit(event(1, { by: 'mallory' })));
    expect(sameRunSeq1.type).toBe('AuditConflict');
    expect(readFileSync(file(), 'utf8')).toBe(before);
  });

  it('a seq beyond the next is a retryable AuditOutOfOrder; an invalid event a non-retryable AuditInvalid', async () => {
    await audit.appendAudit(event(1));
    const gap = await failureOf(audit.appendAudit(event(3)));
    expect(gap.type).toBe('AuditOutOfOrder');
    expect(gap.nonRetryable).toBe(false);
    expect(gap.message).toMatch(/ends at record 1; record 3 must wait for 2/);
    const invalid = await failureOf(audit.appendAudit(event(2, { event: 'gate.maybe' as never })));
    expect(invalid.type).toBe('AuditInvalid');
    expect(invalid.nonRetryable).toBe(true);
    expect(invalid.message).toMatch(/event: "gate.maybe"/);
    expect(readAuditFile(dir, 'rollout:demo')).toHaveLength(1);
  });

  it('20 concurrent appends issued out of order (each twice) land once each, in order, retrying like Temporal would', async () => {
    const order = Array.from({ length: 20 }, (_, i) => i + 1).flatMap((seq) => [seq, seq]);
    for (let i = order.length - 1; i > 0; i--) {
      const j = (i * 7919) % (i + 1); // a fixed shuffle: the test must fail the same way every time
      [order[i], order[j]] = [order[j]!, order[i]!];
    }
    let retries = 0;
    const withRetries = async (seq: number) => {
      for (;;) {
        try {
          return await audit.appendAudit(event(seq));
        } catch (err) {
          if (!(err instanceof ApplicationFailure) || err.nonRetryable) throw err;
          retries++;
          await new Promise((resolve) => setTimeout(resolve, 2));
        }
      }
    };
    const results = await Promise.all(order.map(withRetries));
    const records = readAuditFile(dir, 'rollout:demo');
    expect(records.map((r) => r.seq)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    expect(retries).toBeGreaterThan(0);
    for (const [i, seq] of order.entries()) expect(results[i]).toEqual({ seq, hash: records[seq - 1]!.hash });
    expect(verifyAuditLog(readFileSync(file(), 'utf8'))).toEqual({ ok: true, count: 20 });
  });

  it('two worker processes appending the same 60 records at once leave one intact chain (the file lock)', async () => {
    const script = `
      require('tsx/cjs');
      const { createAuditActivities } = require('./audit/file.ts');
      const ROUTINE = require('./core/audit.ts').AUDIT_EVENTS.filter((name) => name !== 'audit.override');
      const { existsSync } = require('node:fs');
      const audit = createAuditActivities({ auditDir: process.argv[1] });
      (async () => {
        // Start together: both processes are loaded before either appends, so their appends overlap.
        process.stdout.write('ready\\n');
        while (!existsSync(process.argv[2])) await new Promise((r) => setTimeout(r, 1));
        for (let seq = 1; seq <= 60; seq++) {
          const event = { seq, at: new Date(Date.UTC(2026, 0, 1, 0, 0, seq)).toISOString(), rolloutId: 'rollout:demo', runId: 'run-1',
            event: ROUTINE[seq % ROUTINE.length], phase: 'phase-' + seq, by: 'wavegate', reason: null,
            counts: { total: 60, applied: seq }, evidence: { seq } };
          for (;;) {
            try { await audit.appendAudit(event); break; }
            catch (err) { if (err.nonRetryable !== false) throw err; await new Promise((r) => setTimeout(r, 5)); }
          }
        }
      })().catch((err) => { console.error(err); process.exitCode = 3; });`;
    const go = join(dir, '..', 'go');
    const ready: Promise<void>[] = [];
    const run = () =>
      new Promise<{ code: number | null; stderr: string }>((resolve) => {
        const child = spawn(process.execPath, ['-e', script, dir, go], { cwd: PROJECT_ROOT });
        ready.push(new Promise((onReady) => child.stdout.once('data', () => onReady())));
        let stderr = '';
        child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
        child.on('exit', (code) => resolve({ code, stderr }));
      });
    const finished = Promise.all([run(), run()]);
    await Promise.all(ready);
    writeFileSync(go, '');
    const [a, b] = await finished;
    expect(a).toEqual({ code: 0, stderr: '' });
    expect(b).toEqual({ code: 0, stderr: '' });
    expect(verifyAuditLog(readFileSync(file(), 'utf8'))).toEqual({ ok: true, count: 60 });
    expect(readdirSync(dir)).toEqual(['rollout%3Ademo.jsonl']);
  });

  it('a torn partial line from a crash mid-append is cut off and the retried append lands', async () => {
    for (let seq = 1; seq <= 2; seq++) await audit.appendAudit(event(seq));
    appendFileSync(file(), '{"seq":3,"at":"2026-01-01T00:00:03.000Z","rollou');
    expect(verifyAuditLog(readFileSync(file(), 'utf8'))).toMatchObject({ ok: false, problem: 'truncated', seq: 3 });
    await audit.appendAudit(event(3));
    expect(verifyAuditLog(readFileSync(file(), 'utf8'))).toEqual({ ok: true, count: 3 });
    expect(logs.join('\n')).toMatch(/removed a torn partial record after line 2/);
  });

  it('a complete last record whose newline did not land is kept and recognised', async () => {
    for (let seq = 1; seq <= 2; seq++) await audit.appendAudit(event(seq));
    writeFileSync(file(), readFileSync(file(), 'utf8').slice(0, -1));
    const second = readAuditFile(dir, 'rollout:demo')[1]!;
    expect(await audit.appendAudit(event(2))).toEqual({ seq: 2, hash: second.hash });
    await audit.appendAudit(event(3));
    expect(verifyAuditLog(readFileSync(file(), 'utf8'))).toEqual({ ok: true, count: 3 });
  });

  it('a garbage line in the middle stops the sink with a non-retryable AuditCorrupt naming the line', async () => {
    for (let seq = 1; seq <= 2; seq++) await audit.appendAudit(event(seq));
    const lines = readFileSync(file(), 'utf8').split('\n');
    lines[0] = 'garbage';
    writeFileSync(file(), lines.join('\n'));
    const failure = await failureOf(audit.appendAudit(event(3)));
    expect(failure.type).toBe('AuditCorrupt');
    expect(failure.nonRetryable).toBe(true);
    expect(failure.message).toMatch(/line 1 is not a JSON audit record/);
  });

  it('a new execution of a re-used rollout id moves the finished chain aside and starts its own', async () => {
    for (let seq = 1; seq <= 3; seq++) await audit.appendAudit(event(seq));
    const firstChain = readFileSync(file(), 'utf8');
    await audit.appendAudit(event(1, { runId: 'run-2' }));
    await audit.appendAudit(event(2, { runId: 'run-2' }));
    expect(readAuditFile(dir, 'rollout:demo').map((r) => [r.seq, r.runId])).toEqual([
      [1, 'run-2'],
      [2, 'run-2'],
    ]);
    expect(readFileSync(auditFilePath(dir, 'rollout:demo', 'run-1'), 'utf8')).toBe(firstChain);
    expect(archivedAuditRuns(dir, 'rollout:demo')).toEqual(['run-1']);
    expect(archivedAuditRuns(dir, 'rollout:other')).toEqual([]);
    // Continue-as-new: a later run id continuing the seq stays in the same chain.
    await audit.appendAudit(event(3, { runId: 'run-2b' }));
    expect(verifyAuditLog(readFileSync(file(), 'utf8'))).toEqual({ ok: true, count: 3 });
  });

  it('secrets in the evidence never reach the disk', async () => {
    const pem =
      '-----BEGIN OPENSSH PRIVATE KEY-----\nAAAAC3NzaC1lZDI1NTE5AAAAIKEYMATERIAL\n-----END OPENSSH PRIVATE KEY-----';
    await audit.appendAudit(
      event(1, {
        evidence: { device: 'laptop-01', privateKey: pem, stderr: `oops ${pem}`, ssh: { password: 'hunter2' } },
      }),
    );
    const text = readFileSync(file(), 'utf8');
    expect(text).not.toContain('KEYMATERIAL');
    expect(text).not.toContain('hunter2');
    expect(readAuditFile(dir, 'rollout:demo')[0]!.evidence).toEqual({
      device: 'laptop-01',
      privateKey: '[redacted]',
      stderr: 'oops [redacted private key]',
      ssh: { password: '[redacted]' },
    });
  });

  it('a lock left by a dead writer is broken; one held by a live writer makes the append retry later', async () => {
    const { mkdirSync } = await import('node:fs');
    mkdirSync(dir, { recursive: true });
    writeFileSync(`${file()}.lock`, `999999999 ${hostname()}`);
    await audit.appendAudit(event(1));
    expect(existsSync(`${file()}.lock`)).toBe(false);
    writeFileSync(`${file()}.lock`, `${process.pid} ${hostname()}`);
    const busy = await failureOf(audit.appendAudit(event(2)));
    expect(busy.type).toBe('AuditBusy');
    expect(busy.nonRetryable).toBe(false);
    rmSync(`${file()}.lock`);
    await audit.appendAudit(event(2));
    expect(readAuditFile(dir, 'rollout:demo')).toHaveLength(2);
  });

  it('reading an unknown rollout is NOT_FOUND naming the path', () => {
    const caught = refusal(() => readAuditFile(dir, 'rollout:nope'));
    expect(caught).toBeInstanceOf(WavegateError);
    expect(caught.code).toBe('NOT_FOUND');
    expect(caught.message).toContain('rollout%3Anope.jsonl');
  });
});

describe('a trail that is not whole stops the sink until it is, or until an operator overrides', () => {
  const KEY = Uint8Array.from({ length: 32 }, (_, i) => i + 1);

  it('a garbage line makes the next append a non-retryable AuditCorrupt naming the file and line, and auditHealth says not whole until it is repaired', async () => {
    for (let seq = 1; seq <= 3; seq++) await audit.appendAudit(event(seq));
    const good = readFileSync(file(), 'utf8');
    const lines = good.split('\n');
    lines[1] = 'garbage';
    writeFileSync(file(), lines.join('\n'));
    const failure = await failureOf(audit.appendAudit(event(4)));
    expect(failure.type).toBe('AuditCorrupt');
    expect(failure.nonRetryable).toBe(true);
    expect(failure.details).toEqual([{ file: file(), line: 2, seq: 2, problem: 'edited', segment: 1 }]);
    expect(await audit.auditHealth({ rolloutId: 'rollout:demo' })).toMatchObject({
      ok: false,
      file: file(),
      line: 2,
      problem: 'edited',
      reason: expect.stringMatching(/line 2: line 2 is not a JSON audit record/),
    });
    writeFileSync(file(), good);
    const records = readAuditFile(dir, 'rollout:demo');
    expect(await audit.auditHealth({ rolloutId: 'rollout:demo' })).toEqual({
      ok: true,
      head: { seq: 3, hash: records[2]!.hash },
      file: file(),
      segment: 1,
    });
    await audit.appendAudit(event(4));
  });

  it('an edited record that is still JSON (hash no longer matches) also stops the sink: nothing is chained onto a rewritten trail', async () => {
    for (let seq = 1; seq <= 3; seq++) await audit.appendAudit(event(seq));
    writeFileSync(file(), readFileSync(file(), 'utf8').replace('"phase":"phase-2"', '"phase":"phase-x"'));
    const failure = await failureOf(audit.appendAudit(event(4)));
    expect(failure.type).toBe('AuditCorrupt');
    expect(failure.details).toEqual([{ file: file(), line: 2, seq: 2, problem: 'edited', segment: 1 }]);
  });

  it('after a prefix found whole (only the records appended since are re-checked), AuditCorrupt names the line a full check names', async () => {
    // The append of record 6 found 1–5 whole: the next check re-reads only the lines after them.
    for (let seq = 1; seq <= 6; seq++) await audit.appendAudit(event(seq));
    writeFileSync(file(), readFileSync(file(), 'utf8').replace('"phase":"phase-6"', '"phase":"phase-x"'));
    const failure = await failureOf(audit.appendAudit(event(7)));
    expect(failure.type).toBe('AuditCorrupt');
    expect(failure.details).toEqual([{ file: file(), line: 6, seq: 6, problem: 'edited', segment: 1 }]);
    expect(failure.message).toMatch(/ line 6: record 6 \(line 6\) was edited/);
    // What `wavegate audit --verify` and auditHealth (a full check: the failure forgot the prefix) say, word for word.
    const verdict = verifyAuditLog(readFileSync(file(), 'utf8'));
    expect(verdict).toMatchObject({ ok: false, seq: 6 });
    expect(failure.message).toContain(`: ${(verdict as { message: string }).message}; no record is written`);
    const health = await audit.auditHealth({ rolloutId: 'rollout:demo' });
    expect(health).toMatchObject({ ok: false, line: 6 });
    expect(failure.message.startsWith(`${(health as { reason: string }).reason}; no record is written`)).toBe(true);
  });

  it('after a prefix found whole, a reordered tail is named by its lines in the file', async () => {
    for (let seq = 1; seq <= 6; seq++) await audit.appendAudit(event(seq));
    const sixth = readAuditFile(dir, 'rollout:demo')[5]!;
    const seventh = serializeAuditRecord(sealRecord(event(7), sixth.hash));
    const lines = readFileSync(file(), 'utf8').trimEnd().split('\n');
    writeFileSync(file(), `${[...lines.slice(0, 5), seventh, lines[5]].join('\n')}\n`);
    const failure = await failureOf(audit.appendAudit(event(8)));
    expect(failure.details).toEqual([{ file: file(), line: 6, seq: 6, problem: 'reordered', segment: 1 }]);
    expect(failure.message).toMatch(/record 6 is out of order: line 6 holds record 7, record 6 is on line 7;/);
  });

  it("auditHealth with the workflow's head finds a cut tail that the chain alone cannot", async () => {
    for (let seq = 1; seq <= 4; seq++) await audit.appendAudit(event(seq));
    const records = readAuditFile(dir, 'rollout:demo');
    writeFileSync(file(), `${readFileSync(file(), 'utf8').split('\n').slice(0, 2).join('\n')}\n`);
    expect(await audit.auditHealth({ rolloutId: 'rollout:demo' })).toMatchObject({ ok: true });
    expect(
      await audit.auditHealth({ rolloutId: 'rollout:demo', head: { seq: 4, hash: records[3]!.hash } }),
    ).toMatchObject({ ok: false, problem: 'truncated', reason: expect.stringMatching(/records 3–4 were cut off/) });
  });

  it('an override starts a new segment after the last good head, keeps the broken file byte for byte, and later appends continue there', async () => {
    for (let seq = 1; seq <= 3; seq++) await audit.appendAudit(event(seq));
    const lastGood = readAuditFile(dir, 'rollout:demo')[2]!;
    appendFileSync(file(), 'garbage\n');
    const broken = readFileSync(file(), 'utf8');
    const override = event(4, {
      event: 'audit.override',
      by: 'alice',
      reason: 'disk repaired; line 4 lost',
      lastGood: { seq: 3, hash: lastGood.hash },
    });
    const head = await audit.appendAudit(override);
    expect(await audit.appendAudit(override)).toEqual(head); // idempotent on retry
    await audit.appendAudit(event(5));
    expect(readFileSync(file(), 'utf8')).toBe(broken);
    const segment2 = auditFilePath(dir, 'rollout:demo', undefined, 2);
    const second = readFileSync(segment2, 'utf8')
      .trimEnd()
      .split('\n')
      .map((line) => JSON.parse(line) as { seq: number; event: string; prev: string; lastGood?: unknown });
    expect(second.map((r) => [r.seq, r.event])).toEqual([
      [4, 'audit.override'],
      [5, ROUTINE[5]],
    ]);
    expect(second[0]).toMatchObject({ prev: lastGood.hash, lastGood: { seq: 3, hash: lastGood.hash } });
    expect(await audit.auditHealth({ rolloutId: 'rollout:demo' })).toMatchObject({
      ok: true,
      segment: 2,
      head: { seq: 5 },
    });
    expect(logs.join('\n')).toMatch(
      /override by alice starts .*rollout%3Ademo\+2\.jsonl after record 3; .* is kept as it is/,
    );
  });

  it('an override is refused without lastGood or reason (AuditInvalid), and on a whole trail that already goes past lastGood (AuditConflict)', async () => {
    for (let seq = 1; seq <= 2; seq++) await audit.appendAudit(event(seq));
    const first = readAuditFile(dir, 'rollout:demo')[0]!;
    expect((await failureOf(audit.appendAudit(event(3, { event: 'audit.override', reason: 'x' })))).type).toBe(
      'AuditInvalid',
    );
    expect(
      (
        await failureOf(
          audit.appendAudit(event(3, { event: 'audit.override', lastGood: { seq: 2, hash: first.hash } })),
        )
      ).message,
    ).toMatch(/reason/);
    expect(
      (
        await failureOf(
          audit.appendAudit(event(5, { event: 'audit.override', reason: 'x', lastGood: { seq: 2, hash: first.hash } })),
        )
      ).message,
    ).toMatch(/expected 3/);
    const fork = await failureOf(
      audit.appendAudit(event(2, { event: 'audit.override', reason: 'x', lastGood: { seq: 1, hash: first.hash } })),
    );
    expect(fork.type).toBe('AuditConflict');
    expect(fork.message).toMatch(/already holds record 2.*would fork the chain/);
    expect(auditFilePath(dir, 'rollout:demo', undefined, 2)).not.toSatisfy(existsSync);
  });

  it('with a key every record carries its MAC; a chain resealed without the key makes the next append AuditCorrupt (bad-mac)', async () => {
    const keyed = createAuditActivities({ auditDir: dir, macKey: KEY });
    for (let seq = 1; seq <= 3; seq++) await keyed.appendAudit(event(seq));
    const records = readAuditFile(dir, 'rollout:demo');
    expect(verifyAuditChain(records, undefined, { key: KEY })).toEqual({ ok: true, count: 3 });
    // Reseal the whole chain (edit record 2, recompute every hash) the way someone without the key can.
    const resealed = [sealRecord({ ...records[0]!, evidence: { seq: 1 } }, GENESIS_HASH)];
    resealed.push(sealRecord({ ...records[1]!, phase: 'phase-forged' }, resealed[0]!.hash));
    resealed.push(sealRecord(records[2]!, resealed[1]!.hash));
    writeFileSync(file(), resealed.map((r) => `${serializeAuditRecord(r)}\n`).join(''));
    expect(verifyAuditChain(resealed)).toEqual({ ok: true, count: 3 });
    const failure = await failureOf(keyed.appendAudit(event(4)));
    expect(failure.type).toBe('AuditCorrupt');
    expect(failure.details).toEqual([{ file: file(), line: 1, seq: 1, problem: 'unsigned', segment: 1 }]);
    expect(await keyed.auditHealth({ rolloutId: 'rollout:demo' })).toMatchObject({ ok: false, problem: 'unsigned' });
  });

  it('audit files are 0600 and the directory 0700, also when found with looser modes (fixed, and said)', async () => {
    await audit.appendAudit(event(1));
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(statSync(file()).mode & 0o777).toBe(0o600);
    chmodSync(dir, 0o755);
    chmodSync(file(), 0o644);
    await audit.appendAudit(event(2));
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(statSync(file()).mode & 0o777).toBe(0o600);
    expect(logs.join('\n')).toMatch(/had mode 755 \(readable by others\); set to 700/);
    expect(logs.join('\n')).toMatch(/rollout%3Ademo\.jsonl had mode 644 \(readable by others\); set to 600/);
  });

  it('an existing audit dir made world-readable before the first append is tightened too', async () => {
    const { mkdirSync } = await import('node:fs');
    mkdirSync(dir, { recursive: true, mode: 0o777 });
    chmodSync(dir, 0o777);
    await audit.appendAudit(event(1));
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(statSync(file()).mode & 0o777).toBe(0o600);
  });
});

describe('the audit key file', () => {
  it("is read by reference: hex of at least 32 bytes, the owner's alone; a bad file is INVALID_INPUT that never shows its content", () => {
    const keyFile = join(dir, '..', 'audit.key');
    ensureAuditKeyFile(keyFile);
    expect(statSync(keyFile).mode & 0o777).toBe(0o600);
    const key = readAuditKey(keyFile);
    expect(key).toHaveLength(32);
    ensureAuditKeyFile(keyFile); // kept across restarts
    expect(readAuditKey(keyFile)).toEqual(key);
    chmodSync(keyFile, 0o644);
    expect(() => readAuditKey(keyFile)).toThrow(/readable by others \(mode 644\); chmod 600 it/);
    writeFileSync(keyFile, 'sekrit-but-short\n', { mode: 0o600 });
    chmodSync(keyFile, 0o600);
    const caught = refusal(() => readAuditKey(keyFile));
    expect(caught.code).toBe('INVALID_INPUT');
    expect(caught.message).not.toContain('sekrit');
  });
});
