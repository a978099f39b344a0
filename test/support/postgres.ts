import { execFile, execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Client } from 'pg';
import { freePort } from '../../sim/ports';

const run = promisify(execFile);

/**
 * A real Debian PostgreSQL for the tests (no mock anywhere): a fresh cluster in a temp dir on a free
 * 127.0.0.1 port, one database and one password-protected login role (scram-sha-256 over TCP). initdb
 * refuses to run as root, so as uid 0 the cluster is owned by `postgres` and every server binary runs
 * through `runuser -u postgres`.
 */
export interface Postgres {
  /** `postgres://<user>@127.0.0.1:<port>/<database>`: no password in it (the store refuses one). */
  url: string;
  /** What a process needs besides the URL: `PGPASSWORD`. */
  env: Record<string, string>;
  /** A 0600 file holding the password, for `WAVEGATE_AUDIT_STORE_PASSWORD_FILE`. */
  passwordFile: string;
  port: number;
  database: string;
  user: string;
  password: string;
  /** With `tls`: the test CA that signed the server's certificate (for `sslrootcert=`). */
  caFile?: string;
  /** A superuser connection URL with its password (tests only: to tamper rows, count them). */
  adminUrl: string;
  /** Stop the server (fast shutdown), wait for it to exit, remove the directory. */
  stop(): Promise<void>;
}

export const POSTGRES_INSTALL_HINT = 'apt-get install -y --no-install-recommends postgresql (or set PG_BINDIR)';

/** Where initdb/pg_ctl are: $PG_BINDIR, Debian's 15, or `pg_config --bindir`. */
export function findPostgresBindir(): string {
  const candidates = [process.env.PG_BINDIR, '/usr/lib/postgresql/15/bin'];
  try {
    candidates.push(execFileSync('pg_config', ['--bindir'], { encoding: 'utf8' }).trim());
  } catch {
    // no pg_config on PATH
  }
  const found = candidates.find((dir) => dir && existsSync(join(dir, 'initdb')) && existsSync(join(dir, 'pg_ctl')));
  if (!found) throw new Error(`PostgreSQL server binaries not found (initdb, pg_ctl): ${POSTGRES_INSTALL_HINT}`);
  return found;
}

const asRoot = process.getuid?.() === 0;

/** Run a server binary as the cluster's owner. */
function serverCommand(bindir: string, binary: string, args: string[]): [string, string[]] {
  const path = join(bindir, binary);
  return asRoot ? ['runuser', ['-u', 'postgres', '--', path, ...args]] : [path, args];
}

/** A throwaway CA and a server certificate for 127.0.0.1 (openssl), owned by the cluster's owner. */
async function makeServerCertificate(
  dir: string,
  owner: number,
  group: number,
): Promise<{ ca: string; cert: string; key: string }> {
  const file = (name: string) => join(dir, name);
  writeFileSync(file('server.ext'), 'subjectAltName=IP:127.0.0.1\n');
  const openssl = (args: string[]) => run('openssl', args, { cwd: dir, timeout: 60_000 });
  await openssl([
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    file('ca.key'),
    '-out',
    file('ca.pem'),
    '-days',
    '2',
    '-subj',
    '/CN=wavegate test CA',
  ]);
  await openssl([
    'req',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    file('server.key'),
    '-out',
    file('server.csr'),
    '-subj',
    '/CN=127.0.0.1',
  ]);
  await openssl([
    'x509',
    '-req',
    '-in',
    file('server.csr'),
    '-CA',
    file('ca.pem'),
    '-CAkey',
    file('ca.key'),
    '-CAcreateserial',
    '-out',
    file('server.pem'),
    '-days',
    '2',
    '-extfile',
    file('server.ext'),
  ]);
  for (const name of ['server.pem', 'server.key']) chownSync(file(name), owner, group);
  chmodSync(file('server.key'), 0o600);
  return { ca: file('ca.pem'), cert: file('server.pem'), key: file('server.key') };
}

