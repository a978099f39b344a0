import { describe, expect, it } from 'vitest';
import { ActivityNotFoundError, type Client } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { AnswerDelivery, deliveriesOf } from '../../gateway/answers';
import type { AgentReport, DesiredEntry, ProfileReport } from '../../core/twin';
import { desiredRequest } from '../support/twin-agent';
import { agentReceiptClaim } from '../../core/agent-receipt';
import { RECEIPT_GENESIS, receiptText, signAgentReceipt } from '../../core/receipt';
import { keyPairFromSeed } from '../../core/signing';

/**
 * The gateway delivers an agent's final answer to the apply waiting for it (gateway/answers.ts): which answers in a
 * report are its to deliver, whether the twin may skip its feed stamp, and the completion itself (retried, "gone"
 * counted apart). The real path, a rollout whose applies the gateway completes, is in
 * test/workflow/agent-rollout-twin.test.ts; this stand-in client only records the calls.
 */
const entry = (device: string, awaited: boolean): DesiredEntry => ({
  ...desiredRequest(device, 2),
  ...(awaited ? { awaited: true } : {}),
  setAt: '2026-12-05T00:00:00Z',
});
const said = (requestId: string, state: ProfileReport['state'], extra: Partial<ProfileReport> = {}): ProfileReport => ({
  revision: 2,
  state,
  requestId,
  steps: ['verify', 'apply', 'verify', 'marker'],
  at: '2026-12-05T00:00:01Z',
  ...extra,
});
const reportOf = (profiles: Record<string, ProfileReport>): AgentReport => ({
  profiles,
  health: [],
  healthAt: null,
  agentVersion: 'test',
});

describe('which answers a report carries for the gateway to deliver', () => {
  it('a final answer to an awaited request is delivered, and the twin need not stamp the report', () => {
    const e = entry('d1', true);
    const { deliveries, allDelivered } = deliveriesOf(
      'd1',
      { desired: { demo: e }, report: null },
      reportOf({ demo: said(e.requestId, 'applied') }),
    );
    expect(deliveries).toHaveLength(1);
    expect(deliveries[0]).toMatchObject({ deviceId: 'd1', entry: e, answer: { state: 'applied' } });
    expect(allDelivered).toBe(true);
  });

  it('an answer still in progress is nothing to deliver', () => {
    const e = entry('d1', true);
    const out = deliveriesOf(
      'd1',
      { desired: { demo: e }, report: null },
      reportOf({ demo: said(e.requestId, 'applying') }),
    );
    expect(out).toEqual({ deliveries: [], allDelivered: true });
  });

  it('a request nobody said it awaits (convergence, a sender before r11) keeps the feed stamp', () => {
    const e = entry('d1', false);
    const out = deliveriesOf(
      'd1',
      { desired: { demo: e }, report: null },
      reportOf({ demo: said(e.requestId, 'applied') }),
    );
    expect(out).toEqual({ deliveries: [], allDelivered: false });
  });

  it('an answer to a request this gateway does not know (a newer desire it has not read) keeps the feed stamp', () => {
    const e = entry('d1', true);
    const out = deliveriesOf(
      'd1',
      { desired: { demo: e }, report: null },
      reportOf({ demo: said('other:run:7', 'applied') }),
    );
    expect(out).toEqual({ deliveries: [], allDelivered: false });
  });

  it('an answer the twin already holds was delivered when first written: not again', () => {
    const e = entry('d1', true);
    const before = reportOf({ demo: said(e.requestId, 'applied') });
    const out = deliveriesOf(
      'd1',
      { desired: { demo: e }, report: before },
      reportOf({ demo: said(e.requestId, 'applied') }),
    );
    expect(out).toEqual({ deliveries: [], allDelivered: true });
  });
});

/** A stand-in client: `activity.complete` and `activity.fail` answer from `answers`, one per call, in order. */
function standIn(answers: Array<'ok' | 'not-found' | 'unavailable'>) {
  const calls: Array<{ kind: 'complete' | 'fail'; id: unknown; value: unknown }> = [];
  const answer = async (kind: 'complete' | 'fail', id: unknown, value: unknown) => {
    calls.push({ kind, id, value });
    const next = answers.shift() ?? 'ok';
    if (next === 'not-found') throw new ActivityNotFoundError('Not found');
    if (next === 'unavailable') throw new Error('14 UNAVAILABLE: connection refused');
  };
  const client = {
    activity: {
      complete: (id: unknown, value: unknown) => answer('complete', id, value),
      fail: (id: unknown, value: unknown) => answer('fail', id, value),
    },
  } as unknown as Client;
  return { client, calls };
}

