import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fetchInventory } from '../../intake/inventory-url';
import { runCli } from '../support/cli';
import { scratchDir } from '../support/harness';

/**
 * `--inventory-url` under attack (issue 22): a real registry on 127.0.0.1 (node:http) serving hostile
 * listings, read by the real `wavegate plan`. A page of 1.33 million empty devices (it crashed the reader
 * with a stack overflow), pages past the 100,000-device bound (they were all read first, 1.13 GB), and a
 * listing of slow pages (no overall deadline): each refused with exit 2 naming what it stopped at, no
 * stack trace, in a 200 MB heap.
 */
const scratch = scratchDir('inventory-url-bounds');
const SPEC = resolve('test/corpus/valid/spec.yaml');
const HEAP = '--max-old-space-size=200';
let registry: Server;
let base = '';
const routes = new Map<string, (req: IncomingMessage, res: ServerResponse, url: URL) => void>();
/** Requests the registry answered, per route. */
const served = new Map<string, number>();

beforeAll(async () => {
  registry = createServer((req, res) => {
    const url = new URL(req.url!, 'http://x');
    served.set(url.pathname, (served.get(url.pathname) ?? 0) + 1);
    const route = routes.get(url.pathname);
    if (route) route(req, res, url);
    else {
      res.writeHead(404);
      res.end();
    }
  });
  await new Promise<void>((r) => registry.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(registry.address() as AddressInfo).port}`;
});

afterAll(async () => {
  registry.closeAllConnections();
  await new Promise((r) => registry.close(r));
  scratch.cleanup();
});

/** `wavegate plan` over the listing at `path`, in a 200 MB heap (an out-of-memory death is exit 134, not 2). */
function plan(path: string, extra: string[] = []) {
  return runCli(['plan', '--what-if', '-f', SPEC, '--inventory-url', `${base}${path}`, ...extra], {
    cwd: scratch.dir,
    env: { NODE_OPTIONS: HEAP, HOME: scratch.dir },
    timeoutMs: 120_000,
  });
}

const STACK_TRACE = /\n\s+at .+:\d+:\d+/;

describe('--inventory-url: no listing crashes the reader or outgrows its bounds', () => {
  it('one 4 MB page of 1.33 million empty devices is refused with exit 2 naming the bound, mid-page, with no stack trace, in a 200 MB heap', async () => {
    const count = 1_330_000;
    const page = `{"devices":[${'{},'.repeat(count - 1)}{}],"next":null}`;
    expect(page.length).toBeLessThan(4_000_000); // within the page bound: the device count is what must hold
    routes.set('/empty-devices', (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': page.length });
      res.end(page);
    });
    const run = await plan('/empty-devices');
    const shown = `exit ${run.code}\n${run.stderr}`;
    expect(run.code, shown).toBe(2);
    expect(run.stderr, shown).toContain('/empty-devices page 1: invalid');
    expect(run.stderr, shown).toContain('devices: more than 100000 devices (the most one inventory may hold)');
    // Stopped where the bound was crossed, not after the page's 1.33 million.
    const read = Number(/(\d+) read of this page so far; stopped reading/.exec(run.stderr)?.[1]);
    expect(read).toBeGreaterThan(100_000);
    expect(read).toBeLessThan(count);
    expect(run.stderr, shown).not.toMatch(STACK_TRACE);
    expect(run.stderr, shown).not.toMatch(/Maximum call stack|unexpected error/);
  }, 150_000);

  it('pages past the 100,000-device bound: the reader stops in the page that crosses it and reads no further page', async () => {
    const perPage = 30_000;
    const pages = 10;
    routes.set('/many', (_req, res, url) => {
      const n = Number(url.searchParams.get('page') ?? 1);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          devices: Array.from({ length: perPage }, (_, i) => ({ id: `d-${n}-${i}` })),
          next: n < pages ? `/many?page=${n + 1}` : null,
        }),
      );
    });
    const run = await plan('/many');
    const shown = `exit ${run.code}\n${run.stderr}`;
    expect(run.code, shown).toBe(2);
    expect(run.stderr, shown).toContain('/many page 4: invalid');
    expect(run.stderr, shown).toMatch(
      /more than 100000 devices \(the most one inventory may hold\): 90000 on the pages before, \d+ read of this page so far; stopped reading/,
    );
    // The registry saw the reader stop: 4 of the 10 pages asked for (before, all 10 were read and held).
    expect(served.get('/many')).toBe(4);
    expect(run.stderr, shown).not.toMatch(STACK_TRACE);
  }, 150_000);

  it('a listing of slow pages is stopped at its overall deadline (--inventory-deadline), naming the pages and devices read', async () => {
    let n = 0;
    routes.set('/slow', (_req, res) => {
      const page = ++n;
      // Each page well within the 15 s page timeout; the listing never ends.
      setTimeout(() => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            devices: [{ id: `slow-${page}`, host: '127.0.0.1', user: 'u', pool: 'p' }],
            next: `/slow?after=${page}`,
          }),
        );
      }, 300);
    });
    const run = await plan('/slow', ['--inventory-deadline', '2s']);
    const shown = `exit ${run.code}\n${run.stderr}`;
    expect(run.code, shown).toBe(2);
    const said =
      /\/slow: the listing did not end within its deadline of 2s \(--inventory-deadline\): (\d+) whole pages? and (\d+) devices? read, stopped in page (\d+)/.exec(
        run.stderr,
      );
    expect(said, shown).not.toBeNull();
    const [, whole, devices, stoppedIn] = said!.map(Number);
    expect(devices).toBe(whole); // one device a page
    expect(stoppedIn).toBe(whole! + 1);
    expect(served.get('/slow')).toBe(stoppedIn);
    expect(run.stderr, shown).not.toMatch(STACK_TRACE);
  }, 150_000);

  it('--inventory-deadline is checked before anything is read: a bad value, or without --inventory-url', async () => {
    const before = served.get('/slow') ?? 0;
    const bad = await plan('/slow', ['--inventory-deadline', 'forever']);
    expect(bad.code, bad.stderr).toBe(2);
    expect(bad.stderr).toContain('--inventory-deadline "forever": must be a duration from 1s to 1h');
    const tooShort = await plan('/slow', ['--inventory-deadline', '10ms']);
    expect(tooShort.code, tooShort.stderr).toBe(2);
    expect(served.get('/slow') ?? 0).toBe(before);
  }, 150_000);
});

describe('fetchInventory: the whole listing is bounded in bytes, and a page in depth', () => {
  it('pages that are each within the page bound but together above the listing bound are refused at the page that crosses it', async () => {
    routes.set('/bytes', (_req, res, url) => {
      const n = Number(url.searchParams.get('page') ?? 1);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          devices: [{ id: `b-${n}`, host: 'h', user: 'u', pool: 'p', labels: { pad: 'x'.repeat(900) } }],
          next: n < 20 ? `/bytes?page=${n + 1}` : null,
        }),
      );
    });
    await expect(fetchInventory(`${base}/bytes`, { maxListingBytes: 3_000 })).rejects.toThrow(
      /\/bytes page 3: the pages so far are larger than 3000 bytes in all; stopped reading/,
    );
  });

  it('a page nested 200,000 levels deep is refused naming where, before the schema walks it', async () => {
    routes.set('/deep', (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(`{"devices":[${'['.repeat(200_000)}${']'.repeat(200_000)}],"next":null}`);
    });
    await expect(fetchInventory(`${base}/deep`)).rejects.toThrow(
      /\/deep page 1: invalid\n {2}devices\[0\]\[0\]\[0\]\[0\]\[0\]\.\.\.: nested more than 64 levels deep/,
    );
  });
});
