import type { ApplyHolder, ApplyLockClaim, ApplyLockRecord } from './types';

/**
 * The device side of an exclusive, resumable apply (docs/formats.md, "The apply lock"), as POSIX shell
 * run in the login's session. Everything lives in `$HOME/.wavegate/profiles/<profile>/`:
 *
 *   apply.lock/            the lock: `mkdir` is the atomic test-and-set
 *     owner                key=value lines: rollout, run, activity, attempt, revision, step, taken, attemptAt
 *     launched             created with noclobber by the one launch this lock ever gets
 *     pid, apply.pid       the detached wrapper and the apply process under it
 *     out                  the apply's stdout and stderr
 *     exitcode             the apply's exit status, written (by rename) when it ends
 *   last-apply/            the most recent released lock, with `released` saying why
 *
 * The profile name is checked by the caller (it is a path component); every other value is reduced to
 * a safe character set before it reaches the shell.
 */

/** A value as the device records it: no quoting problems, no newlines, bounded. */
export function deviceValue(value: string | number): string {
  return String(value)
    .replace(/[^A-Za-z0-9._:@/+=-]/g, '_')
    .slice(0, 200);
}

/** Single-quote a string for the POSIX shell. */
export function shQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

const dirs = (profile: string) => `P="$HOME/.wavegate/profiles/${profile}"; L="$P/apply.lock"`;

/** The owner file's holder lines (apply-script.ts writes the same). */
export function holderLines(holder: ApplyHolder, atMs: number): string[] {
  return [
    `rollout=${deviceValue(holder.rollout)}`,
    `run=${deviceValue(holder.run)}`,
    `activity=${deviceValue(holder.activity)}`,
    `attempt=${holder.attempt}`,
    `attemptAt=${new Date(atMs).toISOString()}`,
  ];
}

/** The owner-file lines that name this unit (and, with `attempt`, this very attempt). */
export function ownedLines(holder: ApplyHolder, withAttempt = true): string[] {
  return [
    `rollout=${deviceValue(holder.rollout)}`,
    `run=${deviceValue(holder.run)}`,
    `activity=${deviceValue(holder.activity)}`,
    ...(withAttempt ? [`attempt=${holder.attempt}`] : []),
  ];
}

/** `grep` tests that the lock's owner file names this unit (and, with `attempt`, this very attempt). */
export function ownedBy(holder: ApplyHolder, withAttempt: boolean): string {
  return ownedLines(holder, withAttempt)
    .map((l) => `grep -qxF ${shQuote(l)} "$L/owner" 2>/dev/null`)
    .join(' && ');
}

/**
 * Print the lock's record: its owner file, then whether it was launched, the pids, whether either
 * process still runs (checked before the exit code: the wrapper writes the exit code before it exits,
 * so "not running and no exit code" really means it died), and the outcome with the tail of the output.
 */
const REPORT = [
  `cat "$L/owner" 2>/dev/null`,
  `if [ -e "$L/launched" ]; then echo launched=1; else echo launched=0; fi`,
  `p=$(cat "$L/pid" 2>/dev/null); a=$(cat "$L/apply.pid" 2>/dev/null)`,
  `case "$p" in ''|*[!0-9]*) p= ;; esac; case "$a" in ''|*[!0-9]*) a= ;; esac`,
  `echo "pid=$p"`,
  `if { [ -n "$p" ] && kill -0 "$p" 2>/dev/null; } || { [ -n "$a" ] && kill -0 "$a" 2>/dev/null; }; then echo running=1; else echo running=0; fi`,
  `if [ -f "$L/exitcode" ]; then echo "exit=$(cat "$L/exitcode")"; echo '--- tail'; tail -c 400 "$L/out" 2>/dev/null; fi`,
].join('\n');

