import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import type { BrowserContext, Page } from 'playwright-core';
import { launchChromium } from '../support/chromium';
import { Client, Connection } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PROJECT_ROOT } from '../../intake/package-layout';
import type { RolloutStatus } from '../../contracts/rollout';
import { runCli, startDevDemo, type DevDemo } from '../support/cli';
import { scratchDir } from '../support/harness';

/**
 * The Temporal Web UI of `wavegate dev --demo`, driven in headless Chromium as an operator would: find the
 * rollout by WavegateProfile, read its live progress table, pause it from the signal form, and cancel it
 * — which must run the compensation before the workflow closes.
 */
const scratch = scratchDir('webui');
const shots = join(PROJECT_ROOT, 'test-output', 'webui');
let stack: DevDemo | undefined;
let address = '';
let uiUrl = '';
let inventory = '';
let stateDir = '';
let browser: BrowserContext;
let page: Page;
let client: Client;

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** The rollout's id, as `start` printed it (`rollout:demo:<UTC yyyymmdd-hhmmss>`). */
let id = 'not started';
const status = () => client.workflow.getHandle(id).query<RolloutStatus>('status');
const shot = (name: string) => page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });

beforeAll(async () => {
  mkdirSync(shots, { recursive: true });
  stateDir = join(scratch.dir, 'state');
  stack = await startDevDemo(stateDir);
  address = stack.address;
  uiUrl = stack.uiUrl;
  inventory = stack.inventory;
  client = new Client({ connection: await Connection.connect({ address }) });
  browser = await launchChromium(scratch.dir, { width: 1400, height: 1000 });
  page = await browser.newPage();
});

afterAll(async () => {
  await browser?.close();
  await client?.connection.close();
  await stack?.stop();
  scratch.cleanup();
});

