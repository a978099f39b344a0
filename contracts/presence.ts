import * as wf from '@temporalio/workflow';
import type { PresenceBatch, PresenceState, SeenEntry } from '../core/presence';

/**
 * The messages of a presence shard `presence:<n>` (workflows/presence.ts; state and checks in
 * core/presence.ts), for the workflow and its client (clients/presence.ts) alike.
 */
export const PRESENCE_WORKFLOW = 'presenceWorkflow';

export interface PresenceInput {
  shard: number;
  /** The state the previous run carried over continue-as-new. */
  carried?: PresenceState;
}

export type PresenceWorkflow = (input: PresenceInput) => Promise<never>;

/** A gateway's flush to one shard: the devices of the shard it saw (a malformed batch is dropped whole, with a warning). */
export const presenceSeenSignal = wf.defineSignal<[PresenceBatch]>('presenceSeen');
/** The entries of the named devices (at most PRESENCE_LIMITS.query names); a device the shard does not hold is absent. */
export const presenceOfQuery = wf.defineQuery<Record<string, SeenEntry>, [{ devices: string[] }]>('presenceOf');
