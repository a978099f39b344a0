import { resolve } from 'node:path';
import type { Command } from 'commander';
import {
  ScheduleAlreadyRunning,
  ScheduleNotFoundError,
  ScheduleOverlapPolicy,
  type Client,
  type ScheduleDescription,
  type ScheduleHandle,
} from '@temporalio/client';
import { WavegateError } from '../../core/errors';
import { parseDurationMs } from '../../core/duration';
import { WavegateProfile, WavegateVerdict } from '../../contracts/search-attributes';
import type { NightlyCanaryInput, NightlyCanaryResult } from '../../workflows/canary';
import { canarySpec } from '../../intake/canary-spec';
import { loadRolloutInventory } from '../../intake/inventory';
import { loadProfile } from '../../intake/profile';
import { checkMetricsPolicy } from '../../intake/secret-policy';
import { profilesOptionHelp, resolveProfilesRoot } from '../../intake/profiles-root';
import { resolveConnectionSettings, type ConnectionSettings, type TemporalFlags } from '../../workers/connection';
import { retryWait, withClient, withTemporalOptions, workflowUrl } from '../client';
import { action, EXIT_FAILED, EXIT_OK } from '../run';
import { operatorName } from './rollout';

/**
 * Nightly canaries on Temporal Schedules: a calendar spec at a time of day in a time zone,
 * overlap policy SKIP (a canary still running when the next is due is not doubled), and an explicit
 * catch-up window (a server that was down at 02:00 still runs the canary if it is back within it).
 */

const SCHEDULE_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

function parseAt(text: string): { hour: number; minute: number } {
  const match = /^([01]\d|2[0-3]):([0-5]\d)$/.exec(text);
  if (!match) throw new WavegateError('INVALID_INPUT', `--at ${JSON.stringify(text)}: must be HH:MM (24h), e.g. 02:00`);
  return { hour: Number(match[1]), minute: Number(match[2]) };
}

function checkTimeZone(zone: string): string {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: zone });
    return zone;
  } catch {
    throw new WavegateError(
      'INVALID_INPUT',
      `--tz ${JSON.stringify(zone)}: not an IANA time zone such as "UTC" or "Europe/Berlin"`,
    );
  }
}

function checkName(name: string): string {
  if (!SCHEDULE_ID.test(name))
    throw new WavegateError(
      'INVALID_INPUT',
      `schedule name ${JSON.stringify(name)}: must be 1-128 letters, digits, ".", "_" or "-"`,
    );
  return name;
}

async function scheduleCall<T>(name: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof ScheduleNotFoundError) throw new WavegateError('NOT_FOUND', `no schedule named "${name}"`);
    throw err;
  }
}

export interface ScheduleRun {
  workflowId: string;
  runId: string;
  scheduledAt: string;
  takenAt: string;
  /** Temporal's status of the run. */
  status: string;
  verdict?: string;
  result?: NightlyCanaryResult;
}

export interface ScheduleReport {
  name: string;
  profile?: string;
  paused: boolean;
  note?: string;
  calendar: string;
  overlap: string;
  catchupWindowMs?: number;
  nextActionTimes: string[];
  actionsTaken: number;
  recentActions: ScheduleRun[];
  lastVerdict?: string;
}

function calendarText(desc: ScheduleDescription): string {
  const cal = desc.spec.calendars?.[0];
  if (!cal) return '(no calendar)';
  const pick = (v: unknown) => {
    const first = Array.isArray(v) ? v[0] : v;
    return typeof first === 'object' && first !== null && 'start' in first
      ? (first as { start: number }).start
      : Number(first ?? 0);
  };
  return `${String(pick(cal.hour)).padStart(2, '0')}:${String(pick(cal.minute)).padStart(2, '0')} ${desc.spec.timezone ?? 'UTC'}`;
}

