import type { Profile, Revision } from './revision';
import { classifyRevision, commandWords, splitCommand, type Provability } from './provability';

/**
 * Registration gates (docs/architecture.md, "Signed revisions and the registry"): checks on a revision, from its text and
 * the fleet it targets, before it is registered. Each gate has a named escape flag; an escaped gate
 * does not block, but yields a loud warning line and an audit record `{ gate, flag, reason }` that
 * the caller prints and keeps. A silent bypass would reintroduce the whole class of bug, so there is
 * none. Everything is returned as values with reason codes; nothing throws. Pure; no I/O.
 */
export type GateName =
  | 'unknown-target'
  | 'unprovable'
  | 'node-local-path'
  | 'portability'
  | 'no-way-back'
  | 'promised-delivery'
  | 'unresolvable-file';

export type GateReason =
  | 'EMPTY_SCOPE'
  | 'UNKNOWN_TARGET'
  | 'UNPROVABLE'
  | 'NODE_LOCAL_PATH'
  | 'NONPORTABLE'
  | 'NO_WAY_BACK'
  | 'PROMISED_DELIVERY'
  | 'UNRESOLVABLE_FILE';

export const ESCAPE_FLAGS = {
  'unknown-target': '--allow-unknown-targets',
  unprovable: '--allow-unprovable',
  'node-local-path': '--allow-local-paths',
  portability: '--allow-nonportable',
  'no-way-back': '--allow-no-way-back',
  'promised-delivery': '--allow-no-payload',
  'unresolvable-file': '--allow-missing-files',
} as const satisfies Record<GateName, string>;
export type EscapeFlag = (typeof ESCAPE_FLAGS)[GateName];

export interface GateFinding {
  gate: GateName;
  reason: GateReason;
  flag: EscapeFlag;
  message: string;
}

/** What an escaped gate leaves behind for the audit. */
export interface EscapeRecord {
  gate: GateName;
  flag: EscapeFlag;
  reason: string;
}

export interface GateReport {
  /** No gate blocks (every finding was escaped, or there were none). */
  ok: boolean;
  blocked: GateFinding[];
  escaped: EscapeRecord[];
  /** Loud lines for escaped gates, e.g. `WARNING: gate "portability" bypassed with --allow-nonportable: ...`. */
  warnings: string[];
  /** Non-blocking observations (e.g. an unknown Linux distribution next to `apt-get`). */
  notes: string[];
  provability: Provability;
  /** The ids of the devices the revision targets. */
  targets: string[];
}

/** The device fields the gates look at (an inventory Device fits). */
export interface GateDevice {
  id: string;
  host?: string;
  user?: string;
  os?: string;
  pool?: string;
  class?: string;
  labels?: Record<string, string>;
}

export interface GateInput {
  revision: Pick<Revision, 'apply' | 'verify' | 'rollback' | 'previous' | 'payload' | 'risk'>;
  /** The profile's scope (a label selector; `id`, `pool`, `class` and `os` select those fields). */
  scope?: Profile['scope'];
  /** Every device in the inventory. */
  devices: readonly GateDevice[];
  /** Escape flags given, with or without the leading `--`. */
  allow?: readonly string[];
}

/** Devices matched by a scope: every key must match (`id`, `pool`, `class`, `os` or a label). */
export function devicesInScope<D extends GateDevice>(
  scope: Record<string, string> | undefined,
  devices: readonly D[],
): D[] {
  const entries = Object.entries(scope ?? {});
  return devices.filter((d) =>
    entries.every(([key, value]) => {
      if (key === 'id' || key === 'pool' || key === 'class' || key === 'os') return d[key] === value;
      return d.labels?.[key] === value;
    }),
  );
}

