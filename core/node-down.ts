import { z } from 'zod';
import { WavegateError } from './errors';
import { boundedDuration } from './spec';
import { PRINTABLE, PRINTABLE_RULE, showValue } from './validation';

/**
 * Node-down verdicts (docs/formats.md, "Node-down verdicts"): an operator's word that a device is down,
 * with a command that rechecks it and a date after which the word no longer holds. Pure: the file's
 * shape, and the one decision every reader makes — does this verdict hold now, did its recheck lift it,
 * or has it expired. The file store is intake/node-down.ts; the recheck runner intake/node-down-recheck.ts.
 */

/** How long a verdict may be set to hold: at least an hour, at most a year; 30 days unless told. */
export const NODE_DOWN_EXPIRY = { min: 3_600_000, max: 365 * 86_400_000, default: 30 * 86_400_000 } as const;
/** The most verdicts one file holds (a fleet with more devices down than this needs another answer). */
export const MAX_VERDICTS = 10_000;
/** The history keeps the newest entries only: the file stays small whatever its age. */
export const MAX_HISTORY = 1_000;
export const MAX_REASON_LENGTH = 500;
export const MAX_RECHECK_LENGTH = 1_000;
/** What a recheck printed, kept as evidence. */
export const MAX_CHECK_RESULT_LENGTH = 400;
/** A recheck that has not answered in this long counts as "still down". */
export const RECHECK_TIMEOUT_MS = 10_000;

const DEVICE_ID = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/, 'must be a device id of 1-128 letters, digits, ".", "_", ":" or "-"');
const Line = (max: number) => z.string().max(max, `must be at most ${max} characters`).regex(PRINTABLE, PRINTABLE_RULE);
const Reason = Line(MAX_REASON_LENGTH).refine((s) => s.trim().length > 0, 'must say why (not empty)');
const Recheck = Line(MAX_RECHECK_LENGTH).refine(
  (s) => s.trim().length > 0,
  'must be a command to run on the control host (not empty)',
);
const By = Line(128).refine((s) => s.trim().length > 0, 'must name who (not empty)');
const Instant = z.iso.datetime({ message: 'must be an ISO 8601 UTC time such as 2026-12-01T10:00:00.000Z' });

export const NodeDownVerdict = z
  .object({
    device: DEVICE_ID,
    reason: Reason,
    recheck: Recheck,
    by: By,
    since: Instant,
    expiresAt: Instant,
    lastCheckedAt: Instant.optional(),
    lastCheckResult: Line(MAX_CHECK_RESULT_LENGTH).optional(),
  })
  .strict();
export type NodeDownVerdict = z.output<typeof NodeDownVerdict>;

export const HISTORY_EVENTS = ['marked-down', 'marked-up', 'lifted-by-recheck'] as const;
export const NodeDownHistoryEntry = z
  .object({
    at: Instant,
    device: DEVICE_ID,
    event: z.enum(HISTORY_EVENTS),
    by: By,
    detail: Line(MAX_REASON_LENGTH + MAX_CHECK_RESULT_LENGTH + 100).optional(),
  })
  .strict();
export type NodeDownHistoryEntry = z.output<typeof NodeDownHistoryEntry>;

export const NodeDownFile = z
  .object({
    verdicts: z.array(NodeDownVerdict).max(MAX_VERDICTS, `must hold at most ${MAX_VERDICTS} verdicts`).default([]),
    history: z.array(NodeDownHistoryEntry).max(MAX_HISTORY, `must hold at most ${MAX_HISTORY} entries`).default([]),
  })
  .strict()
  .superRefine((file, ctx) => {
    const seen = new Set<string>();
    file.verdicts.forEach((v, i) => {
      if (seen.has(v.device))
        ctx.addIssue({
          code: 'custom',
          path: ['verdicts', i, 'device'],
          message: 'a second verdict for this device (one per device)',
        });
      seen.add(v.device);
      if (Date.parse(v.expiresAt) <= Date.parse(v.since))
        ctx.addIssue({
          code: 'custom',
          path: ['verdicts', i, 'expiresAt'],
          message: `must be after since (${v.since})`,
        });
    });
  });
