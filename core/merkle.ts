import { sha256 } from '@noble/hashes/sha2.js';
import { bytesEqual } from './bytes';
import { WavegateError } from './errors';

/**
 * The audit trail's Merkle tree: RFC 6962 / RFC 9162 §2.1 over SHA-256, so any RFC 6962 library (Go's
 * transparency-dev/merkle, certificate-transparency) checks wavegate's proofs (docs/formats.md, "Checkpoints and
 * the witness"). Pure (@noble, no Node API): safe in workflow code.
 *
 *   leafHash(bytes)                      SHA-256(0x00 || bytes)
 *   nodeHash(left, right)                SHA-256(0x01 || left || right)
 *   treeRoot(leafHashes, size?)          MTH of the first `size` leaves (the empty tree: SHA-256 of "")
 *   inclusionProof(leafHashes, index, size?)      RFC 9162 §2.1.3.1, the audit path, bottom up
 *   consistencyProof(leafHashes, oldSize, size?)  RFC 9162 §2.1.4.1 (consistencyProofOf: over any subtree roots)
 *   verifyInclusion({ index, size, leafHash, proof, root })             → ProofCheck
 *   verifyConsistency({ oldSize, oldRoot, size, root, proof })          → ProofCheck
 *
 * Everything works from the leaf hashes (a trail keeps them; the leaves themselves are never needed again): a root
 * is O(n) hashes, a proof O(n) hashes too (the roots of its siblings' subtrees), never more.
 *
 * The verifiers take what a stranger sent (a bundle, an HTTP body): they return a value, never throw, for any
 * input, and look at no more than MAX_PROOF_HASHES hashes of HASH_BYTES each (a tree of 2^53 leaves needs 53).
 * The generators take the trail's own hashes and throw WavegateError INVALID_INPUT naming the field for an
 * index or size outside the tree (a caller's bug, not a stranger's input).
 */

export const HASH_BYTES = 32;
/** The longest proof a verifier reads: 2 × 32 would do for any tree a safe integer can count; 64 leaves room. */
export const MAX_PROOF_HASHES = 64;

/** The root of the empty tree: SHA-256 of the empty string (RFC 9162 §2.1.1). */
export const EMPTY_ROOT: Uint8Array = sha256(new Uint8Array(0));

export function leafHash(leaf: Uint8Array): Uint8Array {
  const input = new Uint8Array(leaf.length + 1);
  input.set(leaf, 1);
  return sha256(input);
}

/** One buffer reused for every interior node: a root of 100,000 leaves hashes 100,000 of them. */
const NODE_INPUT = new Uint8Array(1 + 2 * HASH_BYTES);
NODE_INPUT[0] = 1;

export function nodeHash(left: Uint8Array, right: Uint8Array): Uint8Array {
  if (left.length !== HASH_BYTES || right.length !== HASH_BYTES) throw new Error('a node hashes two 32-byte hashes');
  NODE_INPUT.set(left, 1);
  NODE_INPUT.set(right, 1 + HASH_BYTES);
  return sha256(NODE_INPUT);
}

/** MTH(D[lo:hi]) for hi > lo: perfect subtrees merged left to right as they fill, then folded right to left. */
function rangeRoot(hashes: readonly Uint8Array[], lo: number, hi: number): Uint8Array {
  const stack: Uint8Array[] = [];
  for (let i = lo; i < hi; i++) {
    let node = hashes[i]!;
    // The leaf ends as many perfect subtrees as its count (from lo) has trailing zero bits.
    for (let count = i - lo + 1; count % 2 === 0; count /= 2) node = nodeHash(stack.pop()!, node);
    stack.push(node);
  }
  let root = stack.pop()!;
  while (stack.length) root = nodeHash(stack.pop()!, root);
  return root;
}

/** The largest power of two below n (n ≥ 2): where RFC 9162 splits a tree of n leaves. */
function split(n: number): number {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}

