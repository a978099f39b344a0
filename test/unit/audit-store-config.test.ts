import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parseAuditStore } from '../../audit';
import { pgpassPassword, readPgpass, storeClientConfig } from '../../audit/config';
import type { WavegateError } from '../../core/errors';
import { refusal } from '../support/refusal';

/**
 * `--audit-store` URLs (issue 22): the query parameters pg-connection-string would hand to pg unchecked.
 * Files are read by wavegate with the bounded regular-file reader and given to pg as contents; the
 * authority cannot be overridden from the query; anything but the documented parameters is refused by
 * name. (The same refusals through the real CLI: test/corpus/cases-audit-store.yaml.)
 */
const dir = mkdtempSync(join(tmpdir(), 'wavegate-store-url-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** parseAuditStore's refusal of `url`: always INVALID_INPUT. */
function urlRefusal(url: string, field = '--audit-store'): WavegateError {
  const err = refusal(() => parseAuditStore(url, field));
  expect(err.code).toBe('INVALID_INPUT');
  return err;
}

describe('files named by the URL: read bounded, by wavegate, handed to pg as contents', () => {
  it('/dev/zero, a FIFO, a directory, a missing file and a file above the document bound are refused naming the parameter and the path', () => {
    const fifo = join(dir, 'ca.fifo');
    execFileSync('mkfifo', [fifo]);
    const directory = join(dir, 'key.d');
    mkdirSync(directory);
    const huge = join(dir, 'huge.pem');
    writeFileSync(huge, '');
    truncateSync(huge, 17 * 1024 * 1024); // sparse: above the 16 MB bound without writing it
    const cases: Array<[string, string, RegExp]> = [
      ['sslcert', '/dev/zero', /not a regular file/],
      ['sslrootcert', fifo, /not a regular file/],
      ['sslkey', directory, /cannot read file/],
      ['sslcert', join(dir, 'missing.pem'), /cannot read file \(ENOENT\)/],
      ['sslrootcert', huge, /above the limit of 16777216 bytes/],
    ];
    for (const [parameter, path, why] of cases) {
      const err = urlRefusal(
        `postgres://u@db.example/wavegate?sslmode=verify-full&${parameter}=${encodeURIComponent(path)}`,
      );
      expect(err.message).toContain(
        `--audit-store "postgres://u@db.example/wavegate?sslmode=verify-full&${parameter}=`,
      );
      expect(err.message).toContain(`?${parameter}= ${path}: `);
      expect(err.message).toMatch(why);
      expect(err.details).toMatchObject({ field: '--audit-store', parameter });
    }
  });

  it('a readable CA, certificate and key reach pg as their contents, never as paths; sslmode, connect_timeout and application_name as given', () => {
    const files = { sslrootcert: 'CA PEM\n', sslcert: 'CERT PEM\n', sslkey: 'KEY PEM\n' };
    for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, `${name}.pem`), text);
    const query = Object.keys(files)
      .map((name) => `${name}=${encodeURIComponent(join(dir, `${name}.pem`))}`)
      .join('&');
    const config = parseAuditStore(
      `postgresql://auditor@[::1]:6432/trail?sslmode=verify-full&${query}&connect_timeout=7&application_name=wavegate-eu`,
    );
    expect(config).toMatchObject({
      kind: 'postgres',
      client: {
        host: '::1',
        port: 6432,
        user: 'auditor',
        database: 'trail',
        ssl: { ca: 'CA PEM\n', cert: 'CERT PEM\n', key: 'KEY PEM\n' },
        connectionTimeoutMillis: 7_000,
        application_name: 'wavegate-eu',
      },
    });
    expect(JSON.stringify(config.kind === 'postgres' ? config.client : null)).not.toContain(dir);
    // sslmode=disable keeps TLS off even with a CA named (as pg-connection-string does); no-verify skips the check.
    expect(
      storeClientConfig(
        `postgres://u@h/db?sslmode=disable&sslrootcert=${encodeURIComponent(join(dir, 'sslrootcert.pem'))}`,
      ).ssl,
    ).toBe(false);
    expect(storeClientConfig('postgres://u@h/db?sslmode=no-verify').ssl).toMatchObject({ rejectUnauthorized: false });
    // Defaults: 10 s to connect, the application name wavegate, no TLS settings of its own.
    expect(storeClientConfig('postgres://u@h/db')).toEqual({
      host: 'h',
      user: 'u',
      database: 'db',
      application_name: 'wavegate',
      connectionTimeoutMillis: 10_000,
    });
  });
});

