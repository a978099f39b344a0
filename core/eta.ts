/**
 * When will a rollout be done? An estimate from what its status already knows (docs/operations.md "When will it
 * be done"): each phase's timing as the workflow's clock saw it (core/rollout/timing.ts keeps it: its devices'
 * apply durations, the ones applying now, its in-flight limit, its gate's start), the devices left, the gates'
 * lengths and whether a gate waits for a person. Pure: `now` is an argument, nothing here reads a clock.
 *
 * Never a made-up number: before any device of the rollout finished the estimate is `unknown`; behind a manual
 * gate or a pause it is conditional (so long after the approval, or after the resume), never a time.
 */

/** One phase's timing in the status (`PhaseStatus.timing`): what the estimate is made from. */
export interface PhaseTiming {
  /** How many of its devices may apply at once: its pools' in-flight limits, at most its size. */
  inFlight: number;
  /** When its first device started applying. */
  startedAt?: string;
  /** When its gate (its wait, or its manual approval) began: every device of it had ended. */
  gateStartedAt?: string;
  /** When it ended (passed, failed, stopped). */
  endedAt?: string;
  /** Its devices whose apply ended, whatever the outcome. */
  finished: number;
  /** How long the last DURATIONS_KEPT finished devices' applies took (ms), oldest first. */
  durationsMs: number[];
  /** When each device applying now started. */
  runningSince: string[];
}

/** The most recent apply durations a phase keeps: enough for a stable statistic, bounded at any fleet size. */
export const DURATIONS_KEPT = 64;

/** How recent a duration must be to count fully: its weight halves every this many later ones. */
const HALF_LIFE = 32;
/** A duration beyond this many times the median (a device that hung until its timeout) counts as this many. */
const OUTLIER_FACTOR = 10;
/** A device still applying after this many times the longest finished one is of a slower kind, not the same kind's spread. */
const BEYOND = 1.25;
/**
 * Such a device is taken to need this many times what it has run so far: its real time is unknown until it ends.
 * 1.5 is what a simulation of mixed fleets (a quarter 2-3x slower, 4-8 in flight) got closest with, at 10% finished:
 * 2 (as long again) overshot, 1 (it ends now) undershot.
 */
const OUTLIVED = 1.5;

export type Eta =
  /** It ended (when, if known). */
  | { kind: 'done'; at?: string }
  /** Estimated to end at `at`, `inMs` from now. */
  | { kind: 'at'; at: string; inMs: number }
  /** Ends `inMs` after the condition is met (an approval, a resume); unknown how long after when `inMs` is absent. */
  | { kind: 'after'; condition: 'approval' | 'resume'; inMs?: number; reason: string }
  | { kind: 'unknown'; reason: string };

export interface PhaseEta {
  index: number;
  name: string;
  eta: Eta;
}

export interface RolloutEta {
  rollout: Eta;
  phases: PhaseEta[];
  /** The per-device apply time the estimate used (ms), and how many finished devices it is from. */
  perDeviceMs?: number;
  sample?: number;
}

/** What the estimate reads of a status (core/rollout/status.ts RolloutStatus has all of it). */
export interface EtaInput {
  state: string;
  pausedReason?: string;
  phases: ReadonlyArray<{
    index: number;
    name: string;
    devices: number;
    gate: number | 'manual';
    stage: string;
    timing?: PhaseTiming;
  }>;
  devices: ReadonlyArray<{ phase: number; state: string }>;
  /** The watch after promotion, once it started (core/rollout/watch.ts WatchStatus): the rollout ends with it. */
  watch?: { forMs: number; everyMs: number; checks: number; planned: number; outcome: string };
}

const ENDED_STAGES = new Set(['passed', 'failed', 'stopped']);
const ENDED_STATES = new Set(['completed', 'rolled-back', 'aborted', 'cancelled', 'failed']);

/**
 * The per-device apply time (ms): a recency-weighted mean of the finished devices' durations, each capped at
 * OUTLIER_FACTOR × their median (one hung device must not move the estimate of a thousand), with a device
 * still applying far longer than any finished one counted as taking half again what it has run so far: the first
 * devices to finish are the fast ones, and a slow group shows only as devices still running.
 * A mean, not a median: a fleet of mixed speeds takes the sum of its devices' times, which a median understates.
 */
