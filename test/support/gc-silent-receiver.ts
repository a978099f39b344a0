/**
 * Run by test/workflow/webhooks.test.ts as `node --expose-gc --import tsx <this file> <secret file>`: one
 * webhook attempt against a receiver that accepts and never answers, with the garbage collector forced
 * every 20 ms. Prints `rejected <type> <ms>` when the attempt gives up, or `HUNG` after 10 s: a timeout
 * signal that is only weakly held (AbortSignal.any) is collected and never fires.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { dirname } from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import { createWebhookActivities } from '../../activities/webhooks';
import { webhookPolicyFromEnv } from '../../core/secret-policy';

async function main(): Promise<void> {
  const silent = createServer(() => {});
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(silent.address() as AddressInfo).port}/hook`;
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run with --expose-gc');
  const loop = setInterval(gc, 20);
  const hung = setTimeout(() => {
    console.log('HUNG');
    process.exit(1);
  }, 10_000);
  const event = {
    deliveryId: 'r:run:1',
    event: 'rollout.started',
    rolloutId: 'r',
    profile: 'p',
    fromRevision: 1,
    toRevision: 2,
    phase: null,
    reason: null,
    by: 'test',
    at: new Date(0).toISOString(),
    evidence: {},
  };
  const started = Date.now();
  const quiet = { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error() {} };
  try {
    // The worker's policy, explicitly: this receiver is on loopback, the secret file in its own directory.
    const policy = webhookPolicyFromEnv({
      WAVEGATE_WEBHOOK_SECRETS_DIR: dirname(process.argv[2]!),
      WAVEGATE_WEBHOOK_ALLOW_HOSTS: '127.0.0.1',
    });
    await new MockActivityEnvironment(undefined, { logger: quiet }).run(
      createWebhookActivities({ attemptTimeoutMs: 300, policy }).deliverWebhook,
      { url, secretFile: process.argv[2]!, event: event as never },
    );
    console.log('delivered?');
  } catch (err) {
    console.log(`rejected ${(err as { type?: string }).type} ${Date.now() - started}`);
  }
  clearInterval(loop);
  clearTimeout(hung);
  silent.closeAllConnections();
  silent.close();
}

void main();
