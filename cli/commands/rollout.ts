import { userInfo } from 'node:os';
import type { Client } from '@temporalio/client';
import type { Command } from 'commander';
import { blockingStart } from '../../core/exclusion';
import type { ControlBase, ControlName } from '../../core/controls';
import { WavegateError } from '../../core/errors';
import { formatDurationMs } from '../../core/duration';
import { describeControl, rolloutOutcome } from '../../core/rollout/outcome';
import { proofOf, summarizeCounts, summarizeProof } from '../../core/rollout-state';
import { deviceRecords, findDevice } from '../../clients/rollout-records';
import type { RolloutStatus } from '../../contracts/rollout';
import { checkDependencyCycle } from '../../intake/dependencies';
import { prepareRollout } from '../../intake/prepare';
import { profilesOptionHelp, resolveProfilesRoot } from '../../intake/profiles-root';
import { resolveConnectionSettings, type TemporalFlags } from '../../workers/connection';
import {
  listRollouts,
  queryStatus,
  rolloutOfKey,
  sendControl,
  startOrJoinRollout,
  withClient,
  withTemporalOptions,
  workflowUrl,
  type StartOutcome,
} from '../client';
import { checkIdempotencyKey } from '../../core/rollout-id';
import type { RolloutInput } from '../../core/rollout/input';
import { action, EXIT_FAILED, EXIT_OK } from '../run';
import { describeEta, estimateRollout, localZone } from '../../core/eta';
import { pauseLine, waitProgress, watchRollout, type WatchOptions } from '../watch';
import { gateVerdictLines, whyLines, type TrailRead } from '../../core/rollout/verdict';
import { describeWatch } from '../../core/rollout/watch';
import { readTrail, withTrailOptions, type TrailFlags } from '../why';
import { preflightRollout } from '../preflight';
import { refuseWhileFrozen } from '../../clients/freeze';
import type { SignedStatement } from '../../core/approval';
import { readSigningKeyFile } from '../../intake/checkpoint-keys';
import { checkStarterKey, signedApproval, startStatement } from '../operator-statement';
import {
  readInventoryFlags,
  withInventoryOptions,
  withMembership,
  type InventoryFlags,
  type ReadInventory,
} from '../membership-client';

/** Who sends a control or starts a rollout: the operator's OS user name, recorded in the audit trail. */
export function operatorName(): string {
  try {
    return userInfo().username;
  } catch {
    return process.env.USER ?? 'unknown';
  }
}

/**
 * `status --device`: the device's record from the status or its slice; exit 0 when it is at the target
 * (applied or claimed), 1 when it has another state; NOT_FOUND when no record names it.
 */
async function printDevice(client: Client, status: RolloutStatus, device: string, json: boolean): Promise<number> {
  const found = await findDevice(client, status, device);
  if (!found) {
    const where = status.slices
      ? ' (its slice has not started, it was never started, or the plan settled it: already at the target, or not-for-me)'
      : '';
    throw new WavegateError(
      'NOT_FOUND',
      `--device: no record of ${JSON.stringify(device)} in ${status.rolloutId}${where}`,
      {
        field: '--device',
        value: device,
      },
    );
  }
  if (json) console.log(JSON.stringify(found, null, 2));
  else
    console.log(
      `${found.id} ${found.state}${found.reason ? ` (${found.reason})` : ''}, phase ${found.phase}${proofOf(found) ? `, ${proofOf(found)}` : ''}`,
    );
  return found.state === 'applied' || found.state === 'claimed' ? EXIT_OK : EXIT_FAILED;
}

