import type { z } from 'zod';
import { WavegateError, type WavegateErrorCode } from './errors';
import { lazySchema, zod } from './lazy-schema';
import { PROFILE_NAME, PROFILE_NAME_RULE } from './profile-name';
import { readSignedDocument, signDocument } from './signed-document';
import {
  KID_PATTERN,
  MAX_CLOCK_SKEW_MS,
  MAX_VALIDITY_DAYS,
  type Envelope,
  type KeyPair,
  type Trust,
  type VerifyReason,
} from './signing';
import { formatPath, PRINTABLE, PRINTABLE_RULE, showValue } from './validation';

/**
 * Key rotation on a schedule (docs/formats.md, "Rotation schedules"): a signed document names the key that
 * goes (`old`), the key that comes (`new`) and three instants, `publish <= activate <= retire`. From publish
 * the new key may be added beside the old one (both accepted: make before break); from activate each device
 * is moved to the new key once a login with it is proven there; retire, a separate signed statement, removes
 * the old key, and only from devices proven on the new one. Pure: the clock and what each device reported
 * are passed in; verification answers with a reason code, never a throw.
 */

export const ROTATION_TYPE = 'wavegate/rotation';
export const RETIRE_TYPE = 'wavegate/rotation-retire';
/** The longest a schedule may run from publish to retire (a signature's longest life, as for revisions). */
export const MAX_ROTATION_DAYS = MAX_VALIDITY_DAYS;
const DAY_MS = 86_400_000;

/** A rotation's id names its state file: a plain name. */
const ROTATION_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const DEVICE_ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
/** An OpenSSH public key fingerprint, as `ssh-keygen -lf` prints it. */
const FINGERPRINT = /^SHA256:[A-Za-z0-9+/]{43}$/;
/** A signer key id (core/signing.ts keyId), as trust roots pin it. */
const SIGNER_KID = KID_PATTERN;
const KEY_NAME = new RegExp(`${FINGERPRINT.source}|${SIGNER_KID.source}`);
const KEY_NAME_RULE =
  'must be an OpenSSH fingerprint "SHA256:<43 base64 chars>" (ssh-login) or a signer key id "sha256/<43 base64url>" (signer)';

/**
 * What a schedule rotates: the fleet's SSH login key, each agent device's own identity key, or one signer key of the
 * authority profile's trust root (the root chain carries the keys; the schedule adds the overlap and the retire gate).
 */
export const ROTATION_KINDS = ['ssh-login', 'agent-identity', 'signer'] as const;
export type RotationKind = (typeof ROTATION_KINDS)[number];

const Instant = lazySchema(() => zod().iso.datetime({ offset: true }));
const DeviceIds = lazySchema(() =>
  zod()
    .array(zod().string().regex(DEVICE_ID, 'must be a device id of 1-128 letters, digits, ".", "_", ":" or "-"'))
    .min(1, 'list at least one device (or "all")')
    .max(100_000),
);

/** The signed schedule's body (without `issuedAt`, the source a signer writes). */
export const RotationSource = lazySchema(() =>
  zod()
    .object({
      type: zod().literal(ROTATION_TYPE),
      id: zod().string().regex(ROTATION_ID, 'must be 1-64 letters, digits, ".", "_" or "-"'),
      // The SSH login key (one fleet-wide key pair, old and new named by fingerprint), each agent's identity key (one
      // key per device, made on the device: no old or new here, each device proves its own), and a signer key of the
      // authority profile (old and new named by kid; the keys themselves travel in the profile's trust roots).
      kind: zod().enum(ROTATION_KINDS),
      authority: zod().string().regex(PROFILE_NAME, PROFILE_NAME_RULE),
      old: zod().string().regex(KEY_NAME, KEY_NAME_RULE).optional(),
      new: zod().string().regex(KEY_NAME, KEY_NAME_RULE).optional(),
      publish: Instant,
      activate: Instant,
      retire: Instant,
      required: zod().union([zod().literal('all'), DeviceIds]),
      lifeline: DeviceIds.optional(),
      lifelineUntil: Instant.optional(),
    })
    .strict(),
);
export type RotationSource = z.infer<typeof RotationSource>;

