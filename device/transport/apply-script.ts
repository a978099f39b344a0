import { parseRecord, shQuote, deviceValue, ownedBy, ownedLines, holderLines } from './apply-lock';
import type { ApplyHolder, ApplyLockRecord } from './types';

/**
 * A whole device apply as ONE remote shell script (docs/formats.md, "The apply script"): floor check,
 * the apply lock (the very protocol and files of ./apply-lock.ts), verify first, the staging check,
 * the detached apply (at most once per lock), waiting for its recorded outcome, verify after, the
 * marker and the release. A login shell that does real work at start-up is paid once per device, not
 * once per step.
 *
 * The script reports each step as one line `WAVEGATE-STEP <name> <status> <hex detail>` (detail: hex
 * bytes, so any output survives the line format) between `begin` and `end`. The worker parses them
 * strictly (readApplyReport): a report cut short is never taken for success.
 *
 * The decisions the device cannot take stop the script with what the worker needs to decide, and the
 * worker runs it again with its answer: a floor the shell cannot compare (`floor check`), a lock held
 * by another run whose closing only Temporal can prove (`lock theirs`), payload files that are not on
 * the device yet (`stage needed`).
 */

/** Bumped when the report's meaning changes: a worker never reads a report of another version. */
export const APPLY_SCRIPT_VERSION = 'wavegate-apply-1';

export interface ApplyScriptInput {
  profile: string;
  revision: number;
  /** `apply` or `rollback` (recorded in the lock's owner file and in the release reasons). */
  step: 'apply' | 'rollback';
  holder: ApplyHolder;
  /** Worker clock, epoch ms: the owner file's timestamps. */
  nowMs: number;
  /** Epoch ms the floor's revert window is judged at (the apply's `now`). */
  floorNowMs: number;
  /** The full commands, each already wrapped by `shellFor` (cd "$HOME", $WAVEGATE_STAGING). */
  verify: string;
  apply: string;
  /** The staging directory relative to $HOME, and the payload files that must be there (empty: none). */
  stagingDir: string;
  payload: readonly { name: string; sha256: string; size: number }[];
  /**
   * The worker sends the payload files on the script's standard input, one after the other (their
   * signed sizes tell them apart): a device that lacks them writes them and checks their digests in
   * the same command. Without it (large payloads), a device that lacks them stops with `stage needed`.
   */
  streamed?: boolean;
  /** The worker already decided the floor (it read it, or its own rule allowed what the shell could not compare). */
  skipFloor?: boolean;
  /** This attempt staged the payload after its own previous script ran verify first under the lock. */
  afterStage?: boolean;
  /** Temporal proved this holder's run closed: break its lock (only while that exact attempt holds it), with this reason. */
  breakTheirs?: { holder: ApplyHolder; reason: string };
  /** How long a lock may stay without an owner before it counts as a dead claimer's (seconds). */
  ownerlessGraceSeconds: number;
  /**
   * A device whose marker is above this revision is ahead of the rollout: the script stops before the
   * lock with `ahead above` and nothing runs (the plan's "ahead" rule, learned at apply now that the
   * snapshot reads no marker). Absent: not checked (rollbacks go down on purpose).
   */
  aheadAbove?: number;
  /**
   * The floor this apply writes once it is confirmed (core/floor.ts; absent: the floor is not written,
   * as in rollouts recorded before the floor moved into the apply). `raise`: the file's text after a
   * fresh apply (verify passed, marker written) without its `from` and `at`: the script adds `from`
   * (`raiseFrom`, kept at or above the revision of the floor it replaces, so no raise opens a way below a
   * floor already there) and `at` (the device's own clock). `inPlace`: the text (without `at`) written
   * when verify first found the revision already there, and only over no floor or a floor below
   * `revision` (a device this rollout did not change opens no way back).
   */
  floorWrite?: { raise?: string; raiseFrom?: number; inPlace?: string; rollout?: string; run?: string };
  /**
   * This apply is the compensation of the rollout and run that raised the floor (floorTag'd values): once
   * it is in place, a floor those raised is replaced by `text` (core/floor.ts stepDownFloor, without its
   * `at`): the revision it went back to, with no way back. Any other floor stays.
   */
  floorRestore?: { rollout: string; run: string; text: string };
}

const STEP = 'WAVEGATE-STEP';

/**
 * What the launch runs detached, in the lock directory, with the apply command as $1: the apply, its
 * pid, its exit code. It starts the apply only while its directory still is the live lock: a launch
 * starved so long that the next attempt took the lock over (moved it aside as last-apply) starts
 * nothing. `-ef` is the shell's own test; a shell without it (status 2) goes on as before.
 */
export const APPLY_WRAPPER = `[ . -ef ../apply.lock ] 2>/dev/null; if [ $? = 1 ]; then echo 'not started: its apply lock was taken over before it started' > out; exit 0; fi; sh -c "$1" & echo $! > apply.pid; wait $!; echo $? > exitcode.tmp && mv -f exitcode.tmp exitcode`;