function printStatus(status: RolloutStatus): void {
  console.log(`${status.rolloutId}: ${status.state}, phase ${status.phase}, ${summarizeCounts(status.counts)}`);
  console.log(`  proof: ${summarizeProof(status.devices)}`);
  if (status.state === 'paused') console.log(`  ${pauseLine(status)}`);
  else if (status.pausedReason) console.log(`  paused: ${status.pausedReason}`);
  if (status.verdict) console.log(`  canary verdict: ${status.verdict}`);
  if (status.watch) console.log(`  ${describeWatch(status.watch)}`);
  if (status.reverts)
    console.log(
      `  reverts: ${status.reverts.rolloutId} (run ${status.reverts.runId}), r${status.fromRevision} → r${status.toRevision}`,
    );
  if (status.deadline) {
    const d = status.deadline;
    const named =
      d.unconfirmed.length < d.unconfirmedCount
        ? `${d.unconfirmed.join(', ')} and ${d.unconfirmedCount - d.unconfirmed.length} more`
        : d.unconfirmed.join(', ') || 'none';
    console.log(
      `  deadline: ${d.kind} ${formatDurationMs(d.limitMs)} passed at ${d.at}${d.phase ? ` in ${d.phase}` : ''} → ${d.action}; unconfirmed: ${named}`,
    );
  }
  if (status.webhooks) {
    const w = status.webhooks;
    console.log(`  webhooks: ${w.delivered} delivered, ${w.pending} pending, ${w.failedTotal} not delivered`);
    for (const f of w.failed) console.log(`    not delivered: ${f.event} (${f.deliveryId}) to ${f.url}: ${f.error}`);
  }
  // The estimated ends (core/eta.ts), in this machine's zone, named.
  const eta = estimateRollout(status, Date.now());
  const zone = localZone();
  if (eta.rollout.kind !== 'done') console.log(`  eta: ${describeEta(eta.rollout, zone)}`);
  for (const p of status.phases) {
    const ends = eta.phases[p.index]?.eta;
    console.log(
      `  phase ${p.index} ${p.name}: ${p.devices} devices, ${p.stage}${p.gateOutcome ? ` (${p.gateOutcome})` : ''}${ends && ends.kind !== 'done' ? `, ends ${describeEta(ends, zone)}` : ''}`,
    );
  }
  for (const d of status.devices) console.log(`  ${d.id.padEnd(12)} ${d.state}${d.reason ? ` (${d.reason})` : ''}`);
  if (status.slices?.length)
    console.log(
      `  ${status.slices.length} slice(s) hold the sliced phases' device records: --device <id> for one, --devices for all`,
    );
  const last = status.controls.at(-1);
  if (last)
    console.log(
      `  last control: ${last.control} by ${last.by}${last.reason ? ` (${last.reason})` : ''} ${last.accepted ? `accepted${last.note ? `: ${last.note}` : ''}` : `refused: ${last.note ?? ''}`}`,
    );
}

/**
 * The last lines of a watch: why it ended there unless it is a success (core/rollout/verdict.ts: the
 * deciding gate's verdict from the audit trail when `trail` was read, else from the status; the
 * banner's other reasons), then the outcome and the exit code it means (core/rollout/outcome.ts).
 */
export function printOutcome(final: RolloutStatus, trail: TrailRead = {}): number {
  const outcome = rolloutOutcome(final);
  const code = outcomeCode(final);
  if (code !== EXIT_OK) for (const line of whyLines(final, trail)) console.log(line);
  // Why a completed rollout is still not a success (pending work, a watch's alert), on a line of its own.
  if (code !== EXIT_OK && final.state === 'completed') console.log(outcome.summary);
  console.log(
    `rollout ${final.state}${final.verdict ? ` (canary verdict ${final.verdict})` : ''}: ${summarizeCounts(final.counts)} — exit ${code}`,
  );
  return code;
}

/** The exit code a rollout's status means now (core/rollout/outcome.ts): 0 only when it completed with every device it was for at the target. */
function outcomeCode(status: RolloutStatus): number {
  return rolloutOutcome(status).code === 0 ? EXIT_OK : EXIT_FAILED;
}

function watchOptions(intervalMs: number): WatchOptions {
  const tty = !!process.stdout.isTTY;
  return {
    intervalMs,
    tty,
    write: (text: string) => void process.stdout.write(text),
    columns: () => process.stdout.columns,
    rows: () => process.stdout.rows,
    // On a terminal the frame shows the pause and its commands; a log gets them on a line of their own.
    ...(tty ? {} : { onPause: (s: RolloutStatus) => console.log(pauseLine(s)) }),
    // The status is final before the run closes (the last webhook deliveries): said while waiting for it.
    onClosing: (line: string) => console.log(line),
    onRetry: (line: string) => console.error(line),
  };
}

/** The outcome of a watch that ended, with the trail read for its reasons unless it is a success. */
async function printEnding(final: RolloutStatus, runId: string | undefined, flags: TrailFlags): Promise<number> {
  const trail = outcomeCode(final) === EXIT_OK ? {} : await readTrail(final.rolloutId, runId, flags);
  return printOutcome(final, trail);
}

