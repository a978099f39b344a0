import { isAbsolute, resolve } from 'node:path';
import type { Command } from 'commander';
import { WavegateError } from '../../core/errors';
import {
  decideRetire,
  nextStep,
  parseRetireSource,
  parseRotationSource,
  phaseAt,
  rotationStatus,
  signRotationDocument,
  verifyRetire,
  type VerifiedRotation,
} from '../../core/rotation';
import { bodyDigest, Envelope, parseSecretKeyFile, peekBody } from '../../core/signing';
import { PRINTABLE } from '../../core/validation';
import { loginKeyOf } from '../../device/channel/ssh-login-key';
import { activateDevices, retireDevices, rotationDevices, type RotationRun } from '../../device/rotation';
import { readDocument, writeFileAtomic } from '../../intake/files';
import { loadInventory } from '../../intake/inventory';
import { resolveProfilesRoot } from '../../intake/profiles-root';
import {
  readRotationState,
  rotationStatePath,
  writeRotationState,
  type RotationStateFile,
} from '../../intake/rotation-state';
import {
  activateIdentities,
  identityRotationDevices,
  provenDevices,
  recordsWithProofs,
  retireIdentities,
} from '../identity-rotation';
import { verifiedSchedule } from '../../intake/rotation-schedule';
import { loadTrust } from '../../intake/trust';
import { parseWith } from '../../core/validation';
import { action, EXIT_FAILED, EXIT_OK } from '../run';
import { withTemporalOptions } from '../temporal-options';
import type { TemporalFlags } from '../../workers/connection';

/**
 * `wavegate rotation sign|retire-statement|status|activate|retire`: the SSH login key rotated on a signed
 * schedule (core/rotation.ts; docs/operations.md, "Rotating the SSH login key"). The schedule and its retire
 * are envelopes signed offline like revisions (cosigned with `wavegate cosign`), verified against the trust of
 * the profile they name as `authority`; every device step is recorded in the rotation's state file.
 */

const out = (line: string) => process.stdout.write(`${line}\n`);

interface CommonFlags {
  inventory: string;
  profiles?: string;
  state?: string;
}
interface DeviceFlags extends CommonFlags {
  authorizedKeys: string;
  connectTimeout: string;
  commandTimeout: string;
  concurrency: string;
}

function loadKey(path: string) {
  return parseSecretKeyFile(readDocument(path, 'json'), path);
}

/** A whole number in [min, max] from a flag: INVALID_INPUT naming the flag and the value otherwise. */
function intFlag(flag: string, value: string, min: number, max: number): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || n < min || n > max)
    throw new WavegateError(
      'INVALID_INPUT',
      `${flag}: must be a whole number ${min}-${max} (got ${JSON.stringify(value)})`,
      {
        field: flag,
        value,
      },
    );
  return n;
}

/** The inventory, the rotation's devices in it and the state file: what status, activate and retire share. */
function context(schedulePath: string, opts: CommonFlags, now: number) {
  if (!opts.inventory)
    throw new WavegateError('INVALID_INPUT', '--inventory: required: the inventory file of the devices', {
      field: '--inventory',
    });
  const schedule = verifiedSchedule(schedulePath, opts.profiles, now);
  const inventoryPath = resolve(opts.inventory);
  const all = loadInventory(inventoryPath).devices;
  const identity = schedule.rotation.kind === 'agent-identity';
  const devices = identity ? identityRotationDevices(schedule.rotation, all) : rotationDevices(schedule.rotation, all);
  const statePath = rotationStatePath(schedule.rotation.id, inventoryPath, opts.state);
  const state = readRotationState(statePath, schedule.rotation.id, schedule.digest);
  // An agent's proof is recorded by the gateway (<id>.proofs.json); verified again here, it counts as active.
  const proven = identity ? provenDevices(schedule.rotation, schedule.digest, statePath, devices) : undefined;
  const records = proven ? recordsWithProofs(state, proven) : state.devices;
  return { schedule, inventoryPath, devices, statePath, state, proven, records };
}