function checkSize(hashes: readonly Uint8Array[], size: number, field: string): void {
  if (!Number.isSafeInteger(size) || size < 0 || size > hashes.length)
    throw new WavegateError(
      'INVALID_INPUT',
      `${field}: must be a whole number from 0 to the ${hashes.length} leaves held (got ${size})`,
      { field, value: size },
    );
}

/** MTH of the first `size` leaf hashes (all of them by default). */
export function treeRoot(leafHashes: readonly Uint8Array[], size = leafHashes.length): Uint8Array {
  checkSize(leafHashes, size, 'size');
  return size === 0 ? EMPTY_ROOT : rangeRoot(leafHashes, 0, size);
}

/** PATH(index, D[0:size]), bottom up: the sibling subtrees' roots from the leaf to the root. */
export function inclusionProof(
  leafHashes: readonly Uint8Array[],
  index: number,
  size = leafHashes.length,
): Uint8Array[] {
  checkSize(leafHashes, size, 'size');
  if (!Number.isSafeInteger(index) || index < 0 || index >= size)
    throw new WavegateError('INVALID_INPUT', `index: must be a leaf of the tree of ${size} (got ${index})`, {
      field: 'index',
      value: index,
    });
  return inclusionProofOf((lo, hi) => rangeRoot(leafHashes, lo, hi), index, size);
}

/** inclusionProof over `rangeRoot` (index and size checked by the caller): the sibling subtrees it names. */
export function inclusionProofOf(rangeRootOf: RangeRoot, index: number, size: number): Uint8Array[] {
  const topDown: Uint8Array[] = [];
  let lo = 0;
  let hi = size;
  while (hi - lo > 1) {
    const k = split(hi - lo);
    if (index - lo < k) {
      topDown.push(rangeRootOf(lo + k, hi));
      hi = lo + k;
    } else {
      topDown.push(rangeRootOf(lo, lo + k));
      lo += k;
    }
  }
  return topDown.reverse();
}

/**
 * A RangeRoot over these leaf hashes that hashes each subtree once, whatever it is asked: proofs of many leaves
 * of one tree then cost the tree once (2n hashes), where each inclusionProof alone is O(n). Leaves below 2^26.
 */
export function memoizedRangeRoot(leafHashes: readonly Uint8Array[]): RangeRoot {
  const memo = new Map<number, Uint8Array>();
  const range = (lo: number, hi: number): Uint8Array => {
    if (hi - lo === 1) return leafHashes[lo]!;
    const key = lo * 2 ** 26 + hi;
    let h = memo.get(key);
    if (!h) {
      const k = split(hi - lo);
      h = nodeHash(range(lo, lo + k), range(lo + k, hi));
      memo.set(key, h);
    }
    return h;
  };
  return range;
}

/**
 * PROOF(oldSize, D[0:size]) (RFC 9162 §2.1.4.1), bottom up. Empty when oldSize is 0 or equals size: nothing to
 * prove (a tree is consistent with the empty tree, and with itself when the roots are equal).
 */
export function consistencyProof(
  leafHashes: readonly Uint8Array[],
  oldSize: number,
  size = leafHashes.length,
): Uint8Array[] {
  checkSize(leafHashes, size, 'size');
  checkSize(leafHashes, oldSize, 'oldSize');
  return consistencyProofOf((lo, hi) => rangeRoot(leafHashes, lo, hi), oldSize, size);
}

/** MTH(D[lo:hi]) for hi > lo, however a caller finds it: from the leaves, or a cache of subtrees (audit/trail-tree.ts). */
export type RangeRoot = (lo: number, hi: number) => Uint8Array;

