import { readFileSync, writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { auditFilePath, readAuditSegments } from '../../audit/file';
import { storeMembership } from '../../clients/membership';
import { verifyLinkedTrails } from '../../cli/commands/audit';
import type { RolloutInput } from '../../core/rollout/input';
import { verifyAuditSegments } from '../../core/audit';
import { loadRolloutInventory } from '../../intake/inventory';
import { demoDevices } from '../../sim';
import { realRollouts } from '../support/real-rollouts';

/**
 * The slice side and the verifier agree (issue 26): a real sliced-records rollout (real worker, real
 * simulated devices) writes each slice's own trail and links it into the rollout's; `wavegate audit
 * --verify` verifies the rollout's chain against the workflow's head and every linked trail, and a record
 * edited in one slice's trail fails it.
 */
describe('audit --verify over a real sliced rollout', () => {
  const real = realRollouts('audit-verify-sliced');

  it('verifies the rollout and every slice trail it links; an edited slice record fails naming it', async () => {
    const made = await real.rollout({ gate: '0s', phases: [{ bulk: 'remainder' }] }, demoDevices(9), {
      'pool-a': 0.25,
      'pool-b': 0.25,
    });
    const inventory = loadRolloutInventory(made.inventoryPath);
    const membership = await storeMembership(real.env.client, real.worker.taskQueue, inventory, made.inventoryPath);
    const input: RolloutInput = {
      ...made.input,
      rolloutId: 'rollout:audit-sliced:20261205-102300',
      membership,
      records: 'slices',
      sliceSize: 4,
    };
    const handle = await real.start(input);
    const result = await handle.result();
    expect(result.state).toBe('completed');
    const slices = result.slices!;
    expect(slices.map((s) => s.devices)).toEqual([4, 4, 1]);

    // In process, as the board calls it.
    const segments = readAuditSegments(real.auditDir, input.rolloutId);
    const verdict = verifyAuditSegments(segments, { head: result.auditHead! });
    expect(verdict.ok).toBe(true);
    const linked = await verifyLinkedTrails(input.rolloutId, segments, verdict, { auditDir: real.auditDir });
    expect(linked).toMatchObject({ ok: true, trails: 3, failed: 0, deviceRecords: 9, notes: [] });
    expect(linked.results.map((r) => r.trail).sort()).toEqual(slices.map((s) => s.workflowId).sort());

    // The CLI, against the rollout's server: the head the workflow holds, then the links.
    const head = `--head=${result.auditHead!.seq}:${result.auditHead!.hash}`;
    const ok = await real.cli(['audit', input.rolloutId, '--verify', '--audit-dir', real.auditDir, head]);
    expect(ok.code, ok.stdout + ok.stderr).toBe(0);
    expect(ok.stdout).toMatch(/records, chain intact, and 3 linked slice trails \(9 device records\)/);

    const path = auditFilePath(real.auditDir, slices[1]!.workflowId);
    const pristine = readFileSync(path, 'utf8');
    writeFileSync(path, pristine.replace('"state":"applied"', '"state":"failed"'));
    try {
      const bad = await real.cli(['audit', input.rolloutId, '--verify', '--audit-dir', real.auditDir, head]);
      expect(bad.code).toBe(1);
      expect(bad.stdout).toContain(`links slice trail ${slices[1]!.workflowId}: edited at seq 1`);
    } finally {
      writeFileSync(path, pristine);
    }
  }, 180_000);
});