/**
 * `--wait`: nothing drawn, but a line each time a phase changes stage (waitProgress), and a pause is
 * said (with `--exit-on-pause` it ends the wait).
 */
export function waitOptions(intervalMs: number, exitOnPause: boolean): WatchOptions {
  return {
    intervalMs,
    tty: false,
    write: () => {},
    onStatus: waitProgress((line) => console.log(line)),
    onPause: (s) => console.log(pauseLine(s)),
    stopOnPause: exitOnPause,
    onClosing: (line) => console.log(line),
    onRetry: (line) => console.error(line),
  };
}

export function parseInterval(value: string): number {
  const ms = Number(value);
  if (!Number.isFinite(ms) || ms < 100)
    throw new Error(`--interval ${JSON.stringify(value)}: must be a number of milliseconds, at least 100`);
  return ms;
}

/**
 * A start is refused (CONFLICT, exit 2, as while the profile's lock is held) while a nightly canary of
 * the profile or its canary rollout runs, or another rollout of the profile (a converge, a rollout whose
 * lock was released by hand), found by the WavegateProfile search attribute (core/exclusion.ts). The
 * lock itself (`profile-lock:<profile>`) is taken by the start (cli/client.ts).
 */
async function refuseWhileCanaryRuns(client: Client, profile: string, rolloutId: string): Promise<void> {
  const running = (await listRollouts(client, { profile, limit: 1_000 })).filter((r) => r.status === 'RUNNING');
  const { canaries, rollouts } = blockingStart(profile, rolloutId, running);
  if (canaries.length)
    throw new WavegateError(
      'CONFLICT',
      `a nightly canary of profile "${profile}" is running (${canaries.join(', ')}); wait for its verdict or cancel it first`,
      { running: canaries },
    );
  if (rollouts.length)
    throw new WavegateError(
      'CONFLICT',
      `another rollout of profile "${profile}" is running (${rollouts.join(', ')}); pause, abort or wait for it first`,
      { running: rollouts },
    );
}

/** The refusals of a start, then the start itself (under the profile's lock, with an id of its own). */
async function startChecked(
  client: Client,
  taskQueue: string,
  input: RolloutInput,
  read: ReadInventory,
  withMembers: RolloutInput | undefined,
  opts: { file: string; key?: string; signStart?: (rolloutId: string) => SignedStatement },
): Promise<StartOutcome> {
  // A freeze in force over the profile or a pool of the inventory refuses first, naming it (exit 2).
  await refuseWhileFrozen(client, 'start', { profile: input.spec.profile, pools: Object.keys(input.poolBudgets) });
  await refuseWhileCanaryRuns(client, input.spec.profile, input.rolloutId);
  // `after` closing a cycle with the running rollouts of the profiles it names: they would wait for each other forever (exit 2).
  await checkDependencyCycle(client, input.spec, opts.file);
  // A worker that would refuse the content, or could not read the devices' SSH files, is found now,
  // before any device is contacted (exit 2).
  await preflightRollout(client, taskQueue, input, { devices: read.inventory.devices });
  const members = withMembers ?? (await withMembership(client, taskQueue, input, read, input.startedBy));
  return startOrJoinRollout(client, taskQueue, members, {
    key: opts.key,
    newId: true,
    ...(opts.signStart ? { signStart: opts.signStart } : {}),
  });
}

/** The group's commands, in the order the help lists them. */
export function register(program: Command): void {
  for (const add of [registerStart, registerStatus, registerWatch, registerList]) add(program);
  for (const control of CONTROLS) registerControl(program, control);
}

type StartFlags = TemporalFlags &
  InventoryFlags &
  TrailFlags & {
    file: string;
    profiles?: string;
    registry?: boolean;
    key?: string;
    identityKey?: string;
    watch?: boolean;
    wait?: boolean;
    exitOnPause?: boolean;
    interval: number;
    json?: boolean;
  };

