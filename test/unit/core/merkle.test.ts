import { sha256 } from '@noble/hashes/sha2.js';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { toBase64 } from '../../../core/bytes';
import {
  consistencyProof,
  EMPTY_ROOT,
  inclusionProof,
  inclusionProofOf,
  memoizedRangeRoot,
  leafHash,
  MAX_PROOF_HASHES,
  nodeHash,
  treeRoot,
  verifyConsistency,
  verifyInclusion,
} from '../../../core/merkle';

/**
 * core/merkle.ts against (1) RFC 6962 known answers: the data vectors of Go's transparency-dev/merkle
 * (testonly/constants.go, proof/verify_test.go), and (2) a naive reference written straight from the recursive
 * definitions of RFC 9162 §2.1 (MTH, PATH, PROOF/SUBPROOF), on random trees.
 */

const hex = (h: string) => Uint8Array.from(Buffer.from(h, 'hex'));
const toHex = (b: Uint8Array) => Buffer.from(b).toString('hex');

// transparency-dev/merkle testonly.LeafInputs() and RootHashes() (the roots of the trees of 0..8 of them).
const LEAVES = ['', '00', '10', '2021', '3031', '40414243', '5051525354555657', '606162636465666768696a6b6c6d6e6f'].map(
  hex,
);
const ROOTS = [
  'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
  '6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d',
  'fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125',
  'aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77',
  'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
  '4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4',
  '76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef',
  'ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c',
  '5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328',
];
// proof/verify_test.go inclusionProofs (leaf given 1-based there, 0-based here) and consistencyProofs.
const INCLUSION: { index: number; size: number; proof: string[] }[] = [
  {
    index: 0,
    size: 8,
    proof: [
      '96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7',
      '5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e',
      '6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4',
    ],
  },
  {
    index: 5,
    size: 8,
    proof: [
      'bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b',
      'ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0',
      'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
    ],
  },
  { index: 2, size: 3, proof: ['fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125'] },
  {
    index: 1,
    size: 5,
    proof: [
      '6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d',
      '5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e',
      'bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b',
    ],
  },
];
const CONSISTENCY: { oldSize: number; size: number; proof: string[] }[] = [
  { oldSize: 1, size: 1, proof: [] },
  {
    oldSize: 1,
    size: 8,
    proof: [
      '96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7',
      '5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e',
      '6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4',
    ],
  },
  {
    oldSize: 6,
    size: 8,
    proof: [
      '0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a',
      'ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0',
      'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
    ],
  },
  {
    oldSize: 2,
    size: 5,
    proof: [
      '5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e',
      'bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b',
    ],
  },
  {
    oldSize: 6,
    size: 7,
    proof: [
      '0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a',
      'b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f',
      'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
    ],
  },
];

// ---- The naive reference: RFC 9162 §2.1's recursive definitions, word for word, over the leaf hashes. ----

const k = (n: number) => 2 ** Math.ceil(Math.log2(n) - 1);
const concat = (...parts: Uint8Array[]) => Uint8Array.from(parts.flatMap((p) => [...p]));
const refNode = (l: Uint8Array, r: Uint8Array) => sha256(concat(Uint8Array.of(1), l, r));
function refMth(d: Uint8Array[]): Uint8Array {
  if (d.length === 0) return sha256(new Uint8Array(0));
  if (d.length === 1) return d[0]!;
  return refNode(refMth(d.slice(0, k(d.length))), refMth(d.slice(k(d.length))));
}
function refPath(m: number, d: Uint8Array[]): Uint8Array[] {
  if (d.length === 1) return [];
  const s = k(d.length);
  return m < s
    ? [...refPath(m, d.slice(0, s)), refMth(d.slice(s))]
    : [...refPath(m - s, d.slice(s)), refMth(d.slice(0, s))];
}
function refSubproof(m: number, d: Uint8Array[], b: boolean): Uint8Array[] {
  if (m === d.length) return b ? [] : [refMth(d)];
  const s = k(d.length);
  return m <= s
    ? [...refSubproof(m, d.slice(0, s), b), refMth(d.slice(s))]
    : [...refSubproof(m - s, d.slice(s), false), refMth(d.slice(0, s))];
}

const hashesArb = (min: number, max: number) =>
  fc.array(fc.uint8Array({ minLength: 32, maxLength: 32 }), { minLength: min, maxLength: max });
