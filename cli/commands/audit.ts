import type { Command } from 'commander';
import {
  chainRunOf,
  latestRunMismatch,
  missingTrailMessage,
  parseAuditLog,
  verifyAuditSegments,
  type AuditHead,
  type AuditRecord,
  type AuditSegment,
  type TrailVerdict,
} from '../../core/audit';
import { WavegateError } from '../../core/errors';
import { DEFAULT_AUDIT_DIR, readAuditKey, resolveAuditLocation, type AuditLocation } from '../../activities/audit';
import { readAuditTrail, redactStoreUrl } from '../../activities/audit-store';
import type { TemporalFlags } from '../../workers/connection';
import { withWorkflowHeads, workflowAuditHead, type WorkflowHead } from '../audit-head';
import { withTemporalOptions } from '../client';
import { action, EXIT_FAILED } from '../run';

export interface AuditFlags extends TemporalFlags {
  verify?: boolean;
  json?: boolean;
  /** Resolved once by the action (resolveAuditLocation): absolute. */
  auditDir: string;
  run?: string;
  head?: string;
  auditKeyFile?: string;
  auditStore?: string;
  strict?: boolean;
}

/** `--head 12:ab34…`: the last seq and hash the writer acknowledged, to catch records cut off the end. */
function parseHead(text: string): AuditHead {
  const match = /^(\d+):([0-9a-f]{64})$/.exec(text);
  if (!match || Number(match[1]) < 1)
    throw new WavegateError(
      'INVALID_INPUT',
      `--head ${JSON.stringify(text)}: expected <seq>:<64 lowercase hex hash>, e.g. 7:${'0'.repeat(64)}`,
    );
  return { seq: Number(match[1]), hash: match[2]! };
}

function countsSummary(counts: Record<string, number> | null): string {
  if (!counts) return '-';
  const entries = Object.entries(counts).filter(([name, n]) => n !== 0 || name === 'total');
  entries.sort(([a], [b]) => (a === 'total' ? -1 : b === 'total' ? 1 : 0));
  return entries.map(([name, n]) => `${name} ${n}`).join(', ') || '-';
}

function oneLine(text: string | null, max: number): string {
  if (!text) return '-';
  const flat = text.replace(/\s+/g, ' ');
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

function table(records: AuditRecord[]): string[] {
  const rows = records.map((r) => [
    String(r.seq),
    r.at,
    r.event,
    r.phase ?? '-',
    r.by,
    oneLine(r.reason, 48),
    countsSummary(r.counts),
  ]);
  const header = ['SEQ', 'AT', 'EVENT', 'PHASE', 'BY', 'REASON', 'COUNTS'];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const format = (row: string[]) =>
    row.map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i]!))).join('  ');
  return [format(header), ...rows.map(format)];
}

/** The lines `--verify` prints: overrides and set-aside segments, the verdict, then what was and was not compared. */
export function verifyReport(
  label: string,
  verdict: TrailVerdict,
  head: { checked: string | null; why: string | null },
  key: { file?: string; from?: string; lookedFor: string },
): string[] {
  const out: string[] = [];
  for (const [i, segment] of verdict.segments.entries()) {
    const o = segment.override;
    if (o) {
      out.push(
        `segment ${i + 1} (${segment.name}): started by an operator override, record ${o.seq} by ${o.by} at ${o.at}: "${oneLine(o.reason, 200)}"; continues after record ${o.lastGood.seq}${o.confirmed ? '' : ' (NOT confirmed by the segment before: it does not hold that record intact)'}`,
      );
    }
    if (segment.problem && i < verdict.segments.length - 1) {
      out.push(
        `segment ${i + 1} (${segment.name}): ${segment.problem.problem} at seq ${segment.problem.seq}: ${segment.problem.message} — set aside by the override in segment ${i + 2}, kept as it is`,
      );
    }
  }
  out.push(
    verdict.ok
      ? `${label}: ${verdict.count} records, chain intact`
      : `${label}: ${verdict.failure!.problem} at seq ${verdict.failure!.seq}: ${verdict.failure!.message}`,
  );
  out.push(
    head.checked
      ? `head: compared with ${head.checked}`
      : `head: NOT checked: ${head.why}; records cut off the end or a resealed file cannot be ruled out (give --head <seq>:<hash>, or reach the rollout's Temporal server)`,
  );
  out.push(
    key.file
      ? `MAC: every record checked against the audit key ${key.file} (${key.from})`
      : `MAC: NOT checked: ${macNotChecked(key.lookedFor)}`,
  );
  return out;
}

