import { documentProblems } from '../core/document-bounds';
import { formatDurationMs, parseDurationMs } from '../core/duration';
import { WavegateError } from '../core/errors';
import { MAX_DEVICES, parseInventory, type Inventory } from '../core/inventory';
import { formatPath } from '../core/validation';

/**
 * An HTTP membership source (docs/formats.md "Inventory over HTTP"): a CMDB or device registry that
 * serves the inventory as JSON pages `{ devices: [...], next: "<url>" | null }` (the first page may
 * also carry `pools` and `defaults`). Read by the CLI at start/plan, then validated exactly like an
 * inventory file (core/inventory.ts, the same errors naming the field and the value). Bounded: http(s)
 * only, the same origin for every page (the token goes nowhere else), at most MAX_INVENTORY_PAGES
 * pages of at most MAX_INVENTORY_PAGE_BYTES each and MAX_INVENTORY_LISTING_BYTES in all, each page
 * within the page timeout and the whole listing within one deadline (`--inventory-deadline`). Devices
 * are counted in the bytes as they arrive: the reader stops at the MAX_DEVICES-th device, mid-page,
 * rather than holding more than one inventory may have. Credentials by reference only: a bearer
 * token from the environment variable `--inventory-token-env` names, never in the URL.
 */
export const MAX_INVENTORY_PAGES = 200;
export const MAX_INVENTORY_PAGE_BYTES = 4_000_000;
/** All pages together: twice the largest inventory file (a registry's JSON may be more verbose). */
export const MAX_INVENTORY_LISTING_BYTES = 32 * 1024 * 1024;
export const INVENTORY_PAGE_TIMEOUT_MS = 15_000;
/** The whole listing, every page: `--inventory-deadline` (1s to 1h). */
export const INVENTORY_DEADLINE_MS = 120_000;
const MAX_INVENTORY_DEADLINE_MS = 3_600_000;
const MAX_URL_LENGTH = 2_048;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;

export interface InventoryUrlOptions {
  /** The name of the environment variable holding a bearer token (never the token itself). */
  tokenEnv?: string;
  env?: NodeJS.ProcessEnv;
  pageTimeoutMs?: number;
  /** The whole listing (default INVENTORY_DEADLINE_MS). */
  deadlineMs?: number;
  maxPages?: number;
  maxPageBytes?: number;
  maxListingBytes?: number;
  maxDevices?: number;
}

function invalid(field: string, value: unknown, message: string): WavegateError {
  return new WavegateError('INVALID_INPUT', `${field} ${JSON.stringify(value)}: ${message}`, { field, value });
}

