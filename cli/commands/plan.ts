import { connect } from 'node:net';
import { Option, type Command } from 'commander';
import { WavegateError } from '../../core/errors';
import { runRegistrationGates } from '../../core/gates';
import type { Inventory } from '../../core/inventory';
import { describeSize, planPhases, type Plan, type PlanInput } from '../../core/planner';
import { parseProfile, type Profile, type Revision } from '../../core/revision';
import type { RolloutInput } from '../../core/rollout/input';
import type { RolloutSpec } from '../../core/spec';
import { formatDurationMs } from '../../core/duration';
import { readDocument } from '../../intake/files';
import { readInventory } from '../../intake/inventory';
import { plannerInputOf } from '../../core/rollout/plan';
import { markOf, verdictStanding } from '../../core/node-down';
import { readVerdicts, verdictsPathFor } from '../../intake/node-down';
import { planDevices } from '../../intake/planner-input';
import { dependencyScopeNotes, PLAN_CYCLE_NOTE } from '../../intake/dependencies';
import { loadRolloutContent, payloadNotHere, readSpec, type RolloutContent } from '../../intake/prepare';
import type { Device } from '../../core/inventory';
import { sshFilesOf, unpinnedDevices } from '../../core/ssh-files';
import { withTemporalOptions } from '../temporal-options';
import type { TemporalFlags } from '../../workers/connection';
import { hasProfile, loadProfile } from '../../intake/profile';
import { profilesOptionHelp, resolveProfilesRoot } from '../../intake/profiles-root';
import { assembleRolloutInput, poolBudgetsOf, scopedDevices } from '../../intake/rollout-input';
import { action, EXIT_OK } from '../run';
import { checkInventoryFlags, readInventoryFlags, type InventoryFlags } from '../membership-client';

// Kept for test/unit/core/corpus.test.ts, which reads inventories through this name.

/** Current revision markers for a plan: a YAML/JSON mapping of device id → revision number. */
function loadMarkers(path: string, inventory: Inventory): Map<string, number> {
  const doc = readDocument(path);
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) {
    throw new WavegateError(
      'INVALID_INPUT',
      `${path}: invalid\n  (root): must be a mapping of device id to revision number`,
      { source: path },
    );
  }
  const known = new Set(inventory.devices.map((d) => d.id));
  const markers = new Map<string, number>();
  const problems: string[] = [];
  for (const [id, value] of Object.entries(doc)) {
    if (!known.has(id)) problems.push(`  ${id}: no such device in the inventory (got ${JSON.stringify(value)})`);
    else if (typeof value !== 'number' || !Number.isInteger(value) || value < 0)
      problems.push(`  ${id}: must be a revision number (got ${JSON.stringify(value)})`);
    else markers.set(id, value);
  }
  if (problems.length)
    throw new WavegateError('INVALID_INPUT', `${path}: invalid\n${problems.join('\n')}`, { source: path });
  return markers;
}

export interface PlanOptions {
  file: string;
  inventory: string;
  /** The inventory already read (`--inventory-url`); `inventory` then names its URL. */
  fetched?: Inventory;
  rolloutId?: string;
  /** A profile file outside any profiles directory: a what-if plan over its scope, no revisions read. */
  profile?: string;
  /** `--profiles` (else `$WAVEGATE_PROFILES`, else ./profiles: intake/profiles-root.ts). */
  profiles?: string;
  /** `--profiles-dir`: the older name of `--profiles`, hidden and deprecated (the name commander gives that flag). */
  profilesDir?: string;
  markers?: string;
  risk?: string;
  json?: boolean;
  /** `--what-if`: no profile directory read; every device of the inventory in scope. */
  whatIf?: boolean;
}

export interface PlanReport {
  plan: Plan;
  spec: RolloutSpec;
  inventory: Inventory;
  scopeNote: string;
  risk: 'risky' | 'safe';
  /** What the registration gates and the inputs say about the target revision. */
  revisionNotes: string[];
  /**
   * The input `start` would start the rollout with, built by the same intake functions from the same
   * files (signed envelopes verified against the profile's pins). Absent for a what-if plan: no
   * profile directory, or `--profile <file>`.
   */
  input?: RolloutInput;
  /** What the planner was given: for `input`, exactly what the rollout workflow gives it at its snapshot. */
  plannerInput: PlanInput;
  /** The inventory's devices in the rollout's scope (what a worker is asked to log in to). */
  inScope: Device[];
  /** What a worker checked of what only it can see, or what could not be checked and why (the CLI action fills it). */
  workerCheck?: string;
}