function registerStart(program: Command): void {
  const start = withTemporalOptions(
    withInventoryOptions(
      program
        .command('start')
        .description(
          'Validate a rollout spec, inventory, profile and revision, then start the rollout under an id of its own (rollout:<profile>:<UTC yyyymmdd-hhmmss>); prints its id and Web UI link. One rollout per profile runs at a time (lock workflow profile-lock:<profile>)',
        )
        .requiredOption('-f, --file <spec.yaml>', 'rollout spec')
        .option('--profiles <dir>', profilesOptionHelp())
        .option(
          '--registry',
          'take the revisions from the profile registry (registry:<profile>) instead of the signed files',
        )
        .option(
          '--key <key>',
          'idempotency key: a start with the same key and spec returns the rollout it started, running or finished (another spec: refused)',
        )
        .option(
          '--watch',
          'watch the rollout until it ends; exit 0 only if it completed with every device at the target',
        )
        .option(
          '--wait',
          'wait for the rollout to finish without drawing; exit 0 only if it completed with every device at the target; a pause is printed with the commands to resume or abort',
        )
        .option('--exit-on-pause', 'with --wait: stop waiting and exit 1 when the rollout pauses')
        .option('--interval <ms>', 'with --watch or --wait: poll interval', parseInterval, 1000)
        .option('--json', 'print {rolloutId, runId, url, existing} as JSON')
        .option(
          '--identity-key <key file>',
          "sign the start with your own key (a `wavegate keygen` file, mode 0600) pinned in the profile's approvers.yaml: the starter the two-person rule knows (required by approval.notBy: starter)",
        ),
    ),
  );
  withTrailOptions(start).action(action(runStart));
}

/** `wavegate start`: the rollout started (or, with its key, joined), then watched or waited for when asked. */
async function runStart(opts: StartFlags): Promise<number | undefined> {
  // A key that could not be stored and searched for is refused before anything is read.
  if (opts.key !== undefined) checkIdempotencyKey(opts.key);
  const identity = opts.identityKey === undefined ? undefined : readSigningKeyFile('--identity-key', opts.identityKey);
  // The CLI reads and validates the inventory (a file, or --inventory-url); the workers get it through the membership entity.
  const read = await readInventoryFlags(opts);
  const request = {
    specPath: opts.file,
    inventoryPath: read.inventoryPath,
    inventory: read.inventory,
    profilesRoot: resolveProfilesRoot({ flag: opts.profiles }).dir,
    startedBy: operatorName(),
  };
  // From files, bad input is refused before Temporal is contacted at all.
  const fromFiles = opts.registry ? undefined : prepareRollout(request);
  if (fromFiles) checkStarterKey(fromFiles, identity);
  const settings = resolveConnectionSettings(opts);
  return withClient(settings, async (client) => {
    const input = fromFiles ?? (await prepareRollout({ ...request, client }));
    checkStarterKey(input, identity);
    // A retried start with its key returns the rollout it started (running or finished) before any
    // refusal that rollout itself would cause; the membership is part of what "the same spec" means.
    const keyed =
      opts.key !== undefined
        ? await withMembership(client, settings.taskQueue, input, read, input.startedBy)
        : undefined;
    const joined = keyed && opts.key !== undefined ? await rolloutOfKey(client, opts.key, keyed) : undefined;
    const { handle, runId, existing } =
      joined ??
      (await startChecked(client, settings.taskQueue, input, read, keyed, {
        ...opts,
        ...(identity ? { signStart: (rolloutId: string) => startStatement(identity, rolloutId) } : {}),
      }));
    const url = workflowUrl(settings.uiUrl, settings.namespace, handle.workflowId);
    if (opts.json) console.log(JSON.stringify({ rolloutId: handle.workflowId, runId, url, existing }));
    else {
      console.log(
        `rollout ${handle.workflowId} ${existing ? 'already started with this key (same spec): returning it' : 'started'}`,
      );
      console.log(`Web UI: ${url}`);
    }
    if (opts.watch)
      return printEnding(
        await watchRollout(client, handle.workflowId, { ...watchOptions(opts.interval), runId }),
        runId,
        opts,
      );
    if (!opts.wait) return;
    return printEnding(
      await watchRollout(client, handle.workflowId, { ...waitOptions(opts.interval, !!opts.exitOnPause), runId }),
      runId,
      opts,
    );
  });
}

