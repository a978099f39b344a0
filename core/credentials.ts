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
 *     `login -p` (docker, podman, helm...), openssl's `pass:` (`-passin pass:x`).
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
function shellCommands(text: string, meter: ScanMeter): Word[][] {
  const commands: Word[][] = [];
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
  const endCommand = () => {
    endWord();
    if (words.length) commands.push(words);
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
    else if (ch === '\n' || ch === ';' || ch === '&' || ch === '|') endCommand();
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
  return commands;
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
const PROGRAMS = new Set(['curl', 'sshpass', 'redis-cli', 'openssl', ...MYSQL, ...LOGIN]);
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

/** Flags followed by a value that are secret by what they are, per program. */
function scanWords(text: string, add: Add, meter: ScanMeter): void {
  for (const words of shellCommands(text, meter)) {
    let program: string | undefined;
    let login = false;
    for (let k = 0; k < words.length; k++) {
      const w = words[k]!;
      const v = w.value;
      meter.steps++;
      if (!v.startsWith('-') || v === '-' || v === '--') {
        const base = basename(v);
        if (PROGRAMS.has(base)) {
          program = base;
          login = false;
        } else if (v === 'login' && program && LOGIN.has(program)) login = true;
        continue;
      }
      const next = words[k + 1];
      const nextValue = next && !next.value.startsWith('-') ? next : undefined;
      // curl: -u/--user/-U/--proxy-user user:password (no password, or an empty one: nothing secret is written).
      if (program === 'curl') {
        const user = curlUserArgument(w, nextValue);
        if (user) {
          const colon = user.word.value.indexOf(':', user.from);
          if (colon >= 0)
            literalValue(
              add,
              user.word,
              colon + 1,
              `a password in a user:password argument (curl ${user.flag} user:...)`,
            );
          continue;
        }
      }
      if (program && MYSQL.has(program) && v.startsWith('-p') && v.length > 2) {
        literalValue(add, w, 2, `a password argument (${program} -p<password>)`);
        continue;
      }
      if (program === 'sshpass' && shortFlagValue(add, w, nextValue, '-p', 'a password argument (sshpass -p)'))
        continue;
      if (program === 'redis-cli' && shortFlagValue(add, w, nextValue, '-a', 'a password argument (redis-cli -a)'))
        continue;
      if (login && program && shortFlagValue(add, w, nextValue, '-p', `a password argument (${program} login -p)`))
        continue;
      if (program === 'openssl' && OPENSSL_PASS_FLAGS.has(v)) {
        // -passin pass:x is the password itself; env:VAR, file:/path, fd:N and stdin name where it is.
        if (nextValue?.value.startsWith('pass:'))
          literalValue(add, nextValue, 5, `a literal password (openssl ${v} pass:...)`);
        continue;
      }
      // --name value (the `--name=value` form is a pair: scanPairs).
      if (v.includes('=') || !nextValue) continue;
      const name = v.replace(/^-+/, '');
      if (isSecretName(name) && !isKeyFile(name, nextValue.value))
        literalValue(add, nextValue, 0, `a secret-named argument (${clipName(v)} ...)`);
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
