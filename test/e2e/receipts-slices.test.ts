import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import { describe, expect, it } from 'vitest';
import { readReceiptsBundle } from '../../audit/bundle';
import { storeMembership } from '../../clients/membership';
import { parseAuditLog } from '../../core/audit';
import { parseReceipt, receiptNonce } from '../../core/receipt';
import type { RolloutInput } from '../../core/rollout/input';
import { linkOf } from '../../core/trail-link';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { loadRolloutInventory } from '../../intake/inventory';
import { demoDevices } from '../../sim';
import { rolloutInputFor } from '../support/harness';
import { realRollouts } from '../support/real-rollouts';

/**
 * Receipts kept in slice trails, end to end (issue 44): a rollout with sliced records (`records: 'slices'`,
 * `sliceSize: 3`) over simulated SSH devices, each enrolled with its own receipt key and the shipped signer
 * (device/receipt-signer, run as the test's user: the set-up without sudo of test/e2e/ssh-receipts.test.ts), on the
 * real worker. `wavegate audit export` follows the trail's links into every slice trail, and `wavegate audit verify
 * --receipts`, a separate process that reads nothing but the bundle, proves every receipt with nothing refused.
 */
const SIGNER = join(PROJECT_ROOT, 'device', 'receipt-signer', 'wavegate-sign-receipt');
const real = realRollouts('receipts-slices');

function enrol(dir: string, id: string): { key: string; command: string } {
  const state = join(dir, 'receipt-state', id);
  mkdirSync(state, { recursive: true, mode: 0o700 });
  execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', id, '-f', join(state, 'key')]);
  const line = readFileSync(join(state, 'key.pub'), 'utf8').trim().split(' ').slice(0, 2).join(' ');
  return { key: line, command: `sh ${SIGNER} ${state}` };
}

describe('receipts in slice trails, exported and verified', () => {
  it('a sliced rollout over enrolled SSH devices: every receipt, in the slices too, proven offline; status agrees', async () => {
    const made = await real.fleet(demoDevices(7), { 'pool-a': 0.5, 'pool-b': 0.5 });
    const doc = parse(readFileSync(made.inventoryPath, 'utf8')) as { devices: Array<Record<string, unknown>> };
    for (const d of doc.devices) d.receipts = enrol(made.dir, String(d.id));
    writeFileSync(made.inventoryPath, stringify(doc));
    const rolloutId = 'rollout:receipts-slices';
    const base = rolloutInputFor(
      made.dir,
      { gate: '0s', phases: [{ canary: '1 device' }, { bulk: 'remainder' }] },
      made.inventoryPath,
      rolloutId,
    );
    const inventory = loadRolloutInventory(made.inventoryPath);
    const membership = await storeMembership(real.env.client, real.worker.taskQueue, inventory, made.inventoryPath);
    const input: RolloutInput = { ...base, membership, records: 'slices', sliceSize: 3 };
    const handle = await real.start(input);
    const result = await handle.result();
    expect(result.state).toBe('completed');
    expect(result.counts).toMatchObject({ applied: 7, total: 7 });
    const slices = result.slices!;
    expect(slices.length).toBe(2);

    const bundle = join(made.dir, 'bundle');
    const exported = await real.cli([
      'audit',
      'export',
      rolloutId,
      '--bundle',
      bundle,
      '--inventory',
      made.inventoryPath,
      '--profiles',
      join(PROJECT_ROOT, 'profiles'),
      '--audit-dir',
      real.auditDir,
    ]);
    expect(exported.stderr).toBe('');
    expect(exported.stdout).toMatch(/2 slice trail\(s\) of \d+ records, 7 receipts of 7 devices/);
    expect(exported.code).toBe(0);

    // The slices' receipts were asked for by the slice workflows: their rollout is the slice's workflow id, their
    // nonce the slice's run's (each slice trail record's rolloutId and runId).
    const read = readReceiptsBundle(bundle);
    expect(read.slices!.map((s) => s.trail).sort()).toEqual(slices.map((s) => s.workflowId).sort());
    const inSlices = new Set<string>();
    for (const slice of read.slices!)
      for (const record of parseAuditLog(slice.segments!.map((s) => s.text).join('')).records)
        for (const entry of (record.evidence as { devices: Array<{ id: string; receipt: string; request: string }> })
          .devices) {
          const parsed = parseReceipt(entry.receipt);
          if (!parsed.ok) throw new Error(parsed.problem);
          expect(parsed.receipt.fields.rollout).toBe(slice.trail);
          const nonce = receiptNonce({
            rollout: slice.trail,
            run: String(record.runId),
            activity: entry.request,
            device: entry.id,
          });
          expect(parsed.receipt.fields.nonce).toBe(nonce);
          inSlices.add(entry.id);
        }
    expect(inSlices.size).toBe(6);
    const parentLinks = read.segments.flatMap((s) => parseAuditLog(s.text).records).filter((r) => linkOf(r));
    expect(parentLinks).toHaveLength(2);

    // This worker keeps no checkpoints (real-rollouts starts none): the verifier is told so, and says only that.
    const checked = await real.cli(['audit', 'verify', '--receipts', bundle, '--json', '--no-checkpoints-expected']);
    expect(checked.stderr).toBe(
      "wavegate: --no-checkpoints-expected: the bundle holds no checkpoint, so inclusion was not checked: the trail is the control plane's word\n",
    );
    const verdict = JSON.parse(checked.stdout) as {
      ok: boolean;
      findings: unknown[];
      receipts: number;
      proven: number;
      claimed: number;
      slices: { trails: number; anchored: number; receipts: number };
    };
    expect(verdict.findings).toEqual([]);
    expect(verdict).toMatchObject({ ok: true, receipts: 7, proven: 7, claimed: 0 });
    expect(verdict.slices).toMatchObject({ trails: 2, anchored: 2, receipts: 6 });
    expect(checked.code).toBe(0);

    // What status calls proven is proven in the bundle: every device, the slices' included.
    const status = await real.cli(['status', rolloutId, '--devices', '--json']);
    expect(status.code).toBe(0);
    const listed = (JSON.parse(status.stdout) as { devices: Array<{ id: string; proven?: boolean }> }).devices;
    expect(listed).toHaveLength(7);
    const provenInStatus = listed.filter((d) => d.proven).map((d) => d.id);
    expect(provenInStatus.sort()).toEqual(listed.map((d) => d.id).sort());
  }, 240_000);
});
