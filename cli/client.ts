import { Client, Connection, WorkflowExecutionAlreadyStartedError, type WorkflowHandle } from '@temporalio/client';
import { WavegateError } from '../core/errors';
import { WavegatePhase, WavegateProfile, WavegateRevision, WavegateState } from '../core/search-attributes';
import type { ConnectionSettings } from '../workers/worker';
import type { RolloutInput, rolloutWorkflow } from '../workflows/rollout';

export async function connectClient(settings: ConnectionSettings): Promise<Client> {
  try {
    const connection = await Connection.connect({ address: settings.address, connectTimeout: 5_000 });
    return new Client({ connection, namespace: settings.namespace });
  } catch (err) {
    throw new WavegateError('UNAVAILABLE', `cannot reach Temporal at ${settings.address} (${(err as Error).message}); start one with \`wavegate dev\` or set TEMPORAL_ADDRESS`);
  }
}

/** The Web UI page of a workflow, for people to click. */
export function workflowUrl(uiUrl: string, namespace: string, workflowId: string): string {
  return `${uiUrl}/namespaces/${encodeURIComponent(namespace)}/workflows/${encodeURIComponent(workflowId)}`;
}

/**
 * Start the rollout as workflow `rollout:<profile>`: one running rollout per profile. A second start while
 * one runs is a CONFLICT naming it.
 */
export async function startRollout(client: Client, taskQueue: string, input: RolloutInput): Promise<WorkflowHandle<typeof rolloutWorkflow>> {
  const { spec } = input;
  try {
    return await client.workflow.start<typeof rolloutWorkflow>('rolloutWorkflow', {
      workflowId: input.rolloutId,
      taskQueue,
      args: [input],
      typedSearchAttributes: [
        { key: WavegateProfile, value: spec.profile },
        { key: WavegateState, value: 'running' },
        { key: WavegatePhase, value: 'snapshot' },
        { key: WavegateRevision, value: spec.toRevision },
      ],
      staticSummary: `${spec.profile}: r${spec.fromRevision} → r${spec.toRevision} in ${spec.phases.length} phases`,
      staticDetails: [
        `**Profile** ${spec.profile}, **revision** ${spec.fromRevision} → ${spec.toRevision}`,
        '',
        `**Phases** ${spec.phases.map((p) => (p.canary ? 'canary' : 'bulk')).join(' → ')}`,
        '',
        `**Started by** ${input.startedBy}; inventory \`${input.inventoryPath}\`; rollback on ${spec.rollback.on}`,
      ].join('\n'),
    });
  } catch (err) {
    if (err instanceof WorkflowExecutionAlreadyStartedError) {
      throw new WavegateError('CONFLICT', `a rollout of profile "${spec.profile}" is already running (${input.rolloutId}); pause, abort or wait for it first`);
    }
    throw err;
  }
}
