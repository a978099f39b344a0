import { hexToBytes } from '@noble/hashes/utils.js';
import type { AuditRecord } from './audit';
import { consistencyProofOf, EMPTY_ROOT, HASH_BYTES, leafHash, nodeHash } from './merkle';

/**
 * A trail's Merkle tree kept whole (the checkpointer's memory of trails, audit/checkpointer.ts; `audit --verify`'s
 * checks of a trail's checkpoints): a tree's every perfect subtree root, kept
 * level by level, so a checkpoint of a trail that grew by k records hashes about 2k nodes instead of the whole
 * trail three times over (its leaves, its root, the witness's consistency proof). A checkpoint of a 10,000-record
 * trail on a busy 2-core machine: 1.3-1.8 s hashing it all, 0.2 s from the tree held (reading the trail and the
 * witness's round trip included). It holds what the trail as stored says: the records read at each checkpoint are compared
 * with the ones it holds (their hashes, as strings), and a trail that differs before its end is hashed again from
 * its records. Bounded: the least recently used trees go first past MAX_TREES trees or MAX_LEAVES leaves in all.
 * Pure (core/merkle.ts's hashes, no Node API); checked against core/merkle.ts's roots and proofs for every size.
 */

/**
 * A leaf is a record's `hash` (64 hex characters) as its 32 bytes; a record whose hash is not 64 lowercase hex
 * (an edited record in a segment an override set aside) is the 32 zero bytes, so every reader of a trail
 * computes the same tree from the same text.
 */
const ZERO_LEAF = new Uint8Array(HASH_BYTES);
const HEX64 = /^[0-9a-f]{64}$/;

/**
 * One record's Merkle leaf hash: SHA-256(0x00 || the 32 bytes of its hash). The leaves of a chain are its
 * readable records (parseAuditLog's) of every segment in order: segments are only appended to, never rewritten
 * (a broken one is set aside as it is), so each tree extends the one before.
 */
export function recordLeafHash(record: Pick<AuditRecord, 'hash'>): Uint8Array {
  const hash = (record as { hash?: unknown }).hash;
  return leafHash(typeof hash === 'string' && HEX64.test(hash) ? hexToBytes(hash) : ZERO_LEAF);
}

export const MAX_TREES = 64;
export const MAX_LEAVES = 1_000_000;

/** One trail's tree: level 0 the leaf hashes, level k the roots of its perfect subtrees of 2^k leaves. */
export class TrailTree {
  private readonly hashes: string[] = [];
  private readonly levels: Uint8Array[] = [];
  private readonly counts: number[] = [];

  get size(): number {
    return this.hashes.length;
  }

  /** The tree of a trail's records, in trail order. */
  static of(records: readonly Pick<AuditRecord, 'hash'>[]): TrailTree {
    const tree = new TrailTree();
    tree.extend(records);
    return tree;
  }

  /** Do `records` begin with the records this tree holds (by their hashes)? */
  extendedBy(records: readonly Pick<AuditRecord, 'hash'>[]): boolean {
    if (records.length < this.hashes.length) return false;
    for (let i = 0; i < this.hashes.length; i++) if (records[i]!.hash !== this.hashes[i]) return false;
    return true;
  }

  /** Add the records after the ones held (the caller checked extendedBy). */
  extend(records: readonly Pick<AuditRecord, 'hash'>[]): void {
    for (let i = this.hashes.length; i < records.length; i++) {
      this.hashes.push(String(records[i]!.hash));
      let node = recordLeafHash(records[i]!);
      let index = this.push(0, node);
      for (let level = 1; index % 2 === 1; level++) {
        node = nodeHash(this.node(level - 1, index - 1), node);
        index = this.push(level, node);
      }
    }
  }

  /** MTH of the first `size` leaves. */
  root(size: number): Uint8Array {
    return size === 0 ? EMPTY_ROOT : this.rangeRoot(0, size);
  }

  /** PROOF(oldSize, D[0:size]) (core/merkle.ts consistencyProofOf over the subtrees held). */
  consistencyProof(oldSize: number, size: number): Uint8Array[] {
    return consistencyProofOf((lo, hi) => this.rangeRoot(lo, hi), oldSize, size);
  }

  /** MTH(D[lo:hi]): a perfect aligned subtree is read, any other split as RFC 9162 splits it. */
  private rangeRoot(lo: number, hi: number): Uint8Array {
    const n = hi - lo;
    let level = 0;
    while (2 ** (level + 1) <= n) level++;
    if (2 ** level === n && lo % n === 0) return this.node(level, lo / n);
    const k = 2 ** (2 ** level === n ? level - 1 : level);
    return nodeHash(this.rangeRoot(lo, lo + k), this.rangeRoot(lo + k, hi));
  }

  private node(level: number, index: number): Uint8Array {
    return this.levels[level]!.subarray(index * HASH_BYTES, (index + 1) * HASH_BYTES);
  }

  /** Append a node to a level (its buffer doubled when full); its index there. */
  private push(level: number, node: Uint8Array): number {
    const index = this.counts[level] ?? 0;
    let buffer = this.levels[level] ?? new Uint8Array(64 * HASH_BYTES);
    if ((index + 1) * HASH_BYTES > buffer.length) {
      const grown = new Uint8Array(buffer.length * 2);
      grown.set(buffer);
      buffer = grown;
    }
    buffer.set(node, index * HASH_BYTES);
    this.levels[level] = buffer;
    this.counts[level] = index + 1;
    return index;
  }
}

/** The trees of the trails this worker checkpoints, least recently used first out. */
export class TrailTrees {
  private readonly trees = new Map<string, TrailTree>();

  constructor(private readonly limits = { trees: MAX_TREES, leaves: MAX_LEAVES }) {}

  /** The tree of `records` (a trail's, in trail order), from the one held when the trail extends it. */
  treeOf(rolloutId: string, records: readonly Pick<AuditRecord, 'hash'>[]): TrailTree {
    let tree = this.trees.get(rolloutId);
    this.trees.delete(rolloutId);
    if (!tree?.extendedBy(records)) tree = new TrailTree();
    tree.extend(records);
    this.trees.set(rolloutId, tree);
    this.evict();
    return tree;
  }

  private evict(): void {
    let leaves = 0;
    for (const tree of this.trees.values()) leaves += tree.size;
    for (const [id, tree] of this.trees) {
      if (this.trees.size <= 1 || (this.trees.size <= this.limits.trees && leaves <= this.limits.leaves)) break;
      this.trees.delete(id);
      leaves -= tree.size;
    }
  }
}
