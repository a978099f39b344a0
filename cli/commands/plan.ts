import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Command } from 'commander';
import { looksLikeAnsible, parseAnsibleInventory } from '../../core/ansible';
import { WavegateError } from '../../core/errors';
import { devicesInScope, runRegistrationGates } from '../../core/gates';
import { parseInventory, type Inventory } from '../../core/inventory';
import { describeSize, planPhases, type Plan } from '../../core/planner';
import { parseProfile, parseRevision, type Profile } from '../../core/revision';
import { checkSpecAgainstInventory, parseRolloutSpec, type RolloutSpec } from '../../core/spec';
import { formatDurationMs } from '../../core/duration';
import { readDocument } from '../../intake/files';
import { action, EXIT_OK } from '../run';

/**
 * Read an inventory file: a wavegate inventory (YAML or JSON), or an Ansible inventory (INI, or YAML
 * with `all:`/groups of `hosts:`), imported through core/ansible.
 */
export function loadInventoryFile(path: string): Inventory {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new WavegateError('INVALID_INPUT', `${path}: cannot read file (${(err as NodeJS.ErrnoException).code ?? String(err)})`, { source: path });
  }
  if (!path.endsWith('.json') && looksLikeAnsible(text, path)) return parseInventory(parseAnsibleInventory(text, path), path);
  return parseInventory(readDocument(path), path);
}

/** Current revision markers for a plan: a YAML/JSON mapping of device id → revision number. */
function loadMarkers(path: string, inventory: Inventory): Map<string, number> {
  const doc = readDocument(path);
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) {
    throw new WavegateError('INVALID_INPUT', `${path}: invalid\n  (root): must be a mapping of device id to revision number`, { source: path });
  }
  const known = new Set(inventory.devices.map((d) => d.id));
  const markers = new Map<string, number>();
  const problems: string[] = [];
  for (const [id, value] of Object.entries(doc)) {
    if (!known.has(id)) problems.push(`  ${id}: no such device in the inventory (got ${JSON.stringify(value)})`);
    else if (typeof value !== 'number' || !Number.isInteger(value) || value < 0) problems.push(`  ${id}: must be a revision number (got ${JSON.stringify(value)})`);
    else markers.set(id, value);
  }
  if (problems.length) throw new WavegateError('INVALID_INPUT', `${path}: invalid\n${problems.join('\n')}`, { source: path });
  return markers;
}

export interface PlanOptions {
  file: string;
  inventory: string;
  rolloutId?: string;
  profile?: string;
  profilesDir: string;
  markers?: string;
  risk?: string;
  json?: boolean;
}

export interface PlanReport {
  plan: Plan;
  spec: RolloutSpec;
  inventory: Inventory;
  scopeNote: string;
  risk: 'risky' | 'safe';
  /** What the registration gates say about the target revision, when its file was found. */
  revisionNotes: string[];
}

/** Validate everything and plan; throws INVALID_INPUT (exit 2) on any bad input. Never contacts Temporal. */
export function makePlan(opts: PlanOptions): PlanReport {
  const spec = parseRolloutSpec(readDocument(opts.file), opts.file);
  const inventory = loadInventoryFile(opts.inventory);
  let profile: Profile | undefined;
  let scopeNote = 'no profile file: every device in the inventory is in scope';
  const profilePath = opts.profile ?? join(opts.profilesDir, spec.profile, 'profile.yaml');
  if (opts.profile || existsSync(profilePath)) {
    profile = parseProfile(readDocument(profilePath), profilePath);
    if (profile.name !== spec.profile) {
      throw new WavegateError('INVALID_INPUT', `${opts.file}: invalid\n  rollout.profile: the profile file ${profilePath} is "${profile.name}" (got ${JSON.stringify(spec.profile)})`, { source: opts.file });
    }
    scopeNote = `scope ${JSON.stringify(profile.scope)} from ${profilePath}`;
  }
  const inScope = devicesInScope(profile?.scope, inventory.devices);
  if (inScope.length === 0) {
    throw new WavegateError('INVALID_INPUT', `${opts.inventory}: invalid\n  devices: no device matches the scope of profile "${spec.profile}" (${scopeNote})`, { source: opts.inventory });
  }
  checkSpecAgainstInventory(spec, inventory, opts.file, inScope.map((d) => d.id));

  let risk: 'risky' | 'safe' = 'risky';
  const revisionNotes: string[] = [];
  const revisionPath = join(opts.profilesDir, spec.profile, 'revisions', `${spec.toRevision}.yaml`);
  if (existsSync(revisionPath)) {
    const revision = parseRevision(readDocument(revisionPath), revisionPath);
    risk = revision.risk;
    const gates = runRegistrationGates({ revision, scope: profile?.scope, devices: inventory.devices });
    for (const b of gates.blocked) revisionNotes.push(`r${spec.toRevision}: gate "${b.gate}" would refuse registration (${b.reason}): ${b.message} [escape: ${b.flag}]`);
    for (const n of gates.notes) revisionNotes.push(`r${spec.toRevision}: ${n}`);
    if (!gates.provability.provable) revisionNotes.push(`r${spec.toRevision} is not provable: its devices can only reach "claimed", never "applied"`);
  }
  if (opts.risk !== undefined) {
    if (opts.risk !== 'risky' && opts.risk !== 'safe') throw new WavegateError('INVALID_INPUT', `--risk: must be "risky" or "safe" (got ${JSON.stringify(opts.risk)})`);
    risk = opts.risk;
  }
  const markers = opts.markers ? loadMarkers(opts.markers, inventory) : new Map<string, number>();
  const plan = planPhases({
    rolloutId: opts.rolloutId ?? `rollout:${spec.profile}`,
    spec,
    devices: inScope.map((d) => ({ id: d.id, pool: d.pool, class: d.class, os: d.os, updateClass: d.updateClass, current: markers.get(d.id) ?? null })),
    pools: inventory.pools,
    risk,
  });
  return { plan, spec, inventory, scopeNote, risk, revisionNotes };
}