const RotationBody = lazySchema(() => RotationSource.extend({ issuedAt: Instant }).strict());
export type Rotation = z.infer<typeof RotationBody>;

export const RetireSource = lazySchema(() =>
  zod()
    .object({
      type: zod().literal(RETIRE_TYPE),
      id: zod().string().regex(ROTATION_ID, 'must be 1-64 letters, digits, ".", "_" or "-"'),
      /** Hex SHA-256 of the schedule's body: a retire speaks for one signed schedule, never another of the same id. */
      schedule: zod()
        .string()
        .regex(/^[0-9a-f]{64}$/, 'must be the schedule body digest (64 hex characters)'),
      forced: zod().boolean(),
      reason: zod().string().min(1).max(500).regex(PRINTABLE, PRINTABLE_RULE).optional(),
    })
    .strict(),
);
export type RetireSource = z.infer<typeof RetireSource>;
const RetireBody = lazySchema(() => RetireSource.extend({ issuedAt: Instant }).strict());
export type RetireStatement = z.infer<typeof RetireBody>;

export type RotationReason = VerifyReason | 'INVALID_ROTATION' | 'BAD_ORDER' | 'WRONG_SCHEDULE';

export interface RotationFailure {
  ok: false;
  reason: RotationReason;
  code: WavegateErrorCode;
  message: string;
}
export interface VerifiedRotation {
  ok: true;
  rotation: Rotation;
  /** Hex SHA-256 of the body bytes: what a retire statement and a state file name the schedule by. */
  digest: string;
  signers: string[];
}
export interface VerifiedRetire {
  ok: true;
  retire: RetireStatement;
  digest: string;
  signers: string[];
}

function fail(reason: RotationReason, message: string): RotationFailure {
  return { ok: false, reason, code: 'INVALID_INPUT', message };
}

/** The ordering and set rules zod cannot say: `publish <= activate <= retire`, a bounded span, lifelines. */
export function scheduleProblem(
  s: RotationSource,
): { reason: 'BAD_ORDER' | 'INVALID_ROTATION'; message: string } | undefined {
  const [publish, activate, retire] = [Date.parse(s.publish), Date.parse(s.activate), Date.parse(s.retire)];
  if (!(publish <= activate && activate <= retire))
    return {
      reason: 'BAD_ORDER',
      message: `publish <= activate <= retire is required (got publish ${s.publish}, activate ${s.activate}, retire ${s.retire})`,
    };
  if (retire - publish > MAX_ROTATION_DAYS * DAY_MS)
    return {
      reason: 'BAD_ORDER',
      message: `retire: at most ${MAX_ROTATION_DAYS} days after publish (got publish ${s.publish}, retire ${s.retire})`,
    };
  if (s.kind === 'ssh-login' || s.kind === 'signer') {
    const [form, what] =
      s.kind === 'ssh-login' ? [FINGERPRINT, "the key's fingerprint"] : [SIGNER_KID, "the signer's kid"];
    for (const field of ['old', 'new'] as const) {
      const value = s[field];
      if (value === undefined)
        return { reason: 'INVALID_ROTATION', message: `${field}: required for kind ${s.kind} (${what})` };
      if (!form.test(value))
        return { reason: 'INVALID_ROTATION', message: `${field}: must be ${what} for kind ${s.kind} (got ${value})` };
    }
    if (s.old === s.new) return { reason: 'INVALID_ROTATION', message: `new: the same key as old (got ${s.new})` };
  } else if (s.old !== undefined || s.new !== undefined)
    // Each agent makes its own new key on the device and proves it; no fleet-wide key to name.
    return {
      reason: 'INVALID_ROTATION',
      message: `${s.old !== undefined ? 'old' : 'new'}: not allowed for kind agent-identity (each device makes and proves its own key; got ${s.old ?? s.new})`,
    };
  const lifeline = s.lifeline ?? [];
  if (lifeline.length > 0 && s.lifelineUntil === undefined)
    return { reason: 'INVALID_ROTATION', message: 'lifelineUntil: required when lifeline lists devices' };
  if (s.lifelineUntil !== undefined && !(Date.parse(s.lifelineUntil) >= retire))
    return {
      reason: 'BAD_ORDER',
      message: `lifelineUntil: must not be before retire ${s.retire} (got ${s.lifelineUntil})`,
    };
  if (s.lifelineUntil !== undefined && Date.parse(s.lifelineUntil) - publish > MAX_ROTATION_DAYS * DAY_MS)
    return {
      reason: 'BAD_ORDER',
      message: `lifelineUntil: at most ${MAX_ROTATION_DAYS} days after publish (got ${s.lifelineUntil})`,
    };
  return undefined;
}

