/**
 * Inline credentials in text that is kept (signed device commands, worker-side urls, webhook urls):
 * whatever is written there is readable by every device that receives the envelope and stays in the
 * workflow history and the audit for ever, so a secret must be passed by reference instead (a file on
 * the device, an environment variable, `$(cat /run/secrets/x)`). Pure and deterministic (no Node APIs):
 * the workflow imports it through core/health.ts.
 *
 * What counts as a credential (docs/formats.md, "Credentials in signed commands"):
 *
 *   - a url's userinfo with a password (`https://user:pw@host`, any scheme), or a bare user/token in an
 *     http(s)/ftp/ws url (`https://TOKEN@github.com`): a plain login name in ssh://, postgres://... is not one;
 *   - an `Authorization:` header with a literal value, and `Bearer <token>` anywhere (8+ token characters);
 *   - a secret-named value: `name=value`, `name: value`, `"name": "value"` and `--name value` where the
 *     name says secret (token, secret, password, passwd, passphrase, apikey/api_key, credential, bearer,
 *     or ends in key, pass, pwd, auth, sig, signature, session, creds: `PGPASSWORD=x`, `?access_token=x`,
 *     `--password x`, `-e DB_PASSWORD=x`, `X-Api-Key: x`, `mount -o username=u,password=x`);
 *   - a user:password argument of curl (`-u`, `--user`, `-U`, `--proxy-user`, also `-fsSu user:pw`);
 *   - a password argument of mysql/mariadb (`-pSECRET`), sshpass (`-p`), redis-cli (`-a`), a registry
 *     `login -p` (docker, podman, helm...), openssl's `pass:` (`-passin pass:x`) and `-k`, the LDAP tools'
 *     `-w`, the MongoDB tools' `-p`, sqlcmd/bcp `-P`, `htpasswd -b file user PASS`, smbclient's
 *     `-U user%PASS`, `lftp -u user,PASS`, `useradd|usermod -p`, `ssh-keygen -N|-P`, `vault login TOKEN`,
 *     `rabbitmqctl add_user|change_password user PASS`, `aws configure set <secret-name> VALUE`, and a
 *     literal echoed or printed into a program that reads a password on stdin (`chpasswd`, `passwd
 *     --stdin`, `--password-stdin`, `htpasswd -i`, `smbpasswd -s`): the command-line forms that the
 *     keyword rules of gitleaks (generic-api-key) and detect-secrets (KeywordDetector), which the
 *     secret-named values above follow, miss; written per program from each tool's manual;
 *   - a header argument `-H 'Name:value'` (curl, wget `--header`) whose name says secret, blank or not;
 *   - a `.pgpass` line (`host:port:db:user:PASSWORD`) in a word or a here-document line;
 *   - a provider's token by its shape (TOKEN_RULES): the rules of secretlint's recommended preset
 *     (@secretlint/secretlint-rule-preset-recommend, the version pinned in package.json, whose own rules
 *     test/unit/core/credentials-rules.test.ts runs as the reference): AWS access key ids, PEM private
 *     keys, GitHub, GitLab, Slack, npm, SendGrid, Stripe, Shopify, OpenAI, Anthropic, Hugging Face,
 *     Groq, Linear, Notion, 1Password, Grafana, HashiCorp Vault, Vercel, Databricks, Docker, Figma,
 *     Cloudflare and Tailscale tokens, and Slack webhook urls.
 *
 * Not a credential: a reference (a value starting with `$`, a backtick, `{{` or `@`, or `-` for stdin),
 * a name that says it holds a reference (`--password-file /x`, `--token-env X`, `TOKEN_URL=...`: the
 * name ends in file, path, env, dir, name, id, url, ...), a flag that is a switch (`--no-password`,
 * `--ask-pass`, `--password-stdin`), an empty value or a yes/no/true/false/none switch value, a key
 * that is a file (`--key /etc/app/client.pem`), `curl -u user` (curl prompts) and `curl -u user:` (an
 * empty password: nothing secret is written), `mysql -p` (prompts), `-u root`, `sudo -u`, `docker -u 1000:1000`.
 *
 * Every pass is a single left-to-right scan (no backtracking regular expressions), so the work is
 * linear in the text: a 64 KB command costs a few hundred thousand steps whatever it holds.
 */

/** One credential found: what it is (names and flags only, never the value) and where its value is. */
export interface CredentialFinding {
  what: string;
  /** The secret's span in the text, [start, end): what scrubbing replaces. */
  start: number;
  end: number;
}

/** Counts the characters the scan looks at (tests hold it to a linear bound). */
export interface ScanMeter {
  steps: number;
}

const STRONG_WORDS = [
  'token',
  'secret',
  'password',
  'passwd',
  'passphrase',
  'apikey',
  'api_key',
  'api-key',
  'credential',
  'bearer',
];
/** Secret only as the whole name or its last segment (`ssh_key`, `X-Amz-Signature`): `monkey`, `author`, `bypass` are not. */
const SUFFIX_WORDS = ['key', 'pass', 'pwd', 'auth', 'sig', 'signature', 'session', 'creds'];
/** A name ending in one of these names where a secret is, or what kind it is, not the secret itself. */
const REFERENCE_ENDINGS = [
  'file',
  'path',
  'env',
  'dir',
  'name',
  'id',
  'url',
  'uri',
  'endpoint',
  'host',
  'port',
  'stdin',
  'type',
  'method',
  'helper',
  'length',
  'size',
  'ttl',
  'header',
  'mode',
  'format',
  'prompt',
  'sock',
  'socket',
  'count',
  'version',
  'algorithm',
  'alg',
  'location',
  'timeout',
  'field',
  'prefix',
  'scheme',
  'policy',
  'source',
  'expiry',
  'expires',
  'expiration',
];
/** Switches, not values: `--no-password`, `--ask-pass`, `--allow-auth`. */
const SWITCH_PREFIXES = [
  'no-',
  'no_',
  'ask-',
  'ask_',
  'prompt-',
  'require-',
  'allow-',
  'enable-',
  'disable-',
  'skip-',
  'with-',
  'without-',
];
const SWITCH_VALUES = new Set([
  'yes',
  'no',
  'true',
  'false',
  'on',
  'off',
  'none',
  'null',
  '0',
  '1',
  'disabled',
  'enabled',
  'required',
  'optional',
  'prompt',
]);
/** Schemes whose bare userinfo (`https://TOKEN@host`) is how tokens are passed. */
const TOKEN_USER_SCHEMES = new Set(['http', 'https', 'ftp', 'ftps', 'ws', 'wss']);

