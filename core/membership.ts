import { sha256 } from '@noble/hashes/sha2.js';
import { bytesToHex } from '@noble/hashes/utils.js';
import { utf8Encode } from './bytes';
import { canonicalize } from './canonical';
import { WavegateError } from './errors';
import type { Device, Inventory } from './inventory';
import type { NodeDownMark } from './node-down';

/**
 * Membership that does not live on a worker's disk (docs/architecture.md "Where membership lives"):
 * the CLI reads and validates the inventory, cuts it into pages of compact device records and stores
 * them in a durable entity workflow `membership:<digest>` (workflows/membership.ts). The rollout input
 * then names the entity and its digest; the snapshot reads the pages back through the client on
 * whichever worker runs it and checks the digest. Pure: the entity's state and every check live here.
 */

/** Devices per uploaded page: one update's payload stays far below Temporal's 2 MB payload limit. */
export const MEMBERSHIP_PAGE_DEVICES = 1_000;
/** The most a page may weigh as canonical JSON (one update's argument, one query's answer). */
export const MAX_MEMBERSHIP_PAGE_BYTES = 1_000_000;
/**
 * The most pages one membership holds, and their total weight: every page is one update event in the
 * entity's history, which must stay well under the server's 50 MB history limit.
 */
export const MAX_MEMBERSHIP_PAGES = 100;
export const MAX_MEMBERSHIP_BYTES = 24_000_000;
/**
 * A membership too large for one entity's history to stay small is stored in volumes: consecutive pages,
 * each volume its own sealed entity of at most this many pages and bytes, so no history passes the
 * ~10 MB the server warns at however large the fleet (100,000 devices: four volumes). A membership
 * that fits in one volume is one entity, as before volumes.
 */
export const MAX_VOLUME_PAGES = 32;
export const MAX_VOLUME_BYTES = 8_000_000;
/** The most volumes one membership may have (512 pages: 512,000 devices of 1,000 per page). */
export const MAX_MEMBERSHIP_VOLUMES = 16;

/**
 * What the snapshot and the apply need of a device: the inventory's device (defaults resolved: host,
 * port, user, pool, class, os, labels for the scope, updateClass, transport, host-key pins and key
 * *file references* — never key material) and, when the CLI judged node-down verdicts at start, the
 * device's standing.
 */
export interface MemberRecord extends Device {
  nodeDown?: NodeDownMark;
}

/** What a rollout input carries instead of a path: which entity, which content, how many devices. */
export interface MembershipRef {
  /** `membership:<first 32 hex of digest>`. */
  workflowId: string;
  /** Hex SHA-256 over the page digests (membershipDigest). */
  digest: string;
  devices: number;
  pages: number;
  /** Where the CLI read it (a file path or a URL without credentials): for people, never read again. */
  source: string;
  /**
   * A membership stored in volumes (MAX_VOLUME_PAGES): each volume's entity, in page order. `digest`
   * is still over every page of the whole, and `workflowId` names the first volume. Absent: one entity.
   */
  volumes?: MembershipVolume[];
}

/** One volume of a large membership: its own sealed entity over consecutive pages (digest over its own pages). */
export interface MembershipVolume {
  workflowId: string;
  digest: string;
  devices: number;
  pages: number;
}

export interface MembershipPage {
  index: number;
  /** Hex SHA-256 of the page's canonical JSON. */
  digest: string;
  devices: MemberRecord[];
}

/** What the entity is started with: the content it will accept, fixed by the CLI up front. */
export interface MembershipPlan {
  digest: string;
  devices: number;
  pages: number;
  source: string;
}

export interface MembershipProgress {
  digest: string;
  pages: number;
  pagesStored: number;
  devicesStored: number;
  sealed: boolean;
}

export function pageDigest(devices: readonly MemberRecord[]): string {
  return bytesToHex(sha256(utf8Encode(canonicalize(devices))));
}

