import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { auditFilePath, createAuditActivities } from '../../audit/file';
import type { AuditEvent, AuditRecord } from '../../core/audit';
import { PROJECT_ROOT } from '../../intake/package-layout';

/**
 * `wavegate audit` in a real process. Until cli/main.ts registers the command, the process assembles a
 * commander program the way main.ts does (exitOverride, usage errors → 2) around cli/commands/audit.ts.
 */
const PROGRAM = `
  require('tsx/cjs');
  const { Command, CommanderError } = require('commander');
  const program = new Command('wavegate').exitOverride();
  require('./cli/commands/audit.ts').register(program);
  program.parseAsync(['node', 'wavegate', ...process.argv.slice(1)]).catch((err) => {
    if (err instanceof CommanderError) process.exitCode = err.exitCode === 0 ? 0 : 2;
    else { process.stderr.write(String(err && err.stack || err)); process.exitCode = 1; }
  });`;

const OFFLINE = '127.0.0.1:1';

function wavegate(
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    // Offline unless a test says otherwise: never ask whatever Temporal happens to listen on :7233.
    const child = spawn(process.execPath, ['-e', PROGRAM, '--', ...args], {
      cwd: PROJECT_ROOT,
      env: { ...process.env, TEMPORAL_ADDRESS: OFFLINE, WAVEGATE_AUDIT_KEY_FILE: '', ...env },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

const EVENTS: Array<Pick<AuditEvent, 'event' | 'phase' | 'by' | 'reason' | 'counts'>> = [
  { event: 'rollout.started', phase: null, by: 'alice', reason: null, counts: { total: 12, pending: 12 } },
  { event: 'phase.started', phase: 'canary', by: 'wavegate', reason: null, counts: { total: 12, pending: 12 } },
  {
    event: 'phase.applied',
    phase: 'canary',
    by: 'wavegate',
    reason: null,
    counts: { total: 12, applied: 1, pending: 11 },
  },
  {
    event: 'rollout.paused',
    phase: 'canary',
    by: 'bob',
    reason: 'checking dashboards before bulk',
    counts: { total: 12, applied: 1, pending: 11 },
  },
  { event: 'rollout.resumed', phase: 'canary', by: 'bob', reason: null, counts: null },
];

let root: string;
let auditDir: string;
let file: string;
let pristine: string;
let records: AuditRecord[];

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'wavegate-audit-cli-'));
  auditDir = join(root, 'audit');
  const audit = createAuditActivities({ auditDir });
  for (const [i, e] of EVENTS.entries()) {
    await audit.appendAudit({
      ...e,
      seq: i + 1,
      at: new Date(Date.UTC(2026, 2, 1, 12, 0, i)).toISOString(),
      rolloutId: 'rollout:demo',
      runId: 'run-1',
      evidence: { i },
    });
  }
  file = auditFilePath(auditDir, 'rollout:demo');
  pristine = readFileSync(file, 'utf8');
  records = pristine
    .trimEnd()
    .split('\n')
    .map((line) => JSON.parse(line) as AuditRecord);
});
beforeEach(() => writeFileSync(file, pristine));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const lines = () => pristine.trimEnd().split('\n');
const dirFlag = () => ['--audit-dir', auditDir];

