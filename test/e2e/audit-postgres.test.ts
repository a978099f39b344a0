import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { demoDevices, type Fleet } from '../../sim';
import { startDevServerEnv } from '../../workers/dev-server';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { runCli, stopChild, WAVEGATE_BIN, type CliRun } from '../support/cli';
import { fleetWithInventory, scratchDir, writeDemoSpecAt } from '../support/harness';
import { startPostgres, type Postgres } from '../support/postgres';
import { SCHEMA_VERSION } from '../../audit';
import { CHECKPOINTED_EVENTS } from '../../audit/checkpointer';
import { agentKeyPin } from '../../core/agent-auth';
import type { AuditEventName } from '../../core/audit';
import { keyPairFromSeed, secretKeyFile } from '../../core/signing';

/**
 * The shared audit store end to end (issue 11 item 2): a real `wavegate worker --audit-store
 * postgres://…` against a real dev server and a real PostgreSQL, a rollout on the simulator started by
 * `wavegate start --wait`, then `wavegate audit --verify --audit-store …` run from another working
 * directory (no audit files there, nor on the worker). A row edited in the database fails the verify
 * naming its seq; a password in the URL is refused with exit 2 and never printed.
 */
const scratch = scratchDir('audit-pg');
let pg: Postgres;
let env: TestWorkflowEnvironment;
let fleet: Fleet;
let inventory = '';
let worker: ChildProcess | undefined;
let workerOutput = '';
const keyFile = join(scratch.dir, 'audit.key');
/** The worker's checkpoint key (a keygen key file): its checkpoints go to the database too. */
const checkpointPair = keyPairFromSeed(new Uint8Array(32).fill(61));
const checkpointKeyFile = join(scratch.dir, 'checkpoint.key');
const specPath = join(scratch.dir, 'spec.yaml');
const workerDir = join(scratch.dir, 'worker-host');
const operatorDir = join(scratch.dir, 'operator-laptop');
const TASK_QUEUE = 'q-audit-pg';

/** Environment with no Temporal or audit settings leaking in from the test's own. */
function cleanEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  return {
    ...process.env,
    TEMPORAL_ADDRESS: '',
    TEMPORAL_PROFILE: '',
    TEMPORAL_CONFIG_FILE: join(scratch.dir, 'none.toml'),
    WAVEGATE_PROFILES: '',
    WAVEGATE_AUDIT_DIR: '',
    WAVEGATE_AUDIT_KEY_FILE: '',
    WAVEGATE_AUDIT_STORE: '',
    WAVEGATE_AUDIT_STORE_PASSWORD_FILE: '',
    PGPASSWORD: '',
    ...extra,
  };
}

function wavegate(args: string[], opts: { cwd: string; env?: Record<string, string> }): Promise<CliRun> {
  return runCli(args, { cwd: opts.cwd, env: cleanEnv(opts.env ?? {}), timeoutMs: 180_000 });
}

