import { createHash } from 'node:crypto';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { WavegateError } from '../core/errors';

/**
 * The names of the file store's files (the naming rules are at the top of file.ts): a rollout id's stem,
 * its segment files, and the chains of earlier runs moved aside.
 */

/** An encoded id longer than this is stored under a digest form (auditFileStem): room for `@<runId>+<n>.jsonl.lock`. */
export const MAX_AUDIT_STEM = 180;
/** Ids longer than this are refused (Temporal's own default limit on a workflow id). */
export const MAX_AUDIT_ID = 1000;
/** How much of the encoded id a digest-form stem keeps in front, for people listing the directory. */
const DIGEST_STEM_PREFIX = 100;

function encodeAuditId(rolloutId: string): string {
  let out = '';
  for (const ch of rolloutId) {
    if (/[a-z0-9_-]/.test(ch) || (ch === '.' && out.length > 0)) out += ch;
    else for (const byte of new TextEncoder().encode(ch)) out += `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

/**
 * The file name (without `.jsonl`) of an id's trail: the id percent-encoded (see the comment at the top of file.ts),
 * or, when that is longer than MAX_AUDIT_STEM characters (a slice's trail under a long profile and phase
 * name: `rollout:<profile>:<stamp>/<run8>/<mode>-<phase>-<k>`), its first DIGEST_STEM_PREFIX encoded
 * characters (never cutting a `%XX`), `~` and the SHA-256 hex of the id: at most 165 characters. `~`
 * never occurs in an encoded id, so a digest-form name never equals an encoded one, and every id of
 * MAX_AUDIT_STEM encoded characters or fewer keeps the name it always had.
 */
export function auditFileStem(rolloutId: string): string {
  if (typeof rolloutId !== 'string' || rolloutId.length === 0) {
    throw new WavegateError('INVALID_INPUT', `rollout id ${JSON.stringify(rolloutId)}: expected a non-empty string`);
  }
  if (rolloutId.length > MAX_AUDIT_ID)
    throw new WavegateError(
      'INVALID_INPUT',
      `rollout id "${rolloutId.slice(0, 40)}…": too long for an audit trail (${rolloutId.length} > ${MAX_AUDIT_ID} characters)`,
    );
  const out = encodeAuditId(rolloutId);
  if (out.length <= MAX_AUDIT_STEM) return out;
  let prefix = out.slice(0, DIGEST_STEM_PREFIX);
  const cut = prefix.lastIndexOf('%');
  if (cut > prefix.length - 3) prefix = prefix.slice(0, cut);
  return `${prefix}~${createHash('sha256').update(rolloutId, 'utf8').digest('hex')}`;
}

/**
 * The rollout id a file stem (without `.jsonl`, `@run` suffix removed) stands for. A digest-form stem
 * (`…~<sha256>`, an id too long to encode in a file name) is not reversible: its records name the id.
 */
export function rolloutIdOfStem(stem: string): string {
  if (stem.includes('~'))
    throw new WavegateError(
      'INVALID_INPUT',
      `audit file stem "${stem.slice(0, 40)}…" is a digest of a long id: read the rolloutId of its records`,
    );
  return decodeURIComponent(stem);
}

/**
 * One segment file of a rollout's chain: segment 1 is `<stem>.jsonl` (or `<stem>@<run>.jsonl` for an
 * earlier execution); a later segment, started only by an `audit.override`, is `<stem>+<n>.jsonl`
 * (`+` never occurs in an encoded id either).
 */
export function auditFilePath(auditDir: string, rolloutId: string, runId?: string, segment = 1): string {
  const base = runId === undefined ? auditFileStem(rolloutId) : `${auditFileStem(rolloutId)}@${auditFileStem(runId)}`;
  return join(auditDir, `${base}${segment > 1 ? `+${segment}` : ''}.jsonl`);
}

/**
 * The checkpoints kept beside a chain (file-checkpoints.ts): its first segment's path and `.checkpoints`
 * (`<stem>.jsonl.checkpoints`, `<stem>@<run>.jsonl.checkpoints` once moved aside). No segment or earlier run is
 * named so: those end in `.jsonl`.
 */
export function auditCheckpointsPath(auditDir: string, rolloutId: string, runId?: string): string {
  return `${auditFilePath(auditDir, rolloutId, runId)}.checkpoints`;
}

/** The segment numbers of a chain that exist on disk, ascending. */
export function auditSegmentNumbers(auditDir: string, rolloutId: string, runId?: string): number[] {
  if (!existsSync(auditDir)) return [];
  const base = basename(auditFilePath(auditDir, rolloutId, runId), '.jsonl');
  const numbers: number[] = [];
  for (const name of readdirSync(auditDir)) {
    if (name === `${base}.jsonl`) numbers.push(1);
    const match = name.startsWith(`${base}+`) ? /^\+([1-9]\d{0,8})\.jsonl$/.exec(name.slice(base.length)) : null;
    if (match && Number(match[1]) > 1) numbers.push(Number(match[1]));
  }
  return numbers.sort((a, b) => a - b);
}

/** Run ids of earlier executions of this rollout id whose chains were moved aside, oldest file first. */
export function archivedAuditRuns(auditDir: string, rolloutId: string): string[] {
  const prefix = `${auditFileStem(rolloutId)}@`;
  if (!existsSync(auditDir)) return [];
  return readdirSync(auditDir)
    .filter((name) => name.startsWith(prefix) && name.endsWith('.jsonl') && !name.slice(prefix.length).includes('+'))
    .map((name) => ({ name, mtime: statSync(join(auditDir, name)).mtimeMs }))
    .sort((a, b) => a.mtime - b.mtime)
    .map(({ name }) => decodeURIComponent(name.slice(prefix.length, -'.jsonl'.length)));
}