const noSleep = async () => {};

describe('delivering an answer', () => {
  it('completes the apply by its id with the result the worker would return', async () => {
    const { client, calls } = standIn(['ok']);
    const e = entry('d1', true);
    const delivery = new AnswerDelivery({ client, sleep: noSleep });
    await delivery.deliver(
      deliveriesOf('d1', { desired: { demo: e }, report: null }, reportOf({ demo: said(e.requestId, 'applied') }))
        .deliveries,
    );
    expect(calls).toEqual([
      {
        kind: 'complete',
        id: { workflowId: e.holder.rollout, runId: e.holder.run, activityId: e.holder.activity },
        value: { device: 'd1', outcome: 'applied', steps: ['verify', 'apply', 'verify', 'marker'] },
      },
    ]);
    expect(delivery.stats()).toEqual({ delivered: 1, gone: 0, failed: 0 });
  });

  it('a refusal fails the apply as EnvelopeRejected, not retried, with the reason', async () => {
    const { client, calls } = standIn(['ok']);
    const e = entry('d1', true);
    const delivery = new AnswerDelivery({ client, sleep: noSleep });
    const report = reportOf({
      demo: said(e.requestId, 'refused', { reason: 'UNPINNED_KEY', detail: 'no pinned key' }),
    });
    await delivery.deliver(deliveriesOf('d1', { desired: { demo: e }, report: null }, report).deliveries);
    expect(calls).toHaveLength(1);
    expect(calls[0]!.kind).toBe('fail');
    const failure = calls[0]!.value as ApplicationFailure;
    expect(failure).toBeInstanceOf(ApplicationFailure);
    expect(failure.type).toBe('EnvelopeRejected');
    expect(failure.nonRetryable).toBe(true);
    expect(failure.message).toMatch(/EnvelopeRejected \(UNPINNED_KEY\): d1: the agent refused demo r2: no pinned key/);
  });

  it('nothing left to complete is counted gone; a server that does not answer is tried again, then left to the worker', async () => {
    const e = entry('d1', true);
    const answers = deliveriesOf(
      'd1',
      { desired: { demo: e }, report: null },
      reportOf({ demo: said(e.requestId, 'applied') }),
    ).deliveries;

    const gone = standIn(['not-found']);
    const first = new AnswerDelivery({ client: gone.client, sleep: noSleep });
    await first.deliver(answers);
    expect(first.stats()).toEqual({ delivered: 0, gone: 1, failed: 0 });
    expect(gone.calls).toHaveLength(1);

    const flaky = standIn(['unavailable', 'ok']);
    const second = new AnswerDelivery({ client: flaky.client, sleep: noSleep });
    await second.deliver(answers);
    expect(second.stats()).toEqual({ delivered: 1, gone: 0, failed: 0 });
    expect(flaky.calls).toHaveLength(2);

    const down = standIn(['unavailable', 'unavailable', 'unavailable']);
    const lines: string[] = [];
    const third = new AnswerDelivery({ client: down.client, sleep: noSleep, log: (l) => lines.push(l) });
    await third.deliver(answers);
    expect(third.stats()).toEqual({ delivered: 0, gone: 0, failed: 1 });
    expect(down.calls).toHaveLength(3);
    expect(lines.join('\n')).toMatch(/d1: the answer to .* not delivered \(14 UNAVAILABLE/);
  });

  it('at most maxInFlight completions at once', async () => {
    let inFlight = 0;
    let most = 0;
    const client = {
      activity: {
        complete: async () => {
          most = Math.max(most, ++inFlight);
          await new Promise((r) => setTimeout(r, 5));
          inFlight--;
        },
      },
    } as unknown as Client;
    const many = Array.from({ length: 20 }, (_, i) => {
      const e = { ...entry(`d${i}`, true) };
      return deliveriesOf(
        `d${i}`,
        { desired: { demo: e }, report: null },
        reportOf({ demo: said(e.requestId, 'applied') }),
      ).deliveries[0]!;
    });
    const delivery = new AnswerDelivery({ client, maxInFlight: 4 });
    await delivery.deliver(many);
    expect(most).toBe(4);
    expect(delivery.stats().delivered).toBe(20);
  });
});

describe("the agent's receipt on a completion (the gateway's route)", () => {
  const key = keyPairFromSeed(new Uint8Array(32).fill(31));
  const other = keyPairFromSeed(new Uint8Array(32).fill(32));
  /** An awaited request for a signed revision, the agent's `state` answer to it and its receipt signed by `by`. */
  const answered = (state: 'applied' | 'refused', by = key) => {
    const e = { ...entry('d1', true), envelopeDigest: 'c'.repeat(64), phase: 0 };
    const answer = said(e.requestId, state, state === 'refused' ? { reason: 'EXPIRED' } : {});
    const claim = agentReceiptClaim('d1', e, answer)!;
    const receipt = receiptText(signAgentReceipt({ ...claim, counter: 4, prev: RECEIPT_GENESIS, clock: 1 }, by));
    return {
      receipt,
      deliveries: deliveriesOf('d1', { desired: { demo: e }, report: null }, reportOf({ demo: { ...answer, receipt } }))
        .deliveries,
    };
  };
  const keyOf = (device: string) => (device === 'd1' ? key.publicKey : undefined);

  it("rides on the completion when the device's enrolled key signed it for the request, a success's and a refusal's", async () => {
    const { client, calls } = standIn(['ok', 'ok']);
    const delivery = new AnswerDelivery({ client, sleep: noSleep, keyOf });
    const applied = answered('applied');
    await delivery.deliver(applied.deliveries);
    expect(calls[0]!.value).toMatchObject({ device: 'd1', outcome: 'applied', receipt: applied.receipt, request: '1' });
    const refused = answered('refused');
    await delivery.deliver(refused.deliveries);
    expect((calls[1]!.value as ApplicationFailure).details?.[0]).toEqual({
      reason: 'EXPIRED',
      receipt: refused.receipt,
      // The request it answers: the gateway completes the apply, so it says which (the nonce is derived from it).
      request: '1',
    });
  });

  it("during an identity key rotation's overlap a receipt by either key rides on it; after the retire only the new key's", async () => {
    // The gateway's keysOf (gateway/identity-rotation.ts): the proven new key first, the old one until the retire.
    for (const by of [key, other]) {
      const { client, calls } = standIn(['ok']);
      const delivery = new AnswerDelivery({ client, sleep: noSleep, keyOf: () => [other.publicKey, key.publicKey] });
      const applied = answered('applied', by);
      await delivery.deliver(applied.deliveries);
      expect(calls[0]!.value).toMatchObject({ outcome: 'applied', receipt: applied.receipt });
    }
    const { client, calls } = standIn(['ok']);
    const retired = new AnswerDelivery({ client, sleep: noSleep, keyOf: () => [other.publicKey] });
    await retired.deliver(answered('applied', key).deliveries);
    expect(calls[0]!.value).toMatchObject({ receiptProblem: 'signature: not made by the enrolled key' });
  });

  it('not signed by the enrolled key, or no key known for the device: not passed on, the problem said', async () => {
    const { client, calls } = standIn(['ok', 'ok']);
    const lines: string[] = [];
    const delivery = new AnswerDelivery({ client, sleep: noSleep, keyOf, log: (l) => lines.push(l) });
    await delivery.deliver(answered('applied', other).deliveries);
    expect(calls[0]!.value).toEqual({
      device: 'd1',
      outcome: 'applied',
      steps: ['verify', 'apply', 'verify', 'marker'],
      receiptProblem: 'signature: not made by the enrolled key',
    });
    expect(lines).toEqual([
      'd1: the receipt of its answer to demo r2 is not passed on: signature: not made by the enrolled key',
    ]);
    const unkeyed = new AnswerDelivery({ client, sleep: noSleep });
    await unkeyed.deliver(answered('refused').deliveries);
    expect((calls[1]!.value as ApplicationFailure).details?.[0]).toEqual({
      reason: 'EXPIRED',
      receiptProblem: 'key: no agent key enrolled for d1 to check it with',
    });
  });
});
