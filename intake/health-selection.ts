import { parseHealthCheck, runsOnDevices } from '../core/health';
import type { Device } from '../core/inventory';
import { namedHealthChecks, type Profile } from '../core/revision';
import type { RolloutSpec } from '../core/spec';
import { invalidFields, type FieldProblem } from '../core/validation';
import type { SignedRevision } from './envelope';

/**
 * A spec's health gates only SELECT checks; what runs on a device is the target revision's signed
 * `health` section. Every selection must name something the worker will find inside the target's
 * envelope (or, for `error-rate`, the profile's worker-side source), so `plan` and `start` refuse a
 * gate that could only ever be inconclusive, or that needs unsigned device commands: a gate must never
 * pause for a reason known before the rollout started. Both channels (SSH, and agents reporting from
 * the envelope they verified) answer every signed selection, so what is refused here is refused for
 * every device. INVALID_INPUT naming `rollout.phases[i].healthGate[j]` (the phase and the check), why,
 * and the devices concerned: those the phase may take (phases are sized only at the snapshot).
 */
export function checkHealthSelections(
  spec: RolloutSpec,
  profile: Profile,
  target: SignedRevision,
  specSource: string,
  devices: readonly Pick<Device, 'id' | 'updateClass'>[] = [],
): void {
  const { revision, envelope } = target;
  const health = revision.health;
  const names = namedHealthChecks(health).map((c) => c.name);
  const problems: FieldProblem[] = [];
  const concerned = concernedDevices(devices);
  // The phases' gates, then the watch after promotion's (its checks are selected the same way).
  const gates = spec.phases.map((phase, i) => ({ at: `rollout.phases[${i}].healthGate`, i, checks: phase.healthGate }));
  if (spec.watch) gates.push({ at: 'rollout.watch.healthGate', i: -1, checks: spec.watch.healthGate });
  for (const { at, i, checks } of gates) {
    for (const [j, text] of checks.entries()) {
      const parsed = parseHealthCheck(text);
      if (!parsed.ok) continue; // the spec parser already refused it
      const check = parsed.check;
      const problem = (message: string) =>
        problems.push({
          path: `${at}[${j}]`,
          value: text,
          message: `${message}${concerned(i)}`,
        });
      const r = `${revision.profile} r${revision.revision}`;
      if (runsOnDevices(check) && !envelope) {
        problem(
          `runs commands on devices, which must come from signed content, but profile "${revision.profile}" has no pins (trust.yaml), so ${r} is unsigned; sign its revisions (wavegate keygen, trust, sign, cosign) or use a worker-side check (http, prometheus, devices-online)`,
        );
        continue;
      }
      if (check.kind === 'all-runtimes-healthy' && !health?.runtimes?.length) {
        problem(
          `${r} declares no signed health.runtimes to check; add them to the revision as { name, command } and sign it again, or drop this check`,
        );
        continue;
      }
      if (check.kind === 'named' && !names.includes(check.name)) {
        problem(
          `${r} has no signed health check named "${check.name}"; allowed: ${names.map((n) => `"check: ${n}"`).join(', ') || '(none: add health.checks to the revision and sign it again)'}`,
        );
        continue;
      }
      if (check.kind === 'error-rate' && !(envelope && health?.errorRate) && !profile.metrics) {
        problem(
          `has no error-rate source: ${r} has no signed health.errorRate.command${envelope ? '' : ' (and is unsigned)'} and profile "${profile.name}" no metrics.errorRate (http or prometheus)`,
        );
        continue;
      }
      if (
        check.kind === 'prometheus' &&
        check.url === undefined &&
        !(profile.metrics && 'prometheus' in profile.metrics.errorRate)
      ) {
        problem(
          `has no Prometheus to ask: profile "${profile.name}" has no metrics.errorRate.prometheus.url; write "prometheus(<url>): <query> < <number>" or set it in the profile`,
        );
      }
    }
  }
  if (problems.length) invalidFields(specSource, problems);
}

/** ", on every device phase i may take: a, b, c and 4 more", from the devices the rollout plans over. */
function concernedDevices(devices: readonly Pick<Device, 'id' | 'updateClass'>[]): (phase: number) => string {
  // A left-behind device is in no phase: it is never gated.
  const ids = devices.filter((d) => d.updateClass !== 'left-behind').map((d) => d.id);
  if (ids.length === 0) return () => '';
  const shown = ids.length > 5 ? `${ids.slice(0, 5).join(', ')} and ${ids.length - 5} more` : ids.join(', ');
  const scope = `${ids.length === 1 ? 'the 1 device' : `the ${ids.length} devices`} in scope: ${shown}`;
  return (phase) =>
    phase < 0
      ? `; the watch after promotion would fail on every device it changed (${scope})`
      : `; phase ${phase + 1} would pause on it on any device it takes (${scope})`;
}
