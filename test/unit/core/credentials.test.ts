import { describe, expect, it } from 'vitest';
import { findCredentials, inlineCredential, isSecretName } from '../../../core/credentials';
import { scrubCredentials } from '../../../core/health';
import {
  MAX_COMMAND_LENGTH,
  MAX_PAYLOAD_FILE_BYTES,
  parseRevision,
  payloadSourceProblem,
} from '../../../core/revision';
import { WavegateError } from '../../../core/errors';
import { refusal } from '../../support/refusal';

/**
 * Issue 22, "secrets still signable": credentials in any signed device command (core/credentials.ts),
 * refused by the revision schema at sign, plan, start and on the worker and agent; references pass.
 */

/** Each holds the secret `S3cr3t-xyz` (or a token containing it) the scrubbed text must not show. */
const CREDENTIALS: Array<[string, RegExp]> = [
  ['curl -fsS -u ops:S3cr3t-xyz https://127.0.0.1:8443/status', /user:password argument \(curl -u user:\.\.\.\)/],
  ['curl --user ops:S3cr3t-xyz https://h/ok', /user:password argument \(curl --user/],
  ['curl --user=ops:S3cr3t-xyz https://h/ok', /user:password argument \(curl --user/],
  ['curl -fsSu ops:S3cr3t-xyz https://h/ok', /user:password argument \(curl -u/],
  ['curl -uops:S3cr3t-xyz https://h/ok', /user:password argument \(curl -u/],
  ['curl --proxy-user ops:S3cr3t-xyz -x http://proxy:3128 https://h/', /user:password argument \(curl --proxy-user/],
  [
    "curl -H 'Authorization: Bearer S3cr3t-xyz' https://h/app.conf",
    /an Authorization header with a literal credential/,
  ],
  ['wget --header="Authorization: Basic S3cr3t-xyz" https://h/', /an Authorization header/],
  ['curl -H "Proxy-Authorization: S3cr3t-xyz" https://h/', /an Authorization header/],
  ['http GET https://h/ "x-token:Bearer S3cr3t-xyz"', /a bearer token/],
  ['echo Bearer S3cr3t-xyz > /etc/app/auth', /a bearer token/],
  ['mysql -uroot -pS3cr3t-xyz app < /tmp/m.sql', /a password argument \(mysql -p<password>\)/],
  ['mysqldump --password=S3cr3t-xyz app', /a secret-named argument \(--password=\.\.\.\)/],
  ['mysql --password S3cr3t-xyz app', /a secret-named argument \(--password \.\.\.\)/],
  ['sshpass -p S3cr3t-xyz ssh backup@h', /a password argument \(sshpass -p\)/],
  ['sshpass -pS3cr3t-xyz ssh backup@h', /a password argument \(sshpass -p\)/],
  ['PGPASSWORD=S3cr3t-xyz psql -h db -c "select 1"', /a secret-named value \(PGPASSWORD=\.\.\.\)/],
  ['export API_TOKEN="S3cr3t-xyz"; app sync', /a secret-named value \(API_TOKEN=\.\.\.\)/],
  ['docker run -e DB_PASSWORD=S3cr3t-xyz app:2', /a secret-named value \(DB_PASSWORD=\.\.\.\)/],
  ['git clone https://ops:S3cr3t-xyz@git.example.com/app.git', /a user:password@ in a url/],
  ['git clone https://S3cr3t-xyz@github.com/org/app.git', /a user:password@ in a url/],
  ['curl -fsS "https://h/app.conf?access_token=S3cr3t-xyz"', /a secret-named query parameter \(access_token=\.\.\.\)/],
  ['curl -H "X-Api-Key: S3cr3t-xyz" https://h/', /a secret-named value \(X-Api-Key: \.\.\.\)/],
  ['mount -t cifs -o username=ops,password=S3cr3t-xyz //nas/share /mnt', /a secret-named value \(password=\.\.\.\)/],
  ['redis-cli -a S3cr3t-xyz ping', /a password argument \(redis-cli -a\)/],
  ['docker login -u ops -p S3cr3t-xyz registry.example.com', /a password argument \(docker login -p\)/],
  ['openssl pkcs12 -in a.p12 -passin pass:S3cr3t-xyz -nodes', /a literal password \(openssl -passin pass:\.\.\.\)/],
  ['conf=$(curl -u ops:S3cr3t-xyz https://h/conf)', /user:password argument/],
  ['echo "$(curl -su ops:S3cr3t-xyz https://h/conf)" > /etc/app.conf', /user:password argument/],
  ['cat > /etc/app.yaml <<EOF\ndb:\n  password: S3cr3t-xyz\nEOF', /a secret-named value \(password: \.\.\.\)/],
  ['echo \'{"token": "S3cr3t-xyz"}\' > /etc/app.json', /a secret-named value \(token: \.\.\.\)/],
  ['java -Djavax.net.ssl.keyStorePassword=S3cr3t-xyz -jar app.jar', /a secret-named argument/],
];

/** Commands that name where a secret is, or carry none: what an operator writes instead. */
const NO_CREDENTIALS = [
  'curl -fsS --password-file /etc/app/password https://h/ok',
  'app sync --token-env APP_TOKEN',
  'app sync --token-file=/run/secrets/token',
  'curl -H "Authorization: Bearer $TOKEN" https://h/',
  'curl -H "Authorization: Bearer $(cat /etc/app/token)" https://h/',
  'curl -fsS --oauth2-bearer "$TOKEN" https://h/',
  'curl -u root https://h/', // curl prompts: nothing secret is written
  'curl -u ops: https://h/', // an empty password: nothing secret is written
  'curl -u "$USER:$PASS" https://h/',
  'curl -u "ops:$(cat /etc/app/pw)" https://h/',
  'curl --netrc-file /etc/app/netrc https://h/',
  'mysql -u root -p app', // mysql prompts
  'PGPASSWORD="$(cat /etc/pg/pw)" psql -h db',
  'PGPASSFILE=/etc/pg/pgpass psql -h db',
  'sudo -u postgres psql',
  'docker run -u 1000:1000 app:2',
  'sort -u /tmp/x',
  'ssh -p 2222 -o PasswordAuthentication=no backup@h',
  'mkdir -p /etc/app && install -m 0644 "$WAVEGATE_STAGING/app.conf" /etc/app/app.conf',
  'git -c credential.helper=store pull',
  'echo "$T" | docker login --password-stdin -u ops registry.example.com',
  'psql --no-password app',
  'ansible-playbook --ask-pass site.yml',
  'ssh-keygen --key-type ed25519',
  'curl --key /etc/app/client.pem --cert /etc/app/client.crt https://h/',
  'wavegate agent --key /etc/wavegate/device.key --trust /etc/wavegate/trust',
  'git clone ssh://git@github.com/org/app.git',
  'psql postgresql://app@localhost/app',
  'openssl pkcs12 -in a.p12 -passin env:P12_PASSWORD -nodes',
  'openssl enc -d -aes-256-cbc -pass file:/etc/app/key -in a.enc',
  'TOKEN_URL=https://h/oauth/token app login',
  'grep -q "password=" /etc/app.conf || echo "no password set"',
  'sed -i "s/^token=.*/token=/" /etc/app.conf',
  'echo "the bearer of this message"',
  'systemctl restart app && test -s "$HOME/etc/motd"',
  'https://h/x?region=eu&monkey=1&author=me',
];

describe('inline credentials in commands (core/credentials.ts)', () => {
  it.each(CREDENTIALS)('%s is a credential, named by its form; the scrubbed text hides it', (text, what) => {
    expect(inlineCredential(text)).toMatch(what);
    expect(inlineCredential(text)).not.toContain('S3cr3t');
    expect(scrubCredentials(text)).not.toContain('S3cr3t-xyz');
  });

  it.each(NO_CREDENTIALS.map((t) => [t]))('%s carries none', (text) => {
    expect(findCredentials(text)).toEqual([]);
  });

  it('names say secret by a word or by their last segment, and references by their ending', () => {
    for (const name of [
      'PGPASSWORD',
      'api_key',
      'apiKey',
      'X-Amz-Signature',
      'ssh_key',
      '--oauth2-bearer',
      'ansible_become_pass',
      'MYSQL_PWD',
      'client_secret',
    ])
      expect(isSecretName(name), name).toBe(true);
    for (const name of [
      'monkey',
      'author',
      'bypass',
      'password-file',
      'tokenEnv',
      'TOKEN_URL',
      'no-password',
      'key-type',
      'keystore',
      '--ask-pass',
    ])
      expect(isSecretName(name), name).toBe(false);
  });

  it('stays linear on long adversarial text: at most 8 steps per character on 64 KB (the old patterns backtracked quadratically; every pass counts its steps)', () => {
    const n = MAX_COMMAND_LENGTH;
    const fill = (unit: string) => unit.repeat(Math.ceil(n / unit.length)).slice(0, n);
    // Texts that made the regular expressions of 6c519b1 backtrack (each `?`, ` --` or letter a start
    // scanning to the end) and texts aimed at this scanner's own passes.
    const adversarial = [
      'a'.repeat(n),
      `?${fill('token')}`,
      ` --${fill('token')}`,
      fill('a.'),
      fill('=a'),
      fill('token='),
      fill('token: '),
      fill('a://'),
      fill('authorization:'),
      fill('Bearer aaaaaaaa'),
      fill('curl -u a:b '),
      fill('"$('),
      fill('`"'),
      fill('http://u:p@'),
      fill('\\'),
      `curl --user${' '.repeat(n)}`,
      fill('\'"'),
      fill('-pX '),
      // Aimed at the provider-token pass, the program forms and the .pgpass and pipe checks (issue 42).
      fill('ghp_'),
      fill('-----BEGIN RSA PRIVATE KEY-----'),
      fill('-----BEGIN'),
      fill('sk-ant-'),
      fill('AKIA'),
      fill('hooks.slack.com/services/'),
      `htpasswd -b ${fill('a ')}`,
      fill('htpasswd -b a '),
      fill('a:1:b:c:d '),
      fill('echo x | chpasswd '),
      fill('x = '),
      `ldapsearch ${fill('-w ')}`,
      fill('curl -H a:b '),
      `smbclient ${fill('-U a%b ')}`,
      `rabbitmqctl add_user ${fill('a ')}`,
    ];
    for (const text of adversarial) {
      const meter = { steps: 0 };
      findCredentials(text, meter);
      expect(meter.steps, JSON.stringify(text.slice(0, 20))).toBeLessThanOrEqual(8 * text.length);
    }
  });
});

describe('every signed device command refuses a credential (core/revision.ts)', () => {
  const base = {
    profile: 'app',
    revision: 2,
    previous: 1,
    apply: 'systemctl restart app',
    verify: 'systemctl is-active app',
  };
  const refused = (revision: Record<string, unknown>) => refusal(() => parseRevision(revision, 'revisions/2.yaml'));

  it.each<[string, Record<string, unknown>, string]>([
    [
      'apply',
      { apply: "curl -fsS -H 'Authorization: Bearer S3cr3t-xyz' https://h/app.conf -o /etc/app.conf" },
      'apply: has an Authorization header',
    ],
    [
      'verify',
      { verify: 'curl -fsS -u ops:S3cr3t-xyz https://127.0.0.1/ok' },
      'verify: has a password in a user:password argument',
    ],
    [
      'rollback',
      { rollback: 'PGPASSWORD=S3cr3t-xyz psql -c "select rollback()"' },
      'rollback: has a secret-named value (PGPASSWORD=...)',
    ],
    [
      'a health runtime',
      { health: { runtimes: [{ name: 'db', command: 'mysqladmin -uroot -pS3cr3t-xyz ping' }] } },
      'health.runtimes[0].command: has a password argument (mysqladmin -p<password>)',
    ],
    [
      'a health check',
      { health: { checks: [{ name: 'status', command: 'curl -fsS -u ops:S3cr3t-xyz https://127.0.0.1/status' }] } },
      'health.checks[0].command: has a password in a user:password argument',
    ],
    [
      'the error-rate command',
      { health: { errorRate: { command: 'sshpass -p S3cr3t-xyz ssh h cat /run/rate' } } },
      'health.errorRate.command: has a password argument (sshpass -p)',
    ],
  ])(
    '%s: INVALID_INPUT naming the field, what was found and where the secret goes, never the secret',
    (_name, extra, shows) => {
      const err = refused({ ...base, ...extra });
      expect(err).toBeInstanceOf(WavegateError);
      expect(err.code).toBe('INVALID_INPUT');
      expect(err.message).toContain(shows);
      expect(err.message).toContain('read it on the device instead');
      expect(err.message).not.toContain('S3cr3t-xyz');
    },
  );

  it('a 64 KB script of references signs', () => {
    const line = 'curl -fsS -H "Authorization: Bearer $TOKEN" --netrc-file /etc/app/netrc https://h/x -o /tmp/x\n';
    const apply = line.repeat(Math.floor(MAX_COMMAND_LENGTH / line.length));
    expect(parseRevision({ ...base, apply }, 'r.yaml').apply).toBe(apply);
  });
});

describe('payload files are bounded and inside payload/ (core/revision.ts)', () => {
  const file = (size: number) => ({ name: 'app.bin', sha256: 'a'.repeat(64), size, source: 'payload/app.bin' });
  const revision = (size: number) => ({
    profile: 'app',
    revision: 2,
    apply: 'true',
    verify: 'true',
    payload: [file(1), file(size)],
  });

  it(`a size above ${MAX_PAYLOAD_FILE_BYTES} bytes (what a device takes in one file) is refused naming payload[i].size and the value`, () => {
    expect(MAX_PAYLOAD_FILE_BYTES).toBe(64 * 1024 * 1024);
    expect(parseRevision(revision(MAX_PAYLOAD_FILE_BYTES), 'r.yaml').payload[1]!.size).toBe(MAX_PAYLOAD_FILE_BYTES);
    const err = refusal(() => parseRevision(revision(MAX_PAYLOAD_FILE_BYTES + 1), 'r.yaml'));
    expect(err.message).toContain(
      `payload[1].size: is ${MAX_PAYLOAD_FILE_BYTES + 1} bytes, above the ${MAX_PAYLOAD_FILE_BYTES} bytes (64 MiB)`,
    );
    expect(err.message).toContain(`(got ${MAX_PAYLOAD_FILE_BYTES + 1})`);
  });

  it('a source is a relative path inside payload/ by its text', () => {
    expect(payloadSourceProblem('payload/app.conf')).toBeUndefined();
    expect(payloadSourceProblem('./payload/sub/app.conf')).toBeUndefined();
    expect(payloadSourceProblem('../x')).toMatch(/climbs out with "\.\."/);
    expect(payloadSourceProblem('payload/../../x')).toMatch(/climbs out/);
    expect(payloadSourceProblem('/etc/passwd')).toMatch(/absolute path/);
    expect(payloadSourceProblem('C:/x')).toMatch(/absolute path/);
    expect(payloadSourceProblem('payload\\..\\x')).toMatch(/backslash/);
    expect(payloadSourceProblem('files/app.conf')).toMatch(/not inside payload\//);
    expect(payloadSourceProblem('payload')).toMatch(/not inside payload\//);
  });
});