/** Print each device's state; returns how many are still on the old key. */
function printStatus(
  schedule: VerifiedRotation,
  devices: readonly string[],
  state: RotationStateFile,
  now: number,
  records: RotationStateFile['devices'] = state.devices,
  roots?: string,
): number {
  const status = rotationStatus({ rotation: schedule.rotation, now, devices, records });
  const r = schedule.rotation;
  out(
    `rotation ${r.id} (${r.kind}): ${r.kind === 'agent-identity' ? "each agent's identity key" : `${r.old} -> ${r.new}${r.kind === 'signer' ? ` (signer of ${r.authority})` : ''}`}`,
  );
  out(`  publish ${r.publish}, activate ${r.activate}, retire ${r.retire}; now: ${status.phase}`);
  if (roots) out(`  ${roots}`);
  for (const row of status.rows) {
    const tags = [row.required ? 'required' : 'best-effort', ...(row.lifeline ? ['lifeline'] : [])].join(', ');
    out(`  ${row.device}: ${row.state} (${tags})${row.detail ? `: ${row.detail}` : ''}`);
    const next = nextStep(row, r.kind);
    if (next) out(`    next: ${next}`);
  }
  if (state.retire)
    out(
      `  retired at ${state.retire.at}${state.retire.forced ? ` (FORCED: ${state.retire.reason}; past ${state.retire.notActive.join(', ')})` : ''}`,
    );
  out(`${status.onOldKey} device(s) still on ${r.kind === 'signer' ? 'a root without the new signer' : 'the old key'}`);
  return status.onOldKey;
}

/** The kind a schedule says it is (unverified: only to pick the path, which verifies it). */
function kindOf(schedulePath: string): unknown {
  return (peekBody(parseWith(Envelope, readDocument(schedulePath, 'json'), schedulePath)) as { kind?: unknown })?.kind;
}

/** status for kind signer: each device's held trust root (an agent's report, an SSH device's worker) against the overlap root. */
async function signerStatus(
  schedulePath: string,
  opts: CommonFlags & TemporalFlags & { json?: boolean },
): Promise<number> {
  const now = Date.now();
  const { signerContext } = require('../signer-rotation') as typeof import('../signer-rotation');
  const ctx = await signerContext(schedulePath, opts, now);
  const { rotation } = ctx.schedule;
  if (opts.json) {
    const status = rotationStatus({ rotation, now, devices: ctx.devices, records: ctx.records });
    out(
      JSON.stringify({
        id: rotation.id,
        ...status,
        overlapRoot: ctx.overlap ?? null,
        dropRoot: ctx.drop ?? null,
        retire: ctx.state.retire ?? null,
      }),
    );
    return EXIT_OK;
  }
  const roots = `trust roots of ${rotation.authority}: ${ctx.overlap === undefined ? 'none pins the new signer yet' : `v${ctx.overlap} pins the new signer`}${ctx.drop === undefined ? '' : `, v${ctx.drop} drops the old one`}`;
  printStatus(ctx.schedule, ctx.devices, ctx.state, now, ctx.records, roots);
  return EXIT_OK;
}

async function runStatus(
  schedulePath: string,
  opts: CommonFlags & TemporalFlags & { json?: boolean },
): Promise<number> {
  if (kindOf(schedulePath) === 'signer') return signerStatus(schedulePath, opts);
  const now = Date.now();
  const { schedule, devices, state, records } = context(schedulePath, opts, now);
  const ids = devices.map((d) => d.id);
  if (opts.json) {
    const status = rotationStatus({ rotation: schedule.rotation, now, devices: ids, records });
    out(JSON.stringify({ id: schedule.rotation.id, ...status, retire: state.retire ?? null }));
    return EXIT_OK;
  }
  printStatus(schedule, ids, state, now, records);
  return EXIT_OK;
}

