import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import type { BrowserContext, Page } from 'playwright-core';
import { launchChromium } from '../support/chromium';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createActivities } from '../../activities';
import type { RolloutStatus } from '../../core/rollout/status';
import { demoDevices, type Fleet } from '../../sim';
import { startDevServer, type DevServer } from '../../workers/dev-server';
import { freePort } from '../../sim/ports';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { runCli, type CliRun } from '../support/cli';
import { fleetWithInventory, scratchDir } from '../support/harness';
import { workflowBundle } from '../support/temporal';
import { until } from '../support/until';

/**
 * The Temporal Web UI's workflow list tells a rollout's outcome apart once the operator adds the
 * WavegateState and WavegatePhase columns as the docs say (Configure Columns, clicked in headless
 * Chromium against a real `temporal server start-dev` and its UI). Without them, a completed, a
 * rolled-back and an aborted rollout all read "Completed" and a paused one "Running"; with them each
 * row says what happened. The documented saved views (queries on WorkflowType and WavegateState) list
 * exactly the rollouts, the ones that did not complete, and the paused ones. Screenshots go to
 * test-output/webui-outcomes/ (kept after the run, like test/e2e/webui.test.ts's).
 */
const scratch = scratchDir('webui-outcomes');
const shots = join(PROJECT_ROOT, 'test-output', 'webui-outcomes');
const BUDGETS = { 'pool-a': 0.5, 'pool-b': 0.5 };
let server: DevServer | undefined;
let native: NativeConnection | undefined;
let worker: Worker | undefined;
let running: Promise<void> | undefined;
let client: Client | undefined;
let browser: BrowserContext | undefined;
let page: Page;
const fleets: Fleet[] = [];
const taskQueue = `webui-outcomes-${process.pid}`;
/** The saved views the docs give (Saved Views → Save as New), as typed in the list's query. */
const ROLLOUTS = "WorkflowType = 'rolloutWorkflow'";
const NOT_COMPLETED = "WavegateState IN ('rolled-back', 'aborted', 'failed', 'cancelled')";
const PAUSED = "WavegateState = 'paused'";

function wg(args: string[]): Promise<CliRun> {
  return runCli([...args, '--address', server!.address, '--task-queue', taskQueue], {
    env: {
      TEMPORAL_ADDRESS: '',
      TEMPORAL_PROFILE: '',
      TEMPORAL_CONFIG_FILE: join(scratch.dir, 'none.toml'),
      WAVEGATE_PROFILES: '',
    },
  });
}

interface Started {
  rolloutId: string;
  runId: string;
}

/** A demo r1 → r2 rollout on a fleet of its own (4 simulated devices), started by the real CLI. */
async function startRollout(name: string, phases: unknown[], faulty = false): Promise<Started> {
  const { fleet, inventoryPath } = await fleetWithInventory(join(scratch.dir, name), demoDevices(4), BUDGETS);
  fleets.push(fleet);
  if (faulty) for (const d of fleet.devices) await fleet.setFaults(d.id, { unhealthyRuntimes: ['motd'] });
  const spec = join(scratch.dir, `${name}.yaml`);
  writeFileSync(
    spec,
    stringify({ rollout: { profile: 'demo', fromRevision: 1, toRevision: 2, phases, disruptionBudget: BUDGETS } }),
  );
  const run = await wg(['start', '-f', spec, '--inventory', inventoryPath, '--json']);
  expect(run.code, run.stderr).toBe(0);
  // The id is whatever `start` says it is: this test does not depend on its format.
  const { rolloutId, runId } = JSON.parse(run.stdout.split('\n')[0]!) as Started;
  return { rolloutId, runId };
}

const statusOf = (r: Started) => client!.workflow.getHandle(r.rolloutId, r.runId).query<RolloutStatus>('status');

async function untilState(r: Started, done: (s: RolloutStatus) => boolean, what: string): Promise<RolloutStatus> {
  return until(
    what,
    async () => {
      const s = await statusOf(r).catch(() => undefined);
      return s && done(s) ? s : undefined;
    },
    90_000,
  );
}

/** The run has closed in Temporal (its history, so the list's Status column, is final). */
async function untilClosed(r: Started): Promise<void> {
  await until(
    `${r.rolloutId} run ${r.runId} to close`,
    async () =>
      (await client!.workflow.getHandle(r.rolloutId, r.runId).describe()).status.name === 'RUNNING' ? undefined : true,
    90_000,
  );
}

