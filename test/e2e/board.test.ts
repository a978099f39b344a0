import { mkdirSync, writeFileSync } from 'node:fs';
import { userInfo } from 'node:os';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import type { BrowserContext, Page } from 'playwright-core';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createActivities } from '../../activities';
import { resolveAuditLocation } from '../../audit/file';
import { addFreeze, listFreezes } from '../../clients/freeze';
import { readAuditTrail } from '../../audit';
import { deviceSetDigest } from '../../cli/board/fleet';
import { startBoard, type BoardServer } from '../../cli/board/server';
import { parseAuditLog, type AuditRecord } from '../../core/audit';
import type { RolloutStatus } from '../../core/rollout/status';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { demoDevices, type Fleet } from '../../sim';
import { freePort } from '../../sim/ports';
import { startDevServer, type DevServer } from '../../workers/dev-server';
import { launchChromium } from '../support/chromium';
import { runCli, type CliRun } from '../support/cli';
import { fleetWithInventory, scratchDir } from '../support/harness';
import { markerOf } from '../support/rollout-helpers';
import { workflowBundle } from '../support/temporal';
import { until } from '../support/until';

/**
 * `wavegate board` in headless Chromium, over one stack: a Temporal dev server, a worker, one simulated
 * fleet of 6 devices and the board (a token file's `alice`). A rollout is watched live (device rows
 * change state while the page stays the same document), paused and aborted from the page (both reach
 * the rollout and its audit trail as by alice, with the reason typed), a control from a page without a
 * session is refused, a rollout whose health gate fails is shown rolled back with the gate's evidence,
 * the list tells aborted and rolled back from completed, and the audit view verifies the chain; the
 * fleet view converges the device a completed rollout left behind (only the set shown), and that
 * rollout is reverted from its page. A freeze in force shows a banner with its reason, scope and end, and is
 * lifted from its button (not by a caller without a session, nor by a viewer).
 * Screenshots of every view go to test-output/board/ (kept as CI artifacts).
 */
const scratch = scratchDir('board');
const shots = join(PROJECT_ROOT, 'test-output', 'board');
const TOKEN = 'alice-board-token-0123456789-abcdefghij';
/** A viewer's token (the token file's role): it reads, and sends no control. */
const VIEWER_TOKEN = 'vera-viewer-token-0123456789-abcdefghij';
const BUDGETS = { 'pool-a': 0.5, 'pool-b': 0.5 };
const taskQueue = `board-${process.pid}`;
let server: DevServer | undefined;
let native: NativeConnection | undefined;
let worker: Worker | undefined;
let running: Promise<void> | undefined;
let client: Client | undefined;
let board: BoardServer | undefined;
let browser: BrowserContext | undefined;
let page: Page;
let fleet: Fleet | undefined;
let inventoryPath = '';
const auditDir = join(scratch.dir, 'audit');

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

/** A demo r1 → r2 rollout of the fleet, started by the real CLI; its id. */
async function startRollout(name: string, phases: unknown[]): Promise<string> {
  const spec = join(scratch.dir, `${name}.yaml`);
  writeFileSync(
    spec,
    stringify({ rollout: { profile: 'demo', fromRevision: 1, toRevision: 2, phases, disruptionBudget: BUDGETS } }),
  );
  const run = await wg(['start', '-f', spec, '--inventory', inventoryPath, '--json']);
  expect(run.code, run.stderr).toBe(0);
  return (JSON.parse(run.stdout.split('\n')[0]!) as { rolloutId: string }).rolloutId;
}

const statusOf = (id: string) => client!.workflow.getHandle(id).query<RolloutStatus>('status');

async function untilClosed(id: string): Promise<void> {
  await until(
    `${id} to close`,
    async () => ((await client!.workflow.getHandle(id).describe()).status.name === 'RUNNING' ? undefined : true),
    60_000,
  );
}

async function trailOf(id: string): Promise<AuditRecord[]> {
  const { segments } = await readAuditTrail({ auditDir, rolloutId: id, env: {} });
  return segments.flatMap((s) => parseAuditLog(s.text).records);
}

const shot = (name: string) => page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
const openRollout = (id: string) => page.goto(`${board!.url}/#/rollout/${encodeURIComponent(id)}`);

