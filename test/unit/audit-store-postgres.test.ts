import { randomBytes } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { execFileSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import { Client } from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  createFileAuditStore,
  createPostgresAuditStore,
  openAuditStore,
  parseAuditStore,
  readStorePassword,
  redactStoreUrl,
  SCHEMA_VERSION,
  type AuditStore,
  type PostgresAuditStore,
} from '../../audit';
import { MIGRATIONS } from '../../audit/schema';
import { checkpointBody, checkpointOrigin, signCheckpoint, signedNote } from '../../core/checkpoint';
import { keyPairFromSeed } from '../../core/signing';
import { TrailTree } from '../../core/trail-tree';
import { AUDIT_EVENTS, parseAuditLog, verifyAuditSegments, type AuditEvent } from '../../core/audit';
import { WavegateError } from '../../core/errors';
import { startPostgres, type Postgres } from '../support/postgres';
import { refusal, rejection } from '../support/refusal';

/**
 * The PostgreSQL audit store against a real PostgreSQL (test/support/postgres.ts): the file store's
 * rules over rows, idempotent appends, conflicts refused, concurrent appenders from two pools (two
 * workers) never forking a chain, the migration run again and concurrently.
 */
const ROUTINE = AUDIT_EVENTS.filter((name) => name !== 'audit.override');
const key = Uint8Array.from(randomBytes(32));

let pg: Postgres;
let admin: Client;
const stores: PostgresAuditStore[] = [];
let rollout = 0;
let id = '';

const event = (seq: number, extra: Partial<AuditEvent> = {}): AuditEvent => ({
  seq,
  at: new Date(Date.UTC(2026, 0, 1, 0, 0, seq)).toISOString(),
  rolloutId: id,
  runId: 'run-1',
  event: ROUTINE[seq % ROUTINE.length]!,
  phase: `phase-${seq}`,
  by: 'wavegate',
  reason: null,
  counts: { total: 20, applied: seq },
  evidence: { seq },
  ...extra,
});

function store(opts: { macKey?: Uint8Array } = { macKey: key }): PostgresAuditStore {
  const s = createPostgresAuditStore({ url: pg.url, location: redactStoreUrl(pg.url), password: pg.password, ...opts });
  stores.push(s);
  return s;
}

/** The ApplicationFailure a call fails with. */
const failureOf = (promise: Promise<unknown>) => rejection(promise, ApplicationFailure);

async function rows(
  rolloutId = id,
): Promise<Array<{ seq: string; segment: number; chain_run: string; hash: string; prev: string }>> {
  return (
    await admin.query(
      'SELECT seq, segment, chain_run, hash, prev FROM wavegate_audit_records WHERE rollout_id = $1 ORDER BY chain_run, segment, seq',
      [rolloutId],
    )
  ).rows;
}

/** Edit one stored record in the database behind the store's back (who wrote it: "mallory"). */
async function editRow(seq: number): Promise<void> {
  await admin.query(
    `UPDATE wavegate_audit_records SET record = replace(record, '"by":"wavegate"', '"by":"mallory"') WHERE rollout_id = $1 AND seq = $2`,
    [id, seq],
  );
}

beforeAll(async () => {
  pg = await startPostgres();
  admin = new Client({ connectionString: pg.adminUrl });
  await admin.connect();
  await store().migrate();
}, 120_000);

afterAll(async () => {
  await Promise.all(stores.map((s) => s.close()));
  await admin?.end();
  await pg?.stop();
});

beforeEach(() => {
  id = `rollout:pg-${++rollout}`;
});

