import { WavegateError } from './errors';

/**
 * Which secrets a worker reads on a spec's or a profile's behalf, and where it may send what it makes of
 * them (docs/formats.md, "Webhooks" and "Metrics"; SECURITY.md, "Secrets a worker reads on a profile's or
 * a spec's behalf").
 *
 * Whoever may start a rollout writes its webhooks, and receives HMAC(secret, known text) at the url they
 * chose; whoever writes a profile names its metrics token, sent as a bearer token to the url they chose.
 * A reference that could name any variable or file of the worker, or any address its network reaches,
 * would turn the worker into an oracle for its own secrets (a database password sent in clear, a weak
 * webhook secret guessed offline) and a probe of its private network. So the operator decides, on the
 * worker, for each use (`SecretUse`: webhook secrets, metrics tokens), with settings named alike:
 *
 * - secrets: only variables named `<prefix><NAME>` (`WAVEGATE_WEBHOOK_SECRET_*`, `WAVEGATE_METRICS_TOKEN_*`),
 *   and only files under one directory (`..._SECRETS_DIR` / `..._TOKENS_DIR`), links resolved;
 * - receivers: public addresses only, unless `..._ALLOW_PRIVATE=1` (loopback and private ranges) or
 *   `..._ALLOW_HOSTS` (CIDRs, addresses, host names) allows more. Link-local, cloud metadata,
 *   unspecified, multicast and reserved addresses only by an explicit allow-list entry.
 *
 * Pure (no Node APIs): the spec and profile schemas (core/events.ts, core/revision.ts; in the workflow
 * bundle too), `plan`/`start` (intake/secret-policy.ts), the webhook delivery (activities/webhooks.ts)
 * and the metrics queries (activities/health/http-get.ts, metrics-token.ts) decide with it.
 */

/** One use of secrets by reference: the settings that bound it, and what the worker does with it (for messages). */
export interface SecretUse {
  /** What the worker does, as messages say it: "sends webhooks", "sends a metrics token". */
  sends: string;
  /** What one secret is called in messages: "webhook secret", "metrics token". */
  secret: string;
  /** Every variable a reference may name starts with this. */
  envPrefix: string;
  /** `<envPrefix>` then 1-100 letters, digits or `_`. */
  envPattern: RegExp;
  /** The schema's message for a variable outside the prefix. */
  envRule: string;
  /**
   * The variable naming the directory of secret files. Its name must not match `envPrefix`
   * (`..._SECRETS_DIR`, not `..._SECRET_DIR`): a reference could then use the directory's path.
   */
  dirEnv: string;
  defaultDir: string;
  allowPrivateEnv: string;
  allowHostsEnv: string;
}

/** A use from its settings; `why` ends the schema's message for a variable outside the prefix. */
function secretUse({ why, ...use }: Omit<SecretUse, 'envPattern' | 'envRule'> & { why: string }): SecretUse {
  return {
    ...use,
    envPattern: new RegExp(`^${use.envPrefix}[A-Za-z0-9_]{1,100}$`),
    envRule: `must be an environment variable named ${use.envPrefix}<NAME> (letters, digits, "_"): ${why}`,
  };
}

/** A spec's `webhooks[].secretEnv` / `secretFile`: the HMAC secret the worker signs each delivery with. */
export const WEBHOOK_SECRETS = secretUse({
  sends: 'sends webhooks',
  secret: 'webhook secret',
  envPrefix: 'WAVEGATE_WEBHOOK_SECRET_',
  dirEnv: 'WAVEGATE_WEBHOOK_SECRETS_DIR',
  defaultDir: '/etc/wavegate/webhook-secrets',
  allowPrivateEnv: 'WAVEGATE_WEBHOOK_ALLOW_PRIVATE',
  allowHostsEnv: 'WAVEGATE_WEBHOOK_ALLOW_HOSTS',
  why: 'the worker signs only with variables its operator set for webhooks',
});

/** A profile's `metrics.errorRate.tokenEnv` / `tokenFile`: the bearer token the worker sends its metrics source. */
export const METRICS_TOKENS = secretUse({
  sends: 'sends a metrics token',
  secret: 'metrics token',
  envPrefix: 'WAVEGATE_METRICS_TOKEN_',
  dirEnv: 'WAVEGATE_METRICS_TOKENS_DIR',
  defaultDir: '/etc/wavegate/metrics-tokens',
  allowPrivateEnv: 'WAVEGATE_METRICS_ALLOW_PRIVATE',
  allowHostsEnv: 'WAVEGATE_METRICS_ALLOW_HOSTS',
  why: 'the worker sends only tokens its operator set for metrics sources',
});