/** The schedule with its recent runs, each with its verdict (search attribute, or the result once closed). */
export async function describeSchedule(client: Client, name: string): Promise<ScheduleReport> {
  const handle = client.schedule.getHandle(name);
  const desc = await scheduleCall(name, () => handle.describe());
  const runs: ScheduleRun[] = [];
  for (const a of desc.info.recentActions) {
    if (a.action.type !== 'startWorkflow') continue;
    const { workflowId, firstExecutionRunId: runId } = a.action.workflow;
    const wfHandle = client.workflow.getHandle(workflowId, runId);
    const run: ScheduleRun = {
      workflowId,
      runId,
      scheduledAt: a.scheduledAt.toISOString(),
      takenAt: a.takenAt.toISOString(),
      status: 'UNKNOWN',
    };
    try {
      const d = await wfHandle.describe();
      run.status = d.status.name;
      const verdict = d.typedSearchAttributes.get(WavegateVerdict);
      if (verdict) run.verdict = verdict;
      if (d.status.name === 'COMPLETED') {
        run.result = (await wfHandle.result()) as NightlyCanaryResult;
        run.verdict = run.result.verdict;
      }
    } catch {
      // The run may have aged out of retention; its row still shows when it ran.
    }
    runs.push(run);
  }
  const action = desc.action.type === 'startWorkflow' ? desc.action : undefined;
  const input = action?.args?.[0] as NightlyCanaryInput | undefined;
  return {
    name,
    ...(input?.profile ? { profile: input.profile } : {}),
    paused: desc.state.paused,
    ...(desc.state.note ? { note: desc.state.note } : {}),
    calendar: calendarText(desc),
    overlap: String(desc.policies.overlap),
    ...(desc.policies.catchupWindow !== undefined ? { catchupWindowMs: Number(desc.policies.catchupWindow) } : {}),
    nextActionTimes: desc.info.nextActionTimes.map((t) => t.toISOString()),
    actionsTaken: desc.info.numActionsTaken,
    recentActions: runs,
    ...(runs.filter((r) => r.verdict).at(-1)?.verdict
      ? { lastVerdict: runs.filter((r) => r.verdict).at(-1)!.verdict }
      : {}),
  };
}

function printReport(r: ScheduleReport, settings: ConnectionSettings): void {
  console.log(
    `schedule ${r.name}: nightly canary of ${r.profile ?? '?'} at ${r.calendar}, ${r.paused ? `PAUSED${r.note ? ` (${r.note})` : ''}` : 'active'}`,
  );
  console.log(
    `  overlap ${r.overlap}, catch-up window ${r.catchupWindowMs === undefined ? '-' : `${Math.round(r.catchupWindowMs / 60_000)} min`}, ${r.actionsTaken} actions taken`,
  );
  console.log(`  next: ${r.nextActionTimes.slice(0, 3).join(', ') || '-'}`);
  console.log(`  last verdict: ${r.lastVerdict ?? '-'}`);
  console.log('  recent actions:');
  for (const a of r.recentActions) {
    console.log(
      `    ${a.takenAt}  ${a.workflowId}  ${a.status}  verdict ${a.verdict ?? '-'}${a.result ? `  (${a.result.reason})` : ''}`,
    );
    console.log(`      ${workflowUrl(settings.uiUrl, settings.namespace, a.workflowId)}`);
  }
  if (!r.recentActions.length) console.log('    (none yet)');
}

/** Wait for the action a trigger started (a new entry in recentActions) and its result. */
async function waitForTriggered(
  client: Client,
  handle: ScheduleHandle,
  before: number,
  timeoutMs: number,
): Promise<NightlyCanaryResult> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    // Each poll outlives a transient failure (a server restart, a cut call), said once on stderr.
    const desc = await retryWait(`describe of schedule ${handle.scheduleId}`, () => handle.describe());
    if (desc.info.numActionsTaken > before) {
      const last = desc.info.recentActions.at(-1);
      if (last?.action.type === 'startWorkflow') {
        const { workflowId, firstExecutionRunId } = last.action.workflow;
        return (await retryWait(`result of ${workflowId}`, () =>
          client.workflow.getHandle(workflowId, firstExecutionRunId).result(),
        )) as NightlyCanaryResult;
      }
    }
    if (Date.now() > deadline)
      throw new WavegateError(
        'FAILED',
        `schedule ${handle.scheduleId}: the triggered action did not start within ${timeoutMs / 1000}s (overlap policy SKIP: is a canary still running?)`,
      );
    await new Promise((r) => setTimeout(r, 500));
  }
}

const verdictCode = (verdict: string) => (verdict === 'pass' || verdict === 'nothing-to-test' ? EXIT_OK : EXIT_FAILED);

/** The `schedule` group and its commands, in the order the help lists them. */
export function register(program: Command): void {
  const schedule = program.command('schedule').description('Nightly canaries on Temporal Schedules');
  const commands = [
    registerCreate,
    registerList,
    registerDescribe,
    (group: Command) => registerPauseVerb(group, 'pause'),
    (group: Command) => registerPauseVerb(group, 'unpause'),
    registerTrigger,
    registerDelete,
  ];
  for (const add of commands) add(schedule);
}

type CreateFlags = TemporalFlags & {
  profile: string;
  inventory: string;
  at: string;
  tz: string;
  keep?: boolean;
  file?: string;
  profiles?: string;
  catchupWindow: string;
  json?: boolean;
};

