import { existsSync, mkdirSync, readFileSync, writeFileSync, appendFileSync } from 'node:fs';
import { join } from 'node:path';
import { WithStartWorkflowOperation, WorkflowNotFoundError, type Client } from '@temporalio/client';
import {
  errorRateReportName,
  requestIdOf,
  type AgentReport,
  type DesiredEntry,
  type DesiredRequest,
  type TwinSyncInput,
  type TwinView,
  twinWorkflowId,
} from '../../core/twin';
import { twinStartOptions } from '../../clients/twin';
import { TWIN_WORKFLOW, twinSyncUpdate, type DeviceTwinWorkflow } from '../../contracts/twin';
import type { DeviceViews } from '../../gateway/views';

/**
 * A minimal in-process agent for rollout-side tests (NOT `wavegate agent`): it syncs with its twin
 * through the Temporal client as the gateway would, "applies" a desired entry by writing the marker
 * file `<dir>/<profile>.revision` (and appending to `<dir>/applies.log`), and reports. `health(rev)`
 * says what its runtime (and signed) checks report at a revision, `errorRate(rev)` the error rate it
 * reports; `refuse(entry)` makes it refuse an entry.
 */
export interface TwinAgentOptions {
  health?: (revision: number | null) => boolean;
  refuse?: (entry: DesiredEntry) => string | undefined;
  waitMs?: number;
  /** Runtime check names it reports (default the demo profile's `motd`). */
  runtimes?: string[];
  /** Signed `health.checks` names it reports (kind 'check', ok as `health` says; default none). */
  checks?: string[];
  /** The error rate it reports at a revision (kind 'error-rate', named errorRateReportName); undefined: none reported. */
  errorRate?: (revision: number | null) => number | undefined;
  /** Sync through a gateway's device views (gateway/views.ts) as `wavegate gateway` does, instead of the twin's update (`syncBeforeR11`). */
  views?: DeviceViews;
}

/**
 * A sync as gateways before r11 made it, which twins still answer: the twin's `twinSync` update (record the report,
 * wait up to waitMs inside the twin for news); a device with no twin yet starts it (update-with-start). No current
 * gateway sends it; the product has no client for it any more.
 */
export async function syncBeforeR11(
  client: Client,
  taskQueue: string,
  deviceId: string,
  input: TwinSyncInput,
): Promise<TwinView> {
  try {
    return await client.workflow.getHandle(twinWorkflowId(deviceId)).executeUpdate(twinSyncUpdate, { args: [input] });
  } catch (err) {
    // Not found: no twin yet, or caught between a run and its continue-as-new (the next run takes the update).
    if (!(err instanceof WorkflowNotFoundError)) throw err;
  }
  const startWorkflowOperation = new WithStartWorkflowOperation<DeviceTwinWorkflow>(TWIN_WORKFLOW, {
    ...twinStartOptions(deviceId, taskQueue),
    workflowIdConflictPolicy: 'USE_EXISTING',
  });
  return client.workflow.executeUpdateWithStart(twinSyncUpdate, { args: [input], startWorkflowOperation });
}

export function markerIn(dir: string, profile: string): number | null {
  const path = join(dir, `${profile}.revision`);
  return existsSync(path) ? Number(readFileSync(path, 'utf8').trim()) : null;
}

export function appliesIn(dir: string): string[] {
  const path = join(dir, 'applies.log');
  return existsSync(path) ? readFileSync(path, 'utf8').trim().split('\n').filter(Boolean) : [];
}

export function startTwinAgent(
  client: Client,
  taskQueue: string,
  deviceId: string,
  dir: string,
  opts: TwinAgentOptions = {},
) {
  mkdirSync(dir, { recursive: true });
  let stopped = false;
  const report: AgentReport = { profiles: {}, health: [], healthAt: null, agentVersion: 'twin-agent-test' };
  const check = (profile: string) => {
    const revision = markerIn(dir, profile);
    const ok = opts.health ? opts.health(revision) : true;
    const rate = opts.errorRate?.(revision);
    report.health = [
      ...(opts.runtimes ?? ['motd']).map((name) => ({ name, kind: 'runtime' as const, ok })),
      ...(opts.checks ?? []).map((name) => ({ name, kind: 'check' as const, ok })),
      ...(rate === undefined
        ? []
        : [{ name: errorRateReportName(profile), kind: 'error-rate' as const, ok: true, value: rate }]),
    ];
    report.healthAt = new Date().toISOString();
  };
  const loop = (async () => {
    let knownVersion = 0;
    while (!stopped) {
      let view: TwinView;
      try {
        check('demo');
        const sync = { report, knownVersion, waitMs: opts.waitMs ?? 2_000 };
        // A copy: the views keep the report they wrote, and this loop changes its own in place.
        view = opts.views
          ? await opts.views.sync(deviceId, { ...sync, report: structuredClone(report) })
          : await syncBeforeR11(client, taskQueue, deviceId, sync);
      } catch {
        if (stopped) return;
        await new Promise((r) => setTimeout(r, 500));
        continue;
      }
      knownVersion = view.version;
      for (const entry of Object.values(view.desired)) {
        if (report.profiles[entry.profile]?.requestId === entry.requestId) continue;
        const at = new Date().toISOString();
        const refusal = opts.refuse?.(entry);
        if (refusal) {
          report.profiles[entry.profile] = {
            revision: markerIn(dir, entry.profile),
            state: 'refused',
            reason: refusal,
            requestId: entry.requestId,
            detail: `refused by test agent: ${refusal}`,
            at,
          };
          continue;
        }
        const before = markerIn(dir, entry.profile);
        if (before === entry.revision) {
          report.profiles[entry.profile] = {
            revision: before,
            state: 'already-applied',
            requestId: entry.requestId,
            steps: ['verify'],
            at,
          };
          continue;
        }
        appendFileSync(join(dir, 'applies.log'), `${entry.profile} r${entry.revision} ${entry.requestId}\n`);
        writeFileSync(join(dir, `${entry.profile}.revision`), `${entry.revision}\n`);
        report.profiles[entry.profile] = {
          revision: entry.revision,
          state: 'applied',
          requestId: entry.requestId,
          steps: ['verify', 'apply', 'verify', 'marker'],
          at,
        };
      }
    }
  })();
  return {
    deviceId,
    dir,
    async stop() {
      stopped = true;
      await loop;
    },
  };
}

/** A desired revision of the demo profile for a device's twin, as a rollout's apply activity would ask it. */
export function desiredRequest(device: string, revision: number, activity = '1'): DesiredRequest {
  const holder = { rollout: `rollout-${device}`, run: 'run-1', activity, attempt: 1 };
  return {
    requestId: requestIdOf(holder),
    profile: 'demo',
    revision,
    steps: { profile: 'demo', revision, apply: 'true', verify: 'true', payload: [] },
    envelopeDigest: '',
    holder,
    rollout: holder.rollout,
    fromRevision: revision - 1 || null,
  };
}
