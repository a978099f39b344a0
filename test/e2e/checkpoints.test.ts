import { writeKeyFile } from '../support/key-file';
import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify as toYaml } from 'yaml';
import { createFileAuditStore } from '../../audit/file';
import { CHECKPOINTED_EVENTS } from '../../audit/checkpointer';
import { agentKeyPin } from '../../core/agent-auth';
import { parseAuditLog, type AuditRecord } from '../../core/audit';
import { parseCheckpoint } from '../../core/checkpoint';
import { keyPairFromSeed, pinOf, secretKeyFile, type KeyPair } from '../../core/signing';
import { checkTrailCheckpoints } from '../../core/trail-checkpoints';
import { TrailTree } from '../../core/trail-tree';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { demoDevices, type Fleet } from '../../sim';
import { startDevServerEnv } from '../../workers/dev-server';
import { runCli, spawnCliUntil, stopChild } from '../support/cli';
import { fleetWithInventory, scratchDir, writeDemoSpecAt } from '../support/harness';

/**
 * Checkpoints of a real rollout's trail (issue 44 item 2): a real `wavegate witness` process, a real `wavegate
 * worker --checkpoint-key --witness --witness-key` (the compiled processes), a real dev server and the simulated
 * SSH fleet, `wavegate start --wait` as an operator runs it. The trail ends with a checkpoint at each transition
 * record's size, each signed by the worker's key, cosigned by the witness and consistent with the one before, and
 * `wavegate audit --verify --log-key --witness-key` says so. With the witness stopped the next rollout's
 * checkpoints are kept uncosigned, the worker says so, and `audit --verify --witness-key` names each by its size.
 */

const scratch = scratchDir('checkpoints');
const LOG_NAME = 'cp-e2e.worker';
const logPair = keyPairFromSeed(new Uint8Array(32).fill(41));
const witnessPair = keyPairFromSeed(new Uint8Array(32).fill(42));
const auditDir = join(scratch.dir, 'audit');
const specPath = join(scratch.dir, 'spec.yaml');
const NO_CONFIG = {
  TEMPORAL_ADDRESS: '',
  TEMPORAL_PROFILE: '',
  TEMPORAL_CONFIG_FILE: join(scratch.dir, 'none.toml'),
  WAVEGATE_PROFILES: '',
  WAVEGATE_AUDIT_DIR: '',
  WAVEGATE_AUDIT_KEY_FILE: '',
};

const keyFile = (name: string, pair: KeyPair) => writeKeyFile(join(scratch.dir, name), pair);
const logKeyFile = keyFile('checkpoint.key', logPair);
const witnessKeyFile = keyFile('witness.key', witnessPair);
const logPin = join(scratch.dir, 'checkpoint.key.pub.yaml');
writeFileSync(logPin, toYaml(pinOf(logPair, 'control plane')));
const WITNESS_PIN = agentKeyPin(witnessPair.publicKey);

let env: TestWorkflowEnvironment;
let fleet: Fleet;
let inventory = '';
let witness: Awaited<ReturnType<typeof spawnCliUntil>> | undefined;
let worker: Awaited<ReturnType<typeof spawnCliUntil>>;
let witnessUrl = '';

async function startWitness(port = 0): Promise<void> {
  witness = await spawnCliUntil(
    [
      'witness',
      '--key',
      witnessKeyFile,
      '--state-dir',
      join(scratch.dir, 'witness-state'),
      '--log',
      `${LOG_NAME}=${agentKeyPin(logPair.publicKey)}`,
      '--name',
      'witness.e2e/w1',
      '--listen',
      `127.0.0.1:${port}`,
    ],
    /witness listening on http:\/\/127\.0\.0\.1:\d+/,
    60_000,
  );
  witnessUrl = /witness listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(witness.output())![1]!;
}

