import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, it } from 'vitest';
import type { GatewayClient } from '../../agent/gateway-client';
import { parseTrustFlags } from '../../agent/pins';
import { RECEIPTS_FILE, readReceiptChain } from '../../agent/receipts';
import { startAgent } from '../../agent/run';
import { agentReceiptClaim, receiptReason } from '../../core/agent-receipt';
import {
  parseReceipt,
  RECEIPT_GENESIS,
  receiptHash,
  receiptNonce,
  receiptSignatureValid,
  type Receipt,
} from '../../core/receipt';
import type { Revision } from '../../core/revision';
import { keyPairFromSeed, pinOf, secretKeyFile, signRevision } from '../../core/signing';
import {
  envelopeDigestOf,
  requestIdOf,
  type AgentReport,
  type DesiredEntry,
  type ProfileReport,
  type TwinView,
} from '../../core/twin';
import { scratchDir } from '../support/harness';
import { runCli } from '../support/cli';
import { refusal } from '../support/refusal';
import { until } from '../support/until';

/**
 * The agent's receipts (agent/receipts.ts): a real agent loop (startAgent) over a real local device session, with a
 * gateway that is only the test's (it hands out desired entries and records every report the agent sends, reading
 * receipts.json as each one arrives). Each final answer to a signed request carries a receipt signed with the
 * device's identity key; its counter is on disk before the answer leaves; a restart re-sends the same receipt; a
 * corrupt or rolled-back receipts.json is refused at start.
 */
const scratch = scratchDir('agent-receipts');
afterAll(() => scratch.cleanup());
let n = 0;
const fresh = (name: string) => {
  const dir = join(scratch.dir, `${++n}-${name}`);
  mkdirSync(dir, { recursive: true });
  return dir;
};

const signer = keyPairFromSeed(randomBytes(32));
const DEVICE = 'dev-r1';

/** A device: its identity key, state directory, home and pins (web signed by `signer`). */
function device(name: string) {
  const root = fresh(name);
  const pins = join(root, 'pins');
  mkdirSync(join(pins, 'web'), { recursive: true });
  writeFileSync(join(pins, 'web', 'trust.yaml'), JSON.stringify({ threshold: 1, pins: [pinOf(signer)] }));
  const stateDir = join(root, 'state');
  const home = join(root, 'home');
  mkdirSync(stateDir, { mode: 0o700 });
  mkdirSync(home);
  return { stateDir, home, trust: parseTrustFlags([pins]), key: keyPairFromSeed(randomBytes(32)) };
}
type Device = ReturnType<typeof device>;

let requests = 0;
/** A desired entry of web r`revision` (signed unless `unsigned`), as the twin carries it. */
function entry(revision: number, over: Partial<DesiredEntry> & { unsigned?: boolean } = {}): DesiredEntry {
  const { unsigned, ...fields } = over;
  const content = {
    profile: 'web',
    revision,
    apply: `echo r${revision} >> "$HOME/ran"`,
    verify: `grep -qx r${revision} "$HOME/ran"`,
    payload: [],
    risk: 'risky',
  } as Revision;
  const envelope = unsigned ? undefined : signRevision(content, signer, { now: Date.now() });
  const holder = { rollout: 'rollout:web:20261207-101500', run: `run-${++requests}`, activity: '4', attempt: 1 };
  return {
    requestId: requestIdOf(holder),
    profile: 'web',
    revision,
    steps: {
      profile: 'web',
      revision,
      apply: '(signed)',
      verify: '(signed)',
      payload: [],
      ...(envelope ? { envelope } : {}),
    },
    envelopeDigest: envelopeDigestOf(envelope),
    holder,
    rollout: holder.rollout,
    fromRevision: null,
    phase: 1,
    setAt: new Date().toISOString(),
    ...fields,
  };
}

/**
 * The test's gateway: syncs answer the desired entries (a sync that knows them waits 100 ms); every report the agent
 * sends is kept, and for each receipt in it the counter receipts.json holds at that moment.
 */
function gateway(d: Device) {
  let desired: Record<string, DesiredEntry> = {};
  let version = 0;
  const reports: AgentReport[] = [];
  const onDisk: Array<{ sent: number; stored: number }> = [];
  const seen = (report: AgentReport | null) => {
    if (!report) return;
    reports.push(structuredClone(report));
    for (const answer of Object.values(report.profiles)) {
      const parsed = answer.receipt ? parseReceipt(answer.receipt) : undefined;
      if (parsed?.ok)
        onDisk.push({ sent: parsed.receipt.fields.counter, stored: readReceiptChain(d.stateDir).counter });
    }
  };
  const view = (): TwinView => ({
    deviceId: DEVICE,
    version,
    desired,
    report: null,
    lastSeenAt: null,
    reverify: false,
  });
  const client = {
    async sync(input: { report: AgentReport | null; knownVersion: number }, signal?: AbortSignal) {
      seen(input.report);
      if (input.knownVersion >= version) await sleep(100, undefined, { signal }).catch(() => {});
      return view();
    },
    async report(report: AgentReport) {
      seen(report);
      return view();
    },
    async payload(): Promise<Buffer> {
      throw new Error('no payloads in this test');
    },
  } as unknown as GatewayClient;
  return {
    client,
    reports,
    onDisk,
    desire(e: DesiredEntry) {
      desired = { ...desired, [e.profile]: e };
      version += 1;
    },
    /** The last report's answer to `e`, once it is final. */
    answer: (e: DesiredEntry) =>
      until(`the answer to ${e.requestId}`, async () => {
        const a = reports.at(-1)?.profiles[e.profile];
        return a && a.requestId === e.requestId && !['applying', 'idle'].includes(a.state) ? a : undefined;
      }),
  };
}