/** A report detail the worker knows when it writes the script, as the hex the report carries. */
const hex = (text: string): string => Buffer.from(text, 'utf8').toString('hex');
/** wg_release's two arguments for a reason the worker knows: the text, and its hex for the report. */
const reason = (text: string): string => `${shQuote(text)} ${hex(text)}`;

/**
 * What the script does to the floor once the revision is in place (after the marker): restore the floor
 * a compensated rollout raised, raise it after a fresh apply, or (found in place) raise it only from
 * below. Builtins apart from one rename.
 */
function floorAfter(input: ApplyScriptInput, path: 'raise' | 'in-place'): string[] {
  if (input.floorRestore)
    return [
      `wg_floor_restore ${shQuote(input.floorRestore.rollout)} ${shQuote(input.floorRestore.run)} ${shQuote(input.floorRestore.text)}`,
    ];
  if (!input.floorWrite) return [];
  const { rollout, run } = input.floorWrite;
  const ours =
    rollout !== undefined && run !== undefined
      ? `[ "$wg_fro" = ${shQuote(rollout)} ] && [ "$wg_frn" = ${shQuote(run)} ]`
      : 'false';
  // Raised already by this run (an attempt cut off between its floor and its release): written again it
  // would take the floor it replaced for its own and keep `from` at its own revision.
  if (path === 'raise')
    return input.floorWrite.raise !== undefined
      ? [
          `wg_floor_read`,
          `if ${ours}; then wg_note floor raised; else wg_floor_raise ${shQuote(input.floorWrite.raise)} ${Math.trunc(input.floorWrite.raiseFrom ?? input.revision)}; fi`,
        ]
      : [];
  if (input.floorWrite.inPlace === undefined) return [];
  // A floor this very run raised means an earlier attempt of this apply finished here (its worker died
  // before it heard): the rollout did change the device (`floor ours`), it was not found in place.
  return [
    `wg_floor_read; wg_below=1`,
    `case "$wg_fr" in ''|*[!0-9]*) ;; *) if [ \${#wg_fr} -gt 15 ] || [ "$wg_fr" -ge ${input.revision} ]; then wg_below=0; fi ;; esac`,
    `if ${ours}; then wg_note floor ours; elif [ "$wg_below" = 1 ]; then wg_floor_write ${shQuote(input.floorWrite.inPlace)}; else wg_note floor kept; fi`,
  ];
}

