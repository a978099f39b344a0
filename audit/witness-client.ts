import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { toBase64 } from '../core/bytes';
import type { WavegateErrorCode } from '../core/errors';

/**
 * The client of a witness (`wavegate witness`, docs/formats.md "Checkpoints and the witness"):
 *
 *   requestCosignature(url, note, proof, { timeoutMs }) → { ok: true, lines } | { ok: false, code, message, ... }
 *
 * `note` is the log-signed checkpoint (core/checkpoint.ts), `proof` the consistency proof from the size the witness
 * cosigned last for its origin (core/merkle.ts consistencyProof). The answer's `lines` are the witness's
 * cosignature lines, each ending in a newline, to append to the note after its own signature lines (check them with
 * verifyCheckpoint and the witness's key: this client does not know it). Never throws: every failure is a value
 * with a code. Bounded: the answer's size, the whole call's time (retries included). Retried, with backoff, only
 * what another try can cure: a network error, no answer in time, 408, 429, a 5xx. A refusal (400, 403, 409) is
 * the witness's decision and is returned at once.
 */

export interface CosignatureOptions {
  /** The whole call, every attempt and wait included (default 10 s). */
  timeoutMs?: number;
  /** Tries in all (default 3). */
  attempts?: number;
  /** The wait before the second try, doubled before each next (default 200 ms). */
  backoffMs?: number;
  /** The largest answer read (default 16 KB: a few cosignature lines, or a refusal, are far less). */
  maxAnswerBytes?: number;
}

export type CosignatureAnswer =
  | { ok: true; lines: string[] }
  | {
      ok: false;
      /** CONFLICT: a rollback, fork or bad proof; INVALID_INPUT: malformed; INVALID_STATE: the witness does not pin
       * the log's key, or answers no such endpoint; UNAVAILABLE: unreachable, busy or failing after every try;
       * FAILED: an answer that is not one (too large, not cosignature lines). */
      code: WavegateErrorCode;
      message: string;
      /** The HTTP status and the witness's own code, when it answered. */
      status?: number;
      witnessCode?: string;
    };

const PATH = '/v1/add-checkpoint';
const LINE = /^\u2014 [\x21-\x2a\x2c-\x7e]{1,128} [A-Za-z0-9+/]+={0,2}$/;

type Attempt =
  | { kind: 'answer'; status: number; body: string }
  | { kind: 'retry'; message: string }
  | { kind: 'final'; answer: CosignatureAnswer };

export async function requestCosignature(
  url: string,
  note: string,
  proof: readonly Uint8Array[],
  opts: CosignatureOptions = {},
): Promise<CosignatureAnswer> {
  const timeoutMs = opts.timeoutMs ?? 10_000;
  const attempts = Math.max(1, opts.attempts ?? 3);
  const maxAnswerBytes = opts.maxAnswerBytes ?? 16 * 1024;
  let target: URL;
  try {
    target = new URL(PATH, url.endsWith('/') ? url : `${url}/`);
    if (target.protocol !== 'http:' && target.protocol !== 'https:') throw new Error('not http(s)');
  } catch {
    return {
      ok: false,
      code: 'INVALID_INPUT',
      message: `witness URL: must be http(s)://host:port (got ${JSON.stringify(url.slice(0, 100))})`,
    };
  }
  const body = Buffer.from(JSON.stringify({ checkpoint: note, proof: proof.map((h) => toBase64(h)) }));
  const deadline = Date.now() + timeoutMs;
  let last = 'no attempt';
  let wait = opts.backoffMs ?? 200;
  for (let i = 1; i <= attempts; i++) {
    const left = deadline - Date.now();
    if (left <= 0) break;
    const attempt = await post(target, body, left, maxAnswerBytes);
    const outcome = attempt.kind === 'answer' ? answerOf(attempt.status, attempt.body) : attempt;
    if (outcome.kind === 'final') return outcome.answer;
    last = outcome.message;
    if (i < attempts) {
      await new Promise((r) => setTimeout(r, Math.min(wait, Math.max(0, deadline - Date.now()))));
      wait *= 2;
    }
  }
  return {
    ok: false,
    code: 'UNAVAILABLE',
    message: `witness ${target.origin}: no cosignature after ${attempts} tries within ${timeoutMs} ms (last: ${last})`,
  };
}

/** One POST, its answer read up to `maxBytes` within `ms`. */
function post(target: URL, body: Buffer, ms: number, maxBytes: number): Promise<Attempt> {
  return new Promise((resolve) => {
    let settled = false;
    const settle = (a: Attempt) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      req.destroy();
      resolve(a);
    };
    const send = target.protocol === 'https:' ? httpsRequest : httpRequest;
    const req = send(
      target,
      {
        method: 'POST',
        agent: false,
        headers: { 'content-type': 'application/json', 'content-length': body.length },
      },
      (res: IncomingMessage) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (chunk: Buffer) => {
          size += chunk.length;
          if (size > maxBytes)
            return settle({
              kind: 'final',
              answer: {
                ok: false,
                code: 'FAILED',
                status: res.statusCode,
                message: `witness ${target.origin}: its answer is above ${maxBytes} bytes`,
              },
            });
          chunks.push(chunk);
        });
        res.on('end', () =>
          settle({ kind: 'answer', status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }),
        );
        res.on('error', (err) => settle({ kind: 'retry', message: err.message }));
      },
    );
    const timer = setTimeout(() => settle({ kind: 'retry', message: `no answer within ${ms} ms` }), ms);
    req.on('error', (err: NodeJS.ErrnoException) => settle({ kind: 'retry', message: err.code ?? err.message }));
    req.end(body);
  });
}

const CODE_OF_STATUS: Record<number, WavegateErrorCode> = {
  400: 'INVALID_INPUT',
  413: 'INVALID_INPUT',
  403: 'INVALID_STATE',
  404: 'INVALID_STATE',
  405: 'INVALID_STATE',
  409: 'CONFLICT',
};

/** What an answer means: cosignature lines, a refusal to return, or a failure another try may cure. */
function answerOf(status: number, text: string): Exclude<Attempt, { kind: 'answer' }> {
  if (status === 200) {
    const lines = text.endsWith('\n') ? text.slice(0, -1).split('\n') : [];
    if (!lines.length || !lines.every((l) => LINE.test(l)))
      return {
        kind: 'final',
        answer: { ok: false, code: 'FAILED', status, message: 'the witness answered 200 without cosignature lines' },
      };
    return { kind: 'final', answer: { ok: true, lines: lines.map((l) => `${l}\n`) } };
  }
  let refusal: { code?: unknown; message?: unknown } = {};
  try {
    refusal = JSON.parse(text) as typeof refusal;
  } catch {
    // Not the witness's JSON (a proxy's page): the status alone says it.
  }
  const witnessCode = typeof refusal.code === 'string' ? refusal.code.slice(0, 40) : undefined;
  const said = typeof refusal.message === 'string' ? refusal.message.slice(0, 1000) : `HTTP ${status}`;
  if (status === 408 || status === 429 || status >= 500) return { kind: 'retry', message: `${status} ${said}` };
  return {
    kind: 'final',
    answer: {
      ok: false,
      code: CODE_OF_STATUS[status] ?? 'FAILED',
      status,
      ...(witnessCode ? { witnessCode } : {}),
      message: `the witness refused (${status}${witnessCode ? ` ${witnessCode}` : ''}): ${said}`,
    },
  };
}