export type NodeDownFile = z.output<typeof NodeDownFile>;

export const EMPTY_NODE_DOWN_FILE: NodeDownFile = { verdicts: [], history: [] };

/** What one recheck found: exit 0 is "the device is back"; anything else (a timeout too) is "still down". */
export interface RecheckResult {
  passed: boolean;
  /** `exit 0`, `exit 1: <output>`, `timed out after 10s` ... (bounded). */
  result: string;
  at: string;
}

/** Where a verdict stands now. Only `holds` keeps the device out of a plan. */
export type VerdictStanding =
  | { device: string; kind: 'holds'; text: string; verdict: NodeDownVerdict }
  | { device: string; kind: 'expired'; text: string; verdict: NodeDownVerdict }
  | { device: string; kind: 'lifted'; text: string; verdict: NodeDownVerdict; check: RecheckResult };

/** A time as the board prints it: ISO 8601 UTC to the second. */
export function shortTime(iso: string): string {
  return new Date(iso).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

export function isExpired(verdict: Pick<NodeDownVerdict, 'expiresAt'>, nowMs: number): boolean {
  return nowMs >= Date.parse(verdict.expiresAt);
}

/** Only a verdict that still holds is rechecked: an expired one waits for an operator, whatever a command says. */
export function needsRecheck(verdict: NodeDownVerdict, nowMs: number): boolean {
  return !isExpired(verdict, nowMs);
}

/**
 * The decision: past expiresAt a verdict no longer holds, and is never extended by anything but an
 * explicit `mark-down` (a passing or failing recheck changes nothing about an expired verdict). Before
 * it, a passing recheck lifts it; otherwise it holds.
 */
export function verdictStanding(verdict: NodeDownVerdict, nowMs: number, check?: RecheckResult): VerdictStanding {
  const { device } = verdict;
  if (isExpired(verdict, nowMs)) {
    return {
      device,
      kind: 'expired',
      verdict,
      text: `node-down expired ${shortTime(verdict.expiresAt)} (back in the plan; renew with wavegate fleet mark-down): ${verdict.reason}`,
    };
  }
  if (check?.passed)
    return {
      device,
      kind: 'lifted',
      verdict,
      check,
      text: `node-down lifted at ${shortTime(check.at)}: its recheck passed (${verdict.reason})`,
    };
  return {
    device,
    kind: 'holds',
    verdict,
    text: `node-down since ${shortTime(verdict.since)}, expires ${shortTime(verdict.expiresAt)}: ${verdict.reason}`,
  };
}

/** What the snapshot carries for a device with a verdict: small, as 10,000 snapshots may sit in one history. */
export interface NodeDownMark {
  /** True while the verdict holds: the planner makes the device not-for-me with `text` as the reason. */
  holds: boolean;
  text: string;
}

export function markOf(standing: VerdictStanding): NodeDownMark {
  return { holds: standing.kind === 'holds', text: standing.text };
}

/** The verdict `--expires` asks for, validated as a spec duration is (bounded). */
const Expiry = boundedDuration(NODE_DOWN_EXPIRY.min, NODE_DOWN_EXPIRY.max);

function flagProblem(flag: string, value: unknown, message: string): never {
  throw new WavegateError('INVALID_INPUT', `${flag} ${showValue(value)}: ${message}`, { field: flag, value });
}

function checkFlag<T>(schema: z.ZodType<T>, flag: string, value: unknown): T {
  const parsed = schema.safeParse(value);
  if (!parsed.success) return flagProblem(flag, value, parsed.error.issues[0]?.message ?? 'invalid');
  return parsed.data;
}

/** A new verdict from the operator's flags; INVALID_INPUT naming the flag and its value otherwise. */
export function newVerdict(opts: {
  device: string;
  reason: unknown;
  recheck: unknown;
  expires?: unknown;
  by: string;
  nowMs: number;
}): NodeDownVerdict {
  const device = checkFlag(DEVICE_ID, 'device', opts.device);
  const reason = checkFlag(Reason, '--reason', opts.reason ?? '');
  const recheck = checkFlag(Recheck, '--recheck', opts.recheck ?? '');
  const expiresMs =
    opts.expires === undefined ? NODE_DOWN_EXPIRY.default : checkFlag(Expiry, '--expires', opts.expires);
  const by = checkFlag(By, 'by', opts.by);
  return {
    device,
    reason,
    recheck,
    by,
    since: new Date(opts.nowMs).toISOString(),
    expiresAt: new Date(opts.nowMs + expiresMs).toISOString(),
  };
}

function withHistory(file: NodeDownFile, entries: NodeDownHistoryEntry[]): NodeDownHistoryEntry[] {
  return [...file.history, ...entries].slice(-MAX_HISTORY);
}

/** Record a verdict; one for the same device is replaced (that is how an expired verdict is renewed). */
export function markDown(file: NodeDownFile, verdict: NodeDownVerdict): NodeDownFile {
  const previous = file.verdicts.find((v) => v.device === verdict.device);
  const detail = `${verdict.reason}; expires ${shortTime(verdict.expiresAt)}${previous ? `; replaces the verdict of ${shortTime(previous.since)}` : ''}`;
  return {
    verdicts: [...file.verdicts.filter((v) => v.device !== verdict.device), verdict],
    history: withHistory(file, [
      {
        at: verdict.since,
        device: verdict.device,
        event: 'marked-down',
        by: verdict.by,
        detail: detail.slice(0, MAX_REASON_LENGTH + MAX_CHECK_RESULT_LENGTH),
      },
    ]),
  };
}

/** Lift a verdict by hand; NOT_FOUND when the device has none. */
export function markUp(file: NodeDownFile, device: string, by: string, nowMs: number): NodeDownFile {
  const verdict = file.verdicts.find((v) => v.device === device);
  if (!verdict)
    throw new WavegateError('NOT_FOUND', `device ${JSON.stringify(device)} has no node-down verdict`, {
      field: 'device',
      value: device,
    });
  return {
    verdicts: file.verdicts.filter((v) => v.device !== device),
    history: withHistory(file, [
      {
        at: new Date(nowMs).toISOString(),
        device,
        event: 'marked-up',
        by,
        detail: `was: ${verdict.reason}`.slice(0, MAX_REASON_LENGTH),
      },
    ]),
  };
}

/**
 * Write what the rechecks found into the file: a lifted verdict leaves it (with a history entry), one
 * still down records when it was checked and what the check said. A recheck of a verdict that changed
 * meanwhile (another `since`) is dropped: the operator's newer word wins.
 */
export function recordRechecks(
  file: NodeDownFile,
  checks: ReadonlyMap<string, { since: string; check: RecheckResult }>,
  by: string,
): NodeDownFile {
  const verdicts: NodeDownVerdict[] = [];
  const lifted: NodeDownHistoryEntry[] = [];
  for (const v of file.verdicts) {
    const c = checks.get(v.device);
    if (!c || c.since !== v.since) verdicts.push(v);
    else if (c.check.passed)
      lifted.push({
        at: c.check.at,
        device: v.device,
        event: 'lifted-by-recheck',
        by,
        detail: `${v.recheck.slice(0, 200)} → ${c.check.result}; was: ${v.reason}`.slice(
          0,
          MAX_REASON_LENGTH + MAX_CHECK_RESULT_LENGTH,
        ),
      });
    else
      verdicts.push({
        ...v,
        lastCheckedAt: c.check.at,
        lastCheckResult: c.check.result.slice(0, MAX_CHECK_RESULT_LENGTH),
      });
  }
  return { verdicts, history: withHistory(file, lifted) };
}