export function perDeviceMs(durationsMs: readonly number[], runningMs: readonly number[] = []): number | undefined {
  if (durationsMs.length === 0) return undefined;
  const cap = OUTLIER_FACTOR * median(durationsMs);
  const longest = Math.max(...durationsMs);
  let sum = 0;
  let weight = 0;
  durationsMs.forEach((d, i) => {
    const w = 0.5 ** ((durationsMs.length - 1 - i) / HALF_LIFE);
    sum += w * Math.min(d, cap);
    weight += w;
  });
  for (const e of runningMs) {
    if (e <= BEYOND * longest) continue;
    sum += Math.min(OUTLIVED * e, cap);
    weight += 1;
  }
  return sum / weight;
}

/** How much longer a device applying for `elapsedMs` will take: the finished ones that took longer say, else as long again. */
export function remainingMs(elapsedMs: number, durationsMs: readonly number[], mean: number): number {
  const longer = durationsMs.filter((d) => d > elapsedMs);
  if (longer.length) return Math.max(0, longer.reduce((a, b) => a + b, 0) / longer.length - elapsedMs);
  // Longer than any finished one: by a little (the spread of one speed), nearly done; by far, half again.
  const longest = durationsMs.length ? Math.max(...durationsMs) : mean;
  return elapsedMs <= BEYOND * longest ? 0 : Math.min((OUTLIVED - 1) * elapsedMs, OUTLIER_FACTOR * mean);
}

/**
 * How long until the last of `left` devices (each `each` ms) ends on `slots` slots, the devices applying now
 * ending after `busyMs`: each next device starts on the slot that frees first, as the device queue starts them.
 */
export function makespanMs(busyMs: readonly number[], left: number, each: number, slots: number): number {
  const heap = [...busyMs];
  while (heap.length < slots) heap.push(0);
  heap.sort((a, b) => a - b);
  let end = heap.length ? heap[heap.length - 1]! : 0;
  for (let k = 0; k < left; k++) {
    const start = heap[0]!;
    end = Math.max(end, start + each);
    heap[0] = start + each;
    siftDown(heap);
  }
  return end;
}

function siftDown(heap: number[]): void {
  let i = 0;
  for (;;) {
    const l = 2 * i + 1;
    const r = l + 1;
    let m = i;
    if (l < heap.length && heap[l]! < heap[m]!) m = l;
    if (r < heap.length && heap[r]! < heap[m]!) m = r;
    if (m === i) return;
    [heap[i], heap[m]] = [heap[m]!, heap[i]!];
    i = m;
  }
}