function registerStatus(program: Command): void {
  withTemporalOptions(
    withTrailOptions(
      program
        .command('status <id>')
        .description(
          'Per-device states, phases, counts and controls of a rollout. Exit 0 only when it completed with every device it was for at the target; 1 otherwise (also while it runs or is paused)',
        )
        .option(
          '--run <runId>',
          'an earlier run of a rollout id started before ids were per rollout (`rollout:<profile>`; `wavegate list --json` shows the runs)',
        )
        .option(
          '--device <id>',
          "one device's state and why (a large rollout keeps its devices' records in its slices: read from there)",
        )
        .option(
          '--devices',
          'every device with a record, read from the slices too (a large rollout lists none by default)',
        )
        .option('--json', 'print JSON'),
    ),
  ).action(action(runStatus));
}

/** `wavegate status`: one device, every device, or the rollout with its outcome and the exit code it means. */
async function runStatus(
  id: string,
  opts: TemporalFlags & TrailFlags & { run?: string; json?: boolean; device?: string; devices?: boolean },
): Promise<number> {
  return withClient(resolveConnectionSettings(opts), async (client) => {
    const status = await queryStatus(client, id, opts.run);
    if (opts.device !== undefined) return printDevice(client, status, opts.device, !!opts.json);
    const full = opts.devices ? { ...status, devices: await deviceRecords(client, status) } : status;
    if (opts.json) console.log(JSON.stringify({ ...full, eta: estimateRollout(full, Date.now()) }, null, 2));
    else {
      printStatus(full);
      // The deciding gate's verdict, when a gate failed or was inconclusive: from the trail where it can be read.
      const gated = full.phases.some((p) => p.stage === 'failed' || p.stage === 'inconclusive');
      const trail = gated ? await readTrail(id, opts.run, opts) : {};
      for (const line of gateVerdictLines(full, trail, id)) console.log(`  ${line}`);
      console.log(`  outcome: ${rolloutOutcome(status).summary} — exit ${outcomeCode(status)}`);
    }
    return outcomeCode(status);
  });
}

function registerWatch(program: Command): void {
  withTemporalOptions(
    withTrailOptions(
      program
        .command('watch <id>')
        .description(
          'Live per-phase progress and device table (redrawn in place on a terminal); exit 0 when the rollout completed with every device it was for at the target, 1 otherwise',
        )
        .option('--interval <ms>', 'poll interval', parseInterval, 1000)
        .option('--json', 'print the final status as JSON instead of drawing'),
    ),
  ).action(action(runWatch));
}

/** `wavegate watch`: drawn until the rollout ends, or (--json) only its final status on stdout. */
async function runWatch(id: string, opts: TemporalFlags & TrailFlags & { interval: number; json?: boolean }) {
  return withClient(resolveConnectionSettings(opts), async (client) => {
    // With --json stdout carries only the final status: a pause is said on stderr.
    const quiet: WatchOptions = {
      ...watchOptions(opts.interval),
      tty: false,
      write: () => {},
      onPause: (s) => console.error(pauseLine(s)),
      onClosing: (line) => console.error(line),
    };
    const final = await watchRollout(client, id, opts.json ? quiet : watchOptions(opts.interval));
    if (opts.json) {
      console.log(JSON.stringify(final, null, 2));
      return outcomeCode(final);
    }
    return printEnding(final, undefined, opts);
  });
}

function registerList(program: Command): void {
  withTemporalOptions(
    program
      .command('list')
      .description(
        'Rollouts and nightly canaries, newest first, from Temporal visibility (search attributes WavegateProfile, WavegateState)',
      )
      .option('--profile <name>', 'only this profile (WavegateProfile)')
      .option(
        '--state <state>',
        'only this state (WavegateState): running, paused, completed, rolled-back, aborted, cancelled, failed',
      )
      .option('--limit <n>', 'at most this many', (v) => Number(v), 50)
      .option('--json', 'print JSON'),
  ).action(action(runList));
}