/** A session of alice's as the login form makes it: its cookie and CSRF token. */
async function apiSession(token = TOKEN): Promise<{ cookie: string; csrf: string }> {
  const res = await fetch(`${board!.url}/api/login`, {
    method: 'POST',
    headers: { origin: board!.url, 'content-type': 'application/json' },
    body: JSON.stringify({ token }),
  });
  expect(res.status).toBe(200);
  return { cookie: res.headers.get('set-cookie')!.split(';')[0]!, csrf: ((await res.json()) as { csrf: string }).csrf };
}

/** A converge of demo as the page sends it. */
async function convergeRequest(
  s: { cookie: string; csrf: string },
  body: unknown,
): Promise<{ status: number; body: { code?: string; message?: string } }> {
  const res = await fetch(`${board!.url}/api/fleet/demo/converge`, {
    method: 'POST',
    headers: { cookie: s.cookie, origin: board!.url, 'content-type': 'application/json', 'x-csrf-token': s.csrf },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as { code?: string; message?: string } };
}

/** Click a control on the page, type the reason in its dialog and confirm it. */
async function useControl(name: string, reason: string, before?: () => Promise<unknown>): Promise<void> {
  await page.locator(`button[data-control="${name}"]`).click();
  await page.locator('#confirm-reason').fill(reason);
  await before?.();
  await page.locator('#confirm-ok').click();
}

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
    activities: createActivities({ auditDir }),
  });
  running = worker.run();
  client = new Client({ connection: await Connection.connect({ address: server.address }) });
  const made = await fleetWithInventory(join(scratch.dir, 'fleet'), demoDevices(6), BUDGETS);
  fleet = made.fleet;
  inventoryPath = made.inventoryPath;
  board = await startBoard({
    sources: {
      client,
      audit: { where: resolveAuditLocation({ auditDir }, { env: {} }) },
      transports: new Map(fleet.devices.map((d) => [d.id, 'ssh'])),
      taskQueue,
      profilesRoot: join(PROJECT_ROOT, 'profiles'),
      inventory: inventoryPath,
    },
    listen: { host: '127.0.0.1', port: 0 },
    fleet: {
      client,
      inventory: inventoryPath,
      profiles: join(PROJECT_ROOT, 'profiles'),
      temporal: { address: server.address, taskQueue, configFile: join(scratch.dir, 'none.toml') },
    },
    tokens: [
      { name: 'alice', token: TOKEN },
      { name: 'vera', token: VIEWER_TOKEN, role: 'viewer' },
    ],
    pollMs: 300,
    maxStreams: 2,
    log: () => {},
  });
  browser = await launchChromium(scratch.dir, { width: 1400, height: 900 });
  page = await browser.newPage();
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await board?.close();
  await client?.connection.close();
  worker?.shutdown();
  await running?.catch(() => undefined);
  await native?.close();
  await fleet?.stop();
  await server?.stop();
  scratch.cleanup();
});