/** A schema's first problem, as `<field>: <rule> (got <value>)`. */
function firstProblem(schema: z.ZodType, data: unknown): string | undefined {
  const parsed = schema.safeParse(data);
  if (parsed.success) return undefined;
  const issue = parsed.error.issues[0]!;
  let value: unknown = data;
  for (const key of issue.path) value = (value as Record<PropertyKey, unknown> | undefined)?.[key as PropertyKey];
  return `${formatPath(issue.path)}: ${issue.message} (got ${showValue(value)})`;
}

/** The schedule a signer wrote, checked: INVALID_INPUT naming `source`, the field and its value. */
export function parseRotationSource(data: unknown, source: string): RotationSource {
  const problem = firstProblem(RotationSource, data);
  if (problem) throw new WavegateError('INVALID_INPUT', `${source}: invalid\n  ${problem}`, { source });
  const s = RotationSource.parse(data);
  const order = scheduleProblem(s);
  if (order) throw new WavegateError('INVALID_INPUT', `${source}: invalid\n  ${order.message}`, { source });
  return s;
}

/** A retire statement's source, checked; a forced retire must say why. */
export function parseRetireSource(data: unknown, source: string): RetireSource {
  const problem = firstProblem(RetireSource, data);
  if (problem) throw new WavegateError('INVALID_INPUT', `${source}: invalid\n  ${problem}`, { source });
  const r = RetireSource.parse(data);
  if (r.forced && r.reason === undefined)
    throw new WavegateError('INVALID_INPUT', `${source}: invalid\n  reason: required when forced is true`, { source });
  return r;
}

/** Sign a schedule or a retire statement, with `issuedAt` the signer's clock: an envelope exactly like a revision's. */
export function signRotationDocument(content: RotationSource | RetireSource, pair: KeyPair, now: number): Envelope {
  return signDocument({ ...content, issuedAt: new Date(now).toISOString() }, [pair]);
}

/** A signed body issued ahead of this clock (beyond the skew every signed document is allowed). */
function postDated(what: string, issuedAt: string, now: number): RotationFailure | undefined {
  if (Date.parse(issuedAt) <= now + MAX_CLOCK_SKEW_MS) return undefined;
  return fail(
    'NOT_YET_VALID',
    `the ${what} was issued at ${issuedAt}, after this clock's ${new Date(now).toISOString()}: this clock is behind (or it is post-dated); refusing`,
  );
}

/**
 * Verify a signed schedule against its authority's trust: the signatures (a threshold of distinct pinned,
 * unrevoked signers), canonical JSON, the body's fields (INVALID_ROTATION), `publish <= activate <= retire`
 * (BAD_ORDER) and a signing time not ahead of this clock (NOT_YET_VALID). The first failure is the reason.
 */
export function verifyRotation(
  envelope: unknown,
  trust: Pick<Trust, 'threshold' | 'keys' | 'revoked'>,
  opts: { now: number },
): VerifiedRotation | RotationFailure {
  const checked = readSignedDocument(envelope, trust, RotationBody, 'rotation schedule');
  if (!checked.ok) return checked;
  const rotation = checked.content;
  const order = scheduleProblem(rotation);
  if (order) return fail(order.reason, `rotation ${rotation.id}: ${order.message}`);
  return (
    postDated('rotation schedule', rotation.issuedAt, opts.now) ?? {
      ok: true,
      rotation,
      digest: checked.digest,
      signers: checked.signers,
    }
  );
}

