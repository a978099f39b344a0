import type { UpdateClass } from '../core/inventory';
import type { ChildProcess } from 'node:child_process';
import type * as net from 'node:net';
import type { AuthContext, ParsedKey, Server as SshServer } from 'ssh2';
import type { CompiledFaults } from './faults';

/** What a simulated device is: its identity as the inventory describes it. */
export interface SimDeviceSpec {
  id: string;
  pool?: string;
  class?: string;
  os?: string;
  labels?: Record<string, string>;
  updateClass?: UpdateClass;
}

/** A running simulated device: where to reach it and which host key to pin. */
export interface SimDevice {
  id: string;
  host: '127.0.0.1';
  port: number;
  /** OpenSSH style "SHA256:<base64 without padding>" of the host public key blob. */
  hostKeyFingerprint: string;
  /** OpenSSH one-line public key: "ssh-ed25519 AAAA..." (no comment). */
  hostPublicKey: string;
  sandbox: string;
  spec: SimDeviceSpec;
}

export interface SimCommandRecord {
  command: string;
  /** null while running, and for hung / dropped / killed (signal) commands. */
  exitCode: number | null;
  startedAt: number;
  endedAt?: number;
}

export const HOST = '127.0.0.1' as const;

/** Everything the simulator keeps per device; internal to sim/ (the public face is SimDevice). */
export interface DeviceState {
  dev: SimDevice;
  hostKey: ParsedKey;
  ssh: SshServer;
  listener: net.Server;
  listening: boolean;
  sockets: Set<net.Socket>;
  /** Accepted sockets by remote port: ssh2 reports only the port, and dropConnection needs the socket. */
  socketsByPort: Map<number, net.Socket>;
  faults: CompiledFaults;
  records: SimCommandRecord[];
  /** Every accepted connection: when it opened and when the client let go (for the concurrency counters). */
  connectionSpans: Array<{ openedAt: number; closedAt?: number }>;
  sftpBytes: number;
  sftpOpens: number;
  sandboxReady?: Promise<string>;
  /** serialises setFaults (offline/online transitions) */
  chain: Promise<void>;
}

/**
 * What every device of one fleet shares: one client-key check (not one per device, to stay light at
 * ~1,000 devices per process) and the spawned commands, which stop() must kill.
 */
export interface FleetRuntime {
  isStopped(): boolean;
  /** The login name every device accepts. */
  user: string;
  authenticate(ctx: AuthContext): void;
  /** Children still running. */
  children: Set<ChildProcess>;
  /** Process groups that may still have members (backgrounded jobs outlive their shell). */
  pgids: Set<number>;
  debug?: (line: string) => void;
}