/** The per-device run both activate and retire carry out. */
function rotationRun(ctx: ReturnType<typeof context>, opts: DeviceFlags): RotationRun {
  if (!opts.authorizedKeys || !PRINTABLE.test(opts.authorizedKeys) || /[\n\r]/.test(opts.authorizedKeys))
    throw new WavegateError(
      'INVALID_INPUT',
      `--authorized-keys: must be a file path (got ${JSON.stringify(opts.authorizedKeys)})`,
      {
        field: '--authorized-keys',
      },
    );
  return {
    rotation: ctx.schedule.rotation,
    inventoryPath: ctx.inventoryPath,
    file: opts.authorizedKeys,
    state: ctx.state,
    statePath: ctx.statePath,
    deps: {},
    opts: {
      connectTimeoutMs: intFlag('--connect-timeout', opts.connectTimeout, 100, 600_000),
      commandTimeoutMs: intFlag('--command-timeout', opts.commandTimeout, 100, 600_000),
    },
    concurrency: intFlag('--concurrency', opts.concurrency, 1, 256),
    now: Date.now,
  };
}

function printOutcomes(outcomes: ReadonlyArray<{ device: string; step: string; detail?: string }>): void {
  for (const o of outcomes) out(`  ${o.device}: ${o.step}${o.detail ? `: ${o.detail}` : ''}`);
}

/** activate for kind agent-identity: the inventory's agentKey of each device its gateway holds proven moves. */
function activateAgentIdentities(ctx: ReturnType<typeof context>, now: number): number {
  out(`rotation ${ctx.schedule.rotation.id}: moving the agentKey of each device proven to its gateway`);
  const outcomes = activateIdentities(ctx.inventoryPath, ctx.state, ctx.statePath, ctx.devices, ctx.proven!, now);
  printOutcomes(outcomes);
  const ids = ctx.devices.map((d) => d.id);
  const left = printStatus(ctx.schedule, ids, ctx.state, Date.now(), recordsWithProofs(ctx.state, ctx.proven!));
  return left > 0 && phaseAt(ctx.schedule.rotation, now) !== 'published' ? EXIT_FAILED : EXIT_OK;
}

async function runActivate(schedulePath: string, opts: DeviceFlags & { newKey?: string }): Promise<number> {
  const now = Date.now();
  const ctx = context(schedulePath, opts, now);
  const { rotation } = ctx.schedule;
  if (phaseAt(rotation, now) === 'scheduled')
    throw new WavegateError(
      'INVALID_STATE',
      `rotation ${rotation.id} publishes at ${rotation.publish}: nothing is added before then (the schedule is signed)`,
      { field: 'publish', value: rotation.publish },
    );
  if (rotation.kind === 'agent-identity') return activateAgentIdentities(ctx, now);
  if (rotation.kind === 'signer')
    throw new WavegateError(
      'INVALID_INPUT',
      `rotation ${rotation.id}: a signer rotation activates by publishing a trust root pinning both keys (wavegate trust rotate, then publish); each device is active once it holds it (wavegate rotation status)`,
      { field: 'kind', value: 'signer' },
    );
  if (!opts.newKey)
    throw new WavegateError(
      'INVALID_INPUT',
      `--new-key: required for an ${rotation.kind} rotation (the new key file)`,
      {
        field: '--new-key',
      },
    );
  const newKey = loginKeyOf(isAbsolute(opts.newKey) ? opts.newKey : resolve(opts.newKey));
  if (newKey.fingerprint !== rotation.new)
    throw new WavegateError(
      'INVALID_INPUT',
      `--new-key ${opts.newKey}: its key is ${newKey.fingerprint}, not the schedule's new key ${rotation.new}`,
      { field: '--new-key', value: opts.newKey },
    );
  const run = rotationRun(ctx, opts);
  const publishing = phaseAt(rotation, now) === 'published';
  out(
    `rotation ${rotation.id}: ${publishing ? `publishing the new key (activate at ${rotation.activate})` : 'activating the new key'} on ${ctx.devices.length} device(s)`,
  );
  const outcomes = await activateDevices(run, ctx.devices, newKey);
  printOutcomes(outcomes);
  const left = printStatus(
    ctx.schedule,
    ctx.devices.map((d) => d.id),
    run.state,
    Date.now(),
  );
  // Before the activate instant every device is on the old key by design: only a device that could not take the new one fails.
  const stuck = outcomes.some((o) => o.step === 'failed' || o.step === 'blocked');
  return stuck || (!publishing && left > 0) ? EXIT_FAILED : EXIT_OK;
}

