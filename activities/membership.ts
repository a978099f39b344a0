import type { Client } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { membershipMismatch, type MemberRecord, type MembershipPage, type MembershipRef } from '../core/membership';

/**
 * Reads a membership entity's pages through the Temporal client (workflows/membership.ts), so the
 * snapshot sees the same devices whichever worker runs it, and checks them against the digest the
 * rollout names. A membership is content-addressed and never changes once sealed, so the last few read
 * are kept in memory: the ten snapshot pages of a 10,000-device rollout read the entity once.
 */
const CACHED_MEMBERSHIPS = 4;
/** The entity's `page` query (workflows/membership.ts `pageQuery`; activities take nothing from workflows/). */
const PAGE_QUERY = 'page';

export interface MembershipReaderDeps {
  /** The client to query with (the activity context's when not given). */
  client?: Client;
}

export function createMembershipReader(deps: MembershipReaderDeps = {}) {
  const cache = new Map<string, MemberRecord[]>();
  return async function readMembership(ref: MembershipRef, contextClient: () => Client, onPage: () => void = () => {}): Promise<MemberRecord[]> {
    const cached = cache.get(ref.digest);
    if (cached) return cached;
    const handle = (deps.client ?? contextClient()).workflow.getHandle(ref.workflowId);
    const pages: MembershipPage[] = [];
    for (let index = 0; index < ref.pages; index++) {
      const page = await handle.query<MembershipPage | null, [number]>(PAGE_QUERY, index);
      if (!page) throw ApplicationFailure.create({ type: 'MembershipMismatch', message: `${ref.workflowId}: page ${index} of ${ref.pages} not found (not sealed?)`, nonRetryable: true });
      pages.push(page);
      onPage();
    }
    const mismatch = membershipMismatch(ref, pages);
    if (mismatch) throw ApplicationFailure.create({ type: 'MembershipMismatch', message: `${ref.workflowId}: ${mismatch}`, nonRetryable: true });
    const devices = pages.flatMap((p) => p.devices);
    cache.set(ref.digest, devices);
    while (cache.size > CACHED_MEMBERSHIPS) cache.delete(cache.keys().next().value!);
    return devices;
  };
}