function isSeparator(c: string | undefined): boolean {
  return c === '_' || c === '-' || c === '.';
}

/** Whether a parameter, flag or variable name says its value is a secret (leading dashes ignored). */
export function isSecretName(raw: string): boolean {
  let start = 0;
  while (start < raw.length && raw[start] === '-') start++;
  const name = raw.slice(start).toLowerCase();
  if (name === '' || name.length > 256) return false;
  if (SWITCH_PREFIXES.some((p) => name.startsWith(p))) return false;
  if (REFERENCE_ENDINGS.some((e) => name.length > e.length && name.endsWith(e))) return false;
  if (STRONG_WORDS.some((w) => name.includes(w))) return true;
  return SUFFIX_WORDS.some((w) => name === w || (name.endsWith(w) && isSeparator(name[name.length - w.length - 1])));
}

/** A key-named value that is a file, not key material: `--key /etc/app/client.pem`, `SSH_KEY=~/.ssh/id`. */
function isKeyFile(name: string, value: string): boolean {
  const n = name.toLowerCase();
  if (!(n === 'key' || n.endsWith('key') || n.endsWith('-key') || n.endsWith('_key'))) return false;
  if (STRONG_WORDS.some((w) => n.includes(w))) return false;
  return value.includes('/') || /\.(pem|key|crt|cer|pub|der|p12|pfx|asc|gpg|jks)$/i.test(value.slice(-8));
}

/** A value that names where the secret is, or none at all. */
function isReference(value: string): boolean {
  if (value === '' || value === '-') return true;
  // `usermod -p '!'`, `password: '*'`: a locked or placeholder value, not a secret.
  if (/^[!*]{1,2}$/.test(value)) return true;
  const c = value[0];
  if (c === '$' || c === '`' || c === '@' || value.startsWith('{{')) return true;
  return SWITCH_VALUES.has(value.toLowerCase());
}

const isSpace = (c: string | undefined) => c === ' ' || c === '\t';
const isWhite = (c: string | undefined) => c === ' ' || c === '\t' || c === '\n' || c === '\r';
const NAME_CHAR = /[A-Za-z0-9_.-]/;
const isNameChar = (c: string | undefined) => c !== undefined && NAME_CHAR.test(c);
const SCHEME_CHAR = /[A-Za-z0-9+.-]/;
/** Where a value written in text ends (for scrubbing); quotes are handled by the caller. */
const VALUE_END = new Set([' ', '\t', '\n', '\r', '"', "'", '`', '&', ';', ',', '<', '>', ')', '|']);
const AUTHORITY_END = new Set([
  ' ',
  '\t',
  '\n',
  '\r',
  '"',
  "'",
  '`',
  '/',
  '?',
  '#',
  '<',
  '>',
  '\\',
  '(',
  ')',
  ';',
  '|',
  '&',
  ',',
  '{',
  '}',
]);

function clipName(name: string): string {
  return name.length > 64 ? `${name.slice(0, 61)}...` : name;
}

/**
 * Every inline credential in `text`, in the order of their positions (at most `limit`, default all).
 * Never throws; linear in the length of the text.
 */
export function findCredentials(text: string, meter: ScanMeter = { steps: 0 }): CredentialFinding[] {
  if (typeof text !== 'string' || text === '') return [];
  const found: CredentialFinding[] = [];
  const add = (what: string, start: number, end: number) => found.push({ what, start, end: Math.max(start, end) });
  scanUrls(text, add, meter);
  scanAuthorization(text, add, meter);
  scanPairs(text, add, meter);
  scanWords(text, add, meter);
  scanTokens(text, add, meter);
  return found.sort((a, b) => a.start - b.start || a.end - b.end);
}

type Add = (what: string, start: number, end: number) => void;

/** `scheme://userinfo@host`: a password in the userinfo, or a bare user/token in an http(s) url. */
function scanUrls(text: string, add: Add, meter: ScanMeter): void {
  let from = 0;
  for (;;) {
    const at = text.indexOf('://', from);
    if (at < 0) return;
    meter.steps += at - from + 3;
    let s = at;
    while (s > 0 && at - s < 32 && SCHEME_CHAR.test(text[s - 1]!)) {
      s--;
      meter.steps++;
    }
    const scheme = text
      .slice(s, at)
      .replace(/^[^A-Za-z]+/, '')
      .toLowerCase();
    let end = at + 3;
    let lastAt = -1;
    while (end < text.length && !AUTHORITY_END.has(text[end]!)) {
      if (text[end] === '@') lastAt = end;
      end++;
      meter.steps++;
    }
    if (lastAt > at + 3) {
      const userStart = at + 3;
      const userinfo = text.slice(userStart, lastAt);
      const colon = userinfo.indexOf(':');
      if (colon >= 0) {
        const password = userinfo.slice(colon + 1);
        if (!isReference(password)) add('a user:password@ in a url', userStart + colon + 1, lastAt);
      } else if (TOKEN_USER_SCHEMES.has(scheme) && !isReference(userinfo)) {
        add('a user:password@ in a url', userStart, lastAt); // a bare user here is how tokens are passed
      }
    }
    from = Math.max(end, at + 3);
  }
}

