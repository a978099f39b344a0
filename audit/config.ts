import { type Stats, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { ClientConfig } from 'pg';
import { parseIntoClientConfig } from 'pg-connection-string';
import { WavegateError } from '../core/errors';
import { checkOwnerOnlyFile, readBytes, readText } from '../intake/files';

/**
 * `--audit-store` / `$WAVEGATE_AUDIT_STORE`: absent or `file` is the file store; `postgres://user@host:port/db`
 * (or `postgresql://`) is PostgreSQL, with only the query parameters in STORE_URL_PARAMETERS. A password in
 * the URL is refused: the URL is printed in logs and lives in shell history and unit files. The password
 * comes from `$WAVEGATE_AUDIT_STORE_PASSWORD_FILE`, `$PGPASSWORD`, or `~/.pgpass`.
 */
export type AuditStoreConfig =
  | { kind: 'file' }
  | { kind: 'postgres'; url: string; location: string; client: StoreClientConfig };

/** What pg is given for a store URL: where to connect and how, with the TLS files' contents (never their paths). */
export type StoreClientConfig = Pick<
  ClientConfig,
  'host' | 'port' | 'user' | 'database' | 'ssl' | 'application_name' | 'connectionTimeoutMillis'
>;

export const MAX_AUDIT_STORE_URL = 2048;
/** How long a connection (TCP, TLS and authentication) may take unless `?connect_timeout=` says otherwise. */
export const STORE_CONNECT_TIMEOUT_MS = 10_000;
const MAX_CONNECT_TIMEOUT_S = 300;

/** pg's sslmode values (prefer, require and verify-ca are verify-full in pg 8; no-verify encrypts without checking). */
const SSL_MODES = ['disable', 'prefer', 'require', 'verify-ca', 'verify-full', 'no-verify'];

/**
 * The query parameters a store URL may carry. Anything else is refused by name: pg-connection-string
 * hands every query parameter to pg, where some change where or as whom it connects (`host`, `port`,
 * `user`: the authority the operator reads would not be the one used), set server settings for the
 * session (`options`), or are read from disk (`sslcert`… are read here instead, bounded).
 */
export const STORE_URL_PARAMETERS = [
  'sslmode',
  'sslrootcert',
  'sslcert',
  'sslkey',
  'application_name',
  'connect_timeout',
] as const;
/** The parameters that name a file: read with the bounded regular-file reader, their contents handed to pg. */
const FILE_PARAMETERS = { sslrootcert: 'ca', sslcert: 'cert', sslkey: 'key' } as const;
/** Parameters that would override what the URL's authority or path says: where to connect and as whom. */
const AUTHORITY_PARAMETERS: Record<string, string> = {
  host: "the URL's host",
  hostaddr: "the URL's host",
  port: "the URL's port",
  user: "the URL's user",
  dbname: "the URL's database",
  database: "the URL's database",
};

/** The URL fit to print: any password (and anything that looks like userinfo secrets) replaced. */
export function redactStoreUrl(text: string): string {
  return text
    .replace(/^([a-z][a-z0-9+.-]*:\/\/[^:/@?#]*):[^@/?#]*@/i, '$1:***@')
    .replace(/([?&](?:password|sslpassword)=)[^&#]*/gi, '$1***');
}

export function parseAuditStore(value: string | undefined, field = '--audit-store'): AuditStoreConfig {
  if (value === undefined || value === '' || value === 'file') return { kind: 'file' };
  if (value.length > MAX_AUDIT_STORE_URL)
    throw new WavegateError('INVALID_INPUT', `${field}: ${value.length} characters; at most ${MAX_AUDIT_STORE_URL}`, {
      field,
    });
  const shown = JSON.stringify(redactStoreUrl(value));
  if (!/^postgres(?:ql)?:\/\//i.test(value)) {
    throw new WavegateError(
      'INVALID_INPUT',
      `${field} ${shown}: expected "file" or postgres://user@host:port/database`,
      { field },
    );
  }
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new WavegateError(
      'INVALID_INPUT',
      `${field} ${shown}: not a URL; expected postgres://user@host:port/database`,
      { field },
    );
  }
  if (url.password !== '' || url.searchParams.has('password') || url.searchParams.has('sslpassword')) {
    throw new WavegateError(
      'INVALID_INPUT',
      `${field} ${shown}: a password in the URL is refused (it would be logged and stored); give it by $PGPASSWORD, a file named by $WAVEGATE_AUDIT_STORE_PASSWORD_FILE, or ~/.pgpass`,
      { field },
    );
  }
  if (url.hostname === '')
    throw new WavegateError(
      'INVALID_INPUT',
      `${field} ${shown}: no host; expected postgres://user@host:port/database`,
      { field },
    );
  if (url.pathname.length <= 1)
    throw new WavegateError(
      'INVALID_INPUT',
      `${field} ${shown}: no database name; expected postgres://user@host:port/database`,
      { field },
    );
  return { kind: 'postgres', url: value, location: redactStoreUrl(value), client: storeClientConfig(value, field) };
}

/**
 * The pg client configuration of a store URL, its query parameters checked: only STORE_URL_PARAMETERS,
 * each once, each value in range; the TLS files read here with the bounded regular-file reader (a FIFO,
 * a device such as /dev/zero or an oversized file is refused naming the parameter) and handed to pg as
 * contents, so pg-connection-string never opens a path. INVALID_INPUT naming `field` and the parameter.
 */
export function storeClientConfig(urlText: string, field = '--audit-store'): StoreClientConfig {
  const shown = JSON.stringify(redactStoreUrl(urlText));
  const url = new URL(urlText);
  const refuse = (name: string, message: string): never => {
    // A parameter's name as given, unless it holds something a terminal would act on.
    const named = /^[A-Za-z0-9_.-]{1,64}$/.test(name) ? name : JSON.stringify(name.slice(0, 64));
    throw new WavegateError('INVALID_INPUT', `${field} ${shown}: ?${named}= ${message}`, { field, parameter: name });
  };
  const names = [...url.searchParams.keys()];
  for (const name of names) {
    const overrides = AUTHORITY_PARAMETERS[name];
    if (overrides !== undefined)
      refuse(
        name,
        `would override ${overrides}: refused; say it in the URL itself (postgres://user@host:port/database)`,
      );
    if (name === 'options')
      refuse(
        name,
        'would set server settings for the session (search_path, role...): refused; the audit store needs none',
      );
    if (!(STORE_URL_PARAMETERS as readonly string[]).includes(name))
      refuse(name, `is not a parameter wavegate passes to PostgreSQL; allowed: ${STORE_URL_PARAMETERS.join(', ')}`);
    if (url.searchParams.getAll(name).length > 1) refuse(name, 'is given more than once');
  }
  const param = (name: string) => url.searchParams.get(name) ?? undefined;

  const sslmode = param('sslmode');
  if (sslmode !== undefined && !SSL_MODES.includes(sslmode))
    refuse('sslmode', `${JSON.stringify(sslmode)}: expected one of ${SSL_MODES.join(', ')}`);
  let connectionTimeoutMillis = STORE_CONNECT_TIMEOUT_MS;
  const timeout = param('connect_timeout');
  if (timeout !== undefined) {
    if (!/^\d{1,4}$/.test(timeout) || Number(timeout) < 1 || Number(timeout) > MAX_CONNECT_TIMEOUT_S)
      refuse(
        'connect_timeout',
        `${JSON.stringify(timeout)}: expected whole seconds from 1 to ${MAX_CONNECT_TIMEOUT_S} (0, "for ever", is not allowed)`,
      );
    connectionTimeoutMillis = Number(timeout) * 1000;
  }
  const applicationName = param('application_name');
  if (applicationName !== undefined && !/^[\x20-\x7e]{1,63}$/.test(applicationName))
    refuse('application_name', `${JSON.stringify(applicationName)}: expected 1-63 printable ASCII characters`);

  const files: { ca?: string; cert?: string; key?: string } = {};
  for (const [name, key] of Object.entries(FILE_PARAMETERS)) {
    const path = param(name);
    if (path === undefined) continue;
    if (path === '') refuse(name, 'is empty; expected the path of a PEM file');
    try {
      files[key] = readBytes(path).toString('utf8');
    } catch (err) {
      if (!(err instanceof WavegateError)) throw err;
      // readBytes names the path and why (not a regular file, too large, missing).
      refuse(name, err.message);
    }
  }

  // pg-connection-string for what it parses (host, port, user, database, sslmode), without the file
  // parameters: it would read them itself, unbounded. Their contents are added as it would add them.
  const forPg = new URL(urlText);
  for (const name of [...Object.keys(FILE_PARAMETERS), 'connect_timeout', 'application_name'])
    forPg.searchParams.delete(name);
  let parsed: ReturnType<typeof parseIntoClientConfig>;
  try {
    parsed = parseIntoClientConfig(forPg.href);
  } catch (err) {
    throw new WavegateError('INVALID_INPUT', `${field} ${shown}: ${(err as Error).message}`, { field });
  }
  let ssl = parsed.ssl;
  if (Object.keys(files).length > 0 && ssl !== false) ssl = { ...(typeof ssl === 'object' ? ssl : {}), ...files };
  return {
    host: parsed.host ?? undefined,
    ...(parsed.port !== undefined ? { port: parsed.port } : {}),
    ...(parsed.user ? { user: parsed.user } : {}),
    database: parsed.database ?? undefined,
    ...(ssl !== undefined ? { ssl } : {}),
    application_name: applicationName ?? 'wavegate',
    connectionTimeoutMillis,
  };
}

const MAX_PASSWORD_FILE_BYTES = 4096;

/**
 * The password by reference: `$WAVEGATE_AUDIT_STORE_PASSWORD_FILE` (a regular file the owner alone may
 * read, its first line, read with the bounded reader: a FIFO never hangs it), else undefined so that
 * `$PGPASSWORD` and `~/.pgpass` are asked when the server wants a password. Never printed.
 */
export function readStorePassword(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const path = env.WAVEGATE_AUDIT_STORE_PASSWORD_FILE;
  if (!path) return undefined;
  const field = '$WAVEGATE_AUDIT_STORE_PASSWORD_FILE';
  checkOwnerOnlyFile(field, path, { maxBytes: MAX_PASSWORD_FILE_BYTES, expected: 'one line', details: { field } });
  let bytes: Buffer;
  try {
    // The file checked above may have been replaced since (by a FIFO, a device): readBytes refuses those.
    bytes = readBytes(path);
  } catch (err) {
    if (!(err instanceof WavegateError)) throw err;
    throw new WavegateError('INVALID_INPUT', `${field} ${err.message}`, { field });
  }
  if (bytes.length > MAX_PASSWORD_FILE_BYTES)
    throw new WavegateError(
      'INVALID_INPUT',
      `${field} ${JSON.stringify(path)}: ${bytes.length} bytes; expected one line`,
      { field },
    );
  const line = bytes.toString('utf8').split(/\r?\n/, 1)[0] ?? '';
  if (line.length === 0)
    throw new WavegateError(
      'INVALID_INPUT',
      `${field} ${JSON.stringify(path)}: empty first line; expected the password`,
      { field },
    );
  return line;
}

/** Where a connection goes and as whom: what a ~/.pgpass line is matched against. */
export interface PgpassTarget {
  host: string;
  port: number;
  database: string;
  user: string;
}

/**
 * The password a .pgpass text holds for `target`, as libpq reads it: lines `host:port:database:user:password`,
 * the first that matches wins, `*` (unescaped, the whole field) matches anything, `\:` and `\\` are a
 * literal colon and backslash, `#` starts a comment line; the password runs to the end of the line or an unescaped colon.
 */
export function pgpassPassword(text: string, target: PgpassTarget): string | undefined {
  const want = [target.host, String(target.port), target.database, target.user];
  const unescapeField = (field: string) => field.replace(/\\(.)/g, '$1');
  for (const line of text.split(/\r?\n/)) {
    if (line === '' || line.startsWith('#')) continue;
    const fields: string[] = [];
    let start = 0;
    for (let i = 0; i < line.length && fields.length < 4; i++) {
      if (line[i] === '\\') i++;
      else if (line[i] === ':') {
        fields.push(line.slice(start, i));
        start = i + 1;
      }
    }
    if (fields.length < 4) continue;
    // The password runs to the end of the line or an unescaped colon.
    if (fields.every((field, i) => field === '*' || unescapeField(field) === want[i]))
      return unescapeField(/^(?:[^:\\]|\\.?)*/.exec(line.slice(start))![0]);
  }
  return undefined;
}

/**
 * `$PGPASSFILE` or `~/.pgpass`, as libpq takes it: ignored (with the reason, for the error that follows)
 * unless a regular file only its owner may read; read with the bounded regular-file reader.
 */
export function readPgpass(
  target: PgpassTarget,
  env: NodeJS.ProcessEnv = process.env,
): { password?: string; ignored?: string } {
  const path = env.PGPASSFILE || join(env.HOME || homedir(), '.pgpass');
  let stat: Stats;
  try {
    stat = statSync(path);
  } catch {
    return {};
  }
  if (!stat.isFile()) return { ignored: `${path} is not a regular file` };
  if ((stat.mode & 0o077) !== 0)
    return {
      ignored: `${path} may be read by others (mode ${(stat.mode & 0o777).toString(8)}; libpq too ignores it unless 0600)`,
    };
  let text: string;
  try {
    text = readText(path);
  } catch (err) {
    if (err instanceof WavegateError) return { ignored: err.message };
    throw err;
  }
  const password = pgpassPassword(text, target);
  return password ? { password } : {};
}