/** A URL the CLI may read: http(s), no user name or password in it, bounded. INVALID_INPUT naming `field` otherwise. */
export function checkInventoryUrl(text: string, field = '--inventory-url'): URL {
  if (typeof text !== 'string' || text.length === 0 || text.length > MAX_URL_LENGTH)
    throw invalid(field, text, `must be an http(s) URL of at most ${MAX_URL_LENGTH} characters`);
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw invalid(field, text, 'not a URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw invalid(field, text, `must be http or https (got ${url.protocol.replace(/:$/, '')})`);
  // Shown without what it refuses: a password in a URL never reaches an error message either.
  if (url.username || url.password)
    throw invalid(
      field,
      `${url.protocol}//…@${url.host}${url.pathname}`,
      'credentials may not be in the URL; put a token in an environment variable and name it with --inventory-token-env',
    );
  return url;
}

/** The bearer token `tokenEnv` names, checked (a variable name, set, not empty); undefined without one. */
export function bearerToken(opts: Pick<InventoryUrlOptions, 'tokenEnv' | 'env'>): string | undefined {
  if (opts.tokenEnv === undefined) return undefined;
  if (!ENV_NAME.test(opts.tokenEnv))
    throw invalid(
      '--inventory-token-env',
      opts.tokenEnv,
      'must be an environment variable name (letters, digits, "_")',
    );
  const token = (opts.env ?? process.env)[opts.tokenEnv];
  if (!token?.trim())
    throw invalid('--inventory-token-env', opts.tokenEnv, 'that environment variable is not set or empty');
  return token.trim();
}

/** `--inventory-deadline`: a duration (`90s`, `2m`, or milliseconds) from 1s to 1h. INVALID_INPUT naming the flag otherwise. */
export function parseInventoryDeadline(text: string | undefined, field = '--inventory-deadline'): number {
  if (text === undefined) return INVENTORY_DEADLINE_MS;
  const ms = parseDurationMs(text);
  if (ms === undefined || ms < 1_000 || ms > MAX_INVENTORY_DEADLINE_MS)
    throw invalid(
      field,
      text,
      `must be a duration from 1s to ${formatDurationMs(MAX_INVENTORY_DEADLINE_MS)} (e.g. 120s, 5m) for the whole listing, every page`,
    );
  return ms;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
/** "devices" with every letter escaped (\u0064…) is 42 bytes: a longer key is something else. */
const MAX_KEY_BYTES = 64;

/** Whether a key's raw bytes (between its quotes) read "devices", escapes decoded as JSON.parse decodes them. */
function isDevicesKey(raw: number[]): boolean {
  if (raw.length > MAX_KEY_BYTES) return false;
  if (!raw.includes(BACKSLASH)) return Buffer.from(raw).toString('latin1') === 'devices';
  try {
    return JSON.parse(`"${Buffer.from(raw).toString('utf8')}"`) === 'devices';
  } catch {
    return false;
  }
}

/**
 * Counts the elements of a page's top-level `devices` list in its bytes as they arrive, without
 * parsing them: a page of 1.3 million `{}` is refused at the limit, a fraction of the way in, instead
 * of becoming 1.3 million objects. JSON's structural characters are ASCII, so UTF-8 bytes are scanned
 * as they are; nesting is a counter (a document nested a million levels deep costs nothing here). A
 * malformed page may be miscounted, but JSON.parse refuses it after. A second `devices` key counts
 * again: the count is never below what JSON.parse would keep.
 */
export class DeviceCounter {
  count = 0;
  private depth = 0;
  private rootIsObject = false;
  private inString = false;
  private escaped = false;
  /** The raw bytes of the string being read at depth 1 (a key or a value), while short enough to be "devices". */
  private text: number[] = [];
  private textIsDevices = false;
  private lastKeyIsDevices = false;
  private inDevices = false;
  private expectElement = false;

  /** Scan a chunk; the count so far. */
  push(chunk: Uint8Array): number {
    for (const byte of chunk) {
      if (this.inString) {
        if (this.escaped) this.escaped = false;
        else if (byte === BACKSLASH) this.escaped = true;
        else if (byte === QUOTE) {
          this.inString = false;
          if (this.depth === 1) this.textIsDevices = isDevicesKey(this.text);
          continue;
        }
        if (this.depth === 1 && this.text.length <= MAX_KEY_BYTES) this.text.push(byte);
        continue;
      }
      if (byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09) continue;
      if (this.expectElement && this.depth === 2) {
        this.expectElement = false;
        if (byte !== 0x5d) this.count++; // anything but "]" starts an element
      }
      switch (byte) {
        case QUOTE:
          this.inString = true;
          this.text = [];
          break;
        case 0x7b: // {
        case 0x5b: // [
          this.depth++;
          if (this.depth === 1) this.rootIsObject = byte === 0x7b;
          else if (this.depth === 2 && byte === 0x5b && this.rootIsObject && this.lastKeyIsDevices) {
            this.inDevices = true;
            this.expectElement = true;
          }
          break;
        case 0x7d: // }
        case 0x5d: // ]
          if (this.depth === 2) this.inDevices = false;
          this.depth--;
          break;
        case 0x3a: // :
          if (this.depth === 1) this.lastKeyIsDevices = this.textIsDevices;
          break;
        case 0x2c: // ,
          if (this.depth === 2 && this.inDevices) this.expectElement = true;
          break;
      }
    }
    return this.count;
  }
}

/** What a page's reading holds against the listing's bounds. */
interface PageBounds {
  maxBytes: number;
  /** Bytes the listing may still read (MAX_INVENTORY_LISTING_BYTES less the pages before). */
  listingBytesLeft: number;
  maxListingBytes: number;
  /** Devices the listing may still hold. */
  devicesLeft: number;
  maxDevices: number;
  devicesBefore: number;
}

/**
 * The body, bounded while it streams: at most `maxBytes` (an oversized page fails as soon as it is,
 * not after), within what the listing may still read, and with no more devices than it may still hold
 * (counted in the bytes, so the reader stops mid-page at the limit).
 */
async function boundedBody(
  res: Response,
  bounds: PageBounds,
  where: string,
  signal: AbortSignal,
): Promise<{ text: string; bytes: number }> {
  const max = bounds.maxBytes;
  const declared = Number(res.headers.get('content-length') ?? NaN);
  if (Number.isFinite(declared) && declared > max)
    throw new WavegateError('INVALID_INPUT', `${where}: page of ${declared} bytes is larger than ${max}`, {
      source: where,
    });
  const reader = res.body?.getReader();
  if (!reader) return { text: '', bytes: 0 };
  const counter = new DeviceCounter();
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
      const refuse = async (message: string) => {
        await reader.cancel().catch(() => {});
        return new WavegateError('INVALID_INPUT', `${where}: ${message}`, { source: where });
      };
      if (size > max) throw await refuse(`page larger than ${max} bytes`);
      if (size > bounds.listingBytesLeft)
        throw await refuse(`the pages so far are larger than ${bounds.maxListingBytes} bytes in all; stopped reading`);
      if (counter.push(value) > bounds.devicesLeft) {
        throw await refuse(
          `invalid\n  devices: more than ${bounds.maxDevices} devices (the most one inventory may hold): ${bounds.devicesBefore} on the pages before, ${counter.count} read of this page so far; stopped reading`,
        );
      }
      chunks.push(value);
    }
  } finally {
    signal.removeEventListener('abort', onAbort);
  }
  return { text: Buffer.concat(chunks).toString('utf8'), bytes: size };
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
    throw new WavegateError('INVALID_INPUT', `${where}: invalid\n  (root): not JSON (${(err as Error).message})`, {
      source: where,
    });
  }
  const problem = (path: string, message: string) =>
    new WavegateError('INVALID_INPUT', `${where}: invalid\n  ${path}: ${message}`, { source: where });
  // Before anything that walks the page recursively (the schema, an error message quoting a value).
  const shape = documentProblems(doc)[0];
  if (shape) throw problem(`${formatPath(shape.path)}${shape.deep ? '...' : ''}`, shape.message);
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc))
    throw problem('(root)', 'must be an object { devices: [...], next: <url or null> }');
  const page = doc as Record<string, unknown>;
  for (const key of Object.keys(page)) {
    if (!['devices', 'next', ...(first ? ['pools', 'defaults'] : [])].includes(key))
      throw problem(
        key,
        first
          ? 'unknown field (a page has devices, next, and on the first page pools and defaults)'
          : 'unknown field (only the first page may carry pools and defaults)',
      );
  }
  if (!Array.isArray(page.devices))
    throw problem('devices', `must be a list of devices (got ${JSON.stringify(page.devices)?.slice(0, 80)})`);
  if (page.next !== null && page.next !== undefined && typeof page.next !== 'string')
    throw problem('next', `must be a URL or null (got ${JSON.stringify(page.next)?.slice(0, 80)})`);
  return {
    devices: page.devices,
    next: (page.next as string | null | undefined) ?? null,
    ...(first && 'pools' in page ? { pools: page.pools } : {}),
    ...(first && 'defaults' in page ? { defaults: page.defaults } : {}),
  };
}

