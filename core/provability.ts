/**
 * Provability (docs/formats.md): from the shape of a revision's steps alone, before anything runs. `apply`
 * must be a machine command; `verify` must be a machine command whose exit status reads the fact back.
 * A step is not provable when it is empty, prose (non-ASCII text, or sentence-like words), a no-op in
 * the shape of a command (`true`, `:`, `exit 0`, `echo ...`, `python -c "pass"`, `/bin/true` ...), or
 * — for `verify` — a command whose status is forced to 0 (`check || true`, `check; echo done`,
 * `check | cat`). A revision that is not provable may still be registered (with --allow-unprovable),
 * but its devices can only ever reach `claimed`, never `applied`. Pure; no I/O.
 */
export type StepReason = 'EMPTY' | 'NON_ASCII' | 'PROSE' | 'NO_OP' | 'ALWAYS_SUCCEEDS';

export interface StepClass {
  provable: boolean;
  reason?: StepReason;
  /** What was found, for the operator. */
  detail: string;
}

export interface Provability {
  provable: boolean;
  apply: StepClass;
  verify: StepClass;
  /** One line per failing step, e.g. `verify: NO_OP: "exit 0" always succeeds and reads nothing back`. */
  reasons: string[];
}

export interface Segment {
  text: string;
  /** The operator that joins this segment to the next one ('' for the last). */
  next: '&&' | '||' | ';' | '|' | '\n' | '&' | '';
}

/** Split a shell command into simple commands at `&&`, `||`, `;`, `|`, `&` and newlines, outside quotes. */
export function splitCommand(text: string): Segment[] {
  const out: Segment[] = [];
  let current = '';
  let quote: '"' | "'" | undefined;
  let comment = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i]!;
    if (comment) {
      if (ch === '\n') comment = false;
      else continue;
    }
    if (quote) {
      if (ch === '\\' && quote === '"' && i + 1 < text.length) {
        current += ch + text[++i]!;
        continue;
      }
      if (ch === quote) quote = undefined;
      current += ch;
      continue;
    }
    if (ch === '\\' && i + 1 < text.length) {
      if (text[i + 1] === '\n') {
        i++;
        current += ' ';
        continue;
      }
      current += ch + text[++i]!;
      continue;
    }
    if (ch === '"' || ch === "'") {
      quote = ch;
      current += ch;
      continue;
    }
    if (ch === '#' && (current === '' || /\s$/.test(current))) {
      comment = true;
      continue;
    }
    const two = text.slice(i, i + 2);
    if (two === '&&' || two === '||') {
      out.push({ text: current.trim(), next: two });
      current = '';
      i++;
      continue;
    }
    if (ch === ';' || ch === '|' || ch === '\n' || (ch === '&' && text[i + 1] !== '>' && text[i - 1] !== '>')) {
      out.push({ text: current.trim(), next: ch as Segment['next'] });
      current = '';
      continue;
    }
    current += ch;
  }
  out.push({ text: current.trim(), next: '' });
  // Drop empty segments (blank lines, a trailing `;`); the last real one joins nothing.
  const segments = out.filter((seg) => seg.text);
  const last = segments[segments.length - 1];
  if (last && (last.next === ';' || last.next === '\n' || last.next === '&')) last.next = '';
  return segments;
}

/** The words of a simple command after leading `sudo`, `env` and `VAR=value` assignments. */
export function commandWords(segment: string): string[] {
  const words = segment.trim().split(/\s+/).filter(Boolean);
  while (
    words.length &&
    (/^(sudo|env|exec|command|nohup|time)$/.test(words[0]!) || /^[A-Za-z_][A-Za-z0-9_]*=/.test(words[0]!))
  )
    words.shift();
  return words;
}

function unquote(text: string): string {
  const t = text.trim();
  if (t.length >= 2 && (t[0] === '"' || t[0] === "'") && t[t.length - 1] === t[0]) return t.slice(1, -1);
  return t;
}

const NOOP_EXACT = new Set([
  'true',
  ':',
  '/bin/true',
  '/usr/bin/true',
  'exit',
  'exit 0',
  'return',
  'return 0',
  'test 1',
  '[ 1 ]',
  '[[ 1 ]]',
  'cat /dev/null',
  'cmd /c exit 0',
  'cmd.exe /c exit 0',
  'exit /b 0',
  '$true',
  'nop',
  'noop',
]);
const NOOP_COMMANDS =
  /^(echo|\/bin\/echo|printf|sleep|rem|write-host|write-output|wait|pwd|whoami|date|hostname|clear)$/i;
const INTERPRETER_INLINE = /^(python[0-9.]*|py|node|ruby|perl|php|bash|sh|zsh|dash|pwsh|powershell(?:\.exe)?)$/i;