/** The script. Values reach the shell only through shQuote / deviceValue; the profile name is checked by the caller. */
export function applyScript(input: ApplyScriptInput): string {
  const { holder, revision, step } = input;
  const at = new Date(input.nowMs).toISOString();
  const owner = [
    ...holderLines(holder, input.nowMs),
    `revision=${revision}`,
    `step=${deviceValue(step)}`,
    `taken=${at}`,
  ];
  const attempt = holderLines(holder, input.nowMs).slice(3);
  const me = `${deviceValue(holder.rollout)} activity ${deviceValue(holder.activity)} attempt ${holder.attempt}`;
  const ownerless = `ownerless, broken by ${me}: a claim cut off before it named its owner; nothing was launched under it`;
  const check = input.payload.map((f) => `${f.sha256}  ${f.name}`).join('\n');
  const lines: string[] = [
    `wg_P="$HOME/.wavegate/profiles/${input.profile}"; wg_L="$wg_P/apply.lock"; L="$wg_L"`,
    // Detail as hex bytes (od is POSIX; base64 is not): one line whatever the output holds.
    `wg_hex() { od -An -v -tx1 | tr -d ' \\n'; }`,
    `wg_say() { printf '${STEP} %s %s ' "$1" "$2"; wg_hex; echo; }`,
    // A step whose detail is none, or already hex (the worker encoded what it knows): printf alone.
    `wg_note() { printf '${STEP} %s %s %s\\n' "$1" "$2" "$3"; }`,
    `wg_end() { printf '${STEP} end %s \\n' "$1"; exit 0; }`,
    `wg_nl='`,
    `'`,
    // The revision's verify, verbatim, in a subshell: run by the login shell as a command of its own would be.
    `wg_verify() (`,
    input.verify,
    `)`,
    // Verify after the apply reports its output's last 400 bytes (they explain a failure); verify first
    // only its exit code: failing is what it does on every device that needs the change, and its
    // output then (a missing file, a mismatch) is noise the worker never reads.
    `wg_run_verify() { wg_out=$(wg_verify 2>&1 < /dev/null); wg_code=$?; if [ -z "$wg_out" ]; then wg_note "$1" "$wg_code"; elif [ \${#wg_out} -le 400 ]; then printf '%s' "$wg_out" | wg_say "$1" "$wg_code"; else printf '%s' "$wg_out" | tail -c 400 | wg_say "$1" "$wg_code"; fi; }`,
    `wg_verify_first() { wg_verify > /dev/null 2>&1 < /dev/null; wg_code=$?; wg_note verify-first "$wg_code"; }`,
    // The lock's state, read once per look: running is checked before the exit code (the wrapper writes
    // the exit code before it exits, so "not running and no exit code" really means it died).
    // Builtins only (read, kill -0, test): this runs in every device's apply, and on a busy host each
    // process the script starts costs about a millisecond. A pid or exit code file holds one line.
    `wg_look() {`,
    `  if [ -e "$wg_L/launched" ]; then wg_launched=1; else wg_launched=0; fi`,
    // \`launched\` holds the pid of the script that launched (or is launching) the apply.
    `  wg_lp=; if [ "$wg_launched" = 1 ]; then IFS= read -r wg_lp 2>/dev/null < "$wg_L/launched"; case "$wg_lp" in ''|*[!0-9]*) wg_lp= ;; esac; fi`,
    `  if [ -n "$wg_lp" ] && kill -0 "$wg_lp" 2>/dev/null; then wg_launching=1; else wg_launching=0; fi`,
    `  wg_p=; wg_a=; IFS= read -r wg_p 2>/dev/null < "$wg_L/pid"; IFS= read -r wg_a 2>/dev/null < "$wg_L/apply.pid"`,
    `  case "$wg_p" in ''|*[!0-9]*) wg_p= ;; esac; case "$wg_a" in ''|*[!0-9]*) wg_a= ;; esac`,
    `  if { [ -n "$wg_p" ] && kill -0 "$wg_p" 2>/dev/null; } || { [ -n "$wg_a" ] && kill -0 "$wg_a" 2>/dev/null; }; then wg_running=1; else wg_running=0; fi`,
    `  if [ -f "$wg_L/exitcode" ]; then wg_done=1; wg_exit=; IFS= read -r wg_exit 2>/dev/null < "$wg_L/exitcode"; else wg_done=0; wg_exit=; fi`,
    `}`,
    `wg_inspect() { wg_owner=$(cat "$wg_L/owner" 2>/dev/null); wg_look; }`,
    // The apply under the lock ended without an outcome: report its record and stop (the next attempt takes over).
    `wg_gone() { wg_owner=$(cat "$wg_L/owner" 2>/dev/null); wg_record | wg_say apply gone; wg_end stop; }`,
    // Whether the owner file names this very attempt: the lines ownedBy (apply-lock.ts) greps for,
    // compared as whole lines by the shell itself.
    `wg_line() { case "$wg_nl$wg_ob$wg_nl" in *"$wg_nl$1$wg_nl"*) return 0 ;; esac; return 1; }`,
    `wg_holding() {`,
    `  wg_ob=; [ -f "$wg_L/owner" ] || return 1`,
    `  while IFS= read -r wg_l || [ -n "$wg_l" ]; do wg_ob="$wg_ob$wg_nl$wg_l"; done 2>/dev/null < "$wg_L/owner"`,
    `  ${ownedLines(holder)
      .map((l) => `wg_line ${shQuote(l)}`)
      .join(' && ')}`,
    `}`,
    // The record in the format of apply-lock.ts REPORT (parseRecord reads both).
    `wg_record() {`,
    `  [ -n "$wg_owner" ] && printf '%s\\n' "$wg_owner"`,
    `  echo "launched=$wg_launched"; echo "pid=$wg_p"; echo "running=$wg_running"`,
    `  if [ "$wg_done" = 1 ]; then echo "exit=$wg_exit"; echo '--- tail'; tail -c 400 "$wg_L/out" 2>/dev/null; fi`,
    `  return 0`,
    `}`,
    `wg_field() { printf '%s\\n' "$wg_owner" | sed -n "s/^$1=//p" | head -n 1; }`,
    `wg_has() { printf '%s\\n' "$wg_owner" | grep -q "^$1="; }`,
    // Put the lock aside as last-apply with why, while it still is what we looked at.
    `wg_put_aside() {`,
    `  if [ "$(cat "$wg_L/owner" 2>/dev/null)" = "$wg_owner" ]; then rm -rf "$wg_P/last-apply" && mv "$wg_L" "$wg_P/last-apply" && printf '%s\\n' "$1" > "$wg_P/last-apply/released" || { wg_record | wg_say lock failed; wg_end stop; }; fi`,
    `}`,
    // The reason, and (when the worker knew it) the same reason as hex: reported without od.
    `wg_release() {`,
    `  if wg_holding; then`,
    `    if wg_err=$( { if [ -e "$wg_P/last-apply" ]; then rm -rf "$wg_P/last-apply"; fi && mv "$wg_L" "$wg_P/last-apply" && printf '%s\\n' "$1" > "$wg_P/last-apply/released"; } 2>&1 ); then wg_st=released; else printf '%s' "$wg_err" | wg_say release failed; wg_end stop; fi`,
    `  else wg_st=not-held; fi`,
    `  if [ -n "$2" ]; then wg_note release "$wg_st" "$2"; else printf '%s' "$1" | wg_say release "$wg_st"; fi`,
    `}`,
    `wg_marker() {`,
    `  if wg_err=$( { { [ -d "$wg_P" ] || mkdir -p "$wg_P"; } && printf '%s\\n' ${revision} > "$wg_P/revision"; } 2>&1 ); then wg_note marker written; else printf '%s' "$wg_err" | wg_say marker failed; wg_end stop; fi`,
    `}`,
    // The floor (core/floor.ts), read with builtins: its text, revision and the rollout and run that raised it.
    `wg_F="$wg_P/floor"`,
    `wg_floor_read() {`,
    `  wg_fb=; wg_fr=; wg_fro=; wg_frn=; [ -f "$wg_F" ] || return 0`,
    `  while IFS= read -r wg_l || [ -n "$wg_l" ]; do wg_fb="$wg_fb$wg_l$wg_nl"; case "$wg_l" in revision=*) wg_fr=\${wg_l#revision=} ;; rollout=*) wg_fro=\${wg_l#rollout=} ;; run=*) wg_frn=\${wg_l#run=} ;; esac; done 2>/dev/null < "$wg_F"`,
    `}`,
    // The device's own clock in epoch ms (`date +%s` is in every shell we reach; without it, the worker's).
    `wg_now_ms() { wg_s=$(date +%s 2>/dev/null); case "$wg_s" in ''|*[!0-9]*) wg_ms=${Math.trunc(input.floorNowMs)} ;; *) wg_ms="\${wg_s}000" ;; esac; }`,
    // Write the floor in one rename, stamped with the device's clock: the time its way back counts from.
    // Nothing removes a floor: one only ever replaces another.
    `wg_floor_write() {`,
    `  wg_now_ms`,
    `  if wg_err=$( { printf '%sat=%s\\n' "$1" "$wg_ms" > "$wg_F.tmp" && mv -f "$wg_F.tmp" "$wg_F"; } 2>&1 ); then wg_note floor "\${2:-raised}"; else printf '%s' "$wg_err" | wg_say floor failed; wg_end stop; fi`,
    `}`,
    // A raise keeps its way back at or above the floor it replaces: from = min(revision, max(from, floor)).
    `wg_floor_raise() {`,
    `  wg_from=$2`,
    `  case "$wg_fr" in ''|*[!0-9]*) ;; *) if [ \${#wg_fr} -le 15 ] && [ "$wg_fr" -gt "$wg_from" ]; then if [ "$wg_fr" -gt ${revision} ]; then wg_from=${revision}; else wg_from=$wg_fr; fi; fi ;; esac`,
    // from goes back in its place, after the first line (revision=): the file reads as core/floor.ts formats it.
    `  wg_floor_write "\${1%%"$wg_nl"*}\${wg_nl}from=$wg_from$wg_nl\${1#*"$wg_nl"}"`,
    `}`,
    // The compensation of the run that raised the floor: the floor steps down to where it went, for good.
    `wg_floor_restore() {`,
    `  wg_floor_read`,
    `  if [ "$wg_fro" = "$1" ] && [ "$wg_frn" = "$2" ]; then wg_floor_write "$3" restored; else wg_note floor kept; fi`,
    `}`,
    `printf '${STEP} begin ${APPLY_SCRIPT_VERSION} \\n'`,
  ];

  if (input.aheadAbove !== undefined) {
    lines.push(
      `wg_m=; IFS= read -r wg_m 2>/dev/null < "$wg_P/revision"`,
      `case "$wg_m" in ''|*[!0-9]*) ;; *) if [ \${#wg_m} -le 15 ] && [ "$wg_m" -gt ${Math.trunc(input.aheadAbove)} ]; then printf '%s' "$wg_m" | wg_say ahead above; wg_end stop; fi ;; esac`,
    );
  }

  // Floor (core/floor.ts floorRefusal): at or above it the shell allows; below it only the worker's
  // rule can tell a compensation or a revert of the rollout that raised it, so the worker decides
  // (`floor check`, with the floor's text) and runs the script again with its answer.
  if (!input.skipFloor) {
    lines.push(
      `wg_floor_read`,
      `case "$wg_fr" in ''|*[!0-9]*) ;; *)`,
      // With the floor, the device's clock: its way back is judged on it (core/floor.ts), not the worker's.
      `  if [ \${#wg_fr} -gt 15 ] || [ ${revision} -lt "$wg_fr" ]; then { printf '%s' "$wg_fb" | head -c 2048; wg_now_ms; printf '\\nnow=%s\\n' "$wg_ms"; } | wg_say floor check; wg_end stop; fi ;;`,
      `esac`,
      `wg_note floor ok`,
    );
  }

  // The lock (docs/formats.md "The apply lock"), with claimLock's decisions where the device can take them.
  lines.push(
    `wg_mode=; wg_waited=0; wg_tries=0`,
    `while [ -z "$wg_mode" ]; do`,
    `  wg_tries=$((wg_tries + 1))`,
    `  if [ "$wg_tries" -gt 6 ]; then : | wg_say lock busy; wg_end stop; fi`,
    `  if [ ! -d "$wg_P" ] && ! wg_err=$(mkdir -p "$wg_P" 2>&1); then printf '%s' "$wg_err" | wg_say lock failed; wg_end stop; fi`,
    `  if mkdir "$wg_L" 2>/dev/null; then`,
    `    if ! wg_err=$( { printf '%s\\n' ${owner.map(shQuote).join(' ')} > "$wg_L/owner.tmp" && mv -f "$wg_L/owner.tmp" "$wg_L/owner"; } 2>&1 ); then printf '%s' "$wg_err" | wg_say lock failed; wg_end stop; fi`,
    // Just made by this script: nothing launched, no pid, no outcome, and the owner is what it wrote.
    `    wg_state=acquired; wg_launched=0; wg_p=; wg_a=; wg_running=0; wg_done=0; wg_exit=`,
    `  elif ${ownedBy(holder, false)}; then`,
    `    if ! wg_err=$( { { grep -v -e '^attempt=' -e '^attemptAt=' "$wg_L/owner"; printf '%s\\n' ${attempt.map(shQuote).join(' ')}; } > "$wg_L/owner.tmp" && mv -f "$wg_L/owner.tmp" "$wg_L/owner"; } 2>&1 ); then printf '%s' "$wg_err" | wg_say lock failed; wg_end stop; fi`,
    `    wg_state=ours`,
    `  elif [ -d "$wg_L" ]; then wg_state=theirs`,
    `  else continue`,
    `  fi`,
    `  if [ "$wg_state" != acquired ]; then wg_inspect; fi`,
    `  wg_interrupted=0; if [ "$wg_launched" = 1 ] && [ -n "$wg_p" ] && [ "$wg_running" = 0 ] && [ "$wg_done" = 0 ]; then wg_interrupted=1; fi`,
    `  case "$wg_state" in`,
    `  acquired) wg_note lock acquired ${hex(`${owner.join('\n')}\nlaunched=0\npid=\nrunning=0\n`)}; wg_mode=fresh ;;`,
    `  ours)`,
    // Launched, yet neither the wrapper's pid nor the apply's, nor an outcome. While the script that
    // marked the launch still runs (an earlier attempt of this unit its worker gave up on, slow to
    // start it), the launch is its: wait for it like any reattach. Its script gone: a launch a moment
    // from recording its pid, or one cut off between marking the launch and starting it (nothing runs
    // and nothing ever will). Wait the moment out once; still nothing: it never started, and this
    // attempt takes over as from an interrupted one.
    `    wg_unstarted=0; if [ "$wg_launched" = 1 ] && [ -z "$wg_p" ] && [ -z "$wg_a" ] && [ "$wg_done" = 0 ]; then wg_unstarted=1; fi`,
    `    if [ "$wg_launched" = 0 ]; then wg_record | wg_say lock ours; wg_mode=ours-unlaunched`,
    `    elif [ "$wg_unstarted" = 1 ] && [ "$wg_launching" = 1 ]; then wg_record | wg_say lock ours; wg_mode=reattach`,
    `    elif [ "$wg_unstarted" = 1 ] && [ "$wg_waited" = 0 ]; then wg_waited=1; sleep ${input.ownerlessGraceSeconds}`,
    `    elif [ "$wg_unstarted" = 1 ]; then wg_record | wg_say lock interrupted; wg_release "interrupted: launched but never started (no pid recorded within ${input.ownerlessGraceSeconds} s; attempt ${holder.attempt} takes over)"`,
    `    elif [ "$wg_interrupted" = 0 ]; then wg_record | wg_say lock ours; wg_mode=reattach`,
    `    else wg_record | wg_say lock interrupted; wg_release "interrupted: pid $wg_p is not running and wrote no outcome (attempt ${holder.attempt} takes over)"; fi ;;`,
    `  theirs)`,
    `    wg_holder=0; if wg_has rollout && wg_has run && wg_has activity; then case "$(wg_field attempt)" in ''|*[!0-9]*) ;; *) wg_holder=1 ;; esac; fi`,
    `    if [ "$wg_holder" = 0 ] && [ "$wg_launched" = 0 ] && [ "$wg_running" = 0 ] && [ "$wg_waited" = 0 ]; then`,
    // No owner and nothing launched: a claim mid-way (a moment) or cut off for good (its claimer was
    // killed between taking the lock and naming itself). Wait out the moment, then break it.
    `      wg_waited=1; sleep ${input.ownerlessGraceSeconds}`,
    `      if [ -d "$wg_L" ] && [ ! -e "$wg_L/owner" ] && [ ! -e "$wg_L/launched" ]; then rm -rf "$wg_P/last-apply" && mv "$wg_L" "$wg_P/last-apply" && printf '%s\\n' ${shQuote(ownerless)} > "$wg_P/last-apply/released" || { : | wg_say lock failed; wg_end stop; }; : | wg_say lock ownerless-broken; fi`,
    `    elif [ "$wg_holder" = 0 ] || [ "$wg_running" = 1 ] || { [ "$wg_launched" = 1 ] && [ -z "$wg_p" ] && [ "$wg_done" = 0 ]; }; then wg_record | wg_say lock held; wg_end stop`,
    `    elif [ "$wg_interrupted" = 1 ]; then wg_record | wg_say lock stale; wg_put_aside "stale, broken by ${me}: its pid $wg_p is not running and wrote no outcome"`,
    `    elif [ "$(wg_field rollout)" = ${shQuote(deviceValue(holder.rollout))} ] && [ "$(wg_field run)" = ${shQuote(deviceValue(holder.run))} ]; then wg_record | wg_say lock stale; wg_put_aside "stale, broken by ${me}: activity $(wg_field activity | tr -cd 'A-Za-z0-9._:@/+=-') of the same run has closed"`,
    ...(input.breakTheirs
      ? [
          `    elif ${ownedBy(input.breakTheirs.holder, true)}; then wg_record | wg_say lock stale; wg_put_aside ${shQuote(input.breakTheirs.reason.replace(/[^\x20-\x7e]/g, '?').slice(0, 400))}`,
        ]
      : []),
    `    else wg_record | wg_say lock theirs; wg_end stop; fi ;;`,
    `  esac`,
    `done`,
  );

  const launch = [
    // Started at most once per lock: `launched` is created with noclobber, so a second launch (a zombie
    // attempt got there first) starts nothing and is waited for like a reattach. The wrapper runs in a
    // session of its own where the device has setsid, so nothing that ends this script's process group
    // (a dropped connection) ends the apply.
    `wg_wpid=`,
    `if ! cd "$wg_L" 2>/dev/null; then echo 'cannot enter the lock directory' | wg_say launch 3; wg_release ${reason(`${step} could not start: exit 3`)}; wg_end stop; fi`,
    `if ( set -C; echo $$ > launched ) 2>/dev/null; then`,
    // setsid alone detaches it (a session of its own has no terminal to hang up); nohup only without it.
    `  if command -v setsid > /dev/null 2>&1; then wg_ss=setsid; else wg_ss=nohup; fi`,
    `  $wg_ss sh -c ${shQuote(APPLY_WRAPPER)} wavegate-apply ${shQuote(input.apply)} > out 2>&1 < /dev/null &`,
    `  wg_wpid=$!; echo "$wg_wpid" > pid`,
    `  wg_note launch launched`,
    `else wg_note launch already-launched; fi`,
    `cd "$HOME" 2>/dev/null || cd /`,
  ];

  // Wait for the outcome recorded under our lock: our own child is waited for, another's polled.
  const wait = [
    `wg_gone_waited=0; if [ -n "$wg_wpid" ]; then wait "$wg_wpid" 2>/dev/null; fi`,
    `while :; do`,
    `  if [ ! -d "$wg_L" ]; then wg_note apply lost; wg_end stop; fi`,
    `  wg_look`,
    `  if [ "$wg_done" = 1 ]; then break; fi`,
    `  if [ "$wg_running" = 0 ] && [ -n "$wg_p" ]; then wg_gone; fi`,
    // Another script's launch we wait for: if that script dies with nothing started, give its wrapper
    // the moment it may still need to record itself, then the apply is gone (the next attempt takes over).
    `  if [ "$wg_running" = 0 ] && [ -z "$wg_p" ] && [ -z "$wg_a" ] && [ "$wg_launching" = 0 ]; then`,
    `    if [ "$wg_gone_waited" = 1 ]; then wg_gone; fi`,
    `    wg_gone_waited=1; sleep ${input.ownerlessGraceSeconds}; continue`,
    `  fi`,
    `  sleep 0.2 2>/dev/null || sleep 1`,
    `done`,
    `case "$wg_exit" in ''|*[!0-9]*) wg_code=unknown ;; *) wg_code=$wg_exit ;; esac`,
    `if [ -s "$wg_L/out" ]; then tail -c 400 "$wg_L/out" 2>/dev/null | wg_say apply "$wg_code"; else wg_note apply "$wg_code"; fi`,
    `if [ "$wg_code" != 0 ]; then wg_release "${step} exited $(if [ "$wg_code" = unknown ]; then echo null; else echo "$wg_code"; fi)"; wg_end stop; fi`,
    `wg_run_verify verify`,
    `if [ "$wg_code" != 0 ]; then wg_release "verify after ${step} exited $wg_code"; wg_end stop; fi`,
    `wg_marker`,
    ...floorAfter(input, 'raise'),
    `wg_release ${reason(`${step} of r${revision} done: verified, marker written`)}`,
    `wg_end applied`,
  ];

  // Payload: present with the signed digests, or written from the stream (read whole first: a pipe
  // cannot be cut by byte counts reliably) and checked, or stop for the worker to upload.
  let offset = 1;
  // One file (the usual case): the stream is that file, written in place and then checked.
  const write =
    input.payload.length === 1
      ? `cat > "$wg_S/${input.payload[0]!.name}"`
      : `cat > "$wg_S/.wavegate-stream" && ${input.payload
          .map((f) => {
            const cut = `tail -c +${offset} "$wg_S/.wavegate-stream" | head -c ${f.size} > "$wg_S/.${f.name}.tmp" && mv -f "$wg_S/.${f.name}.tmp" "$wg_S/${f.name}"`;
            offset += f.size;
            return cut;
          })
          .join(' && ')} && rm -f "$wg_S/.wavegate-stream"`;
  const stage = input.payload.length
    ? [
        `wg_S="$HOME/${input.stagingDir}"`,
        `wg_staged() ( cd "$wg_S" 2>/dev/null && printf '%s\\n' ${shQuote(check)} | sha256sum -c --quiet - > /dev/null 2>&1 )`,
        `if wg_staged; then wg_note stage present`,
        ...(input.streamed
          ? [
              `elif { [ -d "$wg_S" ] || mkdir -p "$wg_S" 2>/dev/null; } && ${write} && wg_staged; then wg_note stage streamed`,
            ]
          : []),
        `else ${input.payload.length === 1 ? '' : 'rm -f "$wg_S/.wavegate-stream"; '}wg_note stage needed; wg_end stop; fi`,
      ]
    : [];

  lines.push(
    `if [ "$wg_mode" = reattach ]; then`,
    `  wg_note reattach ok`,
    ...wait.map((l) => `  ${l}`),
    `fi`,
    // Verify first, unless this attempt ran it under this very lock before it went to stage the payload.
    `if [ "$wg_mode" = fresh ] || [ ${input.afterStage ? 1 : 0} = 0 ]; then`,
    `  wg_verify_first`,
    `  if [ "$wg_code" = 0 ]; then`,
    `    wg_marker`,
    ...floorAfter(input, 'in-place').map((l) => `    ${l}`),
    `    wg_release ${reason(`r${revision} already in place (verify only)`)}; wg_end already-applied`,
    `  fi`,
    `fi`,
    ...stage,
    ...launch,
    ...wait,
  );
  return `${lines.join('\n')}\n`;
}