async function runRetire(
  schedulePath: string,
  opts: DeviceFlags & { statement: string; force?: boolean },
): Promise<number> {
  if (kindOf(schedulePath) === 'signer')
    throw new WavegateError(
      'INVALID_INPUT',
      `${schedulePath}: a signer rotation retires by publishing the trust root that drops its old signer, through the same gate: wavegate trust publish <root draft> --profile <authority> --rotation ${schedulePath} --inventory <fleet.yaml> (--statement <forced statement> --force to go past devices not active)`,
      { field: 'kind', value: 'signer' },
    );
  const now = Date.now();
  const ctx = context(schedulePath, opts, now);
  const { rotation } = ctx.schedule;
  const trust = loadTrust(resolveProfilesRoot({ flag: opts.profiles }).dir, ctx.schedule.trustOf)!;
  const statement = verifyRetire(readDocument(opts.statement, 'json'), trust, ctx.schedule, { now });
  if (!statement.ok)
    throw new WavegateError(
      'INVALID_INPUT',
      `--statement ${opts.statement}: refused (${statement.reason}): ${statement.message}`,
      {
        field: '--statement',
        reason: statement.reason,
      },
    );
  const ids = ctx.devices.map((d) => d.id);
  const decision = decideRetire({
    rotation,
    retire: statement.retire,
    force: opts.force === true,
    now,
    devices: ids,
    records: ctx.records,
  });
  const notActive = decision.notActive.map((d) => d.device);
  if (!ctx.state.retire || ctx.state.retire.statement !== statement.digest) {
    ctx.state.retire = {
      at: new Date(now).toISOString(),
      statement: statement.digest,
      forced: decision.forced,
      ...(decision.forced ? { reason: statement.retire.reason } : {}),
      notActive,
    };
    ctx.state.log.push({
      at: new Date(now).toISOString(),
      event: decision.forced ? 'retire-forced' : 'retire',
      detail: decision.forced
        ? `${statement.retire.reason}; not active: ${notActive.join(', ')}`
        : `signed by ${statement.signers.join(', ')}`,
    });
  }
  if (decision.forced)
    process.stderr.write(
      `wavegate: FORCED retire of ${rotation.id} (${statement.retire.reason}): ${notActive.join(', ')} still on the old key, left as they are (recorded in ${ctx.statePath})\n`,
    );
  out(`rotation ${rotation.id}: retiring the old key on ${decision.remove.length} device(s)`);
  if (rotation.kind === 'agent-identity') {
    // Written once, the retire with each device retired: the gateway reads this file and refuses their old keys.
    printOutcomes(retireIdentities(ctx.state, decision, now));
    writeRotationState(ctx.statePath, ctx.state);
    printStatus(ctx.schedule, ids, ctx.state, Date.now(), recordsWithProofs(ctx.state, ctx.proven!));
    return EXIT_OK;
  }
  const run = rotationRun(ctx, opts);
  const outcomes = await retireDevices(run, ctx.devices, decision);
  printOutcomes(outcomes);
  printStatus(ctx.schedule, ids, run.state, Date.now());
  return outcomes.some((o) => o.step === 'failed' || o.step === 'blocked') ? EXIT_FAILED : EXIT_OK;
}

function runSign(sourcePath: string, opts: { key: string; out: string }): number {
  const source = parseRotationSource(readDocument(sourcePath), sourcePath);
  const pair = loadKey(opts.key);
  const envelope = signRotationDocument(source, pair, Date.now());
  writeFileAtomic(opts.out, `${JSON.stringify(envelope, null, 2)}\n`);
  out(`signed rotation ${source.id} by ${pair.kid}\nbody sha256 ${bodyDigest(envelope)}\nwrote ${opts.out}`);
  out(
    `next: cosign it up to ${source.authority}'s threshold (wavegate cosign ${opts.out} --key <another signer's key>)`,
  );
  return EXIT_OK;
}