const AUTH_SCHEMES = new Set(['bearer', 'basic', 'token', 'digest', 'negotiate', 'hoba', 'mutual', 'ntlm', 'apikey']);
const TOKEN68 = /[A-Za-z0-9._~+/=-]/;

/** `Authorization: <literal>` (and Proxy-Authorization), and `Bearer <token>` anywhere. */
function scanAuthorization(text: string, add: Add, meter: ScanMeter): void {
  const words = /authorization|bearer/gi;
  for (let m = words.exec(text); m !== null; m = words.exec(text)) {
    meter.steps += m[0].length;
    const start = m.index;
    const before = text[start - 1];
    if (before !== undefined && /[A-Za-z0-9]/.test(before)) continue;
    let i = start + m[0].length;
    if (m[0].length === 'authorization'.length) {
      while (isSpace(text[i])) i++;
      if (text[i] === '"' || text[i] === "'") i++; // `"Authorization": "..."`
      while (isSpace(text[i])) i++;
      if (text[i] !== ':' && text[i] !== '=') {
        words.lastIndex = Math.max(words.lastIndex, i);
        continue;
      }
      i++;
      while (isSpace(text[i]) || text[i] === '"' || text[i] === "'") i++;
      // An optional scheme word, then the credential.
      let j = i;
      while (j < text.length && j - i < 16 && /[A-Za-z0-9-]/.test(text[j]!)) j++;
      if (j > i && isSpace(text[j]) && AUTH_SCHEMES.has(text.slice(i, j).toLowerCase())) {
        i = j;
        while (isSpace(text[i])) i++;
      }
      const valueStart = i;
      while (i < text.length && !VALUE_END.has(text[i]!)) i++;
      meter.steps += i - start;
      if (!isReference(text.slice(valueStart, i)))
        add('an Authorization header with a literal credential', valueStart, i);
      words.lastIndex = Math.max(words.lastIndex, i);
      continue;
    }
    // bearer: at least one blank (or = / :), then 8+ token characters that are not a reference.
    if (!isSpace(text[i]) && text[i] !== '=' && text[i] !== ':') continue;
    i++;
    while (isSpace(text[i])) i++;
    if (text[i] === '"' || text[i] === "'") i++;
    const valueStart = i;
    if (text[i] === '$' || text[i] === '`') continue;
    while (i < text.length && TOKEN68.test(text[i]!)) i++;
    meter.steps += i - start;
    if (i - valueStart >= 8) add('a bearer token (Bearer <token>)', valueStart, i);
    words.lastIndex = Math.max(words.lastIndex, i);
  }
}

/**
 * `name=value`, `name: value` and `"name": "value"` where the name says secret: query parameters,
 * variable assignments (`PGPASSWORD=x psql`, `-e DB_PASSWORD=x`), `--flag=value`, headers, mount options.
 */
function scanPairs(text: string, add: Add, meter: ScanMeter): void {
  // The quote the scan is inside (sh's rules, roughly): a quote right after the sign opens a value only
  // outside quotes; inside `"password="` it closes the string, and the value is empty.
  let quote = '';
  let i = 0;
  while (i < text.length) {
    meter.steps++;
    const c = text[i]!;
    if (c === '\\' && quote !== "'") {
      i += 2;
      continue;
    }
    if (c === '"' || c === "'") {
      if (quote === '') quote = c;
      else if (quote === c) quote = '';
      i++;
      continue;
    }
    if (c !== '=' && c !== ':') {
      i++;
      continue;
    }
    // The name: the run of name characters before the sign, or a quoted one (`"token": ...`).
    let nameEnd = i;
    let quotedName = false;
    if (c === ':' && (text[nameEnd - 1] === '"' || text[nameEnd - 1] === "'")) {
      quotedName = true;
      nameEnd--;
    } else if (c === '=' && isSpace(text[i - 1]) && isSpace(text[i + 1])) {
      // `password = x`, as configuration files write it (what `echo "password = x" >> app.conf` writes).
      while (nameEnd > 0 && i - nameEnd < 4 && isSpace(text[nameEnd - 1])) nameEnd--;
      meter.steps += i - nameEnd;
    }
    let nameStart = nameEnd;
    while (nameStart > 0 && isNameChar(text[nameStart - 1])) {
      nameStart--;
      meter.steps++;
    }
    const name = text.slice(nameStart, nameEnd);
    const before = text[quotedName ? nameStart - 2 : nameStart - 1];
    // `name: value` needs a blank after the colon unless the name was quoted: `user:pw`, `host:port` are not pairs.
    const spaced = isSpace(text[i + 1]);
    if (name === '' || !pairMayFollow(before) || (c === ':' && !quotedName && !spaced) || !isSecretName(name)) {
      i++;
      continue;
    }
    const inQuery = c === '=' && (before === '?' || before === '&');
    let v = i + 1;
    while (isSpace(text[v])) v++;
    let valueStart = v;
    let valueEnd: number;
    let next: number;
    const q = text[v];
    if ((q === '"' || q === "'") && quote === q) {
      // `"password="`: the quote closes the string the name is in; nothing is assigned here.
      i++;
      continue;
    }
    if (q === '"' || q === "'") {
      valueStart = v + 1;
      valueEnd = valueStart;
      while (valueEnd < text.length && text[valueEnd] !== q && text[valueEnd] !== '\n') valueEnd++;
      next = valueEnd < text.length && text[valueEnd] === q ? valueEnd + 1 : valueEnd;
    } else {
      valueEnd = v;
      while (valueEnd < text.length && !VALUE_END.has(text[valueEnd]!) && !(inQuery && text[valueEnd] === '#'))
        valueEnd++;
      next = valueEnd;
    }
    meter.steps += next - i;
    const value = text.slice(valueStart, valueEnd);
    const bare = name.replace(/^-+/, '');
    if (!isReference(value) && !isKeyFile(bare, value)) {
      add(
        `a secret-named ${inQuery ? 'query parameter' : name.startsWith('-') ? 'argument' : 'value'} (${clipName(name)}${c === '=' ? '=' : ': '}...)`,
        valueStart,
        valueEnd,
      );
    }
    // A secret's value is skipped whole: what it contains is part of it (and the scan stays linear).
    i = Math.max(i + 1, next);
  }
}