/** One report line. */
export interface ReportStep {
  name: string;
  status: string;
  detail: string;
}

const NAMES = new Set([
  'ahead',
  'floor',
  'lock',
  'reattach',
  'verify-first',
  'stage',
  'launch',
  'apply',
  'verify',
  'marker',
  'release',
]);
const LINE = /^WAVEGATE-STEP ([a-z-]+) ([a-z0-9-]+) ([0-9a-f]*)$/;
const ENDS = new Set(['applied', 'already-applied', 'stop']);

/** What the report says, for the worker to act on. Derived only from report lines; never guessed. */
export type ApplyReport =
  | { kind: 'applied'; reattached: boolean; staged: boolean; steps: ReportStep[] }
  | { kind: 'already-applied'; steps: ReportStep[] }
  | { kind: 'floor'; verdict: 'refused' | 'check'; text: string }
  /** The device's marker is above `aheadAbove`: nothing ran. */
  | { kind: 'ahead'; marker: number }
  | { kind: 'lock-held' | 'lock-theirs'; record: ApplyLockRecord }
  | { kind: 'lock-busy' }
  | { kind: 'stage-needed' }
  /** A step of the unit ran and said no; `failed` names it as StepFailed does. */
  | {
      kind: 'failed';
      failed:
        | 'apply'
        | 'rollback'
        | 'verify'
        | 'take apply lock'
        | 'write marker'
        | 'write floor'
        | 'release apply lock';
      code: number | null;
      output: string;
      reattached: boolean;
    }
  /** The apply under our lock vanished (gone without an outcome, or the lock itself): verify decides on a retry. */
  | { kind: 'apply-gone'; why: string };

