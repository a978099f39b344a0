import { existsSync, mkdirSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import { agentKeyPin, parseAgentKey } from '../core/agent-auth';
import { proofsPath, readProofs, type ProofsFile } from '../intake/rotation-proofs';
import { acceptedKeys, parseProof, proofProblem, type IdentityRotationNews } from '../core/agent-rotation';
import { phaseAt, type VerifiedRotation } from '../core/rotation';
import { writeFileAtomic } from '../intake/files';
import { readRotationState, rotationStatePath, type RotationStateFile } from '../intake/rotation-state';
import type { AgentPins } from './pins';

/**
 * The gateway's half of an agent identity key rotation (docs/operations.md, "Rotating an agent's identity key"):
 * each sync answer of a device in a published `agent-identity` schedule says so (`rotation`); from the activate
 * instant the proof the agent sends (core/agent-rotation.ts) is verified against the inventory's agentKey and
 * recorded in the rotation's proofs file, `<state dir>/<id>.proofs.json`, whose only writer is this gateway.
 * During the overlap either key authenticates the device; once the operator's `wavegate rotation retire` has
 * recorded the retire in the rotation's state file (`<id>.json`, written only by the CLI, read here), only the
 * proven new key does. The inventory's agentKey is moved by `wavegate rotation activate` (the CLI, the
 * inventory's one writer), from the proofs recorded here.
 */

/**
 * The proofs read back at start, each verified again (both signatures; the pin it must hand over from is checked
 * at each use): an entry someone wrote into the file without the keys is dropped, and said.
 */
function verifiedProofs(file: ProofsFile, log: (line: string) => void): ProofsFile {
  for (const [device, entry] of Object.entries(file.devices)) {
    const problem = proofProblem(entry.proof, { id: file.id, device, pinned: entry.proof.old });
    if (problem) {
      delete file.devices[device];
      log(`rotation ${file.id}: the recorded proof of ${device} does not verify (${problem}); ignored`);
    }
  }
  return file;
}

interface Tracked {
  schedule: VerifiedRotation;
  proofs: ProofsFile;
  proofsPath: string;
  statePath: string;
  /** The state file as last read (its retire), and the stamp it was read at. */
  state?: RotationStateFile;
  stamp: string;
  lookedAt: number;
}

export interface IdentityRotationsOptions {
  schedules: readonly VerifiedRotation[];
  /** The inventory's own pins (gateway/pins.ts): each device's agentKey, which a proof must hand over from. */
  pins: AgentPins;
  inventoryPath: string;
  stateDir?: string;
  log: (line: string) => void;
  now?: () => number;
}

export class IdentityRotations {
  private readonly tracked: Tracked[];
  private readonly now: () => number;

  get pins(): AgentPins {
    return this.opts.pins;
  }

  constructor(private readonly opts: IdentityRotationsOptions) {
    this.now = opts.now ?? Date.now;
    this.tracked = opts.schedules.map((schedule) => {
      const statePath = rotationStatePath(schedule.rotation.id, opts.inventoryPath, opts.stateDir);
      const path = proofsPath(statePath, schedule.rotation.id);
      const t: Tracked = {
        schedule,
        proofs: verifiedProofs(readProofs(path, schedule.rotation.id, schedule.digest), opts.log),
        proofsPath: path,
        statePath,
        stamp: '',
        lookedAt: -Infinity,
      };
      this.refreshState(t);
      return t;
    });
  }

  /** The device's rotation: of the schedules naming it (or all) and published by now, the one published last. */
  private of(device: string): Tracked | undefined {
    const now = this.now();
    let best: Tracked | undefined;
    for (const t of this.tracked) {
      const r = t.schedule.rotation;
      const names = r.required === 'all' || r.required.includes(device) || (r.lifeline ?? []).includes(device);
      if (!names || phaseAt(r, now) === 'scheduled') continue;
      if (!best || Date.parse(r.publish) > Date.parse(best.schedule.rotation.publish)) best = t;
    }
    return best;
  }

  /** The CLI's state file, read again when it changed (looked at no more than once a second): its retire. */
  private refreshState(t: Tracked): void {
    const now = this.now();
    if (now - t.lookedAt < 1_000) return;
    t.lookedAt = now;
    try {
      const st = existsSync(t.statePath) ? statSync(t.statePath) : undefined;
      const stamp = st ? `${st.mtimeMs}:${st.size}` : 'none';
      if (stamp === t.stamp) return;
      t.state = st ? readRotationState(t.statePath, t.schedule.rotation.id, t.schedule.digest) : undefined;
      t.stamp = stamp;
    } catch (err) {
      // Kept as it was: a half-written or foreign file must not un-retire a rotation (nor retire one).
      this.opts.log(
        `rotation ${t.schedule.rotation.id}: ${(err as Error).message.split('\n')[0]}; keeping what was read before`,
      );
    }
  }

  private retired(t: Tracked): boolean {
    this.refreshState(t);
    return t.state?.retire !== undefined;
  }

  /** The keys `device` may sign with, its pin first when it has no proven rotation (acceptedKeys). */
  keysOf(device: string): Uint8Array[] | null | undefined {
    const pinned = this.opts.pins.keyOf(device);
    if (!pinned) return pinned;
    const t = this.of(device);
    if (!t) return [pinned];
    const pins = acceptedKeys({
      device,
      pinned: agentKeyPin(pinned),
      rotation: t.schedule.rotation,
      proof: t.proofs.devices[device]?.proof,
      retired: this.retired(t),
      now: this.now(),
    });
    return pins.map((p) => parseAgentKey(p)!);
  }

  /**
   * A sync's part: the proof it carries taken (verified against the pin, recorded), and the news for its answer.
   * A proof that does not verify is refused with 400 by the caller (the string), nothing recorded.
   */
  sync(device: string, rawProof: unknown): IdentityRotationNews | string | undefined {
    const pinned = this.opts.pins.keyOf(device);
    const t = this.of(device);
    if (rawProof !== undefined) {
      const problem = this.take(t, device, pinned, rawProof);
      if (problem) return problem;
    }
    if (!t) return undefined;
    const r = t.schedule.rotation;
    const proven = t.proofs.devices[device]?.proof;
    const pin = pinned ? agentKeyPin(pinned) : undefined;
    const standing = proven && (pin === proven.old || pin === proven.new);
    return {
      id: r.id,
      publish: r.publish,
      activate: r.activate,
      retire: r.retire,
      state: standing ? (this.retired(t) ? 'retired' : 'active') : 'published',
      ...(standing ? { new: proven.new } : {}),
    };
  }

  private take(
    t: Tracked | undefined,
    device: string,
    pinned: Uint8Array | null | undefined,
    raw: unknown,
  ): string | null {
    const proof = parseProof(raw);
    if (typeof proof === 'string') return proof;
    if (!t || t.schedule.rotation.id !== proof.id)
      return `rotationProof.id: ${proof.id} is not a rotation of ${device}'s identity key this gateway knows`;
    const r = t.schedule.rotation;
    if (phaseAt(r, this.now()) === 'published')
      return `rotationProof: rotation ${r.id} activates at ${r.activate}; prove the new key from then`;
    if (!pinned) return `rotationProof: ${device} has no agentKey in the inventory`;
    const problem = proofProblem(proof, { id: r.id, device, pinned: agentKeyPin(pinned) });
    if (problem) return `rotationProof: ${problem}`;
    const had = t.proofs.devices[device]?.proof;
    if (had?.new === proof.new && had.old === proof.old) return null;
    if (had && this.retired(t))
      return `rotationProof: rotation ${r.id} is retired; ${device} proved ${had.new} already`;
    t.proofs.devices[device] = { at: new Date(this.now()).toISOString(), proof };
    mkdirSync(dirname(t.proofsPath), { recursive: true });
    writeFileAtomic(t.proofsPath, `${JSON.stringify(t.proofs, null, 2)}\n`);
    this.opts.log(`rotation ${r.id}: ${device} proved its new identity key ${proof.new.slice(0, 20)}...`);
    return null;
  }
}

/** The inventory's pins with each device's rotation applied: `keysOf` the keys it may sign with, `keyOf` the current one. */
export function rotatingPins(rotations: IdentityRotations): AgentPins {
  const base = rotations.pins;
  const keysOf = (device: string) => rotations.keysOf(device);
  return {
    deviceOf: (device) => base.deviceOf(device),
    keyOf: (device) => {
      const keys = keysOf(device);
      return Array.isArray(keys) ? (keys[0] ?? null) : keys;
    },
    keysOf,
    reload: (why) => base.reload(why),
    get devices() {
      return base.devices;
    },
  };
}