/**
 * Verify a retire statement for a verified schedule: signed as the schedule must be, for this schedule (its
 * id and body digest: WRONG_SCHEDULE otherwise), a forced one with a reason, not issued before the schedule.
 */
export function verifyRetire(
  envelope: unknown,
  trust: Pick<Trust, 'threshold' | 'keys' | 'revoked'>,
  schedule: Pick<VerifiedRotation, 'rotation' | 'digest'>,
  opts: { now: number },
): VerifiedRetire | RotationFailure {
  const checked = readSignedDocument(envelope, trust, RetireBody, 'retire statement');
  if (!checked.ok) return checked;
  const r = checked.content;
  if (r.id !== schedule.rotation.id || r.schedule !== schedule.digest)
    return fail(
      'WRONG_SCHEDULE',
      `the retire statement is for rotation ${r.id} (schedule ${r.schedule.slice(0, 12)}), not ${schedule.rotation.id} (schedule ${schedule.digest.slice(0, 12)})`,
    );
  if (r.forced && r.reason === undefined)
    return fail('INVALID_ROTATION', 'the retire statement is forced but gives no reason');
  if (Date.parse(r.issuedAt) < Date.parse(schedule.rotation.issuedAt))
    return fail(
      'BAD_ORDER',
      `the retire statement was issued at ${r.issuedAt}, before its schedule (${schedule.rotation.issuedAt})`,
    );
  return (
    postDated('retire statement', r.issuedAt, opts.now) ?? {
      ok: true,
      retire: r,
      digest: checked.digest,
      signers: checked.signers,
    }
  );
}

/** Where the schedule stands at `now`. */
export type RotationPhase = 'scheduled' | 'published' | 'activating' | 'retire-due';

export function phaseAt(rotation: Pick<Rotation, 'publish' | 'activate' | 'retire'>, now: number): RotationPhase {
  if (now < Date.parse(rotation.publish)) return 'scheduled';
  if (now < Date.parse(rotation.activate)) return 'published';
  if (now < Date.parse(rotation.retire)) return 'activating';
  return 'retire-due';
}

/** A device's state in one rotation (the seed's five). */
export type RotationState = 'published' | 'active' | 'retired' | 'missed' | 'blocked';

/**
 * What is known of one device in one rotation, each fact with when it was proven (ISO): the new key added to
 * its authorized keys, a login with the new key proven (active), the old key's line removed (retired), or why
 * it cannot take part (blocked; cleared by a later success). `lastError`: why the last attempt did not get
 * through (an offline device).
 */
export interface DeviceRotation {
  added?: string;
  active?: string;
  retired?: string;
  blocked?: string;
  lastError?: string;
  triedAt?: string;
}

/**
 * A device's state: blocked, retired and active are facts reported; otherwise the device is still on the old
 * key, `published` until the activate instant and `missed` after it (it should have moved by then).
 */
export function deviceState(
  rotation: Pick<Rotation, 'activate'>,
  now: number,
  record: DeviceRotation = {},
): RotationState {
  if (record.retired) return 'retired';
  if (record.active) return 'active';
  if (record.blocked) return 'blocked';
  return now < Date.parse(rotation.activate) ? 'published' : 'missed';
}

/** Still logging in with the old key: not yet proven on the new one. */
export function onOldKey(state: RotationState): boolean {
  return state !== 'active' && state !== 'retired';
}

/** The devices the retire waits for: `required`'s list, or every device of the rotation. */
export function requiredDevices(rotation: Pick<Rotation, 'required'>, devices: readonly string[]): string[] {
  return rotation.required === 'all' ? [...devices] : [...rotation.required];
}