async function admin<T>(fn: (client: Client) => Promise<T>): Promise<T> {
  const client = new Client({ connectionString: pg.adminUrl });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/** The rollout's id, as `start` printed it (each rollout has its own). */
let rolloutId = 'not started';
const verifyArgs = () => [
  'audit',
  rolloutId,
  '--verify',
  '--audit-store',
  pg.url,
  '--audit-key-file',
  keyFile,
  '--address',
  env.address,
];

beforeAll(async () => {
  mkdirSync(workerDir, { recursive: true });
  mkdirSync(operatorDir, { recursive: true });
  writeFileSync(keyFile, `${randomBytes(32).toString('hex')}\n`, { mode: 0o600 });
  writeFileSync(checkpointKeyFile, JSON.stringify(secretKeyFile(checkpointPair)), { mode: 0o600 });
  [pg, env] = await Promise.all([startPostgres(), startDevServerEnv()]);
  ({ fleet, inventoryPath: inventory } = await fleetWithInventory(scratch.dir, demoDevices(4), {
    'pool-a': 0.5,
    'pool-b': 0.5,
  }));
  writeDemoSpecAt(specPath, {
    phases: [{ canary: 1 }, { bulk: 'remainder' }],
    gate: '1s',
  });
}, 180_000);

afterAll(async () => {
  if (worker) await stopChild(worker);
  await fleet?.stop();
  await env?.teardown();
  await pg?.stop();
  scratch.cleanup();
});

describe('the audit in PostgreSQL, end to end', () => {
  it('a password in --audit-store or $WAVEGATE_AUDIT_STORE is refused with exit 2 and never printed; nothing connects', async () => {
    const secret = 'Pw-in-the-url-9f3c';
    const withPassword = pg.url.replace(`${pg.user}@`, `${pg.user}:${secret}@`);
    const flag = await wavegate(
      [
        'worker',
        '--address',
        env.address,
        '--task-queue',
        'q-refused',
        '--profiles',
        join(PROJECT_ROOT, 'profiles'),
        '--audit-store',
        withPassword,
      ],
      { cwd: workerDir },
    );
    expect(flag.code, flag.stderr).toBe(2);
    expect(flag.stderr).toContain('--audit-store');
    expect(flag.stderr).toContain('a password in the URL is refused');
    expect(`${flag.stdout}${flag.stderr}`).not.toContain(secret);
    expect(flag.stdout).not.toMatch(/polling/);
    const fromEnv = await wavegate(['audit', 'rollout:demo', '--verify'], {
      cwd: operatorDir,
      env: { WAVEGATE_AUDIT_STORE: withPassword },
    });
    expect(fromEnv.code, fromEnv.stderr).toBe(2);
    expect(fromEnv.stderr).toContain('$WAVEGATE_AUDIT_STORE');
    expect(`${fromEnv.stdout}${fromEnv.stderr}`).not.toContain(secret);
    // Nothing was migrated by the refused worker.
    expect(
      await admin(
        async (c) =>
          (await c.query("SELECT count(*)::int AS n FROM pg_tables WHERE tablename = 'wavegate_schema'")).rows[0].n,
      ),
    ).toBe(0);
  });

  it('a worker with --audit-store runs a rollout to completion; the records are rows, and --verify from another directory passes', async () => {
    worker = spawn(
      process.execPath,
      [
        WAVEGATE_BIN,
        'worker',
        '--address',
        env.address,
        '--task-queue',
        TASK_QUEUE,
        '--profiles',
        join(PROJECT_ROOT, 'profiles'),
        '--audit-key-file',
        keyFile,
        '--audit-store',
        pg.url,
        '--audit-dir',
        join(workerDir, 'audit'),
        '--checkpoint-key',
        checkpointKeyFile,
        '--checkpoint-name',
        'pg-e2e',
      ],
      { cwd: workerDir, env: cleanEnv({ WAVEGATE_AUDIT_STORE_PASSWORD_FILE: pg.passwordFile }) },
    );
    const w = worker;
    await new Promise<void>((resolve, reject) => {
      const onData = (c: Buffer) => {
        workerOutput += c.toString();
        if (/worker \S+ polling/.test(workerOutput)) resolve();
      };
      w.stdout!.on('data', onData);
      w.stderr!.on('data', onData);
      w.once('exit', (code) => reject(new Error(`worker exited ${code}:\n${workerOutput}`)));
    });
    expect(workerOutput).toContain(`audit store: ${pg.url} (schema version ${SCHEMA_VERSION}, migrated from 0)`);
    expect(workerOutput).not.toContain(pg.password);

    const start = await wavegate(
      [
        'start',
        '-f',
        specPath,
        '--inventory',
        inventory,
        '--profiles',
        join(PROJECT_ROOT, 'profiles'),
        '--address',
        env.address,
        '--task-queue',
        TASK_QUEUE,
        '--wait',
      ],
      { cwd: operatorDir },
    );
    expect(start.code, `${start.stdout}\n${start.stderr}\n${workerOutput}`).toBe(0);
    expect(start.stdout).toMatch(/rollout completed/);
    rolloutId = /^rollout (rollout:demo:\S+) started$/m.exec(start.stdout)?.[1] ?? 'no id printed';

    const rows = await admin(
      async (c) =>
        (
          await c.query<{ seq: string; event: string }>(
            `SELECT seq, event FROM wavegate_audit_records WHERE rollout_id = '${rolloutId}' ORDER BY seq`,
          )
        ).rows,
    );
    expect(rows.map((r) => Number(r.seq))).toEqual(rows.map((_, i) => i + 1));
    expect(rows[0]!.event).toBe('rollout.started');
    expect(rows.at(-1)!.event).toBe('rollout.completed');
    // The file store was not used: the worker's --audit-dir stays empty, the operator's directory has none.
    expect(existsSync(join(workerDir, 'audit', 'rollout%3Ademo.jsonl'))).toBe(false);

    const verify = await wavegate(verifyArgs(), { cwd: operatorDir, env: { PGPASSWORD: pg.password } });
    expect(verify.code, `${verify.stdout}\n${verify.stderr}`).toBe(0);
    expect(verify.stdout).toContain(`audit ${rolloutId}: ${rows.length} records, chain intact`);
    expect(verify.stdout).toMatch(/head: compared with .*record \d+/);
    expect(verify.stdout).toContain('MAC: every record checked against the audit key');
    // Checkpoints (no witness here: kept with the log's signature alone) are rows beside the records, one per
    // transition record's size, and --verify checks them against the rows under the worker's key.
    const sizes = await admin(async (c) =>
      (
        await c.query<{ n: string }>(
          `SELECT n FROM wavegate_audit_checkpoints WHERE rollout_id = '${rolloutId}' ORDER BY n`,
        )
      ).rows.map((r) => Number(r.n)),
    );
    expect(sizes).toEqual(rows.flatMap((r, i) => (CHECKPOINTED_EVENTS.has(r.event as AuditEventName) ? [i + 1] : [])));
    const withKey = await wavegate([...verifyArgs(), '--log-key', agentKeyPin(checkpointPair.publicKey)], {
      cwd: operatorDir,
      env: { PGPASSWORD: pg.password },
    });
    expect(withKey.code, withKey.stdout).toBe(0);
    expect(withKey.stdout).toContain(`checkpoints: ${sizes.length} kept`);
    expect(withKey.stdout).toContain("the log's signatures checked under");

    const listing = await wavegate(['audit', rolloutId, '--audit-store', pg.url], {
      cwd: operatorDir,
      env: { PGPASSWORD: pg.password },
    });
    expect(listing.code, listing.stderr).toBe(0);
    expect(listing.stdout).toContain('rollout.completed');
  }, 300_000);

  it('a row edited in the database (UPDATE) makes --verify exit 1 naming its seq; put back, it passes again', async () => {
    const original = await admin(
      async (c) =>
        (
          await c.query<{ record: string }>(
            `SELECT record FROM wavegate_audit_records WHERE rollout_id = '${rolloutId}' AND seq = 2`,
          )
        ).rows[0]!.record,
    );
    await admin((c) =>
      c.query(
        `UPDATE wavegate_audit_records SET record = replace(record, '"by":"wavegate"', '"by":"mallory"') WHERE rollout_id = '${rolloutId}' AND seq = 2`,
      ),
    );
    const tampered = await wavegate(verifyArgs(), { cwd: operatorDir, env: { PGPASSWORD: pg.password } });
    expect(tampered.code, tampered.stdout).toBe(1);
    expect(tampered.stdout).toMatch(/edited at seq 2: record 2 \(line 2\) was edited/);

    await admin((c) =>
      c.query(`UPDATE wavegate_audit_records SET record = $1 WHERE rollout_id = '${rolloutId}' AND seq = 2`, [
        original,
      ]),
    );
    const restored = await wavegate(verifyArgs(), { cwd: operatorDir, env: { PGPASSWORD: pg.password } });
    expect(restored.code, restored.stdout).toBe(0);
  }, 120_000);

  it('every row of the trail deleted while the workflow holds its head: exit 1 naming the head; an unknown id stays NOT_FOUND (exit 2)', async () => {
    const saved = await admin(
      async (c) =>
        (await c.query(`SELECT * FROM wavegate_audit_records WHERE rollout_id = '${rolloutId}' ORDER BY segment, seq`))
          .rows,
    );
    const last = JSON.parse(saved.at(-1)!.record) as { seq: number; hash: string };
    await admin((c) => c.query(`DELETE FROM wavegate_audit_records WHERE rollout_id = '${rolloutId}'`));
    try {
      const deleted = await wavegate(verifyArgs(), { cwd: operatorDir, env: { PGPASSWORD: pg.password } });
      expect(deleted.code, `${deleted.stdout}\n${deleted.stderr}`).toBe(1);
      expect(deleted.stdout).toMatch(
        new RegExp(
          `trail deleted: the workflow's head \\(${rolloutId} run \\S+ on ${env.address.replace(/\./g, '\\.')}, completed\\) says ${last.seq} records up to seq ${last.seq} \\(hash ${last.hash}\\); the audit store postgres://`,
        ),
      );
      expect(deleted.stderr).not.toContain('NOT_FOUND');
    } finally {
      await admin(async (c) => {
        for (const row of saved) {
          const columns = Object.keys(row);
          await c.query(
            `INSERT INTO wavegate_audit_records (${columns.join(', ')}) VALUES (${columns.map((_, i) => `$${i + 1}`).join(', ')})`,
            columns.map((k) => row[k]),
          );
        }
      });
    }
    const unknown = await wavegate(
      ['audit', 'rollout:no-such', '--verify', '--audit-store', pg.url, '--address', env.address],
      { cwd: operatorDir, env: { PGPASSWORD: pg.password } },
    );
    expect(unknown.code, unknown.stderr).toBe(2);
    expect(unknown.stderr).toMatch(
      /NOT_FOUND: no audit trail for rollout "rollout:no-such" in .*, and no rollout "rollout:no-such" on .*: no such rollout/,
    );
    const restored = await wavegate(verifyArgs(), { cwd: operatorDir, env: { PGPASSWORD: pg.password } });
    expect(restored.code, restored.stdout).toBe(0);
  }, 120_000);

  it('without the password the CLI cannot read the store: a clear failure, not a crash, and no password printed', async () => {
    const run = await wavegate(verifyArgs(), { cwd: operatorDir, env: { HOME: operatorDir } });
    // No password given is configuration: exit 2 (issue 22; test/e2e/audit-store-config.test.ts).
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/audit store postgres:\/\/wavegate@127\.0\.0\.1:\d+\/wavegate: .*password/i);
  }, 60_000);
});