describe('schema migration', () => {
  it('runs twice safely and five workers starting at once take turns: one version row, the tables there once', async () => {
    const again = await store().migrate();
    expect(again).toEqual({ from: SCHEMA_VERSION, to: SCHEMA_VERSION });
    // A fresh database: five stores migrate at the same moment (pg_advisory_lock).
    await admin.query('CREATE DATABASE fresh OWNER wavegate');
    const freshUrl = pg.url.replace(/\/wavegate$/, '/fresh');
    const racers = Array.from({ length: 5 }, () =>
      createPostgresAuditStore({ url: freshUrl, location: freshUrl, password: pg.password }),
    );
    stores.push(...racers);
    const results = await Promise.all(racers.map((s) => s.migrate()));
    expect(results.filter((r) => r.from === 0)).toHaveLength(1);
    expect(results.every((r) => r.to === SCHEMA_VERSION)).toBe(true);
    const fresh = new Client({ connectionString: pg.adminUrl.replace(/\/wavegate$/, '/fresh') });
    await fresh.connect();
    try {
      expect((await fresh.query('SELECT version FROM wavegate_schema ORDER BY version')).rows).toEqual(
        MIGRATIONS.map((m) => ({ version: m.version })),
      );
      expect(
        (await fresh.query("SELECT count(*)::int AS n FROM pg_tables WHERE tablename LIKE 'wavegate_audit_%'")).rows[0]
          .n,
      ).toBe(3);
    } finally {
      await fresh.end();
    }
  });
});

