import type { Command } from 'commander';
import { parseAuditLog, verifyAuditLog, type AuditHead, type AuditRecord } from '../../core/audit';
import { WavegateError } from '../../core/errors';
import { archivedAuditRuns, auditFilePath, DEFAULT_AUDIT_DIR, readAuditText } from '../../activities/audit';
import { action, EXIT_FAILED } from '../run';

interface AuditFlags {
  verify?: boolean;
  json?: boolean;
  auditDir: string;
  run?: string;
  head?: string;
}

/** `--head 12:ab34…`: the last seq and hash the writer acknowledged, to catch records cut off the end. */
function parseHead(text: string): AuditHead {
  const match = /^(\d+):([0-9a-f]{64})$/.exec(text);
  if (!match || Number(match[1]) < 1) throw new WavegateError('INVALID_INPUT', `--head ${JSON.stringify(text)}: expected <seq>:<64 lowercase hex hash>, e.g. 7:${'0'.repeat(64)}`);
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
  const rows = records.map((r) => [String(r.seq), r.at, r.event, r.phase ?? '-', r.by, oneLine(r.reason, 48), countsSummary(r.counts)]);
  const header = ['SEQ', 'AT', 'EVENT', 'PHASE', 'BY', 'REASON', 'COUNTS'];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const format = (row: string[]) => row.map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i]!))).join('  ');
  return [format(header), ...rows.map(format)];
}

export function register(program: Command): void {
  program
    .command('audit <id>')
    .description('Show the audit trail of a rollout, or check its hash chain with --verify (exit 1 on the first problem)')
    .option('--verify', 'check the hash chain: any edited, dropped, reordered or inserted record fails with its seq')
    .option('--json', 'print the records as JSON')
    .option('--audit-dir <dir>', 'where the audit files are (default $WAVEGATE_AUDIT_DIR or .wavegate/audit)', process.env.WAVEGATE_AUDIT_DIR || DEFAULT_AUDIT_DIR)
    .option('--run <runId>', 'an earlier execution of a re-used rollout id (its chain was moved aside)')
    .option('--head <seq:hash>', 'with --verify: the last record the writer acknowledged, to also catch records cut off the end')
    .action(
      action((id: string, opts: AuditFlags) => {
        const head = opts.head === undefined ? undefined : parseHead(opts.head);
        const text = readAuditText(opts.auditDir, id, opts.run);
        if (opts.verify) {
          const verdict = verifyAuditLog(text, head);
          const label = `audit ${id}${opts.run ? ` run ${opts.run}` : ''}`;
          if (opts.json) console.log(JSON.stringify(verdict, null, 2));
          else if (verdict.ok) console.log(`${label}: ${verdict.count} records, chain intact`);
          else console.log(`${label}: ${verdict.problem} at seq ${verdict.seq}: ${verdict.message}`);
          return verdict.ok ? 0 : EXIT_FAILED;
        }
        const { records, unreadable } = parseAuditLog(text);
        if (opts.json) {
          console.log(JSON.stringify(records, null, 2));
        } else {
          const archived = opts.run ? [] : archivedAuditRuns(opts.auditDir, id);
          console.log(`audit ${id}: ${records.length} records in ${auditFilePath(opts.auditDir, id, opts.run)}`);
          for (const line of table(records)) console.log(line);
          if (archived.length) console.log(`earlier executions (use --run): ${archived.join(', ')}`);
        }
        if (unreadable) {
          process.stderr.write(`wavegate: line ${unreadable.line} ${unreadable.torn ? 'is cut off mid-record' : 'is not a JSON audit record'}; run with --verify\n`);
          return EXIT_FAILED;
        }
      }),
    );
}
