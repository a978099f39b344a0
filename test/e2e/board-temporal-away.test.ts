import type { ChildProcess } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createActivities } from '../../activities';
import type { RolloutStatus } from '../../core/rollout/status';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { demoDevices, type Fleet } from '../../sim';
import { freePort } from '../../sim/ports';
import { startDevServer, type DevServer } from '../../workers/dev-server';
import { launchChromium } from '../support/chromium';
import { runCli, spawnCliUntil, stopChild } from '../support/cli';
import { fleetWithInventory, scratchDir, writeDemoSpec } from '../support/harness';
import { workflowBundle } from '../support/temporal';
import { until } from '../support/until';

/**
 * `wavegate board` (a real process) while its Temporal dev server is stopped and started again on the
 * same port and database: every answer that needs Temporal is 503 UNAVAILABLE within the documented 10 s
 * (the list, a rollout, a control), and a rollout page left open in Chromium says Temporal is away, then
 * clears that notice by itself once Temporal answers again, in the same document.
 */
const scratch = scratchDir('board-away');
const TOKEN = 'alice-7f83b1657ff1fc53b92dc18148a1d65dfc2d4b1fa3d677284addd200126d9069';
const taskQueue = `board-away-${process.pid}`;
const auditDir = join(scratch.dir, 'audit');
const blind = { TEMPORAL_ADDRESS: '', TEMPORAL_PROFILE: '', TEMPORAL_CONFIG_FILE: join(scratch.dir, 'none.toml') };
let serverOpts: Parameters<typeof startDevServer>[0];
let server: DevServer | undefined;
let native: NativeConnection | undefined;
let worker: Worker | undefined;
let running: Promise<void> | undefined;
let client: Client | undefined;
let fleet: Fleet | undefined;
let board: { url: string; child: ChildProcess } | undefined;
let browser: BrowserContext | undefined;
let page: Page;
let rolloutId = '';

beforeAll(async () => {
  mkdirSync(auditDir, { recursive: true });
  serverOpts = {
    dbFile: join(scratch.dir, 'temporal.db'),
    logFile: join(scratch.dir, 'temporal.log'),
    port: await freePort(),
    uiPort: await freePort(),
  };
  server = await startDevServer(serverOpts);
  native = await NativeConnection.connect({ address: server.address });
  worker = await Worker.create({
    connection: native,
    namespace: 'default',
    taskQueue,
    workflowBundle: await workflowBundle(),
    activities: createActivities({ auditDir }),
  });
  running = worker.run();
  client = new Client({ connection: await Connection.connect({ address: server.address }) });
  const made = await fleetWithInventory(join(scratch.dir, 'fleet'), demoDevices(3), { 'pool-a': 0.5, 'pool-b': 0.5 });
  fleet = made.fleet;
  const spec = writeDemoSpec(scratch.dir, 'held', {
    phases: [
      { canary: '1 device', gate: 'manual' },
      { bulk: 'remainder', gate: '0s' },
    ],
  });
  const started = await runCli(
    [
      'start',
      '-f',
      spec,
      '--inventory',
      made.inventoryPath,
      '--json',
      '--address',
      server.address,
      '--task-queue',
      taskQueue,
    ],
    { env: { ...blind, WAVEGATE_PROFILES: '' } },
  );
  expect(started.code, started.stderr).toBe(0);
  rolloutId = (JSON.parse(started.stdout.split('\n')[0]!) as { rolloutId: string }).rolloutId;
  await until('the canary at its manual gate', async () =>
    (await client!.workflow.getHandle(rolloutId).query<RolloutStatus>('status')).phases[0]?.stage ===
    'awaiting-approval'
      ? true
      : undefined,
  );
  const tokens = join(scratch.dir, 'board.tokens');
  writeFileSync(tokens, `alice ${TOKEN}\n`, { mode: 0o600 });
  const port = await freePort();
  const { child } = await spawnCliUntil(
    [
      'board',
      '--listen',
      `127.0.0.1:${port}`,
      '--token-file',
      tokens,
      '--audit-dir',
      auditDir,
      '--address',
      server.address,
      '--task-queue',
      taskQueue,
    ],
    /board listening on/,
    60_000,
    blind,
  );
  board = { url: `http://127.0.0.1:${port}`, child };
  browser = await launchChromium(scratch.dir, { width: 1400, height: 900 });
  page = await browser.newPage();
}, 180_000);