function run(d: Device, gw: ReturnType<typeof gateway>) {
  return startAgent({
    deviceId: DEVICE,
    gateway: gw.client,
    trust: d.trust,
    stateDir: d.stateDir,
    home: d.home,
    version: 'test',
    key: d.key,
    waitMs: 0,
  });
}

const receiptOf = (answer: ProfileReport): Receipt => {
  const parsed = parseReceipt(answer.receipt);
  if (!parsed.ok) throw new Error(`no receipt: ${parsed.problem}`);
  return parsed.receipt;
};
const runs = (d: Device) =>
  existsSync(join(d.home, 'ran')) ? readFileSync(join(d.home, 'ran'), 'utf8').split('\n').filter(Boolean) : [];

describe('what an agent claims in its receipt (core/agent-receipt.ts)', () => {
  it("a refusal code or a failed step as the receipt's reason: upper case, bounded, long ones kept apart", () => {
    expect(receiptReason('BELOW_FLOOR')).toBe('BELOW_FLOOR');
    expect(receiptReason('verify')).toBe('VERIFY');
    expect(receiptReason('payload digest check')).toBe('PAYLOAD_DIGEST_CHECK');
    expect(receiptReason(undefined)).toBe('UNSPECIFIED');
    expect(receiptReason(' ..')).toBe('UNSPECIFIED');
    const a = receiptReason('SOME_VERY_LONG_REFUSAL_CODE_ONE');
    const b = receiptReason('SOME_VERY_LONG_REFUSAL_CODE_TWO');
    expect(a).toMatch(/^SOME_VERY_LONG_-[0-9a-f]{8}$/);
    expect(a).not.toBe(b);
  });

  it('the request as the twin carried it, and what the answer says; none for an unsigned request or an answer in progress', () => {
    const e = entry(2);
    const at = new Date().toISOString();
    const nonce = receiptNonce({ ...e.holder, device: DEVICE });
    expect(agentReceiptClaim(DEVICE, e, { revision: 2, state: 'applied', requestId: e.requestId, at })).toEqual({
      device: DEVICE,
      rollout: e.holder.rollout,
      phase: 1,
      nonce,
      profile: 'web',
      revision: 2,
      requested: e.envelopeDigest,
      observed: e.envelopeDigest,
      result: 'applied',
      reason: null,
    });
    expect(
      agentReceiptClaim(DEVICE, { ...e, phase: undefined }, { revision: 1, state: 'failed', reason: 'verify', at }),
    ).toMatchObject({ phase: null, observed: null, result: 'failed', reason: 'VERIFY' });
    expect(agentReceiptClaim(DEVICE, entry(2, { unsigned: true }), { revision: 1, state: 'refused', at })).toBeNull();
    expect(agentReceiptClaim(DEVICE, e, { revision: 1, state: 'applying', at })).toBeNull();
  });
});

