import { resolve } from 'node:path';
import { WavegateError } from '../core/errors';
import {
  decideRetire,
  signerRecords,
  signerRoots,
  verifyRetire,
  type DeviceRotation,
  type HeldRoot,
  type RetireDecision,
  type VerifiedRotation,
} from '../core/rotation';
import { parseTrust, peekBody, type Envelope } from '../core/signing';
import { anchorVersion, type TrustRoot } from '../core/trust-root';
import { readDocument } from '../intake/files';
import { loadInventory } from '../intake/inventory';
import type { ProfileDir } from '../intake/profile-dir';
import {
  readRotationState,
  rotationStatePath,
  writeRotationState,
  type RotationStateFile,
} from '../intake/rotation-state';
import { verifiedSchedule } from '../intake/rotation-schedule';
import { profileTrustState } from '../intake/trust';
import type { TemporalFlags } from '../workers/connection';

/**
 * A signer key rotated on a signed schedule (kind `signer`, docs/operations.md "Replacing a signer"): the keys travel
 * in the authority profile's trust roots (`wavegate trust rotate|publish`); the schedule adds what the chain alone
 * does not say: which device already holds a root pinning the new signer (active), how many do not, and a retire
 * (publishing the root that drops the old signer) refused while a required device does not. An agent device's held
 * root is what its agent last reported (`report.trust[profile].root`, on its twin); an SSH device is verified by the
 * worker, which reads this profiles root: it holds what this profiles root holds.
 */

export interface SignerFlags extends TemporalFlags {
  inventory?: string;
  profiles?: string;
  state?: string;
}

export interface SignerContext {
  schedule: VerifiedRotation & { trustOf: string };
  devices: string[];
  records: Record<string, DeviceRotation>;
  overlap?: number;
  drop?: number;
  statePath: string;
  state: RotationStateFile;
}

/** Every root's pins from version 0 (trust.yaml) to the one the profile is at, as verified by profileTrustState. */
function rootChain(layout: ProfileDir): Array<{ version: number; pins: Array<{ kid: string }> }> {
  const state = profileTrustState(layout);
  if (!state) return [];
  const chain: Array<{ version: number; pins: Array<{ kid: string }> }> = [
    { version: 0, pins: parseTrust(readDocument(layout.trustFile), layout.trustFile).pins },
  ];
  // Each file below the newest was walked (verified in turn) to reach it: its pins are read as they are.
  for (let v = 1; v <= anchorVersion(state.root); v++) {
    const body = peekBody(readDocument(layout.rootFile(v), 'json') as Envelope) as { pins?: Array<{ kid: string }> };
    chain.push({ version: v, pins: body.pins ?? [] });
  }
  return chain;
}

/** The held root of each agent device, from its twin (loaded only when some device is an agent's). */
async function agentHeldRoots(
  devices: ReadonlyArray<{ id: string; transport?: unknown }>,
  profile: string,
  opts: TemporalFlags,
): Promise<{ agents: Set<string>; held: Record<string, HeldRoot> }> {
  const { devicesWithTwins, twinReader } = require('../device/channel') as typeof import('../device/channel');
  const agents = devicesWithTwins(devices as Parameters<typeof devicesWithTwins>[0]).map((d) => d.id);
  const held: Record<string, HeldRoot> = {};
  if (agents.length === 0) return { agents: new Set(), held };
  const { withClient } = require('./client') as typeof import('./client');
  const { resolveConnectionSettings } = require('../workers/connection') as typeof import('../workers/connection');
  await withClient(resolveConnectionSettings(opts), async (client) => {
    const read = twinReader(client);
    for (const id of agents) {
      const view = await read(id);
      const trust = view?.report?.trust;
      const mine = trust && Object.hasOwn(trust, profile) ? trust[profile] : undefined;
      if (mine) held[id] = { root: mine.root, at: view!.lastSeenAt ?? new Date().toISOString(), by: 'its agent' };
    }
  });
  return { agents: new Set(agents), held };
}

