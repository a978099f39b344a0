import { mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auditFilePath, createAuditActivities, ensureAuditKeyFile, readAuditKey } from '../../audit/file';
import type { AuditHead } from '../../core/audit';
import { startDevServerEnv } from '../../workers/dev-server';
import { rolloutWorkflow } from '../../workflows/rollout';
import { runCli, type CliRun } from '../support/cli';
import { createMockActivities, mockDevices, mockInput } from '../support/mock-activities';
import { workflowBundle } from '../support/temporal';

/**
 * `wavegate audit --verify` over several runs of one rollout id (issue 22), on a real Temporal dev
 * server with the real file audit store: each chain is compared with the head of the run that wrote it
 * (described by its own run id), not with the rollout's latest run; a trail deleted from the store while
 * the workflow holds its head is a verification failure (exit 1) naming that head; an id that is
 * neither a trail nor a rollout stays NOT_FOUND (exit 2).
 *
 * Run 1 writes to store A, run 2 (the latest, with one more phase: a longer chain) to store B, so store
 * A's current chain is run 1's while the rollout's latest run is run 2.
 */
describe("audit --verify: each run's chain against its own run's head (real dev server)", () => {
  let env: TestWorkflowEnvironment;
  const workers: Array<{ worker: Worker; running: Promise<void> }> = [];
  const root = mkdtempSync(join(tmpdir(), 'wavegate-audit-runs-'));
  const dirA = join(root, 'store-a');
  const dirB = join(root, 'store-b');
  const keyFile = ensureAuditKeyFile(join(root, 'audit.key'));
  const rolloutId = 'rollout:audit-runs';
  let run1 = '';
  let run2 = '';
  let head1: AuditHead;
  let head2: AuditHead;
  let pristineA = '';
  let pristineB = '';

  async function runOn(
    auditDir: string,
    taskQueue: string,
    phases: unknown[],
  ): Promise<{ runId: string; head: AuditHead }> {
    const mocks = createMockActivities();
    const worker = await Worker.create({
      connection: env.nativeConnection,
      namespace: env.namespace ?? 'default',
      taskQueue,
      workflowBundle: await workflowBundle(),
      activities: { ...mocks.activities, ...createAuditActivities({ auditDir, macKey: readAuditKey(keyFile) }) },
    });
    workers.push({ worker, running: worker.run() });
    mocks.add(rolloutId, { devices: mockDevices(3) });
    const handle = await env.client.workflow.start(rolloutWorkflow, {
      workflowId: rolloutId,
      taskQueue,
      args: [mockInput(rolloutId, { gate: '100ms', phases })],
    });
    const result = await handle.result();
    expect(result.state).toBe('completed');
    return { runId: handle.firstExecutionRunId, head: result.auditHead! };
  }

  beforeAll(async () => {
    env = await startDevServerEnv();
    ({ runId: run1, head: head1 } = await runOn(dirA, `audit-runs-a-${process.pid}`, [{ bulk: 'remainder' }]));
    ({ runId: run2, head: head2 } = await runOn(dirB, `audit-runs-b-${process.pid}`, [
      { canary: '1 device' },
      { bulk: '1 device', name: 'early' },
      { bulk: 'remainder' },
    ]));
    expect(run2).not.toBe(run1);
    // The runs' heads differ, so a chain compared with the wrong one could not pass.
    expect(head2.seq, `run 1 ${head1.seq} records, run 2 ${head2.seq}`).toBeGreaterThan(head1.seq);
    pristineA = readFileSync(auditFilePath(dirA, rolloutId), 'utf8');
    pristineB = readFileSync(auditFilePath(dirB, rolloutId), 'utf8');
  }, 180_000);

  afterAll(async () => {
    for (const w of workers) w.worker.shutdown();
    await Promise.all(workers.map((w) => w.running));
    await env?.teardown();
    rmSync(root, { recursive: true, force: true });
  });

  const verify = (auditDir: string, extra: string[] = []): Promise<CliRun> =>
    runCli(
      [
        'audit',
        rolloutId,
        '--verify',
        '--audit-dir',
        auditDir,
        '--address',
        env.address,
        '--namespace',
        env.namespace ?? 'default',
        '--audit-key-file',
        keyFile,
        ...extra,
      ],
      {
        env: {
          WAVEGATE_AUDIT_KEY_FILE: '',
          WAVEGATE_AUDIT_STORE: '',
          TEMPORAL_ADDRESS: '',
          TEMPORAL_PROFILE: '',
          TEMPORAL_CONFIG_FILE: join(root, 'none.toml'),
        },
        timeoutMs: 60_000,
      },
    );

  it("the first run's chain (--run <run 1>) is compared with run 1's head and passes, though run 2 is the latest", async () => {
    writeFileSync(auditFilePath(dirA, rolloutId), pristineA);
    const run = await verify(dirA, ['--run', run1, '--strict']);
    expect(run.code, run.stdout + run.stderr).toBe(0);
    expect(run.stdout).toContain(`head: compared with the workflow's head (${rolloutId} run ${run1} `);
    expect(run.stdout).toContain(`record ${head1.seq} ${head1.hash.slice(0, 12)}`);
    expect(run.stdout).not.toContain(run2);
  });

  it("tampering with the first run's chain is found against run 1's own head, not the latest run's", async () => {
    const lines = pristineA.trimEnd().split('\n');
    writeFileSync(auditFilePath(dirA, rolloutId), `${lines.slice(0, -2).join('\n')}\n`);
    try {
      const run = await verify(dirA, ['--run', run1]);
      expect(run.code, run.stdout + run.stderr).toBe(1);
      // Cut off at run 1's head (records head1-1..head1), not run 2's longer one.
      expect(run.stdout).toMatch(
        new RegExp(`truncated at seq ${head1.seq - 1}: .*records ${head1.seq - 1}–${head1.seq} were cut off`),
      );
      expect(run.stdout).toContain(`run ${run1} `);
    } finally {
      writeFileSync(auditFilePath(dirA, rolloutId), pristineA);
    }
  });

  it('without --run the current chain is compared with the head of the run that wrote it, and a latest run whose trail this store lacks is named', async () => {
    const run = await verify(dirA);
    expect(run.code, run.stdout + run.stderr).toBe(1);
    // Run 1's chain is whole against run 1's head: no false "edited" from run 2's head.
    expect(run.stdout).toContain(`audit ${rolloutId}: ${head1.seq} records, chain intact`);
    expect(run.stdout).toMatch(
      new RegExp(
        `head: compared with the workflow's head \\(${rolloutId} run ${run1} .*, the run that wrote this chain`,
      ),
    );
    expect(run.stdout).toContain(
      `latest run: the rollout's latest run ${run2} holds an audit head (${head2.seq} records up to seq ${head2.seq}`,
    );
    expect(run.stdout).toContain(`run ${run2}'s trail is missing there`);
    // Store B holds run 2's chain: compared with run 2's head, it passes.
    const b = await verify(dirB, ['--strict']);
    expect(b.code, b.stdout + b.stderr).toBe(0);
    expect(b.stdout).toContain(`head: compared with the workflow's head (${rolloutId} run ${run2} `);
  });

  it("a trail deleted from the store while the workflow holds its head: exit 1 naming the head's seq and hash", async () => {
    unlinkSync(auditFilePath(dirB, rolloutId));
    try {
      const run = await verify(dirB);
      expect(run.code, run.stdout + run.stderr).toBe(1);
      expect(run.stdout).toContain(
        `trail deleted: the workflow's head (${rolloutId} run ${run2} on ${env.address}, completed) says ${head2.seq} records up to seq ${head2.seq} (hash ${head2.hash})`,
      );
      expect(run.stdout).toContain(`${dirB} has none`);
      expect(run.stderr).not.toContain('NOT_FOUND');
      // Offline, with the head the operator kept: the same verdict.
      const offline = await runCli(
        ['audit', rolloutId, '--verify', '--audit-dir', dirB, '--head', `${head2.seq}:${head2.hash}`],
        { env: { WAVEGATE_AUDIT_STORE: '' } },
      );
      expect(offline.code, offline.stdout + offline.stderr).toBe(1);
      expect(offline.stdout).toContain(
        `trail deleted: --head ${head2.seq}:${head2.hash.slice(0, 12)}… says ${head2.seq} records`,
      );
    } finally {
      writeFileSync(auditFilePath(dirB, rolloutId), pristineB, { mode: 0o600 });
    }
  });

  it('neither a trail nor a rollout: NOT_FOUND, exit 2', async () => {
    const run = await runCli(
      ['audit', 'rollout:never-started', '--verify', '--audit-dir', dirA, '--address', env.address],
      { env: { WAVEGATE_AUDIT_STORE: '', WAVEGATE_AUDIT_KEY_FILE: '' } },
    );
    expect(run.code, run.stdout + run.stderr).toBe(2);
    expect(run.stderr).toMatch(
      /wavegate: NOT_FOUND: no audit trail for rollout "rollout:never-started" .*, and no rollout "rollout:never-started" on .*: no such rollout/,
    );
  });
});