describe('appends', () => {
  it("chain records with MACs; the store's segments verify like a file (hash chain, head, every MAC)", async () => {
    const s = store();
    const heads = [];
    for (let seq = 1; seq <= 5; seq++) heads.push(await s.append(event(seq)));
    const stored = await rows();
    expect(stored.map((r) => Number(r.seq))).toEqual([1, 2, 3, 4, 5]);
    for (let i = 1; i < stored.length; i++) expect(stored[i]!.prev).toBe(stored[i - 1]!.hash);
    const verdict = verifyAuditSegments(await s.segments(id), { head: heads.at(-1), key });
    expect(verdict).toMatchObject({ ok: true, count: 5, head: heads.at(-1) });
    expect(await s.health({ rolloutId: id, head: heads.at(-1) })).toMatchObject({
      ok: true,
      head: heads.at(-1),
      segment: 1,
    });
  });

  it('the same record twice (a retried activity, from another worker) is one row and the same head', async () => {
    const a = store();
    const b = store();
    await a.append(event(1));
    const first = await a.append(event(2));
    expect(await b.append(structuredClone(event(2)))).toEqual(first);
    expect(await a.append(event(2))).toEqual(first);
    expect((await rows()).map((r) => Number(r.seq))).toEqual([1, 2]);
  });

  it('a different record at a written seq is a non-retryable AuditConflict and the row is not overwritten', async () => {
    const s = store();
    await s.append(event(1));
    const second = await s.append(event(2));
    const failure = await failureOf(s.append(event(2, { reason: 'different' })));
    expect(failure.type).toBe('AuditConflict');
    expect(failure.nonRetryable).toBe(true);
    expect(failure.message).toContain('record 2 already exists with other content');
    const stored = await rows();
    expect(stored).toHaveLength(2);
    expect(stored[1]!.hash).toBe(second.hash);
    const gap = await failureOf(s.append(event(4)));
    expect(gap.type).toBe('AuditOutOfOrder');
    expect(gap.nonRetryable).toBe(false);
    const invalid = await failureOf(s.append(event(3, { event: 'gate.maybe' as never })));
    expect(invalid.type).toBe('AuditInvalid');
  });

  it('two workers appending the same 40 records at once, out of order and retrying, leave one chain with no fork', async () => {
    const workers = [store(), store()];
    const order = Array.from({ length: 40 }, (_, i) => i + 1).sort(() => Math.random() - 0.5);
    await Promise.all(
      workers.flatMap((w) =>
        order.map(async (seq) => {
          for (let attempt = 0; ; attempt++) {
            try {
              return await w.append(event(seq));
            } catch (err) {
              const type = (err as ApplicationFailure).type;
              if ((type === 'AuditOutOfOrder' || type === 'AuditBusy') && attempt < 400) {
                await new Promise((r) => setTimeout(r, 5 + Math.random() * 20));
                continue;
              }
              throw err;
            }
          }
        }),
      ),
    );
    const stored = await rows();
    expect(stored.map((r) => Number(r.seq))).toEqual(Array.from({ length: 40 }, (_, i) => i + 1));
    for (let i = 1; i < stored.length; i++) expect(stored[i]!.prev).toBe(stored[i - 1]!.hash);
    expect(verifyAuditSegments(await workers[0]!.segments(id), { key })).toMatchObject({ ok: true, count: 40 });
  }, 120_000);

  it('two workers racing with different records for the same next seq: exactly one lands, the other is a conflict, the chain stays linear', async () => {
    const [a, b] = [store(), store()];
    await a.append(event(1));
    for (let seq = 2; seq <= 11; seq++) {
      const results = await Promise.allSettled([
        a.append(event(seq, { by: 'worker-a' })),
        b.append(event(seq, { by: 'worker-b' })),
      ]);
      expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
      const lost = results.find((r) => r.status === 'rejected') as PromiseRejectedResult;
      expect((lost.reason as ApplicationFailure).type).toBe('AuditConflict');
    }
    const stored = await rows();
    expect(stored.map((r) => Number(r.seq))).toEqual(Array.from({ length: 11 }, (_, i) => i + 1));
    expect(verifyAuditSegments(await a.segments(id), { key }).ok).toBe(true);
  }, 60_000);

  it('a row edited in the database (UPDATE) stops the chain: AuditCorrupt naming the seq, health not whole, verify fails at it', async () => {
    const s = store();
    for (let seq = 1; seq <= 4; seq++) await s.append(event(seq));
    await editRow(3);
    const failure = await failureOf(s.append(event(5)));
    expect(failure.type).toBe('AuditCorrupt');
    expect(failure.nonRetryable).toBe(true);
    expect(failure.details?.[0]).toMatchObject({ seq: 3, problem: 'edited', segment: 1 });
    expect(await s.health({ rolloutId: id })).toMatchObject({ ok: false, problem: 'edited' });
    expect(verifyAuditSegments(await s.segments(id), { key }).failure).toMatchObject({ seq: 3, problem: 'edited' });
    expect(await rows()).toHaveLength(4);
  });

  it('after rows found whole (only the rows appended since are re-checked), AuditCorrupt names the row a full check names', async () => {
    const s = store();
    // The append of record 6 found rows 1–5 whole: the next check fetches only the rows after them.
    for (let seq = 1; seq <= 6; seq++) await s.append(event(seq));
    await editRow(6);
    const failure = await failureOf(s.append(event(7)));
    expect(failure.type).toBe('AuditCorrupt');
    expect(failure.details?.[0]).toMatchObject({ line: 6, seq: 6, problem: 'edited', segment: 1 });
    expect(failure.message).toMatch(/ seq 6: record 6 \(line 6\) was edited/);
    // What `wavegate audit --verify` and health (a full check: the failure forgot the prefix) say, word for word.
    const verdict = verifyAuditSegments(await s.segments(id), { key });
    expect(verdict.failure).toMatchObject({ seq: 6, problem: 'edited' });
    expect(failure.message).toContain(`: ${verdict.failure!.message}; no record is written`);
    const health = await s.health({ rolloutId: id });
    expect(health).toMatchObject({ ok: false, line: 6 });
    expect(failure.message.startsWith(`${(health as { reason: string }).reason}; no record is written`)).toBe(true);
  });

  it('an earlier row deleted or edited after many appends is still seen by the next append (the checked prefix is compared by digest)', async () => {
    const s = store();
    for (let seq = 1; seq <= 30; seq++) await s.append(event(seq));
    await admin.query('DELETE FROM wavegate_audit_records WHERE rollout_id = $1 AND seq = 7', [id]);
    const dropped = await failureOf(s.append(event(31)));
    expect(dropped.type).toBe('AuditCorrupt');
    expect(dropped.details?.[0]).toMatchObject({ seq: 7, problem: 'dropped' });
    // A fresh id, warmed, then one character of an early row changed.
    id = `${id}-b`;
    for (let seq = 1; seq <= 30; seq++) await s.append(event(seq));
    await admin.query(
      `UPDATE wavegate_audit_records SET record = replace(record, '"applied":2,', '"applied":3,') WHERE rollout_id = $1 AND seq = 2`,
      [id],
    );
    const edited = await failureOf(s.append(event(31)));
    expect(edited.details?.[0]).toMatchObject({ seq: 2, problem: 'edited' });
    expect(await s.health({ rolloutId: id })).toMatchObject({ ok: false, problem: 'edited' });
  }, 60_000);

  it('an override starts segment 2 after the last good head; appends continue there and the trail verifies', async () => {
    const s = store();
    const heads = [];
    for (let seq = 1; seq <= 3; seq++) heads.push(await s.append(event(seq)));
    await admin.query(`UPDATE wavegate_audit_records SET record = 'not json' WHERE rollout_id = $1 AND seq = 3`, [id]);
    const override = await s.append(
      event(3, { event: 'audit.override', by: 'alice', reason: 'row 3 damaged by a bad restore', lastGood: heads[1]! }),
    );
    const next = await s.append(event(4));
    expect((await rows()).map((r) => [Number(r.seq), r.segment])).toEqual([
      [1, 1],
      [2, 1],
      [3, 1],
      [3, 2],
      [4, 2],
    ]);
    const verdict = verifyAuditSegments(await s.segments(id), { head: next, key });
    expect(verdict.ok).toBe(true);
    expect(verdict.segments[1]!.override).toMatchObject({ by: 'alice', lastGood: heads[1], confirmed: true });
    expect(await s.health({ rolloutId: id, head: next })).toMatchObject({ ok: true, head: next, segment: 2 });
    expect(override.seq).toBe(3);
  });

  it('a new run of a re-used rollout id starts its own chain; the earlier one is kept and listed', async () => {
    const s = store();
    for (let seq = 1; seq <= 3; seq++) await s.append(event(seq));
    await s.append(event(1, { runId: 'run-2' }));
    await s.append(event(2, { runId: 'run-2b' })); // continue-as-new: the seq goes on in the same chain
    expect((await s.segments(id)).flatMap((seg) => seg.text.trim().split('\n'))).toHaveLength(2);
    expect((await s.segments(id, 'run-1')).flatMap((seg) => seg.text.trim().split('\n'))).toHaveLength(3);
    expect(await s.earlierRuns(id)).toEqual(['run-1']);
  });

  it('without the key the MAC check fails on verify; a wrong password is a retryable AuditUnwritable', async () => {
    const unkeyed = store({});
    await unkeyed.append(event(1));
    expect(verifyAuditSegments(await unkeyed.segments(id), { key }).failure).toMatchObject({
      seq: 1,
      problem: 'unsigned',
    });
    const wrong = createPostgresAuditStore({ url: pg.url, location: pg.url, password: 'not-the-password' });
    stores.push(wrong);
    const failure = await failureOf(wrong.append(event(2)));
    expect(failure.type).toBe('AuditUnwritable');
    expect(failure.nonRetryable).toBe(false);
    expect(failure.message).not.toContain('not-the-password');
  });
});