/** A tree (2..130 distinct leaves: a collision would let a wrong index through) and a leaf of it. */
const treeAndIndex = hashesArb(1, 130)
  .map((hs) => hs.map((h, i) => sha256(concat(h, Uint8Array.of(i & 255, i >> 8)))))
  .chain((hs) => fc.tuple(fc.constant(hs), fc.nat(hs.length - 1)));
const flipped = (proof: Uint8Array[], at: number, byte: number) =>
  proof.map((h, i) => (i === at ? h.map((b, j) => (j === byte ? b ^ 1 : b)) : h));

describe('merkle: RFC 6962 known answers (transparency-dev/merkle data vectors)', () => {
  const hashes = LEAVES.map(leafHash);

  it('the leaf hash is SHA-256(0x00 || leaf); the empty tree is SHA-256 of nothing; the roots of 0..8 leaves', () => {
    expect(toHex(hashes[0]!)).toBe('6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d');
    expect(toHex(hashes[7]!)).toBe('46f6ffadd3d06a09ff3c5860d2755c8b9819db7df44251788c7d8e3180de8eb1');
    expect(toHex(nodeHash(hashes[0]!, hashes[1]!))).toBe(
      'fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125',
    );
    expect(toHex(EMPTY_ROOT)).toBe(ROOTS[0]);
    expect(ROOTS.map((_, n) => toHex(treeRoot(hashes, n)))).toEqual(ROOTS);
  });

  it.each(INCLUSION)('inclusion proof of leaf $index in a tree of $size: generated as given, and verifies', (v) => {
    const proof = inclusionProof(hashes, v.index, v.size);
    expect(proof.map(toHex)).toEqual(v.proof);
    const root = hex(ROOTS[v.size]!);
    expect(verifyInclusion({ index: v.index, size: v.size, leafHash: hashes[v.index]!, proof, root })).toEqual({
      ok: true,
    });
    expect(
      verifyInclusion({ index: v.index, size: v.size, leafHash: hashes[v.index]!, proof: flipped(proof, 0, 0), root })
        .ok,
    ).toBe(false);
  });

  it.each(CONSISTENCY)('consistency proof from $oldSize to $size: generated as given, and verifies', (v) => {
    const proof = consistencyProof(hashes, v.oldSize, v.size);
    expect(proof.map(toHex)).toEqual(v.proof);
    const claim = { oldSize: v.oldSize, oldRoot: hex(ROOTS[v.oldSize]!), size: v.size, root: hex(ROOTS[v.size]!) };
    expect(verifyConsistency({ ...claim, proof })).toEqual({ ok: true });
    if (proof.length) expect(verifyConsistency({ ...claim, proof: flipped(proof, 0, 31) }).ok).toBe(false);
  });
});

