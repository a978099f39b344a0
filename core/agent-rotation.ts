import { agentKeyPin, parseAgentKey } from './agent-auth';
import { fromBase64, toBase64, utf8Encode } from './bytes';
import { keepsOldKey, type Rotation } from './rotation';
import { ed25519, ed25519Verify, type KeyPair } from './signing';

/**
 * An agent's identity key rotated on a signed schedule (kind `agent-identity`, docs/formats.md "Rotation
 * schedules"): the agent makes its new key on the device, and from the activate instant proves it to the gateway
 * with two signatures over one statement naming the rotation, the device and both keys: one by the OLD key (it
 * hands over to the new one) and one by the NEW key (it accepts, and names the old: a stolen new key alone cannot
 * claim another device's identity, a stolen old key alone cannot make up a new key it does not hold). Pure: the
 * gateway verifies with it, the agent signs with it, the CLI checks the gateway's record with it.
 */

export const PROOF_CONTEXT = 'wavegate-agent-rotation-v1';

export interface RotationProof {
  /** The rotation's id. */
  id: string;
  /** The pins (`ed25519:<base64>`) of the key that goes and of the key that comes. */
  old: string;
  new: string;
  /** base64 Ed25519 signatures of proofMessage by the old key and by the new key. */
  byOld: string;
  byNew: string;
}

/** The bytes both keys sign: each role's signature is over its own line, so neither can stand for the other. */
export function proofMessage(
  role: 'old-hands-over' | 'new-accepts',
  id: string,
  device: string,
  oldPin: string,
  newPin: string,
): Uint8Array {
  return utf8Encode(`${PROOF_CONTEXT}\n${role}\n${id}\n${device}\n${oldPin}\n${newPin}`);
}

export function makeProof(id: string, device: string, oldPair: KeyPair, newPair: KeyPair): RotationProof {
  const [oldPin, newPin] = [agentKeyPin(oldPair.publicKey), agentKeyPin(newPair.publicKey)];
  const sign = (m: Uint8Array, k: Uint8Array) => toBase64(ed25519().sign(m, k));
  return {
    id,
    old: oldPin,
    new: newPin,
    byOld: sign(proofMessage('old-hands-over', id, device, oldPin, newPin), oldPair.secretKey),
    byNew: sign(proofMessage('new-accepts', id, device, oldPin, newPin), newPair.secretKey),
  };
}

const PIN_FIELDS = ['old', 'new'] as const;

/** A proof from a request body (untrusted): the proof, or what is wrong with it, naming the field. */
export function parseProof(data: unknown): RotationProof | string {
  if (typeof data !== 'object' || data === null || Array.isArray(data)) return 'rotationProof: must be an object';
  const d = data as Record<string, unknown>;
  const keys = Object.keys(d).sort().join(',');
  if (keys !== 'byNew,byOld,id,new,old')
    return `rotationProof: must hold exactly id, old, new, byOld, byNew (holds ${keys.slice(0, 100)})`;
  if (typeof d.id !== 'string' || !/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/.test(d.id))
    return 'rotationProof.id: must be a rotation id';
  for (const f of PIN_FIELDS)
    if (typeof d[f] !== 'string' || parseAgentKey(d[f] as string) === undefined)
      return `rotationProof.${f}: must be an agentKey pin "ed25519:<base64 32 bytes>"`;
  for (const f of ['byOld', 'byNew'] as const)
    if (typeof d[f] !== 'string' || (d[f] as string).length > 100)
      return `rotationProof.${f}: must be a base64 Ed25519 signature`;
  return d as unknown as RotationProof;
}

/**
 * Null when `proof` is `device`'s proof for rotation `id`, handing over from `pinned` (the inventory's agentKey
 * now) to another key, both signatures valid; else why not. A proof whose new key is already the pin (the
 * inventory moved) is accepted again: proving twice is harmless.
 */
export function proofProblem(
  proof: RotationProof,
  expected: { id: string; device: string; pinned: string },
): string | null {
  if (proof.id !== expected.id) return `the proof is for rotation ${proof.id}, not ${expected.id}`;
  if (proof.old === proof.new) return 'the proof hands over to the same key';
  if (proof.old !== expected.pinned && proof.new !== expected.pinned)
    return `the proof's old key is not ${expected.device}'s agentKey in the inventory`;
  const check = (sig: string, role: 'old-hands-over' | 'new-accepts', pin: string) => {
    const raw = fromBase64(sig);
    const key = parseAgentKey(pin);
    return (
      raw !== undefined &&
      raw.length === 64 &&
      key !== undefined &&
      ed25519Verify(raw, proofMessage(role, proof.id, expected.device, proof.old, proof.new), key)
    );
  };
  if (!check(proof.byOld, 'old-hands-over', proof.old)) return 'byOld: not signed by the old key';
  if (!check(proof.byNew, 'new-accepts', proof.new)) return 'byNew: not signed by the new key';
  return null;
}

/** What a sync answer tells one agent of a rotation of its identity key (`rotation` in the answer). */
export interface IdentityRotationNews {
  id: string;
  publish: string;
  activate: string;
  retire: string;
  /** published: make a key, prove it from activate; active: the gateway holds the proof, sign with the new key; retired: the old key is refused, delete it. */
  state: 'published' | 'active' | 'retired';
  /** The new key the gateway holds proven (when active or retired). */
  new?: string;
}

/**
 * The keys a device's requests (and receipts) may be signed with: the inventory's pin, and during the overlap
 * the other key of its proven rotation; once the rotation is retired only the new key of a proven device (a
 * lifeline device keeps the old one until lifelineUntil); a device that never proved keeps its pin (a forced
 * retire went past it: it is listed, not locked out). The first key is the one the gateway considers current.
 */
export function acceptedKeys(input: {
  device: string;
  pinned: string | undefined;
  rotation?: Pick<Rotation, 'lifeline' | 'lifelineUntil'>;
  proof?: Pick<RotationProof, 'old' | 'new'>;
  retired: boolean;
  now: number;
}): string[] {
  const { pinned, proof } = input;
  if (pinned === undefined) return [];
  // A proof that does not speak for the pin (the inventory changed by hand since) counts for nothing.
  if (!proof || (pinned !== proof.old && pinned !== proof.new)) return [pinned];
  const keepOld = !input.retired || (input.rotation && keepsOldKey(input.rotation, input.device, input.now));
  return keepOld ? [proof.new, proof.old] : [proof.new];
}