function median(values: readonly number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

const ms = (iso: string | undefined): number | undefined => (iso === undefined ? undefined : Date.parse(iso));

/**
 * The per-device time the rollout's phases show: their durations in phase order (so the latest weigh most), with
 * the devices applying now. A phase whose devices ran in slices (the rollout learns of them when a slice ends)
 * has counts and no durations: when the latest phase with finished devices is one, its throughput since it
 * started stands for them (a canary's one device before it says less).
 */
function observedPerDevice(input: EtaInput, nowMs: number): { each: number; sample: number } | undefined {
  const latest = [...input.phases].reverse().find((p) => (p.timing?.finished ?? 0) > 0)?.timing;
  const start = ms(latest?.startedAt);
  if (latest && latest.durationsMs.length === 0 && start !== undefined) {
    const end = ms(latest.gateStartedAt) ?? nowMs;
    return { each: ((end - start) * latest.inFlight) / latest.finished, sample: latest.finished };
  }
  const durations: number[] = [];
  const running: number[] = [];
  for (const p of input.phases) {
    if (!p.timing) continue;
    durations.push(...p.timing.durationsMs);
    for (const since of p.timing.runningSince) running.push(nowMs - Date.parse(since));
  }
  const kept = durations.slice(-DURATIONS_KEPT);
  const each = perDeviceMs(kept, running);
  return each === undefined ? undefined : { each, sample: kept.length };
}

/** Devices of a phase still to start: named in the status, or (a phase run in slices) its size less those seen. */
function unstartedIn(input: EtaInput, phase: EtaInput['phases'][number]): number {
  let named = 0;
  let waiting = 0;
  for (const d of input.devices) {
    if (d.phase !== phase.index) continue;
    named += 1;
    if (d.state === 'pending' || d.state === 'waiting') waiting += 1;
  }
  if (named > 0) return waiting;
  const t = phase.timing;
  return Math.max(0, phase.devices - (t?.finished ?? 0) - (t?.runningSince.length ?? 0));
}

/**
 * Each phase's and the rollout's estimated end. Phases are walked in order from now: an ended phase is done; the
 * phase applying ends when its devices left, at the observed per-device time over its in-flight limit, have
 * ended (the ones running first, for what they likely have left); a later phase takes its size at that time over
 * its own limit; each adds its gate's wait (what is left of it, in its gate). A manual gate makes the rest
 * conditional on the approval, a paused rollout on the resume: the time after it, not a time of day.
 */
export function estimateRollout(input: EtaInput, nowMs: number): RolloutEta {
  if (ENDED_STATES.has(input.state)) {
    const phases = input.phases.map((p) => ({
      index: p.index,
      name: p.name,
      eta: { kind: 'done', ...(p.timing?.endedAt ? { at: p.timing.endedAt } : {}) } as Eta,
    }));
    const ended = [...input.phases].reverse().find((p) => p.timing?.endedAt)?.timing?.endedAt;
    return { rollout: { kind: 'done', ...(ended ? { at: ended } : {}) }, phases };
  }
  const watching = watchEnd(input, nowMs);
  if (watching) return watching;
  const observed = observedPerDevice(input, nowMs);
  const paused = input.state === 'paused';
  /** Time from now (or from the condition being met) to the end of the phase walked so far. */
  let cursor = 0;
  let condition: Extract<Eta, { kind: 'after' }> | undefined = paused
    ? { kind: 'after', condition: 'resume', reason: input.pausedReason ?? 'paused' }
    : undefined;
  let unknown: string | undefined;
  const phases: PhaseEta[] = [];
  for (const p of input.phases) {
    const t = p.timing;
    if (ENDED_STAGES.has(p.stage)) {
      phases.push({ index: p.index, name: p.name, eta: { kind: 'done', ...(t?.endedAt ? { at: t.endedAt } : {}) } });
      continue;
    }
    const slots = Math.max(1, t?.inFlight ?? 1);
    if (p.stage === 'pending' || p.stage === 'applying') {
      const left = unstartedIn(input, p);
      const running = (t?.runningSince ?? []).map((s) => Math.max(0, nowMs - Date.parse(s)));
      if (left + running.length > 0) {
        if (!observed) unknown ??= 'no device has finished yet';
        else {
          const busy = running.map((e) => remainingMs(e, t?.durationsMs ?? [], observed.each));
          cursor += makespanMs(busy, left, observed.each, slots);
        }
      }
    }
    // The gate: its whole wait ahead, or what is left of it once it began; a manual gate waits for a person.
    if (p.gate === 'manual') {
      if (p.stage === 'awaiting-approval' || p.stage === 'pending' || p.stage === 'applying') {
        if (!condition) {
          condition = { kind: 'after', condition: 'approval', reason: `phase ${p.name} waits for an approval` };
          if (!unknown) cursor = 0;
        }
      }
    } else if (p.stage === 'gate' || p.stage === 'inconclusive') {
      const began = ms(t?.gateStartedAt) ?? nowMs;
      cursor += Math.max(0, began + p.gate - nowMs);
    } else cursor += p.gate;
    if (p.stage === 'inconclusive' && !condition)
      condition = { kind: 'after', condition: 'resume', reason: `phase ${p.name}'s health gate was inconclusive` };
    phases.push({ index: p.index, name: p.name, eta: etaOf(nowMs, cursor, condition, unknown) });
  }
  const last = phases.at(-1)?.eta ?? { kind: 'unknown', reason: 'no phases' };
  return {
    rollout: last,
    phases,
    ...(observed ? { perDeviceMs: Math.round(observed.each), sample: observed.sample } : {}),
  };
}

/**
 * Watching after its last phase: the phases are done and the rollout ends when the watch has run its time, from
 * the last phase's end (or, without its timing, after the checks left). A failed check may end it sooner.
 */
function watchEnd(input: EtaInput, nowMs: number): RolloutEta | undefined {
  const w = input.watch;
  if (input.state !== 'watching' || !w || w.outcome !== 'watching') return undefined;
  const phases = input.phases.map((p) => ({
    index: p.index,
    name: p.name,
    eta: { kind: 'done', ...(p.timing?.endedAt ? { at: p.timing.endedAt } : {}) } as Eta,
  }));
  const since = ms(input.phases.at(-1)?.timing?.endedAt);
  const end = since !== undefined ? since + w.forMs : nowMs + Math.max(0, w.planned - w.checks) * w.everyMs;
  const inMs = Math.max(0, end - nowMs);
  return { rollout: { kind: 'at', at: new Date(nowMs + inMs).toISOString(), inMs }, phases };
}

function etaOf(nowMs: number, cursor: number, condition: Eta | undefined, unknown: string | undefined): Eta {
  if (condition?.kind === 'after') return unknown ? { ...condition } : { ...condition, inMs: Math.round(cursor) };
  if (unknown) return { kind: 'unknown', reason: unknown };
  return { kind: 'at', at: new Date(nowMs + cursor).toISOString(), inMs: Math.round(cursor) };
}

/** `1h 5m`, `3m 20s`, `45s`: how long, to the second, as a person reads it. */
export function describeSpan(spanMs: number): string {
  const s = Math.max(0, Math.round(spanMs / 1000));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = s % 60;
  if (h > 0) return `${h}h ${m}m`;
  if (m > 0) return `${m}m ${sec}s`;
  return `${sec}s`;
}

/** A time of day in a zone, labelled with it: `2026-12-08 01:23:45 UTC`. */
export function describeTime(iso: string, timeZone = 'UTC'): string {
  const parts = new Intl.DateTimeFormat('en-CA', {
    timeZone,
    year: 'numeric',
    month: '2-digit',
    day: '2-digit',
    hour: '2-digit',
    minute: '2-digit',
    second: '2-digit',
    hourCycle: 'h23',
    timeZoneName: 'short',
  }).formatToParts(new Date(iso));
  const part = (type: string) => parts.find((p) => p.type === type)?.value ?? '';
  return `${part('year')}-${part('month')}-${part('day')} ${part('hour')}:${part('minute')}:${part('second')} ${part('timeZoneName')}`;
}

/** One line for an estimate: `~2026-12-08 01:23:45 UTC (in 12m 5s)`, `12m 5s after approval`, `unknown (…)`. */
export function describeEta(eta: Eta, timeZone?: string): string {
  switch (eta.kind) {
    case 'done':
      return eta.at ? `done ${describeTime(eta.at, timeZone)}` : 'done';
    case 'at':
      return `~${describeTime(eta.at, timeZone)} (in ${describeSpan(eta.inMs)})`;
    case 'after': {
      const when = eta.condition === 'approval' ? 'after approval' : 'after resume (paused)';
      return eta.inMs === undefined ? `unknown, ${when}` : `${describeSpan(eta.inMs)} ${when}`;
    }
    case 'unknown':
      return `unknown (${eta.reason})`;
  }
}

/** The zone this process labels times in: its TZ, else the system's (`UTC` when neither says). */
export function localZone(): string {
  return Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';
}

/** Short, for a phase's line in `watch`: `~01:23:45 UTC`, `+12m 5s after approval`, `eta unknown`, '' once done. */
export function shortEta(eta: Eta, timeZone?: string): string {
  switch (eta.kind) {
    case 'done':
      return '';
    case 'at':
      return `eta ~${describeTime(eta.at, timeZone).slice(11)}`;
    case 'after':
      return eta.inMs === undefined
        ? `eta unknown, ${eta.condition === 'approval' ? 'after approval' : 'paused'}`
        : `eta +${describeSpan(eta.inMs)} ${eta.condition === 'approval' ? 'after approval' : 'after resume'}`;
    case 'unknown':
      return 'eta unknown';
  }
}