/** What may stand before a pair's name: `s/^token=/` (sed) and `/x/token=` (a path) are not pairs. */
function pairMayFollow(c: string | undefined): boolean {
  return c === undefined || isWhite(c) || '?&,;{(["\'|`=:'.includes(c);
}

// --- shell words ----------------------------------------------------------------------------------

interface Word {
  value: string;
  /** The position in the text of each character of `value`. */
  at: number[];
}

/**
 * Split a shell script into simple commands of words, roughly as sh does: quotes removed, `;`, `&`, `|`,
 * newlines, parentheses and backticks end a command, `$(` inside double quotes opens one, `#` at a
 * word's start comments out the line. Approximate (no here-documents, no aliases), never throws.
 */
function shellCommands(text: string, meter: ScanMeter): { commands: Word[][]; piped: boolean[] } {
  const commands: Word[][] = [];
  /** Whether each command's output goes into the next (`a | b`). */
  const piped: boolean[] = [];
  let words: Word[] = [];
  let value: string[] = [];
  let at: number[] = [];
  let inWord = false;
  const endWord = () => {
    if (inWord) words.push({ value: value.join(''), at });
    value = [];
    at = [];
    inWord = false;
  };
  const endCommand = (pipe = false) => {
    endWord();
    if (words.length) {
      commands.push(words);
      piped.push(pipe);
    }
    words = [];
  };
  const push = (ch: string, i: number) => {
    value.push(ch);
    at.push(i);
    inWord = true;
  };
  /** What a `)` or backtick closes: a `$(`/backtick opened inside double quotes returns to them. */
  const stack: Array<'dq-paren' | 'dq-tick' | 'paren'> = [];
  let state: 'plain' | 'single' | 'double' = 'plain';
  for (let i = 0; i < text.length; i++) {
    meter.steps++;
    const ch = text[i]!;
    if (state === 'single') {
      if (ch === "'") state = 'plain';
      else push(ch, i);
      continue;
    }
    if (state === 'double') {
      if (ch === '"') state = 'plain';
      else if (ch === '\\' && i + 1 < text.length) push(text[++i]!, i);
      else if ((ch === '$' && text[i + 1] === '(') || ch === '`') {
        if (ch === '$') i++;
        if (stack.length < 64) stack.push(ch === '`' ? 'dq-tick' : 'dq-paren');
        state = 'plain';
        endCommand();
      } else push(ch, i);
      continue;
    }
    if (ch === ' ' || ch === '\t') endWord();
    else if (ch === '|') endCommand(text[i + 1] !== '|' && text[i - 1] !== '|');
    else if (ch === '\n' || ch === ';' || ch === '&') endCommand();
    else if (ch === '(') {
      if (stack.length < 64) stack.push('paren');
      endCommand();
    } else if (ch === ')') {
      endCommand();
      if (stack.pop() === 'dq-paren') state = 'double';
    } else if (ch === '`') {
      endCommand();
      if (stack[stack.length - 1] === 'dq-tick') {
        stack.pop();
        state = 'double';
      }
    } else if (ch === '<' || ch === '>') endWord();
    else if (ch === "'") {
      state = 'single';
      inWord = true;
    } else if (ch === '"') {
      state = 'double';
      inWord = true;
    } else if (ch === '\\') {
      if (text[i + 1] === '\n') i++;
      else if (i + 1 < text.length) push(text[++i]!, i);
    } else if (ch === '#' && !inWord) {
      while (i + 1 < text.length && text[i + 1] !== '\n') {
        i++;
        meter.steps++;
      }
    } else push(ch, i);
  }
  endCommand();
  return { commands, piped };
}

const MYSQL = new Set([
  'mysql',
  'mysqldump',
  'mysqladmin',
  'mysqlimport',
  'mysqlshow',
  'mysqlcheck',
  'mysqlpump',
  'mysqlsh',
  'mariadb',
  'mariadb-dump',
  'mariadb-admin',
  'mariadb-import',
  'mariadb-check',
]);
const LOGIN = new Set(['docker', 'podman', 'nerdctl', 'buildah', 'helm', 'skopeo', 'oras', 'crane']);
const LDAP = [
  'ldapsearch',
  'ldapmodify',
  'ldapadd',
  'ldapdelete',
  'ldapwhoami',
  'ldapcompare',
  'ldapmodrdn',
  'ldapexop',
  'ldappasswd',
];
const MONGO = [
  'mongo',
  'mongosh',
  'mongodump',
  'mongorestore',
  'mongoexport',
  'mongoimport',
  'mongostat',
  'mongotop',
  'mongofiles',
];
/**
 * Short flags whose value is the password, per program (`-w secret` and `-wsecret`). What each tool's
 * manual says the flag is: ldap*'s -w (-y names a file, -W prompts), the MongoDB tools' -p, sqlcmd's -P
 * (mysql's -P is a port), ssh-keygen's -N/-P passphrases, openssl enc's -k.
 */
