import { parseHealthCheck, runsOnDevices } from '../core/health';
import { namedHealthChecks, type Profile } from '../core/revision';
import type { RolloutSpec } from '../core/spec';
import { invalidFields, type FieldProblem } from '../core/validation';
import type { SignedRevision } from './envelope';

/**
 * A spec's health gates only SELECT checks; what runs on a device is the target revision's signed
 * `health` section. Every selection must name something the worker will find inside the target's
 * envelope (or, for `error-rate`, the profile's worker-side source), so `plan` and `start` refuse a
 * gate that could only ever be inconclusive, or that needs unsigned device commands. INVALID_INPUT
 * naming `rollout.phases[i].healthGate[j]`.
 */
export function checkHealthSelections(spec: RolloutSpec, profile: Profile, target: SignedRevision, specSource: string): void {
  const { revision, envelope } = target;
  const health = revision.health;
  const names = namedHealthChecks(health).map((c) => c.name);
  const problems: FieldProblem[] = [];
  spec.phases.forEach((phase, i) => {
    phase.healthGate.forEach((text, j) => {
      const parsed = parseHealthCheck(text);
      if (!parsed.ok) return; // the spec parser already refused it
      const check = parsed.check;
      const problem = (message: string) => problems.push({ path: `rollout.phases[${i}].healthGate[${j}]`, value: text, message });
      const r = `${revision.profile} r${revision.revision}`;
      if (runsOnDevices(check) && !envelope) {
        return problem(`runs commands on devices, which must come from signed content, but profile "${revision.profile}" has no pins (trust.yaml), so ${r} is unsigned; sign its revisions (wavegate keygen, trust, sign, cosign) or use a worker-side check (http, prometheus, devices-online)`);
      }
      if (check.kind === 'all-runtimes-healthy' && !health?.runtimes?.length) {
        return problem(`${r} declares no signed health.runtimes to check; add them to the revision as { name, command } and sign it again, or drop this check`);
      }
      if (check.kind === 'named' && !names.includes(check.name)) {
        return problem(`${r} has no signed health check named "${check.name}"; allowed: ${names.map((n) => `"check: ${n}"`).join(', ') || '(none: add health.checks to the revision and sign it again)'}`);
      }
      if (check.kind === 'error-rate' && !(envelope && health?.errorRate) && !profile.metrics) {
        return problem(`has no error-rate source: ${r} has no signed health.errorRate.command${envelope ? '' : ' (and is unsigned)'} and profile "${profile.name}" no metrics.errorRate (http or prometheus)`);
      }
    });
  });
  if (problems.length) invalidFields(specSource, problems);
}
