import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fromBase64 } from '../../core/bytes';
import {
  type CheckpointKey,
  cosign,
  MAX_NOTE_BYTES,
  type ParsedCheckpoint,
  parseCheckpoint,
  verifyCheckpoint,
} from '../../core/checkpoint';
import { WavegateError } from '../../core/errors';
import { HASH_BYTES, MAX_PROOF_HASHES } from '../../core/merkle';
import type { KeyPair } from '../../core/signing';
import { witnessDecision } from '../../core/witness';
import { HttpRefusal, sendError, sendJson } from '../../http/answer';
import { type Asked, askedOf, dispatch, type RouteTable } from '../../http/routes';
import { OriginQueue, WitnessStore } from './state';

/**
 * `wavegate witness`'s HTTP server (docs/formats.md, "Checkpoints and the witness"): one route,
 * `POST /v1/add-checkpoint`, body `{ "checkpoint": "<signed note>", "proof": ["<base64 hash>", ...] }`, answered
 * through http/ (a route table, a bounded body). It cosigns a checkpoint signed by a pinned log key when it is the
 * first of its origin, the one cosigned last again, or a tree the consistency proof shows to extend it
 * (core/witness.ts), after the new state is on disk (./state.ts); it answers the cosignature line as text/plain.
 * Refusals are JSON `{ code, message }`: 400 INVALID_INPUT (malformed), 403 FORBIDDEN (no pinned log key signed
 * it validly), 409 CONFLICT (a rollback, a fork, a bad proof), 413, 408, 503 BUSY. The witness's secret key
 * signs and is never written anywhere: not in an answer, not in the log.
 */

export const WITNESS_LIMITS = {
  maxBodyBytes: 64 * 1024,
  /** The whole body within this of its headers (408); the request within requestTimeoutMs (Node's own bound). */
  bodyTimeoutMs: 10_000,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 30_000,
  keepAliveMs: 5_000,
  maxHeaderBytes: 8 * 1024,
  /** Requests handled at once; more are answered 503 BUSY (a log asks a few times per rollout phase). */
  maxInFlight: 64,
} as const;

export interface WitnessOptions {
  /** The witness's own key and the key name its cosignature lines carry. */
  pair: KeyPair;
  name: string;
  /** The logs it cosigns for: their key names and public keys (kind 'log'). */
  logs: readonly CheckpointKey[];
  stateDir: string;
  listen: { host: string; port: number };
  log: (line: string) => void;
  /** The clock (epoch ms): the cosignatures' time. */
  now?: () => number;
}

export interface WitnessServer {
  url: string;
  close(): Promise<void>;
}

interface AddCheckpoint {
  note: ParsedCheckpoint;
  proof: Uint8Array[];
}

/** The body's two fields, strictly: 400 INVALID_INPUT naming the field otherwise. */
export function parseAddCheckpoint(json: Record<string, unknown>): AddCheckpoint {
  const bad = (message: string) => new HttpRefusal(400, 'INVALID_INPUT', message);
  const extra = Object.keys(json).find((k) => k !== 'checkpoint' && k !== 'proof');
  if (extra !== undefined) throw bad(`${JSON.stringify(extra.slice(0, 40))}: not a field of add-checkpoint`);
  if (typeof json.checkpoint !== 'string' || json.checkpoint.length > MAX_NOTE_BYTES)
    throw bad(`checkpoint: must be the text of a signed checkpoint of at most ${MAX_NOTE_BYTES} bytes`);
  const parsed = parseCheckpoint(json.checkpoint);
  if (!parsed.ok) throw bad(`checkpoint: ${parsed.message}`);
  const proof = json.proof ?? [];
  if (!Array.isArray(proof) || proof.length > MAX_PROOF_HASHES)
    throw bad(`proof: must be an array of at most ${MAX_PROOF_HASHES} base64 hashes`);
  const hashes = proof.map((h, i) => {
    const bytes = typeof h === 'string' ? fromBase64(h) : undefined;
    if (bytes?.length !== HASH_BYTES) throw bad(`proof[${i}]: must be the base64 of a ${HASH_BYTES}-byte hash`);
    return bytes;
  });
  return { note: parsed.note, proof: hashes };
}