function registerCreate(schedule: Command): void {
  withTemporalOptions(
    schedule
      .command('create <name>')
      .description('Create a schedule that runs the nightly canary of a profile every day at a time in a time zone')
      .requiredOption('--profile <name>', 'the profile')
      .requiredOption('--inventory <fleet.yaml>', 'the inventory (the worker reads this path)')
      .requiredOption('--at <HH:MM>', 'time of day')
      .option('--tz <zone>', 'IANA time zone', 'UTC')
      .option('--keep', 'leave the canary on the new revision after the verdict')
      .option(
        '-f, --file <canary-spec.yaml>',
        'rollout spec whose first phase is the canary (revisions are filled in each night)',
      )
      .option('--profiles <dir>', `${profilesOptionHelp()}; the worker reads this path`)
      .option('--catchup-window <duration>', 'how late a missed run may still start', '1h')
      .option('--json', 'print the created schedule as JSON'),
  ).action(action(runCreate));
}

/** What `schedule create` checks before contacting Temporal (bad input: exit 2), and the canary's input it makes. */
function createRequest(name: string, opts: CreateFlags) {
  checkName(name);
  const at = parseAt(opts.at);
  const timezone = checkTimeZone(opts.tz);
  const profilesRoot = resolveProfilesRoot({ flag: opts.profiles }).dir;
  const { profile, layout } = loadProfile(profilesRoot, opts.profile, '--profile');
  // The canary's error-rate check sends the profile's metrics token: refused here as `plan` refuses it.
  checkMetricsPolicy(profile, layout.profileFile);
  const inventoryPath = resolve(opts.inventory);
  loadRolloutInventory(inventoryPath);
  const catchupMs = parseDurationMs(opts.catchupWindow);
  if (catchupMs === undefined || catchupMs < 10_000)
    throw new WavegateError(
      'INVALID_INPUT',
      `--catchup-window ${JSON.stringify(opts.catchupWindow)}: must be a duration of at least 10s, e.g. "1h"`,
    );
  const specPath = opts.file ? resolve(opts.file) : undefined;
  // Validate now with placeholder revisions: the real ones are filled in each night.
  canarySpec({ profile, ...(specPath ? { specPath } : {}), fromRevision: 1, toRevision: 2 });
  const input: NightlyCanaryInput = {
    profile: opts.profile,
    inventoryPath,
    profilesDir: profilesRoot,
    ...(specPath ? { specPath } : {}),
    keep: !!opts.keep,
    createdBy: operatorName(),
  };
  return { at, timezone, catchupMs, input };
}

/** `schedule create`: the schedule of the nightly canary, created once (a name taken: CONFLICT). */
async function runCreate(name: string, opts: CreateFlags): Promise<void> {
  const { at, timezone, catchupMs, input } = createRequest(name, opts);
  const settings = resolveConnectionSettings(opts);
  return withClient(settings, async (client) => {
    try {
      await client.schedule.create({
        scheduleId: name,
        spec: { calendars: [{ hour: at.hour, minute: at.minute }], timezone },
        action: {
          type: 'startWorkflow',
          workflowType: 'nightlyCanaryWorkflow',
          workflowId: `nightly-canary:${opts.profile}`,
          taskQueue: settings.taskQueue,
          args: [input],
          typedSearchAttributes: [{ key: WavegateProfile, value: opts.profile }],
          staticSummary: `nightly canary of ${opts.profile}${opts.keep ? ' (keep)' : ''}`,
        },
        policies: { overlap: ScheduleOverlapPolicy.SKIP, catchupWindow: catchupMs },
        memo: { wavegateProfile: opts.profile, createdBy: input.createdBy },
        state: { note: `created by ${input.createdBy}` },
      });
    } catch (err) {
      if (err instanceof ScheduleAlreadyRunning)
        throw new WavegateError(
          'CONFLICT',
          `a schedule named "${name}" already exists; delete it first or pick another name`,
        );
      throw err;
    }
    const report = await describeSchedule(client, name);
    if (opts.json) console.log(JSON.stringify(report, null, 2));
    else
      console.log(
        `schedule ${name} created: nightly canary of ${opts.profile} at ${opts.at} ${timezone}${opts.keep ? ' (keep the canary)' : ''}; next ${report.nextActionTimes[0] ?? '-'}`,
      );
  });
}

function registerList(schedule: Command): void {
  withTemporalOptions(
    schedule.command('list').description('Schedules with their next run').option('--json', 'print JSON'),
  ).action(action(runList));
}

