import { parse as parseYaml } from 'yaml';
import { WavegateError } from './errors';
import { formatPath } from './validation';
import { MAX_DEVICES } from './inventory';
import { documentProblems } from './document-bounds';
import { RESERVED_NAME_RULE } from './own-keys';

/**
 * Import an Ansible inventory (INI or YAML text) as a wavegate inventory document, which
 * `parseInventory` then validates like any other. Pure: text in, document out.
 *
 * Mapping: the inventory hostname is the device id; `ansible_host` → host, `ansible_port` → port,
 * `ansible_user` → user, `ansible_ssh_private_key_file` → ssh.key; the first group that lists a host
 * is its pool (`wavegate_pool` overrides; hosts in no group go to pool `ungrouped`); `wavegate_class`,
 * `wavegate_os` (else `ansible_os_family`, or `windows` for a winrm/psrp connection),
 * `wavegate_update_class`, `wavegate_runtimes`, `wavegate_transport`, `wavegate_host_key`,
 * `wavegate_labels` (a mapping) and `label_<key>` vars fill the rest; every group a host belongs to,
 * directly or through `children`, becomes the label `group/<name>: "true"`. Group vars apply to their
 * hosts, nearer groups over farther ones, host vars over all; `wavegate_disruption_budget` on a group
 * sets that pool's budget.
 */
type Vars = Record<string, unknown>;

interface Group {
  name: string;
  hosts: Map<string, Vars>;
  vars: Vars;
  children: string[];
}

class Model {
  readonly groups = new Map<string, Group>();
  /** Every host once, in the order first seen (a Set: an inventory of 100,000 hosts stays linear). */
  readonly hostOrder = new Set<string>();
  group(name: string): Group {
    let g = this.groups.get(name);
    if (!g) {
      g = { name, hosts: new Map(), vars: {}, children: [] };
      this.groups.set(name, g);
    }
    return g;
  }
  /** Host names still allowed to be expanded in this file (every pattern's count is taken from it). */
  private expansionBudget = MAX_PATTERN_HOSTS;
  /** The hosts of a pattern; `where` names it in errors. Refuses a pattern above what is left of the budget. */
  expand(pattern: string, source: string, where: { line?: number; path?: string }): string[] {
    try {
      const count = countHostPattern(pattern);
      if (count > this.expansionBudget && this.expansionBudget < MAX_PATTERN_HOSTS) {
        throw new HostPatternError(
          `expands to ${count} hosts; only ${this.expansionBudget} of the ${MAX_PATTERN_HOSTS} host names an inventory may hold are left`,
        );
      }
      const hosts = expandHostPattern(pattern);
      this.expansionBudget -= hosts.length;
      return hosts;
    } catch (err) {
      if (!(err instanceof HostPatternError)) throw err;
      return fail(
        source,
        `${where.path ? `${where.path}: ` : ''}host pattern ${JSON.stringify(pattern.slice(0, 80))}: ${err.message}`,
        where.line,
      );
    }
  }
  addHost(group: string, host: string, vars: Vars): void {
    const g = this.group(group);
    g.hosts.set(host, { ...g.hosts.get(host), ...vars });
    this.hostOrder.add(host);
  }
}

function fail(source: string, message: string, line?: number): never {
  const where = line ? ` at line ${line}` : '';
  throw new WavegateError('INVALID_INPUT', `${source}: invalid Ansible inventory${where}: ${message}`, {
    source,
    ...(line ? { line } : {}),
  });
}

const RANGE = /^(.*?)\[([0-9a-z]+):([0-9a-z]+)(?::(\d+))?\](.*)$/i;

/** How many hosts one pattern may expand to: an inventory holds at most MAX_DEVICES devices anyway. */
export const MAX_PATTERN_HOSTS = MAX_DEVICES;

/** A host pattern longer than this is no host name (names are at most 253 characters). */
const MAX_PATTERN_LENGTH = 1024;

