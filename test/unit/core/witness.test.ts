import { describe, expect, it } from 'vitest';
import { consistencyProof, leafHash, treeRoot } from '../../../core/merkle';
import {
  parseWitnessState,
  witnessDecision,
  witnessStateFileName,
  witnessStateText,
  type WitnessState,
} from '../../../core/witness';

/** core/witness.ts: when the witness cosigns (first, same, a proven extension) and when it refuses. */

const ORIGIN = 'wavegate/rollout:web:20260102-030405';
const trail = Array.from({ length: 9 }, (_, i) => leafHash(Uint8Array.of(i)));
const other = trail.map((h, i) => (i === 4 ? leafHash(Uint8Array.of(99)) : h));
const at = (size: number, hashes = trail) => ({ origin: ORIGIN, size, root: treeRoot(hashes, size) });

describe('witnessDecision', () => {
  const last: WitnessState = at(5);

  it('cosigns the first checkpoint of an origin, the same one again, and one grown with a valid proof', () => {
    expect(witnessDecision(undefined, at(5), [])).toEqual({ ok: true, change: 'first' });
    expect(witnessDecision(last, at(5), [])).toEqual({ ok: true, change: 'same' });
    expect(witnessDecision(last, at(8), consistencyProof(trail, 5, 8))).toEqual({ ok: true, change: 'grown' });
  });

  it('refuses a smaller size (a rollback), naming the origin and both sizes', () => {
    expect(witnessDecision(last, at(3), [])).toEqual({
      ok: false,
      code: 'CONFLICT',
      message: `${ORIGIN}: size 3 is below size 5 this witness cosigned (a trail never shrinks: a rollback); not cosigned`,
    });
  });

  it('refuses the same size with another root (a fork)', () => {
    expect(witnessDecision(last, at(5, other), [])).toMatchObject({
      ok: false,
      code: 'CONFLICT',
      message: expect.stringContaining('size 5 with another root than the one this witness cosigned'),
    });
  });

  it('refuses a grown tree whose proof does not connect it (a rewritten past, a wrong or missing proof)', () => {
    // The trail rewritten below size 5, then grown: no proof from the cosigned tree can lead to it.
    const rewritten = witnessDecision(last, at(8, other), consistencyProof(other, 5, 8));
    expect(rewritten).toMatchObject({
      ok: false,
      code: 'CONFLICT',
      message: expect.stringMatching(
        /^wavegate\/rollout:web:20260102-030405: the consistency proof from size 5 \(cosigned\) to 8 does not hold/,
      ),
    });
    expect(witnessDecision(last, at(8), []).ok).toBe(false);
    expect(witnessDecision(last, at(8), consistencyProof(trail, 4, 8)).ok).toBe(false);
  });
});

describe('the witness state file', () => {
  it('round-trips; the file name is the hex SHA-256 of the origin', () => {
    const state = at(5);
    const text = witnessStateText(state, new Date('2026-01-02T03:04:05Z'));
    expect(JSON.parse(text)).toMatchObject({ type: 'wavegate.witness.state', origin: ORIGIN, size: 5 });
    expect(parseWitnessState(text, 'f.json', ORIGIN)).toEqual(state);
    expect(witnessStateFileName(ORIGIN)).toMatch(/^[0-9a-f]{64}\.json$/);
    expect(witnessStateFileName(`${ORIGIN}-2`)).not.toBe(witnessStateFileName(ORIGIN));
  });

  it('a damaged file, or one of another origin, is INVALID_STATE: never taken for "nothing cosigned yet"', () => {
    const text = witnessStateText(at(5), new Date());
    for (const [bad, why] of [
      ['', 'not JSON'],
      [text.replace('"size":5', '"size":-1'), 'size'],
      [text.replace(/"root":"[^"]*"/, '"root":"AAAA"'), 'root'],
      [text.replace('wavegate.witness.state', 'other'), 'type'],
    ]) {
      expect(() => parseWitnessState(bad!, 'f.json', ORIGIN)).toThrow(
        expect.objectContaining({ code: 'INVALID_STATE', message: expect.stringContaining(why!) }),
      );
    }
    expect(() => parseWitnessState(text, 'f.json', `${ORIGIN}-2`)).toThrow(/names another origin/);
  });
});