function gateText(gate: number | 'manual'): string {
  return gate === 'manual' ? 'manual approval' : formatDurationMs(gate);
}

export function renderPlan(report: PlanReport): string {
  const { plan, spec, inventory } = report;
  const byId = new Map(inventory.devices.map((d) => [d.id, d]));
  const lines: string[] = [];
  lines.push(`plan ${plan.rolloutId}: ${spec.profile} r${spec.fromRevision} → r${spec.toRevision} (risk: ${report.risk}), seed ${plan.seed}`);
  lines.push(`snapshot: ${plan.snapshotSize} device(s) in scope (${report.scopeNote})`);
  if (plan.canaryClass) lines.push(`canary class: ${plan.canaryClass}${spec.canaryClass ? ' (canaryClass)' : ' (majority)'}${spec.concurrent ? ', concurrent' : ''}`);
  lines.push('');
  lines.push('pools:');
  for (const p of plan.pools) lines.push(`  ${p.pool.padEnd(16)} ${String(p.size).padStart(5)} device(s)  budget ${(p.budget * 100).toFixed(1).replace(/\.0$/, '')}%  at most ${p.maxInFlight} in flight`);
  for (const phase of plan.phases) {
    const spec0 = phase.specIndex >= 0 ? spec.phases[phase.specIndex] : undefined;
    const size = spec0 ? describeSize((spec0.canary ?? spec0.bulk)!) : 'remainder';
    lines.push('');
    lines.push(`phase ${phase.index + 1}: ${phase.name} — ${phase.devices.length} device(s) [${size}], gate ${gateText(phase.gate)}${phase.healthGate.length ? `, health: ${phase.healthGate.join('; ')}` : ''}`);
    for (const id of phase.devices) {
      const d = byId.get(id)!;
      lines.push(`  ${id.padEnd(24)} pool ${d.pool.padEnd(12)} class ${d.class.padEnd(10)} ${d.os}${d.updateClass === 'best-effort' ? '  (best-effort)' : ''}`);
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
  program
    .command('plan')
    .description('Validate a rollout spec against an inventory and print its phases; starts nothing (exit 0 valid, 2 invalid)')
    .requiredOption('-f, --file <spec.yaml>', 'rollout spec')
    .requiredOption('--inventory <file>', 'inventory: wavegate YAML/JSON, or an Ansible INI/YAML inventory')
    .option('--rollout-id <id>', 'the rollout id that seeds the plan (default: rollout:<profile>)')
    .option('--profile <profile.yaml>', 'profile file for the scope (default: <profiles-dir>/<profile>/profile.yaml when present)')
    .option('--profiles-dir <dir>', 'where profiles live', 'profiles')
    .option('--markers <file>', 'current revision per device (mapping of device id → revision number)')
    .option('--risk <risky|safe>', "override the revision's risk")
    .option('--json', 'print the plan as JSON')
    .action(
      action((opts: PlanOptions) => {
        const report = makePlan(opts);
        if (opts.json) {
          const inPlan = new Set([...report.plan.phases.flatMap((p) => p.devices), ...report.plan.alreadyApplied, ...report.plan.notForMe.map((n) => n.id)]);
          const devices = Object.fromEntries(
            report.inventory.devices.filter((d) => inPlan.has(d.id)).map((d) => [d.id, { pool: d.pool, class: d.class, os: d.os, updateClass: d.updateClass }]),
          );
          process.stdout.write(`${JSON.stringify({ ...report.plan, risk: report.risk, revisionNotes: report.revisionNotes, devices }, null, 2)}\n`);
        } else {
          process.stdout.write(`${renderPlan(report)}\n`);
        }
        return EXIT_OK;
      }),
    );
}