/** `wavegate list`: the rollouts and canaries visibility finds, as JSON or a table. */
async function runList(opts: TemporalFlags & { profile?: string; state?: string; limit: number; json?: boolean }) {
  const settings = resolveConnectionSettings(opts);
  return withClient(settings, async (client) => {
    const rows = await listRollouts(client, { profile: opts.profile, state: opts.state, limit: opts.limit });
    if (opts.json) {
      console.log(JSON.stringify(rows, null, 2));
      return;
    }
    const table = [['ID', 'TYPE', 'PROFILE', 'STATE', 'PHASE', 'REV', 'VERDICT', 'STARTED', 'TEMPORAL']];
    for (const r of rows) {
      table.push([
        r.workflowId,
        r.type === 'rolloutWorkflow' ? 'rollout' : 'nightly',
        r.profile ?? '-',
        r.state ?? '-',
        r.phase ?? '-',
        r.revision === undefined ? '-' : String(r.revision),
        r.verdict ?? '-',
        r.startTime.slice(0, 19),
        r.status,
      ]);
    }
    const widths = table[0]!.map((_, i) => Math.max(...table.map((row) => row[i]!.length)));
    for (const row of table)
      console.log(
        row
          .map((cell, i) => cell.padEnd(widths[i]!))
          .join('  ')
          .trimEnd(),
      );
    if (!rows.length) console.log('(no rollouts match)');
  });
}

/** A control command: its name (the update it sends), its description, and any options of its own. */
interface ControlCommand {
  name: ControlName;
  describe: string;
  extra?: (cmd: Command) => Command;
}

const CONTROLS: ControlCommand[] = [
  { name: 'pause', describe: 'Pause a running rollout (it finishes the devices in flight, then holds)' },
  { name: 'resume', describe: 'Resume a paused rollout' },
  {
    name: 'approve',
    describe: 'Approve the phase waiting at a manual gate',
    extra: (cmd) =>
      cmd
        .option('--phase <index|name>', 'the phase being approved (default: the one waiting)')
        .option(
          '--key <key file>',
          "sign the approval with your own key (a `wavegate keygen` file, mode 0600) pinned in the profile's approvers.yaml: how an approval counts under a spec's approval (the two-person rule)",
        ),
  },
  {
    name: 'abort',
    describe: 'Abort a rollout; by default every device it changed is put back (--no-rollback keeps them)',
    extra: (cmd) =>
      cmd
        .option('--rollback', 'put back every device this rollout changed (default)')
        .option('--no-rollback', 'leave the changed devices as they are'),
  },
  {
    name: 'override-audit',
    describe:
      'Carry on past an audit trail that cannot be made whole (the rollout holds until it is): writes an audit.override record that starts a new segment from the last good record; --reason is required',
  },
];

type ControlFlags = TemporalFlags & {
  reason?: string;
  json?: boolean;
  rollback?: boolean;
  phase?: string;
  key?: string;
};

function registerControl(program: Command, c: ControlCommand): void {
  let cmd = program
    .command(`${c.name} <id>`)
    .description(
      `${c.describe}. Sent as an update: an invalid transition is refused at once with the current state (exit 2)`,
    );
  cmd = cmd
    .option('--reason <text>', 'why (recorded in the audit trail with your user name)')
    .option('--json', 'print the rollout status after the control as JSON');
  if (c.extra) cmd = c.extra(cmd);
  withTemporalOptions(cmd).action(action((id: string, opts: ControlFlags) => runControl(c.name, id, opts)));
}

/** A control sent as an update; the rollout's answer printed (a refusal is exit 2, from sendControl). */
async function runControl(name: ControlName, id: string, opts: ControlFlags): Promise<void> {
  if (name === 'override-audit' && !opts.reason?.trim())
    throw new WavegateError(
      'INVALID_INPUT',
      '--reason: an audit override must say why (it is recorded in the new segment)',
      {
        field: '--reason',
      },
    );
  // A key file that cannot sign is refused before Temporal is asked (exit 2).
  const pair = name === 'approve' && opts.key !== undefined ? readSigningKeyFile('--key', opts.key) : undefined;
  const control: ControlBase & { rollback?: boolean; phase?: number | string; statement?: SignedStatement } = {
    by: operatorName(),
    ...(opts.reason ? { reason: opts.reason } : {}),
  };
  if (name === 'abort') control.rollback = opts.rollback !== false;
  if (name === 'approve' && opts.phase !== undefined)
    control.phase = /^\d+$/.test(opts.phase) ? Number(opts.phase) : opts.phase;
  return withClient(resolveConnectionSettings(opts), async (client) => {
    if (pair) control.statement = await signedApproval(client, id, pair, opts.reason);
    const status = await sendControl(client, id, name, control);
    if (opts.json) console.log(JSON.stringify(status, null, 2));
    else console.log(`${describeControl(name, status, control)} (${id}, by ${control.by})`);
  });
}