describe('checkpoints beside the trail', () => {
  const logPair = keyPairFromSeed(new Uint8Array(32).fill(31));
  /** A checkpoint of the first `size` records of `records` (as stored), signed. */
  const noteOf = (rolloutId: string, records: Array<{ hash: string }>, size: number) => {
    const body = checkpointBody({ origin: checkpointOrigin(rolloutId), size, root: TrailTree.of(records).root(size) });
    return signedNote(body, [signCheckpoint(body, logPair, 'pg.test')]);
  };
  const recordsOf = async (s: AuditStore, rolloutId: string) =>
    (await s.segments(rolloutId)).flatMap((seg) => parseAuditLog(seg.text).records);
  /** Every answer of the same script, as a value: the notes kept, or the refusal's code. */
  async function script(s: AuditStore, rolloutId: string) {
    const answers: unknown[] = [];
    const step = async (fn: () => Promise<unknown>) =>
      answers.push(
        await fn().then(
          (v) => v ?? 'ok',
          (err: WavegateError) => err.code,
        ),
      );
    await step(() => s.checkpoints(rolloutId));
    for (let seq = 1; seq <= 4; seq++) await s.append({ ...event(seq), rolloutId });
    const records = await recordsOf(s, rolloutId);
    await step(() => s.appendCheckpoint(`${rolloutId}-none`, noteOf(`${rolloutId}-none`, records, 1)));
    await step(() => s.appendCheckpoint(rolloutId, noteOf(`${rolloutId}-other`, records, 1)));
    await step(() => s.appendCheckpoint(rolloutId, 'not a note'));
    for (const size of [2, 2, 1, 4, 3])
      await step(() => s.appendCheckpoint(rolloutId, noteOf(rolloutId, records, size)));
    await step(() => s.checkpoints(rolloutId));
    return { answers, notes: [2, 4].map((size) => noteOf(rolloutId, records, size)) };
  }

  it('PostgreSQL answers as the file store does: once per size, sizes only growing, in order; another origin or no trail refused', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pg-cp-'));
    try {
      const file = await script(createFileAuditStore({ auditDir: dir, macKey: key }), id);
      const database = await script(store(), id);
      expect(database.answers).toEqual(file.answers);
      expect(database.answers).toEqual([
        [],
        'NOT_FOUND',
        'INVALID_INPUT',
        'INVALID_INPUT',
        'ok',
        'ok',
        'ok',
        'ok',
        'ok',
        database.notes,
      ]);
      expect(
        (
          await admin.query('SELECT n, chain_run FROM wavegate_audit_checkpoints WHERE rollout_id = $1 ORDER BY n', [
            id,
          ])
        ).rows,
      ).toEqual([
        { n: '2', chain_run: 'run-1' },
        { n: '4', chain_run: 'run-1' },
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("a re-used id's new run answers its own chain's checkpoints (none yet); the earlier chain's stay", async () => {
    const s = store();
    await s.append(event(1));
    await s.appendCheckpoint(id, noteOf(id, await recordsOf(s, id), 1));
    await s.append({ ...event(1), runId: 'run-2' });
    expect(await s.checkpoints(id)).toEqual([]);
    await s.appendCheckpoint(id, noteOf(id, await recordsOf(s, id), 1));
    expect(await s.checkpoints(id)).toHaveLength(1);
    expect(
      (
        await admin.query('SELECT chain_run FROM wavegate_audit_checkpoints WHERE rollout_id = $1 ORDER BY chain_run', [
          id,
        ])
      ).rows,
    ).toEqual([{ chain_run: 'run-1' }, { chain_run: 'run-2' }]);
  });

  it('a database at schema version 1 (before checkpoints) migrates to the current one, its records kept', async () => {
    await admin.query('CREATE DATABASE oldschema OWNER wavegate');
    const oldUrl = pg.url.replace(/\/wavegate$/, '/oldschema');
    const old = new Client({ connectionString: pg.adminUrl.replace(/\/wavegate$/, '/oldschema') });
    await old.connect();
    try {
      // Version 1 exactly as a worker of that version left it, with a record.
      await old.query(
        'CREATE TABLE wavegate_schema (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())',
      );
      for (const sql of MIGRATIONS[0]!.statements) await old.query(sql);
      await old.query('INSERT INTO wavegate_schema (version) VALUES (1)');
      await old.query('GRANT ALL ON ALL TABLES IN SCHEMA public TO wavegate');
      const v1 = createPostgresAuditStore({ url: oldUrl, location: oldUrl, password: pg.password });
      stores.push(v1);
      await v1.append(event(1));
      expect(await v1.migrate()).toEqual({ from: 1, to: SCHEMA_VERSION });
      expect(SCHEMA_VERSION).toBe(2);
      await v1.appendCheckpoint(id, noteOf(id, await recordsOf(v1, id), 1));
      expect(await v1.checkpoints(id)).toHaveLength(1);
      expect(verifyAuditSegments(await v1.segments(id)).ok).toBe(true);
    } finally {
      await old.end();
    }
  });
});

describe('configuration', () => {
  it('a password in the URL is refused naming --audit-store, without printing it', () => {
    for (const url of [
      'postgres://wavegate:s3cretpw@db.example:5432/wavegate',
      'postgresql://u@db/w?password=s3cretpw',
    ]) {
      const error = refusal(() => parseAuditStore(url));
      expect(error).toBeInstanceOf(WavegateError);
      expect(error.code).toBe('INVALID_INPUT');
      expect(error.message).toContain('--audit-store');
      expect(error.message).toContain('password in the URL is refused');
      expect(error.message).not.toContain('s3cretpw');
    }
    expect(() => parseAuditStore('mysql://u@h/db')).toThrow(/expected "file" or postgres:\/\//);
    expect(() => parseAuditStore('postgres://u@h')).toThrow(/no database name/);
    expect(parseAuditStore(undefined)).toEqual({ kind: 'file' });
    expect(parseAuditStore('postgres://u@h:5/db?sslmode=require')).toMatchObject({
      kind: 'postgres',
      location: 'postgres://u@h:5/db?sslmode=require',
    });
    expect(redactStoreUrl('postgres://u:pw@h/db')).toBe('postgres://u:***@h/db');
  });

  it('the password by file reference: read from a 0600 file, refused when others may read it; the store connects with it', async () => {
    const file = join(pg.passwordFile);
    expect(readStorePassword({ WAVEGATE_AUDIT_STORE_PASSWORD_FILE: file })).toBe(pg.password);
    const loose = `${file}.loose`;
    writeFileSync(loose, `${pg.password}\n`);
    chmodSync(loose, 0o644);
    expect(() => readStorePassword({ WAVEGATE_AUDIT_STORE_PASSWORD_FILE: loose })).toThrow(
      /readable by others \(mode 644\)/,
    );
    const opened = openAuditStore({
      store: pg.url,
      env: { WAVEGATE_AUDIT_STORE_PASSWORD_FILE: file },
      macKey: key,
    }) as PostgresAuditStore;
    stores.push(opened);
    expect(opened.location).toBe(pg.url);
    expect(await opened.append(event(1))).toMatchObject({ seq: 1 });
  });
});

describe('TLS to PostgreSQL: sslmode and sslrootcert in the URL go to pg', () => {
  let tlsPg: Postgres;
  beforeAll(async () => {
    tlsPg = await startPostgres({ tls: true });
  }, 120_000);
  afterAll(async () => {
    await tlsPg?.stop();
  });

  it('verify-full against the CA that signed the server connects (and the session is TLS); another CA is refused as retryable AuditUnwritable', async () => {
    const url = `${tlsPg.url}?sslmode=verify-full&sslrootcert=${encodeURIComponent(tlsPg.caFile!)}`;
    expect(parseAuditStore(url)).toMatchObject({ kind: 'postgres' });
    const good = createPostgresAuditStore({ url, location: url, password: tlsPg.password, macKey: key });
    stores.push(good);
    await good.migrate();
    expect(await good.append(event(1))).toMatchObject({ seq: 1 });
    const check = new Client({ connectionString: tlsPg.adminUrl });
    await check.connect();
    try {
      const sessions = (
        await check.query(
          "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'wavegate'",
        )
      ).rows;
      expect(sessions.length).toBeGreaterThan(0);
      expect(sessions.every((r) => r.ssl === true)).toBe(true);
    } finally {
      await check.end();
    }
    // A CA that did not sign the server's certificate.
    const otherCa = join(dirname(tlsPg.caFile!), 'other-ca.pem');
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'rsa:2048',
        '-nodes',
        '-keyout',
        join(dirname(otherCa), 'other-ca.key'),
        '-out',
        otherCa,
        '-days',
        '1',
        '-subj',
        '/CN=some other CA',
      ],
      { stdio: 'ignore' },
    );
    const wrongUrl = `${tlsPg.url}?sslmode=verify-full&sslrootcert=${encodeURIComponent(otherCa)}`;
    const wrong = createPostgresAuditStore({ url: wrongUrl, location: wrongUrl, password: tlsPg.password });
    stores.push(wrong);
    const failure = await failureOf(wrong.append(event(2)));
    expect(failure.type).toBe('AuditUnwritable');
    expect(failure.message).toMatch(/certificate/i);
  }, 60_000);
});
