/**
 * At most `max` calls of one kind to Temporal at once; more wait their turn in order. What a call holds while it is
 * in flight (its gRPC call, its encoded message) is what a storm of first syncs piled up in the gateway's memory; a
 * call waiting its turn holds a closure.
 */
export class CallLimit {
  private inFlight = 0;
  private readonly queue: Array<() => void> = [];

  constructor(private readonly max: number) {}

  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.inFlight >= this.max) await new Promise<void>((resolve) => this.queue.push(resolve));
    this.inFlight++;
    try {
      return await fn();
    } finally {
      this.inFlight--;
      this.queue.shift()?.();
    }
  }
}