const SHORT_PASSWORD_FLAGS: ReadonlyMap<string, readonly string[]> = new Map([
  ['sshpass', ['-p']],
  ['redis-cli', ['-a']],
  ...LDAP.map((p): [string, string[]] => [p, p === 'ldappasswd' ? ['-w', '-s', '-a'] : ['-w']]),
  ...MONGO.map((p): [string, string[]] => [p, ['-p']]),
  ['sqlcmd', ['-P']],
  ['bcp', ['-P']],
  ['osql', ['-P']],
  ['useradd', ['-p']],
  ['usermod', ['-p']],
  ['ssh-keygen', ['-N', '-P']],
  ['openssl', ['-k']],
]);
/** `-U user%password` (Samba's tools). */
const SMB = new Set(['smbclient', 'rpcclient', 'smbcacls', 'smbget', 'smbmap', 'smbtree', 'smbpasswd', 'net']);
/** Programs that read a password on stdin when given these words (`echo 'u:pw' | chpasswd`). */
const STDIN_READERS: ReadonlyMap<string, string | undefined> = new Map([
  ['chpasswd', undefined],
  ['passwd', '--stdin'],
  ['smbpasswd', '-s'],
  ['htpasswd', '-i'],
]);
const PROGRAMS = new Set([
  'curl',
  'wget',
  'http',
  'https',
  'htpasswd',
  'lftp',
  'rabbitmqctl',
  'vault',
  'aws',
  ...MYSQL,
  ...LOGIN,
  ...SHORT_PASSWORD_FLAGS.keys(),
  ...SMB,
]);
/** curl's short options that take an argument: in `-fsSu user:pw` the first of them takes the rest. */
const CURL_ARG_OPTIONS = new Set('AbcCdDeEFHKmoPQrtTuUwxXyYz'.split(''));
const OPENSSL_PASS_FLAGS = new Set(['-passin', '-passout', '-pass', '-password', '-kfile']);

function basename(word: string): string {
  const slash = word.lastIndexOf('/');
  return slash >= 0 ? word.slice(slash + 1) : word;
}

/** The span in the text of `w`'s value from character `from` on. */
function wordSpan(w: Word, from: number): [number, number] {
  return [w.at[from] ?? 0, (w.at[w.value.length - 1] ?? 0) + 1];
}

/** Report `w`'s value from `from` on as `what`, unless it is a reference or empty. */
function literalValue(add: Add, w: Word, from: number, what: string): void {
  if (isReference(w.value.slice(from))) return;
  const [s, e] = wordSpan(w, from);
  add(what, s, e);
}

/** `-p x` or `-px` (not `--p...`): the value reported as `what`; whether the word was this flag. */
function shortFlagValue(add: Add, w: Word, next: Word | undefined, flag: string, what: string): boolean {
  const v = w.value;
  if (v === flag) {
    if (next) literalValue(add, next, 0, what);
    return true;
  }
  if (v.startsWith(flag) && v.length > flag.length && !v.startsWith('--')) {
    literalValue(add, w, flag.length, what);
    return true;
  }
  return false;
}

/** curl's user:password argument in `w` (and the next word), if `w` is -u/--user/-U/--proxy-user or a group ending in one. */
function curlUserArgument(w: Word, next: Word | undefined): { word: Word; from: number; flag: string } | undefined {
  const v = w.value;
  if (v === '--user' || v === '--proxy-user') return next && { word: next, from: 0, flag: v };
  if (v.startsWith('--user=') || v.startsWith('--proxy-user='))
    return { word: w, from: v.indexOf('=') + 1, flag: v.slice(0, v.indexOf('=')) };
  if (v.startsWith('--')) return undefined;
  for (let c = 1; c < v.length; c++) {
    const opt = v[c]!;
    if (!CURL_ARG_OPTIONS.has(opt)) continue;
    if (opt !== 'u' && opt !== 'U') return undefined;
    return c + 1 < v.length
      ? { word: w, from: c + 1, flag: `-${opt}` }
      : next && { word: next, from: 0, flag: `-${opt}` };
  }
  return undefined;
}

/** Flags followed by a value that are secret by what they are, per program; and what goes between programs. */
function scanWords(text: string, add: Add, meter: ScanMeter): void {
  const { commands, piped } = shellCommands(text, meter);
  commands.forEach((words, c) => {
    scanCommand(words, add, meter);
    for (const w of words) pgpassLine(w, add, meter);
    const next = commands[c + 1];
    if (piped[c] && next && readsPasswordOnStdin(next)) echoedLiterals(words, add);
  });
}

/** One simple command's words: the program they belong to, and the flags that carry a password. */
function scanCommand(words: Word[], add: Add, meter: ScanMeter): void {
  let program: string | undefined;
  let login = false;
  /** Words after the program that are not options: what positional forms count. */
  let positional: Word[] = [];
  /** The letters of the single-dash option groups seen after the program (`-bc` → "bc"), for htpasswd. */
  let letters = '';
  for (let k = 0; k < words.length; k++) {
    const w = words[k]!;
    const v = w.value;
    meter.steps++;
    if (!v.startsWith('-') || v === '-' || v === '--') {
      const base = basename(v);
      if (PROGRAMS.has(base) && (program === undefined || !positionalProgram(program))) {
        program = base;
        login = false;
        positional = [];
        letters = '';
      } else if (v === 'login' && program && LOGIN.has(program)) login = true;
      else if (program) {
        positional.push(w);
        positionalPassword(program, positional, letters, add);
      }
      continue;
    }
    if (/^-[A-Za-z]{1,8}$/.test(v) && letters.length < 64) letters += v.slice(1);
    const next = words[k + 1];
    const nextValue = next && !next.value.startsWith('-') ? next : undefined;
    if (program && programFlag(program, login, w, nextValue, add)) {
      if (nextValue && (v.length === 2 || v.startsWith('--')) && !v.includes('=')) k++;
      continue;
    }
    // --name value (the `--name=value` form is a pair: scanPairs).
    if (v.includes('=') || !nextValue) continue;
    const name = v.replace(/^-+/, '');
    if (isSecretName(name) && !isKeyFile(name, nextValue.value))
      literalValue(add, nextValue, 0, `a secret-named argument (${clipName(v)} ...)`);
  }
}

