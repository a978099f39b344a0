import { readFileSync, statSync } from 'node:fs';
import { WavegateError } from '../../core/errors';

/**
 * `--audit-store` / `$WAVEGATE_AUDIT_STORE`: absent or `file` is the file store; `postgres://user@host:port/db`
 * (or `postgresql://`, with `sslmode`, `sslrootcert`… passed through to `pg`) is PostgreSQL. A password in
 * the URL is refused: the URL is printed in logs and lives in shell history and unit files. The password
 * comes from `$PGPASSWORD`, a file named by `$WAVEGATE_AUDIT_STORE_PASSWORD_FILE`, or `~/.pgpass`.
 */
export type AuditStoreConfig = { kind: 'file' } | { kind: 'postgres'; url: string; location: string };

export const MAX_AUDIT_STORE_URL = 2048;

/** The URL fit to print: any password (and anything that looks like userinfo secrets) replaced. */
export function redactStoreUrl(text: string): string {
  return text.replace(/^([a-z][a-z0-9+.-]*:\/\/[^:/@?#]*):[^@/?#]*@/i, '$1:***@').replace(/([?&](?:password|sslpassword)=)[^&#]*/gi, '$1***');
}

export function parseAuditStore(value: string | undefined, field = '--audit-store'): AuditStoreConfig {
  if (value === undefined || value === '' || value === 'file') return { kind: 'file' };
  if (value.length > MAX_AUDIT_STORE_URL) throw new WavegateError('INVALID_INPUT', `${field}: ${value.length} characters; at most ${MAX_AUDIT_STORE_URL}`, { field });
  const shown = JSON.stringify(redactStoreUrl(value));
  if (!/^postgres(?:ql)?:\/\//i.test(value)) {
    throw new WavegateError('INVALID_INPUT', `${field} ${shown}: expected "file" or postgres://user@host:port/database`, { field });
  }
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new WavegateError('INVALID_INPUT', `${field} ${shown}: not a URL; expected postgres://user@host:port/database`, { field });
  }
  if (url.password !== '' || url.searchParams.has('password')) {
    throw new WavegateError(
      'INVALID_INPUT',
      `${field} ${shown}: a password in the URL is refused (it would be logged and stored); give it by $PGPASSWORD, a file named by $WAVEGATE_AUDIT_STORE_PASSWORD_FILE, or ~/.pgpass`,
      { field },
    );
  }
  if (url.hostname === '') throw new WavegateError('INVALID_INPUT', `${field} ${shown}: no host; expected postgres://user@host:port/database`, { field });
  if (url.pathname.length <= 1) throw new WavegateError('INVALID_INPUT', `${field} ${shown}: no database name; expected postgres://user@host:port/database`, { field });
  return { kind: 'postgres', url: value, location: redactStoreUrl(value) };
}

/**
 * The password by reference: `$WAVEGATE_AUDIT_STORE_PASSWORD_FILE` (a file the owner alone may read, its
 * first line), else undefined so that `pg` falls back to `$PGPASSWORD` and `~/.pgpass`. Never printed.
 */
export function readStorePassword(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const path = env.WAVEGATE_AUDIT_STORE_PASSWORD_FILE;
  if (!path) return undefined;
  const field = '$WAVEGATE_AUDIT_STORE_PASSWORD_FILE';
  let stat;
  try {
    stat = statSync(path);
  } catch (err) {
    throw new WavegateError('INVALID_INPUT', `${field} ${JSON.stringify(path)}: cannot read it (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`, { field });
  }
  if (!stat.isFile()) throw new WavegateError('INVALID_INPUT', `${field} ${JSON.stringify(path)}: not a regular file`, { field });
  if ((stat.mode & 0o077) !== 0) throw new WavegateError('INVALID_INPUT', `${field} ${JSON.stringify(path)}: readable by others (mode ${(stat.mode & 0o777).toString(8)}); chmod 600 it`, { field });
  if (stat.size > 4096) throw new WavegateError('INVALID_INPUT', `${field} ${JSON.stringify(path)}: ${stat.size} bytes; expected one line`, { field });
  const line = readFileSync(path, 'utf8').split(/\r?\n/, 1)[0] ?? '';
  if (line.length === 0) throw new WavegateError('INVALID_INPUT', `${field} ${JSON.stringify(path)}: empty first line; expected the password`, { field });
  return line;
}