/** Why no MAC was checked: where the key was looked for, and how to name the worker's. */
function macNotChecked(lookedFor: string): string {
  return `no audit key found (${lookedFor}); give the key the worker was started with by --audit-key-file <path> or $WAVEGATE_AUDIT_KEY_FILE; a chain rewritten and resealed wholesale cannot be ruled out`;
}

/** The store is the audit directory (not a database): a trail not found there may be in the worker's own. */
function readsDirectory(opts: AuditFlags): boolean {
  const value = opts.auditStore ?? (process.env.WAVEGATE_AUDIT_STORE || undefined);
  return value === undefined || value === 'file';
}

/**
 * A trail not in the directory: say which directory, what named it, and how to point at the worker's
 * (the one its --audit-dir / $WAVEGATE_AUDIT_DIR names, or `<state dir>/audit` for `wavegate dev`).
 */
function directoryHint(where: AuditLocation): string {
  return `looked in ${where.auditDir} (${where.dirFrom}); if the worker keeps its trails elsewhere, give its directory with --audit-dir <dir> or $WAVEGATE_AUDIT_DIR (the worker's own --audit-dir / $WAVEGATE_AUDIT_DIR; <state dir>/audit for \`wavegate dev --state-dir\`)`;
}

function withDirectoryHint(err: unknown, opts: AuditFlags, where: AuditLocation): unknown {
  if (!(err instanceof WavegateError && err.code === 'NOT_FOUND' && readsDirectory(opts))) return err;
  return new WavegateError('NOT_FOUND', `${err.message}; ${directoryHint(where)}`, err.details);
}

/** A trail as the store holds it, for `--verify`: `--run` also names the current chain when that run wrote it. */
export async function readChain(id: string, opts: AuditFlags): Promise<{ segments: AuditSegment[]; location: string }> {
  try {
    const { segments, location } = await readAuditTrail({
      store: opts.auditStore,
      auditDir: opts.auditDir,
      rolloutId: id,
      runId: opts.run,
    });
    return { segments, location };
  } catch (err) {
    if (!(opts.run && err instanceof WavegateError && err.code === 'NOT_FOUND')) throw err;
    // The file store keeps a run's chain under its run id only once a later run moved it aside.
    const current = await readAuditTrail({ store: opts.auditStore, auditDir: opts.auditDir, rolloutId: id }).catch(
      () => undefined,
    );
    if (current && chainRunOf(current.segments) === opts.run)
      return { segments: current.segments, location: current.location };
    throw err;
  }
}

/** Where a store is, fit to print: the directory, or the database URL with no secret in it. */
function storeLocation(opts: AuditFlags): string {
  const value = opts.auditStore ?? (process.env.WAVEGATE_AUDIT_STORE || undefined);
  if (value === undefined || value === 'file') return `the audit directory ${opts.auditDir}`;
  try {
    return `the audit store ${redactStoreUrl(value)}`;
  } catch {
    return 'the audit store';
  }
}

/**
 * No trail in the store. With a head acknowledged for it (the workflow's, or `--head`) the trail was
 * deleted: exit 1 naming what is missing. With neither a trail nor a rollout: NOT_FOUND (exit 2). When
 * the head could not be asked, the store's NOT_FOUND stands, saying what was not checked (`--strict`: exit 1).
 */