/** A host pattern Ansible would not expand, or one that expands to too many hosts. */
export class HostPatternError extends Error {}

/**
 * How many hosts `pattern` names, counted without expanding it (ranges multiply): arithmetic only, so
 * `web-[0:9999999]` costs nothing. A range that names no host (`[9:0]`, a step of 0) is an error.
 */
export function countHostPattern(pattern: string): number {
  if (pattern.length > MAX_PATTERN_LENGTH)
    throw new HostPatternError(`is ${pattern.length} characters long, above the limit of ${MAX_PATTERN_LENGTH}`);
  let total = 1;
  for (let rest = pattern, m = RANGE.exec(rest); m; rest = m[5]!, m = RANGE.exec(rest)) {
    const [, , from, to, stride] = m as unknown as [string, string, string, string, string | undefined];
    const step = stride ? Number(stride) : 1;
    let span: number;
    if (/^\d+$/.test(from) && /^\d+$/.test(to)) span = Number(to) - Number(from);
    else if (/^[a-z]$/i.test(from) && /^[a-z]$/i.test(to)) span = to.charCodeAt(0) - from.charCodeAt(0);
    else return total;
    if (step < 1) throw new HostPatternError(`range [${m[2]}:${m[3]}:${stride}]: the step must be at least 1`);
    if (span < 0) throw new HostPatternError(`range [${m[2]}:${m[3]}] names no host (the end is below the start)`);
    total *= Math.floor(span / step) + 1;
  }
  return total;
}

/** Expand Ansible host patterns like `web[01:03].example.com` or `db-[a:c]`: at most `limit` hosts, else a HostPatternError. */
export function expandHostPattern(pattern: string, limit = MAX_PATTERN_HOSTS): string[] {
  const count = countHostPattern(pattern);
  if (count > limit) throw new HostPatternError(`expands to ${count} hosts; a pattern must name at most ${limit}`);
  return expandCounted(pattern);
}

function expandCounted(pattern: string): string[] {
  const m = RANGE.exec(pattern);
  if (!m) return [pattern];
  const [, head, from, to, stride, tail] = m as unknown as [string, string, string, string, string | undefined, string];
  const step = stride ? Number(stride) : 1;
  const out: string[] = [];
  if (/^\d+$/.test(from) && /^\d+$/.test(to)) {
    const width = from.length > 1 && from.startsWith('0') ? from.length : 0;
    for (let n = Number(from); n <= Number(to); n += step) out.push(`${head}${String(n).padStart(width, '0')}`);
  } else if (/^[a-z]$/i.test(from) && /^[a-z]$/i.test(to)) {
    for (let c = from.charCodeAt(0); c <= to.charCodeAt(0); c += step) out.push(`${head}${String.fromCharCode(c)}`);
  } else return [pattern];
  return out.flatMap((prefix) => expandCounted(prefix + tail));
}

