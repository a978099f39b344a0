import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auditFilePath, createAuditActivities } from '../../audit/file';
import {
  createFileAuditStore,
  createPostgresAuditStore,
  redactStoreUrl,
  type AuditStore,
  type PostgresAuditStore,
} from '../../audit';
import { verifyLinkedTrails } from '../../cli/commands/audit';
import { verifyAuditSegments, type AuditEvent, type AuditHead, type AuditSegment } from '../../core/audit';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { startPostgres, type Postgres } from '../support/postgres';

/**
 * Linked slice trails (issue 26): a rollout's chain holds one `devices.outcome` record per slice with
 * `evidence: { mode, trail, head, devices, counts }`, and each slice writes its own trail of device
 * chunks. Chains are written with the stores' real append (the file store in a temp dir, PostgreSQL
 * from test/support/postgres.ts); `wavegate audit` runs in a real process as in audit-cli.test.ts.
 */
const PROGRAM = `
  require('tsx/cjs');
  const { Command, CommanderError } = require('commander');
  const program = new Command('wavegate').exitOverride();
  require('./cli/commands/audit.ts').register(program);
  program.parseAsync(['node', 'wavegate', ...process.argv.slice(1)]).catch((err) => {
    if (err instanceof CommanderError) process.exitCode = err.exitCode === 0 ? 0 : 2;
    else { process.stderr.write(String(err && err.stack || err)); process.exitCode = 1; }
  });`;

function wavegate(
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['-e', PROGRAM, '--', ...args], {
      cwd: PROJECT_ROOT,
      env: {
        ...process.env,
        TEMPORAL_ADDRESS: '127.0.0.1:1',
        WAVEGATE_AUDIT_KEY_FILE: '',
        WAVEGATE_AUDIT_STORE: '',
        ...env,
      },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

const ROLLOUT = 'rollout:edge:20261205-102300';
const RUN = '0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0';
const sliceId = (k: number) => `${ROLLOUT}/0f1e2d3c/apply-bulk_eu-${k}`;
const at = (i: number) => new Date(Date.UTC(2026, 11, 5, 10, 23, i)).toISOString();

/** A slice of `devices` devices: its own trail of device chunks (at most 3 a chunk), then its head. */
async function writeSlice(store: AuditStore, id: string, devices: number, failed: number): Promise<AuditHead> {
  let head: AuditHead | undefined;
  let seq = 0;
  for (let first = 0; first < devices; first += 3) {
    const chunk = [];
    for (let d = first; d < Math.min(devices, first + 3); d++)
      chunk.push(
        d < failed ? { id: `dev-${d}`, state: 'failed', reason: 'exit 3' } : { id: `dev-${d}`, state: 'applied' },
      );
    seq++;
    head = await store.append({
      seq,
      at: at(seq),
      rolloutId: id,
      runId: `slice-run-${id.length}`,
      event: 'devices.outcome',
      phase: 'bulk eu',
      by: 'wavegate',
      reason: null,
      counts: null,
      evidence: { mode: 'apply', devices: chunk },
    });
  }
  return head!;
}

const SLICES = [
  { devices: 7, failed: 1 },
  { devices: 6, failed: 0 },
  { devices: 5, failed: 2 },
];
const TOTAL_DEVICES = SLICES.reduce((n, s) => n + s.devices, 0);

/** The rollout's chain: started, the phase, one linking record per slice, completed. Returns the slices' heads. */
async function writeRollout(store: AuditStore): Promise<AuditHead[]> {
  const base = { rolloutId: ROLLOUT, runId: RUN, by: 'wavegate', reason: null } as const;
  const rollout = (seq: number, e: Partial<AuditEvent>) =>
    store.append({
      ...base,
      seq,
      at: at(seq),
      event: 'phase.started',
      phase: null,
      counts: null,
      evidence: null,
      ...e,
    });
  await rollout(1, { event: 'rollout.started', counts: { total: TOTAL_DEVICES, pending: TOTAL_DEVICES } });
  await rollout(2, { event: 'phase.started', phase: 'bulk eu' });
  const heads: AuditHead[] = [];
  for (const [k, slice] of SLICES.entries()) {
    const head = await writeSlice(store, sliceId(k), slice.devices, slice.failed);
    heads.push(head);
    const counts = { applied: slice.devices - slice.failed, failed: slice.failed };
    await rollout(3 + k, {
      event: 'devices.outcome',
      phase: 'bulk eu',
      evidence: { mode: 'apply', trail: sliceId(k), head, devices: slice.devices, counts },
    });
  }
  await rollout(3 + SLICES.length, { event: 'rollout.completed', counts: { total: TOTAL_DEVICES } });
  return heads;
}

const macKey = Uint8Array.from(randomBytes(32));
let root: string;
let auditDir: string;
let keyFile: string;
let heads: AuditHead[];

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'wavegate-audit-slices-'));
  auditDir = join(root, 'audit');
  keyFile = join(root, 'worker.key');
  writeFileSync(keyFile, `${Buffer.from(macKey).toString('hex')}\n`, { mode: 0o600 });
  heads = await writeRollout(createFileAuditStore({ auditDir, macKey }));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** Run `body` with a slice's file replaced by `text` (or removed), restored after. */