/** Programs whose positional words are checked (htpasswd's, rabbitmqctl's...): a later word is not a program. */
function positionalProgram(program: string): boolean {
  return program === 'htpasswd' || program === 'rabbitmqctl' || program === 'vault' || program === 'aws';
}

/**
 * A flag of `program` that carries a password in `w` or the next word; whether `w` was one. curl's
 * user:password and header arguments, mysql's -pX, the short password flags, Samba's user%password,
 * lftp's user,password, openssl's pass:, a registry login's -p.
 */
function programFlag(program: string, login: boolean, w: Word, next: Word | undefined, add: Add): boolean {
  const v = w.value;
  if (program === 'curl') {
    const user = curlUserArgument(w, next);
    if (user) {
      const colon = user.word.value.indexOf(':', user.from);
      if (colon >= 0)
        literalValue(add, user.word, colon + 1, `a password in a user:password argument (curl ${user.flag} user:...)`);
      return true;
    }
  }
  if (program === 'curl' || program === 'wget' || program === 'http' || program === 'https') {
    const header = headerArgument(w, next);
    if (header) {
      secretHeader(header.word, header.from, add);
      return true;
    }
  }
  if (MYSQL.has(program) && v.startsWith('-p') && v.length > 2) {
    literalValue(add, w, 2, `a password argument (${program} -p<password>)`);
    return true;
  }
  for (const flag of SHORT_PASSWORD_FLAGS.get(program) ?? []) {
    // openssl's options are words (`-kfile`, `-keyform`), never a flag with its value joined.
    if (program === 'openssl' && v !== flag) continue;
    if (shortFlagValue(add, w, next, flag, `a password argument (${program} ${flag})`)) return true;
  }
  if (login && shortFlagValue(add, w, next, '-p', `a password argument (${program} login -p)`)) return true;
  if (SMB.has(program) && (v === '-U' || v.startsWith('-U') || v === '--user' || v.startsWith('--user='))) {
    const word = v === '-U' || v === '--user' ? next : w;
    const from = v.startsWith('--user=') ? 7 : v === '-U' || v === '--user' ? 0 : 2;
    const percent = word ? word.value.indexOf('%', from) : -1;
    if (word && percent >= 0)
      literalValue(add, word, percent + 1, `a password in a user%password argument (${program} -U)`);
    return true;
  }
  if (program === 'lftp' && (v === '-u' || v === '--user')) {
    const comma = next ? next.value.indexOf(',') : -1;
    if (next && comma >= 0) literalValue(add, next, comma + 1, 'a password in a user,password argument (lftp -u)');
    return true;
  }
  if (program === 'openssl' && OPENSSL_PASS_FLAGS.has(v)) {
    // -passin pass:x is the password itself; env:VAR, file:/path, fd:N and stdin name where it is.
    if (next?.value.startsWith('pass:')) literalValue(add, next, 5, `a literal password (openssl ${v} pass:...)`);
    return true;
  }
  return false;
}

/** curl's -H/--header and wget's --header argument: the word and where its `Name: value` starts. */
function headerArgument(w: Word, next: Word | undefined): { word: Word; from: number } | undefined {
  const v = w.value;
  if (v === '-H' || v === '--header') return next && { word: next, from: 0 };
  if (v.startsWith('--header=')) return { word: w, from: 9 };
  if (v.startsWith('-H') && !v.startsWith('--')) return { word: w, from: 2 };
  return undefined;
}

/** `Name:value` or `Name: value` whose name says secret (`X-Api-Key:abc`, `PRIVATE-TOKEN: abc`). */
function secretHeader(w: Word, from: number, add: Add): void {
  const colon = w.value.indexOf(':', from);
  if (colon < 0) return;
  const name = w.value.slice(from, colon).trim();
  if (!isSecretName(name)) return;
  let valueAt = colon + 1;
  while (isSpace(w.value[valueAt])) valueAt++;
  literalValue(add, w, valueAt, `a secret-named header (${clipName(name)}: ...)`);
}

/** Passwords that are positional words: `htpasswd -b file user PASS`, `rabbitmqctl add_user u PASS`, `vault login TOKEN`. */
function positionalPassword(program: string, positional: Word[], letters: string, add: Add): void {
  const last = positional[positional.length - 1]!;
  const at = positional.length - 1;
  if (program === 'htpasswd') {
    if (!letters.includes('b')) return; // -b: the password on the command line; otherwise it prompts
    if (at === (letters.includes('n') ? 1 : 2))
      literalValue(add, last, 0, 'a password argument (htpasswd -b ... <password>)');
  } else if (program === 'rabbitmqctl') {
    if (at === 2 && ['add_user', 'change_password'].includes(positional[0]!.value))
      literalValue(add, last, 0, `a password argument (rabbitmqctl ${positional[0]!.value} <user> <password>)`);
  } else if (program === 'vault') {
    if (at === 1 && positional[0]!.value === 'login' && !last.value.includes('='))
      literalValue(add, last, 0, 'a token argument (vault login <token>)');
  } else if (program === 'aws') {
    // aws configure set <name> <value>
    if (at === 3 && positional[0]!.value === 'configure' && positional[1]!.value === 'set')
      if (isSecretName(positional[2]!.value))
        literalValue(add, last, 0, `a secret-named value (aws configure set ${clipName(positional[2]!.value)} ...)`);
  }
}