/** Where the plan's profile comes from: the profile directory `start` reads, a what-if profile file, or none. */
function planProfile(
  opts: PlanOptions,
  spec: RolloutSpec,
): { kind: 'directory'; profilesRoot: string } | { kind: 'file'; profile: Profile } | { kind: 'none' } {
  const profilesRoot = resolveProfilesRoot({ flag: opts.profiles ?? opts.profilesDir }).dir;
  if (opts.profile) {
    const profile = parseProfile(readDocument(opts.profile), opts.profile);
    if (profile.name !== spec.profile) {
      throw new WavegateError(
        'INVALID_INPUT',
        `${opts.file}: invalid\n  rollout.profile: the profile file ${opts.profile} is "${profile.name}" (got ${JSON.stringify(spec.profile)})`,
        { source: opts.file },
      );
    }
    return { kind: 'file', profile };
  }
  if (opts.whatIf) return { kind: 'none' };
  // What start reads, or start's own refusal: a plan never plans checks it did not read.
  if (!hasProfile(profilesRoot, spec.profile)) {
    try {
      loadProfile(profilesRoot, spec.profile, `${opts.file}: rollout.profile`);
    } catch (err) {
      if (err instanceof WavegateError)
        throw new WavegateError(
          err.code,
          `${err.message}; start refuses it too. Name the profiles root with --profiles <dir> (or $WAVEGATE_PROFILES), or plan over the inventory alone with --what-if`,
          err.details,
        );
      throw err;
    }
  }
  return { kind: 'directory', profilesRoot };
}

function gateNotes(revision: Revision, profile: Profile, inventory: Inventory): string[] {
  const notes: string[] = [];
  const gates = runRegistrationGates({ revision, scope: profile.scope, devices: inventory.devices });
  for (const b of gates.blocked)
    notes.push(
      `r${revision.revision}: gate "${b.gate}" would refuse registration (${b.reason}): ${b.message} [escape: ${b.flag}]`,
    );
  for (const n of gates.notes) notes.push(`r${revision.revision}: ${n}`);
  if (!gates.provability.provable)
    notes.push(`r${revision.revision} is not provable: its devices can only reach "claimed", never "applied"`);
  return notes;
}

/**
 * Validate everything and plan; throws INVALID_INPUT (exit 2) on any bad input. Never contacts
 * Temporal. With the profile's directory present, the rollout input is the one `start` would build
 * (same functions, same files, same verification), and the planner is given what the workflow gives it.
 */