/** The list's row of one run as {column header: cell text}, found by its run id (unique, unlike a workflow id). */
async function rowOf(runId: string): Promise<Record<string, string>> {
  const headers = (await page.locator('thead th').allInnerTexts()).map((h) => h.trim());
  const cells = (await page.locator('tbody tr').filter({ hasText: runId }).first().locator('td').allInnerTexts()).map(
    (c) => c.trim(),
  );
  return Object.fromEntries(headers.map((h, i) => [h, cells[i] ?? '']).filter(([h]) => h !== ''));
}

/** The run ids the list shows now. */
async function listedRuns(): Promise<string[]> {
  const table = page.locator('tbody').first();
  // biome-ignore lint/performance/useDomNodeTextContent: Playwright's locator.innerText() (the rendered text), not the DOM property
  const text = (await table.innerText().catch(() => '')) ?? '';
  return [...text.matchAll(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g)].map((m) => m[0]).sort();
}

const listUrl = (query?: string) =>
  `${server!.uiUrl}/namespaces/default/workflows${query ? `?query=${encodeURIComponent(query)}` : ''}`;
const shot = (name: string) => page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });

beforeAll(async () => {
  mkdirSync(shots, { recursive: true });
  server = await startDevServer({
    dbFile: join(scratch.dir, 'temporal.db'),
    logFile: join(scratch.dir, 'temporal.log'),
    port: await freePort(),
    uiPort: await freePort(),
  });
  native = await NativeConnection.connect({ address: server.address });
  worker = await Worker.create({
    connection: native,
    namespace: 'default',
    taskQueue,
    workflowBundle: await workflowBundle(),
    activities: createActivities({ auditDir: join(scratch.dir, 'audit') }),
  });
  running = worker.run();
  client = new Client({ connection: await Connection.connect({ address: server.address }) });
  browser = await launchChromium(scratch.dir, { width: 1600, height: 900 });
  page = await browser.newPage();
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await client?.connection.close();
  worker?.shutdown();
  await running?.catch(() => undefined);
  await native?.close();
  for (const f of fleets) await f.stop();
  await server?.stop();
  scratch.cleanup();
});

