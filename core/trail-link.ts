import type { AuditHead, AuditRecord } from './audit';

/**
 * A record that links another trail (a slice writes its own trail, and the rollout's chain
 * gets one `devices.outcome` record per slice): its evidence holds `trail`, the linked trail's id (the
 * slice's workflow id) and `head: { seq, hash }`, that trail's last record. `devices` and `counts` are
 * what the linking record says of the slice (docs/formats.md, "Slice trails and linking records").
 * `wavegate audit --verify` follows links in the store; the receipts bundle (audit/bundle.ts) exports the
 * trails they name and core/receipt-verify.ts anchors each at its link's head.
 */
export interface TrailLink {
  trail: string;
  /** Null: the slice wrote no record (its link says so), and the store must hold no trail of that id. */
  head: AuditHead | null;
  mode: string | null;
  devices: number | null;
  counts: Record<string, number> | null;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/**
 * The link a record holds: null when its evidence names no `trail` (a string); `{ bad }` when it names
 * one without a usable `head` (seq an integer ≥ 1, hash 64 lowercase hex, or null for a slice that wrote
 * no record), which verification fails.
 */
export function linkOf(record: AuditRecord): TrailLink | { trail: string; bad: string } | null {
  const evidence = (record as { evidence?: unknown }).evidence;
  if (!isObject(evidence) || typeof evidence.trail !== 'string') return null;
  const trail = evidence.trail;
  const head = evidence.head;
  if (
    trail.length === 0 ||
    (head !== null &&
      (!isObject(head) ||
        !Number.isSafeInteger(head.seq) ||
        (head.seq as number) < 1 ||
        typeof head.hash !== 'string' ||
        !/^[0-9a-f]{64}$/.test(head.hash)))
  )
    return {
      trail,
      bad: `its evidence names trail ${JSON.stringify(trail)} without a head { seq ≥ 1, hash: 64 lowercase hex } (${JSON.stringify(head ?? null)?.slice(0, 120)})`,
    };
  const counts = isObject(evidence.counts)
    ? Object.fromEntries(Object.entries(evidence.counts).filter((e): e is [string, number] => typeof e[1] === 'number'))
    : null;
  return {
    trail,
    head: head === null ? null : { seq: head.seq as number, hash: head.hash as string },
    mode: typeof evidence.mode === 'string' ? evidence.mode : null,
    devices: Number.isSafeInteger(evidence.devices) ? (evidence.devices as number) : null,
    counts,
  };
}