export function makePlan(opts: PlanOptions): PlanReport {
  const spec = readSpec(opts.file);
  const { inventory, format } = opts.fetched
    ? { inventory: opts.fetched, format: 'wavegate' as const }
    : readInventory(opts.inventory);
  const rolloutId = opts.rolloutId ?? `rollout:${spec.profile}`;
  const source = { specSource: opts.file, inventoryPath: opts.inventory };
  const where = planProfile(opts, spec);
  const revisionNotes: string[] = [];
  let input: RolloutInput | undefined;
  let content: RolloutContent | undefined;
  let profile: Profile | undefined;
  let scopeNote: string;
  if (where.kind === 'directory') {
    content = loadRolloutContent({ spec, specSource: opts.file, profilesRoot: where.profilesRoot });
    input = assembleRolloutInput({ ...content, ...source, inventory, startedBy: 'wavegate plan', rolloutId });
    profile = content.profile;
    scopeNote = `scope ${JSON.stringify(profile.scope)} from ${content.layout.profileFile}`;
    revisionNotes.push(...gateNotes(content.target.revision, profile, inventory));
    if (format === 'ansible')
      revisionNotes.push(
        `${opts.inventory} is an Ansible inventory: \`start\` refuses it (the worker reads wavegate inventories only)`,
      );
  } else if (where.kind === 'file') {
    profile = where.profile;
    scopeNote = `scope ${JSON.stringify(profile.scope)} from ${opts.profile} (what-if: revisions not read; start reads <profiles>/${spec.profile}/)`;
  } else {
    scopeNote =
      'what-if: no profile read, every device in the inventory is in scope (start reads <profiles>/' +
      spec.profile +
      '/)';
  }
  const inScope = scopedDevices(spec, inventory, profile, source);
  if (spec.after?.length) {
    // The profiles and revisions `after` names were checked with the content; a cycle needs the running rollouts.
    if (content)
      revisionNotes.push(
        ...dependencyScopeNotes(
          content.dependencies,
          inventory,
          inScope.map((d) => d.id),
        ),
      );
    else revisionNotes.push('rollout.after: not checked (a what-if plan reads no profile directory; start checks it)');
    revisionNotes.push(PLAN_CYCLE_NOTE);
  }
  let risk = input?.risk ?? 'risky';
  if (opts.risk !== undefined) {
    if (opts.risk !== 'risky' && opts.risk !== 'safe')
      throw new WavegateError('INVALID_INPUT', `--risk: must be "risky" or "safe" (got ${JSON.stringify(opts.risk)})`, {
        field: '--risk',
        value: opts.risk,
      });
    if (input && opts.risk !== input.risk)
      revisionNotes.push(`--risk ${opts.risk}: a what-if; start runs r${spec.toRevision} as ${input.risk}`);
    risk = opts.risk;
  }
  const unpinned = unpinnedDevices(inScope);
  if (unpinned.length)
    revisionNotes.push(
      `no host key pinned for ${unpinned.length} device(s) (${someIds(unpinned)}): neither ssh.hostKey nor ssh.knownHosts. The worker never trusts a key it was not given: it refuses to connect to them (host-key) until one is pinned (ssh.hostKey from \`ssh-keygen -lf\` on the host, or \`wavegate init\`)`,
    );
  if (content) {
    const notHere = payloadNotHere(content);
    if (notHere.length)
      revisionNotes.push(
        `payload files not in ${content.layout.dir}, so not checked here: ${notHere.join(', ')} (the worker's own copy is checked against the signed digest)`,
      );
  }
  const markers = opts.markers ? loadMarkers(opts.markers, inventory) : new Map<string, number>();
  // Node-down verdicts beside the inventory, as they stand now; plan runs no recheck (start's snapshot does).
  const verdictsPath = verdictsPathFor(opts.inventory);
  // An inventory read over HTTP has no verdicts file beside it.
  const verdicts = opts.fetched ? [] : readVerdicts(verdictsPath, { inventory: inventory.devices }).verdicts;
  const nodeDown = new Map(verdicts.map((v) => [v.device, markOf(verdictStanding(v, Date.now()))]));
  if (verdicts.length)
    revisionNotes.push(
      `node-down verdicts from ${verdictsPath}: ${[...nodeDown.values()].filter((m) => m.holds).length} hold, as of now without their rechecks (start's snapshot reruns them)`,
    );
  const planned = plannerInputOf(
    { rolloutId, spec, poolBudgets: input?.poolBudgets ?? poolBudgetsOf(spec, inventory), risk },
    planDevices(inScope, markers, nodeDown),
  );
  return {
    plan: planPhases(planned),
    spec,
    inventory,
    scopeNote,
    risk,
    revisionNotes,
    ...(input ? { input } : {}),
    plannerInput: planned,
    inScope,
  };
}

/** A list of ids a person can read: the first ten, and how many more. */
function someIds(ids: readonly string[]): string {
  return ids.length > 10 ? `${ids.slice(0, 10).join(', ')} and ${ids.length - 10} more` : ids.join(', ');
}

/** How long plan waits for a worker's answer: a plan is a quick look, start waits longer. */
const PLAN_PREFLIGHT_TIMEOUT_MS = 15_000;

/** What only the worker reads, said when no worker could be asked. */
function notChecked(why: string, devices: readonly Device[]): string {
  const files = sshFilesOf(devices);
  const named = [
    ...(files.keys.length ? [`ssh.key ${files.keys.join(', ')}`] : []),
    ...(files.knownHosts.length ? [`ssh.knownHosts ${files.knownHosts.map((k) => k.path).join(', ')}`] : []),
    ...(files.agent ? ["the worker's SSH agent (ssh.agent)"] : []),
  ];
  return `NOT checked (${why}): what only the worker reads — its pins (trust.yaml) and payload files under its profiles root${named.length ? `, ${named.join('; ')}` : ''}. start asks a worker before it starts anything (exit 2 on a refusal)`;
}

/** Why nothing accepts a TCP connection at `host:port` within 2 s, or undefined when something does. */
function tcpRefusal(address: string): Promise<string | undefined> {
  const colon = address.lastIndexOf(':');
  const host = address.slice(0, colon).replace(/^\[|\]$/g, '');
  const port = Number(address.slice(colon + 1));
  if (colon < 0 || !Number.isInteger(port)) return Promise.resolve(undefined); // the client says what is wrong
  return new Promise((resolve) => {
    const socket = connect({ host, port, timeout: 2_000 });
    const done = (why: string | undefined) => {
      socket.destroy();
      resolve(why);
    };
    socket.once('connect', () => done(undefined));
    socket.once('timeout', () => done('no answer within 2 s'));
    socket.once('error', (err: NodeJS.ErrnoException) => done(err.code ?? err.message));
  });
}