/** Split `key=value key2="quoted value"` into pairs; values are typed like Ansible's INI loader does. */
function parseKeyValues(text: string, source: string, line: number): Vars {
  const vars: Vars = {};
  const re = /\s*([A-Za-z_][A-Za-z0-9_]*)=("(?:[^"\\]|\\.)*"|'[^']*'|\S*)/gy;
  let pos = 0;
  while (pos < text.length) {
    if (/^\s*(#.*)?$/.test(text.slice(pos))) break;
    re.lastIndex = pos;
    const m = re.exec(text);
    if (!m) fail(source, `expected key=value, got "${text.slice(pos).trim()}"`, line);
    if (m[1] === '__proto__') fail(source, `variable "__proto__" ${RESERVED_NAME_RULE}`, line);
    vars[m[1]!] = typeValue(m[2]!);
    pos = re.lastIndex;
  }
  return vars;
}

function typeValue(raw: string): unknown {
  if ((raw.startsWith('"') && raw.endsWith('"')) || (raw.startsWith("'") && raw.endsWith("'"))) {
    const inner = raw.slice(1, -1);
    return raw.startsWith('"') ? inner.replace(/\\(.)/g, '$1') : inner;
  }
  if (/^-?\d+$/.test(raw)) return Number(raw);
  if (/^-?\d+\.\d+$/.test(raw)) return Number(raw);
  if (/^(true|false)$/i.test(raw)) return raw.toLowerCase() === 'true';
  if (/^[[{]/.test(raw)) {
    try {
      return JSON.parse(raw);
    } catch {
      return raw;
    }
  }
  return raw;
}

function parseIni(text: string, source: string): Model {
  const model = new Model();
  let section: { group: string; kind: 'hosts' | 'vars' | 'children' } = { group: 'ungrouped', kind: 'hosts' };
  text.split(/\r?\n/).forEach((rawLine, i) => {
    const lineNo = i + 1;
    const line = rawLine.trim();
    if (!line || line.startsWith('#') || line.startsWith(';')) return;
    const header = /^\[([^\]:\s]+)(?::(vars|children))?\]$/.exec(line);
    if (header) {
      section = { group: header[1]!, kind: (header[2] as 'vars' | 'children' | undefined) ?? 'hosts' };
      model.group(section.group);
      return;
    }
    if (line.startsWith('['))
      fail(source, `bad section header "${line}" (expected [group], [group:vars] or [group:children])`, lineNo);
    if (section.kind === 'vars') {
      const eq = line.indexOf('=');
      if (eq <= 0) fail(source, `expected key=value in [${section.group}:vars], got "${line}"`, lineNo);
      Object.assign(model.group(section.group).vars, parseKeyValues(line.replace(/\s*=\s*/, '='), source, lineNo));
      return;
    }
    if (section.kind === 'children') {
      const child = line.split(/\s+/)[0]!;
      model.group(section.group).children.push(child);
      model.group(child);
      return;
    }
    const space = line.search(/\s/);
    const pattern = space < 0 ? line : line.slice(0, space);
    const vars = space < 0 ? {} : parseKeyValues(line.slice(space), source, lineNo);
    for (const host of model.expand(pattern, source, { line: lineNo })) model.addHost(section.group, host, vars);
  });
  return model;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function parseYamlModel(text: string, source: string): Model {
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    fail(source, `not valid YAML: ${(err as Error).message}`);
  }
  if (!isRecord(doc)) fail(source, 'the top level must be a mapping of groups (e.g. "all:")');
  const shape = documentProblems(doc)[0];
  if (shape) fail(source, `${formatPath(shape.path)}${shape.deep ? '...' : ''}: ${shape.message}`);
  const model = new Model();
  const visit = (name: string, body: unknown, path: string): void => {
    const g = model.group(name);
    if (body === null || body === undefined) return;
    if (!isRecord(body)) fail(source, `${path}: a group must be a mapping with hosts, vars or children`);
    for (const key of Object.keys(body)) {
      if (!['hosts', 'vars', 'children'].includes(key))
        fail(source, `${path}.${key}: unknown key (allowed: hosts, vars, children)`);
    }
    if (body.vars !== undefined && body.vars !== null) {
      if (!isRecord(body.vars)) fail(source, `${path}.vars: must be a mapping`);
      Object.assign(g.vars, body.vars);
    }
    if (body.hosts !== undefined && body.hosts !== null) {
      if (!isRecord(body.hosts)) fail(source, `${path}.hosts: must be a mapping of host names to their vars`);
      for (const [pattern, vars] of Object.entries(body.hosts)) {
        if (vars !== null && vars !== undefined && !isRecord(vars))
          fail(source, `${path}.hosts.${pattern}: host vars must be a mapping`);
        for (const host of model.expand(pattern, source, { path: `${path}.hosts` }))
          model.addHost(name, host, (vars as Vars | null) ?? {});
      }
    }
    if (body.children !== undefined && body.children !== null) {
      if (!isRecord(body.children)) fail(source, `${path}.children: must be a mapping of groups`);
      for (const [child, childBody] of Object.entries(body.children)) {
        g.children.push(child);
        visit(child, childBody, `${path}.children.${child}`);
      }
    }
  };
  for (const [name, body] of Object.entries(doc)) {
    visit(name, body, name);
    if (name !== 'all') model.group('all').children.push(name);
  }
  return model;
}

/** True for text that looks like an Ansible inventory rather than a wavegate one. */
export function looksLikeAnsible(text: string, path = ''): boolean {
  const byText = ansibleByText(text, path);
  if (byText !== undefined) return byText;
  try {
    return isAnsibleDocument(parseYaml(text));
  } catch {
    return false;
  }
}

/**
 * What the file's name and first line say, without parsing it: Ansible (an INI name or a `[group]`
 * line), not Ansible (nothing but comments), or undefined when only the parsed document can tell.
 */
export function ansibleByText(text: string, path = ''): boolean | undefined {
  if (/\.(ini|cfg)$/i.test(path) || /(^|\/)hosts$/.test(path)) return true;
  const first = firstLine(text);
  if (!first) return false;
  if (/^\[[^\]]+\]$/.test(first)) return true;
  return undefined;
}

/** The first line that is not blank or a comment, trimmed; scanned line by line (no copy of a large file's lines). */
function firstLine(text: string): string | undefined {
  for (let start = 0; start < text.length; ) {
    const newline = text.indexOf('\n', start);
    const end = newline === -1 ? text.length : newline;
    const line = text.slice(start, end).trim();
    if (line && !line.startsWith('#') && !line.startsWith(';')) return line;
    start = end + 1;
  }
  return undefined;
}

/** A parsed YAML document in Ansible's shape (`all:`, or groups of `hosts:`/`children:`), not a wavegate inventory (`devices:`). */
export function isAnsibleDocument(doc: unknown): boolean {
  if (!isRecord(doc) || 'devices' in doc) return false;
  return 'all' in doc || Object.values(doc).some((v) => isRecord(v) && ('hosts' in v || 'children' in v));
}

/**
 * Parse an Ansible inventory into a wavegate inventory document. The format is `format`, else the
 * file name's (`.yaml`/`.yml` → YAML, `.ini`/`.cfg` → INI), else the text's (a `[...]` first line is INI).
 */
export function parseAnsibleInventory(text: string, source: string, format?: 'ini' | 'yaml'): Record<string, unknown> {
  const first = text
    .split(/\r?\n/)
    .map((l) => l.trim())
    .find((l) => l && !l.startsWith('#') && !l.startsWith(';'));
  if (!first) fail(source, 'the inventory is empty');
  const kind =
    format ??
    (/\.ya?ml$/i.test(source) ? 'yaml' : /\.(ini|cfg)$/i.test(source) ? 'ini' : first.startsWith('[') ? 'ini' : 'yaml');
  const model = kind === 'ini' ? parseIni(text, source) : parseYamlModel(text, source);
  return toInventoryDocument(model, source);
}

function toInventoryDocument(model: Model, source: string): Record<string, unknown> {
  const all = model.group('all');
  for (const g of model.groups.values()) {
    if (
      g.name !== 'all' &&
      g.name !== 'ungrouped' &&
      !all.children.includes(g.name) &&
      ![...model.groups.values()].some((p) => p.children.includes(g.name))
    ) {
      all.children.push(g.name);
    }
  }
  if (model.groups.has('ungrouped') && !all.children.includes('ungrouped')) all.children.push('ungrouped');

  // Ancestors (root first) of every group, for var inheritance and group labels.
  const parents = new Map<string, string[]>();
  for (const g of model.groups.values())
    for (const c of g.children) parents.set(c, [...(parents.get(c) ?? []), g.name]);
  const chain = (name: string, seen = new Set<string>()): string[] => {
    if (seen.has(name)) fail(source, `group "${name}" is its own ancestor (children cycle)`);
    seen.add(name);
    const ups = (parents.get(name) ?? []).flatMap((p) => chain(p, new Set(seen)));
    return [...new Set([...ups, name])];
  };

  const pools = new Map<string, Record<string, unknown>>();
  const devices: Array<Record<string, unknown>> = [];
  for (const host of model.hostOrder) {
    const direct = [...model.groups.values()].filter((g) => g.hosts.has(host));
    const groups = [...new Set(direct.flatMap((g) => chain(g.name)))];
    const vars: Vars = {};
    for (const name of groups) Object.assign(vars, model.group(name).vars);
    for (const g of direct) Object.assign(vars, g.hosts.get(host));
    const poolGroup = direct.find((g) => g.name !== 'all' && g.name !== 'ungrouped')?.name ?? 'ungrouped';
    const pool = str(vars.wavegate_pool) ?? poolGroup;
    // A Map, then entries: a label called "__proto__" or "constructor" becomes an own key, which the
    // inventory validation then refuses by name (an assignment would drop or shadow it silently).
    const labels = new Map<string, string>();
    for (const name of groups) if (name !== 'all' && name !== 'ungrouped') labels.set(`group/${name}`, 'true');
    if (isRecord(vars.wavegate_labels))
      for (const [k, v] of Object.entries(vars.wavegate_labels)) labels.set(k, String(v));
    for (const [k, v] of Object.entries(vars))
      if (k.startsWith('label_') && k.length > 6) labels.set(k.slice(6), String(v));
    const connection = str(vars.ansible_connection);
    const os =
      str(vars.wavegate_os) ??
      str(vars.ansible_os_family) ??
      str(vars.ansible_distribution) ??
      (connection && /winrm|psrp/.test(connection) ? 'windows' : undefined);
    const ssh: Record<string, unknown> = {};
    if (vars.ansible_ssh_private_key_file !== undefined) ssh.key = String(vars.ansible_ssh_private_key_file);
    if (vars.wavegate_host_key !== undefined) ssh.hostKey = String(vars.wavegate_host_key);
    if (vars.wavegate_known_hosts !== undefined) ssh.knownHosts = String(vars.wavegate_known_hosts);
    const runtimes = vars.wavegate_runtimes;
    const device: Record<string, unknown> = {
      id: host,
      host: str(vars.ansible_host) ?? str(vars.ansible_ssh_host) ?? host,
      port: num(vars.ansible_port ?? vars.ansible_ssh_port),
      user: str(vars.ansible_user ?? vars.ansible_ssh_user),
      pool,
      class: str(vars.wavegate_class),
      os,
      labels: Object.fromEntries(labels),
      updateClass: str(vars.wavegate_update_class),
      runtimes: Array.isArray(runtimes)
        ? runtimes.map(String)
        : typeof runtimes === 'string'
          ? runtimes
              .split(',')
              .map((r) => r.trim())
              .filter(Boolean)
          : undefined,
      transport: str(vars.wavegate_transport),
      ssh: Object.keys(ssh).length ? ssh : undefined,
    };
    devices.push(Object.fromEntries(Object.entries(device).filter(([, v]) => v !== undefined)));
    const budget = model.groups.get(pool)?.vars.wavegate_disruption_budget;
    if (!pools.has(pool)) pools.set(pool, budget !== undefined ? { disruptionBudget: budget } : {});
  }
  return { pools: Object.fromEntries(pools), devices };
}

function str(value: unknown): string | undefined {
  return value === undefined || value === null || value === '' ? undefined : String(value);
}

/** Ports stay as given when they are not numeric, so validation names the bad value. */
function num(value: unknown): unknown {
  if (value === undefined || value === null || value === '') return undefined;
  return typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : value;
}
