import type { FailureTally } from '../failure-gate';
import { ownValue } from '../own-keys';

/**
 * One phase's pool budgets shared by overlapping slices (docs/architecture.md, "Scale"). Slices of a
 * phase form a chain: slice k+1 starts before slice k's devices are done, so slice k hands its
 * successor the slots still in use (its own devices and those it inherited), then passes on every
 * slot freed later. A slice may start a device only once it holds the budget and its pool has room
 * counting the slots still held further up the chain, so a pool's in-flight never exceeds its limit
 * across all slices at once. Pure: the workflow (workflows/slice-link.ts) carries the messages.
 */

/** What a slice hands its successor: the slots still in use per pool, and the phase's tally so far. */
export interface BudgetHandoff {
  inFlight: Record<string, number>;
  tally: FailureTally;
}

/** Slots freed further up the chain (a device ended), with how each counted for the failure gate. */
export interface BudgetRelease {
  pools: Record<string, number>;
  tally: FailureTally;
}

export class SharedBudget {
  /** Slots held by earlier slices' devices still running, per pool (negative: released before the handoff arrived). */
  private readonly inherited = new Map<string, number>();
  /** This slice's own devices running, per pool. */
  private readonly own = new Map<string, number>();
  /** The tally of devices that ended in earlier slices (handoff plus releases). */
  private readonly earlier: FailureTally = { succeeded: 0, failed: 0 };
  private holding: boolean;

  /** `holding`: the first slice of a phase holds the budget from the start; later ones wait for a handoff. */
  constructor(
    private readonly limits: Record<string, number>,
    holding: boolean,
  ) {
    this.holding = holding;
  }

  /** Whether this slice may start devices at all (it holds the budget). */
  get holds(): boolean {
    return this.holding;
  }
  /** Whether a device of `pool` may start now. */
  room(pool: string): boolean {
    return this.holding && this.inUse(pool) < (ownValue(this.limits, pool) ?? 1);
  }
  /** Slots of `pool` in use anywhere up the chain as this slice sees it. */
  inUse(pool: string): number {
    return (this.inherited.get(pool) ?? 0) + (this.own.get(pool) ?? 0);
  }
  started(pool: string): void {
    this.own.set(pool, (this.own.get(pool) ?? 0) + 1);
  }
  ended(pool: string): void {
    this.own.set(pool, (this.own.get(pool) ?? 0) - 1);
  }
  /** The predecessor's handoff: its slots in use become ours to wait for. Order with releases does not matter. */
  receiveHandoff(h: BudgetHandoff): void {
    for (const [pool, n] of Object.entries(h.inFlight)) this.inherited.set(pool, (this.inherited.get(pool) ?? 0) + n);
    addTally(this.earlier, h.tally);
    this.holding = true;
  }
  receiveRelease(r: BudgetRelease): void {
    for (const [pool, n] of Object.entries(r.pools)) this.inherited.set(pool, (this.inherited.get(pool) ?? 0) - n);
    addTally(this.earlier, r.tally);
  }
  /** Slots of earlier slices this slice still waits to hear freed (its end waits for them: the chain ends in order). */
  outstanding(): number {
    let n = 0;
    for (const v of this.inherited.values()) n += v;
    return n;
  }
  /** What to hand the successor: every slot in use as this slice sees it, and the earlier tally plus `own`. */
  handoff(own: FailureTally): BudgetHandoff {
    const inFlight: Record<string, number> = {};
    for (const pool of new Set([...this.inherited.keys(), ...this.own.keys()])) {
      const n = this.inUse(pool);
      if (n !== 0) inFlight[pool] = n;
    }
    return {
      inFlight,
      tally: { succeeded: this.earlier.succeeded + own.succeeded, failed: this.earlier.failed + own.failed },
    };
  }
  /** Devices that ended in earlier slices, as far as this slice has heard. */
  earlierTally(): FailureTally {
    return { ...this.earlier };
  }
}

/** Releases waiting to be sent, merged: one message carries every slot freed since the last one. */
export function mergeRelease(into: BudgetRelease, r: BudgetRelease): void {
  for (const [pool, n] of Object.entries(r.pools)) into.pools[pool] = (into.pools[pool] ?? 0) + n;
  addTally(into.tally, r.tally);
}

export function emptyRelease(): BudgetRelease {
  return { pools: {}, tally: { succeeded: 0, failed: 0 } };
}

export function isEmptyRelease(r: BudgetRelease): boolean {
  return Object.keys(r.pools).length === 0 && r.tally.succeeded === 0 && r.tally.failed === 0;
}

function addTally(into: FailureTally, t: FailureTally): void {
  into.succeeded += t.succeeded;
  into.failed += t.failed;
}
