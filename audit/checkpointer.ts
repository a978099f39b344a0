import { hostname } from 'node:os';
import { AUDIT_EVENTS, parseAuditLog, type AuditEvent, type AuditEventName, type AuditHead } from '../core/audit';
import { checkpointBody, checkpointOrigin, parseCheckpoint, signCheckpoint, signedNote } from '../core/checkpoint';
import { WavegateError } from '../core/errors';
import type { KeyPair } from '../core/signing';
import { largestSize, lastCosigned, pinnedKeyText, signersOf, type PinnedKey } from '../core/trail-checkpoints';
import { TrailTrees, type TrailTree } from '../core/trail-tree';
import type { AuditStore } from './types';
import { requestCosignature, type CosignatureAnswer } from './witness-client';

/**
 * The checkpointer (docs/operations.md, "Checkpoints and the witness"): after the workflow's appendAudit activity
 * writes a phase-transition record, a checkpoint of the trail as stored (its Merkle tree over the records' hashes,
 * core/trail-checkpoints.ts) is signed with the worker's checkpoint key, cosigned by the witness when it agrees
 * (core/witness.ts), and kept beside the trail (AuditStore.appendCheckpoint). No Temporal action of its own: it
 * runs inside the append's activity (index.ts auditActivitiesOf), for the file store and PostgreSQL alike.
 *
 * A witness that refuses or cannot be reached within WITNESS_TIMEOUT_MS does not stall the trail: the checkpoint
 * is kept with the log's signature alone, said loudly in the worker's log (an uncosigned checkpoint is what
 * `audit --verify --witness-key` and the offline verifier refuse), and the next transition asks again. A retried
 * append of the same record adds no second checkpoint (the store keeps one per size, sizes only growing).
 */

/**
 * Records that are not a step of the rollout's story: what happened to devices (a batch's outcomes, the devices
 * skipped, the floors confirmed), a canary's verdict, an operator's override, a watch's passing checks. Every other record gets a checkpoint,
 * so a transition added later is checkpointed without a second list to remember.
 */
const NOT_TRANSITIONS: ReadonlySet<AuditEventName> = new Set<AuditEventName>([
  'devices.outcome',
  'devices.skipped',
  'floor.confirmed',
  'canary.verdict',
  'audit.override',
  'rollout.approval-refused',
  'rollout.starter',
  // Each check of a watch after promotion (every minute or so, for up to 7 days): its start, a failure and its
  // end are the transitions, and are checkpointed.
  'watch.passed',
  'watch.inconclusive',
]);

/** The records that end or begin a step of the rollout's story: each gets a checkpoint. */
export const CHECKPOINTED_EVENTS: ReadonlySet<AuditEventName> = new Set(
  AUDIT_EVENTS.filter((event) => !NOT_TRANSITIONS.has(event)),
);

/** How long the witness may take, every try included: a dead witness costs a transition this, no more. */
export const WITNESS_TIMEOUT_MS = 5_000;
/** Sizes the witness is asked from (see proofStarts): the last cosigned, then the newest uncosigned ones. */
const MAX_WITNESS_ASKS = 3;

export interface CheckpointWitness {
  url: string;
  /** The witness's public key, pinned: a cosignature that does not verify under it is not kept. */
  key: PinnedKey;
}

export interface CheckpointerOptions {
  /** The worker's checkpoint key (`--checkpoint-key`, a `wavegate keygen` key file). */
  pair: KeyPair;
  /** The key name of the log's signature lines (`--checkpoint-name`). */
  name: string;
  witness?: CheckpointWitness;
  log: (line: string) => void;
  /** The witness's client (tests give a fake; default requestCosignature). */
  cosign?: typeof requestCosignature;
  witnessTimeoutMs?: number;
}

/** What a worker makes checkpoints with: the configuration `wavegate worker` read from its flags. */
export type CheckpointConfig = Omit<CheckpointerOptions, 'log' | 'cosign'>;

export interface Checkpointer {
  /** After `event` was appended as `head`: a checkpoint when it is a transition (store failures are thrown). */
  afterAppend(event: AuditEvent, head: AuditHead): Promise<void>;
}

/** `--checkpoint-name`'s default: the host name when it is a C2SP key name, else `wavegate`. */
export function defaultCheckpointName(host = hostname()): string {
  return /^[\x21-\x2a\x2c-\x7e]{1,128}$/.test(host) ? host : 'wavegate';
}