export function runRegistrationGates(input: GateInput): GateReport {
  const findings: GateFinding[] = [];
  const notes: string[] = [];
  const add = (gate: GateName, reason: GateReason, message: string) =>
    findings.push({ gate, reason, flag: ESCAPE_FLAGS[gate], message });
  const rev = input.revision;
  const steps: Array<[string, string]> = [
    ['apply', rev.apply],
    ['verify', rev.verify],
  ];
  if (rev.rollback) steps.push(['rollback', rev.rollback]);

  // unknown target
  const targets = devicesInScope(input.scope, input.devices);
  const wantedId = input.scope?.id;
  if (wantedId !== undefined && !input.devices.some((d) => d.id === wantedId)) {
    add('unknown-target', 'UNKNOWN_TARGET', `scope names device "${wantedId}", which the inventory does not know`);
  } else if (targets.length === 0) {
    const keys = Object.keys(input.scope ?? {});
    const unknownKeys = keys.filter(
      (k) => !['id', 'pool', 'class', 'os'].includes(k) && !input.devices.some((d) => d.labels && k in d.labels),
    );
    add(
      'unknown-target',
      'EMPTY_SCOPE',
      `scope ${JSON.stringify(input.scope ?? {})} matches no device${unknownKeys.length ? ` (no device has label ${unknownKeys.map((k) => `"${k}"`).join(', ')})` : ''}`,
    );
  }

  // provability
  const provability = classifyRevision(rev);
  if (!provability.provable) {
    add(
      'unprovable',
      'UNPROVABLE',
      `the revision is not provable (${provability.reasons.join('; ')}); its devices could only ever reach "claimed"`,
    );
  }

  // node-local paths
  for (const [step, text] of steps) {
    for (const problem of nodeLocalPaths(text, targets))
      add('node-local-path', 'NODE_LOCAL_PATH', `${step}: ${problem}`);
  }

  // portability over the OS mix of the targets
  for (const [step, text] of steps) {
    for (const req of REQUIREMENTS) {
      const hit = req.pattern.exec(text);
      if (!hit) continue;
      const wrong = targets.filter((d) => req.breaks(osFamily(d.os)));
      const unknown = targets.filter((d) => req.unsure?.(osFamily(d.os)));
      if (wrong.length) {
        add(
          'portability',
          'NONPORTABLE',
          `${step}: "${hit[0].trim()}" needs ${req.needs}, but ${wrong.length} target(s) are not: ${list(wrong.map((d) => `${d.id} (${d.os ?? 'unknown os'})`))}`,
        );
      } else if (unknown.length) {
        notes.push(
          `${step}: "${hit[0].trim()}" needs ${req.needs}; the distribution of ${list(unknown.map((d) => `${d.id} (${d.os ?? 'unknown os'})`))} is not known`,
        );
      }
    }
  }

  // a way back
  if (rev.risk !== 'safe' && !rev.rollback?.trim() && rev.previous === undefined) {
    add(
      'no-way-back',
      'NO_WAY_BACK',
      'a risky revision must name a way back: "previous" (the revision to return to) or an explicit "rollback" command; or mark it "risk: safe" on the record',
    );
  }

  // promised delivery, unresolvable files
  const payloadNames = new Set((rev.payload ?? []).map((f) => f.name));
  const delivered = deliveredFiles(rev.apply);
  const staged = stagedReferences(steps.map(([, t]) => t).join('\n'));
  if (payloadNames.size === 0) {
    const promise = staged.length
      ? `it uses $WAVEGATE_STAGING (${list(staged)})`
      : delivered.length
        ? `it delivers ${list(delivered)}`
        : PROMISE_WORDS.exec(rev.apply)
          ? `it says "${PROMISE_WORDS.exec(rev.apply)![0]}"`
          : undefined;
    if (promise)
      add(
        'promised-delivery',
        'PROMISED_DELIVERY',
        `apply promises a delivery (${promise}) but the revision ships no payload`,
      );
  } else {
    const missing = [...new Set([...staged, ...delivered])].filter((name) => !payloadNames.has(name));
    if (missing.length)
      add(
        'unresolvable-file',
        'UNRESOLVABLE_FILE',
        `the steps use ${list(missing)}, which the payload does not contain (payload: ${list([...payloadNames])})`,
      );
  }

  const allowed = new Set((input.allow ?? []).map((f) => (f.startsWith('--') ? f : `--${f}`)));
  const blocked: GateFinding[] = [];
  const escaped: EscapeRecord[] = [];
  const warnings: string[] = [];
  for (const f of findings) {
    if (allowed.has(f.flag)) {
      escaped.push({ gate: f.gate, flag: f.flag, reason: f.message });
      warnings.push(`WARNING: gate "${f.gate}" bypassed with ${f.flag}: ${f.message}`);
    } else blocked.push(f);
  }
  return {
    ok: blocked.length === 0,
    blocked,
    escaped,
    warnings,
    notes,
    provability,
    targets: targets.map((d) => d.id),
  };
}