/** Whether this command reads a password on stdin (`chpasswd`, `passwd --stdin`, `... --password-stdin`). */
function readsPasswordOnStdin(words: Word[]): boolean {
  const program = basename(words[0]?.value ?? '');
  const values = words.map((w) => w.value);
  if (values.includes('--password-stdin')) return true;
  if (!STDIN_READERS.has(program)) return false;
  const flag = STDIN_READERS.get(program);
  if (flag === undefined) return true;
  return values.some((v) => v === flag || (flag.length === 2 && /^-[A-Za-z]+$/.test(v) && v.includes(flag[1]!)));
}

/** The literal words an `echo`/`printf` sends into such a program (its format string with `%` aside). */
function echoedLiterals(words: Word[], add: Add): void {
  const program = basename(words[0]?.value ?? '');
  if (program !== 'echo' && program !== 'printf') return;
  let first = true;
  for (const w of words.slice(1)) {
    if (w.value.startsWith('-')) continue;
    const format = program === 'printf' && first;
    first = false;
    if (format && w.value.includes('%')) continue;
    // `echo "bob:$PW"` names where the password is.
    if (w.value.includes('$') || w.value.includes('`')) continue;
    literalValue(add, w, 0, `a literal password piped into a program that reads one (${program} ... | ...)`);
  }
}

/** A `.pgpass` line as one word: `host:port:database:user:password` (port digits or `*`). */
function pgpassLine(w: Word, add: Add, meter: ScanMeter): void {
  const v = w.value;
  meter.steps++;
  let colons = 0;
  for (let i = 0; i < v.length && colons < 5; i++) if (v[i] === ':') colons++;
  if (colons !== 4) return;
  const parts = v.split(':');
  if (parts.some((p) => p === '') || !/^(\d{1,5}|\*)$/.test(parts[1]!)) return;
  const password = parts[4]!;
  if (password.includes('$') || password.includes('`')) return;
  literalValue(add, w, v.length - password.length, 'a password in a .pgpass line (host:port:db:user:...)');
}

// --- provider tokens by their shape -----------------------------------------------------------------

/**
 * A token a provider issues, recognised by its prefix and the shape of what follows: the rules of
 * secretlint's recommended preset (@secretlint/secretlint-rule-preset-recommend, pinned in package.json;
 * `rule` names each), written as data for one linear scan instead of its regular expressions (the
 * workflow bundle takes no Node APIs, and every pass here counts its steps). Where a rule of the preset
 * has a checksum or a fixed inner marker this keeps the length and alphabet only: it refuses a little
 * more, never less.
 */
interface TokenRule {
  /** The secretlint rule this follows (`@secretlint/secretlint-rule-<rule>`). */
  rule: string;
  what: string;
  prefixes: readonly string[];
  /** The characters of the token after the prefix. */
  body: RegExp;
  min: number;
  max: number;
  /** What may not stand right before the prefix (default: a letter or a body character). */
  notAfter?: RegExp;
}

const ALNUM = /[A-Za-z0-9]/;
const WORD = /[A-Za-z0-9_]/;
const WORD_DASH = /[A-Za-z0-9_-]/;
const B64 = /[A-Za-z0-9+/=]/;
/** Base64 without its padding: `TOKEN=ops_...` is an assignment, not the middle of a token. */
const B64_HEAD = /[A-Za-z0-9+/]/;

export const TOKEN_RULES: readonly TokenRule[] = [
  {
    rule: 'aws',
    what: 'an AWS access key id',
    prefixes: ['AKIA', 'ASIA', 'AGPA', 'AIDA', 'AROA', 'AIPA', 'ANPA', 'ANVA', 'A3T'],
    body: /[A-Z0-9]/,
    min: 16,
    max: 17,
  },
  {
    rule: 'github',
    what: 'a GitHub token',
    prefixes: ['ghp_', 'gho_', 'ghu_', 'ghs_', 'ghr_'],
    body: WORD,
    min: 36,
    max: 255,
  },
  { rule: 'github', what: 'a GitHub token', prefixes: ['github_pat_'], body: WORD, min: 82, max: 82 },
  { rule: 'gitlab', what: 'a GitLab token', prefixes: ['glpat-'], body: WORD_DASH, min: 20, max: 128 },
  {
    rule: 'slack',
    what: 'a Slack token',
    prefixes: ['xoxb-', 'xoxp-', 'xapp-', 'xoxa-', 'xoxo-', 'xoxr-'],
    body: /[A-Za-z0-9-]/,
    min: 10,
    max: 255,
  },
  {
    rule: 'slack',
    what: 'a Slack webhook url',
    prefixes: ['hooks.slack.com/services/'],
    body: /[A-Za-z0-9/]/,
    min: 20,
    max: 255,
    notAfter: /[A-Za-z0-9.-]/,
  },
  { rule: 'npm', what: 'an npm token', prefixes: ['npm_'], body: WORD, min: 36, max: 36 },
  { rule: 'sendgrid', what: 'a SendGrid key', prefixes: ['SG.'], body: /[A-Za-z0-9_.-]/, min: 40, max: 255 },
  {
    rule: 'stripe',
    what: 'a Stripe key',
    prefixes: ['sk_live_', 'sk_test_', 'rk_live_', 'rk_test_'],
    body: ALNUM,
    min: 24,
    max: 99,
  },
  {
    rule: 'shopify',
    what: 'a Shopify token',
    prefixes: ['shppa_', 'shpca_', 'shpat_', 'shpss_'],
    body: ALNUM,
    min: 32,
    max: 64,
  },
  {
    rule: 'openai',
    what: 'an OpenAI key',
    prefixes: ['sk-proj-', 'sk-svcacct-', 'sk-admin-'],
    body: WORD_DASH,
    min: 58,
    max: 200,
  },
  { rule: 'anthropic', what: 'an Anthropic key', prefixes: ['sk-ant-'], body: WORD_DASH, min: 90, max: 200 },
  { rule: 'groq', what: 'a Groq key', prefixes: ['gsk_'], body: ALNUM, min: 52, max: 52 },
  { rule: 'huggingface', what: 'a Hugging Face token', prefixes: ['hf_'], body: /[A-Za-z]/, min: 34, max: 34 },
  { rule: 'linear', what: 'a Linear key', prefixes: ['lin_api_'], body: WORD, min: 32, max: 128 },
  { rule: 'notion', what: 'a Notion token', prefixes: ['ntn_'], body: ALNUM, min: 46, max: 46 },
  {
    rule: '1password',
    what: 'a 1Password service token',
    prefixes: ['ops_ey'],
    body: B64,
    min: 100,
    max: 1280,
    notAfter: B64_HEAD,
  },
  { rule: 'grafana', what: 'a Grafana token', prefixes: ['glc_'], body: B64, min: 32, max: 402, notAfter: B64_HEAD },
  { rule: 'grafana', what: 'a Grafana token', prefixes: ['glsa_'], body: WORD, min: 41, max: 41 },
  {
    rule: 'hashicorp-vault',
    what: 'a HashiCorp Vault token',
    prefixes: ['hvs.', 'hvb.', 'hvr.'],
    body: WORD_DASH,
    min: 90,
    max: 300,
  },
  {
    rule: 'vercel',
    what: 'a Vercel token',
    prefixes: ['vcp_', 'vci_', 'vca_', 'vcr_', 'vck_'],
    body: ALNUM,
    min: 20,
    max: 60,
  },
  { rule: 'databricks', what: 'a Databricks token', prefixes: ['dapi'], body: /[a-f0-9]/, min: 32, max: 32 },
  { rule: 'docker', what: 'a Docker access token', prefixes: ['dckr_pat_'], body: WORD_DASH, min: 27, max: 27 },
  { rule: 'figma', what: 'a Figma token', prefixes: ['figd_'], body: WORD_DASH, min: 40, max: 200 },
  {
    rule: 'cloudflare',
    what: 'a Cloudflare token',
    prefixes: ['cfk_', 'cfut_', 'cfat_'],
    body: ALNUM,
    min: 48,
    max: 48,
  },
  { rule: 'tailscale', what: 'a Tailscale key', prefixes: ['tskey-'], body: WORD_DASH, min: 26, max: 120 },
];