describe('merkle: against the naive recursive reference (RFC 9162 §2.1), on random trees', () => {
  it('the root of any number of leaves, 0 included, is MTH', () => {
    fc.assert(
      fc.property(hashesArb(0, 200), (hs) => {
        expect(toHex(treeRoot(hs))).toBe(toHex(refMth(hs)));
      }),
    );
  });

  it('every inclusion proof is PATH and verifies; a flipped byte, another index, another size, another leaf fail', () => {
    fc.assert(
      fc.property(treeAndIndex, fc.nat(), fc.nat(31), fc.nat(), (([hs, i], at, byte, other) => {
        const n = hs.length;
        const proof = inclusionProof(hs, i);
        expect(proof.map(toHex)).toEqual(refPath(i, hs).map(toHex));
        const root = treeRoot(hs);
        const claim = { index: i, size: n, leafHash: hs[i]!, proof, root };
        expect(verifyInclusion(claim)).toEqual({ ok: true });
        if (proof.length)
          expect(verifyInclusion({ ...claim, proof: flipped(proof, at % proof.length, byte) }).ok).toBe(false);
        expect(verifyInclusion({ ...claim, leafHash: flipped([hs[i]!], 0, byte)[0]! }).ok).toBe(false);
        expect(verifyInclusion({ ...claim, root: flipped([root], 0, byte)[0]! }).ok).toBe(false);
        if (n > 1) expect(verifyInclusion({ ...claim, index: (i + 1 + (other % (n - 1))) % n }).ok).toBe(false);
        // Another size, with that tree's own root (the leaves past n are the same leaves again).
        const m = 1 + (other % (2 * n + 2));
        const longer = [...hs, ...hs, ...hs].slice(0, m);
        if (m !== n && i < m) expect(verifyInclusion({ ...claim, size: m, root: treeRoot(longer) }).ok).toBe(false);
        expect(verifyInclusion({ ...claim, proof: [...proof, root] }).ok).toBe(false);
        if (proof.length) expect(verifyInclusion({ ...claim, proof: proof.slice(1) }).ok).toBe(false);
      }) as (a: [Uint8Array[], number], b: number, c: number, d: number) => void),
    );
  });

  it('every consistency proof is PROOF and verifies; a flipped byte, other sizes, swapped or other roots fail', () => {
    fc.assert(
      fc.property(treeAndIndex, fc.nat(), fc.nat(31), fc.nat(), (([hs, j], at, byte, other) => {
        const n = hs.length;
        const m = j + 1; // 1..n
        const proof = consistencyProof(hs, m);
        expect(proof.map(toHex)).toEqual(m === n ? [] : refSubproof(m, hs, true).map(toHex));
        const claim = { oldSize: m, oldRoot: treeRoot(hs, m), size: n, root: treeRoot(hs), proof };
        expect(verifyConsistency(claim)).toEqual({ ok: true });
        expect(verifyConsistency({ ...claim, oldRoot: flipped([claim.oldRoot], 0, byte)[0]! }).ok).toBe(false);
        expect(verifyConsistency({ ...claim, root: flipped([claim.root], 0, byte)[0]! }).ok).toBe(false);
        if (m === n) return;
        expect(verifyConsistency({ ...claim, proof: flipped(proof, at % proof.length, byte) }).ok).toBe(false);
        expect(verifyConsistency({ ...claim, oldRoot: claim.root, root: claim.oldRoot }).ok).toBe(false);
        expect(verifyConsistency({ ...claim, proof: [] }).ok).toBe(false);
        expect(verifyConsistency({ ...claim, proof: proof.slice(0, -1) }).ok).toBe(false);
        expect(verifyConsistency({ ...claim, proof: [...proof, claim.root] }).ok).toBe(false);
        expect(verifyConsistency({ ...claim, oldSize: n, size: m }).ok).toBe(false);
        // Another old size, with that tree's own root.
        const m2 = 1 + (other % n);
        if (m2 !== m) expect(verifyConsistency({ ...claim, oldSize: m2, oldRoot: treeRoot(hs, m2) }).ok).toBe(false);
      }) as (a: [Uint8Array[], number], b: number, c: number, d: number) => void),
    );
  });

  it('from the empty tree: consistent with an empty proof, only from the root of the empty tree', () => {
    const hs = LEAVES.map(leafHash);
    const claim = { oldSize: 0, oldRoot: EMPTY_ROOT, size: 5, root: treeRoot(hs, 5), proof: [] };
    expect(consistencyProof(hs, 0, 5)).toEqual([]);
    expect(verifyConsistency(claim)).toEqual({ ok: true });
    expect(verifyConsistency({ ...claim, oldRoot: hs[0]! }).ok).toBe(false);
    expect(verifyConsistency({ ...claim, proof: [EMPTY_ROOT] }).ok).toBe(false);
  });
});

