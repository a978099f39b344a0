import type { Command } from 'commander';
import { parseAuditLog } from '../core/audit';
import type { TrailRead } from '../core/rollout/verdict';
import { DEFAULT_AUDIT_DIR, resolveAuditLocation } from '../audit/file';
import { readChain } from './commands/audit';

/**
 * Where `start --wait`, `watch` and `status` read a rollout's audit trail to say why it ended where it
 * did (core/rollout/verdict.ts): the worker's store, named as `wavegate audit` names it. Reading it is
 * never what fails a command: a trail not found (another machine's directory, a database out of reach)
 * is said in one line and the status alone speaks.
 */

export interface TrailFlags {
  auditDir?: string;
  auditStore?: string;
}

/** `--audit-dir` and `--audit-store`, for a command that reads the trail only to say why. */
export function withTrailOptions(cmd: Command): Command {
  return cmd
    .option(
      '--audit-dir <dir>',
      `the worker's audit directory, read for the deciding gate's devices and failure ratio (default $WAVEGATE_AUDIT_DIR, else ${DEFAULT_AUDIT_DIR})`,
    )
    .option(
      '--audit-store <url>',
      'read the trail from this store instead of --audit-dir: postgres://user@host:port/db (default $WAVEGATE_AUDIT_STORE)',
    );
}

/**
 * The rollout's records (its run's, when `runId` is known), or why there are none. A chain that holds
 * no record of the run is another run's (a re-used id): not this rollout's reason.
 */
export async function readTrail(id: string, runId: string | undefined, flags: TrailFlags): Promise<TrailRead> {
  const where = resolveAuditLocation({ auditDir: flags.auditDir }, { besideKey: false });
  try {
    const { segments, location } = await readChain(id, {
      auditDir: where.auditDir,
      ...(flags.auditStore ? { auditStore: flags.auditStore } : {}),
      ...(runId ? { run: runId } : {}),
    });
    const records = segments.flatMap((s) => parseAuditLog(s.text).records);
    if (runId && !records.some((r) => r.runId === runId))
      return { missing: `the trail in ${location} is of another run of ${id}` };
    return { records };
  } catch (err) {
    return { missing: String((err as Error)?.message ?? err).split('\n')[0] };
  }
}