/** Whether a lifeline device still keeps the old key at `now` (retire leaves it until `lifelineUntil`). */
export function keepsOldKey(
  rotation: Pick<Rotation, 'lifeline' | 'lifelineUntil'>,
  device: string,
  now: number,
): boolean {
  return (
    (rotation.lifeline ?? []).includes(device) &&
    rotation.lifelineUntil !== undefined &&
    now < Date.parse(rotation.lifelineUntil)
  );
}

export interface RetireDecision {
  /** Devices whose old key is removed now: proven on the new key, not lifelines still in their window. */
  remove: string[];
  /** Lifeline devices that keep the old key until `lifelineUntil`. */
  lifeline: string[];
  /** Devices not active (required or not): their old key stays; they are listed with what to do. */
  notActive: Array<{ device: string; state: RotationState; required: boolean }>;
  /** The retire went ahead past required devices that are not active, on a forced statement with --force. */
  forced: boolean;
}

/**
 * The retire gate. Refused (INVALID_STATE) before the retire instant; refused (CONFLICT) while a required
 * device is not active, naming each, unless both the signed statement and the operator force it (the forced
 * retire is recorded by the caller). The old key is removed only where the new key's login was proven.
 */
export function decideRetire(input: {
  rotation: Rotation;
  retire: Pick<RetireStatement, 'forced' | 'reason'>;
  force: boolean;
  now: number;
  devices: readonly string[];
  records: Readonly<Record<string, DeviceRotation>>;
}): RetireDecision {
  const { rotation, now, records } = input;
  if (now < Date.parse(rotation.retire))
    throw new WavegateError(
      'INVALID_STATE',
      `rotation ${rotation.id}: retire is scheduled at ${rotation.retire}; nothing retires before then (the schedule is signed)`,
      { field: 'retire', value: rotation.retire },
    );
  if (input.force && !input.retire.forced)
    throw new WavegateError(
      'INVALID_INPUT',
      `--force: the retire statement is not signed as forced (forced: false); sign one with forced: true and a reason`,
      { field: '--force' },
    );
  const required = new Set(requiredDevices(rotation, input.devices));
  const decision: RetireDecision = { remove: [], lifeline: [], notActive: [], forced: false };
  for (const device of input.devices) {
    const state = deviceState(rotation, now, records[device]);
    if (state === 'retired') continue;
    if (state !== 'active') decision.notActive.push({ device, state, required: required.has(device) });
    else if (keepsOldKey(rotation, device, now)) decision.lifeline.push(device);
    else decision.remove.push(device);
  }
  // A required device missing from the fleet entirely is not active either.
  for (const device of required)
    if (!input.devices.includes(device)) decision.notActive.push({ device, state: 'blocked', required: true });
  const holding = decision.notActive.filter((d) => d.required);
  if (holding.length > 0) {
    if (!(input.force && input.retire.forced))
      throw new WavegateError(
        'CONFLICT',
        `rotation ${rotation.id}: retire refused: ${holding.length} required device(s) not active on the new key: ${holding.map((d) => `${d.device} (${d.state})`).join(', ')}. ${rotation.kind === 'signer' ? 'Each takes the root pinning the new signer at its next sync (an agent) or read of the profiles root (a worker): bring them online' : 'Run `wavegate rotation activate` again when they are reachable'}, or retire with a statement signed forced and --force`,
        { devices: holding.map((d) => d.device) },
      );
    decision.forced = true;
  }
  return decision;
}

/** One row of `rotation status`. */
export interface StatusRow {
  device: string;
  state: RotationState;
  required: boolean;
  lifeline: boolean;
  detail?: string;
}

