import type { Client } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { membershipMismatch, type MemberRecord, type MembershipPage, type MembershipRef } from '../core/membership';
import { membershipPage } from '../clients/membership';

/**
 * Reads a membership entity's pages through its client (clients/membership.ts), so the
 * snapshot sees the same devices whichever worker runs it, and checks them against the digest the
 * rollout names. A membership is content-addressed and never changes once sealed, so the last few read
 * are kept in memory: the ten snapshot pages of a 10,000-device rollout read the entity once.
 */
const CACHED_MEMBERSHIPS = 4;

export interface MembershipReaderDeps {
  /** The client to query with (the activity context's when not given). */
  client?: Client;
}

export function createMembershipReader(deps: MembershipReaderDeps = {}) {
  const cache = new Map<string, MemberRecord[]>();
  return async function readMembership(
    ref: MembershipRef,
    contextClient: () => Client,
    onPage: () => void = () => {},
  ): Promise<MemberRecord[]> {
    const cached = cache.get(ref.digest);
    if (cached) return cached;
    const client = deps.client ?? contextClient();
    const pages: MembershipPage[] = [];
    for (let index = 0; index < ref.pages; index++) {
      const page = await membershipPage(client, ref.workflowId, index);
      if (!page)
        throw ApplicationFailure.create({
          type: 'MembershipMismatch',
          message: `${ref.workflowId}: page ${index} of ${ref.pages} not found (not sealed?)`,
          nonRetryable: true,
        });
      pages.push(page);
      onPage();
    }
    const mismatch = membershipMismatch(ref, pages);
    if (mismatch)
      throw ApplicationFailure.create({
        type: 'MembershipMismatch',
        message: `${ref.workflowId}: ${mismatch}`,
        nonRetryable: true,
      });
    const devices = pages.flatMap((p) => p.devices);
    cache.set(ref.digest, devices);
    while (cache.size > CACHED_MEMBERSHIPS) cache.delete(cache.keys().next().value!);
    return devices;
  };
}
