import type { FailureTally } from '../core/failure-gate';
import { ownValue } from '../core/own-keys';
import type { DeviceOutcome } from '../core/rollout/device-outcome';
import type { SharedBudget } from '../core/rollout/shared-budget';
import type { DeviceSnapshot } from '../core/rollout-state';

/**
 * A device run's bookkeeping (workflows/device-runner.ts): the devices not yet started, the slots in
 * use per pool (its own, or the budget a chain of slices shares), the devices waiting for a dependency,
 * the devices started that compensation must undo, and the run's own failure tally. The runner decides
 * nothing here: it takes the next device that has room, and hands each device's outcome
 * (core/rollout/device-outcome.ts) back in one call.
 */
/** One pool's devices not yet started, each with its place in the run; `head` is the next to start. */
interface PoolQueue {
  devices: DeviceSnapshot[];
  order: number[];
  head: number;
}

export class DeviceQueue {
  /**
   * The devices not yet started, per pool, each in run order with its place in the run: a slot is per pool,
   * so "the first pending device with room" is the earliest head of a pool with room. A scan of every pending
   * device at each look (the runner looks after every activity's end) cost a slice of 1,000 devices its
   * pending count at every look while its pools were full.
   */
  private readonly pending = new Map<string, PoolQueue>();
  private pendingCount = 0;
  private readonly inFlight = new Map<string, number>();
  /** Ids whose apply (or rollback) was started and may have changed the device, in start order. */
  private readonly startedIds: string[] = [];
  /** Devices between a dependency wait and their retry: they may start again, so the run is not drained. */
  private waiting = 0;
  /** The run's own tally (earlier runs and slices are the runner's to add). */
  readonly tally: FailureTally = { succeeded: 0, failed: 0 };

  constructor(
    devices: readonly DeviceSnapshot[],
    private readonly limits: Record<string, number>,
    private readonly budget?: SharedBudget,
  ) {
    devices.forEach((device, order) => {
      let pool = this.pending.get(device.pool);
      if (!pool) {
        pool = { devices: [], order: [], head: 0 };
        this.pending.set(device.pool, pool);
      }
      pool.devices.push(device);
      pool.order.push(order);
    });
    this.pendingCount = devices.length;
  }

  /** Whether a device's pool has a free slot: under the shared budget if there is one, else this run's own limit. */
  room(device: DeviceSnapshot): boolean {
    return this.poolRoom(device.pool);
  }

  private poolRoom(pool: string): boolean {
    if (this.budget) return this.budget.room(pool);
    return (this.inFlight.get(pool) ?? 0) < (ownValue(this.limits, pool) ?? 1);
  }

  /** Devices are left to start. */
  hasPending(): boolean {
    return this.pendingCount > 0;
  }

  /** A pending device has a free slot. */
  canStartOne(): boolean {
    return this.nextPool() !== undefined;
  }

  /** The first pending device with a free slot, taken out of pending (call only when `canStartOne`). */
  takeNext(): DeviceSnapshot {
    const pool = this.nextPool();
    if (!pool) throw new Error('takeNext: no pending device has a free slot');
    const device = pool.devices[pool.head]!;
    pool.head += 1;
    this.pendingCount -= 1;
    return device;
  }

  /** The pool whose first pending device comes earliest in the run among the pools with a free slot. */
  private nextPool(): PoolQueue | undefined {
    let best: PoolQueue | undefined;
    for (const [name, pool] of this.pending) {
      if (pool.head >= pool.devices.length || !this.poolRoom(name)) continue;
      if (!best || pool.order[pool.head]! < best.order[best.head]!) best = pool;
    }
    return best;
  }

  /** No device is left to start nor waiting to start again. */
  drained(): boolean {
    return this.pendingCount === 0 && this.waiting === 0;
  }

  /** A device's apply starts: it takes a slot and is started (until its outcome says nothing ran). */
  begin(device: DeviceSnapshot): void {
    this.inFlight.set(device.pool, (this.inFlight.get(device.pool) ?? 0) + 1);
    this.budget?.started(device.pool);
    this.startedIds.push(device.id);
  }

  /** A device's apply ended with this outcome: its slot is freed, it is counted, and forgotten if it was not touched. */
  settle(device: DeviceSnapshot, outcome: DeviceOutcome): void {
    if (!outcome.touched) this.startedIds.splice(this.startedIds.lastIndexOf(device.id), 1);
    if (outcome.counted) this.tally[outcome.counted] += 1;
    this.inFlight.set(device.pool, this.inFlight.get(device.pool)! - 1);
    this.budget?.ended(device.pool);
  }

  /** A device starts waiting for a dependency (its slot already freed by `settle`). */
  waitBegins(): void {
    this.waiting += 1;
  }

  /** The wait is over (to retry, or given up). */
  waitEnds(): void {
    this.waiting -= 1;
  }

  /** The devices compensation must undo, in start order. */
  started(): string[] {
    return [...this.startedIds];
  }
}
