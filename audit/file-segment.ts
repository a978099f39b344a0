import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { parseAuditLog } from '../core/audit';
import { auditFilePath, auditSegmentNumbers } from './file-names';
import type { SegmentChecker, SegmentPlace, SegmentRead, SegmentState } from './segment-check';

/** What the file store proves a segment's prefix with: its length and the SHA-256 of its text. */
export interface TextProof {
  length: number;
  digest: string;
}

/** A segment file as checked: the file's path and its text (for the append after it). */
export interface FileSegmentState extends SegmentState {
  path: string;
  text: string;
}

/** What the file store's activities share: the directory, the key, the log and what was found whole. */
export interface FileStoreContext {
  dir: string;
  macKey?: Uint8Array;
  log: (line: string) => void;
  checker: SegmentChecker<TextProof>;
}

const digestOf = (text: string) => createHash('sha256').update(text).digest('hex');

/**
 * Read and check a segment file (segment-check.ts): readable, chained from its start, each record's MAC
 * the key's. The text before what was last found whole is compared by digest, so an edit before it is
 * still seen, and only the lines after it are parsed and checked.
 */
function inspectSegmentFile(checker: SegmentChecker<TextProof>, path: string, segment: number): FileSegmentState {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const read: SegmentRead<TextProof> =
      code === 'ENOENT'
        ? { kind: 'absent' }
        : {
            kind: 'failed',
            fresh: [],
            problem: {
              line: null,
              seq: 0,
              problem: 'unreadable',
              message: `cannot read the file (${code ?? (err as Error).message})`,
            },
          };
    return { ...checker.check(path, segment, undefined, read), path, text: '' };
  }
  const candidate = checker.wholePrefix(path);
  const known =
    candidate !== undefined &&
    text.length >= candidate.proof.length &&
    digestOf(text.slice(0, candidate.proof.length)) === candidate.proof.digest
      ? candidate
      : undefined;
  const fresh = parseAuditLog(known ? text.slice(known.proof.length) : text);
  const unreadable = fresh.unreadable && {
    ...fresh.unreadable,
    line: fresh.unreadable.line + (known ? known.records.length : 0),
  };
  const proof = () => (text.endsWith('\n') ? { length: text.length, digest: digestOf(text) } : undefined);
  const state = checker.check(path, segment, known, { kind: 'read', fresh: fresh.records, unreadable, proof });
  return { ...state, path, text };
}

/** The current (last) segment of a rollout's chain as found on disk, checked. */
export function inspectCurrentSegment(ctx: FileStoreContext, rolloutId: string): FileSegmentState {
  const segment = auditSegmentNumbers(ctx.dir, rolloutId).at(-1) ?? 1;
  return inspectSegmentFile(ctx.checker, auditFilePath(ctx.dir, rolloutId, undefined, segment), segment);
}

/** The file store's words for a place in a segment file: `<path> line N`, or the path alone. */
export function filePlace(path: string, rolloutId: string): SegmentPlace {
  return {
    name: path,
    of: (p) => `${path}${p.line === null ? '' : ` line ${p.line}`}`,
    repair: `repair the file (check with \`wavegate audit ${rolloutId} --verify\`)`,
  };
}