/** Why a report cannot be read: the worker treats it as a dropped session (a retry reattaches). */
export class ReportUnreadable extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ReportUnreadable';
  }
}

/**
 * The step lines of a script's stdout. Lines before `begin` are the login shell's own (an rc file that
 * prints); from `begin` on every line must be a report line, and `end` must be the last one.
 */
export function parseReportLines(stdout: string): { steps: ReportStep[]; end: string } {
  const lines = stdout.split('\n');
  if (lines.at(-1) === '') lines.pop();
  const begin = lines.indexOf(`${STEP} begin ${APPLY_SCRIPT_VERSION} `);
  if (begin < 0) throw new ReportUnreadable(`no "${STEP} begin ${APPLY_SCRIPT_VERSION}" line`);
  const steps: ReportStep[] = [];
  for (let i = begin + 1; i < lines.length; i++) {
    const line = lines[i]!;
    const end = /^WAVEGATE-STEP end ([a-z-]+) $/.exec(line);
    if (end) {
      if (i !== lines.length - 1)
        throw new ReportUnreadable(`output after the end line: ${JSON.stringify(lines[i + 1]!.slice(0, 80))}`);
      if (!ENDS.has(end[1]!)) throw new ReportUnreadable(`unknown end ${JSON.stringify(end[1])}`);
      return { steps, end: end[1]! };
    }
    const m = LINE.exec(line);
    if (!m) throw new ReportUnreadable(`not a report line: ${JSON.stringify(line.slice(0, 80))}`);
    if (!NAMES.has(m[1]!)) throw new ReportUnreadable(`unknown step ${JSON.stringify(m[1])}`);
    if (m[3]!.length % 2 !== 0) throw new ReportUnreadable(`odd hex detail in step ${m[1]}`);
    steps.push({ name: m[1]!, status: m[2]!, detail: Buffer.from(m[3]!, 'hex').toString('utf8') });
  }
  throw new ReportUnreadable('the report ends without an end line (cut short)');
}