async function withSliceFile<T>(k: number, text: string | null, body: () => Promise<T>): Promise<T> {
  const path = auditFilePath(auditDir, sliceId(k));
  const pristine = readFileSync(path, 'utf8');
  if (text === null) unlinkSync(path);
  else writeFileSync(path, text, { mode: 0o600 });
  try {
    return await body();
  } finally {
    writeFileSync(path, pristine, { mode: 0o600 });
  }
}

const sliceLines = (k: number) =>
  readFileSync(auditFilePath(auditDir, sliceId(k)), 'utf8')
    .trimEnd()
    .split('\n');
const verifyArgs = () => ['audit', ROLLOUT, '--verify', '--audit-dir', auditDir, '--audit-key-file', keyFile];

describe('linked slice trails in the file store', () => {
  it('a realistic slice id fits the file name bound as it is encoded; a longer one is named by its digest', () => {
    const path = auditFilePath(auditDir, sliceId(1));
    expect(path.endsWith('rollout%3Aedge%3A20261205-102300%2F0f1e2d3c%2Fapply-bulk_eu-1.jsonl')).toBe(true);
    // The longest profile name (63), a second rollout that second (-2), a long phase name, slice 99,999.
    const longest = `rollout:${'p'.repeat(63)}:20261205-102300-2/0f1e2d3c/rollback-${'Bulk_(EU_west,_racks_10-40)'.repeat(3)}-99999`;
    const name = auditFilePath(auditDir, longest).slice(auditDir.length + 1);
    expect(name).toMatch(/^rollout%3Ap{63}%3A20261205-102300-2%2F0f1e~[0-9a-f]{64}\.jsonl$/);
    expect(`${name.slice(0, -'.jsonl'.length)}@${RUN}+99.jsonl.lock`.length).toBeLessThanOrEqual(255);
  });

  it('--verify passes: the chain, every linked trail (MACs checked), and says how many and how many device records', async () => {
    const run = await wavegate(verifyArgs());
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    const out = run.stdout.split('\n');
    expect(out[0]).toBe(
      `audit ${ROLLOUT}: 6 records, chain intact, and 3 linked slice trails (${TOTAL_DEVICES} device records)`,
    );
    expect(out[2]).toMatch(/^MAC: every record checked against the audit key .*, in the linked trails too$/);
    const json = await wavegate([...verifyArgs(), '--json']);
    expect(json.code).toBe(0);
    const verdict = JSON.parse(json.stdout);
    expect(verdict).toMatchObject({ ok: true, count: 6, macChecked: true });
    expect(verdict.linked).toMatchObject({ ok: true, trails: 3, failed: 0, records: 3 + 2 + 2, deviceRecords: 18 });
    expect(
      verdict.linked.results.map((r: { seq: number; trail: string; head: AuditHead }) => [r.seq, r.trail, r.head]),
    ).toEqual(SLICES.map((_, k) => [3 + k, sliceId(k), heads[k]]));
  });

  it('a record edited inside a linked trail fails, naming the rollout, the linking record, the trail and the seq', async () => {
    const lines = sliceLines(1);
    lines[0] = lines[0]!.replace('"state":"applied"', '"state":"failed"');
    await withSliceFile(1, `${lines.join('\n')}\n`, async () => {
      const run = await wavegate(verifyArgs());
      expect(run.code).toBe(1);
      const out = run.stdout.split('\n');
      expect(out[0]).toBe(`audit ${ROLLOUT}: 6 records, chain intact; 1 of 3 linked slice trails FAILED`);
      expect(out[1]).toBe(
        `linked: record 4 of ${ROLLOUT} links slice trail ${sliceId(1)}: edited at seq 1: record 1 (line 1) was edited: ${out[1]!.split('was edited: ')[1]}`,
      );
      expect(out[2]).toBe('linked: 2 linked slice trails (12 device records) intact');
    });
  });

  it('a linked trail rewritten and resealed without the key fails on its MAC, and without a key on the end its link pins', async () => {
    // Someone without the key rewrites a device's outcome and reseals the whole trail: a valid chain.
    const resealedDir = join(root, 'reseal');
    const forger = createAuditActivities({ auditDir: resealedDir });
    for (const [i, line] of sliceLines(2).entries()) {
      const {
        prev: _p,
        hash: _h,
        mac: _m,
        ...event
      } = JSON.parse(line.replace('"state":"failed"', '"state":"applied"'));
      await forger.appendAudit({ ...event, seq: i + 1 });
    }
    await withSliceFile(2, readFileSync(auditFilePath(resealedDir, sliceId(2)), 'utf8'), async () => {
      const keyed = await wavegate([...verifyArgs(), '--json']);
      expect(keyed.code).toBe(1);
      expect(JSON.parse(keyed.stdout).linked.results[2]).toMatchObject({
        ok: false,
        seq: 5,
        trail: sliceId(2),
        problem: 'unsigned',
        problemSeq: 1,
      });
      const unkeyed = await wavegate(['audit', ROLLOUT, '--verify', '--audit-dir', auditDir, '--json']);
      expect(unkeyed.code).toBe(1);
      const verdict = JSON.parse(unkeyed.stdout);
      expect(verdict).toMatchObject({ count: 6, macChecked: false, problem: 'linked-trail', seq: 5 });
      expect(verdict.linked.results[2]).toMatchObject({ ok: false, problem: 'edited', problemSeq: 2 });
      expect(verdict.linked.results[2].message).toMatch(/record 2 has hash [0-9a-f]{12}… but the writer acknowledged/);
    });
  });

  it('a linked trail cut short fails: the link pins an end the trail no longer reaches', async () => {
    await withSliceFile(0, `${sliceLines(0).slice(0, 2).join('\n')}\n`, async () => {
      const run = await wavegate(verifyArgs());
      expect(run.code).toBe(1);
      expect(run.stdout).toContain(
        `linked: record 3 of ${ROLLOUT} links slice trail ${sliceId(0)}: truncated at seq 3: the chain ends at record 2 but the writer acknowledged record 3`,
      );
    });
  });

  it('a linked trail that goes on past the head its link pins fails', async () => {
    const store = createFileAuditStore({ auditDir, macKey });
    const pristine = readFileSync(auditFilePath(auditDir, sliceId(1)), 'utf8');
    try {
      await store.append({
        seq: 3,
        at: at(30),
        rolloutId: sliceId(1),
        runId: `slice-run-${sliceId(1).length}`,
        event: 'devices.outcome',
        phase: 'bulk eu',
        by: 'wavegate',
        reason: null,
        counts: null,
        evidence: { mode: 'apply', devices: [{ id: 'dev-99', state: 'applied' }] },
      });
      const run = await wavegate([...verifyArgs(), '--json']);
      expect(run.code).toBe(1);
      const verdict = JSON.parse(run.stdout);
      expect(verdict).toMatchObject({ ok: false, problem: 'linked-trail', seq: 4 });
      expect(verdict.linked.results[1]).toMatchObject({ ok: false, problem: 'past-head', problemSeq: 3 });
      expect(verdict.message).toMatch(
        /^record 4 of .* links slice trail .*apply-bulk_eu-1, which goes on past the end its link pins \(record 2, hash [0-9a-f]{12}…\): it ends at record 3/,
      );
    } finally {
      writeFileSync(auditFilePath(auditDir, sliceId(1)), pristine);
    }
  });

  it('a missing linked trail fails, saying where it looked', async () => {
    await withSliceFile(2, null, async () => {
      const run = await wavegate(verifyArgs());
      expect(run.code).toBe(1);
      expect(run.stdout).toContain(
        `linked: record 5 of ${ROLLOUT} links slice trail ${sliceId(2)}, which ${auditDir} does not have (the link pins its end at record 2, hash ${heads[2]!.hash.slice(0, 12)}…)`,
      );
    });
  });

  it('the listing shows each linking record readably; --with-slices lists the linked records after it; --json in its documented shape', async () => {
    const plain = await wavegate(['audit', ROLLOUT, '--audit-dir', auditDir]);
    expect(plain.code).toBe(0);
    const lines = plain.stdout.split('\n');
    expect(lines[0]).toMatch(/: 6 records in .*; 3 records link a slice trail \(--with-slices lists their records\)$/);
    expect(lines[4]).toMatch(/^3\s+\S+\s+devices\.outcome\s+bulk eu\s+wavegate/);
    expect(lines[5]).toBe(
      `    ↳ slice trail ${sliceId(0)}: 7 devices (applied 6, failed 1), ends at record 3 (${heads[0]!.hash.slice(0, 12)}…)`,
    );

    const nested = await wavegate(['audit', ROLLOUT, '--audit-dir', auditDir, '--with-slices']);
    expect(nested.code).toBe(0);
    const out = nested.stdout.split('\n');
    const at3 = out.findIndex((l) => l.startsWith(`    ↳ slice trail ${sliceId(0)}`));
    expect(out[at3 + 1]).toMatch(/^ {6}SEQ\s+AT\s+EVENT\s+PHASE\s+BY\s+REASON\s+COUNTS$/);
    expect(out[at3 + 2]).toMatch(
      /^ {6}1\s+\S+\s+devices\.outcome\s+bulk eu\s+wavegate\s+3 devices: failed 1, applied 2\s+-$/,
    );
    expect(out[at3 + 4]).toMatch(/^ {6}3\s+.*1 device: applied 1/);
    expect(out[at3 + 5]).toMatch(/^4\s+\S+\s+devices\.outcome/);

    const json = await wavegate(['audit', ROLLOUT, '--audit-dir', auditDir, '--with-slices', '--json']);
    expect(json.code).toBe(0);
    const listed = JSON.parse(json.stdout);
    expect(listed.rolloutId).toBe(ROLLOUT);
    expect(listed.records.map((r: { seq: number }) => r.seq)).toEqual([1, 2, 3, 4, 5, 6]);
    expect(listed.slices).toHaveLength(3);
    expect(listed.slices[0]).toMatchObject({
      seq: 3,
      trail: sliceId(0),
      head: heads[0],
      mode: 'apply',
      devices: 7,
      counts: { applied: 6, failed: 1 },
    });
    expect(listed.slices[0].records.map((r: { rolloutId: string; seq: number }) => [r.rolloutId, r.seq])).toEqual([
      [sliceId(0), 1],
      [sliceId(0), 2],
      [sliceId(0), 3],
    ]);
    // A missing linked trail in the listing: said, exit 1.
    await withSliceFile(1, null, async () => {
      const gone = await wavegate(['audit', ROLLOUT, '--audit-dir', auditDir, '--with-slices', '--json']);
      expect(gone.code).toBe(1);
      expect(JSON.parse(gone.stdout).slices[1]).toMatchObject({
        trail: sliceId(1),
        records: null,
        error: { code: 'NOT_FOUND' },
      });
      expect(gone.stderr).toContain(`record 4 links slice trail ${sliceId(1)}, which ${auditDir} does not have`);
    });
  });

  it('verifyLinkedTrails, as the board calls it: structured results, trails read a few at a time', async () => {
    const store = createFileAuditStore({ auditDir });
    const segments: AuditSegment[] = await store.segments(ROLLOUT);
    const verdict = verifyAuditSegments(segments, { key: macKey });
    const linked = await verifyLinkedTrails(ROLLOUT, segments, verdict, { auditDir, key: macKey, concurrency: 2 });
    expect(linked).toMatchObject({ ok: true, trails: 3, failed: 0, deviceRecords: TOTAL_DEVICES, notes: [] });
    expect(linked.results.every((r) => r.ok && r.from === ROLLOUT)).toBe(true);
  });
});