describe('merkle: verifiers never throw and read bounded input', () => {
  const hs = LEAVES.map(leafHash);
  const root = treeRoot(hs);

  it('any value in any field is an answer with a reason, never a throw', () => {
    fc.assert(
      fc.property(fc.anything(), fc.anything(), fc.anything(), fc.anything(), fc.anything(), (a, b, c, d, e) => {
        const i = verifyInclusion({ index: a, size: b, leafHash: c, proof: d, root: e } as never);
        const j = verifyConsistency({ oldSize: a, oldRoot: c, size: b, root: e, proof: d } as never);
        for (const r of [i, j]) expect(r.ok === false && typeof r.message === 'string').toBe(true);
      }),
    );
    for (const junk of [undefined, null, 7, 'x', []]) {
      expect(verifyInclusion(junk as never).ok).toBe(false);
      expect(verifyConsistency(junk as never).ok).toBe(false);
    }
  });

  it('a proof of more than 64 hashes, a hash of 31 or 33 bytes, a size past 2^53 or not whole: MALFORMED', () => {
    const long = Array.from({ length: MAX_PROOF_HASHES + 1 }, () => root);
    const incl = { index: 0, size: 8, leafHash: hs[0]!, proof: inclusionProof(hs, 0), root };
    expect(verifyInclusion({ ...incl, proof: long })).toMatchObject({ ok: false, reason: 'MALFORMED' });
    expect(verifyInclusion({ ...incl, proof: [root.subarray(1), ...incl.proof.slice(1)] })).toMatchObject({
      ok: false,
      reason: 'MALFORMED',
      message: expect.stringContaining('proof[0]'),
    });
    expect(verifyInclusion({ ...incl, leafHash: new Uint8Array(33) })).toMatchObject({ reason: 'MALFORMED' });
    expect(verifyInclusion({ ...incl, size: 2 ** 53 })).toMatchObject({ reason: 'MALFORMED' });
    expect(verifyInclusion({ ...incl, index: 0.5 })).toMatchObject({ reason: 'MALFORMED' });
    expect(verifyInclusion({ ...incl, index: 8 })).toMatchObject({ reason: 'WRONG_SIZE' });
    const cons = { oldSize: 3, oldRoot: treeRoot(hs, 3), size: 8, root, proof: consistencyProof(hs, 3) };
    expect(verifyConsistency(cons)).toEqual({ ok: true });
    expect(verifyConsistency({ ...cons, proof: long })).toMatchObject({ reason: 'MALFORMED' });
    expect(verifyConsistency({ ...cons, oldSize: -1 })).toMatchObject({ reason: 'MALFORMED' });
    expect(verifyConsistency({ ...cons, oldSize: 9 })).toMatchObject({ reason: 'WRONG_SIZE' });
  });

  it('the generators refuse an index or size outside the tree, naming the field', () => {
    expect(() => inclusionProof(hs, 8)).toThrow(/index: must be a leaf of the tree of 8 \(got 8\)/);
    expect(() => treeRoot(hs, 9)).toThrow(/size: must be a whole number from 0 to the 8 leaves held \(got 9\)/);
    expect(() => consistencyProof(hs, 5, 4)).toThrow(/oldSize: 5 is above size 4/);
  });
});

describe('merkle: at scale', () => {
  /** n distinct 32-byte leaf hashes, made cheaply (a xorshift stream): the tree is what is measured. */
  function leafHashes(n: number): Uint8Array[] {
    const all = new Uint8Array(32 * n);
    const words = new Uint32Array(all.buffer);
    let x = 0x9e3779b9;
    for (let i = 0; i < words.length; i++) {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      words[i] = x >>> 0;
    }
    return Array.from({ length: n }, (_, i) => all.subarray(32 * i, 32 * i + 32));
  }

  it('one leaf of 1,000,000: an inclusion proof of 20 hashes, 640 bytes; with its index and size under 1 KB, in JSON too', () => {
    const hs = leafHashes(1_000_000);
    const index = 765_432;
    const proof = inclusionProof(hs, index);
    expect(proof).toHaveLength(20);
    const bytes = 8 + 8 + proof.reduce((sum, h) => sum + h.length, 0);
    expect(bytes).toBe(656);
    const json = JSON.stringify({ index, size: hs.length, proof: proof.map(toBase64) });
    expect(json.length).toBeLessThanOrEqual(1024);
    expect(verifyInclusion({ index, size: hs.length, leafHash: hs[index]!, proof, root: treeRoot(hs) })).toEqual({
      ok: true,
    });
  });

  it('100,000 leaves: the root and a proof of each kind, each in a bounded time', () => {
    const hs = leafHashes(100_000);
    const t0 = performance.now();
    const root = treeRoot(hs);
    const t1 = performance.now();
    const incl = inclusionProof(hs, 77_777);
    const t2 = performance.now();
    const cons = consistencyProof(hs, 60_001);
    const t3 = performance.now();
    expect(incl).toHaveLength(17);
    expect(verifyInclusion({ index: 77_777, size: 100_000, leafHash: hs[77_777]!, proof: incl, root }).ok).toBe(true);
    expect(
      verifyConsistency({ oldSize: 60_001, oldRoot: treeRoot(hs, 60_001), size: 100_000, root, proof: cons }).ok,
    ).toBe(true);
    // About 100,000 node hashes each (0.2 s compiled on this machine): generous bounds for a busy one.
    for (const ms of [t1 - t0, t2 - t1, t3 - t2]) expect(ms).toBeLessThan(10_000);
  });
});

describe('proofs of many leaves of one tree', () => {
  it('a memoized range root gives every leaf the proof inclusionProof gives, at every size', () => {
    const leaves = Array.from({ length: 37 }, (_, i) => sha256(new Uint8Array([i])));
    const range = memoizedRangeRoot(leaves);
    for (let size = 1; size <= leaves.length; size++)
      for (let index = 0; index < size; index++)
        expect(inclusionProofOf(range, index, size), `${index} of ${size}`).toEqual(
          inclusionProof(leaves, index, size),
        );
  });
});
