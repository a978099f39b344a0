import { WavegateError } from '../core/errors';
import { parseInventory, type Inventory } from '../core/inventory';

/**
 * An HTTP membership source (docs/formats.md "Inventory over HTTP"): a CMDB or device registry that
 * serves the inventory as JSON pages `{ devices: [...], next: "<url>" | null }` (the first page may
 * also carry `pools` and `defaults`). Read by the CLI at start/plan, then validated exactly like an
 * inventory file (core/inventory.ts, the same errors naming the field and the value). Bounded: http(s)
 * only, the same origin for every page (the token goes nowhere else), at most MAX_INVENTORY_PAGES
 * pages of at most MAX_INVENTORY_PAGE_BYTES each, each within the timeout. Credentials by reference
 * only: a bearer token from the environment variable `--inventory-token-env` names, never in the URL.
 */
export const MAX_INVENTORY_PAGES = 200;
export const MAX_INVENTORY_PAGE_BYTES = 4_000_000;
export const INVENTORY_PAGE_TIMEOUT_MS = 15_000;
const MAX_URL_LENGTH = 2_048;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;

export interface InventoryUrlOptions {
  /** The name of the environment variable holding a bearer token (never the token itself). */
  tokenEnv?: string;
  env?: NodeJS.ProcessEnv;
  pageTimeoutMs?: number;
  maxPages?: number;
  maxPageBytes?: number;
}

function invalid(field: string, value: unknown, message: string): WavegateError {
  return new WavegateError('INVALID_INPUT', `${field} ${JSON.stringify(value)}: ${message}`, { field, value });
}

/** A URL the CLI may read: http(s), no user name or password in it, bounded. INVALID_INPUT naming `field` otherwise. */
export function checkInventoryUrl(text: string, field = '--inventory-url'): URL {
  if (typeof text !== 'string' || text.length === 0 || text.length > MAX_URL_LENGTH) throw invalid(field, text, `must be an http(s) URL of at most ${MAX_URL_LENGTH} characters`);
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw invalid(field, text, 'not a URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw invalid(field, text, `must be http or https (got ${url.protocol.replace(/:$/, '')})`);
  // Shown without what it refuses: a password in a URL never reaches an error message either.
  if (url.username || url.password) throw invalid(field, `${url.protocol}//…@${url.host}${url.pathname}`, 'credentials may not be in the URL; put a token in an environment variable and name it with --inventory-token-env');
  return url;
}

/** The bearer token `tokenEnv` names, checked (a variable name, set, not empty); undefined without one. */
export function bearerToken(opts: Pick<InventoryUrlOptions, 'tokenEnv' | 'env'>): string | undefined {
  if (opts.tokenEnv === undefined) return undefined;
  if (!ENV_NAME.test(opts.tokenEnv)) throw invalid('--inventory-token-env', opts.tokenEnv, 'must be an environment variable name (letters, digits, "_")');
  const token = (opts.env ?? process.env)[opts.tokenEnv];
  if (!token?.trim()) throw invalid('--inventory-token-env', opts.tokenEnv, 'that environment variable is not set or empty');
  return token.trim();
}

/** The body, at most `max` bytes (an oversized page fails as soon as it is, not after). */
async function boundedBody(res: Response, max: number, where: string, signal: AbortSignal): Promise<string> {
  const declared = Number(res.headers.get('content-length') ?? NaN);
  if (Number.isFinite(declared) && declared > max) throw new WavegateError('INVALID_INPUT', `${where}: page of ${declared} bytes is larger than ${max}`, { source: where });
  const reader = res.body?.getReader();
  if (!reader) return '';
  // The page's deadline ends a read in progress too (the caller reports it as the timeout), whether or
  // not the stream itself heeds the fetch's signal.
  const onAbort = () => void reader.cancel(signal.reason).catch(() => {});
  signal.addEventListener('abort', onAbort, { once: true });
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (signal.aborted) throw new Error('the page deadline passed');
      if (done) break;
      size += value.byteLength;
      if (size > max) {
        await reader.cancel().catch(() => {});
        throw new WavegateError('INVALID_INPUT', `${where}: page larger than ${max} bytes`, { source: where });
      }
      chunks.push(value);
    }
  } finally {
    signal.removeEventListener('abort', onAbort);
  }
  return Buffer.concat(chunks).toString('utf8');
}

interface InventoryPage {
  devices: unknown[];
  next: string | null;
  pools?: unknown;
  defaults?: unknown;
}