/** The membership's identity: SHA-256 over its page digests in order (so it is checked page by page). */
export function membershipDigest(pageDigests: readonly string[]): string {
  return bytesToHex(sha256(utf8Encode(`wavegate-membership-v1\n${pageDigests.join('\n')}`)));
}

export function membershipWorkflowId(digest: string): string {
  return `membership:${digest.slice(0, 32)}`;
}

/** Drop what is empty: 10,000 records sit in pages, and labels/runtimes are often empty. */
function compact(device: Device, mark: NodeDownMark | undefined): MemberRecord {
  const ssh = Object.fromEntries(Object.entries(device.ssh).filter(([, v]) => v !== undefined)) as Device['ssh'];
  return { ...device, ssh, ...(mark ? { nodeDown: mark } : {}) };
}

/** The inventory's devices as records cut into pages, with the membership's digest. */
export function membershipPages(
  inventory: Pick<Inventory, 'devices'>,
  marks: ReadonlyMap<string, NodeDownMark> = new Map(),
  pageSize = MEMBERSHIP_PAGE_DEVICES,
): { pages: MembershipPage[]; digest: string } {
  const pages: MembershipPage[] = [];
  for (let i = 0; i < inventory.devices.length; i += pageSize) {
    const devices = inventory.devices.slice(i, i + pageSize).map((d) => compact(d, marks.get(d.id)));
    pages.push({ index: pages.length, digest: pageDigest(devices), devices });
  }
  return { pages, digest: membershipDigest(pages.map((p) => p.digest)) };
}

/** Limits of a volume, as parameters so tests can cut small memberships into several volumes. */
export interface VolumeLimits {
  pages: number;
  bytes: number;
}

/**
 * Consecutive pages cut into volumes of at most `limits` pages and bytes (a page's bytes: its canonical
 * JSON), each with its own digest and re-indexed from 0, as its own entity stores them. One volume when
 * the whole fits; refused (INVALID_INPUT naming the device count) past MAX_MEMBERSHIP_VOLUMES.
 */
export function membershipVolumes(
  pages: readonly MembershipPage[],
  limits: VolumeLimits = { pages: MAX_VOLUME_PAGES, bytes: MAX_VOLUME_BYTES },
): Array<{ digest: string; devices: number; pages: MembershipPage[] }> {
  const volumes: Array<{ digest: string; devices: number; pages: MembershipPage[] }> = [];
  let current: MembershipPage[] = [];
  let bytes = 0;
  const close = () => {
    if (current.length === 0) return;
    volumes.push({
      digest: membershipDigest(current.map((p) => p.digest)),
      devices: current.reduce((n, p) => n + p.devices.length, 0),
      pages: current,
    });
    current = [];
    bytes = 0;
  };
  for (const page of pages) {
    const size = canonicalize(page.devices).length;
    if (current.length >= limits.pages || (current.length > 0 && bytes + size > limits.bytes)) close();
    current.push({ ...page, index: current.length });
    bytes += size;
  }
  close();
  if (volumes.length > MAX_MEMBERSHIP_VOLUMES) {
    const devices = pages.reduce((n, p) => n + p.devices.length, 0);
    throw new WavegateError(
      'INVALID_INPUT',
      `inventory: ${devices} devices need ${volumes.length} membership volumes (at most ${MAX_MEMBERSHIP_VOLUMES} of ${limits.pages} pages of ${MEMBERSHIP_PAGE_DEVICES} devices): split the fleet into several profiles or scopes`,
      { field: 'inventory' },
    );
  }
  return volumes;
}

/**
 * Why a ref's volumes do not add up to the ref (null: they do, or it has none): each volume's digest
 * is checked against its pages by the reader, and the whole digest over every page in order.
 */
