import { Context } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { WavegateError } from '../core/errors';
import { newestRevisionAbove } from '../clients/registry';
import type { RevisionSummary } from '../contracts/registry';

export interface RegistryActivityDeps {
  /** A client for the registry workflows; default: the worker's own client (the activity context's). */
  client?: Client;
}

/** A refusal from the registry is an answer, not a glitch: not retried. */
function toFailure(err: unknown): never {
  if (err instanceof WavegateError && err.code !== 'UNAVAILABLE' && err.code !== 'FAILED') {
    throw ApplicationFailure.create({
      type: `Registry.${err.code}`,
      message: err.message,
      nonRetryable: true,
      details: [err.details],
    });
  }
  throw err;
}

/**
 * Registry reads for workflows (the nightly canary picks the newest registered revision through these).
 * Registration itself is an update on the registry workflow, made by the CLI, never by an activity.
 */
export function createRegistryActivities(deps: RegistryActivityDeps = {}) {
  const client = () => deps.client ?? Context.current().client;
  return {
    /** The newest unexpired registered revision above `above`, or null. Fails (not retried) for a profile without a registry. */
    async newestRevisionAbove(input: { profile: string; above: number }): Promise<RevisionSummary | null> {
      return newestRevisionAbove(client(), input.profile, input.above).catch(toFailure);
    },
  };
}