/** The next page's URL: relative to this one, and on the same origin (the token is sent nowhere else). */
function nextUrl(next: string, current: URL, where: string, seen: Set<string>): URL {
  let url: URL;
  try {
    url = new URL(next, current);
  } catch {
    throw new WavegateError(
      'INVALID_INPUT',
      `${where}: invalid\n  next: ${JSON.stringify(next.slice(0, 200))} is not a URL`,
      { source: where },
    );
  }
  if (url.origin !== current.origin)
    throw new WavegateError(
      'INVALID_INPUT',
      `${where}: invalid\n  next: ${JSON.stringify(url.origin)} is another origin than ${current.origin} (pages stay on one server)`,
      { source: where },
    );
  if (seen.has(url.href))
    throw new WavegateError(
      'INVALID_INPUT',
      `${where}: invalid\n  next: ${JSON.stringify(url.pathname + url.search)} was already read (the pages loop)`,
      { source: where },
    );
  return url;
}

/**
 * Read an inventory served over HTTP, page by page, and validate it as one inventory document. Any
 * problem (a refused URL, an unreachable server, a status other than 2xx, a page timeout, the whole
 * listing past its deadline, an oversized or malformed page, too many pages or devices, a device that
 * fails the inventory schema) is INVALID_INPUT: exit 2, nothing started.
 */