const code = (status: string): number | null | undefined =>
  /^\d+$/.test(status) ? Number(status) : status === 'unknown' ? null : undefined;

/** Read a script's report into what happened (strict: a sequence that does not add up is unreadable). */
export function readApplyReport(stdout: string, step: 'apply' | 'rollback'): ApplyReport {
  const { steps, end } = parseReportLines(stdout);
  const find = (name: string) => steps.filter((s) => s.name === name);
  const one = (name: string, status?: RegExp): ReportStep => {
    const found = find(name);
    if (found.length !== 1 || (status && !status.test(found[0]!.status)))
      throw new ReportUnreadable(
        `expected one ${name} step${status ? ` (${status.source})` : ''}, found ${found.map((s) => s.status).join(',') || 'none'}`,
      );
    return found[0]!;
  };
  const reattached = find('reattach').length > 0;
  // The unit's own release is its last step (an interrupted attempt's release may come earlier).
  const released = () => {
    const last = steps.at(-1);
    if (last?.name !== 'release' || !/^(released|not-held)$/.test(last.status))
      throw new ReportUnreadable(
        `ended without its release (last step ${last ? `${last.name} ${last.status}` : 'none'})`,
      );
  };
  if (end === 'already-applied') {
    if (one('verify-first').status !== '0') throw new ReportUnreadable('already-applied without a passing verify');
    one('marker', /^written$/);
    released();
    return { kind: 'already-applied', steps };
  }
  if (end === 'applied') {
    if (one('apply').status !== '0' || one('verify').status !== '0')
      throw new ReportUnreadable('applied without a passing apply and verify');
    one('marker', /^written$/);
    released();
    if (!reattached && find('launch').length !== 1)
      throw new ReportUnreadable('applied without a launch or a reattach');
    return {
      kind: 'applied',
      reattached,
      staged: find('stage').some((s) => s.status === 'present' || s.status === 'streamed'),
      steps,
    };
  }
  // Stopped: the last step says why.
  const last = steps.at(-1);
  if (!last) throw new ReportUnreadable('stopped before any step');
  const failed = (
    failed: Extract<ApplyReport, { kind: 'failed' }>['failed'],
    codeOf: number | null,
    output: string,
  ): ApplyReport => ({ kind: 'failed', failed, code: codeOf, output, reattached });
  switch (`${last.name} ${last.status}`) {
    case 'ahead above': {
      const marker = Number(last.detail);
      if (!/^\d{1,15}$/.test(last.detail))
        throw new ReportUnreadable(
          `ahead with a marker that is not a revision: ${JSON.stringify(last.detail.slice(0, 40))}`,
        );
      return { kind: 'ahead', marker };
    }
    case 'floor refused':
    case 'floor check':
      return { kind: 'floor', verdict: last.status as 'refused' | 'check', text: last.detail };
    case 'lock held':
    case 'lock theirs':
      return { kind: last.status === 'held' ? 'lock-held' : 'lock-theirs', record: parseRecord(last.detail).record };
    case 'lock busy':
      return { kind: 'lock-busy' };
    case 'lock failed':
      return failed('take apply lock', 1, last.detail);
    case 'stage needed':
      return { kind: 'stage-needed' };
    case 'marker failed':
      return failed('write marker', 1, last.detail);
    case 'floor failed':
      return failed('write floor', 1, last.detail);
    case 'release failed':
      return failed('release apply lock', 1, last.detail);
    case 'apply gone':
      return {
        kind: 'apply-gone',
        why: `the apply on the device (pid ${parseRecord(last.detail).record.pid ?? '?'}) is gone without an outcome`,
      };
    case 'apply lost':
      return {
        kind: 'apply-gone',
        why: 'the apply lock disappeared while its apply ran (another worker judged it gone)',
      };
  }
  // A failing step is followed by its release: the step before the release is the one that said no.
  if (last.name === 'release') {
    const before = steps.at(-2);
    const c = before ? code(before.status) : undefined;
    if (before && c !== undefined && c !== 0) {
      if (before.name === 'apply') return failed(step, c, before.detail);
      if (before.name === 'verify') return failed('verify', c, before.detail);
      if (before.name === 'launch') return failed(step === 'apply' ? 'apply' : 'rollback', c, before.detail);
    }
  }
  throw new ReportUnreadable(`stopped after "${last.name} ${last.status}", which is not a reason to stop`);
}