/** True when the simple command does nothing that could change or read a fact. */
export function isNoOpSegment(segment: string): boolean {
  const text = segment.trim().replace(/\s+/g, ' ');
  if (!text || NOOP_EXACT.has(text) || NOOP_EXACT.has(text.toLowerCase())) return true;
  const words = commandWords(text);
  if (!words.length) return true;
  if (NOOP_COMMANDS.test(words[0]!)) return true;
  // python -c "pass", node -e "", sh -c "true", bash -c ':' ... : a no-op when the inline program is one.
  if (INTERPRETER_INLINE.test(words[0]!) && words.length >= 2 && /^(-c|-e|--eval|-Command|-command)$/.test(words[1]!)) {
    const program = unquote(text.slice(text.indexOf(words[1]!) + words[1]!.length));
    if (/^(python|py)/i.test(words[0]!)) {
      return splitPython(program).every((stmt) =>
        /^(pass|None|0|1|True|False|\.\.\.|print\(.*\)|import sys; sys\.exit\(0\)|sys\.exit\(0\)|exit\(0\)|quit\(\)|exit\(\)|import \w+|)$/.test(
          stmt.trim(),
        ),
      );
    }
    if (/^(node|ruby|perl|php)$/i.test(words[0]!))
      return /^\s*(;|0|1|true|null|undefined|console\.log\(.*\)|puts .*|print .*|process\.exit\(0\))?\s*;?\s*$/.test(
        program,
      );
    return splitCommand(program).every((s) => isNoOpSegment(s.text));
  }
  return false;
}

function splitPython(program: string): string[] {
  return program
    .split(/[;\n]/)
    .map((s) => s.trim())
    .filter(Boolean);
}

const STOPWORDS = new Set([
  'the',
  'a',
  'an',
  'should',
  'must',
  'please',
  'be',
  'is',
  'are',
  'now',
  'that',
  'this',
  'it',
  'in',
  'on',
  'to',
  'of',
  'and',
  'then',
  'make',
  'sure',
  'manually',
  'ensure',
  'will',
  'via',
  'by',
  'has',
  'have',
  'been',
  'was',
  'were',
  'we',
  'you',
  'your',
  'our',
  'after',
  'before',
  'when',
  'if',
  'done',
  'place',
  'ok',
  'works',
  'correctly',
  'properly',
]);
const PLACEHOLDER = /^(todo|tbd|n\/a|na|none|manual|manually|by hand|see (the )?(docs?|wiki|readme|runbook)\b.*|-|—)$/i;

/** Sentence-like text: a human instruction rather than a command. */
export function looksLikeProse(text: string): boolean {
  const t = text.trim();
  if (PLACEHOLDER.test(t)) return true;
  const words = t.split(/\s+/);
  const bare = t.replace(/[.,!?]+(\s|$)/g, '$1');
  const shellish = /[/$|&;<>=`"'(){}[\]*\\~@%+]|(^|\s)-{1,2}[A-Za-z]/.test(bare);
  const lower = words.map((w) => w.toLowerCase().replace(/[.,!?:]+$/, ''));
  const stop = lower.filter((w) => STOPWORDS.has(w)).length;
  if (/^[A-Z][a-z]+$/.test(words[0]!) && /[.!?]$/.test(t) && words.length >= 3 && stop >= 1) return true;
  if (!shellish && words.length >= 3 && stop / words.length >= 0.25) return true;
  return false;
}

/** Classify one step. `role` decides whether a forced-zero exit status matters (it does for verify). */
export function classifyStep(text: string | undefined, role: 'apply' | 'verify' | 'rollback' = 'verify'): StepClass {
  const t = (text ?? '').trim();
  if (!t) return { provable: false, reason: 'EMPTY', detail: 'the step is empty' };
  // eslint-disable-next-line no-control-regex
  const nonAscii = /[^\x09\x0a\x0d\x20-\x7e]/.exec(t);
  if (nonAscii)
    return {
      provable: false,
      reason: 'NON_ASCII',
      detail: `non-ASCII text (${JSON.stringify(nonAscii[0])}) is treated as prose for a person, not a command`,
    };
  const segments = splitCommand(t);
  if (segments.every((s) => isNoOpSegment(s.text))) {
    return {
      provable: false,
      reason: 'NO_OP',
      detail: `${JSON.stringify(short(t))} always succeeds and reads nothing back`,
    };
  }
  if (looksLikeProse(t))
    return {
      provable: false,
      reason: 'PROSE',
      detail: `${JSON.stringify(short(t))} reads as an instruction for a person, not a command`,
    };
  if (role === 'verify' && segments.length > 1) {
    const last = segments[segments.length - 1]!;
    const joiner = segments[segments.length - 2]!.next;
    const forced =
      joiner === '||' ||
      joiner === ';' ||
      joiner === '\n' ||
      joiner === '&' ||
      (joiner === '|' && /^(cat|tee|true|:)(\s|$)/.test(last.text));
    if (forced && isNoOpSegment(last.text)) {
      return {
        provable: false,
        reason: 'ALWAYS_SUCCEEDS',
        detail: `the exit status is forced to 0 by "${joiner === '\n' ? '\\n' : joiner} ${short(last.text)}"`,
      };
    }
    if (forced && joiner === '|') {
      return {
        provable: false,
        reason: 'ALWAYS_SUCCEEDS',
        detail: `the exit status is that of "| ${short(last.text)}", which always succeeds`,
      };
    }
  }
  return { provable: true, detail: 'a machine command' };
}

function short(text: string): string {
  const one = text.replace(/\s+/g, ' ');
  return one.length > 60 ? `${one.slice(0, 57)}...` : one;
}

export function classifyRevision(revision: { apply: string; verify: string }): Provability {
  const apply = classifyStep(revision.apply, 'apply');
  const verify = classifyStep(revision.verify, 'verify');
  const reasons: string[] = [];
  if (!apply.provable) reasons.push(`apply: ${apply.reason}: ${apply.detail}`);
  if (!verify.provable) reasons.push(`verify: ${verify.reason}: ${verify.detail}`);
  return { provable: apply.provable && verify.provable, apply, verify, reasons };
}