/** Rules by the first three characters of each prefix: one map look-up per position of the text. */
const TOKEN_RULES_BY_HEAD = (() => {
  const byHead = new Map<string, Array<{ prefix: string; rule: TokenRule }>>();
  for (const rule of TOKEN_RULES)
    for (const prefix of rule.prefixes) {
      const head = prefix.slice(0, 3);
      byHead.set(head, [...(byHead.get(head) ?? []), { prefix, rule }]);
    }
  return byHead;
})();

/** `-----BEGIN [RSA |DSA |EC |PGP |OPENSSH |ENCRYPTED ]PRIVATE KEY`, the privatekey rule's header. */
const PEM_KINDS = ['', 'RSA ', 'DSA ', 'EC ', 'PGP ', 'OPENSSH ', 'ENCRYPTED '];

/** The length of a PEM private-key header at `i`, or 0. */
function pemHeader(text: string, i: number): number {
  if (!text.startsWith('-----BEGIN', i)) return 0;
  let j = i + 10;
  if (text[j] === ' ') j++;
  for (const kind of PEM_KINDS) if (text.startsWith(`${kind}PRIVATE KEY`, j)) return j + kind.length + 11 - i;
  return 0;
}

/** Provider tokens (TOKEN_RULES) and PEM private keys, in one left-to-right pass. */
function scanTokens(text: string, add: Add, meter: ScanMeter): void {
  // Where the next `-----END` is: found once per block, so many headers cost one search, not one each.
  let pemEnd = -2;
  for (let i = 0; i + 3 <= text.length; i++) {
    meter.steps++;
    const pem = text[i] === '-' ? pemHeader(text, i) : 0;
    if (pem) {
      if (pemEnd !== -1 && pemEnd < i + pem) {
        pemEnd = text.indexOf('-----END', i + pem);
        meter.steps += (pemEnd < 0 ? text.length : pemEnd) - i;
      }
      const end = pemEnd < 0 ? text.length : pemEnd;
      add('a PEM private key', i, end);
      i = end;
      continue;
    }
    const candidates = TOKEN_RULES_BY_HEAD.get(text.slice(i, i + 3));
    if (!candidates) continue;
    for (const { prefix, rule } of candidates) {
      meter.steps++;
      if (!text.startsWith(prefix, i)) continue;
      // Not the middle of a longer word: `xghp_...` is not a GitHub token, nor is a run of body characters.
      const before = text[i - 1];
      if (
        before !== undefined &&
        (rule.notAfter ? rule.notAfter.test(before) : /[A-Za-z]/.test(before) || rule.body.test(before))
      )
        continue;
      const start = i + prefix.length;
      let end = start;
      while (end < text.length && end - start <= rule.max && rule.body.test(text[end]!)) end++;
      meter.steps += end - start;
      if (end - start < rule.min || end - start > rule.max) continue;
      add(`${rule.what} (${prefix}...)`, start, end);
      i = end - 1;
      break;
    }
  }
}

/** What makes `text` carry an inline credential (the first one found), or undefined when it carries none. */
export function inlineCredential(text: string): string | undefined {
  return findCredentials(text)[0]?.what;
}

/** `text` with the value of every credential findCredentials finds replaced by `***`. */
export function scrubFound(text: string): string {
  const found = findCredentials(text);
  if (!found.length) return text;
  let out = '';
  let at = 0;
  for (const f of found) {
    if (f.end <= at) continue;
    out += text.slice(at, Math.max(at, f.start));
    if (f.end > Math.max(at, f.start)) out += '***';
    at = f.end;
  }
  return out + text.slice(at);
}