describe('the agent signs its answers (agent/receipts.ts)', () => {
  it('every final answer carries its receipt, signed with the identity key, the counter on disk before it left; a restart re-sends the same receipt; a refusal before anything ran gets one; an unsigned request none', async () => {
    const d = device('answers');
    const gw = gateway(d);
    const first = entry(2);
    gw.desire(first);
    const agent = run(d, gw);
    const applied = await gw.answer(first);
    const r1 = receiptOf(applied);
    expect(receiptSignatureValid(r1, d.key.publicKey)).toBe(true);
    expect(r1.fields).toMatchObject({
      device: DEVICE,
      keyKind: 'agent',
      keyId: d.key.kid,
      rollout: first.holder.rollout,
      phase: 1,
      nonce: receiptNonce({ ...first.holder, device: DEVICE }),
      counter: 1,
      profile: 'web',
      revision: 2,
      requested: first.envelopeDigest,
      observed: first.envelopeDigest,
      // This tiny revision's verify proves nothing core/provability.ts counts: the answer is claimed.
      result: 'claimed',
      reason: null,
      prev: RECEIPT_GENESIS,
    });
    expect(readReceiptChain(d.stateDir)).toEqual({ counter: 1, last: receiptHash(r1) });
    agent.stop();
    await agent.done;

    // A restart: the answer kept in report.json goes out again with the very same receipt; nothing runs, nothing is signed.
    const sentBefore = gw.reports.length;
    const again = run(d, gw);
    await until('a report after the restart', async () => (gw.reports.length > sentBefore + 2 ? true : undefined));
    for (const report of gw.reports.slice(sentBefore)) expect(report.profiles.web?.receipt).toBe(applied.receipt);
    expect(readReceiptChain(d.stateDir).counter).toBe(1);
    expect(runs(d)).toEqual(['r2']);

    // A refusal made before anything runs (the envelope is not the one the twin names): the device's decision, signed.
    const wrong = entry(3, { envelopeDigest: 'ab'.repeat(32) });
    gw.desire(wrong);
    const refused = await gw.answer(wrong);
    expect(refused).toMatchObject({ state: 'refused', reason: 'DIGEST' });
    const r2 = receiptOf(refused);
    expect(receiptSignatureValid(r2, d.key.publicKey)).toBe(true);
    expect(r2.fields).toMatchObject({
      counter: 2,
      prev: receiptHash(r1),
      requested: 'ab'.repeat(32),
      observed: null,
      result: 'refused',
      reason: 'DIGEST',
    });

    // An unsigned request has nothing a receipt could name: refused, with none, and no counter taken.
    const unsigned = entry(4, { unsigned: true });
    gw.desire(unsigned);
    const plain = await gw.answer(unsigned);
    expect(plain).toMatchObject({ state: 'refused', reason: 'UNSIGNED' });
    expect(plain.receipt).toBeUndefined();
    again.stop();
    await again.done;
    expect(readReceiptChain(d.stateDir)).toEqual({ counter: 2, last: receiptHash(r2) });
    expect(runs(d)).toEqual(['r2']);
    // Every receipt the gateway was sent was on disk first.
    expect(gw.onDisk.length).toBeGreaterThan(3);
    for (const seen of gw.onDisk) expect(seen.stored).toBeGreaterThanOrEqual(seen.sent);
  }, 60_000);

  it('a corrupt receipts.json is refused at start, naming the file, and left as it was (never reset)', () => {
    const d = device('corrupt');
    const gw = gateway(d);
    const path = join(d.stateDir, RECEIPTS_FILE);
    for (const [text, why] of [
      ['{"counter": 3', 'not JSON'],
      ['[]', 'not a JSON object'],
      ['{"counter": 3}', 'must hold exactly "counter" and "last" (holds counter)'],
      [`{"counter": -1, "last": "${'a'.repeat(64)}"}`, 'counter: must be an integer >= 0'],
      [`{"counter": 2, "last": "${RECEIPT_GENESIS}"}`, 'counter and last disagree'],
      [`{"counter": 2, "last": "XYZ"}`, 'last: must be 64 lowercase hex characters'],
      [`${' '.repeat(2000)}{}`, '2002 bytes, at most 1024'],
    ] as const) {
      writeFileSync(path, text);
      const err = refusal(() => run(d, gw));
      expect(err.code).toBe('INVALID_INPUT');
      expect(err.message).toContain(`--state-dir ${d.stateDir}: ${path}: `);
      expect(err.message).toContain(why);
      expect(err.message).toContain('refusing to start');
      expect(readFileSync(path, 'utf8')).toBe(text);
    }
    expect(gw.reports).toEqual([]);
  });

  it('a receipts.json older than the receipts the device has sent (restored from an old copy, or removed) is refused', async () => {
    const d = device('rolled-back');
    const gw = gateway(d);
    const e = entry(2);
    gw.desire(e);
    const agent = run(d, gw);
    const answer = await gw.answer(e);
    agent.stop();
    await agent.done;
    expect(receiptOf(answer).fields.counter).toBe(1);
    const path = join(d.stateDir, RECEIPTS_FILE);
    const kept = readFileSync(path, 'utf8');
    writeFileSync(path, JSON.stringify({ counter: 0, last: RECEIPT_GENESIS }));
    expect(refusal(() => run(d, gw)).message).toContain(
      `${path} says counter 0, but this device has sent receipt 1 (report.json)`,
    );
    rmSync(path);
    expect(refusal(() => run(d, gw)).message).toContain(`${path} says counter 0, but this device has sent receipt 1`);
    writeFileSync(path, kept);
    const restarted = run(d, gw);
    restarted.stop();
    await restarted.done;
  }, 60_000);

  it('`wavegate agent` with a corrupt receipts.json exits 2 naming the file, before it syncs', async () => {
    const d = device('cli');
    const keyFile = join(d.stateDir, 'identity.key');
    writeFileSync(keyFile, JSON.stringify(secretKeyFile(d.key)), { mode: 0o600 });
    const path = join(d.stateDir, RECEIPTS_FILE);
    writeFileSync(path, 'garbage');
    const pins = join(d.stateDir, '..', 'pins');
    const cli = await runCli([
      'agent',
      '--device-id',
      DEVICE,
      '--gateway',
      'http://127.0.0.1:9',
      '--trust',
      pins,
      '--state-dir',
      d.stateDir,
      '--key',
      keyFile,
      '--home',
      d.home,
    ]);
    expect(cli.code, cli.stderr).toBe(2);
    expect(cli.stderr).toContain(
      `wavegate: INVALID_INPUT: --state-dir ${d.stateDir}: ${path}: not a receipt chain state`,
    );
    expect(cli.stderr).not.toContain('syncing with the gateway');
  }, 60_000);
});