async function verifyMissing(
  id: string,
  opts: AuditFlags,
  where: AuditLocation,
  notFound: WavegateError,
  offlineHead: AuditHead | undefined,
): Promise<number> {
  const location = storeLocation(opts);
  const found: WorkflowHead = offlineHead
    ? {
        head: offlineHead,
        source: `--head ${offlineHead.seq}:${offlineHead.hash.slice(0, 12)}…`,
        runId: opts.run ?? '-',
        state: 'given',
      }
    : await workflowAuditHead(opts, id, opts.run);
  if (found.head) {
    const message = missingTrailMessage(found.head, found.source, location);
    const label = `audit ${id}${opts.run ? ` run ${opts.run}` : ''}`;
    // A directory that is not the worker's reads the same as a deleted trail: say where it looked.
    const hint = readsDirectory(opts) ? directoryHint(where) : null;
    if (opts.json)
      console.log(
        JSON.stringify(
          {
            ok: false,
            problem: 'deleted',
            seq: 1,
            message,
            count: 0,
            head: null,
            headChecked: found.source,
            headRun: found.runId,
            missing: found.head,
            ...(hint ? { looked: hint } : {}),
          },
          null,
          2,
        ),
      );
    else {
      console.log(`${label}: ${message}`);
      if (hint) console.log(`trail: ${hint}`);
    }
    return EXIT_FAILED;
  }
  if (found.kind === 'no-rollout')
    throw new WavegateError('NOT_FOUND', `${notFound.message}, and ${found.why}: no such rollout`, notFound.details);
  if (found.kind === 'no-head')
    throw new WavegateError('NOT_FOUND', `${notFound.message}; ${found.why}`, notFound.details);
  const unchecked = `${notFound.message}; head NOT checked: ${found.why}; a trail deleted wholesale cannot be ruled out (give --head <seq>:<hash>, or reach the rollout's Temporal server)`;
  if (opts.strict) {
    process.stderr.write(`wavegate: --strict: ${unchecked}\n`);
    return EXIT_FAILED;
  }
  throw new WavegateError('NOT_FOUND', unchecked, notFound.details);
}

async function verify(id: string, opts: AuditFlags, where: AuditLocation): Promise<number> {
  const key = where.keyFile === undefined ? undefined : readAuditKey(where.keyFile, where.keyFrom);
  const offlineHead = opts.head !== undefined ? parseHead(opts.head) : undefined;
  let chain: { segments: AuditSegment[]; location: string };
  try {
    chain = await readChain(id, opts);
  } catch (err) {
    if (err instanceof WavegateError && err.code === 'NOT_FOUND')
      return verifyMissing(id, opts, where, err, offlineHead);
    throw err;
  }
  const { segments } = chain;
  // The run that wrote this chain: its head is the one to compare with, whichever run is the latest.
  const chainRun = opts.run ?? chainRunOf(segments);
  let head: AuditHead | undefined;
  let compared: { checked: string | null; why: string | null };
  let headRun: string | null = null;
  let latestNote: string | null = null;
  let latestFailure: string | null = null;
  if (offlineHead) {
    head = offlineHead;
    compared = { checked: `--head ${head.seq}:${head.hash.slice(0, 12)}…`, why: null };
  } else {
    const found = await withWorkflowHeads(opts, id, async (heads) => {
      const own = await heads.headOf(chainRun);
      // The current chain (no --run) is also held against the latest run: one that is not this chain's
      // run and holds a head wrote a trail this store does not have as its current one.
      if (!opts.run && chainRun && (own.head || own.kind !== 'unreachable')) {
        const latest = await heads.headOf(undefined);
        // No rollout of that id at all: say so, not that one run of it is missing.
        if (!own.head && own.kind === 'no-rollout' && !latest.head && latest.kind === 'no-rollout') return latest;
        if (latest.runId && latest.runId !== chainRun) {
          latestFailure = latestRunMismatch(chainRun, { runId: latest.runId, head: latest.head }, chain.location);
          if (!latestFailure)
            latestNote = `the rollout's latest run is ${latest.runId} (${(latest.state ?? 'unknown').toLowerCase()}), another run than this chain's: ${latest.head ? '' : `${latest.why}; `}this chain is compared with its own run's head`;
        }
      }
      return own;
    });
    head = found.head ?? undefined;
    headRun = found.runId ?? null;
    compared = found.head
      ? {
          checked: `${found.source}: record ${found.head.seq} ${found.head.hash.slice(0, 12)}…${chainRun && !opts.run ? ', the run that wrote this chain' : ''}`,
          why: null,
        }
      : { checked: null, why: found.why };
  }
  const verdict = verifyAuditSegments(segments, { head, key });
  const label = `audit ${id}${opts.run ? ` run ${opts.run}` : ''}`;
  const ok = verdict.ok && !latestFailure;
  if (opts.json) {
    const { failure } = verdict;
    console.log(
      JSON.stringify(
        {
          ...verdict,
          ok,
          ...(failure
            ? { seq: failure.seq, problem: failure.problem, message: failure.message }
            : latestFailure
              ? { problem: 'deleted', message: latestFailure }
              : {}),
          chainRun: chainRun ?? null,
          headRun,
          headChecked: compared.checked,
          headNotChecked: compared.why,
          latestRun: latestFailure ?? latestNote,
          macChecked: !!key,
          auditKeyFile: where.keyFile ?? null,
        },
        null,
        2,
      ),
    );
  } else {
    for (const line of verifyReport(label, verdict, compared, {
      file: where.keyFile,
      from: where.keyFrom,
      lookedFor: where.keyLookedFor,
    }))
      console.log(line);
    if (latestNote) console.log(`latest run: ${latestNote}`);
    if (latestFailure) console.log(`latest run: ${latestFailure}`);
  }
  if (!ok) return EXIT_FAILED;
  if (opts.strict && (!compared.checked || !key)) {
    process.stderr.write(
      `wavegate: --strict: ${[!compared.checked && 'the head', !key && 'the MAC'].filter(Boolean).join(' and ')} could not be checked${key ? '' : ` (MAC: ${macNotChecked(where.keyLookedFor)})`}\n`,
    );
    return EXIT_FAILED;
  }
  return 0;
}

