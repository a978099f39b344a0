import type { Client } from 'ssh2';

/**
 * SSH connections kept open for a short while after a device's apply succeeded, for the one more
 * command the same rollout sends that device: the floor it raises when it completes
 * (activities/floor.ts). On OpenSSH a new connection (a forked sshd, key exchange, authentication) costs
 * several times what a command on an open one does; without this the floor pass connected to every
 * device a second time (26% of a 100-device rollout, bench/README.md).
 *
 * Bounded in count and time, and only ever taken back for the same target (address, user, credentials,
 * jump host), and only while the host key it verified is still pinned (./ssh.ts checks it against the
 * pins read at that moment, so a key revoked in between is not used again).
 */
export interface ParkedConnection {
  client: Client;
  jump?: Client;
  /** The fingerprints the device (and the jump host) showed when the connection was made. */
  hostKey: string;
  jumpHostKey?: string | undefined;
  /** The last error ssh2 reported on it (named when a later command finds it lost). */
  lastError: () => (Error & { level?: string }) | undefined;
  /** How messages name the device on it. */
  label: string;
}

interface Entry {
  conn: ParkedConnection;
  timer: NodeJS.Timeout;
  onClose: () => void;
}

export class ConnectionPark {
  private readonly entries = new Map<string, Entry>();

  constructor(private readonly limit: number) {}

  /** Keep `conn` for `ttlMs`; the oldest parked one is closed when the park is full. */
  park(key: string, conn: ParkedConnection, ttlMs: number): void {
    this.drop(key, true);
    if (this.entries.size >= this.limit) this.drop(this.entries.keys().next().value!, true);
    const onClose = () => this.drop(key, false);
    conn.client.once('close', onClose);
    const timer = setTimeout(() => this.drop(key, true), ttlMs);
    timer.unref();
    this.entries.set(key, { conn, timer, onClose });
  }

  /** The parked connection for `key`, taken out of the park (the caller owns it now), or undefined. */
  take(key: string): ParkedConnection | undefined {
    const conn = this.entries.get(key)?.conn;
    this.drop(key, false);
    return conn;
  }

  get size(): number {
    return this.entries.size;
  }

  /** Close every parked connection (the worker is stopping). */
  closeAll(): void {
    for (const key of [...this.entries.keys()]) this.drop(key, true);
  }

  private drop(key: string, end: boolean): void {
    const entry = this.entries.get(key);
    if (!entry) return;
    this.entries.delete(key);
    clearTimeout(entry.timer);
    entry.conn.client.off('close', entry.onClose);
    if (end) {
      entry.conn.client.end();
      entry.conn.jump?.end();
    }
  }
}

/** The worker's park: at most this many idle connections at once. */
export const PARKED_CONNECTIONS_MAX = 1024;
export const sshPark = new ConnectionPark(PARKED_CONNECTIONS_MAX);
