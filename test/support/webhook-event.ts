import { webhookEventFor } from '../../core/events';

/** A first webhook event (`rollout.started` of `rollout:demo`), for tests that deliver one event by hand. */
export const startedEvent = webhookEventFor(
  { rolloutId: 'rollout:demo', runId: 'run-1', profile: 'demo', fromRevision: 1, toRevision: 2 },
  1,
  { event: 'rollout.started', phase: null, by: 'test', reason: null, at: '2026-01-01T00:00:00.000Z', evidence: null },
)!;