/** Whether a reference may name this variable for this use. */
export function secretEnvAllowed(use: SecretUse, name: string): boolean {
  return use.envPattern.test(name);
}

// ---- addresses ----

/** What an address is, for the policy: only `public` is allowed without configuration. */
export type AddressClass =
  | 'public'
  | 'loopback'
  | 'private'
  | 'link-local'
  | 'metadata'
  | 'unspecified'
  | 'multicast'
  | 'reserved';

/** Classes `..._ALLOW_PRIVATE=1` allows; the others only an allow-list entry does. */
const ALLOWED_BY_ALLOW_PRIVATE: ReadonlySet<AddressClass> = new Set(['loopback', 'private']);

/** An IPv4 (4 bytes) or IPv6 (16 bytes) address. */
export type IpBytes = Uint8Array;

/** A dotted quad (exactly: URL parsing already turned `127.1`, `0x7f.1` and `2130706433` into one). */
export function parseIpv4(text: string): IpBytes | undefined {
  const parts = text.split('.');
  if (parts.length !== 4) return undefined;
  const bytes = new Uint8Array(4);
  for (let i = 0; i < 4; i++) {
    if (!/^(0|[1-9][0-9]{0,2})$/.test(parts[i]!)) return undefined;
    const n = Number(parts[i]);
    if (n > 255) return undefined;
    bytes[i] = n;
  }
  return bytes;
}

/** An IPv6 address in any RFC 4291 text form (`::`, a trailing dotted quad); no zone id. */
export function parseIpv6(text: string): IpBytes | undefined {
  if (!/^[0-9A-Fa-f:.]{2,45}$/.test(text)) return undefined;
  let head = text;
  let tail4: IpBytes | undefined;
  const lastColon = text.lastIndexOf(':');
  if (text.includes('.', lastColon)) {
    tail4 = parseIpv4(text.slice(lastColon + 1));
    if (!tail4) return undefined;
    head = `${text.slice(0, lastColon + 1)}0:0`;
  }
  const halves = head.split('::');
  if (halves.length > 2) return undefined;
  const groups = (s: string) => (s === '' ? [] : s.split(':'));
  const left = groups(halves[0]!);
  const right = halves.length === 2 ? groups(halves[1]!) : [];
  const total = left.length + right.length;
  if (halves.length === 1 ? total !== 8 : total > 7) return undefined;
  const all = [...left, ...Array<string>(8 - total).fill('0'), ...right];
  const bytes = new Uint8Array(16);
  for (let i = 0; i < 8; i++) {
    if (!/^[0-9A-Fa-f]{1,4}$/.test(all[i]!)) return undefined;
    const n = parseInt(all[i]!, 16);
    bytes[2 * i] = n >> 8;
    bytes[2 * i + 1] = n & 0xff;
  }
  if (tail4) bytes.set(tail4, 12);
  return bytes;
}

/** An address as a url's host or a resolver gives it (`[::1]` brackets allowed), or undefined if not one. */
export function parseIp(text: string): IpBytes | undefined {
  const bare = text.startsWith('[') && text.endsWith(']') ? text.slice(1, -1) : text;
  return parseIpv4(bare) ?? (bare.includes(':') ? parseIpv6(bare) : undefined);
}

interface Cidr {
  bytes: IpBytes;
  bits: number;
}

function inCidr(ip: IpBytes, cidr: Cidr): boolean {
  if (ip.length !== cidr.bytes.length) return false;
  for (let bit = 0; bit < cidr.bits; bit += 8) {
    const take = Math.min(8, cidr.bits - bit);
    const mask = (0xff << (8 - take)) & 0xff;
    if ((ip[bit / 8]! & mask) !== (cidr.bytes[bit / 8]! & mask)) return false;
  }
  return true;
}