/** consistencyProof over `rangeRoot` (sizes checked by the caller but for their order): the subtrees it names. */
export function consistencyProofOf(rangeRootOf: RangeRoot, oldSize: number, size: number): Uint8Array[] {
  if (oldSize > size)
    throw new WavegateError('INVALID_INPUT', `oldSize: ${oldSize} is above size ${size}`, {
      field: 'oldSize',
      value: oldSize,
    });
  if (oldSize === 0 || oldSize === size) return [];
  const topDown: Uint8Array[] = [];
  let lo = 0;
  let hi = size;
  let m = oldSize;
  // SUBPROOF's b: true while the old tree's root is this subtree's own left edge (its root is then known).
  let whole = true;
  while (m !== hi - lo) {
    const k = split(hi - lo);
    if (m <= k) {
      topDown.push(rangeRootOf(lo + k, hi));
      hi = lo + k;
    } else {
      topDown.push(rangeRootOf(lo, lo + k));
      lo += k;
      m -= k;
      whole = false;
    }
  }
  if (!whole) topDown.push(rangeRootOf(lo, hi));
  return topDown.reverse();
}

/** Why a proof was refused; the message says which input and what was wrong with it. */
export type ProofFailure = 'MALFORMED' | 'WRONG_SIZE' | 'MISMATCH';

export type ProofCheck = { ok: true } | { ok: false; reason: ProofFailure; message: string };

const OK: ProofCheck = { ok: true };
const fail = (reason: ProofFailure, message: string): ProofCheck => ({ ok: false, reason, message });

function isHash(value: unknown): value is Uint8Array {
  return value instanceof Uint8Array && value.length === HASH_BYTES;
}

/** A tree size or index a verifier can count: a safe whole number ≥ 0. */
function isCount(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}

/** The proof's shape (an array of at most MAX_PROOF_HASHES hashes of 32 bytes), or why not. */
function proofShape(proof: unknown): ProofCheck {
  if (!Array.isArray(proof)) return fail('MALFORMED', 'proof: must be an array of 32-byte hashes');
  if (proof.length > MAX_PROOF_HASHES)
    return fail('MALFORMED', `proof: ${proof.length} hashes, above the limit of ${MAX_PROOF_HASHES}`);
  const bad = proof.findIndex((h) => !isHash(h));
  return bad < 0 ? OK : fail('MALFORMED', `proof[${bad}]: must be a ${HASH_BYTES}-byte hash`);
}

// Sizes go past 2^32 (a safe integer counts to 2^53): arithmetic, not the 32-bit bit operators.
const half = (n: number) => Math.floor(n / 2);
const odd = (n: number) => n % 2 === 1;

function isPowerOfTwo(n: number): boolean {
  while (n > 1 && !odd(n)) n = half(n);
  return n === 1;
}

export interface InclusionClaim {
  index: number;
  size: number;
  leafHash: Uint8Array;
  proof: readonly Uint8Array[];
  root: Uint8Array;
}

/** RFC 9162 §2.1.3.2: the leaf at `index` is in the tree of `size` leaves whose root is `root`. Never throws. */
export function verifyInclusion(claim: InclusionClaim): ProofCheck {
  const { index, size, leafHash: leaf, proof, root } = (claim ?? {}) as Partial<InclusionClaim>;
  if (!isCount(size) || !isCount(index)) return fail('MALFORMED', 'index, size: must be whole numbers ≥ 0');
  if (index >= size) return fail('WRONG_SIZE', `index ${index} is not a leaf of a tree of ${size}`);
  if (!isHash(leaf)) return fail('MALFORMED', `leafHash: must be a ${HASH_BYTES}-byte hash`);
  if (!isHash(root)) return fail('MALFORMED', `root: must be a ${HASH_BYTES}-byte hash`);
  const shape = proofShape(proof);
  if (!shape.ok) return shape;
  let fn = index;
  let sn = size - 1;
  let r = leaf;
  for (const p of proof!) {
    if (sn === 0) return fail('WRONG_SIZE', `proof: longer than a tree of ${size} needs for index ${index}`);
    if (odd(fn) || fn === sn) {
      r = nodeHash(p, r);
      while (!odd(fn) && fn !== 0) [fn, sn] = [half(fn), half(sn)];
    } else r = nodeHash(r, p);
    [fn, sn] = [half(fn), half(sn)];
  }
  if (sn !== 0) return fail('WRONG_SIZE', `proof: shorter than a tree of ${size} needs for index ${index}`);
  return bytesEqual(r, root)
    ? OK
    : fail('MISMATCH', `the proof leads to another root than the tree of ${size}'s: not this leaf at index ${index}`);
}