/**
 * What only the worker can see, checked through the same preflight `start` uses (cli/preflight.ts):
 * its pins, the signatures and payload files under its profiles root, the devices' SSH key and
 * known_hosts files. A refusal throws (exit 2), as start's does; no server or no worker is said, not
 * failed. The Temporal client is loaded only here: a plan that asks no worker stays light.
 */
async function checkOnWorker(input: RolloutInput, devices: Device[], flags: TemporalFlags): Promise<string> {
  const { resolveConnectionSettings } =
    require('../../workers/connection') as typeof import('../../workers/connection');
  const settings = resolveConnectionSettings(flags);
  const { connectClient, firstLineOf } = require('../client') as typeof import('../client');
  const { preflightRollout } = require('../preflight') as typeof import('../preflight');
  const where = `task queue "${settings.taskQueue}" at ${settings.address}`;
  // A port nothing listens on is said at once (the client's own connect retries for seconds).
  const refused = await tcpRefusal(settings.address);
  if (refused) return notChecked(`no Temporal server at ${settings.address}: ${refused}`, devices);
  let client: Awaited<ReturnType<typeof connectClient>>;
  try {
    client = await connectClient(settings);
  } catch (err) {
    if (err instanceof WavegateError && err.code === 'UNAVAILABLE')
      return notChecked(`no Temporal server answered at ${settings.address}`, devices);
    throw err;
  }
  try {
    let pollers = 0;
    try {
      const described = await client.workflowService.describeTaskQueue({
        namespace: settings.namespace,
        taskQueue: { name: settings.taskQueue },
        taskQueueType: 1, // workflow tasks: the preflight is a workflow
      });
      pollers = described.pollers?.length ?? 0;
    } catch (err) {
      return notChecked(`the server did not say who polls ${where}: ${firstLineOf(err)}`, devices);
    }
    if (pollers === 0) return notChecked(`no worker polls ${where}`, devices);
    try {
      const answer = await preflightRollout(client, settings.taskQueue, input, {
        devices,
        timeoutMs: PLAN_PREFLIGHT_TIMEOUT_MS,
      });
      const files = sshFilesOf(devices);
      const count = files.keys.length + files.knownHosts.length;
      return `checked by worker ${answer.worker} on ${where}: its pins, the signatures and payload files under its profiles root${answer.sshChecked ? `, ${count} SSH file(s) the devices name${files.agent ? ' and its SSH agent' : ''}` : ' (the SSH files not: a worker built before that check)'}`;
    } catch (err) {
      if (err instanceof WavegateError && err.code === 'UNAVAILABLE')
        return notChecked(`no worker on ${where} answered within ${PLAN_PREFLIGHT_TIMEOUT_MS / 1000} s`, devices);
      throw err;
    }
  } finally {
    await client.connection.close().catch(() => {});
  }
}

function gateText(gate: number | 'manual'): string {
  return gate === 'manual' ? 'manual approval' : formatDurationMs(gate);
}

export function renderPlan(report: PlanReport): string {
  const { plan, spec, inventory } = report;
  const byId = new Map(inventory.devices.map((d) => [d.id, d]));
  const lines: string[] = [];
  lines.push(
    `plan ${plan.rolloutId}: ${spec.profile} r${spec.fromRevision} → r${spec.toRevision} (risk: ${report.risk}), seed ${plan.seed}`,
  );
  lines.push(`snapshot: ${plan.snapshotSize} device(s) in scope (${report.scopeNote})`);
  if (report.workerCheck) lines.push(`worker: ${report.workerCheck}`);
  if (plan.canaryClass)
    lines.push(
      `canary class: ${plan.canaryClass}${spec.canaryClass ? ' (canaryClass)' : ' (majority)'}${spec.concurrent ? ', concurrent' : ''}`,
    );
  lines.push('');
  lines.push('pools:');
  for (const p of plan.pools)
    lines.push(
      `  ${p.pool.padEnd(16)} ${String(p.size).padStart(5)} device(s)  budget ${(p.budget * 100).toFixed(1).replace(/\.0$/, '')}%  at most ${p.maxInFlight} in flight`,
    );
  for (const phase of plan.phases) {
    const spec0 = phase.specIndex >= 0 ? spec.phases[phase.specIndex] : undefined;
    const size = spec0 ? describeSize((spec0.canary ?? spec0.bulk)!) : 'remainder';
    lines.push('');
    lines.push(
      `phase ${phase.index + 1}: ${phase.name} — ${phase.devices.length} device(s) [${size}], gate ${gateText(phase.gate)}${phase.healthGate.length ? `, health: ${phase.healthGate.join('; ')}` : ''}`,
    );
    for (const id of phase.devices) {
      const d = byId.get(id)!;
      lines.push(
        `  ${id.padEnd(24)} pool ${d.pool.padEnd(12)} class ${d.class.padEnd(10)} ${d.os}${d.updateClass === 'best-effort' ? '  (best-effort)' : ''}`,
      );
    }
  }
  if (plan.alreadyApplied.length) {
    lines.push('');
    lines.push(`already applied (not touched): ${plan.alreadyApplied.join(', ')}`);
  }
  if (plan.notForMe.length) {
    lines.push('');
    lines.push('not-for-me:');
    for (const n of plan.notForMe) lines.push(`  ${n.id.padEnd(24)} ${n.reason}`);
  }
  lines.push('');
  const warnings = [...plan.warnings, ...report.revisionNotes];
  if (warnings.length) {
    lines.push(`warnings (${warnings.length}):`);
    for (const w of warnings) lines.push(`  ! ${w}`);
  } else lines.push('warnings: none');
  return lines.join('\n');
}

