import { isIP } from 'node:net';
import { connect as tlsConnect, type ConnectionOptions as TlsOptions } from 'node:tls';
import { WavegateError } from '../core/errors';
import type { ConnectionSettings } from './connection';

/**
 * Why a connection to Temporal failed, said so a person can act on it. The SDK's clients report a TLS
 * misconfiguration as "Failed to connect before the deadline" (the client) or a transport error (the
 * worker), which reads like a server that is down. So after a failed connect we ask the frontend
 * ourselves with one TLS handshake under the same settings: a certificate the trusted CA did not sign, a
 * client certificate the server requires, or TLS on one side only is bad input (INVALID_INPUT, exit 2),
 * named; a server we cannot reach at all stays UNAVAILABLE (exit 1), as before.
 */
export type TlsProbe =
  | { kind: 'unreachable'; message: string }
  | { kind: 'untrusted-server'; message: string }
  | { kind: 'client-cert-required'; message: string }
  | { kind: 'client-cert-rejected'; message: string }
  | { kind: 'handshake-ok'; message: string };

const CERT_VERIFY_CODES =
  /CERT|UNABLE_TO_VERIFY|UNABLE_TO_GET_ISSUER|SELF_SIGNED|DEPTH_ZERO|HOSTNAME|ERR_TLS_CERT_ALTNAME/;

function hostPort(address: string): { host: string; port: number } {
  const m = /^\[?([^\]]+?)\]?:(\d+)$/.exec(address);
  return m ? { host: m[1]!, port: Number(m[2]) } : { host: address, port: 7233 };
}

function probeOptions(settings: ConnectionSettings): TlsOptions {
  const { host, port } = hostPort(settings.address);
  const tls = typeof settings.tls === 'object' ? settings.tls : {};
  const servername = tls.serverNameOverride ?? (isIP(host) ? undefined : host);
  return {
    host,
    port,
    ALPNProtocols: ['h2'],
    ...(servername ? { servername } : {}),
    ...(tls.serverRootCACertificate ? { ca: Buffer.from(tls.serverRootCACertificate) } : {}),
    ...(tls.clientCertPair
      ? { cert: Buffer.from(tls.clientCertPair.crt), key: Buffer.from(tls.clientCertPair.key) }
      : {}),
    rejectUnauthorized: settings.tls !== undefined,
  };
}

/** One TLS handshake against the frontend (5 s at most), classified. */
export function probeTls(settings: ConnectionSettings, timeoutMs = 5_000): Promise<TlsProbe> {
  return new Promise((resolve) => {
    let settled = false;
    const done = (p: TlsProbe) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(p);
    };
    const socket = tlsConnect(probeOptions(settings));
    const timer = setTimeout(
      () => done({ kind: 'unreachable', message: `no TLS handshake within ${timeoutMs} ms` }),
      timeoutMs,
    );
    socket.once('secureConnect', () => {
      // TLS 1.3 sends a refused client certificate's alert after the handshake: wait a moment for it.
      setTimeout(() => done({ kind: 'handshake-ok', message: 'TLS handshake completed' }), 300);
    });
    socket.once('error', (err: NodeJS.ErrnoException) => {
      const code = err.code ?? '';
      if (/ECONNREFUSED|ENOTFOUND|EHOSTUNREACH|ENETUNREACH|ECONNRESET|ETIMEDOUT|EAI_AGAIN/.test(code))
        return done({ kind: 'unreachable', message: err.message });
      if (/CERTIFICATE_REQUIRED|HANDSHAKE_FAILURE/.test(code))
        return done({ kind: 'client-cert-required', message: err.message });
      if (/BAD_CERTIFICATE|UNKNOWN_CA|CERTIFICATE_UNKNOWN|ALERT_DECRYPT_ERROR/.test(code))
        return done({ kind: 'client-cert-rejected', message: err.message });
      if (CERT_VERIFY_CODES.test(code))
        return done({ kind: 'untrusted-server', message: `${err.message}${code ? ` (${code})` : ''}` });
      done({ kind: 'unreachable', message: err.message });
    });
  });
}

/** What the server said when it wants a client certificate and got none (nginx: HTTP 400 to the gRPC call). */
const NO_CLIENT_CERT_ANSWER = /status code 400|400 Bad Request|certificate required/i;

/** The error's message and its causes' (the client wraps the server's answer: "Failed to connect…" caused by "…HTTP status code 400"). */
function causeChain(err: unknown): string {
  const parts: string[] = [];
  for (
    let e = err as { message?: string; cause?: unknown } | undefined, depth = 0;
    e && depth < 5;
    e = e.cause as typeof e, depth++
  ) {
    const message = e.message ?? String(e);
    if (!parts.some((p) => p.includes(message))) parts.push(message);
  }
  return parts.join(': ');
}

/** The error for a failed connect: INVALID_INPUT naming the TLS setting at fault, else UNAVAILABLE with `hint`. */
export async function connectionFailure(settings: ConnectionSettings, err: unknown, hint = ''): Promise<WavegateError> {
  const cause = causeChain(err);
  const tls = typeof settings.tls === 'object' ? settings.tls : settings.tls ? {} : undefined;
  const probe = await probeTls(settings).catch((e: Error): TlsProbe => ({ kind: 'unreachable', message: e.message }));
  const at = `Temporal at ${settings.address}`;
  const refuse = (field: string, message: string) =>
    new WavegateError('INVALID_INPUT', `TLS to ${at}: ${message}`, { field, cause });
  if (tls === undefined && probe.kind !== 'unreachable') {
    return refuse(
      '--tls',
      `the server speaks TLS and this connection does not: connect with --tls (and --tls-ca-cert <file> for a private CA), TEMPORAL_TLS=true or the config profile's tls`,
    );
  }
  if (tls !== undefined) {
    if (probe.kind === 'untrusted-server') {
      const trusted = tls.serverRootCACertificate
        ? "the CA given (--tls-ca-cert, TEMPORAL_TLS_SERVER_CA_CERT_PATH or the config profile's server_ca_cert_path)"
        : 'the system root CAs (no --tls-ca-cert given)';
      return refuse('--tls-ca-cert', `the server's certificate is not trusted by ${trusted}: ${probe.message}`);
    }
    if (probe.kind === 'client-cert-rejected')
      return refuse(
        '--tls-cert',
        `the server rejected the client certificate (--tls-cert/--tls-key): ${probe.message}`,
      );
    const certRequired =
      probe.kind === 'client-cert-required' || (probe.kind === 'handshake-ok' && NO_CLIENT_CERT_ANSWER.test(cause));
    if (certRequired && !tls.clientCertPair) {
      return refuse(
        '--tls-cert',
        `the server requires a client certificate (mTLS) and none was given: set --tls-cert and --tls-key (or TEMPORAL_TLS_CLIENT_CERT_PATH/TEMPORAL_TLS_CLIENT_KEY_PATH, or the config profile's client_cert_path/client_key_path) (${cause})`,
      );
    }
    if (certRequired)
      return refuse('--tls-cert', `the server refused the client certificate (--tls-cert/--tls-key): ${cause}`);
  }
  return new WavegateError('UNAVAILABLE', `cannot reach ${at} (${cause})${hint}`, { cause });
}