function runRetireStatement(
  schedulePath: string,
  opts: { key: string; out: string; forced?: boolean; reason?: string },
): number {
  const envelope = parseWith(Envelope, readDocument(schedulePath, 'json'), schedulePath);
  const id = (peekBody(envelope) as { id?: unknown } | undefined)?.id;
  const source = parseRetireSource(
    {
      type: 'wavegate/rotation-retire',
      id,
      schedule: bodyDigest(envelope),
      forced: opts.forced === true,
      ...(opts.reason !== undefined ? { reason: opts.reason } : {}),
    },
    schedulePath,
  );
  const pair = loadKey(opts.key);
  const statement = signRotationDocument(source, pair, Date.now());
  writeFileAtomic(opts.out, `${JSON.stringify(statement, null, 2)}\n`);
  out(`signed the ${source.forced ? 'FORCED ' : ''}retire of rotation ${source.id} by ${pair.kid}\nwrote ${opts.out}`);
  return EXIT_OK;
}

function deviceOptions(cmd: Command): Command {
  return cmd
    .requiredOption(
      '--inventory <fleet.yaml>',
      "the inventory file (each device's ssh.key moves to the new key once active)",
    )
    .option(
      '--profiles <dir>',
      "profiles root holding the authority profile's trust.yaml (default $WAVEGATE_PROFILES or ./profiles)",
    )
    .option(
      '--state <dir>',
      'directory of the rotation state file (default: .wavegate-rotations/ beside the inventory)',
    )
    .option(
      '--authorized-keys <path>',
      "the login's authorized keys file on each device (relative: under its $HOME)",
      '.ssh/authorized_keys',
    )
    .option('--connect-timeout <ms>', 'time to reach and log in to a device', '10000')
    .option('--command-timeout <ms>', 'time for each command on a device', '30000')
    .option('--concurrency <n>', 'devices worked on at once', '8');
}

export function register(program: Command): void {
  const rotation = program
    .command('rotation')
    .description(
      'Rotate a key the fleet runs on (the SSH login key, agent identity keys) on a signed schedule: publish <= activate <= retire (docs/operations.md)',
    );
  rotation
    .command('sign <schedule>')
    .description('Sign a rotation schedule (YAML/JSON) into an envelope; cosign it with wavegate cosign')
    .requiredOption('--key <file>', 'private key file (from keygen)')
    .requiredOption('--out <file>', 'envelope file to write (JSON)')
    .action(action(runSign));
  rotation
    .command('retire-statement <schedule-envelope>')
    .description('Sign the retire of a rotation (its own signed step); cosign it with wavegate cosign')
    .requiredOption('--key <file>', 'private key file (from keygen)')
    .requiredOption('--out <file>', 'envelope file to write (JSON)')
    .option('--forced', 'sign a forced retire: it may go ahead past required devices not active (with retire --force)')
    .option('--reason <text>', 'why (required with --forced)')
    .action(action(runRetireStatement));
  const status = rotation
    .command('status <schedule-envelope>')
    .description(
      'Each device state (published, active, retired, missed, blocked) and how many are still on the old key',
    )
    .requiredOption('--inventory <fleet.yaml>', 'the inventory file')
    .option('--profiles <dir>', "profiles root holding the authority profile's trust.yaml")
    .option('--state <dir>', 'directory of the rotation state file')
    .option('--json', 'print it as JSON');
  // signer: agents' held trust roots are read from their twins (the Temporal connection options).
  withTemporalOptions(status).action(action(runStatus));
  deviceOptions(
    rotation
      .command('activate <schedule-envelope>')
      .description(
        'Add the new key beside the old one on every device; from the activate instant prove a login with it and move the device (and its inventory ssh.key) to it. Run again to catch up devices that were offline. Exit 0 when none is left on the old key, 1 otherwise, 2 refused',
      )
      .option(
        '--new-key <file>',
        "ssh-login: the new private key file (OpenSSH, unencrypted), the schedule's new key (agent-identity: none, each agent made its own)",
      ),
  ).action(action(runActivate));
  deviceOptions(
    rotation
      .command('retire <schedule-envelope>')
      .description(
        'Remove the old key from the devices proven on the new one, on a verified retire statement; refused (exit 2) while a required device is not active, unless the statement is forced and --force is given (recorded)',
      )
      .requiredOption('--statement <file>', 'the signed retire statement (rotation retire-statement, cosigned)')
      .option('--force', 'go ahead past required devices not active (the statement must be signed forced)'),
  ).action(action(runRetire));
}
