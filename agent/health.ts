import { readMetricValue } from '../core/health';
import { verifyEnvelope } from '../core/signing';
import type { DesiredEntry, HealthReport, HealthReportKind, ProfileReport } from '../core/twin';
import { errorRateReportName, TWIN_LIMITS } from '../core/twin';
import { shellFor } from '../device/steps';
import type { DeviceSession } from '../device/transport';
import type { AgentTrust } from './pins';

/**
 * Every device-side health gate answered by the agent, from the revision the device runs, reported on
 * every sync: the signed `health.runtimes` (`all-runtimes-healthy`, `check: <name>`), the signed
 * `health.checks` (`check: <name>`) and the signed `health.errorRate.command` (`error-rate`, its output
 * read as the SSH path reads it: core/health.ts readMetricValue). Only from an envelope the agent
 * verified against its own pins, for profiles whose last answer put the revision in place. Each result
 * carries the signed check's name (names are unique within a revision); the error rate is named
 * errorRateReportName(profile) and carries the number it read as `value` (core/twin.ts v1.2).
 */
export async function runDeviceHealth(
  session: DeviceSession,
  desired: Record<string, DesiredEntry>,
  answers: Record<string, ProfileReport>,
  trust: AgentTrust,
  now: number,
): Promise<HealthReport[]> {
  const out: HealthReport[] = [];
  /** One signed command: its exit code and output, or `error` when it could not run (timeout, session). */
  const run = async (
    entry: DesiredEntry,
    command: string,
  ): Promise<{ code: number | null; stdout: string; stderr: string; error?: string }> => {
    try {
      return await session.exec(shellFor(entry.steps, command), { timeoutMs: 10_000 });
    } catch (err) {
      return { code: null, stdout: '', stderr: '', error: (err as Error).message.slice(0, 200) };
    }
  };
  const failure = (res: Awaited<ReturnType<typeof run>>) =>
    res.error ?? `exited ${res.code}: ${(res.stderr || res.stdout).trim().slice(-200)}`;
  for (const entry of Object.values(desired)) {
    const answer = answers[entry.profile];
    if (
      !answer ||
      answer.requestId !== entry.requestId ||
      !['applied', 'already-applied', 'claimed'].includes(answer.state) ||
      !entry.steps.envelope
    )
      continue;
    let pins: ReturnType<AgentTrust['of']>;
    try {
      pins = trust.of(entry.profile);
    } catch {
      continue; // a trust file now refused (its mode): no health from pins the agent no longer takes
    }
    const verdict = pins ? verifyEnvelope(entry.steps.envelope, pins, { now }) : undefined;
    if (!verdict?.ok) continue;
    const health = verdict.revision.health;
    const named: [HealthReportKind, { name: string; command: string }][] = [
      ...(health?.runtimes ?? []).map((c) => ['runtime', c] as [HealthReportKind, typeof c]),
      ...(health?.checks ?? []).map((c) => ['check', c] as [HealthReportKind, typeof c]),
    ];
    for (const [kind, check] of named) {
      if (out.length >= TWIN_LIMITS.health) return out;
      // The signed check's own name, as `all-runtimes-healthy` and `check: <name>` know it.
      const res = await run(entry, check.command);
      out.push(
        res.code === 0
          ? { name: check.name, kind, ok: true }
          : { name: check.name, kind, ok: false, detail: failure(res) },
      );
    }
    const errorRate = health?.errorRate?.command;
    if (errorRate === undefined) continue;
    if (out.length >= TWIN_LIMITS.health) return out;
    const name = errorRateReportName(entry.profile);
    const res = await run(entry, errorRate);
    const read = res.code === 0 ? readMetricValue(res.stdout) : { ok: false as const, reason: failure(res) };
    // A number beyond the report's bound is unread, not clipped: a clipped rate would be a made-up one.
    if (read.ok && Math.abs(read.value) <= TWIN_LIMITS.healthValue)
      out.push({ name, kind: 'error-rate', ok: true, value: read.value });
    else
      out.push({
        name,
        kind: 'error-rate',
        ok: false,
        detail: read.ok ? `read ${read.value}, beyond ±${TWIN_LIMITS.healthValue}` : read.reason.slice(0, 200),
      });
  }
  return out;
}