export async function fetchInventory(urlText: string, opts: InventoryUrlOptions = {}): Promise<Inventory> {
  const first = checkInventoryUrl(urlText);
  const token = bearerToken(opts);
  const maxPages = opts.maxPages ?? MAX_INVENTORY_PAGES;
  const maxBytes = opts.maxPageBytes ?? MAX_INVENTORY_PAGE_BYTES;
  const maxListingBytes = opts.maxListingBytes ?? MAX_INVENTORY_LISTING_BYTES;
  const maxDevices = opts.maxDevices ?? MAX_DEVICES;
  const timeoutMs = opts.pageTimeoutMs ?? INVENTORY_PAGE_TIMEOUT_MS;
  const deadlineMs = opts.deadlineMs ?? INVENTORY_DEADLINE_MS;
  const deadlineAt = Date.now() + deadlineMs;
  const source = `${first.origin}${first.pathname}`;
  const devices: unknown[] = [];
  let listingBytes = 0;
  let head: InventoryPage | undefined;
  const seen = new Set<string>();
  const pastDeadline = (n: number) =>
    new WavegateError(
      'INVALID_INPUT',
      `${source}: the listing did not end within its deadline of ${formatDurationMs(deadlineMs)} (--inventory-deadline): ${n - 1} whole page${n === 2 ? '' : 's'} and ${devices.length} device${devices.length === 1 ? '' : 's'} read, stopped in page ${n}`,
      { source, field: '--inventory-deadline', pages: n - 1, devices: devices.length },
    );
  for (let url: URL | null = first, n = 1; url; n++) {
    if (n > maxPages) throw new WavegateError('INVALID_INPUT', `${source}: more than ${maxPages} pages`, { source });
    seen.add(url.href);
    const where = `${source} page ${n}`;
    const left = deadlineAt - Date.now();
    if (left <= 0) throw pastDeadline(n);
    // The page's own timeout, or what is left of the listing's deadline if that comes first.
    const limitMs = Math.min(timeoutMs, left);
    const byDeadline = left < timeoutMs;
    // A timer of our own, not AbortSignal.timeout(): CI once saw a page that never ends outlive its 1 s
    // limit by two minutes under load, and this one is held and cleared here, whatever the GC does.
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(new Error(`no whole page within ${limitMs} ms`)), limitMs);
    const signal = controller.signal;
    let body: { text: string; bytes: number };
    try {
      const res = await fetch(url, {
        headers: { accept: 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
        redirect: 'error',
        signal,
      });
      if (res.status < 200 || res.status > 299) {
        await res.body?.cancel().catch(() => {});
        throw new WavegateError(
          'INVALID_INPUT',
          `${where}: the server answered ${res.status} ${res.statusText}`.trimEnd(),
          { source: where, status: res.status },
        );
      }
      body = await boundedBody(
        res,
        {
          maxBytes,
          listingBytesLeft: maxListingBytes - listingBytes,
          maxListingBytes,
          devicesLeft: maxDevices - devices.length,
          maxDevices,
          devicesBefore: devices.length,
        },
        where,
        signal,
      );
    } catch (err) {
      if (err instanceof WavegateError) throw err;
      const e = err as Error;
      if (signal.aborted)
        throw byDeadline
          ? pastDeadline(n)
          : new WavegateError('INVALID_INPUT', `${where}: no whole page within ${timeoutMs / 1000}s`, {
              source: where,
            });
      throw new WavegateError(
        'INVALID_INPUT',
        `${where}: cannot read: ${(e.cause as Error | undefined)?.message ?? e.message}`,
        { source: where },
      );
    } finally {
      clearTimeout(timer);
    }
    listingBytes += body.bytes;
    const page = pageOf(body.text, where, n === 1);
    head ??= page;
    // One by one: a spread of a page's devices as arguments overflows the stack past ~100,000 of them.
    for (const device of page.devices) devices.push(device);
    url = page.next === null ? null : nextUrl(page.next, url, where, seen);
  }
  const doc: Record<string, unknown> = { devices };
  if (head?.pools !== undefined) doc.pools = head.pools;
  if (head?.defaults !== undefined) doc.defaults = head.defaults;
  return parseInventory(doc, source);
}