/** `a.b.c.d/n`, `x::/n`, or a bare address (a /32 or /128); undefined when not one. */
export function parseCidr(text: string): Cidr | undefined {
  const slash = text.indexOf('/');
  const bytes = parseIp(slash < 0 ? text : text.slice(0, slash));
  if (!bytes) return undefined;
  const max = bytes.length * 8;
  if (slash < 0) return { bytes, bits: max };
  const bitsText = text.slice(slash + 1);
  if (!/^[0-9]{1,3}$/.test(bitsText) || Number(bitsText) > max) return undefined;
  return { bytes, bits: Number(bitsText) };
}

const cidr = (text: string): Cidr => parseCidr(text)!;

/** IPv4 ranges that are not the public internet, most specific first (metadata inside link-local and shared space). */
const IPV4_CLASSES: ReadonlyArray<[Cidr, AddressClass]> = [
  [cidr('169.254.169.254/32'), 'metadata'], // AWS, GCP, Azure, OpenStack, ...
  [cidr('169.254.170.2/32'), 'metadata'], // AWS ECS task credentials
  [cidr('100.100.100.200/32'), 'metadata'], // Alibaba Cloud
  [cidr('0.0.0.0/8'), 'unspecified'], // "this network": 0.0.0.0 reaches the local host
  [cidr('127.0.0.0/8'), 'loopback'],
  [cidr('10.0.0.0/8'), 'private'],
  [cidr('172.16.0.0/12'), 'private'],
  [cidr('192.168.0.0/16'), 'private'],
  [cidr('100.64.0.0/10'), 'private'], // shared address space (carrier-grade NAT, cloud-internal)
  [cidr('198.18.0.0/15'), 'private'], // benchmarking, used inside networks
  [cidr('169.254.0.0/16'), 'link-local'],
  [cidr('192.0.0.0/24'), 'reserved'],
  [cidr('192.0.2.0/24'), 'reserved'],
  [cidr('198.51.100.0/24'), 'reserved'],
  [cidr('203.0.113.0/24'), 'reserved'],
  [cidr('224.0.0.0/4'), 'multicast'],
  [cidr('240.0.0.0/4'), 'reserved'], // and 255.255.255.255
];

const IPV6_CLASSES: ReadonlyArray<[Cidr, AddressClass]> = [
  [cidr('::/128'), 'unspecified'],
  [cidr('::1/128'), 'loopback'],
  [cidr('fd00:ec2::254/128'), 'metadata'], // AWS over IPv6
  [cidr('fe80::/10'), 'link-local'],
  [cidr('fec0::/10'), 'private'], // site-local (deprecated)
  [cidr('fc00::/7'), 'private'], // unique local
  [cidr('64:ff9b:1::/48'), 'private'], // local-use NAT64
  [cidr('ff00::/8'), 'multicast'],
  [cidr('100::/64'), 'reserved'], // discard
  [cidr('2001::/32'), 'reserved'], // Teredo: the IPv4 inside is obfuscated, not judged
  [cidr('2001:db8::/32'), 'reserved'], // documentation
];

/** The IPv4 address inside an IPv6 one that carries one (mapped, compatible, NAT64, 6to4), else undefined. */
function embeddedIpv4(ip: IpBytes): IpBytes | undefined {
  const zeros = (from: number, to: number) => ip.slice(from, to).every((b) => b === 0);
  if (zeros(0, 10) && ip[10] === 0xff && ip[11] === 0xff) return ip.slice(12); // ::ffff:a.b.c.d
  if (zeros(0, 12) && !zeros(12, 15)) return ip.slice(12); // ::a.b.c.d (deprecated "compatible")
  if (inCidr(ip, cidr('64:ff9b::/96'))) return ip.slice(12); // well-known NAT64 prefix
  if (inCidr(ip, cidr('2002::/16'))) return ip.slice(2, 6); // 6to4
  return undefined;
}

/** What an address is: public, or which non-public kind (an IPv4 inside an IPv6 address is judged as itself). */
export function addressClass(ip: IpBytes): AddressClass {
  if (ip.length === 16) {
    const v4 = embeddedIpv4(ip);
    if (v4) return addressClass(v4);
  }
  for (const [range, cls] of ip.length === 4 ? IPV4_CLASSES : IPV6_CLASSES) if (inCidr(ip, range)) return cls;
  return 'public';
}

