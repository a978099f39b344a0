import { spawn, type ChildProcess } from 'node:child_process';

/**
 * Long-lived servers this process starts (the dev stack's Temporal server, a fleet's sshd) run detached,
 * each in a process group of its own, so that a stop takes down everything they started and a terminal's
 * Ctrl-C reaches only us. Detached, they would outlive us when we die without running a stop: SIGKILL, the
 * OOM killer, a fatal error. `endWithThisProcess` closes that gap with one watchdog per process: a tiny
 * `node -e` child, itself detached, that holds the read end of a pipe from us and the list of our server
 * groups. Whatever ends this process, the kernel closes our end of the pipe; the watchdog reads EOF and
 * ends every group still listed (SIGTERM, SIGKILL after GRACE_MS). It starts in the background on the
 * first registration (nothing waits for it) and holds nothing of ours open: no event loop reference, no
 * stdout or stderr, so a caller reading our output to its end is never kept waiting by it.
 */

/** How long a group has after SIGTERM before the watchdog sends SIGKILL. */
export const GRACE_MS = 3_000;

/**
 * The watchdog, run by `node -e` (plain JavaScript: no TypeScript loader, which would cost a start-up
 * of a second). Its stdin lines are `+<pgid>` (end this group with us) and `-<pgid>` (it has stopped:
 * forget it, so a pid used again later is never signalled). Its argument is the grace in milliseconds.
 */
const WATCHDOG = `'use strict';
const graceMs = Number(process.argv[1]) || 3000;
const groups = new Set();
let pending = '';
let reaping = false;
const signal = (pgid, sig) => { try { process.kill(-pgid, sig); } catch {} };
const alive = (pgid) => { try { process.kill(-pgid, 0); return true; } catch (e) { return e.code === 'EPERM'; } };
function reap() {
  if (reaping) return;
  reaping = true;
  for (const g of groups) signal(g, 'SIGTERM');
  const since = Date.now();
  setInterval(() => {
    for (const g of groups) if (!alive(g)) groups.delete(g);
    if (groups.size > 0 && Date.now() - since < graceMs) return;
    for (const g of groups) signal(g, 'SIGKILL');
    process.exit(0);
  }, 50);
}
process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk) => {
  pending += chunk;
  for (let nl = pending.indexOf('\\n'); nl >= 0; nl = pending.indexOf('\\n')) {
    const line = pending.slice(0, nl);
    pending = pending.slice(nl + 1);
    const pgid = Number(line.slice(1));
    if (!Number.isInteger(pgid) || pgid <= 1) continue;
    if (line[0] === '+') groups.add(pgid);
    else if (line[0] === '-') groups.delete(pgid);
  }
});
for (const event of ['end', 'close', 'error']) process.stdin.on(event, reap);
for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP']) process.on(sig, reap);
`;

/** The groups registered with the watchdog (to hand a new watchdog if the first one died). */
const groups = new Set<number>();
let watchdog: ChildProcess | undefined;

/** The running watchdog, started (with every registered group) if there is none. */
function theWatchdog(): ChildProcess {
  if (watchdog && watchdog.exitCode === null && watchdog.signalCode === null) return watchdog;
  const child = spawn(process.execPath, ['-e', WATCHDOG, String(GRACE_MS)], {
    stdio: ['pipe', 'ignore', 'ignore'],
    // Its own session: a terminal's Ctrl-C or hang-up goes to us, and our own stop runs in order.
    detached: true,
    // No loader or flags of ours (a test runner's, tsx): plain node starts in tens of milliseconds.
    env: { ...process.env, NODE_OPTIONS: '' },
  });
  child.stdin!.on('error', () => {}); // a watchdog gone: the next registration starts another
  child.unref();
  (child.stdin as unknown as { unref?: () => void }).unref?.();
  watchdog = child;
  for (const pgid of groups) child.stdin!.write(`+${pgid}\n`);
  return child;
}

/**
 * End the process group `child` leads (spawned with `detached: true`) when this process ends, by any
 * cause. The registration is dropped when the child exits, so its pid is never signalled after that.
 */
export function endWithThisProcess(child: ChildProcess): void {
  const pgid = child.pid;
  if (pgid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  groups.add(pgid);
  theWatchdog().stdin!.write(`+${pgid}\n`);
  child.once('exit', () => {
    groups.delete(pgid);
    if (watchdog && watchdog.exitCode === null) watchdog.stdin!.write(`-${pgid}\n`);
  });
}