export async function startWitness(opts: WitnessOptions): Promise<WitnessServer> {
  const store = new WitnessStore(opts.stateDir);
  const queue = new OriginQueue();
  const now = opts.now ?? Date.now;
  const table: RouteTable<never> = {
    routes: [
      {
        method: 'POST',
        path: '/v1/add-checkpoint',
        checks: [],
        body: { maxBytes: WITNESS_LIMITS.maxBodyBytes, timeoutMs: WITNESS_LIMITS.bodyTimeoutMs, json: true },
        handle: (asked) => addCheckpoint(asked, opts, store, queue, now),
      },
    ],
    methodNotAllowed: true,
    otherwise: (path) => ({
      checks: [],
      handle: () => {
        throw new HttpRefusal(404, 'NOT_FOUND', `no endpoint ${JSON.stringify(path.slice(0, 100))}`);
      },
    }),
    guards: {},
  };
  const inFlight = new Set<Promise<void>>();
  const listener = (req: IncomingMessage, res: ServerResponse) => {
    if (inFlight.size >= WITNESS_LIMITS.maxInFlight) {
      res.setHeader('connection', 'close');
      sendError(res, 503, 'BUSY', `${WITNESS_LIMITS.maxInFlight} requests in flight; ask again`);
      return;
    }
    const asked = askedOf(table, req, res);
    const done = dispatch(table, asked)
      .catch((err: unknown) => refuse(asked, err, opts.log))
      .finally(() => inFlight.delete(done));
    inFlight.add(done);
  };
  const server = createServer(
    {
      maxHeaderSize: WITNESS_LIMITS.maxHeaderBytes,
      headersTimeout: WITNESS_LIMITS.headersTimeoutMs,
      requestTimeout: WITNESS_LIMITS.requestTimeoutMs,
      keepAliveTimeout: WITNESS_LIMITS.keepAliveMs,
    },
    listener,
  );
  server.on('clientError', (_err, socket) => {
    if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n');
    else socket.destroy();
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.listen.port, opts.listen.host, () => resolve());
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return {
    url: `http://${host}:${address.port}`,
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      await closed;
      // A state write in flight finishes: its file is whole either way (a rename), but its answer is owed.
      await Promise.race([Promise.allSettled([...inFlight]), new Promise((r) => setTimeout(r, 5_000).unref())]);
    },
  };
}

/** POST /v1/add-checkpoint: verify the log's signature, then decide and record under the origin's turn. */
async function addCheckpoint(
  asked: Asked<never>,
  opts: WitnessOptions,
  store: WitnessStore,
  queue: OriginQueue,
  now: () => number,
): Promise<void> {
  const { note, proof } = parseAddCheckpoint(asked.json);
  const { origin, size } = note.checkpoint;
  const verified = verifyCheckpoint(note, opts.logs);
  if (!verified.ok || !verified.signers.some((s) => s.kind === 'log'))
    throw new HttpRefusal(
      403,
      'FORBIDDEN',
      `${origin} (size ${size}): ${verified.ok ? 'signed by no log key this witness pins' : verified.message.replace('no known key', 'no log key this witness pins')}`,
    );
  const line = await queue.run(origin, async () => {
    const last = await store.read(origin);
    const decision = witnessDecision(last, note.checkpoint, proof);
    if (!decision.ok) throw new HttpRefusal(409, 'CONFLICT', decision.message);
    const at = now();
    // Recorded before it is said: the answer is the promise never to cosign a fork of it.
    if (decision.change !== 'same') await store.write(note.checkpoint, new Date(at));
    opts.log(
      `cosigned ${origin} size ${size}${decision.change === 'grown' ? ` (grown from ${last!.size})` : decision.change === 'same' ? ' (again)' : ' (first)'}`,
    );
    return cosign(note.body, opts.pair, opts.name, Math.floor(at / 1000));
  });
  asked.res.writeHead(200, {
    'content-type': 'text/plain; charset=utf-8',
    'content-length': Buffer.byteLength(line),
    'cache-control': 'no-store',
  });
  asked.res.end(line);
}

/** A refusal as JSON `{ code, message }` (logged with its status); an unexpected error logged by its first line. */
function refuse(asked: Asked<never>, err: unknown, log: (line: string) => void): void {
  let status = 500;
  let code = 'INTERNAL';
  let message = "an unexpected error; the witness's log says more";
  if (err instanceof HttpRefusal) ({ status, code, message } = err);
  else if (err instanceof WavegateError) {
    // INVALID_STATE: the witness's own state is damaged or unreadable; the asker can do nothing about it.
    status = err.code === 'INVALID_INPUT' ? 400 : err.code === 'CONFLICT' ? 409 : 500;
    ({ code, message } = err);
  } else log(`witness: unexpected error: ${String((err as Error)?.message ?? err).split('\n')[0]}`);
  log(`refused ${asked.method} ${asked.path.slice(0, 100)}: ${status} ${code}: ${message}`);
  if (asked.res.headersSent) {
    asked.res.end();
    return;
  }
  // A body not read to its end cannot carry the next request on this connection.
  if (!asked.bodyRead) asked.res.setHeader('connection', 'close');
  sendJson(asked.res, status, { code, message });
}
