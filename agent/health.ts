import { verifyEnvelope } from '../core/signing';
import type { DesiredEntry, HealthReport, ProfileReport } from '../core/twin';
import { TWIN_LIMITS } from '../core/twin';
import { shellFor } from '../activities/device-steps';
import type { DeviceSession } from '../activities/transport';
import type { AgentTrust } from './pins';

/**
 * The signed runtime health checks (`health.runtimes` of the revision the device runs, core/revision.ts)
 * run on the device by the agent and reported on every sync: only from an envelope the agent verified
 * against its own pins, for profiles whose last answer put the revision in place. Each result carries
 * the signed check's name (names are unique within a revision).
 */
export async function runRuntimeHealth(session: DeviceSession, desired: Record<string, DesiredEntry>, answers: Record<string, ProfileReport>, trust: AgentTrust, now: number): Promise<HealthReport[]> {
  const out: HealthReport[] = [];
  for (const entry of Object.values(desired)) {
    const answer = answers[entry.profile];
    if (!answer || answer.requestId !== entry.requestId || !['applied', 'already-applied', 'claimed'].includes(answer.state) || !entry.steps.envelope) continue;
    const pins = trust.of(entry.profile);
    const verdict = pins ? verifyEnvelope(entry.steps.envelope, pins, { now }) : undefined;
    if (!verdict?.ok) continue;
    for (const check of verdict.revision.health?.runtimes ?? []) {
      if (out.length >= TWIN_LIMITS.health) return out;
      // The signed check's own name, as `all-runtimes-healthy` and `check: <name>` know it.
      const name = check.name;
      try {
        const res = await session.exec(shellFor(entry.steps, check.command), { timeoutMs: 10_000 });
        out.push(res.code === 0 ? { name, ok: true } : { name, ok: false, detail: `exited ${res.code}: ${(res.stderr || res.stdout).trim().slice(-200)}` });
      } catch (err) {
        out.push({ name, ok: false, detail: (err as Error).message.slice(0, 200) });
      }
    }
  }
  return out;
}
