import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One request the receiver got, with the answer it gave. */
export interface ReceivedDelivery {
  deliveryId: string;
  event: string;
  timestamp: string;
  signature: string;
  /** The Host header: the url's host, also when the worker connected to an address it resolved. */
  host: string;
  /** The raw body, exactly as received: what the signature covers. */
  body: string;
  answered: number;
}

export interface WebhookReceiver {
  /** `http://127.0.0.1:<port>/hook` */
  url: string;
  requests: ReceivedDelivery[];
  /** The requests answered 2xx, in order. */
  acknowledged(): ReceivedDelivery[];
  close(): Promise<void>;
}

/**
 * A real webhook receiver on 127.0.0.1 (a free port): records every request and answers `answer(n, event)`
 * for the n-th one (1-based) naming `event` (its X-Wavegate-Event), e.g. 500 for the first two and 200
 * after, with `answerBody` (default "ok"/"no").
 * A worker sends to loopback only when its webhook policy allows it: tests that deliver here give the
 * worker `WAVEGATE_WEBHOOK_ALLOW_HOSTS=127.0.0.1` (core/secret-policy.ts).
 */
export async function startWebhookReceiver(
  answer: (n: number, event: string) => number = () => 200,
  answerBody?: string,
): Promise<WebhookReceiver> {
  const requests: ReceivedDelivery[] = [];
  const server = createServer((req, res) => {
    void readBody(req).then((body) => {
      const event = String(req.headers['x-wavegate-event'] ?? '');
      const status = answer(requests.length + 1, event);
      requests.push({
        deliveryId: String(req.headers['x-wavegate-delivery'] ?? ''),
        event,
        timestamp: String(req.headers['x-wavegate-timestamp'] ?? ''),
        signature: String(req.headers['x-wavegate-signature'] ?? ''),
        host: String(req.headers.host ?? ''),
        body,
        answered: status,
      });
      res.writeHead(status, { 'content-type': 'text/plain' }).end(answerBody ?? (status < 300 ? 'ok' : 'no'));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hook`,
    requests,
    acknowledged: () => requests.filter((r) => r.answered >= 200 && r.answered < 300),
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

/** A receiver's check, as docs/formats.md describes it: HMAC-SHA256(secret, "<timestamp>.<raw body>"). */
export function signatureValid(delivery: ReceivedDelivery, secret: string): boolean {
  const expected = Buffer.from(
    `sha256=${createHmac('sha256', secret).update(`${delivery.timestamp}.${delivery.body}`).digest('hex')}`,
  );
  const given = Buffer.from(delivery.signature);
  return given.length === expected.length && timingSafeEqual(given, expected);
}
