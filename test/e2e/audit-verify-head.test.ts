import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  auditFilePath,
  createAuditActivities,
  ensureAuditKeyFile,
  readAuditFile,
  readAuditKey,
} from '../../audit/file';
import { GENESIS_HASH, macRecord, sealRecord, serializeAuditRecord, type AuditRecord } from '../../core/audit';
import { startDevServerEnv } from '../../workers/dev-server';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { rolloutWorkflow } from '../../workflows/rollout';
import { createMockActivities, mockDevices, mockInput } from '../support/mock-activities';
import { workflowBundle } from '../support/temporal';

/**
 * `wavegate audit --verify` against the head the workflow holds, on a real Temporal dev server: a real
 * rollout (mocked devices, the real audit sink with a key) writes its trail, then the file is cut or
 * resealed and the CLI, asking the server, must say so with exit 1.
 */
function wavegate(
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [join(PROJECT_ROOT, 'bin', 'wavegate.js'), ...args], {
      cwd: PROJECT_ROOT,
      env: { ...process.env, WAVEGATE_AUDIT_KEY_FILE: '', ...env },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

describe("audit --verify against the workflow's head (real dev server)", () => {
  let env: TestWorkflowEnvironment;
  let worker: Worker;
  let running: Promise<void>;
  const root = mkdtempSync(join(tmpdir(), 'wavegate-audit-head-'));
  const auditDir = join(root, 'audit');
  // Not beside the audit directory (where `audit --verify` would find it unasked): the head is checked without a key too.
  const keyFile = ensureAuditKeyFile(join(root, 'worker-audit.key'));
  const rolloutId = 'rollout:audit-head';
  const file = auditFilePath(auditDir, rolloutId);
  let pristine: string;
  let head: { seq: number; hash: string };
  let address: string;

  beforeAll(async () => {
    env = await startDevServerEnv();
    address = env.address;
    const mocks = createMockActivities();
    const taskQueue = `audit-head-${process.pid}`;
    worker = await Worker.create({
      connection: env.nativeConnection,
      namespace: env.namespace ?? 'default',
      taskQueue,
      workflowBundle: await workflowBundle(),
      activities: { ...mocks.activities, ...createAuditActivities({ auditDir, macKey: readAuditKey(keyFile) }) },
    });
    running = worker.run();
    const input = mockInput(rolloutId, { gate: '100ms', phases: [{ canary: '1 device' }, { bulk: 'remainder' }] });
    mocks.add(rolloutId, { devices: mockDevices(3) });
    const result = await (
      await env.client.workflow.start(rolloutWorkflow, { workflowId: rolloutId, taskQueue, args: [input] })
    ).result();
    expect(result.state).toBe('completed');
    head = result.auditHead!;
    pristine = readFileSync(file, 'utf8');
  }, 120_000);
  afterAll(async () => {
    worker?.shutdown();
    await running;
    await env?.teardown();
    rmSync(root, { recursive: true, force: true });
  });

  const verify = (extra: string[] = []) =>
    wavegate([
      'audit',
      rolloutId,
      '--verify',
      '--audit-dir',
      auditDir,
      '--address',
      address,
      '--namespace',
      env.namespace ?? 'default',
      ...extra,
    ]);

  it("the untouched trail matches the head the workflow holds, and every MAC is the key's", async () => {
    writeFileSync(file, pristine);
    const run = await verify(['--audit-key-file', keyFile, '--strict']);
    expect(run.code, run.stdout + run.stderr).toBe(0);
    expect(run.stdout).toContain(`head: compared with the workflow's head (${rolloutId} run `);
    expect(run.stdout).toContain(`record ${head.seq} ${head.hash.slice(0, 12)}`);
    expect(run.stdout).toContain('MAC: every record checked against the audit key');
  });

  it("a cut tail, a valid shorter chain, is caught against the workflow's head: exit 1 naming the missing records", async () => {
    const lines = pristine.trimEnd().split('\n');
    writeFileSync(file, `${lines.slice(0, -2).join('\n')}\n`);
    const run = await verify(['--audit-key-file', keyFile]);
    expect(run.code).toBe(1);
    expect(run.stdout).toMatch(
      new RegExp(`truncated at seq ${head.seq - 1}: .*records ${head.seq - 1}–${head.seq} were cut off`),
    );
  });

  it("a trail resealed wholesale is caught against the workflow's head, and by the MAC even without the workflow", async () => {
    const records = readAuditFile(auditDir, rolloutId);
    writeFileSync(file, pristine);
    const forged: AuditRecord[] = [];
    for (const r of readAuditFile(auditDir, rolloutId)) {
      const { hash: _h, mac: _m, prev: _p, ...event } = r;
      forged.push(sealRecord(r.seq === 1 ? { ...event, by: 'mallory' } : event, forged.at(-1)?.hash ?? GENESIS_HASH));
    }
    writeFileSync(file, forged.map((r) => `${serializeAuditRecord(r)}\n`).join(''));
    expect(forged.at(-1)!.hash).not.toBe(records.at(-1)!.hash);
    const againstWorkflow = await verify();
    expect(againstWorkflow.code).toBe(1);
    expect(againstWorkflow.stdout).toMatch(
      new RegExp(
        `edited at seq ${head.seq}: record ${head.seq} has hash .* but the writer acknowledged .*: the chain was rewritten`,
      ),
    );
    const offline = await wavegate([
      'audit',
      rolloutId,
      '--verify',
      '--audit-dir',
      auditDir,
      '--address',
      '127.0.0.1:1',
      '--audit-key-file',
      keyFile,
    ]);
    expect(offline.code).toBe(1);
    expect(offline.stdout).toMatch(/unsigned at seq 1: record 1 \(line 1\) carries no MAC/);
    expect(offline.stdout).toMatch(/head: NOT checked: no Temporal server reachable at 127\.0\.0\.1:1/);
    // Resealed with MACs under another key: still not the worker's.
    const other = Uint8Array.from({ length: 32 }, () => 7);
    writeFileSync(file, forged.map((r) => `${serializeAuditRecord(macRecord(r, other))}\n`).join(''));
    const otherKey = await wavegate([
      'audit',
      rolloutId,
      '--verify',
      '--audit-dir',
      auditDir,
      '--head',
      `${forged.at(-1)!.seq}:${forged.at(-1)!.hash}`,
      '--audit-key-file',
      keyFile,
    ]);
    expect(otherKey.code).toBe(1);
    expect(otherKey.stdout).toMatch(/bad-mac at seq 1: .*not the audit key's/);
  });

  it('no rollout of that id on the server: says so, never a silent pass', async () => {
    writeFileSync(auditFilePath(auditDir, 'rollout:elsewhere'), pristine.replaceAll(rolloutId, 'rollout:elsewhere'));
    const run = await wavegate([
      'audit',
      'rollout:elsewhere',
      '--verify',
      '--audit-dir',
      auditDir,
      '--address',
      address,
    ]);
    expect(run.stdout).toMatch(/head: NOT checked: no rollout "rollout:elsewhere" on /);
    const strict = await wavegate([
      'audit',
      'rollout:elsewhere',
      '--verify',
      '--strict',
      '--audit-dir',
      auditDir,
      '--address',
      address,
    ]);
    expect(strict.code).toBe(1);
  });
});
