import { writeFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPostgresAuditStore } from '../../audit';
import { runCli } from '../support/cli';
import { scratchDir } from '../support/harness';
import { startPostgres, type Postgres } from '../support/postgres';
import { rejection } from '../support/refusal';

/**
 * The audit store's connection (issue 22) against a real PostgreSQL that requires a password
 * (scram-sha-256) and a TCP server that never answers: no password is configuration, exit 2 saying the
 * three ways to give one (it was pg's raw "SASL: SCRAM-SERVER-FIRST-MESSAGE: client password must be a
 * string", exit 1); a server that never answers is given up at the connect timeout, naming host and port.
 */
const scratch = scratchDir('audit-store-config');
let pg: Postgres;
let silent: Server;
let silentPort = 0;
const held: Socket[] = [];

/** No password from anywhere: no variable, no password file, a HOME without .pgpass. */
const NO_PASSWORD = {
  PGPASSWORD: '',
  PGPASSFILE: '',
  WAVEGATE_AUDIT_STORE_PASSWORD_FILE: '',
  WAVEGATE_AUDIT_STORE: '',
  HOME: scratch.dir,
};

function wavegate(args: string[], env: Record<string, string> = {}) {
  return runCli(args, {
    cwd: scratch.dir,
    env: {
      ...NO_PASSWORD,
      TEMPORAL_ADDRESS: '',
      TEMPORAL_PROFILE: '',
      TEMPORAL_CONFIG_FILE: join(scratch.dir, 'none.toml'),
      ...env,
    },
    timeoutMs: 120_000,
  });
}

beforeAll(async () => {
  pg = await startPostgres();
  // Accepts connections and says nothing: a server (or a load balancer) that hangs mid-handshake.
  silent = createServer((socket) => {
    held.push(socket);
    socket.on('error', () => {});
  });
  await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
  silentPort = (silent.address() as AddressInfo).port;
}, 180_000);

afterAll(async () => {
  for (const s of held) s.destroy();
  await new Promise((r) => silent?.close(r));
  await pg?.stop();
  scratch.cleanup();
});

describe('the audit store without a password', () => {
  it('wavegate audit: exit 2 naming the user and the three ways to give a password, not a SASL error; the password is never printed', async () => {
    const run = await wavegate(['audit', 'rollout:demo', '--audit-store', pg.url]);
    const shown = `exit ${run.code}\n${run.stderr}`;
    expect(run.code, shown).toBe(2);
    expect(run.stderr, shown).toContain(
      `INVALID_INPUT: audit store ${pg.url}: the server asks for the password of user "${pg.user}" and none was given`,
    );
    for (const way of ['$PGPASSWORD', '$WAVEGATE_AUDIT_STORE_PASSWORD_FILE', '~/.pgpass'])
      expect(run.stderr, shown).toContain(way);
    expect(run.stderr, shown).not.toMatch(/SASL|SCRAM/);
    expect(`${run.stdout}${run.stderr}`).not.toContain(pg.password);
  }, 120_000);

  it('wavegate worker: exit 2 before it connects to Temporal, with the same words', async () => {
    const run = await wavegate([
      'worker',
      '--address',
      '127.0.0.1:1',
      '--task-queue',
      'q-no-password',
      '--profiles',
      scratch.dir,
      '--audit-store',
      pg.url,
    ]);
    const shown = `exit ${run.code}\n${run.stdout}\n${run.stderr}`;
    expect(run.code, shown).toBe(2);
    expect(run.stderr, shown).toContain(`the server asks for the password of user "${pg.user}" and none was given`);
    expect(run.stdout, shown).not.toMatch(/polling/);
  }, 120_000);

  it('each of the three ways is still taken: ~/.pgpass, $PGPASSWORD, the password file (the store then answers: no audit tables yet)', async () => {
    writeFileSync(join(scratch.dir, '.pgpass'), `127.0.0.1:${pg.port}:${pg.database}:${pg.user}:${pg.password}\n`, {
      mode: 0o600,
    });
    try {
      const ways: Array<Record<string, string>> = [
        {},
        { PGPASSWORD: pg.password, HOME: '/nonexistent' },
        { WAVEGATE_AUDIT_STORE_PASSWORD_FILE: pg.passwordFile, HOME: '/nonexistent' },
      ];
      for (const env of ways) {
        const run = await wavegate(['audit', 'rollout:demo', '--audit-store', pg.url], env);
        expect(run.code, run.stderr).toBe(2);
        // Authenticated: the refusal is about the database's content, not the password.
        expect(run.stderr).toContain('no wavegate audit tables');
      }
    } finally {
      writeFileSync(join(scratch.dir, '.pgpass'), '', { mode: 0o600 });
    }
  }, 180_000);

  it("in a worker's activity it is a retryable AuditUnwritable with the same words (the password may be given later)", async () => {
    const saved = { PGPASSWORD: process.env.PGPASSWORD, PGPASSFILE: process.env.PGPASSFILE, HOME: process.env.HOME };
    Object.assign(process.env, { PGPASSWORD: '', PGPASSFILE: join(scratch.dir, 'no-such-pgpass'), HOME: scratch.dir });
    const store = createPostgresAuditStore({ url: pg.url, location: pg.url });
    try {
      const failure = await rejection(
        store.append({
          seq: 1,
          at: '2026-01-01T00:00:00.000Z',
          rolloutId: 'rollout:x',
          runId: 'run-1',
          event: 'rollout.started',
          phase: null,
          by: 'wavegate',
          reason: null,
          counts: null,
          evidence: null,
        } as never),
        ApplicationFailure,
      );
      expect(failure).toBeInstanceOf(ApplicationFailure);
      expect(failure.type).toBe('AuditUnwritable');
      expect(failure.nonRetryable).toBe(false);
      expect(failure.message).toContain('none was given: set $PGPASSWORD');
    } finally {
      await store.close();
      for (const [k, v] of Object.entries(saved)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
  });
});

describe('a server that never answers', () => {
  it("is given up at ?connect_timeout=, exit 1 naming the host and port, not after pg's default of for ever", async () => {
    const url = `postgres://auditor@127.0.0.1:${silentPort}/wavegate?connect_timeout=1`;
    const run = await wavegate(['audit', 'rollout:demo', '--audit-store', url], { PGPASSWORD: 'not-printed-4c1a' });
    const shown = `exit ${run.code}\n${run.stderr}`;
    expect(run.code, shown).toBe(1);
    expect(run.stderr, shown).toContain(
      `UNAVAILABLE: audit store ${url}: no connection to 127.0.0.1:${silentPort} within 1s (?connect_timeout= sets how long)`,
    );
    expect(run.stderr).not.toContain('not-printed-4c1a');
  }, 120_000);
});
