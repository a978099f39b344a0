/**
 * startFleet: a simulated fleet of SSH devices on 127.0.0.1, and the handle tests, the demo and the
 * benchmark drive it with (faults, host keys, counters, stop).
 *
 * Up to ~1,000 devices run in one process, so each device is kept light: one shared client-key check,
 * sandboxes created lazily on first use, no per-device timers.
 */
import { promises as fsp } from 'node:fs';
import * as path from 'node:path';
import {
  HOST,
  type DeviceState,
  type FleetRuntime,
  type SimCommandRecord,
  type SimDevice,
  type SimDeviceSpec,
} from './device';
import { compileFaults, copyFaults, type SimFaults } from './faults';
import { loadClientKey } from './keys';
import { ensureSandbox, writeFaultFiles } from './sandbox';
import { clientAuthenticator, createDevice, listen, rotateHostKey, unlisten } from './ssh-server';

export interface Fleet {
  /** Username the servers accept (default "wavegate"). */
  user: string;
  /** Path of the OpenSSH-format private key (mode 0600) the servers accept. */
  clientKeyPath: string;
  /** OpenSSH one-line public key of the accepted client key. */
  clientPublicKey: string;
  devices: SimDevice[];
  device(id: string): SimDevice;
  /** Replaces the device's faults (not a merge). */
  setFaults(id: string, faults: SimFaults): Promise<void>;
  /** Current faults of a device (a copy). */
  faults(id: string): SimFaults;
  /** New host key for that device (existing connections keep the old one). Updates device(id) in place. */
  rotateHostKey(id: string): void;
  /** Every exec the device ran, in order (including failed/hung/dropped ones). Records are live objects. */
  commands(id: string): SimCommandRecord[];
  /** How many execs matched (string = substring). */
  count(id: string, pattern: RegExp | string): number;
  totalCommands(): number;
  /** Bytes written through SFTP WRITE on that device since the last resetCounters(). */
  sftpWrites(id: string): number;
  /** Number of SFTP OPEN requests for writing on that device since the last resetCounters(). */
  sftpUploads(id: string): number;
  /** Currently open TCP connections to the device. */
  connections(id: string): number;
  /** TCP connections made to the device since the last resetCounters(). */
  connectionsOpened(id: string): number;
  /**
   * The high-water mark of connections open at once across these devices (a pool, say) since the last
   * resetCounters(): with one connection per device apply, the most devices in flight at once. With
   * `until` (epoch ms), only connections opened before then count (an apply phase, not what follows it).
   */
  peakConnections(ids: readonly string[], until?: number): number;
  /** Makes sure `<dir>/<id>` and its `.sim/` helpers exist (otherwise created on first use). */
  ensureSandbox(id: string): Promise<string>;
  resetCounters(): void;
  /** Closes every server and connection, kills every child process; idempotent. */
  stop(): Promise<void>;
}

export interface StartFleetOptions {
  devices: SimDeviceSpec[];
  /** Base directory; sandboxes at `<dir>/<id>`, generated client key at `<dir>/.sim-keys/`. */
  dir: string;
  user?: string;
  /** Reuse this private key file instead of generating one (generated and written there if missing). */
  clientKeyPath?: string;
  /** Optional fixed ports (index-aligned with `devices`; 0/undefined = ephemeral). */
  ports?: number[];
  /** ssh2 protocol debug output (very verbose), prefixed with the device id. */
  debug?: (line: string) => void;
}

// Device ids become directory names (the sandbox): no separators, no leading dot.
const DEVICE_ID_RE = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

