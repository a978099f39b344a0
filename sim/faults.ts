/**
 * The fault knobs of a simulated device. Connection-level faults (offline) are applied by the fleet to
 * the device's listener; exec faults (fail, hang, drop, latency) by the exec handler, matched against
 * the exact command string; the device-side ones (unhealthy runtimes, error rate, hanging metrics)
 * become files under `<sandbox>/.sim/` that the sandbox's sim-* commands read (sandbox.ts).
 */

export interface SimFaults {
  /** The device's port refuses connections (listener closed; reopened on the SAME port when cleared). */
  offline?: boolean;
  /** Delay before each exec starts. */
  latencyMs?: number;
  /** Regex source: matching exec commands start `slowMs` later (on top of latencyMs), then run: a slow but alive device. */
  slowCommand?: string;
  slowMs?: number;
  /** Regex source: matching exec commands exit 1 with stderr "simulated failure" and are NOT run. */
  failCommand?: string;
  /** Regex source: matching commands never finish (until the client closes the channel/connection); NOT run. */
  hangCommand?: string;
  /** Regex source: when an exec matches, the TCP connection is destroyed abruptly (no exit status); NOT run. */
  dropConnection?: string;
  /**
   * With dropConnection: the matching command DOES run, and the connection is destroyed this long after
   * it started (a connection lost mid-command). What the command left running outside the session lives on.
   */
  dropAfterMs?: number;
  /**
   * With hangCommand: the matching command DOES run, but its exit is never reported and its channel
   * stays open (as when it leaves a child holding the session's output) until the client gives up.
   */
  hangAfterRunning?: boolean;
  /** Names for which `sim-runtime-health <name>` exits 1. */
  unhealthyRuntimes?: string[];
  /** Value printed by `sim-error-rate` (default 0). */
  errorRate?: number;
  /** `sim-error-rate` hangs forever (metrics source timing out). */
  errorRateHangs?: boolean;
}

/** Faults with their regexes compiled once (in setFaults, so a bad regex fails there, not per exec). */
export interface CompiledFaults {
  raw: SimFaults;
  fail?: RegExp;
  hang?: RegExp;
  drop?: RegExp;
  slow?: RegExp;
}

function compile(source: string | undefined, field: string): RegExp | undefined {
  if (source === undefined || source === '') return undefined;
  try {
    return new RegExp(source);
  } catch (err) {
    throw new Error(`fleet-sim: invalid ${field} regex ${JSON.stringify(source)}: ${(err as Error).message}`);
  }
}

/** A copy: the caller's object (and its array) can change afterwards without changing the device. */
export function copyFaults(faults: SimFaults): SimFaults {
  return { ...faults, unhealthyRuntimes: faults.unhealthyRuntimes ? [...faults.unhealthyRuntimes] : undefined };
}

export function compileFaults(faults: SimFaults): CompiledFaults {
  return {
    raw: copyFaults(faults),
    fail: compile(faults.failCommand, 'failCommand'),
    hang: compile(faults.hangCommand, 'hangCommand'),
    drop: compile(faults.dropConnection, 'dropConnection'),
    slow: compile(faults.slowCommand, 'slowCommand'),
  };
}

/** Which exec fault applies to a command; precedence dropConnection > failCommand > hangCommand. */
export function execFault(faults: CompiledFaults, command: string): 'drop' | 'fail' | 'hang' | undefined {
  if (faults.drop?.test(command)) return 'drop';
  if (faults.fail?.test(command)) return 'fail';
  if (faults.hang?.test(command)) return 'hang';
  return undefined;
}