function list(items: readonly string[]): string {
  return items.length > 5 ? `${items.slice(0, 5).join(', ')} and ${items.length - 5} more` : items.join(', ');
}

// --- node-local paths -----------------------------------------------------------------------------

const HOME_PATTERNS: Array<[RegExp, string]> = [
  [/(?:^|[\s"'=:])\/home\/([A-Za-z0-9._-]+)/g, '/home/'],
  [/(?:^|[\s"'=:])\/Users\/([A-Za-z0-9._-]+)/g, '/Users/'],
  [/(?:^|[\s"'=])[A-Za-z]:\\Users\\([^\\\s"']+)/gi, 'C:\\Users\\'],
];

function nodeLocalPaths(text: string, targets: readonly GateDevice[]): string[] {
  const problems: string[] = [];
  for (const [pattern, prefix] of HOME_PATTERNS) {
    for (const match of text.matchAll(pattern)) {
      const who = match[1]!;
      if (/^(shared|public|default)$/i.test(who)) continue;
      const others = targets.filter((d) => d.user !== who);
      if (others.length)
        problems.push(
          `hardcodes ${prefix}${who}, the home of "${who}", while targeting ${list(others.map((d) => `${d.id} (user ${d.user ?? '?'})`))}; use $HOME or ~`,
        );
    }
  }
  const paths = [...text.matchAll(/(?:^|[\s"'=])((?:\/|~\/|\$HOME\/|\$\{HOME\}\/|[A-Za-z]:\\)[^\s"';|&]*)/g)].map(
    (m) => m[1]!,
  );
  for (const target of targets) {
    const names = [target.id, target.host].filter(
      (n): n is string => !!n && n.length >= 3 && !/^[\d.:]+$/.test(n) && n !== 'localhost',
    );
    for (const path of paths) {
      const parts = path.split(/[\\/]/).map((p) => p.toLowerCase());
      const name = names.find((n) => parts.includes(n.toLowerCase()));
      if (name && targets.length > 1) {
        problems.push(
          `path ${path} is specific to ${target.id} ("${name}") but the revision targets ${targets.length} devices`,
        );
      }
    }
  }
  return [...new Set(problems)];
}

// --- portability ----------------------------------------------------------------------------------

export type OsFamily = 'windows' | 'macos' | 'debian' | 'rhel' | 'suse' | 'alpine' | 'arch' | 'linux' | 'unknown';

export function osFamily(os: string | undefined): OsFamily {
  const o = (os ?? '').toLowerCase();
  if (!o) return 'unknown';
  if (/win/.test(o)) return 'windows';
  if (/mac|darwin|osx/.test(o)) return 'macos';
  if (/debian|ubuntu|mint|raspbian|pop[-_ ]?os|kali/.test(o)) return 'debian';
  if (/rhel|centos|fedora|rocky|alma|red ?hat|amzn|amazon/.test(o)) return 'rhel';
  if (/suse|sles/.test(o)) return 'suse';
  if (/alpine/.test(o)) return 'alpine';
  if (/arch|manjaro/.test(o)) return 'arch';
  if (/linux/.test(o)) return 'linux';
  return 'unknown';
}

const LINUX: ReadonlySet<OsFamily> = new Set(['debian', 'rhel', 'suse', 'alpine', 'arch', 'linux']);
const isKnownLinux = (f: OsFamily) => LINUX.has(f) && f !== 'linux';

interface Requirement {
  needs: string;
  pattern: RegExp;
  /** This family certainly cannot run it. */
  breaks: (family: OsFamily) => boolean;
  /** Cannot tell (a generic "linux"). */
  unsure?: (family: OsFamily) => boolean;
}

const REQUIREMENTS: Requirement[] = [
  {
    needs: 'Windows (PowerShell / cmd)',
    pattern:
      /\S+\.ps1\b|\bpowershell(\.exe)?\b|\bcmd(\.exe)? \/c\b|(^|[\s;&|])(reg|sc|msiexec|choco|winget)(\.exe)?\s|\b(Get|Set|New|Remove|Start|Stop|Restart|Install|Copy)-(Item|ItemProperty|Service|Content|Process|Package|WindowsFeature|ChildItem)\b/i,
    breaks: (f) => f !== 'windows' && f !== 'unknown',
  },
  {
    needs: 'a POSIX system',
    pattern: /(^|[\s;&|])(chmod|chown|ln -s|sh -c|bash -c)\s|(^|[\s"'=])\/(etc|usr|var|opt)\//,
    breaks: (f) => f === 'windows',
  },
  {
    needs: 'Linux with systemd',
    pattern: /(^|[\s;&|])(systemctl|journalctl)\s/,
    breaks: (f) => f === 'windows' || f === 'macos',
  },
  {
    needs: 'a Debian-family system (apt/dpkg)',
    pattern: /(^|[\s;&|])(apt-get|apt|dpkg|add-apt-repository)\s/,
    breaks: (f) => f === 'windows' || f === 'macos' || (isKnownLinux(f) && f !== 'debian'),
    unsure: (f) => f === 'linux' || f === 'unknown',
  },
  {
    needs: 'a Red Hat-family system (yum/dnf/rpm)',
    pattern: /(^|[\s;&|])(yum|dnf|rpm)\s/,
    breaks: (f) => f === 'windows' || f === 'macos' || (isKnownLinux(f) && f !== 'rhel' && f !== 'suse'),
    unsure: (f) => f === 'linux' || f === 'unknown',
  },
  {
    needs: 'Alpine (apk)',
    pattern: /(^|[\s;&|])apk\s+(add|del|upgrade|update)\b/,
    breaks: (f) => f === 'windows' || f === 'macos' || (isKnownLinux(f) && f !== 'alpine'),
    unsure: (f) => f === 'linux' || f === 'unknown',
  },
  {
    needs: 'macOS (brew/launchctl)',
    pattern: /(^|[\s;&|])(brew|launchctl|softwareupdate)\s|\bdefaults write\b/,
    breaks: (f) => f !== 'macos' && f !== 'unknown',
  },
];

// --- delivery -------------------------------------------------------------------------------------

const PROMISE_WORDS =
  /\b(will arrive|arrives? via|via (sync|rsync|the payload)|from the payload|is shipped|ships with|delivered by)\b/i;
const DELIVERY_COMMANDS = /^(install|cp|copy|rsync|scp|mv|deploy|copy-item|xcopy|robocopy|unzip|tar)$/i;

/** `$WAVEGATE_STAGING/<name>` references (also `${WAVEGATE_STAGING}` and `%WAVEGATE_STAGING%`). */
function stagedReferences(text: string): string[] {
  const names = new Set<string>();
  for (const m of text.matchAll(
    /(?:\$\{?WAVEGATE_STAGING\}?|%WAVEGATE_STAGING%|\$env:WAVEGATE_STAGING)(?:[\\/]([A-Za-z0-9._-]+))?/g,
  ))
    names.add(m[1] ?? '$WAVEGATE_STAGING');
  return [...names];
}

/** Relative source files of copy-like commands: files that must come from the payload. */
function deliveredFiles(apply: string): string[] {
  const names: string[] = [];
  for (const seg of splitCommand(apply)) {
    const words = commandWords(seg.text);
    if (!words.length || !DELIVERY_COMMANDS.test(words[0]!)) continue;
    const args = words.slice(1).filter((w) => !w.startsWith('-'));
    const needsValue = /^(install)$/.test(words[0]!)
      ? words.slice(1).filter((_w, i, all) => /^-[mogt]$/.test(all[i - 1] ?? ''))
      : [];
    const operands = args.filter((w) => !needsValue.includes(w));
    if (/^tar$/i.test(words[0]!)) {
      const f = words.findIndex((w) => /^-?[a-z]*f$/.test(w));
      const file = f >= 0 ? words[f + 1] : undefined;
      if (file && isRelativeFile(file)) names.push(unquoteWord(file));
      continue;
    }
    const source = operands.length >= 2 || /^(unzip|deploy)$/i.test(words[0]!) ? operands[0] : undefined;
    if (source && isRelativeFile(source)) names.push(unquoteWord(source));
  }
  return names;
}

function unquoteWord(w: string): string {
  return w.replace(/^["']|["']$/g, '').replace(/^\.\//, '');
}

function isRelativeFile(word: string): boolean {
  const w = unquoteWord(word);
  return /^[A-Za-z0-9._-]+$/.test(w) && /[A-Za-z]/.test(w) && !/^\.+$/.test(w);
}