export function volumesProblem(ref: MembershipRef): string | null {
  const { volumes } = ref;
  if (volumes === undefined) return null;
  if (!Array.isArray(volumes) || volumes.length < 1 || volumes.length > MAX_MEMBERSHIP_VOLUMES)
    return `volumes: 1-${MAX_MEMBERSHIP_VOLUMES} expected (got ${Array.isArray(volumes) ? volumes.length : typeof volumes})`;
  const pages = volumes.reduce((n, v) => n + v.pages, 0);
  const devices = volumes.reduce((n, v) => n + v.devices, 0);
  if (pages !== ref.pages) return `volumes: ${pages} pages in all, the membership names ${ref.pages}`;
  if (devices !== ref.devices) return `volumes: ${devices} devices in all, the membership names ${ref.devices}`;
  if (volumes[0]!.workflowId !== ref.workflowId)
    return `volumes: the first is ${volumes[0]!.workflowId}, the membership names ${ref.workflowId}`;
  return null;
}

/** Why a stored membership does not match the digest a rollout names (null: it matches). */
export function membershipMismatch(
  ref: Pick<MembershipRef, 'digest' | 'devices'>,
  pages: readonly MembershipPage[],
  /** Each page's content was already checked against its digest (a volume's reader did): skip the hashing. */
  pagesChecked = false,
): string | null {
  for (const page of pagesChecked ? [] : pages) {
    const actual = pageDigest(page.devices);
    if (actual !== page.digest)
      return `page ${page.index}: content digest ${actual.slice(0, 12)}… is not the recorded ${page.digest.slice(0, 12)}…`;
  }
  return wholeMismatch(
    ref,
    pages.map((p) => p.digest),
    pages.reduce((n, p) => n + p.devices.length, 0),
  );
}

/** Whether pages whose contents were each checked make up the whole `ref` names: its digest over theirs, its count. */
function wholeMismatch(
  ref: Pick<MembershipRef, 'digest' | 'devices'>,
  pageDigests: readonly string[],
  devices: number,
): string | null {
  const digest = membershipDigest(pageDigests);
  if (digest !== ref.digest) return `digest ${digest.slice(0, 12)}… is not the rollout's ${ref.digest.slice(0, 12)}…`;
  if (devices !== ref.devices) return `${devices} devices, the rollout names ${ref.devices}`;
  return null;
}

const HEX64 = /^[0-9a-f]{64}$/;

/** Why a plan cannot start an entity (null: it can). */
export function planProblem(plan: MembershipPlan): string | null {
  if (!plan || typeof plan !== 'object') return 'expected { digest, devices, pages, source }';
  if (typeof plan.digest !== 'string' || !HEX64.test(plan.digest))
    return `digest: must be 64 hex characters (got ${JSON.stringify(plan.digest)})`;
  if (!Number.isInteger(plan.pages) || plan.pages < 1 || plan.pages > MAX_MEMBERSHIP_PAGES)
    return `pages: must be 1-${MAX_MEMBERSHIP_PAGES} (got ${JSON.stringify(plan.pages)})`;
  if (
    !Number.isInteger(plan.devices) ||
    plan.devices < plan.pages ||
    plan.devices > plan.pages * MEMBERSHIP_PAGE_DEVICES
  )
    return `devices: ${JSON.stringify(plan.devices)} cannot fill ${plan.pages} pages of at most ${MEMBERSHIP_PAGE_DEVICES}`;
  if (typeof plan.source !== 'string' || plan.source.length > 2_048)
    return 'source: must be a string of at most 2048 characters';
  return null;
}

/** A stored page: its canonical text (what its digest is over) and how many devices it holds. */
interface StoredPage {
  index: number;
  digest: string;
  text: string;
  count: number;
}

/**
 * The entity's state (the "safe message handlers" style: the workflow is a thin shell around this).
 * Pages arrive one update at a time, in order; each is checked against its own digest and the
 * limits before it is stored; the seal checks the whole against the digest the entity was started
 * with. A sealed membership never changes.
 */
export class MembershipState {
  /**
   * Each page as its canonical text, not as the device objects it arrived as: a sealed entity stays in a
   * worker's workflow cache for as long as rollouts read it, and the text is a few times smaller (a
   * 100,000-device membership is four entities of about 7 MB each). A page is parsed again when read.
   */
  private readonly pages: StoredPage[] = [];
  private bytes = 0;
  private sealed = false;