/** `schedule list`: every schedule by name, with its next run and note. */
async function runList(opts: TemporalFlags & { json?: boolean }): Promise<void> {
  const settings = resolveConnectionSettings(opts);
  return withClient(settings, async (client) => {
    const rows: Array<{ name: string; workflowType?: string; paused: boolean; next?: string; note?: string }> = [];
    for await (const s of client.schedule.list()) {
      rows.push({
        name: s.scheduleId,
        ...(s.action?.type === 'startWorkflow' ? { workflowType: s.action.workflowType } : {}),
        paused: s.state.paused,
        ...(s.info?.nextActionTimes?.[0] ? { next: s.info.nextActionTimes[0].toISOString() } : {}),
        ...(s.state.note ? { note: s.state.note } : {}),
      });
    }
    rows.sort((a, b) => a.name.localeCompare(b.name));
    if (opts.json) console.log(JSON.stringify(rows, null, 2));
    else {
      for (const r of rows)
        console.log(
          `${r.name.padEnd(24)} ${(r.workflowType ?? '-').padEnd(24)} ${r.paused ? 'paused' : 'active'}  next ${r.next ?? '-'}${r.note ? `  ${r.note}` : ''}`,
        );
      if (!rows.length) console.log('(no schedules)');
    }
  });
}

function registerDescribe(schedule: Command): void {
  withTemporalOptions(
    schedule
      .command('describe <name>')
      .description('A schedule: calendar, policies, next runs, recent actions and the last canary verdict')
      .option('--json', 'print JSON'),
  ).action(
    action(async (name: string, opts: TemporalFlags & { json?: boolean }) => {
      const settings = resolveConnectionSettings(opts);
      return withClient(settings, async (client) => {
        const report = await describeSchedule(client, name);
        if (opts.json) console.log(JSON.stringify(report, null, 2));
        else printReport(report, settings);
      });
    }),
  );
}

/** `schedule pause` and `schedule unpause`: refused when the schedule is so already. */
function registerPauseVerb(schedule: Command, verb: 'pause' | 'unpause'): void {
  withTemporalOptions(
    schedule
      .command(`${verb} <name>`)
      .description(verb === 'pause' ? 'Pause a schedule (no runs until unpaused)' : 'Unpause a schedule')
      .option('--reason <text>', 'why (kept as the schedule note with your user name)'),
  ).action(
    action(async (name: string, opts: TemporalFlags & { reason?: string }) =>
      withClient(resolveConnectionSettings(opts), async (client) => {
        const handle = client.schedule.getHandle(name);
        const desc = await scheduleCall(name, () => handle.describe());
        if (desc.state.paused === (verb === 'pause'))
          throw new WavegateError(
            'INVALID_STATE',
            `schedule ${name} is already ${verb === 'pause' ? 'paused' : 'active'}`,
          );
        const note = `${verb}d by ${operatorName()}${opts.reason ? `: ${opts.reason}` : ''}`;
        await scheduleCall(name, () => (verb === 'pause' ? handle.pause(note) : handle.unpause(note)));
        console.log(`schedule ${name} ${verb}d (${note})`);
      }),
    ),
  );
}

function registerTrigger(schedule: Command): void {
  withTemporalOptions(
    schedule
      .command('trigger <name>')
      .description(
        'Run the scheduled canary now (overlap policy SKIP applies); with --wait, exit 0 for pass or nothing-to-test, 1 otherwise',
      )
      .option('--wait', 'wait for the run and print its verdict')
      .option('--timeout <duration>', 'with --wait: how long to wait for the run to start', '1m')
      .option('--json', 'with --wait: print the result as JSON'),
  ).action(
    action(async (name: string, opts: TemporalFlags & { wait?: boolean; timeout: string; json?: boolean }) =>
      withClient(resolveConnectionSettings(opts), async (client) => {
        const handle = client.schedule.getHandle(name);
        const before = (await scheduleCall(name, () => handle.describe())).info.numActionsTaken;
        await scheduleCall(name, () => handle.trigger());
        if (!opts.wait) {
          console.log(`schedule ${name} triggered`);
          return;
        }
        const result = await waitForTriggered(client, handle, before, parseDurationMs(opts.timeout) ?? 60_000);
        if (opts.json) console.log(JSON.stringify(result, null, 2));
        else console.log(`schedule ${name}: canary verdict ${result.verdict} — ${result.reason}`);
        return verdictCode(result.verdict);
      }),
    ),
  );
}

function registerDelete(schedule: Command): void {
  withTemporalOptions(
    schedule.command('delete <name>').description('Delete a schedule (runs already started are not affected)'),
  ).action(
    action(async (name: string, opts: TemporalFlags) =>
      withClient(resolveConnectionSettings(opts), async (client) => {
        await scheduleCall(name, () => client.schedule.getHandle(name).delete());
        console.log(`schedule ${name} deleted`);
      }),
    ),
  );
}
