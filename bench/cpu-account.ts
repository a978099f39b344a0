/**
 * Where a benchmark run's CPU went, by component, from /proc (Linux). On this 2-core machine the fleet,
 * the Temporal server and the worker share the cores, so a run's wall time follows its CPU: this says
 * which part of it costs what, per device.
 */
import { readdirSync, readFileSync } from 'node:fs';

/** Linux reports process times in clock ticks of 1/100 s (USER_HZ). */
const TICKS_PER_S = 100;

/** A process's own CPU seconds and those of its children it has reaped (the commands it ran and waited for). */
export function processCpu(pid: number): { own: number; reaped: number } {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may hold spaces, inside parentheses): utime is the 12th.
    const f = stat
      .slice(stat.lastIndexOf(')') + 2)
      .split(' ')
      .map(Number);
    return { own: (f[11]! + f[12]!) / TICKS_PER_S, reaped: (f[13]! + f[14]!) / TICKS_PER_S };
  } catch {
    return { own: 0, reaped: 0 };
  }
}

/** The pid of a child of this process whose command line contains `needle` (e.g. the dev server). */
export function childPid(needle: string): number | undefined {
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === process.pid && readFileSync(`/proc/${entry}/cmdline`, 'utf8').includes(needle)) return Number(entry);
    } catch {
      /* gone meanwhile */
    }
  }
  return undefined;
}

/** The machine's busy CPU seconds, every core (from /proc/stat: user, nice, system, irq, softirq). */
export function machineBusy(): number {
  const [, user, nice, system, , , irq, softirq] = readFileSync('/proc/stat', 'utf8')
    .split('\n')[0]!
    .trim()
    .split(/\s+/)
    .map(Number);
  return (user! + nice! + system! + irq! + softirq!) / TICKS_PER_S;
}

/** This process's CPU seconds, every thread (the worker's activities and workflow threads, or the loop). */
export function ownCpu(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1e6;
}

export interface CpuSplit {
  /** This process: the worker (activities, workflow thread) and the client, or the ssh loop. */
  process: number;
  /** The Temporal dev server. */
  server: number;
  /** The simulator shards' own CPU: the SSH servers of the devices. */
  shards: number;
  /** The commands the devices ran that their shard waited for (its reaped children: the shells and what they ran). */
  deviceCommands: number;
  /** The whole machine: the above, the applies the devices ran detached (reparented, so no shard reaps them), the rest. */
  machine: number;
}

/** Starts counting; call the result at the end of the run for the split since. */
export function startCpuSplit(shardPids: number[]): (serverCpu?: number) => CpuSplit {
  const before = { process: ownCpu(), shards: shardPids.map(processCpu), machine: machineBusy() };
  return (serverCpu = 0) => {
    const after = shardPids.map(processCpu);
    return {
      process: ownCpu() - before.process,
      server: serverCpu,
      shards: after.reduce((sum, a, i) => sum + a.own - before.shards[i]!.own, 0),
      deviceCommands: after.reduce((sum, a, i) => sum + a.reaped - before.shards[i]!.reaped, 0),
      machine: machineBusy() - before.machine,
    };
  };
}

/** A process's resident set size in bytes (VmRSS from /proc; 0 when there is no such process). */
export function vmRss(pid: number | undefined): number {
  if (!pid) return 0;
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}