/** `wavegate start --wait` of the demo spec on the worker's queue; the rollout id it started. */
async function rollout(): Promise<string> {
  const run = await runCli(
    [
      'start',
      '-f',
      specPath,
      '--inventory',
      inventory,
      '--profiles',
      join(PROJECT_ROOT, 'profiles'),
      '--address',
      env.address,
      '--task-queue',
      'q-checkpoints',
      '--wait',
    ],
    { env: NO_CONFIG, timeoutMs: 240_000 },
  );
  expect(run.code, `${run.stdout}\n${run.stderr}`).toBe(0);
  return /rollout (\S+) started/.exec(run.stdout)![1]!;
}

function audit(id: string, extra: string[]) {
  return runCli(['audit', id, '--verify', '--audit-dir', auditDir, '--head', headOf(id), ...extra], {
    env: NO_CONFIG,
  });
}

let trails: Map<string, { records: AuditRecord[]; notes: string[] }>;
const store = createFileAuditStore({ auditDir });
async function trail(id: string) {
  const records = (await store.segments(id)).flatMap((s) => parseAuditLog(s.text).records);
  const notes = await store.checkpoints(id);
  trails.set(id, { records, notes });
  return { records, notes, tree: TrailTree.of(records) };
}
const headOf = (id: string) => {
  const last = trails.get(id)!.records.at(-1)!;
  return `${last.seq}:${last.hash}`;
};
const sizesOf = (notes: string[]) =>
  notes.map((n) => {
    const p = parseCheckpoint(n);
    return p.ok ? p.note.checkpoint.size : -1;
  });
/** The size of the tree ending at each transition record: where the trail must hold a checkpoint. */
const transitionSizes = (records: AuditRecord[]) =>
  records.flatMap((r, i) => (CHECKPOINTED_EVENTS.has(r.event) ? [i + 1] : []));

beforeAll(async () => {
  trails = new Map();
  env = await startDevServerEnv();
  ({ fleet, inventoryPath: inventory } = await fleetWithInventory(scratch.dir, demoDevices(4), {
    'pool-a': 0.5,
    'pool-b': 0.5,
  }));
  writeDemoSpecAt(specPath, { phases: [{ canary: 1 }, { bulk: 'remainder' }], gate: '1s' });
  await startWitness();
  worker = await spawnCliUntil(
    [
      'worker',
      '--address',
      env.address,
      '--task-queue',
      'q-checkpoints',
      '--profiles',
      join(PROJECT_ROOT, 'profiles'),
      '--audit-dir',
      auditDir,
      '--checkpoint-key',
      logKeyFile,
      '--checkpoint-name',
      LOG_NAME,
      '--witness',
      witnessUrl,
      '--witness-key',
      WITNESS_PIN,
    ],
    /worker \S+ polling/,
    120_000,
  );
}, 300_000);

afterAll(async () => {
  if (worker) await stopChild(worker.child);
  if (witness) await stopChild(witness.child);
  await fleet?.stop();
  await env?.teardown();
  scratch.cleanup();
});

describe('wavegate worker refuses bad checkpoint flags before it connects', () => {
  it('a key file others may read, --witness without --witness-key: exit 2 naming the flag, nothing polled', async () => {
    const open = join(scratch.dir, 'open.key');
    writeFileSync(open, `${JSON.stringify(secretKeyFile(logPair))}\n`, { mode: 0o644 });
    chmodSync(open, 0o644);
    for (const [flags, said] of [
      [['--checkpoint-key', open], `--checkpoint-key "${open}": readable by others (mode 644)`],
      [
        ['--checkpoint-key', logKeyFile, '--witness', 'http://127.0.0.1:1'],
        '--witness "http://127.0.0.1:1": needs --witness-key',
      ],
    ] as const) {
      const run = await runCli(
        ['worker', '--address', '127.0.0.1:1', '--task-queue', 'q-bad', '--profiles', PROJECT_ROOT, ...flags],
        { env: NO_CONFIG },
      );
      expect(run.code, run.stderr).toBe(2);
      expect(run.stderr).toContain(said);
      expect(`${run.stdout}${run.stderr}`).not.toContain(Buffer.from(logPair.secretKey).toString('base64'));
      expect(run.stdout).not.toMatch(/polling/);
    }
  }, 120_000);
});