describe('the Temporal Web UI in headless Chromium', () => {
  it('lists and filters the rollout, shows its progress, pauses it from the signal form and cancels it into compensation', async () => {
    const spec = join(scratch.dir, 'manual.yaml');
    writeFileSync(
      spec,
      stringify({
        rollout: {
          profile: 'demo',
          fromRevision: 1,
          toRevision: 2,
          phases: [
            { canary: '1 device', gate: 'manual' },
            { bulk: 'remainder', gate: '1s' },
          ],
          disruptionBudget: { 'pool-a': 0.5, 'pool-b': 0.5 },
        },
      }),
    );
    const started = await runCli(['start', '-f', spec, '--inventory', inventory, '--address', address], {
      env: { TEMPORAL_ADDRESS: '', TEMPORAL_PROFILE: '' },
    });
    expect(started.code, started.stderr).toBe(0);
    id = /^rollout (rollout:demo:\S+) started$/m.exec(started.stdout)?.[1] ?? 'no id printed';
    const waiting = await until('the canary to wait for approval', async () =>
      (await status()).phases[0]?.stage === 'awaiting-approval' ? await status() : undefined,
    );
    const canary = waiting.devices.find((d) => d.phase === 0)!.id;

    // 1. Listed, and filtered by the WavegateProfile search attribute (the UI's query, in the URL).
    const listUrl = (profile: string) =>
      `${uiUrl}/namespaces/default/workflows?query=${encodeURIComponent(`WavegateProfile="${profile}"`)}`;
    await page.goto(listUrl('demo'));
    const row = page.getByRole('link', { name: id }).first();
    await row.waitFor({ timeout: 30_000 });
    await expect.poll(() => page.getByText('WavegateProfile = "demo"').count()).toBeGreaterThan(0);
    await shot('1-list-filtered-by-profile');
    await page.goto(listUrl('somebody-else'));
    await page
      .getByText(/No Workflows|No Results/i)
      .first()
      .waitFor({ timeout: 30_000 });
    expect(await page.getByRole('link', { name: id }).count()).toBe(0);

    // 2. The workflow page: the live progress table in current details.
    await page.goto(`${uiUrl}/namespaces/default/workflows/${encodeURIComponent(id)}`);
    // The UI redirects to the latest run's page first; the tabs belong to that page.
    await page.waitForURL(new RegExp(`/workflows/${encodeURIComponent(id)}/[0-9a-f-]{36}/`));
    await page
      .getByRole('link', { name: 'User Metadata' })
      .or(page.getByRole('tab', { name: 'User Metadata' }))
      .first()
      .click();
    const details = page.getByText('Current Details').first();
    await details.waitFor();
    // Summary, details and current details are rendered markdown, each in its own sandboxed frame.
    const renderedMarkdown = async () => {
      const frames = page.frames().filter((f) => f.url().includes('/render?'));
      // biome-ignore lint/performance/useDomNodeTextContent: Playwright's locator.innerText() (the rendered text), not the DOM property
      const textOf = (f: (typeof frames)[number]) => f.locator('body').innerText();
      const texts = await Promise.all(frames.map((f) => textOf(f).catch(() => '')));
      return texts.join('\n----\n');
    };
    await expect.poll(renderedMarkdown, { timeout: 30_000 }).toContain('awaiting-approval');
    const rendered = await renderedMarkdown();
    expect(rendered).toContain('demo r1 → r2: running, phase canary 1 device');
    expect(rendered).toMatch(/0\s+canary 1 device\s+1\s+awaiting-approval/);
    expect(rendered).toMatch(/1\s+bulk remainder\s+11\s+pending/);
    expect(rendered).toMatch(new RegExp(`${canary}\\s+applied`));
    expect(rendered).toContain('demo: r1 → r2 in 2 phases');
    await shot('2-current-details-progress-table');

    // 3. Pause from the UI's signal form, with who and why as JSON.
    await page.getByRole('button', { name: 'More Actions' }).click();
    await page.getByRole('menuitem', { name: 'Send a Signal' }).first().click();
    const dialog = page.locator('dialog[open]').filter({ hasText: 'Send a Signal' });
    await dialog.getByTestId('signal-select-button').click();
    await dialog.getByRole('option', { name: 'pause' }).click();
    const editor = dialog.getByRole('textbox', { name: 'Data' });
    await editor.click();
    await editor.fill('{"by":"web-ui","reason":"from the browser"}');
    // Leave the editor first: it reformats the JSON on blur, and a click that blurs it does not submit.
    await page.keyboard.press('Tab');
    await shot('3-signal-form');
    await dialog.getByTestId('confirm-modal-button').click();
    await expect
      .poll(() => page.locator('dialog[open]').filter({ hasText: 'Send a Signal' }).count(), { timeout: 10_000 })
      .toBe(0);
    const paused = await until('the pause signal to land', async () => {
      const s = await status();
      return s.state === 'paused' ? s : undefined;
    });
    expect(paused.controls.at(-1)).toMatchObject({
      control: 'pause',
      by: 'web-ui',
      reason: 'from the browser',
      accepted: true,
    });
    expect(paused.pausedReason).toBe('paused by web-ui: from the browser');

    // 4. Request Cancellation: compensation runs, then the workflow closes CANCELLED.
    await page.reload();
    await page.getByRole('button', { name: 'Request Cancellation' }).click();
    const confirm = page.locator('dialog[open]').filter({ hasText: 'Cancel Workflow' });
    await confirm.getByText('Are you sure you want to cancel this workflow?').waitFor();
    await shot('4-request-cancellation');
    await confirm.getByTestId('confirm-modal-button').click();
    const closed = await until(
      'the workflow to close',
      async () => {
        const d = await client.workflow.getHandle(id).describe();
        return d.status.name === 'RUNNING' ? undefined : d;
      },
      90_000,
    );
    expect(closed.status.name).toBe('CANCELLED');
    await page.reload();
    await page.getByText('CANCELED').or(page.getByText('CANCELLED')).first().waitFor({ timeout: 30_000 });
    await shot('5-cancelled');

    const final = await status();
    expect(final.state).toBe('cancelled');
    expect(final.devices.find((d) => d.id === canary)?.state).toBe('rolled-back');
    expect(
      readFileSync(join(stateDir, 'demo-fleet', canary, '.wavegate', 'profiles', 'demo', 'revision'), 'utf8').trim(),
    ).toBe('1');
    const trail = await runCli(['audit', id, '--json', '--audit-dir', join(stateDir, 'audit')]);
    const events = (JSON.parse(trail.stdout) as Array<{ event: string; by: string }>).map((r) => `${r.event}:${r.by}`);
    expect(events).toEqual(
      expect.arrayContaining([
        'rollout.paused:web-ui',
        'rollback.started:temporal-cancel',
        'rollback.completed:temporal-cancel',
        'rollout.cancelled:temporal-cancel',
      ]),
    );
    expect(events.at(-1)).toBe('rollout.cancelled:temporal-cancel');
  });
});
