import { randomBytes } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { authorizationHeader } from '../core/agent-auth';
import { nativeEd25519Sign } from '../device/ed25519-native';
import { MAX_PAYLOAD_FILE_BYTES } from '../core/revision';
import type { HeldVersions } from '../core/held-trust';
import type { IdentityRotationNews, RotationProof } from '../core/agent-rotation';
import type { AgentReport, TwinView } from '../core/twin';

/**
 * The agent's side of the gateway API: every request signed with the device's identity key
 * (core/agent-auth.ts), the body's sha256 declared in the Authorization header (`digest=`) so the
 * gateway authenticates before it reads the body; a GET sends an empty body (its digest is that of no
 * bytes). A refusal comes back as GatewayError with the gateway's `{ code, message }`.
 */
export class GatewayError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(`gateway ${status} ${code}: ${message}`);
    this.name = 'GatewayError';
  }
}

export interface GatewayClientOptions {
  /** `http(s)://host:port`, without /v1. */
  url: string;
  device: string;
  /** The identity key's 32-byte seed, or how to get it at each request (it changes when the key rotates). */
  secretKey: Uint8Array | (() => Uint8Array);
  /** A CA (PEM) to trust for the gateway's certificate, beside the system's. */
  ca?: Buffer;
}

/** The most a response may carry: a view of 64 profiles with their envelopes, or one payload file (the size a revision may sign). */
const MAX_RESPONSE_BYTES = MAX_PAYLOAD_FILE_BYTES;

export function gatewayClient(opts: GatewayClientOptions) {
  const base = new URL(opts.url);
  const prefix = base.pathname.replace(/\/+$/, '');

  const send = (
    method: 'GET' | 'POST',
    path: string,
    body: Buffer,
    timeoutMs: number,
    signal?: AbortSignal,
  ): Promise<Buffer> =>
    new Promise((resolve, reject) => {
      const target = `${prefix}${path}`;
      const headers: Record<string, string | number> = {
        authorization: authorizationHeader({
          device: opts.device,
          method,
          path: target,
          body,
          now: Date.now(),
          nonce: randomBytes(16).toString('hex'),
          secretKey: typeof opts.secretKey === 'function' ? opts.secretKey() : opts.secretKey,
          sign: nativeEd25519Sign,
        }),
        'content-length': body.length,
        ...(method === 'POST' ? { 'content-type': 'application/json' } : {}),
      };
      const make = base.protocol === 'https:' ? httpsRequest : httpRequest;
      const req = make(
        {
          host: base.hostname.replace(/^\[|\]$/g, ''),
          port: base.port || (base.protocol === 'https:' ? 443 : 80),
          method,
          path: target,
          headers,
          timeout: timeoutMs,
          ...(opts.ca ? { ca: opts.ca } : {}),
          ...(signal ? { signal } : {}),
        },
        (res) => {
          const chunks: Buffer[] = [];
          let size = 0;
          res.on('data', (c: Buffer) => {
            size += c.length;
            if (size > MAX_RESPONSE_BYTES)
              req.destroy(new Error(`the gateway's answer is above ${MAX_RESPONSE_BYTES} bytes`));
            else chunks.push(c);
          });
          res.on('end', () => {
            const data = Buffer.concat(chunks);
            if (res.statusCode === 200) return resolve(data);
            let code = 'HTTP';
            let message = data.toString('utf8').slice(0, 400);
            try {
              const parsed = JSON.parse(message) as { code?: string; message?: string };
              code = parsed.code ?? code;
              message = parsed.message ?? message;
            } catch {
              /* not the gateway's JSON */
            }
            reject(new GatewayError(res.statusCode ?? 0, code, message));
          });
          res.on('error', reject);
        },
      );
      req.on('timeout', () => req.destroy(new Error(`no answer from the gateway within ${timeoutMs} ms`)));
      req.on('error', reject);
      req.end(body);
    });

  const json = (value: unknown) => Buffer.from(JSON.stringify(value));

  return {
    /** `held`: the trust versions held per profile; the answer's `trust` is the news for them (unverified here). */
    async sync(
      input: {
        report: AgentReport | null;
        knownVersion: number;
        waitMs: number;
        held?: Record<string, HeldVersions>;
        /** The proof of a new identity key (agent/identity-rotation.ts), from the rotation's activate instant. */
        rotationProof?: RotationProof;
      },
      signal?: AbortSignal,
    ): Promise<TwinView & { trust?: unknown; rotation?: IdentityRotationNews }> {
      return JSON.parse(
        (await send('POST', '/v1/sync', json(input), input.waitMs + 20_000, signal)).toString('utf8'),
      ) as TwinView & { trust?: unknown; rotation?: IdentityRotationNews };
    },
    async report(report: AgentReport, signal?: AbortSignal): Promise<TwinView> {
      return JSON.parse(
        (await send('POST', '/v1/report', json({ report }), 20_000, signal)).toString('utf8'),
      ) as TwinView;
    },
    payload(profile: string, revision: number, name: string, signal?: AbortSignal): Promise<Buffer> {
      return send('GET', `/v1/payload/${profile}/${revision}/${name}`, Buffer.alloc(0), 120_000, signal);
    },
    /** A raw signed request (tests: replays and foreign keys). */
    send,
  };
}

export type GatewayClient = ReturnType<typeof gatewayClient>;