describe('wavegate audit', () => {
  it('--verify on a good file with nothing to compare: exit 0, chain intact, and says plainly that the head and MAC were not checked', async () => {
    const run = await wavegate(['audit', 'rollout:demo', '--verify', ...dirFlag()]);
    expect(run).toMatchObject({ code: 0, stderr: '' });
    expect(run.stdout.split('\n')).toEqual([
      'audit rollout:demo: 5 records, chain intact',
      `head: NOT checked: no Temporal server reachable at ${OFFLINE} to ask for the rollout's head; records cut off the end or a resealed file cannot be ruled out (give --head <seq>:<hash>, or reach the rollout's Temporal server)`,
      `MAC: NOT checked: no audit key found (no --audit-key-file, no $WAVEGATE_AUDIT_KEY_FILE, no ${join(root, 'audit.key')} (where \`wavegate dev\` keeps its key beside ${auditDir})); give the key the worker was started with by --audit-key-file <path> or $WAVEGATE_AUDIT_KEY_FILE; a chain rewritten and resealed wholesale cannot be ruled out`,
      '',
    ]);
    const strict = await wavegate(['audit', 'rollout:demo', '--verify', '--strict', ...dirFlag()]);
    expect(strict.code).toBe(1);
    expect(strict.stderr).toMatch(/--strict: the head and the MAC could not be checked/);
  });

  it('--verify on an edited record: exit 1 naming the problem and its seq', async () => {
    const tampered = lines();
    tampered[2] = tampered[2]!.replace('"by":"wavegate"', '"by":"mallory"');
    writeFileSync(file, `${tampered.join('\n')}\n`);
    const run = await wavegate(['audit', 'rollout:demo', '--verify', ...dirFlag()]);
    expect(run.code).toBe(1);
    expect(run.stdout).toMatch(/^audit rollout:demo: edited at seq 3: record 3 \(line 3\) was edited/);
  });

  it('--verify on a dropped and on a reordered record: exit 1 with the missing seq', async () => {
    const dropped = lines();
    dropped.splice(1, 1);
    writeFileSync(file, `${dropped.join('\n')}\n`);
    const drop = await wavegate(['audit', 'rollout:demo', '--verify', '--json', ...dirFlag()]);
    expect(drop.code).toBe(1);
    expect(JSON.parse(drop.stdout)).toMatchObject({ ok: false, problem: 'dropped', seq: 2 });

    const swapped = lines();
    [swapped[3], swapped[4]] = [swapped[4]!, swapped[3]!];
    writeFileSync(file, `${swapped.join('\n')}\n`);
    const reorder = await wavegate(['audit', 'rollout:demo', '--verify', ...dirFlag()]);
    expect(reorder.code).toBe(1);
    expect(reorder.stdout).toMatch(/reordered at seq 4/);
  });

  it('--verify --head catches records cut off the end, which the chain alone cannot', async () => {
    writeFileSync(file, `${lines().slice(0, 3).join('\n')}\n`);
    const head = `5:${records[4]!.hash}`;
    expect((await wavegate(['audit', 'rollout:demo', '--verify', ...dirFlag()])).code).toBe(0);
    const run = await wavegate(['audit', 'rollout:demo', '--verify', '--head', head, ...dirFlag()]);
    expect(run.code).toBe(1);
    expect(run.stdout).toMatch(/truncated at seq 4: .*records 4–5 were cut off/);
    const bad = await wavegate(['audit', 'rollout:demo', '--verify', '--head', 'five', ...dirFlag()]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/INVALID_INPUT: --head "five": expected <seq>:<64 lowercase hex hash>/);
  });

  it('--verify on a trail with an operator override: the broken segment is reported as set aside, the override names who and why, exit 0', async () => {
    const root2 = mkdtempSync(join(tmpdir(), 'wavegate-audit-override-'));
    try {
      const dir2 = join(root2, 'audit');
      const sink = createAuditActivities({ auditDir: dir2 });
      const at = (i: number) => new Date(Date.UTC(2026, 2, 1, 12, 0, i)).toISOString();
      const base = {
        rolloutId: 'rollout:demo',
        runId: 'run-1',
        phase: null,
        reason: null,
        counts: null,
        evidence: null,
      };
      const heads = [];
      for (const [i, e] of EVENTS.slice(0, 3).entries())
        heads.push(await sink.appendAudit({ ...base, ...e, seq: i + 1, at: at(i) }));
      const broken = auditFilePath(dir2, 'rollout:demo');
      writeFileSync(broken, `${readFileSync(broken, 'utf8')}not a record\n`);
      const brokenText = readFileSync(broken, 'utf8');
      await sink.appendAudit({
        ...base,
        seq: 4,
        at: at(4),
        event: 'audit.override',
        by: 'carol',
        reason: 'disk error ate line 4; continuing after record 3',
        lastGood: heads[2]!,
      });
      const after = await sink.appendAudit({ ...base, seq: 5, at: at(5), event: 'rollout.resumed', by: 'carol' });
      const run = await wavegate([
        'audit',
        'rollout:demo',
        '--verify',
        '--audit-dir',
        dir2,
        '--head',
        `${after.seq}:${after.hash}`,
      ]);
      expect(run.code, run.stdout + run.stderr).toBe(0);
      const out = run.stdout.split('\n');
      expect(out[1]).toMatch(
        /^segment 2 \(.*rollout%3Ademo\+2\.jsonl\): started by an operator override, record 4 by carol at .*: "disk error ate line 4; continuing after record 3"; continues after record 3$/,
      );
      expect(out[0]).toMatch(
        /^segment 1 \(.*rollout%3Ademo\.jsonl\): edited at seq 4: line 4 \(record 4\) is not a JSON audit record — set aside by the override in segment 2, kept as it is$/,
      );
      expect(out[2]).toBe('audit rollout:demo: 5 records, chain intact');
      expect(readFileSync(broken, 'utf8')).toBe(brokenText);
      // A segment that does not start with an override is refused.
      writeFileSync(
        auditFilePath(dir2, 'rollout:demo', undefined, 3),
        `${readFileSync(auditFilePath(dir2, 'rollout:demo', undefined, 2), 'utf8').split('\n')[1]}\n`,
      );
      const forged = await wavegate(['audit', 'rollout:demo', '--verify', '--audit-dir', dir2]);
      expect(forged.code).toBe(1);
      expect(forged.stdout).toMatch(
        /no-override at seq 0: .*rollout%3Ademo\+3\.jsonl does not start with an audit\.override record/,
      );
    } finally {
      rmSync(root2, { recursive: true, force: true });
    }
  });

  it('prints a readable table of the records; --json prints them as stored', async () => {
    const run = await wavegate(['audit', 'rollout:demo', ...dirFlag()]);
    expect(run.code).toBe(0);
    const out = run.stdout.split('\n');
    expect(out[0]).toBe(`audit rollout:demo: 5 records in ${file}`);
    expect(out[1]).toMatch(/^SEQ\s+AT\s+EVENT\s+PHASE\s+BY\s+REASON\s+COUNTS$/);
    expect(out[2]).toMatch(/^1\s+2026-03-01T12:00:00\.000Z\s+rollout\.started\s+-\s+alice\s+-\s+total 12, pending 12$/);
    expect(out[5]).toMatch(
      /^4\s+\S+\s+rollout\.paused\s+canary\s+bob\s+checking dashboards before bulk\s+total 12, applied 1, pending 11$/,
    );
    expect(out[6]).toMatch(/^5\s+\S+\s+rollout\.resumed\s+canary\s+bob\s+-\s+-$/);

    const json = await wavegate(['audit', 'rollout:demo', '--json', ...dirFlag()]);
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout)).toEqual(records);
  });

  it('an unknown id is NOT_FOUND, exit 2; the audit dir defaults to $WAVEGATE_AUDIT_DIR', async () => {
    const run = await wavegate(['audit', 'rollout:nope', '--verify', ...dirFlag()]);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(
      /NOT_FOUND: no audit trail for rollout "rollout:nope" \(looked for .*rollout%3Anope\.jsonl\)/,
    );
    const viaEnv = await wavegate(['audit', 'rollout:demo', '--verify'], { WAVEGATE_AUDIT_DIR: auditDir });
    expect(viaEnv.code).toBe(0);
    expect(viaEnv.stdout).toMatch(/^audit rollout:demo: 5 records, chain intact\n/);
  });
});