/** Every device's state, and how many still log in with the old key (the status line's count). */
export function rotationStatus(input: {
  rotation: Rotation;
  now: number;
  devices: readonly string[];
  records: Readonly<Record<string, DeviceRotation>>;
}): { rows: StatusRow[]; onOldKey: number; phase: RotationPhase } {
  const required = new Set(requiredDevices(input.rotation, input.devices));
  const rows = input.devices.map((device): StatusRow => {
    const record = input.records[device] ?? {};
    const state = deviceState(input.rotation, input.now, record);
    const detail = record.blocked ?? (onOldKey(state) ? record.lastError : undefined);
    return {
      device,
      state,
      required: required.has(device),
      lifeline: (input.rotation.lifeline ?? []).includes(device),
      ...(detail ? { detail } : {}),
    };
  });
  return {
    rows,
    onOldKey: rows.filter((r) => onOldKey(r.state)).length,
    phase: phaseAt(input.rotation, input.now),
  };
}

/** What to tell the operator about a device still on the old key. */
export function nextStep(
  row: Pick<StatusRow, 'state' | 'device'>,
  kind: RotationKind = 'ssh-login',
): string | undefined {
  if (kind === 'signer')
    return onOldKey(row.state)
      ? `${row.device} takes the root pinning the new signer at its next sync with its gateway (an agent) or its worker's next read of the profiles root (SSH): bring it online`
      : undefined;
  switch (row.state) {
    case 'published':
    case 'missed':
      return `its old key still logs in until retire: run \`wavegate rotation activate\` again once ${row.device} is reachable`;
    case 'blocked':
      return `fix what blocks it (above), then run \`wavegate rotation activate\` again`;
    default:
      return undefined;
  }
}

/**
 * kind signer: where the schedule's keys stand in the authority profile's root chain (`roots`: the contents of
 * version 0, its trust.yaml, and each root after it, in any order). `overlap`: the first version pinning the new key
 * (from it revisions signed by either key verify: make before break); `drop`: the first version after it that no
 * longer pins the old key (the retire). Absent: no such root yet.
 */
export function signerRoots(
  rotation: Pick<Rotation, 'old' | 'new'>,
  roots: ReadonlyArray<{ version: number; pins: ReadonlyArray<{ kid: string }> }>,
): { overlap?: number; drop?: number } {
  const sorted = [...roots].sort((a, b) => a.version - b.version);
  const pins = (r: (typeof sorted)[number], kid: string | undefined) => r.pins.some((p) => p.kid === kid);
  const overlap = sorted.find((r) => pins(r, rotation.new))?.version;
  const drop =
    overlap === undefined ? undefined : sorted.find((r) => r.version > overlap && !pins(r, rotation.old))?.version;
  return { ...(overlap !== undefined ? { overlap } : {}), ...(drop !== undefined ? { drop } : {}) };
}

/** What a device says of the trust root it holds: the version, when it said so (ISO), and who verifies for it. */
export interface HeldRoot {
  root: number;
  at: string;
  /** "its agent" (from its report), "its worker" (the profiles root the worker reads). */
  by: string;
}

/**
 * kind signer: each device's record from the root version it holds, for deviceState, rotationStatus and
 * decideRetire as every kind: active once it holds the overlap root or a later one (it verifies signatures of the new
 * key), otherwise why not (`lastError`), its state then published or missed by the schedule's instants.
 */
export function signerRecords(input: {
  profile: string;
  overlap: number | undefined;
  devices: readonly string[];
  held: Readonly<Record<string, HeldRoot | undefined>>;
}): Record<string, DeviceRotation> {
  const records: Record<string, DeviceRotation> = {};
  for (const device of input.devices) {
    const held = Object.hasOwn(input.held, device) ? input.held[device] : undefined;
    if (input.overlap !== undefined && held && held.root >= input.overlap) records[device] = { active: held.at };
    else if (input.overlap === undefined)
      records[device] = {
        lastError: `no trust root of ${input.profile} pins the new signer yet: publish one pinning both keys (wavegate trust rotate, then publish)`,
      };
    else
      records[device] = {
        lastError: held
          ? `${held.by} holds trust root v${held.root} of ${input.profile} (as of ${held.at}), not v${input.overlap} or later (the first pinning the new signer)`
          : `it has not reported the trust root of ${input.profile} it holds (never synced, or an agent before v1.4)`,
      };
  }
  return records;
}