export async function startPostgres(opts: { database?: string; user?: string; tls?: boolean } = {}): Promise<Postgres> {
  const bindir = findPostgresBindir();
  const database = opts.database ?? 'wavegate';
  const user = opts.user ?? 'wavegate';
  const dir = mkdtempSync(join(tmpdir(), 'wavegate-pg-'));
  const owner = asRoot ? Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim()) : userInfo().uid;
  const ownerGid = asRoot
    ? Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim())
    : userInfo().gid;
  if (asRoot) chownSync(dir, owner, ownerGid);
  const data = join(dir, 'data');
  const superPassword = randomBytes(18).toString('hex');
  const password = randomBytes(18).toString('hex');
  const superPwFile = join(dir, 'superuser.pw');
  writeFileSync(superPwFile, `${superPassword}\n`, { mode: 0o600 });
  if (asRoot) chownSync(superPwFile, owner, ownerGid);
  const passwordFile = join(dir, 'password');
  writeFileSync(passwordFile, `${password}\n`, { mode: 0o600 });

  const exec = async (binary: string, args: string[]) => {
    const [cmd, argv] = serverCommand(bindir, binary, args);
    try {
      await run(cmd, argv, { cwd: dir, timeout: 60_000 });
    } catch (err) {
      const e = err as { stdout?: string; stderr?: string; message: string };
      const log = existsSync(join(dir, 'server.log')) ? readFileSync(join(dir, 'server.log'), 'utf8').slice(-2000) : '';
      throw new Error(`${binary} ${args.join(' ')} failed: ${e.message}\n${e.stdout ?? ''}\n${e.stderr ?? ''}\n${log}`);
    }
  };

  const tls = opts.tls ? await makeServerCertificate(dir, owner, ownerGid) : undefined;
  await exec('initdb', [
    '-D',
    data,
    '-U',
    'postgres',
    '--auth-local=scram-sha-256',
    '--auth-host=scram-sha-256',
    `--pwfile=${superPwFile}`,
    '-E',
    'UTF8',
    '--no-instructions',
  ]);
  // A free port may be taken between the probe and the bind: try a few.
  let port = 0;
  let lastError: unknown;
  for (let attempt = 0; attempt < 4 && port === 0; attempt++) {
    const candidate = await freePort();
    try {
      await exec('pg_ctl', [
        '-D',
        data,
        '-l',
        join(dir, 'server.log'),
        '-w',
        '-t',
        '60',
        '-o',
        `-p ${candidate} -c listen_addresses=127.0.0.1 -k ${dir} -c fsync=off${tls ? ` -c ssl=on -c ssl_cert_file=${tls.cert} -c ssl_key_file=${tls.key}` : ''}`,
        'start',
      ]);
      port = candidate;
    } catch (err) {
      lastError = err;
    }
  }
  if (port === 0) throw lastError;

  const stop = async () => {
    await exec('pg_ctl', ['-D', data, '-m', 'fast', '-w', '-t', '60', 'stop']).catch(() => {});
    // pg_ctl -w returns once the postmaster is gone; its pid file going is the proof.
    for (let i = 0; i < 100 && existsSync(join(data, 'postmaster.pid')); i++)
      await new Promise((r) => setTimeout(r, 100));
    rmSync(dir, { recursive: true, force: true });
  };

  const adminUrl = `postgres://postgres:${superPassword}@127.0.0.1:${port}/postgres`;
  try {
    const admin = new Client({ connectionString: adminUrl });
    await admin.connect();
    try {
      await admin.query(`CREATE ROLE ${user} LOGIN PASSWORD '${password}'`);
      await admin.query(`CREATE DATABASE ${database} OWNER ${user}`);
    } finally {
      await admin.end();
    }
  } catch (err) {
    await stop();
    throw err;
  }
  return {
    url: `postgres://${user}@127.0.0.1:${port}/${database}`,
    env: { PGPASSWORD: password },
    passwordFile,
    ...(tls ? { caFile: tls.ca } : {}),
    port,
    database,
    user,
    password,
    adminUrl: `postgres://postgres:${superPassword}@127.0.0.1:${port}/${database}`,
    stop,
  };
}