describe('links that are not plain', () => {
  it('a slice that wrote no record (head null) passes only while no trail of its id exists; a link without a usable head and a trail linked twice fail', async () => {
    const dir = join(root, 'odd-links');
    const store = createFileAuditStore({ auditDir: dir });
    const id = 'rollout:odd:20261205-102300';
    const empty = `${id}/0f1e2d3c/apply-bulk-0`;
    const once = `${id}/0f1e2d3c/apply-bulk-1`;
    const head = await writeSlice(store, once, 2, 0);
    const link = (seq: number, evidence: unknown) =>
      store.append({
        seq,
        at: at(seq),
        rolloutId: id,
        runId: RUN,
        event: 'devices.outcome',
        phase: 'bulk eu',
        by: 'wavegate',
        reason: null,
        counts: null,
        evidence,
      });
    await link(1, { mode: 'apply', trail: empty, head: null, devices: 0, counts: { total: 0 } });
    await link(2, { mode: 'apply', trail: once, head, devices: 2, counts: { total: 2, applied: 2 } });
    const verifyAll = async () => {
      const segments = await store.segments(id);
      return verifyLinkedTrails(id, segments, verifyAuditSegments(segments), { auditDir: dir });
    };
    expect(await verifyAll()).toMatchObject({ ok: true, trails: 2, deviceRecords: 2 });

    // The slice said it wrote nothing, but the store holds a trail of its id.
    await writeSlice(store, empty, 1, 0);
    expect((await verifyAll()).results[0]).toMatchObject({ ok: false, problem: 'past-head', records: 1 });
    unlinkSync(auditFilePath(dir, empty));

    await link(3, { mode: 'apply', trail: once, head, devices: 2 });
    await link(4, { mode: 'apply', trail: 'elsewhere', head: { seq: 0, hash: 'x' } });
    const odd = await verifyAll();
    expect(odd).toMatchObject({ ok: false, trails: 4, failed: 2 });
    expect(odd.results[2]).toMatchObject({ seq: 3, problem: 'linked-twice' });
    expect(odd.results[2]!.message).toBe(
      `record 3 of ${id} links slice trail ${once}, which record 2 of ${id} links already: each slice's trail is linked once`,
    );
    expect(odd.results[3]).toMatchObject({ seq: 4, trail: 'elsewhere', problem: 'bad-link', head: null });
  });
});