describe('the board in Chromium', () => {
  let aborted = '';
  let rolledBack = '';

  it('signs in with a token, shows a rollout live, pauses and aborts it from the page; a page without a session is refused', async () => {
    await page.goto(board!.url);
    await page.locator('#login').waitFor();
    await shot('login');
    await page.locator('#token').fill(TOKEN);
    await page.locator('#login button[type="submit"]').click();
    await page.locator('#who', { hasText: 'signed in as alice' }).waitFor();
    // Every device state the page's table ever shows, recorded in the page as it is drawn.
    // (Strings: this project's TypeScript has no DOM types; the code runs in the page.)
    await page.evaluate(`
      window.seen = [];
      new MutationObserver(() => {
        for (const row of document.querySelectorAll('#device-table tr[data-device]')) {
          const pair = row.getAttribute('data-device') + '=' + row.getAttribute('data-state');
          if (!window.seen.includes(pair)) window.seen.push(pair);
        }
      }).observe(document, { childList: true, subtree: true });
    `);

    // Slow devices: every command on them waits 1 s, so the canary is seen short of applied first.
    for (const d of fleet!.devices) await fleet!.setFaults(d.id, { latencyMs: 1_000 });
    aborted = await startRollout('live', [
      { canary: '1 device', gate: 'manual' },
      { bulk: 'remainder', gate: '0s' },
    ]);
    await openRollout(aborted);
    await page.evaluate(`window.boardTest = 'same document'`);
    await page.locator('#device-table tr[data-state="applying"]').first().waitFor({ timeout: 30_000 });
    await shot('rollout-live');
    await page
      .locator('#phases [data-phase^="canary"] .stage', { hasText: 'awaiting-approval' })
      .waitFor({ timeout: 30_000 });
    // The estimated completion (core/eta.ts): behind the manual gate, so long after the approval, not a time.
    await page.locator('#eta[data-eta="after"]', { hasText: 'after approval' }).waitFor();
    const canary = (await statusOf(aborted)).devices.find((d) => d.phase === 0)!.id;
    // Live: the canary's row went from pending or applying to applied, in the same document (no reload).
    const seen = (await page.evaluate('window.seen')) as string[];
    const ofCanary = seen.filter((p) => p.startsWith(`${canary}=`));
    expect(ofCanary).toContain(`${canary}=applying`);
    expect(ofCanary.at(-1)).toBe(`${canary}=applied`);
    expect(await page.evaluate('window.boardTest')).toBe('same document');
    // Worst first: the applied canary is below the 5 pending devices of the bulk phase.
    const rows = page.locator('#device-table tbody tr');
    await expect.poll(() => rows.count()).toBe(6);
    expect(await rows.last().getAttribute('data-device')).toBe(canary);
    expect(await rows.first().getAttribute('data-state')).toBe('pending');

    // Live streams are bounded: the page holds one, a second is let in, a third is refused as BUSY.
    const events = `${board!.url}/api/rollouts/${encodeURIComponent(aborted)}/events`;
    const held = new AbortController();
    const second = await fetch(events, { headers: { authorization: `Bearer ${TOKEN}` }, signal: held.signal });
    expect(second.status).toBe(200);
    const third = await fetch(events, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(third.status).toBe(503);
    expect(await third.json()).toEqual({
      code: 'BUSY',
      message: '2 live streams are open, the limit; close a board tab or try again',
    });
    held.abort();

    // At its manual gate the canary can be approved: the page offers it (an approve is not sent here).
    await page.locator('button[data-control="approve"]').waitFor();
    // Pause from the page: a reason and a confirmation, recorded as by alice.
    await useControl('pause', 'maintenance window at the edge sites', () => shot('control-dialog'));
    await page.locator('#banner[data-state="paused"]').waitFor();
    expect(await page.evaluate('window.boardTest')).toBe('same document');
    const paused = await statusOf(aborted);
    expect(paused.state).toBe('paused');
    expect(paused.controls.at(-1)).toMatchObject({
      control: 'pause',
      by: 'alice',
      reason: 'maintenance window at the edge sites',
      accepted: true,
    });
    await page.locator('#why', { hasText: 'last control: pause by alice' }).waitFor();
    await shot('rollout-paused');

    // The session gone (cookie cleared): a control from the page is refused, and the rollout stays paused.
    await browser!.clearCookies();
    await useControl('resume', 'should not reach the rollout');
    await page.locator('#confirm-error', { hasText: 'UNAUTHORIZED' }).waitFor();
    await shot('control-refused');
    await page.locator('#confirm-cancel').click();
    expect((await statusOf(aborted)).state).toBe('paused');
    await page.goto(board!.url);
    await page.locator('#token').fill(TOKEN);
    await page.locator('#login button[type="submit"]').click();
    await page.locator('#who', { hasText: 'signed in as alice' }).waitFor();

    // Abort with rollback from the page.
    await openRollout(aborted);
    // The dialog says how many devices the rollback puts back: those this rollout changed (held while paused).
    const changed = (await statusOf(aborted)).changedDevices ?? 0;
    await useControl('abort', 'wrong revision for these sites', async () => {
      expect(await page.locator('#confirm-text').getAttribute('data-devices')).toBe(String(changed));
      expect(await page.locator('#confirm-text').textContent()).toMatch(/put back/);
    });
    await page.locator('#banner[data-outcome="aborted"]').waitFor({ timeout: 60_000 });
    await untilClosed(aborted);
    const final = await statusOf(aborted);
    expect(final.state).toBe('aborted');
    expect(final.controls.map((c) => [c.control, c.by, c.accepted])).toEqual([
      ['pause', 'alice', true],
      ['abort', 'alice', true],
    ]);
    await page.locator('#device-table tr[data-state="rolled-back"]').first().waitFor();
    // The timeline names each control with who sent it.
    await page.locator('#timeline li[data-kind="control"]', { hasText: 'aborted by alice' }).waitFor();
    expect(await page.locator('#timeline li[data-kind="control"]').first().textContent()).toMatch(/paused by alice/);
    await shot('rollout-aborted');
    const trail = await trailOf(aborted);
    expect(trail.find((r) => r.event === 'rollout.paused' && r.by === 'alice')?.reason).toBe(
      'maintenance window at the edge sites',
    );
    expect(trail.find((r) => r.event === 'rollout.aborted')).toMatchObject({
      by: 'alice',
      reason: 'wrong revision for these sites',
    });
    expect(trail.some((r) => r.reason === 'should not reach the rollout')).toBe(false);
  });

  it('shows a rollout whose health gate failed as rolled back, with the evidence of the gate', async () => {
    for (const d of fleet!.devices) await fleet!.setFaults(d.id, { unhealthyRuntimes: ['motd'] });
    rolledBack = await startRollout('rolled-back', [
      { canary: '1 device', gate: '0s', healthGate: ['all-runtimes-healthy'] },
      { bulk: 'remainder', gate: '0s' },
    ]);
    await openRollout(rolledBack);
    await page.locator('#banner[data-outcome="rolled-back"]').waitFor({ timeout: 60_000 });
    const gate = page.locator('#phases [data-phase^="canary"] .gate[data-gate="health"][data-gate-outcome="fail"]');
    await gate.waitFor();
    const canary = (await statusOf(rolledBack)).devices.find((d) => d.phase === 0)!.id;
    const check = gate.locator('table.checks tbody tr').first();
    await expect.poll(() => check.textContent()).toContain('all-runtimes-healthy');
    expect(await check.textContent()).toContain(canary);
    expect(await check.textContent()).toMatch(/fail/);
    // The timeline: the canary's gate failed, then the rollback, in order.
    await page.locator('#timeline li[data-kind="rollback"]').first().waitFor();
    const kinds = await page.locator('#timeline li').evaluateAll((li) => li.map((e) => e.getAttribute('data-kind')));
    expect(kinds.indexOf('gate')).toBeGreaterThan(kinds.indexOf('phase'));
    expect(kinds.indexOf('rollback')).toBeGreaterThan(kinds.indexOf('gate'));
    await shot('gate-evidence');
    // The canary's history across rollouts, from its link: this rollout put it back (r1 → r2, rolled back).
    await page.locator(`#device-table tr[data-device="${canary}"] a`).click();
    const touched = page.locator(`#device-history tr[data-rollout="${rolledBack}"]`);
    await touched.waitFor();
    expect(await touched.getAttribute('data-state')).toBe('rolled-back');
    expect(await touched.textContent()).toMatch(/r1 → r2/);
  });

  it('lists rollouts with their true outcome, and verifies an audit trail on the page', async () => {
    await untilClosed(rolledBack);
    await page.goto(`${board!.url}/#/`);
    const row = (id: string) => page.locator(`#rollouts tr[data-rollout="${id}"]`);
    await row(aborted).waitFor();
    expect(await row(aborted).locator('[data-outcome]').getAttribute('data-outcome')).toBe('aborted');
    expect(await row(rolledBack).locator('[data-outcome]').textContent()).toBe('rolled back');
    // Who started it: the CLI's user, as the audit trail's rollout.started says.
    expect(await row(aborted).textContent()).toContain(userInfo().username);
    expect(await page.locator('#rollouts').textContent()).not.toMatch(/\bCompleted\b/);
    // A time says its zone (the browser's, named), as the estimated ends do.
    expect(await row(aborted).locator('td.started').textContent()).toMatch(
      /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} (UTC|GMT[+-−]?[\d:]*|[A-Z]{2,5})$/,
    );
    await shot('rollouts');
    // The search box: the server matches and pages; the other rollout leaves the list.
    await page.locator('#rollout-search').fill(rolledBack);
    await row(aborted).waitFor({ state: 'detached' });
    expect(await page.locator('#rollouts tbody tr').count()).toBe(1);
    await row(rolledBack).waitFor();
    await page.locator('#rollout-search').fill('');

    await page.goto(`${board!.url}/#/rollout/${encodeURIComponent(aborted)}/audit`);
    await page.locator('#verdict[data-ok="true"]').waitFor();
    expect(await page.locator('#verdict').textContent()).toMatch(/records, chain intact/);
    expect(await page.locator('#verdict').textContent()).toMatch(/head: compared with the workflow's status/);
    const pausedRecord = page.locator('#audit-records tr[data-event="rollout.paused"]').first();
    expect(await pausedRecord.textContent()).toContain('alice');
    await pausedRecord.locator('summary').click();
    expect(await pausedRecord.locator('pre').textContent()).toContain(
      '"reason": "maintenance window at the edge sites"',
    );
    await shot('audit');
  });
  it('shows the fleet per profile: each device verified now, drift, a node-down verdict with its expiry', async () => {
    const down = fleet!.devices[5]!.id;
    const mark = await runCli(
      [
        'fleet',
        'mark-down',
        down,
        '--inventory',
        inventoryPath,
        '--recheck',
        'false',
        '--reason',
        'PSU replaced, parts on order',
        '--expires',
        '7d',
      ],
      { env: { WAVEGATE_PROFILES: '' } },
    );
    expect(mark.code, mark.stderr).toBe(0);
    await page.goto(`${board!.url}/#/fleet`);
    await page.locator('#fleet-profiles a', { hasText: 'demo' }).click();
    await page.locator('#fleet-table tbody tr').first().waitFor({ timeout: 60_000 });
    const rows = page.locator('#fleet-table tbody tr');
    expect(await rows.count()).toBe(6);
    // No rollout completed: the board checks the newest revision, r2; the rolled-back and aborted fleet is at r1.
    expect(await page.locator('#fleet-summary').textContent()).toMatch(/Checking r2: newest/);
    expect(await page.locator('#fleet-summary').textContent()).toMatch(/0 drifted, of 6/);
    // Nothing at the checked revision, so nothing to prove: the proof line says so rather than a bare 0.
    expect(await page.locator('#fleet-proof').textContent()).toBe('0 of 0 proven by their own receipts');
    const downRow = page.locator(`#fleet-table tr[data-device="${down}"]`);
    expect(await downRow.getAttribute('data-state')).toBe('not-for-me');
    expect(await downRow.locator('.verdict').textContent()).toMatch(
      /holds: PSU replaced, parts on order \(by .+, expires \d{4}-/,
    );
    for (const d of fleet!.devices.slice(0, 5)) {
      const row = page.locator(`#fleet-table tr[data-device="${d.id}"]`);
      expect(await row.getAttribute('data-state')).toBe('pending');
      // Drift is checked too: nothing was changed behind wavegate's back (the simulator's r1 carries no marker).
      expect(['ok', 'no-marker']).toContain(await row.getAttribute('data-drift'));
    }
    await shot('fleet');
  });
  it('converges the devices behind a completed rollout and reverts that rollout from the page, each showing first the devices it will touch', async () => {
    for (const d of fleet!.devices) await fleet!.setFaults(d.id, {});
    const completed = await startRollout('completed', [
      { canary: '1 device', gate: '0s' },
      { bulk: 'remainder', gate: '0s' },
    ]);
    await untilClosed(completed);
    const done = await statusOf(completed);
    expect(done.state).toBe('completed');
    const changed = done.devices.filter((d) => d.state === 'applied').map((d) => d.id);
    expect(changed.length).toBe(5); // the sixth is marked down: not-for-me

    // Converge, where it applies: the marked-down device lifted, it is behind r2 where this rollout completed.
    const down = fleet!.devices[5]!.id;
    const up = await runCli(['fleet', 'mark-up', down, '--inventory', inventoryPath], {
      env: { WAVEGATE_PROFILES: '' },
    });
    expect(up.code, up.stderr).toBe(0);
    await page.goto(`${board!.url}/#/fleet/demo`);
    await page.locator('#fleet-again').click();
    await page.locator(`#converge[data-devices="1"]`).waitFor({ timeout: 60_000 });
    expect(await page.locator('#converge').textContent()).toContain(
      `${completed} completed at r2; these devices are behind it now (their verify fails): ${down}.`,
    );
    expect(await page.locator('#converge pre').textContent()).toMatch(/^wavegate converge --profile demo --file /);
    expect(markerOf(fleet!, down)).not.toBe(2); // the simulator's r1 leaves no marker

    // A set other than the one behind now is refused (CONFLICT), nothing started.
    const s = await apiSession();
    const other = [down, fleet!.devices[0]!.id];
    const stale = await convergeRequest(s, { devices: 2, digest: deviceSetDigest(other), reason: 'stale page' });
    expect(stale.status).toBe(409);
    expect(stale.body).toEqual({
      code: 'CONFLICT',
      message: `devices: the page showed 2 device(s) behind r2, 1 are behind now (${down}): check again before converging; nothing was started`,
    });

    // From the page: the devices it will touch, a reason, a confirmation; started by alice over exactly them.
    await page.locator('button[data-control="converge"]').click();
    const touched = page.locator('#confirm-devices li[data-device]');
    expect(await touched.allTextContents()).toEqual([down]);
    expect(await page.locator('#confirm-text').textContent()).toMatch(
      new RegExp(`exactly the 1 device\\(s\\) behind r2, with the spec, signed steps and profile ${completed} ran`),
    );
    await page.locator('#confirm-reason').fill('PSU replaced: bring it to r2');
    await shot('converge-preview');
    await page.locator('#confirm-ok').click();
    await page.locator('#notice', { hasText: 'started by alice' }).waitFor();
    const converge = decodeURIComponent(new URL(page.url()).hash.replace('#/rollout/', ''));
    expect(converge).toBe('rollout:demo:converge-1');
    await page.locator('#banner[data-outcome="completed"]').waitFor({ timeout: 60_000 });
    await untilClosed(converge);
    const converged = await statusOf(converge);
    expect(converged.devices.map((d) => [d.id, d.state])).toEqual([[down, 'applied']]);
    expect([converged.fromRevision, converged.toRevision]).toEqual([1, 2]);
    expect((await trailOf(converge)).find((r) => r.event === 'rollout.started')?.by).toBe('alice');
    expect(markerOf(fleet!, down)).toBe(2);
    // Nothing behind now: the same request is refused, naming why.
    const again = await convergeRequest(s, { devices: 1, digest: deviceSetDigest([down]), reason: 'again' });
    expect(again.status).toBe(409);
    expect(again.body).toMatchObject({ code: 'INVALID_STATE' });
    expect(again.body.message).toMatch(
      new RegExp(`^nothing to converge: no reachable device of "demo" is behind r2 \\(last completed: ${converge}\\)`),
    );

    await openRollout(completed);
    // (The converge's page, completed too, is replaced by this one's.)
    await page.locator('#banner[data-outcome="completed"] h1', { hasText: completed }).waitFor();
    await page.locator('button[data-control="revert"]').click();
    const listed = page.locator('#confirm-devices li[data-device]');
    await expect.poll(() => listed.count()).toBe(5);
    expect((await listed.allTextContents()).sort()).toEqual([...changed].sort());
    expect(await page.locator('#confirm-text').textContent()).toMatch(/from r2 back to r1 over exactly the 5 device/);
    await shot('revert-preview');
    await page.locator('#confirm-fast').check();
    await page.locator('#confirm-ok').click();
    await page.locator('#notice', { hasText: 'started by alice' }).waitFor();
    const revert = decodeURIComponent(new URL(page.url()).hash.replace('#/rollout/', ''));
    expect(revert).not.toBe(completed);
    // The revert's own banner (the completed rollout's stays on the page until the revert's first view comes),
    // and its run closed: a rollout still running here would be held by the freeze the next test starts.
    await page.locator('#banner[data-outcome="completed"] h1', { hasText: revert }).waitFor({ timeout: 60_000 });
    await untilClosed(revert);
    const reverted = await statusOf(revert);
    expect(reverted.reverts?.rolloutId).toBe(completed);
    expect([reverted.fromRevision, reverted.toRevision]).toEqual([2, 1]);
    expect((await trailOf(revert)).find((r) => r.event === 'rollout.started')?.by).toBe('alice');
  });

  it('shows a freeze in force in a banner on every page and lifts it from its button; a caller without a session or a viewer cannot', async () => {
    const { window } = await addFreeze(client!, taskQueue, { reason: 'incident 42', scope: 'all', by: 'bob' });
    await page.goto(`${board!.url}/#/fleet`);
    const banner = page.locator(`#freeze-banner .freeze[data-freeze="${window.id}"]`);
    await banner.waitFor();
    expect(await banner.textContent()).toMatch(
      new RegExp(`^Frozen \\(${window.id}\\): incident 42 — all, until lifted, by bob; holds 0 rollout\\(s\\)`),
    );
    await shot('freeze-banner');
    // No session: refused before anything is read or lifted.
    const anonymous = await fetch(`${board!.url}/api/freezes/${window.id}/lift`, {
      method: 'POST',
      headers: { origin: board!.url, 'content-type': 'application/json' },
      body: JSON.stringify({ reason: 'not mine to lift' }),
    });
    expect(anonymous.status).toBe(401);
    // A viewer's session, with its CSRF token, from the board's own page: refused too.
    const vera = await apiSession(VIEWER_TOKEN);
    const viewer = await fetch(`${board!.url}/api/freezes/${window.id}/lift`, {
      method: 'POST',
      headers: {
        cookie: vera.cookie,
        origin: board!.url,
        'content-type': 'application/json',
        'x-csrf-token': vera.csrf,
      },
      body: JSON.stringify({ reason: 'not mine to lift' }),
    });
    expect(viewer.status).toBe(403);
    expect(((await viewer.json()) as { message: string }).message).toContain('vera is a viewer on this board');
    expect((await listFreezes(client!)).map((w) => w.id)).toEqual([window.id]);

    await banner.locator('button.lift').click();
    await page.locator('#confirm-reason').fill('incident over');
    await page.locator('#confirm-ok').click();
    await page.locator('#notice', { hasText: `lifted ${window.id}: resumed 0 rollout(s)` }).waitFor();
    // The page's next read of the freezes (after the notice: route() shows it first) takes the banner down.
    await page.locator('#freeze-banner').waitFor({ state: 'hidden', timeout: 10_000 });
    expect(await listFreezes(client!)).toEqual([]);
  });

  it("offers a viewer no control on a rollout's page, and says why (its role in the token file)", async () => {
    await browser!.clearCookies();
    await page.goto(board!.url);
    await page.locator('#token').fill(VIEWER_TOKEN);
    await page.locator('#login button[type="submit"]').click();
    await page.locator('#who', { hasText: 'signed in as vera (viewer)' }).waitFor();
    await openRollout(rolledBack);
    await page.locator('#controls', { hasText: 'You are a viewer here: you read, and send no control.' }).waitFor();
    expect(await page.locator('button[data-control]').count()).toBe(0);
    // Back to alice for whatever runs after.
    await browser!.clearCookies();
    await page.goto(board!.url);
    await page.locator('#token').fill(TOKEN);
    await page.locator('#login button[type="submit"]').click();
    await page.locator('#who', { hasText: 'signed in as alice' }).waitFor();
  });

  it('shows a rollout watching its devices after promotion: its badge, the watch in the banner, abort offered and no pause', async () => {
    const spec = join(scratch.dir, 'watching.yaml');
    const watch = { for: '1h', every: '30m', healthGate: ['devices-online'], onFail: 'alert' };
    const phases = [
      { canary: '1 device', gate: '0s' },
      { bulk: 'remainder', gate: '0s' },
    ];
    writeFileSync(
      spec,
      stringify({
        rollout: { profile: 'demo', fromRevision: 1, toRevision: 2, phases, disruptionBudget: BUDGETS, watch },
      }),
    );
    const run = await wg(['start', '-f', spec, '--inventory', inventoryPath, '--json']);
    expect(run.code, run.stderr).toBe(0);
    const id = (JSON.parse(run.stdout.split('\n')[0]!) as { rolloutId: string }).rolloutId;
    await openRollout(id);
    const banner = page.locator('#banner[data-outcome="watching"]');
    await banner.waitFor({ timeout: 60_000 });
    expect(await banner.locator('.badge').textContent()).toBe('watching');
    await page
      .locator('#why li', { hasText: 'watching: 0 of 2 checks done (every 30m for 1h, onFail alert)' })
      .waitFor();
    await page.locator('button[data-control="abort"]').waitFor();
    expect(await page.locator('button[data-control="pause"]').count()).toBe(0);
    await shot('watching');
    // Ended here so the profile is free for whatever runs after: the abort stops the watch.
    await client!.workflow
      .getHandle(id)
      .executeUpdate('abortRollout', { args: [{ by: 'test', reason: 'done looking' }] });
    await untilClosed(id);
    expect((await statusOf(id)).watch).toMatchObject({ outcome: 'stopped' });
  });
});