/** The schedule (kind signer), its devices and what each holds: what status and the retire gate share. */
export async function signerContext(schedulePath: string, opts: SignerFlags, now: number): Promise<SignerContext> {
  if (!opts.inventory)
    throw new WavegateError('INVALID_INPUT', '--inventory: required: the inventory file of the devices', {
      field: '--inventory',
    });
  const schedule = verifiedSchedule(schedulePath, opts.profiles, now);
  if (schedule.rotation.kind !== 'signer')
    throw new WavegateError(
      'INVALID_INPUT',
      `${schedulePath}: a rotation of kind ${schedule.rotation.kind}, not signer: it does not gate a trust root`,
      { field: 'kind', value: schedule.rotation.kind },
    );
  const { profileDir } = require('../intake/profile-dir') as typeof import('../intake/profile-dir');
  const { resolveProfilesRoot } = require('../intake/profiles-root') as typeof import('../intake/profiles-root');
  const layout = profileDir(resolveProfilesRoot({ flag: opts.profiles }).dir, schedule.trustOf);
  const chain = rootChain(layout);
  const { overlap, drop } = signerRoots(schedule.rotation, chain);
  const inventoryPath = resolve(opts.inventory);
  const all = loadInventory(inventoryPath).devices;
  const { agents, held } = await agentHeldRoots(all, schedule.trustOf, opts);
  const here = chain.at(-1)?.version ?? 0;
  const at = new Date(now).toISOString();
  for (const d of all) if (!agents.has(d.id)) held[d.id] = { root: here, at, by: `its worker (reading ${layout.dir})` };
  const devices = all.map((d) => d.id);
  const records = signerRecords({ profile: schedule.trustOf, overlap, devices, held });
  const statePath = rotationStatePath(schedule.rotation.id, inventoryPath, opts.state);
  const state = readRotationState(statePath, schedule.rotation.id, schedule.digest);
  return {
    schedule,
    devices,
    records,
    ...(overlap !== undefined ? { overlap } : {}),
    ...(drop !== undefined ? { drop } : {}),
    statePath,
    state,
  };
}

/**
 * The retire gate of a signer rotation, before the root dropping its old signer is written: refused (CONFLICT naming
 * them) while a required device holds no root pinning the new signer, unless `statement` is a retire statement signed
 * forced and `force` is given; `record` writes the retire into the rotation's state file (a forced one with whom it
 * left), called once the root is written.
 */
export function gateSignerRetire(input: {
  ctx: SignerContext;
  root: TrustRoot;
  statement?: { path: string; envelope: unknown; trust: Parameters<typeof verifyRetire>[1] };
  force: boolean;
  now: number;
}): RetireDecision & { record: () => void } {
  const { ctx, root, now } = input;
  const rotation = ctx.schedule.rotation;
  if (ctx.overlap === undefined || root.content.version <= ctx.overlap)
    throw new WavegateError(
      'INVALID_STATE',
      `rotation ${rotation.id}: trust root v${root.content.version} drops ${rotation.old} before any root pinned the new signer ${rotation.new} (make before break: publish a root pinning both first)`,
      { field: 'removes', value: rotation.old },
    );
  let retire: { forced: boolean; reason?: string } = { forced: false };
  let statementDigest = root.digest;
  if (input.statement) {
    const verdict = verifyRetire(input.statement.envelope, input.statement.trust, ctx.schedule, { now });
    if (!verdict.ok)
      throw new WavegateError(
        'INVALID_INPUT',
        `--statement ${input.statement.path}: refused (${verdict.reason}): ${verdict.message}`,
        { field: '--statement', reason: verdict.reason },
      );
    retire = verdict.retire;
    statementDigest = verdict.digest;
  } else if (input.force)
    throw new WavegateError('INVALID_INPUT', '--force: needs --statement, a retire statement signed forced', {
      field: '--force',
    });
  const decision = decideRetire({
    rotation,
    retire,
    force: input.force,
    now,
    devices: ctx.devices,
    records: ctx.records,
  });
  const notActive = decision.notActive.map((d) => d.device);
  const when = new Date(now).toISOString();
  // Recorded once the root is written: a publish refused after the gate (its revocation list) retires nothing.
  const record = () => {
    ctx.state.retire = {
      at: when,
      statement: statementDigest,
      forced: decision.forced,
      ...(decision.forced ? { reason: retire.reason } : {}),
      notActive,
    };
    ctx.state.log.push({
      at: when,
      event: decision.forced ? 'retire-forced' : 'retire',
      detail: `trust root v${root.content.version} (${root.digest.slice(0, 12)}) drops ${rotation.old}${decision.forced ? `; ${retire.reason}; not active: ${notActive.join(', ')}` : ''}`,
    });
    writeRotationState(ctx.statePath, ctx.state);
  };
  return { ...decision, record };
}