export function register(program: Command): void {
  withTemporalOptions(program.command('plan'))
    .description(
      'Validate a rollout spec against an inventory, as start does, and print its phases; starts nothing and contacts no device (exit 0 valid, 2 invalid). What only the worker reads is checked by a worker on the task queue when one answers',
    )
    .requiredOption('-f, --file <spec.yaml>', 'rollout spec')
    .option('--inventory <file>', 'inventory: wavegate YAML/JSON, or an Ansible INI/YAML inventory')
    .option(
      '--inventory-url <url>',
      'or read the inventory from a device registry serving JSON pages { devices, next } (docs/formats.md "Inventory over HTTP")',
    )
    .option(
      '--inventory-token-env <NAME>',
      'with --inventory-url: send the bearer token held in this environment variable',
    )
    .option(
      '--inventory-deadline <duration>',
      'with --inventory-url: the whole listing, every page, within this (default 120s; each page within 15s)',
    )
    .option('--rollout-id <id>', 'the rollout id that seeds the plan (default: rollout:<profile>)')
    .option('--profiles <dir>', profilesOptionHelp())
    .addOption(new Option('--profiles-dir <dir>', 'deprecated: the older name of --profiles').hideHelp())
    .option(
      '--profile <profile.yaml>',
      'what-if: plan over the scope of this profile file instead of the profile directory start would read (no revisions read)',
    )
    .option(
      '--what-if',
      'plan over the inventory alone: no profile directory read, every device in scope (what start would refuse without the profile)',
    )
    .option('--offline', 'ask no worker (no Temporal contacted): what only the worker reads is listed as not checked')
    .option('--markers <file>', 'current revision per device (mapping of device id → revision number)')
    .option('--risk <risky|safe>', "override the revision's risk")
    .option('--json', 'print the plan as JSON')
    .action(
      action(async (flags: Omit<PlanOptions, 'inventory'> & InventoryFlags & TemporalFlags & { offline?: boolean }) => {
        // Read and validated exactly as start reads them (cli/membership-client.ts); a file keeps plan's Ansible support.
        checkInventoryFlags(flags);
        const opts: PlanOptions =
          flags.inventoryUrl || !flags.inventory
            ? await readInventoryFlags(flags).then((read) => ({
                ...flags,
                inventory: read.inventoryPath,
                fetched: read.inventory,
              }))
            : { ...flags, inventory: flags.inventory };
        const report = makePlan(opts);
        // A plan that start would run asks a worker what only the worker can see (a refusal is exit 2, as start's).
        if (report.input)
          report.workerCheck = flags.offline
            ? notChecked('--offline', report.inScope)
            : await checkOnWorker(report.input, report.inScope, flags);
        if (opts.json) {
          const inPlan = new Set([
            ...report.plan.phases.flatMap((p) => p.devices),
            ...report.plan.alreadyApplied,
            ...report.plan.notForMe.map((n) => n.id),
          ]);
          const devices = Object.fromEntries(
            report.inventory.devices
              .filter((d) => inPlan.has(d.id))
              .map((d) => [d.id, { pool: d.pool, class: d.class, os: d.os, updateClass: d.updateClass }]),
          );
          process.stdout.write(
            `${JSON.stringify({ ...report.plan, risk: report.risk, revisionNotes: report.revisionNotes, ...(report.workerCheck ? { workerCheck: report.workerCheck } : {}), devices }, null, 2)}\n`,
          );
        } else {
          process.stdout.write(`${renderPlan(report)}\n`);
        }
        return EXIT_OK;
      }),
    );
}