export function createCheckpointer(store: AuditStore, opts: CheckpointerOptions): Checkpointer {
  const cosign = opts.cosign ?? requestCosignature;
  const trees = new TrailTrees();
  return {
    async afterAppend(event, head) {
      if (!CHECKPOINTED_EVENTS.has(event.event)) return;
      const id = event.rolloutId;
      const { tree, size } = await treeUpTo(store, trees, id, head);
      if (size === undefined) {
        opts.log(
          `checkpoint: ${id}: record ${head.seq} (${event.event}) is not in the trail as stored; no checkpoint made`,
        );
        return;
      }
      const notes = await store.checkpoints(id);
      if (largestSize(notes) >= size) return; // this append was retried: its checkpoint is kept already
      let body: string;
      try {
        body = checkpointBody({ origin: checkpointOrigin(id), size, root: tree.root(size) });
      } catch (err) {
        // An id that cannot be an origin (core/checkpoint.ts): said once per transition, never a stalled trail.
        if (!(err instanceof WavegateError)) throw err;
        opts.log(`checkpoint: ${id}: no checkpoint made: ${err.message}`);
        return;
      }
      const signature = signCheckpoint(body, opts.pair, opts.name);
      const cosigned = opts.witness
        ? await witnessLine(cosign, opts, opts.witness, { body, signature, size, tree, notes })
        : { line: null, why: 'no witness is configured (--witness)' };
      await store.appendCheckpoint(id, signedNote(body, cosigned.line ? [signature, cosigned.line] : [signature]));
      if (cosigned.line) opts.log(`checkpoint: ${id} size ${size} (${event.event}) cosigned by the witness`);
      else
        opts.log(
          `WARNING: checkpoint: ${id} size ${size} (${event.event}) kept UNCOSIGNED: ${cosigned.why}; \`audit --verify --witness-key\` and the offline verifier refuse it; the next transition asks the witness again`,
        );
    },
  };
}

/** The trail's tree as stored (from `trees`), and the size of the tree ending at `head`'s record (undefined: absent). */
async function treeUpTo(
  store: AuditStore,
  trees: TrailTrees,
  rolloutId: string,
  head: AuditHead,
): Promise<{ tree: TrailTree; size: number | undefined }> {
  const records = (await store.segments(rolloutId)).flatMap((segment) => parseAuditLog(segment.text).records);
  let size: number | undefined;
  for (let i = records.length - 1; i >= 0 && size === undefined; i--)
    if (records[i]!.seq === head.seq && records[i]!.hash === head.hash) size = i + 1;
  return { tree: trees.treeOf(rolloutId, records), size };
}

interface Asking {
  body: string;
  signature: string;
  size: number;
  tree: TrailTree;
  notes: readonly string[];
}

/**
 * The witness's cosignature line for the checkpoint, verified under its pinned key; or null and why not. The
 * proof starts where the witness's state is: first the last kept checkpoint it cosigned (none: the empty
 * tree), then, on a CONFLICT, the newest kept checkpoints after that one (the witness may have cosigned one
 * whose answer was lost, and holds that size now); all within the one time bound.
 */
async function witnessLine(
  cosign: typeof requestCosignature,
  opts: CheckpointerOptions,
  witness: CheckpointWitness,
  asking: Asking,
): Promise<{ line: string | null; why: string }> {
  const deadline = Date.now() + (opts.witnessTimeoutMs ?? WITNESS_TIMEOUT_MS);
  const note = signedNote(asking.body, [asking.signature]);
  let why = 'not asked';
  for (const from of proofStarts(asking.notes, witness.key, asking.size)) {
    const left = deadline - Date.now();
    if (left <= 0) {
      why = `${why} (then no time left within ${opts.witnessTimeoutMs ?? WITNESS_TIMEOUT_MS} ms)`;
      break;
    }
    const answer: CosignatureAnswer = await cosign(witness.url, note, asking.tree.consistencyProof(from, asking.size), {
      timeoutMs: left,
    });
    if (answer.ok) return checkedLine(asking.body, asking.signature, answer.lines, witness.key);
    why = `the witness answered ${answer.code}: ${answer.message}`;
    if (answer.code !== 'CONFLICT') break;
  }
  return { line: null, why };
}

/** Where the witness's state may be, most likely first: sizes below `size` the proof may start from. */
function proofStarts(notes: readonly string[], key: PinnedKey, size: number): number[] {
  const last = lastCosigned(notes, key);
  const starts = [last?.size ?? 0];
  for (let i = notes.length - 1; i > (last?.index ?? -1) && starts.length < MAX_WITNESS_ASKS; i--) {
    const parsed = parseCheckpoint(notes[i]);
    if (parsed.ok && parsed.note.checkpoint.size < size && !starts.includes(parsed.note.checkpoint.size))
      starts.push(parsed.note.checkpoint.size);
  }
  return starts;
}

/** The witness's line that verifies under its pinned key, or null and why (a line under another key is not kept). */
function checkedLine(
  body: string,
  signature: string,
  lines: readonly string[],
  key: PinnedKey,
): { line: string | null; why: string } {
  for (const line of lines) {
    const parsed = parseCheckpoint(signedNote(body, [signature, line]));
    if (parsed.ok && signersOf(parsed.note, key, 'witness').ok) return { line, why: '' };
  }
  return {
    line: null,
    why: `the witness answered ${lines.length} line${lines.length === 1 ? '' : 's'}, none a cosignature under the pinned witness key ${pinnedKeyText(key)}`,
  };
}