export interface ConsistencyClaim {
  oldSize: number;
  oldRoot: Uint8Array;
  size: number;
  root: Uint8Array;
  proof: readonly Uint8Array[];
}

/**
 * RFC 9162 §2.1.4.2: the tree of `size` leaves with root `root` extends the tree of `oldSize` with `oldRoot`.
 * The edges RFC 9162 leaves out: equal sizes need equal roots and an empty proof; from the empty tree (its root
 * must be EMPTY_ROOT) any tree is consistent, with an empty proof. Never throws.
 */
export function verifyConsistency(claim: ConsistencyClaim): ProofCheck {
  const { oldSize, oldRoot, size, root, proof } = (claim ?? {}) as Partial<ConsistencyClaim>;
  if (!isCount(oldSize) || !isCount(size)) return fail('MALFORMED', 'oldSize, size: must be whole numbers ≥ 0');
  if (!isHash(oldRoot)) return fail('MALFORMED', `oldRoot: must be a ${HASH_BYTES}-byte hash`);
  if (!isHash(root)) return fail('MALFORMED', `root: must be a ${HASH_BYTES}-byte hash`);
  const shape = proofShape(proof);
  if (!shape.ok) return shape;
  if (oldSize > size) return fail('WRONG_SIZE', `oldSize ${oldSize} is above size ${size}: a tree never shrinks`);
  if (oldSize === 0 || oldSize === size) {
    if (proof!.length) return fail('WRONG_SIZE', `proof: must be empty from a tree of ${oldSize} to ${size}`);
    if (oldSize === 0 && !bytesEqual(oldRoot, EMPTY_ROOT))
      return fail('MISMATCH', 'oldRoot: not the root of the empty tree');
    if (oldSize === size && !bytesEqual(oldRoot, root))
      return fail('MISMATCH', `two trees of ${size} leaves with different roots`);
    return OK;
  }
  if (proof!.length === 0) return fail('WRONG_SIZE', `proof: empty; from ${oldSize} to ${size} needs one`);
  return consistencyPath(oldSize, oldRoot, size, root, proof!);
}

/** RFC 9162 §2.1.4.2 steps 2-7, for 0 < oldSize < size and a non-empty proof of checked shape. */
function consistencyPath(
  oldSize: number,
  oldRoot: Uint8Array,
  size: number,
  root: Uint8Array,
  proof: readonly Uint8Array[],
): ProofCheck {
  // An old tree of a power of two is a whole subtree of the new one: its root starts the path.
  const path = isPowerOfTwo(oldSize) ? [oldRoot, ...proof] : proof;
  let fn = oldSize - 1;
  let sn = size - 1;
  while (odd(fn)) [fn, sn] = [half(fn), half(sn)];
  let fr = path[0]!;
  let sr = path[0]!;
  for (const c of path.slice(1)) {
    if (sn === 0) return fail('WRONG_SIZE', `proof: longer than ${oldSize} to ${size} needs`);
    if (odd(fn) || fn === sn) {
      fr = nodeHash(c, fr);
      sr = nodeHash(c, sr);
      while (!odd(fn) && fn !== 0) [fn, sn] = [half(fn), half(sn)];
    } else sr = nodeHash(sr, c);
    [fn, sn] = [half(fn), half(sn)];
  }
  if (sn !== 0) return fail('WRONG_SIZE', `proof: shorter than ${oldSize} to ${size} needs`);
  if (!bytesEqual(fr, oldRoot))
    return fail('MISMATCH', `the proof does not lead to the old root: the tree of ${oldSize} is not a prefix`);
  if (!bytesEqual(sr, root))
    return fail('MISMATCH', `the proof does not lead to the new root: the tree of ${size} does not extend ${oldSize}`);
  return OK;
}
