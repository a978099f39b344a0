import type { Client } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import {
  membershipMismatch,
  volumesProblem,
  type MemberRecord,
  type MembershipPage,
  type MembershipRef,
} from '../core/membership';
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
    /** Keep what was read among the last few (false: a caller that keeps what it makes of it instead). */
    keep = true,
  ): Promise<MemberRecord[]> {
    const cached = cache.get(ref.digest);
    if (cached) return cached;
    const client = deps.client ?? contextClient();
    const refused = (message: string) =>
      ApplicationFailure.create({ type: 'MembershipMismatch', message, nonRetryable: true });
    const problem = volumesProblem(ref);
    if (problem) throw refused(`${ref.workflowId}: ${problem}`);
    // One entity, or each volume's entity in order (each checked against its own digest).
    const pages: MembershipPage[] = [];
    for (const volume of ref.volumes ?? [ref]) {
      const own: MembershipPage[] = [];
      for (let index = 0; index < volume.pages; index++) {
        const page = await membershipPage(client, volume.workflowId, index);
        if (!page) throw refused(`${volume.workflowId}: page ${index} of ${volume.pages} not found (not sealed?)`);
        own.push(page);
        onPage();
      }
      if (ref.volumes) {
        const mismatch = membershipMismatch(volume, own);
        if (mismatch) throw refused(`${volume.workflowId}: ${mismatch}`);
      }
      pages.push(...own);
    }
    const mismatch = membershipMismatch(ref, pages, ref.volumes !== undefined);
    if (mismatch) throw refused(`${ref.workflowId}: ${mismatch}`);
    const devices = pages.flatMap((p) => p.devices);
    if (!keep) return devices;
    cache.set(ref.digest, devices);
    while (cache.size > CACHED_MEMBERSHIPS) cache.delete(cache.keys().next().value!);
    return devices;
  };
}
