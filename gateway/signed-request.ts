import { authenticate, bodyDigestProblem, bodyHash, type NonceCache } from '../core/agent-auth';
import { nativeEd25519Verify } from '../device/ed25519-native';
import { HttpRefusal } from '../http/answer';
import { readBodyOf, type Asked, type Guards } from '../http/routes';
import { AgentGone } from './agent-gone';
import { GATEWAY_TIMEOUTS, MAX_BODY_BYTES } from './limits';
import type { AgentPins } from './pins';

/**
 * The gateway's `auth` and `signedBody` checks: a request is a pinned device's when its headers verify
 * (core/agent-auth.ts: the signature covers method, path, time, nonce and the body's digest), judged before
 * any byte of its body is read; its body, read after, must be the one whose digest was signed.
 */
export interface AgentCaller {
  device: string;
  /** The body's digest the signature covers. */
  digest: string;
  /** The agent's connection closed before its answer: a long-poll stops waiting for it. */
  gone: AgentGone;
}

/** Every authenticated request's body: bounded in size and, from its headers, in time (408 BODY_TIMEOUT). */
export const AGENT_BODY = { maxBytes: MAX_BODY_BYTES, timeoutMs: GATEWAY_TIMEOUTS.bodyMs } as const;

export interface SignedRequestDeps {
  pins: AgentPins;
  nonces: NonceCache;
  /** `--accept-agents-without-digest` (gateway/server.ts GatewayOptions). */
  acceptAgentsWithoutDigest?: boolean;
  log: (line: string) => void;
  now: () => number;
  /** Counts the body bytes read (only ever a pinned device's). */
  countBody: (chunk: Buffer) => void;
}

export function signedRequestGuards(
  deps: SignedRequestDeps,
): Required<Pick<Guards<AgentCaller>, 'auth' | 'signedBody'>> {
  /** Devices seen without a body digest under --accept-agents-without-digest (each logged once). */
  const legacyAgents = new Set<string>();
  const judge = (asked: Asked<AgentCaller>, header: string | undefined) =>
    authenticate(
      { header, method: asked.method, path: asked.req.url ?? '', now: deps.now() },
      (d) => (deps.pins.keysOf ? deps.pins.keysOf(d) : deps.pins.keyOf(d)),
      deps.nonces,
      nativeEd25519Verify,
    );

  /**
   * The older protocol signed the same text with the body's hash in it: read the body (bounded), then judge
   * the header as if it had declared that hash. Only for a device that has a pinned key at all.
   */
  async function withoutDigest(asked: Asked<AgentCaller>, header: string | undefined) {
    const claimed = /device="([^"]{1,128})"/.exec(header ?? '')?.[1];
    if (claimed === undefined || !deps.pins.keyOf(claimed)) return undefined;
    asked.body = await readBodyOf(asked, AGENT_BODY, deps.countBody);
    const auth = judge(asked, `${header}, digest="${bodyHash(asked.body)}"`);
    if (auth.ok && !legacyAgents.has(auth.device)) {
      legacyAgents.add(auth.device);
      deps.log(
        `${auth.device} sends no body digest (an agent older than this gateway): accepted under --accept-agents-without-digest; upgrade it`,
      );
    }
    return auth;
  }

  return {
    async auth(asked) {
      const header = asked.req.headers.authorization;
      let auth = judge(asked, header);
      if (!auth.ok && auth.reason === 'NO_DIGEST' && deps.acceptAgentsWithoutDigest)
        auth = (await withoutDigest(asked, header)) ?? auth;
      if (!auth.ok) {
        if (auth.reason === 'BUSY') throw new HttpRefusal(503, 'BUSY', auth.message);
        if (auth.reason === 'DEVICE_BUSY') throw new HttpRefusal(429, 'DEVICE_LIMIT', auth.message);
        throw new HttpRefusal(
          401,
          auth.reason === 'REPLAY' ? 'REPLAY' : 'UNAUTHENTICATED',
          `${auth.reason}: ${auth.message}`,
        );
      }
      return { device: auth.device, digest: auth.digest, gone: AgentGone.watching(asked.req, asked.res) };
    },
    signedBody(asked, body) {
      const mismatch = bodyDigestProblem(asked.caller!.digest, body);
      if (mismatch) throw new HttpRefusal(401, 'UNAUTHENTICATED', `BODY_DIGEST: ${mismatch}`);
    },
  };
}