afterAll(async () => {
  await browser?.close();
  if (board) await stopChild(board.child);
  await client?.connection.close();
  worker?.shutdown();
  await running?.catch(() => undefined);
  await native?.close();
  await fleet?.stop();
  await server?.stop();
  scratch.cleanup();
});

describe('the board while Temporal is away', () => {
  it('answers 503 within 10 s, and a page left open clears its "Temporal away" notice once Temporal is back', async () => {
    await page.goto(board!.url);
    await page.locator('#token').fill(`alice ${TOKEN}`); // the token file's whole line, as pasted
    await page.locator('#login button[type="submit"]').click();
    await page.locator('#who', { hasText: 'signed in as alice' }).waitFor();
    const session = await (async () => {
      const res = await fetch(`${board!.url}/api/login`, {
        method: 'POST',
        headers: { origin: board!.url, 'content-type': 'application/json' },
        body: JSON.stringify({ token: TOKEN }),
      });
      return {
        cookie: res.headers.get('set-cookie')!.split(';')[0]!,
        csrf: ((await res.json()) as { csrf: string }).csrf,
      };
    })();
    await page.goto(`${board!.url}/#/rollout/${encodeURIComponent(rolloutId)}`);
    await page.locator('#banner[data-state="running"]').waitFor();
    await page.evaluate(`window.boardTest = 'same document'`);
    expect(await page.locator('#notice').isHidden()).toBe(true);

    await server!.stop();
    const bearer = { authorization: `Bearer ${TOKEN}` };
    const timed = async (what: string, init: RequestInit & { path: string }) => {
      const started = Date.now();
      const res = await fetch(`${board!.url}${init.path}`, init);
      const body = (await res.json()) as { code: string; message: string };
      return { what, status: res.status, code: body.code, message: body.message, ms: Date.now() - started };
    };
    // The three at once: each is timed on its own, and the file runs alone (10 s each, not 30 s in all).
    const answers = await Promise.all([
      timed('list', { path: '/api/rollouts', headers: bearer }),
      timed('rollout', { path: `/api/rollouts/${encodeURIComponent(rolloutId)}`, headers: bearer }),
      timed('pause', {
        path: `/api/rollouts/${encodeURIComponent(rolloutId)}/pause`,
        method: 'POST',
        headers: {
          cookie: session.cookie,
          origin: board!.url,
          'content-type': 'application/json',
          'x-csrf-token': session.csrf,
        },
        body: JSON.stringify({ reason: 'while Temporal is away' }),
      }),
    ]);
    console.log(`board with Temporal away: ${answers.map((a) => `${a.what} ${a.status} in ${a.ms} ms`).join(', ')}`);
    for (const a of answers) {
      expect({ what: a.what, status: a.status, code: a.code }).toEqual({
        what: a.what,
        status: 503,
        code: 'UNAVAILABLE',
      });
      expect(a.ms).toBeLessThan(11_000);
      expect(a.message).toMatch(/Temporal did not answer within 10 s|giving up/);
    }
    // The page says so, and keeps trying.
    await page.locator('#notice', { hasText: /^Temporal: .*; still trying$/ }).waitFor({ timeout: 30_000 });

    // Temporal back on the same port and database: the notice goes by itself, no navigation.
    server = await startDevServer({ ...serverOpts });
    expect(server.address).toBe(`127.0.0.1:${serverOpts.port}`);
    await page.locator('#notice').waitFor({ state: 'hidden', timeout: 90_000 });
    expect(await page.evaluate('window.boardTest')).toBe('same document');
    expect(page.url()).toBe(`${board!.url}/#/rollout/${encodeURIComponent(rolloutId)}`);
    await page.locator('#banner[data-state="running"]').waitFor();
    expect(await page.locator('#load-error').count()).toBe(0);
    await page.screenshot({ path: join(PROJECT_ROOT, 'test-output', 'board-temporal-back.png') });
  });
});