describe('the Temporal Web UI workflow list tells rollout outcomes apart', () => {
  it('with the documented WavegateState and WavegatePhase columns: completed, rolled-back, aborted and paused rows differ; the saved views find them', async () => {
    const canaryThenBulk = (canary: Record<string, unknown>) => [
      { canary: '1 device', ...canary },
      { bulk: 'remainder', gate: '0s' },
    ];

    // One completed, one rolled back by its failing health gate, one aborted at its gate, one paused there.
    // One after another: one running rollout per profile.
    const completed = await startRollout('completed', canaryThenBulk({ gate: '0s' }));
    expect((await untilState(completed, (s) => s.state !== 'running', 'the rollout to complete')).state).toBe(
      'completed',
    );
    await untilClosed(completed);

    const rolledBack = await startRollout(
      'rolled-back',
      canaryThenBulk({ gate: '0s', healthGate: ['all-runtimes-healthy'] }),
      true,
    );
    expect(
      (await untilState(rolledBack, (s) => s.state !== 'running', 'the failed health gate to roll the canary back'))
        .state,
    ).toBe('rolled-back');
    await untilClosed(rolledBack);

    const aborted = await startRollout('aborted', canaryThenBulk({ gate: 'manual' }));
    await untilState(aborted, (s) => s.phases[0]?.stage === 'awaiting-approval', 'the canary at its manual gate');
    const abort = await wg(['abort', aborted.rolloutId, '--reason', 'webui outcomes test']);
    expect(abort.code, abort.stderr).toBe(0);
    expect((await untilState(aborted, (s) => s.state !== 'running', 'the abort to finish')).state).toBe('aborted');
    await untilClosed(aborted);

    const paused = await startRollout('paused', canaryThenBulk({ gate: 'manual' }));
    await untilState(paused, (s) => s.phases[0]?.stage === 'awaiting-approval', 'the canary at its manual gate');
    const pause = await wg(['pause', paused.rolloutId, '--reason', 'webui outcomes test']);
    expect(pause.code, pause.stderr).toBe(0);
    await untilState(paused, (s) => s.state === 'paused', 'the pause');

    const all = { completed, 'rolled-back': rolledBack, aborted, paused };
    const truth: Record<string, RolloutStatus> = {};
    for (const [name, r] of Object.entries(all)) truth[name] = await statusOf(r);

    // 1. The list as it comes: Temporal's own status says Completed for three different outcomes and Running for a pause.
    await page.goto(listUrl(ROLLOUTS));
    await expect.poll(listedRuns, { timeout: 30_000 }).toEqual(
      Object.values(all)
        .map((r) => r.runId)
        .sort(),
    );
    for (const r of [completed, rolledBack, aborted]) expect((await rowOf(r.runId)).Status).toMatch(/^completed$/i);
    expect((await rowOf(paused.runId)).Status).toMatch(/^running$/i);
    expect((await page.locator('thead th').allInnerTexts()).map((h) => h.trim())).not.toContain('WavegateState');
    await shot('1-list-before-columns');

    // 2. The documented steps: Configure Columns, add WavegateState and WavegatePhase, move them up next to Status.
    await page.getByRole('button', { name: 'Configure Columns' }).click();
    for (const column of ['WavegateState', 'WavegatePhase']) {
      await page.getByRole('button', { name: `Add ${column} column` }).click();
      const up = page.getByRole('button', { name: `Move ${column} column up` });
      // Up until it sits right after Status (Status itself has no "up").
      await expect
        .poll(
          async () => {
            const order = await page
              .locator('li[data-testid^="orderable-list-item-"][draggable="true"]')
              .evaluateAll((els) => els.map((e) => e.getAttribute('data-testid')!.replace('orderable-list-item-', '')));
            const at = order.indexOf(column);
            const target = column === 'WavegateState' ? 1 : 2;
            if (at > target) await up.click();
            return order.indexOf(column) - target;
          },
          { timeout: 20_000, interval: 100 },
        )
        .toBe(0);
    }
    await shot('2-configure-columns');
    await page.getByRole('button', { name: 'Close' }).first().click();

    // 3. The documented "Rollouts" view (the list also holds wavegate's lock, membership and preflight
    // workflows): each row now says what happened, and in which phase, as the rollout itself reports it.
    await page.goto(listUrl(ROLLOUTS));
    await expect.poll(listedRuns, { timeout: 30_000 }).toEqual(
      Object.values(all)
        .map((r) => r.runId)
        .sort(),
    );
    const expectedState = {
      completed: 'completed',
      'rolled-back': 'rolled-back',
      aborted: 'aborted',
      paused: 'paused',
    } as const;
    await expect
      .poll(async () => (await page.locator('thead th').allInnerTexts()).map((h) => h.trim()).slice(2, 5))
      .toEqual(['Status', 'WavegateState', 'WavegatePhase']);
    const rows: Record<string, Record<string, string>> = {};
    for (const [name, r] of Object.entries(all)) {
      rows[name] = await rowOf(r.runId);
      expect(rows[name]!.WavegateState, name).toBe(expectedState[name as keyof typeof expectedState]);
      expect(rows[name]!.WavegateState, name).toBe(truth[name]!.state);
      expect(rows[name]!.WavegatePhase, name).toBe(truth[name]!.phase);
    }
    // At a glance: four rows, four different states (the Status column alone had two).
    expect(new Set(Object.values(rows).map((row) => row.WavegateState)).size).toBe(4);
    await shot('3-list-with-wavegate-columns');

    // The columns are the browser's setting for this namespace: they are still there after a reload.
    await page.reload();
    await expect
      .poll(async () => (await rowOf(rolledBack.runId)).WavegateState, { timeout: 30_000 })
      .toBe('rolled-back');

    // 4. The documented saved views: rollouts that did not complete, and paused rollouts.
    await page.goto(listUrl(NOT_COMPLETED));
    await expect.poll(listedRuns, { timeout: 30_000 }).toEqual([rolledBack.runId, aborted.runId].sort());
    await page.getByRole('button', { name: 'Save as New' }).click();
    await page.locator('dialog[open] #view-name').fill('Rollouts that did not complete');
    await page.locator('dialog[open]').getByTestId('confirm-modal-button').click();
    await shot('4-saved-view-not-completed');

    await page.goto(listUrl(PAUSED));
    await expect.poll(listedRuns, { timeout: 30_000 }).toEqual([paused.runId]);

    // The saved view comes back from the Saved Views menu, on the unfiltered list.
    await page.goto(listUrl());
    await expect.poll(async () => (await listedRuns()).length, { timeout: 30_000 }).toBeGreaterThanOrEqual(4);
    await page.locator('#workflow-saved-views-button').click();
    await page.getByText('Rollouts that did not complete').click();
    await expect.poll(listedRuns, { timeout: 30_000 }).toEqual([rolledBack.runId, aborted.runId].sort());
    expect(decodeURIComponent(page.url()).replace(/\+/g, ' ')).toContain(NOT_COMPLETED);
  }, 240_000);
});
