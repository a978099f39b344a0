import { spawn } from 'node:child_process';
import { tmpdir } from 'node:os';
import {
  MAX_CHECK_RESULT_LENGTH,
  needsRecheck,
  RECHECK_TIMEOUT_MS,
  recordRechecks,
  verdictStanding,
  type RecheckResult,
  type VerdictStanding,
} from '../core/node-down';
import { readVerdicts, updateVerdicts, verdictsPathFor } from './node-down';
import { mapLimit } from '../core/map-limit';

/**
 * The node-down recheck runner: a verdict's recheck runs on the control host (the CLI at board time,
 * the worker at snapshot time), never on the device — only signed content runs there. It runs through
 * /bin/sh (the operator wrote a command line), with a clean environment and a timeout; the device's id
 * and address reach it only as environment variables, never spliced into the command text.
 */

/** A PATH with the usual tools and nothing from the caller's environment. */
const CLEAN_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

export interface RecheckTarget {
  id: string;
  host: string;
  port?: number;
}

/** Run one recheck: exit 0 within the timeout is "the device is back"; anything else is "still down". */
export function runRecheck(
  command: string,
  device: RecheckTarget,
  opts: { timeoutMs?: number; now?: () => number } = {},
): Promise<RecheckResult> {
  const timeoutMs = opts.timeoutMs ?? RECHECK_TIMEOUT_MS;
  const at = () => new Date((opts.now ?? Date.now)()).toISOString();
  return new Promise((resolve) => {
    const child = spawn('/bin/sh', ['-c', command], {
      cwd: tmpdir(),
      env: {
        PATH: CLEAN_PATH,
        LANG: 'C',
        WAVEGATE_DEVICE: device.id,
        WAVEGATE_HOST: device.host,
        ...(device.port !== undefined ? { WAVEGATE_PORT: String(device.port) } : {}),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
      // Its own process group: a timeout ends the command and everything it started.
      detached: true,
    });
    let output = '';
    const collect = (chunk: Buffer) => {
      if (output.length < MAX_CHECK_RESULT_LENGTH) output += chunk.toString('utf8');
    };
    child.stdout.on('data', collect);
    child.stderr.on('data', collect);
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        child.kill('SIGKILL');
      }
    }, timeoutMs);
    const evidence = () => output.replace(/\s+/g, ' ').trim();
    child.on('error', (err) => {
      clearTimeout(timer);
      resolve({ passed: false, result: `could not run: ${err.message}`.slice(0, MAX_CHECK_RESULT_LENGTH), at: at() });
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const said = evidence();
      if (timedOut)
        resolve({
          passed: false,
          result: `timed out after ${timeoutMs / 1000}s${said ? `: ${said}` : ''}`.slice(0, MAX_CHECK_RESULT_LENGTH),
          at: at(),
        });
      else if (code === 0)
        resolve({
          passed: true,
          result: `exit 0${said ? `: ${said}` : ''}`.slice(0, MAX_CHECK_RESULT_LENGTH),
          at: at(),
        });
      else
        resolve({
          passed: false,
          result: `${code === null ? `killed by ${signal}` : `exit ${code}`}${said ? `: ${said}` : ''}`.slice(
            0,
            MAX_CHECK_RESULT_LENGTH,
          ),
          at: at(),
        });
    });
  });
}

export interface JudgeOptions {
  /** The inventory whose verdicts file (beside it) is read. */
  inventoryPath: string;
  /** The devices to judge (a snapshot page, or the board's devices). */
  devices: readonly RecheckTarget[];
  /** The whole inventory, when the caller holds it: a verdict naming another device is refused (intake/node-down.ts). */
  inventory?: readonly { id: string }[];
  /** Who lifts a verdict whose recheck passes, in the file's history (`worker <identity>`, the CLI user). */
  by: string;
  timeoutMs?: number;
  concurrency?: number;
  now?: () => number;
  /** Called after each recheck (the snapshot activity heartbeats). */
  onCheck?: () => void;
}

/**
 * Where each of `devices`' verdicts stands now: every verdict that still holds is rechecked; a passing
 * recheck lifts it and the file records that (history entry `lifted-by-recheck`); one still down keeps
 * its last check. Expired verdicts are not rechecked and stay in the file, as `expired`, until an
 * operator marks the device again or lifts it. Devices without a verdict are absent from the answer.
 */
export async function judgeVerdicts(opts: JudgeOptions): Promise<Map<string, VerdictStanding>> {
  const path = verdictsPathFor(opts.inventoryPath);
  const file = readVerdicts(path, opts.inventory ? { inventory: opts.inventory } : {});
  const standings = new Map<string, VerdictStanding>();
  if (!file.verdicts.length) return standings;
  const now = opts.now ?? Date.now;
  const byId = new Map(file.verdicts.map((v) => [v.device, v]));
  const judged = opts.devices.filter((d) => byId.has(d.id));
  const checks = new Map<string, { since: string; check: RecheckResult }>();
  await mapLimit(judged, opts.concurrency ?? 8, async (device) => {
    const verdict = byId.get(device.id)!;
    if (!needsRecheck(verdict, now())) {
      standings.set(device.id, verdictStanding(verdict, now()));
      return;
    }
    const check = await runRecheck(verdict.recheck, device, { timeoutMs: opts.timeoutMs, now });
    opts.onCheck?.();
    checks.set(device.id, { since: verdict.since, check });
    standings.set(device.id, verdictStanding(verdict, now(), check));
  });
  if (checks.size) updateVerdicts(path, (current) => recordRechecks(current, checks, opts.by));
  return standings;
}