export function formatIp(ip: IpBytes): string {
  if (ip.length === 4) return ip.join('.');
  if (ip.slice(0, 10).every((b) => b === 0) && ip[10] === 0xff && ip[11] === 0xff)
    return `::ffff:${ip.slice(12).join('.')}`;
  const groups = Array.from({ length: 8 }, (_, i) => (ip[2 * i]! << 8) | ip[2 * i + 1]!);
  // The longest run of two or more zero groups becomes "::" (RFC 5952).
  let best = { at: -1, len: 0 };
  for (let i = 0; i < 8; ) {
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > best.len && j - i >= 2) best = { at: i, len: j - i };
    i = j > i ? j : i + 1;
  }
  const hex = groups.map((g) => g.toString(16));
  if (best.at < 0) return hex.join(':');
  return `${hex.slice(0, best.at).join(':')}::${hex.slice(best.at + best.len).join(':')}`;
}

// ---- the operator's configuration ----

/** A host name entry of the allow-list: exactly this name, or (`*.example.internal`) any name under it. */
interface HostEntry {
  name: string;
  subdomains: boolean;
}

export interface SecretPolicy {
  /** The use this policy bounds: its settings' names, for messages. */
  use: SecretUse;
  /** Where secret files must be (after links are resolved). */
  secretsDir: string;
  /** Loopback and private ranges allowed (`..._ALLOW_PRIVATE=1`). */
  allowPrivate: boolean;
  /** Addresses allowed whatever their class (`..._ALLOW_HOSTS` CIDRs and addresses). */
  allowRanges: readonly Cidr[];
  /** Host names allowed whatever they resolve to (`..._ALLOW_HOSTS` names). */
  allowNames: readonly HostEntry[];
}

const HOST_NAME = /^(\*\.)?(?=.{1,253}$)[a-z0-9_](?:[a-z0-9_-]{0,62})(?:\.[a-z0-9_](?:[a-z0-9_-]{0,62}))*\.?$/;

function configProblem(variable: string, value: string, rule: string): WavegateError {
  return new WavegateError(
    'INVALID_INPUT',
    `${variable}: ${rule} (got ${JSON.stringify(value.length > 200 ? `${value.slice(0, 200)}...` : value)})`,
    { field: variable, value },
  );
}

/**
 * The policy of one use from a worker's (or, for `plan`/`start`, the CLI's) environment. A value that is
 * not understood is INVALID_INPUT naming the variable: a worker does not start with a policy it misread.
 */
export function secretPolicyFromEnv(use: SecretUse, env: Readonly<Record<string, string | undefined>>): SecretPolicy {
  const dir = env[use.dirEnv]?.trim() || use.defaultDir;
  if (!dir.startsWith('/') || /[\0\n\r]/.test(dir) || dir.length > 1024)
    throw configProblem(use.dirEnv, dir, 'must be an absolute directory path');
  const privateText = (env[use.allowPrivateEnv] ?? '').trim().toLowerCase();
  let allowPrivate: boolean;
  if (['1', 'true', 'yes'].includes(privateText)) allowPrivate = true;
  else if (['', '0', 'false', 'no'].includes(privateText)) allowPrivate = false;
  else
    throw configProblem(
      use.allowPrivateEnv,
      env[use.allowPrivateEnv]!,
      'must be 1 (allow loopback and private receivers) or 0',
    );
  const allowRanges: Cidr[] = [];
  const allowNames: HostEntry[] = [];
  const entries = (env[use.allowHostsEnv] ?? '').split(/[\s,]+/).filter(Boolean);
  if (entries.length > 256) throw configProblem(use.allowHostsEnv, env[use.allowHostsEnv]!, 'at most 256 entries');
  for (const entry of entries) {
    const range = parseCidr(entry);
    if (range) {
      allowRanges.push(range);
      continue;
    }
    const name = entry.toLowerCase();
    if (!HOST_NAME.test(name) || /^[0-9.]+$/.test(name))
      throw configProblem(
        use.allowHostsEnv,
        entry,
        'each entry (comma-separated) must be a CIDR (10.1.0.0/16, fd00::/8), an address, a host name or *.domain',
      );
    allowNames.push({ name: name.replace(/^\*\./, '').replace(/\.$/, ''), subdomains: name.startsWith('*.') });
  }
  return { use, secretsDir: dir.length > 1 ? dir.replace(/\/+$/, '') : dir, allowPrivate, allowRanges, allowNames };
}

/** The webhook policy of this environment (WAVEGATE_WEBHOOK_SECRETS_DIR, _ALLOW_PRIVATE, _ALLOW_HOSTS). */
export function webhookPolicyFromEnv(env: Readonly<Record<string, string | undefined>>): SecretPolicy {
  return secretPolicyFromEnv(WEBHOOK_SECRETS, env);
}