describe('the query cannot say where to connect or as whom', () => {
  it.each([
    ['host', 'attacker.example', "the URL's host"],
    ['hostaddr', '203.0.113.9', "the URL's host"],
    ['port', '6543', "the URL's port"],
    ['user', 'postgres', "the URL's user"],
    ['dbname', 'postgres', "the URL's database"],
    ['database', 'postgres', "the URL's database"],
    ['options', '-c search_path=evil', 'would set server settings for the session'],
  ])('?%s= is refused naming it', (parameter, value, what) => {
    const err = urlRefusal(
      `postgres://auditor@db.example:5432/wavegate?${parameter}=${encodeURIComponent(value)}`,
      '$WAVEGATE_AUDIT_STORE',
    );
    expect(err.message).toContain(`$WAVEGATE_AUDIT_STORE "postgres://auditor@db.example:5432/wavegate?${parameter}=`);
    expect(err.message).toContain(`?${parameter}= ${what.startsWith('would') ? what : `would override ${what}`}`);
    expect(err.message).toMatch(/: refused/);
  });
});

describe('only the documented parameters, once each, in range', () => {
  it('unknown parameters are refused by name with the list allowed', () => {
    for (const parameter of [
      'sslcrl',
      'ssl',
      'uselibpqcompat',
      'statement_timeout',
      'client_encoding',
      'keepalives',
      'passfile',
    ]) {
      const err = urlRefusal(`postgres://u@db.example/wavegate?${parameter}=1`);
      expect(err.message).toContain(
        `?${parameter}= is not a parameter wavegate passes to PostgreSQL; allowed: sslmode, sslrootcert, sslcert, sslkey, application_name, connect_timeout`,
      );
    }
    expect(urlRefusal('postgres://u@db.example/wavegate?%0Aevil=1').message).toContain(
      '?"\\nevil"= is not a parameter',
    );
  });

  it('a parameter twice, an sslmode pg does not know, a connect_timeout of 0 ("for ever") or out of range, an unprintable application_name', () => {
    expect(urlRefusal('postgres://u@h/db?sslmode=disable&sslmode=verify-full').message).toContain(
      '?sslmode= is given more than once',
    );
    expect(urlRefusal('postgres://u@h/db?sslmode=allow').message).toContain(
      '?sslmode= "allow": expected one of disable, prefer, require, verify-ca, verify-full, no-verify',
    );
    for (const t of ['0', '301', '1.5', 'soon', ''])
      expect(urlRefusal(`postgres://u@h/db?connect_timeout=${t}`).message).toContain(
        `?connect_timeout= ${JSON.stringify(t)}: expected whole seconds from 1 to 300`,
      );
    expect(urlRefusal('postgres://u@h/db?application_name=%1B%5B2J').message).toContain(
      '?application_name= "\\u001b[2J": expected 1-63 printable ASCII characters',
    );
    expect(urlRefusal('postgres://u@h/db?sslpassword=hunter2').message).toContain('a password in the URL is refused');
    expect(urlRefusal('postgres://u@h/db?sslpassword=hunter2').message).not.toContain('hunter2');
  });
});

describe('~/.pgpass, as libpq reads it (the password asked for only when the server wants one)', () => {
  const target = { host: 'db.example', port: 5432, database: 'wavegate', user: 'auditor' };

  it('the first matching line wins; * matches a whole field; \\: and \\\\ are literal; # is a comment', () => {
    const text = [
      '# comment',
      'other:5432:wavegate:auditor:no',
      'db.example:5433:*:auditor:wrong-port',
      'db.example:*:wave\\:gate:auditor:escaped-db',
      '*:5432:*:auditor:p\\:w\\\\1:tail',
      'db.example:5432:wavegate:auditor:later',
    ].join('\n');
    expect(pgpassPassword(text, target)).toBe('p:w\\1');
    expect(pgpassPassword(text, { ...target, database: 'wave:gate', port: 6000 })).toBe('escaped-db');
    expect(pgpassPassword('\\*:5432:wavegate:auditor:literal-star\n', target)).toBeUndefined();
    expect(pgpassPassword('db.example:5432:wavegate\n', target)).toBeUndefined();
  });

  it('read from $PGPASSFILE only when a regular file of mode 0600; a FIFO or a loose file is ignored, with the reason, never waited on', () => {
    const good = join(dir, 'pgpass');
    writeFileSync(good, 'db.example:5432:wavegate:auditor:s3cret\n', { mode: 0o600 });
    expect(readPgpass(target, { PGPASSFILE: good })).toEqual({ password: 's3cret' });
    const loose = join(dir, 'pgpass.loose');
    writeFileSync(loose, 'db.example:5432:wavegate:auditor:s3cret\n', { mode: 0o644 });
    expect(readPgpass(target, { PGPASSFILE: loose }).ignored).toMatch(/may be read by others \(mode 644/);
    const fifo = join(dir, 'pgpass.fifo');
    execFileSync('mkfifo', [fifo]);
    expect(readPgpass(target, { PGPASSFILE: fifo }).ignored).toMatch(/not a regular file/);
    expect(readPgpass(target, { PGPASSFILE: join(dir, 'none') })).toEqual({});
    expect(readPgpass(target, { HOME: dir })).toEqual({});
  });
});