  constructor(readonly plan: MembershipPlan) {}

  /** Why `page` cannot be stored now (null: it can); checked by the update's validator, so a refusal leaves no history. */
  pageProblem(page: MembershipPage): string | null {
    if (this.sealed) return 'sealed: a membership never changes once sealed';
    if (!page || typeof page !== 'object' || !Array.isArray(page.devices))
      return 'expected { index, digest, devices: [...] }';
    if (page.index !== this.pages.length)
      return `index: expected page ${this.pages.length} next (got ${JSON.stringify(page.index)})`;
    if (page.index >= this.plan.pages) return `index: the membership has ${this.plan.pages} pages (got ${page.index})`;
    if (page.devices.length < 1 || page.devices.length > MEMBERSHIP_PAGE_DEVICES)
      return `devices: a page holds 1-${MEMBERSHIP_PAGE_DEVICES} devices (got ${page.devices.length})`;
    const stored = this.devicesStored();
    if (stored + page.devices.length > this.plan.devices)
      return `devices: ${stored + page.devices.length} would exceed the planned ${this.plan.devices}`;
    const text = canonicalize(page.devices);
    if (text.length > MAX_MEMBERSHIP_PAGE_BYTES)
      return `devices: page ${page.index} is ${text.length} bytes (at most ${MAX_MEMBERSHIP_PAGE_BYTES})`;
    if (this.bytes + text.length > MAX_MEMBERSHIP_BYTES)
      return `devices: the membership would exceed ${MAX_MEMBERSHIP_BYTES} bytes`;
    const actual = bytesToHex(sha256(utf8Encode(text)));
    if (actual !== page.digest)
      return `digest: page ${page.index}'s content hashes to ${actual}, not ${JSON.stringify(page.digest)}`;
    return null;
  }

  /**
   * Store a page the validator accepted (pageProblem). Not checked again here: this handler also runs on
   * every replay of the entity's history, and hashing each of 32 pages of 1 MB again then took a replay
   * past the SDK's 5 s workflow-task limit on a loaded machine. Only the order is held.
   */
  addPage(page: MembershipPage): MembershipProgress {
    if (this.sealed || page.index !== this.pages.length) throw new Error(`index: expected page ${this.pages.length}`);
    const text = canonicalize(page.devices);
    this.pages.push({ index: page.index, digest: page.digest, text, count: page.devices.length });
    this.bytes += text.length;
    return this.progress();
  }

  /** Why the membership cannot be sealed now (null: it can). */
  sealProblem(): string | null {
    if (this.sealed) return null;
    if (this.pages.length !== this.plan.pages) return `pages: ${this.pages.length} of ${this.plan.pages} stored`;
    // Each page's content was checked against its digest when it was stored: the whole is checked over
    // the digests (hashing every page again made a sealed entity's replay slow, see addPage).
    return wholeMismatch(
      this.plan,
      this.pages.map((p) => p.digest),
      this.devicesStored(),
    );
  }

  seal(): MembershipProgress {
    const problem = this.sealProblem();
    if (problem) throw new Error(problem);
    this.sealed = true;
    return this.progress();
  }

  isSealed(): boolean {
    return this.sealed;
  }

  /** A stored page (null before the seal: a half-uploaded membership is never read). */
  page(index: number): MembershipPage | null {
    const stored = this.sealed ? this.pages[index] : undefined;
    return stored
      ? { index: stored.index, digest: stored.digest, devices: JSON.parse(stored.text) as MemberRecord[] }
      : null;
  }

  devicesStored(): number {
    return this.pages.reduce((n, p) => n + p.count, 0);
  }

  progress(): MembershipProgress {
    return {
      digest: this.plan.digest,
      pages: this.plan.pages,
      pagesStored: this.pages.length,
      devicesStored: this.devicesStored(),
      sealed: this.sealed,
    };
  }
}