/** The metrics token policy of this environment (WAVEGATE_METRICS_TOKENS_DIR, _ALLOW_PRIVATE, _ALLOW_HOSTS). */
export function metricsPolicyFromEnv(env: Readonly<Record<string, string | undefined>>): SecretPolicy {
  return secretPolicyFromEnv(METRICS_TOKENS, env);
}

/** The webhook policy with nothing allowed beyond public receivers and the default secrets directory. */
export const STRICT_WEBHOOK_POLICY: SecretPolicy = webhookPolicyFromEnv({});

/** Whether the allow-list names this host (a url's host name, lower case). */
export function hostNameAllowed(host: string, policy: SecretPolicy): boolean {
  const name = host.toLowerCase().replace(/\.$/, '');
  return policy.allowNames.some((e) => name === e.name || (e.subdomains && name.endsWith(`.${e.name}`)));
}

/** The rule a refused address broke, and the setting that would allow it. */
function publicOnly(cls: AddressClass, use: SecretUse): string {
  const how = ALLOWED_BY_ALLOW_PRIVATE.has(cls)
    ? `${use.allowPrivateEnv}=1 or ${use.allowHostsEnv}`
    : use.allowHostsEnv;
  return `the worker ${use.sends} to public addresses only, unless its operator allows this one (${how})`;
}

/** Why the worker must not connect to this address, in words for the worker's log and `plan`; undefined when allowed. */
export function addressRefusal(ip: IpBytes, policy: SecretPolicy): string | undefined {
  const cls = addressClass(ip);
  if (cls === 'public') return undefined;
  if (policy.allowRanges.some((r) => inCidr(ip, r))) return undefined;
  if (policy.allowPrivate && ALLOWED_BY_ALLOW_PRIVATE.has(cls)) return undefined;
  const kind = cls === 'metadata' ? 'a cloud metadata' : cls === 'unspecified' ? 'an unspecified' : `a ${cls}`;
  return `${formatIp(ip)} is ${kind} address; ${publicOnly(cls, policy.use)}`;
}

/** Names that are never public, whatever a resolver says (RFC 6761 localhost, cloud metadata services). */
function internalName(host: string): AddressClass | undefined {
  const name = host.toLowerCase().replace(/\.$/, '');
  if (name === 'localhost' || name.endsWith('.localhost')) return 'loopback';
  if (name === 'metadata.google.internal' || name === 'metadata.goog') return 'metadata';
  return undefined;
}

/**
 * What can be judged of a receiver's url without resolving its host (at `plan`/`start`, and first at every
 * delivery or query): an address written in it, or a name that is always internal. Undefined when allowed so far
 * (a host name is then resolved and each address judged at delivery).
 */
export function urlRefusal(url: string, policy: SecretPolicy): string | undefined {
  let host: string;
  try {
    host = new URL(url).hostname;
  } catch {
    return 'must be an absolute http:// or https:// url';
  }
  const ip = parseIp(host);
  if (ip) return addressRefusal(ip, policy);
  if (hostNameAllowed(host, policy)) return undefined;
  const cls = internalName(host);
  if (!cls) return undefined;
  return `${host} is a ${cls === 'metadata' ? 'cloud metadata' : cls} host name; ${publicOnly(cls, policy.use)}`;
}

/**
 * Whether `path` is inside `dir` as text, `..` and `.` resolved (both absolute). Links are judged by the
 * caller with the real paths (intake/secret-policy.ts): this is the half that holds for a file that
 * does not exist here.
 */
export function pathInside(path: string, dir: string): boolean {
  const norm = (p: string) => {
    const out: string[] = [];
    for (const part of p.split('/')) {
      if (part === '' || part === '.') continue;
      if (part === '..') out.pop();
      else out.push(part);
    }
    return out;
  };
  const d = norm(dir);
  const p = norm(path);
  return p.length > d.length && d.every((part, i) => p[i] === part);
}

/** The message for a secret file outside the policy's directory. */
export function secretFileRule(policy: SecretPolicy): string {
  return `must be a file under the worker's ${policy.use.secret}s directory ${policy.secretsDir} (${policy.use.dirEnv}), links and ".." resolved`;
}