function pageOf(body: string, where: string, first: boolean): InventoryPage {
  let doc: unknown;
  try {
    doc = JSON.parse(body);
  } catch (err) {
    throw new WavegateError('INVALID_INPUT', `${where}: invalid\n  (root): not JSON (${(err as Error).message})`, { source: where });
  }
  const problem = (path: string, message: string) => new WavegateError('INVALID_INPUT', `${where}: invalid\n  ${path}: ${message}`, { source: where });
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) throw problem('(root)', 'must be an object { devices: [...], next: <url or null> }');
  const page = doc as Record<string, unknown>;
  for (const key of Object.keys(page)) {
    if (!['devices', 'next', ...(first ? ['pools', 'defaults'] : [])].includes(key)) throw problem(key, first ? 'unknown field (a page has devices, next, and on the first page pools and defaults)' : 'unknown field (only the first page may carry pools and defaults)');
  }
  if (!Array.isArray(page.devices)) throw problem('devices', `must be a list of devices (got ${JSON.stringify(page.devices)?.slice(0, 80)})`);
  if (page.next !== null && page.next !== undefined && typeof page.next !== 'string') throw problem('next', `must be a URL or null (got ${JSON.stringify(page.next)?.slice(0, 80)})`);
  return { devices: page.devices, next: (page.next as string | null | undefined) ?? null, ...(first && 'pools' in page ? { pools: page.pools } : {}), ...(first && 'defaults' in page ? { defaults: page.defaults } : {}) };
}

/** The next page's URL: relative to this one, and on the same origin (the token is sent nowhere else). */
function nextUrl(next: string, current: URL, where: string, seen: Set<string>): URL {
  let url: URL;
  try {
    url = new URL(next, current);
  } catch {
    throw new WavegateError('INVALID_INPUT', `${where}: invalid\n  next: ${JSON.stringify(next.slice(0, 200))} is not a URL`, { source: where });
  }
  if (url.origin !== current.origin) throw new WavegateError('INVALID_INPUT', `${where}: invalid\n  next: ${JSON.stringify(url.origin)} is another origin than ${current.origin} (pages stay on one server)`, { source: where });
  if (seen.has(url.href)) throw new WavegateError('INVALID_INPUT', `${where}: invalid\n  next: ${JSON.stringify(url.pathname + url.search)} was already read (the pages loop)`, { source: where });
  return url;
}

/**
 * Read an inventory served over HTTP, page by page, and validate it as one inventory document. Any
 * problem (a refused URL, an unreachable server, a status other than 2xx, a timeout, an oversized or
 * malformed page, too many pages, a device that fails the inventory schema) is INVALID_INPUT: exit 2,
 * nothing started.
 */
export async function fetchInventory(urlText: string, opts: InventoryUrlOptions = {}): Promise<Inventory> {
  const first = checkInventoryUrl(urlText);
  const token = bearerToken(opts);
  const maxPages = opts.maxPages ?? MAX_INVENTORY_PAGES;
  const maxBytes = opts.maxPageBytes ?? MAX_INVENTORY_PAGE_BYTES;
  const timeoutMs = opts.pageTimeoutMs ?? INVENTORY_PAGE_TIMEOUT_MS;
  const source = `${first.origin}${first.pathname}`;
  const devices: unknown[] = [];
  let head: InventoryPage | undefined;
  const seen = new Set<string>();
  for (let url: URL | null = first, n = 1; url; n++) {
    if (n > maxPages) throw new WavegateError('INVALID_INPUT', `${source}: more than ${maxPages} pages`, { source });
    seen.add(url.href);
    const where = `${source} page ${n}`;
    // A timer of our own, not AbortSignal.timeout(): CI once saw a page that never ends outlive its 1 s
    // limit by two minutes under load, and this one is held and cleared here, whatever the GC does.
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(new Error(`no whole page within ${timeoutMs} ms`)), timeoutMs);
    const signal = controller.signal;
    let body: string;
    try {
      const res = await fetch(url, { headers: { accept: 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) }, redirect: 'error', signal });
      if (res.status < 200 || res.status > 299) {
        await res.body?.cancel().catch(() => {});
        throw new WavegateError('INVALID_INPUT', `${where}: the server answered ${res.status} ${res.statusText}`.trimEnd(), { source: where, status: res.status });
      }
      body = await boundedBody(res, maxBytes, where, signal);
    } catch (err) {
      if (err instanceof WavegateError) throw err;
      const e = err as Error;
      if (signal.aborted) throw new WavegateError('INVALID_INPUT', `${where}: no whole page within ${timeoutMs / 1000}s`, { source: where });
      throw new WavegateError('INVALID_INPUT', `${where}: cannot read: ${(e.cause as Error | undefined)?.message ?? e.message}`, { source: where });
    } finally {
      clearTimeout(timer);
    }
    const page = pageOf(body, where, n === 1);
    head ??= page;
    devices.push(...page.devices);
    url = page.next === null ? null : nextUrl(page.next, url, where, seen);
  }
  const doc: Record<string, unknown> = { devices };
  if (head?.pools !== undefined) doc.pools = head.pools;
  if (head?.defaults !== undefined) doc.defaults = head.defaults;
  return parseInventory(doc, source);
}
