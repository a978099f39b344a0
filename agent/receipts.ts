import { closeSync, constants, fsyncSync, lstatSync, openSync } from 'node:fs';
import { join } from 'node:path';
import { agentReceiptClaim } from '../core/agent-receipt';
import { WavegateError } from '../core/errors';
import {
  chainAfter,
  parseReceipt,
  RECEIPT_CHAIN_START,
  RECEIPT_GENESIS,
  receiptText,
  signAgentReceipt,
  type ReceiptChainState,
} from '../core/receipt';
import type { KeyPair } from '../core/signing';
import type { DesiredEntry, ProfileReport } from '../core/twin';
import { readText, writeFileAtomic } from '../intake/files';

/**
 * The agent's receipts (docs/formats.md, "Agent state directory"): every final answer to a signed request is
 * signed with the device's identity key (core/agent-receipt.ts says what it claims). The chain state, the last
 * counter and the hash of the last receipt, is in `<state>/receipts.json`, written whole, synced and renamed
 * BEFORE the answer carrying the receipt is kept in report.json or sent: a counter is never given twice, even by
 * an agent killed at any point. (Killed between the two writes, the device has made a receipt it never sent: the
 * verifier sees a gap in its counters, which is what happened.) The answer keeps its receipt in report.json and
 * every later report re-sends it as it is: one receipt per request.
 */
export const RECEIPTS_FILE = 'receipts.json';

/** `{"counter": <15 digits>, "last": "<64 hex>"}` and formatting: nothing bigger is one. */
const MAX_RECEIPTS_FILE_BYTES = 1024;

/** Why the text of receipts.json is not a chain state, or the state. */
export function parseReceiptChain(text: string): ReceiptChainState | string {
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch {
    return 'not JSON';
  }
  if (typeof data !== 'object' || data === null || Array.isArray(data)) return 'not a JSON object';
  const keys = Object.keys(data).sort();
  if (keys.join(',') !== 'counter,last') return `must hold exactly "counter" and "last" (holds ${keys.join(', ')})`;
  const { counter, last } = data as Record<string, unknown>;
  if (typeof counter !== 'number' || !Number.isSafeInteger(counter) || counter < 0)
    return 'counter: must be an integer >= 0';
  if (typeof last !== 'string' || !/^[0-9a-f]{64}$/.test(last)) return 'last: must be 64 lowercase hex characters';
  if ((counter === 0) !== (last === RECEIPT_GENESIS))
    return 'counter and last disagree (counter 0 is the chain before its first receipt, and only it)';
  return { counter, last };
}

/**
 * The chain state in `<stateDir>/receipts.json` (none yet: the chain's start). A file that is not a regular file,
 * is too big or does not parse is refused (INVALID_INPUT naming it: the agent exits 2 at start), never reset:
 * starting the chain again would give counters the device has already signed a second time.
 */
export function readReceiptChain(stateDir: string): ReceiptChainState {
  const path = join(stateDir, RECEIPTS_FILE);
  const refuse = (why: string) =>
    new WavegateError(
      'INVALID_INPUT',
      `--state-dir ${stateDir}: ${path}: ${why}; refusing to start: a new chain would sign counters this device has signed before. Restore the file from a copy (the device's last receipt, in report.json, names its counter)`,
      { field: '--state-dir', value: path },
    );
  let size: number;
  try {
    const stat = lstatSync(path);
    if (!stat.isFile()) throw refuse('not a regular file');
    size = stat.size;
  } catch (err) {
    if (err instanceof WavegateError) throw err;
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return RECEIPT_CHAIN_START;
    throw refuse(`cannot read it (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
  if (size > MAX_RECEIPTS_FILE_BYTES) throw refuse(`${size} bytes, at most ${MAX_RECEIPTS_FILE_BYTES}`);
  let text: string;
  try {
    text = readText(path);
  } catch (err) {
    throw refuse((err as Error).message.replace(`${path}: `, ''));
  }
  if (Buffer.byteLength(text) > MAX_RECEIPTS_FILE_BYTES) throw refuse(`more than ${MAX_RECEIPTS_FILE_BYTES} bytes`);
  const state = parseReceiptChain(text);
  if (typeof state === 'string') throw refuse(`not a receipt chain state: ${state}`);
  return state;
}

export interface AgentReceiptsOptions {
  stateDir: string;
  deviceId: string;
  key: KeyPair;
  /** The answers report.json holds (agent/report-file.ts): a receipt there beyond the chain state is refused. */
  sent: Iterable<ProfileReport>;
  log: (line: string) => void;
  now?: () => number;
}

export interface AgentReceipts {
  /** The answer with its receipt (the chain state written first); the answer as it is when none is made. */
  sign(entry: DesiredEntry, answer: ProfileReport): ProfileReport;
  readonly state: ReceiptChainState;
}

/**
 * The agent's signer: the chain state read at start (refused as readReceiptChain says, and when an answer kept in
 * report.json carries a receipt with a higher counter than the file: the file was rolled back or removed).
 */
export function agentReceipts(opts: AgentReceiptsOptions): AgentReceipts {
  const now = opts.now ?? Date.now;
  let state = readReceiptChain(opts.stateDir);
  for (const answer of opts.sent) {
    const parsed = answer.receipt === undefined ? undefined : parseReceipt(answer.receipt);
    if (parsed?.ok && parsed.receipt.fields.counter > state.counter) {
      const path = join(opts.stateDir, RECEIPTS_FILE);
      throw new WavegateError(
        'INVALID_INPUT',
        `--state-dir ${opts.stateDir}: ${path} says counter ${state.counter}, but this device has sent receipt ${parsed.receipt.fields.counter} (report.json): the file is older than the chain; refusing to start, which would sign counters again. Restore the file from its latest copy`,
        { field: '--state-dir', value: path },
      );
    }
  }
  return {
    get state() {
      return state;
    },
    sign(entry, answer) {
      const claim = agentReceiptClaim(opts.deviceId, entry, answer);
      if (!claim) return answer;
      let text: string;
      let next: ReceiptChainState;
      try {
        const receipt = signAgentReceipt(
          { ...claim, counter: state.counter + 1, prev: state.last, clock: now() },
          opts.key,
        );
        text = receiptText(receipt);
        next = chainAfter(receipt);
      } catch (err) {
        // Fields no receipt can hold (a profile name outside its rule): the answer goes without one, and says why here.
        opts.log(`${entry.profile}: no receipt for request ${entry.requestId}: ${(err as Error).message}`);
        return answer;
      }
      // Whole, synced, renamed; then the directory synced, so the rename outlives a power cut. The counter is taken
      // once the file says so: a failure to sync the directory after the rename must not give it again.
      writeFileAtomic(join(opts.stateDir, RECEIPTS_FILE), `${JSON.stringify(next)}\n`);
      state = next;
      syncDir(opts.stateDir);
      return { ...answer, receipt: text };
    },
  };
}

/** fsync a directory, so a rename in it outlives a power cut. */
export function syncDir(dir: string): void {
  const fd = openSync(dir, constants.O_RDONLY);
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