describe('a worker with a checkpoint key and a witness', () => {
  let first = '';

  it('says at start how it checkpoints, with public keys only', () => {
    const out = worker.output();
    expect(out).toContain(
      `checkpoints: at every phase transition, signed as ${LOG_NAME} (${agentKeyPin(logPair.publicKey)}), cosigned by the witness ${witnessUrl}/ (${WITNESS_PIN})`,
    );
    expect(out).not.toContain(Buffer.from(logPair.secretKey).toString('base64'));
  });

  it('a rollout: the trail holds a checkpoint at each transition, each cosigned and consistent; audit --verify says so', async () => {
    first = await rollout();
    const { records, notes, tree } = await trail(first);
    const expected = transitionSizes(records);
    expect(expected.length).toBeGreaterThanOrEqual(6);
    expect(records.some((r) => r.event === 'devices.outcome')).toBe(true);
    expect(sizesOf(notes)).toEqual(expected);
    const verdict = checkTrailCheckpoints(first, notes, tree, {
      log: { publicKey: logPair.publicKey },
      witness: { publicKey: witnessPair.publicKey },
    });
    expect(verdict.checkpoints.filter((c) => c.problems.length)).toEqual([]);
    expect(verdict.checkpoints.every((c) => c.cosigned)).toBe(true);
    expect(witness!.output()).toContain(`cosigned wavegate/${first} size ${expected.at(-1)}`);

    const run = await audit(first, ['--log-key', logPin, '--witness-key', WITNESS_PIN]);
    expect(run.code, `${run.stdout}\n${run.stderr}`).toBe(0);
    expect(run.stdout).toContain(
      `checkpoints: ${expected.length} kept, each the root of the trail's first records and consistent with the one before`,
    );
    expect(run.stdout).toContain(`the witness's cosignatures checked under ${WITNESS_PIN}`);
  }, 300_000);

  it('with the witness stopped: the next rollout is not held up, its checkpoints are kept uncosigned and said; audit --verify --witness-key names each by its size', async () => {
    await stopChild(witness!.child);
    witness = undefined;
    const second = await rollout();
    const { records, notes } = await trail(second);
    const sizes = transitionSizes(records);
    expect(sizesOf(notes)).toEqual(sizes);
    expect(worker.output()).toContain(
      `WARNING: checkpoint: ${second} size ${sizes[0]} (rollout.started) kept UNCOSIGNED`,
    );

    const run = await audit(second, ['--log-key', logPin, '--witness-key', WITNESS_PIN]);
    expect(run.code, `${run.stdout}\n${run.stderr}`).toBe(1);
    for (const [i, size] of sizes.entries())
      expect(run.stdout).toContain(
        `checkpoint ${i + 1} (size ${size}): not cosigned by the witness (the witness refused it or was not reached when it was made)`,
      );
    expect(run.stdout).toContain(`checkpoints: ${sizes.length} of ${sizes.length} FAILED`);
    // Without the witness's key the log's signatures and the roots still hold: what was not checked is said.
    const unchecked = await audit(second, ['--log-key', logPin]);
    expect(unchecked.code, unchecked.stdout).toBe(0);
    expect(unchecked.stdout).toContain("the witness's cosignatures NOT checked");
    // The first rollout's checkpoints under another log key: each one's signature fails, named by its size.
    const other = await audit(first, ['--log-key', agentKeyPin(witnessPair.publicKey)]);
    expect(other.code).toBe(1);
    expect(other.stdout).toMatch(/checkpoint 1 \(size \d+\): no signature of the log under the key given/);
  }, 300_000);
});
