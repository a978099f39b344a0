/**
 * Deterministic randomness for the planner: a 128-bit seed hashed from a string (the rollout id) and a
 * small-state PRNG (sfc32). Same id, same sequence, on every machine and in workflow replay. No
 * Math.random, no clock.
 */
function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** Four FNV-1a lanes with distinct offsets over the UTF-16 units, each finalised with murmur3's fmix32. */
export function seedFrom(text: string): [number, number, number, number] {
  const lanes = [0x811c9dc5, 0x01000193 ^ 0x9e3779b9, 0x3c6ef372, 0xa54ff53a];
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    for (let l = 0; l < 4; l++) lanes[l] = Math.imul((lanes[l]! ^ unit ^ (l << 16)) >>> 0, 0x01000193) >>> 0;
  }
  return [fmix32(lanes[0]! ^ text.length), fmix32(lanes[1]!), fmix32(lanes[2]!), fmix32(lanes[3]!)];
}

export function seedHex(seed: readonly number[]): string {
  return seed.map((n) => n.toString(16).padStart(8, '0')).join('');
}

/** sfc32: returns floats in [0, 1). */
export function prng(seed: readonly [number, number, number, number]): () => number {
  let [a, b, c, d] = seed;
  const next = (): number => {
    a >>>= 0;
    b >>>= 0;
    c >>>= 0;
    d >>>= 0;
    const t = (((a + b) | 0) + d) | 0;
    d = (d + 1) | 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) | 0;
    c = (c << 21) | (c >>> 11);
    c = (c + t) | 0;
    return (t >>> 0) / 4294967296;
  };
  for (let i = 0; i < 12; i++) next(); // mix the seed in before use
  return next;
}

/** Fisher-Yates shuffle of a copy, driven by `random`. */
export function shuffled<T>(items: readonly T[], random: () => number): T[] {
  const out = items.slice();
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}