export function register(program: Command): void {
  withTemporalOptions(
    program
      .command('audit <id>')
      .description(
        'Show the audit trail of a rollout, or check it with --verify: the hash chain, every segment, the head the workflow holds, and with a key the MACs (exit 1 on the first problem)',
      )
      .option(
        '--verify',
        'check the trail: any edited, dropped, reordered or inserted record, a cut-off tail or a resealed chain fails with its seq',
      )
      .option('--json', 'print the records (or with --verify the verdict) as JSON')
      .option(
        '--audit-dir <dir>',
        `where the audit files are: the worker's --audit-dir (default $WAVEGATE_AUDIT_DIR, as the worker reads it, else ${DEFAULT_AUDIT_DIR}, the worker's default; <state dir>/audit for \`wavegate dev\`)`,
      )
      .option('--run <runId>', 'an earlier execution of a re-used rollout id (its chain was moved aside)')
      .option(
        '--head <seq:hash>',
        "with --verify, offline: the last record the writer acknowledged (the status's auditHead), instead of asking the workflow",
      )
      .option(
        '--audit-key-file <path>',
        "with --verify: the worker's audit key, to check every record's MAC (default $WAVEGATE_AUDIT_KEY_FILE, else audit.key beside the audit directory, where `wavegate dev` keeps its key)",
      )
      .option(
        '--audit-store <url>',
        'read the trail from this store instead of --audit-dir: postgres://user@host:port/db (default $WAVEGATE_AUDIT_STORE; password by $PGPASSWORD, $WAVEGATE_AUDIT_STORE_PASSWORD_FILE or ~/.pgpass)',
      )
      .option('--strict', 'with --verify: also exit 1 when the head or the MAC could not be checked'),
  ).action(
    action(async (id: string, opts: AuditFlags) => {
      if (opts.head !== undefined) parseHead(opts.head); // bad input refused before anything is read
      // The worker's configuration (flag, environment, default), never the working directory: absolute from here on.
      const where = resolveAuditLocation(opts, { besideKey: readsDirectory(opts) });
      opts.auditDir = where.auditDir;
      if (opts.verify)
        return verify(id, opts, where).catch((err: unknown) => Promise.reject(withDirectoryHint(err, opts, where)));
      const { segments, earlierRuns } = await readAuditTrail({
        store: opts.auditStore,
        auditDir: opts.auditDir,
        rolloutId: id,
        runId: opts.run,
      }).catch((err: unknown) => Promise.reject(withDirectoryHint(err, opts, where)));
      const parsed = segments.map((segment) => ({ segment, ...parseAuditLog(segment.text) }));
      const records = parsed.flatMap((p) => p.records);
      if (opts.json) {
        console.log(JSON.stringify(records, null, 2));
      } else {
        const archived = earlierRuns;
        console.log(`audit ${id}: ${records.length} records in ${segments.map((s) => s.name).join(', ')}`);
        for (const line of table(records)) console.log(line);
        if (archived.length) console.log(`earlier executions (use --run): ${archived.join(', ')}`);
      }
      for (const [i, p] of parsed.entries()) {
        if (!p.unreadable) continue;
        const setAside = i < parsed.length - 1 ? ' (set aside by the override in the next segment)' : '';
        process.stderr.write(
          `wavegate: ${p.segment.name} line ${p.unreadable.line} ${p.unreadable.torn ? 'is cut off mid-record' : 'is not a JSON audit record'}${setAside}; run with --verify\n`,
        );
      }
      if (parsed.at(-1)?.unreadable) return EXIT_FAILED;
    }),
  );
}