describe('linked slice trails in PostgreSQL', () => {
  let pg: Postgres;
  let store: PostgresAuditStore;
  let pgHeads: AuditHead[];
  const args = () => ['audit', ROLLOUT, '--verify', '--audit-store', pg.url, '--audit-key-file', keyFile];
  const env = () => ({ PGPASSWORD: pg.password });

  beforeAll(async () => {
    pg = await startPostgres();
    store = createPostgresAuditStore({ url: pg.url, location: redactStoreUrl(pg.url), password: pg.password, macKey });
    await store.migrate();
    pgHeads = await writeRollout(store);
  }, 120_000);
  afterAll(async () => {
    await store?.close();
    await pg?.stop();
  });

  async function admin<T>(fn: (client: Client) => Promise<T>): Promise<T> {
    const client = new Client({ connectionString: pg.adminUrl });
    await client.connect();
    try {
      return await fn(client);
    } finally {
      await client.end();
    }
  }

  it('passes with every linked trail; a tampered row in one fails naming it; a deleted one fails', async () => {
    const run = await wavegate(args(), env());
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(run.stdout.split('\n')[0]).toBe(
      `audit ${ROLLOUT}: 6 records, chain intact, and 3 linked slice trails (${TOTAL_DEVICES} device records)`,
    );

    const original = await admin(
      async (c) =>
        (await c.query('SELECT record FROM wavegate_audit_records WHERE rollout_id = $1 AND seq = 2', [sliceId(0)]))
          .rows[0].record as string,
    );
    await admin((c) =>
      c.query('UPDATE wavegate_audit_records SET record = $2 WHERE rollout_id = $1 AND seq = 2', [
        sliceId(0),
        original.replace('"state":"applied"', '"state":"rolled-back"'),
      ]),
    );
    const tampered = await wavegate(args(), env());
    expect(tampered.code).toBe(1);
    expect(tampered.stdout).toContain(
      `linked: record 3 of ${ROLLOUT} links slice trail ${sliceId(0)}: edited at seq 2: record 2 (line 2) was edited`,
    );
    await admin((c) =>
      c.query('UPDATE wavegate_audit_records SET record = $2 WHERE rollout_id = $1 AND seq = 2', [
        sliceId(0),
        original,
      ]),
    );

    // Cut short: its last row deleted.
    const last = await admin(
      async (c) =>
        (
          await c.query('DELETE FROM wavegate_audit_records WHERE rollout_id = $1 AND seq = $2 RETURNING *', [
            sliceId(2),
            pgHeads[2]!.seq,
          ])
        ).rows[0],
    );
    const cut = await wavegate([...args(), '--json'], env());
    expect(cut.code).toBe(1);
    expect(JSON.parse(cut.stdout).linked.results[2]).toMatchObject({ ok: false, problem: 'truncated', seq: 5 });

    // Missing: every row gone.
    const rest = await admin(
      async (c) =>
        (await c.query('DELETE FROM wavegate_audit_records WHERE rollout_id = $1 RETURNING *', [sliceId(2)])).rows,
    );
    const missing = await wavegate(args(), env());
    expect(missing.code).toBe(1);
    expect(missing.stdout).toMatch(
      new RegExp(
        `linked: record 5 of ${ROLLOUT} links slice trail ${sliceId(2).replace(/[/]/g, '\\/')}, which .*127\\.0\\.0\\.1.* does not have`,
      ),
    );
    await admin(async (c) => {
      for (const row of [...rest, last])
        await c.query(
          'INSERT INTO wavegate_audit_records (rollout_id, chain_run, segment, seq, run_id, event, at, prev, hash, record, written_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)',
          [
            row.rollout_id,
            row.chain_run,
            row.segment,
            row.seq,
            row.run_id,
            row.event,
            row.at,
            row.prev,
            row.hash,
            row.record,
            row.written_at,
          ],
        );
    });
    const listed = await wavegate(['audit', ROLLOUT, '--audit-store', pg.url, '--with-slices'], env());
    expect(listed.code).toBe(0);
    expect(listed.stdout).toMatch(/↳ slice trail .*apply-bulk_eu-2: 5 devices \(applied 3, failed 2\)/);
    expect(listed.stdout.match(/^ {6}\d+\s+\S+\s+devices\.outcome/gm)).toHaveLength(7);
  }, 60_000);
});