export async function startFleet(opts: StartFleetOptions): Promise<Fleet> {
  const baseDir = path.resolve(opts.dir);
  const user = opts.user ?? 'wavegate';

  const seen = new Set<string>();
  for (const spec of opts.devices) {
    if (!DEVICE_ID_RE.test(spec.id)) throw new Error(`fleet-sim: invalid device id ${JSON.stringify(spec.id)}`);
    if (seen.has(spec.id)) throw new Error(`fleet-sim: duplicate device id ${spec.id}`);
    seen.add(spec.id);
  }

  await fsp.mkdir(baseDir, { recursive: true });
  const clientKey = await loadClientKey(baseDir, opts.clientKeyPath);

  let stopped = false;
  let stopPromise: Promise<void> | undefined;
  const runtime: FleetRuntime = {
    isStopped: () => stopped,
    user,
    authenticate: clientAuthenticator(user, clientKey.key),
    children: new Set(),
    pgids: new Set(),
    debug: opts.debug,
  };

  const states = new Map<string, DeviceState>();
  const ordered: DeviceState[] = [];
  for (let i = 0; i < opts.devices.length; i++) {
    const spec = { ...opts.devices[i] };
    const st = createDevice(
      {
        id: spec.id,
        host: HOST,
        port: opts.ports?.[i] ?? 0,
        hostKeyFingerprint: '',
        hostPublicKey: '',
        sandbox: path.join(baseDir, spec.id),
        spec,
      },
      runtime,
    );
    states.set(spec.id, st);
    ordered.push(st);
  }

  try {
    await Promise.all(ordered.map((st) => listen(st, st.dev.port)));
  } catch (err) {
    await Promise.all(ordered.map((st) => unlisten(st)));
    throw err;
  }

  const get = (id: string): DeviceState => {
    const st = states.get(id);
    if (!st) throw new Error(`fleet-sim: unknown device ${id}`);
    return st;
  };

  const setFaults = (id: string, faults: SimFaults): Promise<void> => {
    const st = get(id);
    const compiled = compileFaults(faults);
    const run = async (): Promise<void> => {
      st.faults = compiled;
      if (stopped) return; // the sandbox directory may already be gone
      await writeFaultFiles(await ensureSandbox(st), compiled.raw);
      if (stopped) return;
      if (compiled.raw.offline) await unlisten(st);
      else if (!st.listening) await listen(st, st.dev.port);
    };
    const p = st.chain.then(run);
    st.chain = p.catch(() => {});
    return p;
  };

  const stop = (): Promise<void> => {
    if (stopPromise) return stopPromise;
    stopped = true;
    stopPromise = (async () => {
      await Promise.all(ordered.map((st) => st.chain));
      const closing = ordered.map((st) => unlisten(st));
      const exits = [...runtime.children].map(
        (c) =>
          new Promise<void>((resolve) => {
            if (c.exitCode !== null || c.signalCode !== null) return resolve();
            c.once('exit', () => resolve());
          }),
      );
      for (const pgid of runtime.pgids) {
        try {
          process.kill(-pgid, 'SIGKILL');
        } catch {
          /* group already empty */
        }
      }
      runtime.pgids.clear();
      // A child that ignores the kill must not keep stop() (and the test run) waiting forever.
      let guard: NodeJS.Timeout | undefined;
      await Promise.race([
        Promise.all([...closing, ...exits]),
        new Promise<void>((resolve) => {
          guard = setTimeout(resolve, 5_000);
        }),
      ]);
      if (guard) clearTimeout(guard);
    })();
    return stopPromise;
  };

  return {
    user,
    clientKeyPath: clientKey.path,
    clientPublicKey: clientKey.publicLine,
    devices: ordered.map((st) => st.dev),
    device: (id) => get(id).dev,
    setFaults,
    faults: (id) => copyFaults(get(id).faults.raw),
    rotateHostKey: (id) => rotateHostKey(get(id), runtime),
    commands: (id) => get(id).records.slice(),
    count: (id, pattern) => {
      const recs = get(id).records;
      if (typeof pattern === 'string') return recs.filter((r) => r.command.includes(pattern)).length;
      // Without g/y, test() keeps no lastIndex between records.
      const re = new RegExp(pattern.source, pattern.flags.replace(/[gy]/g, ''));
      return recs.filter((r) => re.test(r.command)).length;
    },
    totalCommands: () => ordered.reduce((n, st) => n + st.records.length, 0),
    sftpWrites: (id) => get(id).sftpBytes,
    sftpUploads: (id) => get(id).sftpOpens,
    connections: (id) => get(id).sockets.size,
    connectionsOpened: (id) => get(id).connectionSpans.length,
    peakConnections: (ids, until = Number.POSITIVE_INFINITY) =>
      peakOverlap(ids.flatMap((id) => get(id).connectionSpans.filter((s) => s.openedAt < until))),
    ensureSandbox: (id) => ensureSandbox(get(id)),
    resetCounters: () => {
      for (const st of ordered) {
        st.records = [];
        st.connectionSpans = [];
        st.sftpBytes = 0;
        st.sftpOpens = 0;
      }
    },
    stop,
  };
}

/** The most spans open at once; a span closing at the same millisecond another opens does not overlap it. */
export function peakOverlap(spans: ReadonlyArray<{ openedAt: number; closedAt?: number }>): number {
  const edges: Array<[number, number]> = [];
  for (const s of spans) {
    edges.push([s.openedAt, 1]);
    edges.push([s.closedAt ?? Number.POSITIVE_INFINITY, -1]);
  }
  edges.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let open = 0;
  let peak = 0;
  for (const [, delta] of edges) {
    open += delta;
    peak = Math.max(peak, open);
  }
  return peak;
}