/** Take the lock, or report who holds it; a retry of the same unit records itself as the holder's attempt. */
export function claimScript(
  profile: string,
  claim: { holder: ApplyHolder; revision: number; step: string; breakOwnerless?: boolean },
  nowMs: number,
): string {
  const owner = [
    ...holderLines(claim.holder, nowMs),
    `revision=${claim.revision}`,
    `step=${deviceValue(claim.step)}`,
    `taken=${new Date(nowMs).toISOString()}`,
  ];
  const attempt = holderLines(claim.holder, nowMs).slice(3);
  const why = `ownerless, broken by ${deviceValue(claim.holder.rollout)} activity ${deviceValue(claim.holder.activity)} attempt ${claim.holder.attempt}: a claim cut off before it named its owner; nothing was launched under it`;
  return [
    dirs(profile),
    `mkdir -p "$P" || exit 1`,
    // A lock without owner and launch: its claimer died between `mkdir` and naming itself (the caller
    // waited first, so no live claimer is that slow). Kept as last-apply, like every released lock.
    ...(claim.breakOwnerless
      ? [
          `if [ -d "$L" ] && [ ! -e "$L/owner" ] && [ ! -e "$L/launched" ]; then rm -rf "$P/last-apply" && mv "$L" "$P/last-apply" && printf '%s\\n' ${shQuote(why)} > "$P/last-apply/released" || exit 1; fi`,
        ]
      : []),
    `if mkdir "$L" 2>/dev/null; then`,
    `  printf '%s\\n' ${owner.map(shQuote).join(' ')} > "$L/owner.tmp" && mv -f "$L/owner.tmp" "$L/owner" || exit 1`,
    `  echo state=acquired`,
    `elif ${ownedBy(claim.holder, false)}; then`,
    `  { grep -v -e '^attempt=' -e '^attemptAt=' "$L/owner"; printf '%s\\n' ${attempt.map(shQuote).join(' ')}; } > "$L/owner.tmp" && mv -f "$L/owner.tmp" "$L/owner" || exit 1`,
    `  echo state=ours`,
    `elif [ -d "$L" ]; then echo state=theirs`,
    `else echo state=retry`,
    `fi`,
    REPORT,
  ].join('\n');
}

export function readScript(profile: string): string {
  return [dirs(profile), `[ -d "$L" ] || { echo state=none; exit 0; }`, `echo state=held`, REPORT].join('\n');
}

/**
 * Start `command` detached inside the lock directory, once: `launched` is created with noclobber, so
 * a second launch (a retry racing a zombie attempt) starts nothing. The wrapper outlives the session
 * (nohup, every descriptor redirected) and records the exit status by rename when the command ends.
 */
export function launchScript(profile: string, command: string): string {
  const wrapper = `sh -c "$1" & echo $! > apply.pid; wait $!; echo $? > exitcode.tmp && mv -f exitcode.tmp exitcode`;
  return [
    dirs(profile),
    `cd "$L" || exit 3`,
    `if ! ( set -C; : > launched ) 2>/dev/null; then echo already-launched; exit 0; fi`,
    `nohup sh -c ${shQuote(wrapper)} wavegate-apply ${shQuote(command)} > out 2>&1 < /dev/null &`,
    `echo $! > pid`,
    `echo launched`,
  ].join('\n');
}

/** Move the lock to last-apply with the reason, only while `holder` (this exact attempt) holds it. */
export function releaseScript(profile: string, holder: ApplyHolder, reason: string): string {
  const why = reason.replace(/[^\x20-\x7e]/g, '?').slice(0, 400);
  return [
    dirs(profile),
    `if ${ownedBy(holder, true)}; then`,
    `  rm -rf "$P/last-apply" && mv "$L" "$P/last-apply" && printf '%s\\n' ${shQuote(why)} > "$P/last-apply/released" && echo released`,
    `else echo not-held; fi`,
  ].join('\n');
}

/** Parse what REPORT printed (after a `state=` line). */
export function parseRecord(stdout: string): { state: string; record: ApplyLockRecord } {
  const [head, tail] = splitOnce(stdout, '\n--- tail\n');
  const kv = new Map<string, string>();
  for (const line of head.split('\n')) {
    const i = line.indexOf('=');
    if (i > 0 && !kv.has(line.slice(0, i))) kv.set(line.slice(0, i), line.slice(i + 1));
  }
  const num = (k: string): number | null => {
    const v = kv.get(k);
    return v !== undefined && /^\d+$/.test(v) ? Number(v) : null;
  };
  const rollout = kv.get('rollout');
  const run = kv.get('run');
  const activity = kv.get('activity');
  const attempt = num('attempt');
  const exit = kv.get('exit');
  return {
    state: kv.get('state') ?? 'unknown',
    record: {
      holder:
        rollout !== undefined && run !== undefined && activity !== undefined && attempt !== null
          ? { rollout, run, activity, attempt }
          : null,
      revision: num('revision'),
      step: kv.get('step') ?? null,
      takenAt: kv.get('taken') ?? null,
      attemptAt: kv.get('attemptAt') ?? null,
      launched: kv.get('launched') === '1',
      pid: num('pid'),
      running: kv.get('running') === '1',
      outcome:
        exit !== undefined ? { code: /^\d+$/.test(exit.trim()) ? Number(exit.trim()) : null, tail: tail ?? '' } : null,
    },
  };
}

function splitOnce(s: string, sep: string): [string, string | undefined] {
  const i = s.indexOf(sep);
  return i < 0 ? [s, undefined] : [s.slice(0, i), s.slice(i + sep.length)];
}

/** `claimScript`'s answer as the session returns it. */
export function parseClaim(stdout: string): ApplyLockClaim | 'retry' {
  const { state, record } = parseRecord(stdout);
  if (state === 'acquired' || state === 'ours' || state === 'theirs') return { state, record };
  return 'retry';
}
