import { writeKeyFile } from '../support/key-file';
import { cpSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { readReceiptsBundle, writeReceiptsBundle } from '../../audit/bundle';
import { agentKeyPin } from '../../core/agent-auth';
import { parseAuditLog, sealRecord, GENESIS_HASH, type AuditRecord } from '../../core/audit';
import { checkpointBody, cosign, parseCheckpoint, signCheckpoint, signedNote } from '../../core/checkpoint';
import { toBase64 } from '../../core/bytes';
import {
  parseReceipt,
  receiptBody,
  receiptHash,
  receiptText,
  signAgentReceipt,
  sshsigFromArmor,
  type Receipt,
  type ReceiptFields,
} from '../../core/receipt';
import { envelopeDigestOf } from '../../core/twin';
import { keyPairFromSeed, parseSecretKeyFile, pinOf, type KeyPair } from '../../core/signing';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { startDevServerEnv } from '../../workers/dev-server';
import { AgentBackend } from '../conformance/backends/agent';
import { OpenSshBackend } from '../conformance/backends/ssh';
import type { SuiteContext } from '../conformance/backend';
import { PROFILE, REVISIONS } from '../conformance/suite';
import { runCli, spawnCliUntil, stopChild } from '../support/cli';
import { scratchDir } from '../support/harness';
import { writeSignedProfile } from '../support/signed-profile';
import { execFileSync } from 'node:child_process';

/**
 * Every green cell provable (issue 44), end to end: a rollout with `requireReceipts` over two real OpenSSH sshd
 * devices (each signing with its own enrolled receipt key through the shipped signer) and two real agents (their
 * identity keys) behind a real gateway, on a worker that checkpoints its trail at each transition and has the real
 * witness cosign. The rollout is exported (`wavegate audit export`) and verified by a separate process that has no
 * Temporal to reach (`wavegate audit verify --receipts`), and by examples/verify-receipt.mjs, which uses nothing of
 * wavegate. Then the same bundle, one corpus case at a time, is refused, the verifier naming the device and the check.
 */

const scratch = scratchDir('receipts-audit');
const root = join(scratch.dir, 'profiles');
const auditDir = join(scratch.dir, 'audit');
const LOG_NAME = 'receipts-e2e.worker';
const logPair = keyPairFromSeed(new Uint8Array(32).fill(61));
const witnessPair = keyPairFromSeed(new Uint8Array(32).fill(62));
const SSH = ['ssh-1', 'ssh-2'];
const AGENTS = ['agent-1', 'agent-2'];
const ALL = [...SSH, ...AGENTS];
const NO_CONFIG = {
  TEMPORAL_ADDRESS: '',
  TEMPORAL_PROFILE: '',
  TEMPORAL_CONFIG_FILE: join(scratch.dir, 'none.toml'),
  WAVEGATE_PROFILES: '',
  WAVEGATE_AUDIT_DIR: '',
  WAVEGATE_AUDIT_KEY_FILE: '',
};

const keyFile = (name: string, pair: KeyPair) => writeKeyFile(join(scratch.dir, name), pair);

let env: TestWorkflowEnvironment;
let witness: Awaited<ReturnType<typeof spawnCliUntil>> | undefined;
let worker: Awaited<ReturnType<typeof spawnCliUntil>> | undefined;
const ssh = new OpenSshBackend();
const agents = new AgentBackend();
let ctx: SuiteContext;
let rolloutId = '';
let inventory = '';
const bundleDir = join(scratch.dir, 'bundle');
const logPin = join(scratch.dir, 'log.pub.yaml');

beforeAll(async () => {
  writeSignedProfile({ root, name: PROFILE, revisions: REVISIONS });
  env = await startDevServerEnv();
  writeFileSync(logPin, stringify(pinOf(logPair, LOG_NAME)));
  witness = await spawnCliUntil(
    [
      'witness',
      '--key',
      keyFile('witness.key', witnessPair),
      '--state-dir',
      join(scratch.dir, 'witness-state'),
      '--log',
      `${LOG_NAME}=${agentKeyPin(logPair.publicKey)}`,
      '--listen',
      '127.0.0.1:0',
    ],
    /witness listening on http:\/\/127\.0\.0\.1:\d+/,
    60_000,
  );
  const witnessUrl = /witness listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(witness.output())![1]!;
  const taskQueue = `receipts-audit-${process.pid}`;
  const temporalArgs = () => [
    '--address',
    env.address,
    '--namespace',
    env.namespace ?? 'default',
    '--task-queue',
    taskQueue,
  ];
  const workerArgs = [
    'worker',
    ...temporalArgs(),
    '--profiles',
    root,
    '--audit-dir',
    auditDir,
    '--checkpoint-key',
    keyFile('checkpoint.key', logPair),
    '--checkpoint-name',
    LOG_NAME,
    '--witness',
    witnessUrl,
    '--witness-key',
    agentKeyPin(witnessPair.publicKey),
  ];
  worker = await spawnCliUntil(workerArgs, /worker \S+ polling/, 180_000);
  const devicePins = join(scratch.dir, 'device-pins');
  mkdirSync(join(devicePins, PROFILE), { recursive: true });
  cpSync(join(root, PROFILE, 'trust.yaml'), join(devicePins, PROFILE, 'trust.yaml'));
  ctx = {
    scratch: scratch.dir,
    address: env.address,
    namespace: env.namespace ?? 'default',
    taskQueue,
    client: env.client,
    profilesRoot: root,
    profile: PROFILE,
    devicePins,
    worker: {
      kill: async () => {},
      restart: async () => {},
      output: () => worker?.output() ?? '',
    },
    temporalArgs,
  };
  await ssh.start(ctx, SSH);
  await agents.start(ctx, AGENTS);
  // Every device holds r1 (the fact its verify reads, and its marker).
  for (const [backend, ids] of [
    [ssh, SSH],
    [agents, AGENTS],
  ] as const)
    for (const id of ids) {
      const home = backend.home(id);
      mkdirSync(join(home, 'etc'), { recursive: true });
      writeFileSync(join(home, 'etc/conf'), 'conf r1\n');
      mkdirSync(join(home, `.wavegate/profiles/${PROFILE}`), { recursive: true });
      writeFileSync(join(home, `.wavegate/profiles/${PROFILE}/revision`), '1\n');
    }
  inventory = join(scratch.dir, 'fleet.yaml');
  writeFileSync(
    inventory,
    stringify({
      pools: { conf: { disruptionBudget: 1 } },
      devices: [...SSH.map((id) => ssh.inventoryEntry(id)), ...AGENTS.map((id) => agents.inventoryEntry(id))].map(
        (d) => ({ ...d, pool: 'conf', class: 'edge' }),
      ),
    }),
  );
  const spec = join(scratch.dir, 'spec.yaml');
  writeFileSync(
    spec,
    stringify({
      rollout: {
        profile: PROFILE,
        fromRevision: 1,
        toRevision: 2,
        phases: [
          { canary: '1 device', gate: '1s' },
          { bulk: 'remainder', gate: '1s' },
        ],
        applyTimeout: '3m',
        requireReceipts: true,
      },
    }),
  );
  const run = await runCli(
    ['start', '-f', spec, '--inventory', inventory, '--profiles', root, '--wait', ...temporalArgs()],
    {
      env: NO_CONFIG,
      timeoutMs: 300_000,
    },
  );
  expect(run.code, `${run.stdout}\n${run.stderr}`).toBe(0);
  rolloutId = /rollout (\S+) started/.exec(run.stdout)![1]!;
}, 600_000);

afterAll(async () => {
  await agents.stop().catch(() => {});
  await ssh.stop().catch(() => {});
  if (worker) await stopChild(worker.child);
  if (witness) await stopChild(witness.child);
  await env?.teardown();
  scratch.cleanup();
}, 120_000);

/** `wavegate audit verify --receipts` in a process of its own, pointed at no Temporal at all. */
function verify(dir: string, ...more: string[]) {
  return runCli(['audit', 'verify', '--receipts', dir, '--json', ...more], {
    env: { ...NO_CONFIG, TEMPORAL_ADDRESS: '127.0.0.1:1' },
    timeoutMs: 120_000,
  });
}

/** The signing key a device's receipts verify under, read where the device keeps it (for the corpus's forgeries). */
function sshKeyFile(id: string): string {
  return join(scratch.dir, 'receipt-keys', id, 'key');
}
function agentKey(id: string): KeyPair {
  return parseSecretKeyFile(
    JSON.parse(readFileSync(join(scratch.dir, 'agents', 'state', id, 'identity.key'), 'utf8')),
    id,
  );
}
/** A receipt with these fields, signed by `signer`'s device key as that device would (an SSH key by ssh-keygen -Y sign). */
function signAs(signer: string, fields: ReceiptFields): string {
  if (AGENTS.includes(signer)) {
    const { keyKind: _k, keyId: _i, ...rest } = fields;
    return receiptText(signAgentReceipt(rest, agentKey(signer)));
  }
  const keyId = execFileSync('ssh-keygen', ['-l', '-f', `${sshKeyFile(signer)}.pub`])
    .toString()
    .split(' ')[1]!;
  const body = receiptBody({ ...fields, keyKind: 'ssh', keyId });
  const msg = join(scratch.dir, `msg-${Math.random().toString(36).slice(2)}`);
  writeFileSync(msg, body);
  execFileSync('ssh-keygen', ['-q', '-Y', 'sign', '-f', sshKeyFile(signer), '-n', 'wavegate-receipt', msg]);
  const sig = toBase64(sshsigFromArmor(readFileSync(`${msg}.sig`, 'utf8'))!);
  return receiptText({ body, sig });
}

type Entry = { id: string; state: string; receipt?: string; request?: string; phaseIndex?: number };
/** The bundle's records, changed by `change`, sealed again from the first (as someone holding the store would). */
function tampered(name: string, change: (records: AuditRecord[]) => void, more?: (dir: string) => void): string {
  const dir = join(scratch.dir, 'corpus', name);
  rmSync(dir, { recursive: true, force: true });
  const bundle = readReceiptsBundle(bundleDir);
  const records = bundle.segments.flatMap((s) => parseAuditLog(s.text).records);
  change(records);
  let prev = GENESIS_HASH;
  const sealed = records.map((r, i) => {
    const { hash: _h, prev: _p, mac: _m, ...event } = r as AuditRecord & { mac?: string };
    const next = sealRecord({ ...event, seq: i + 1 }, prev);
    prev = next.hash;
    return next;
  });
  writeReceiptsBundle(dir, {
    rollout: bundle.rollout,
    segments: [{ name: 'trail', text: sealed.map((r) => `${JSON.stringify(r)}\n`).join('') }],
    enrolment: bundle.enrolment,
    revisions: readdirRevisions(),
    trust: [{ profile: PROFILE, text: readFileSync(join(bundleDir, 'trust', `${PROFILE}.yaml`), 'utf8') }],
    checkpoints: bundle.checkpoints,
    ...(bundle.logKey ? { logKey: bundle.logKey } : {}),
    ...(bundle.witnessKey ? { witnessKey: bundle.witnessKey } : {}),
    receipts: 0,
    devices: 0,
  } as Parameters<typeof writeReceiptsBundle>[1]);
  more?.(dir);
  return dir;
}
function readdirRevisions() {
  const names = execFileSync('ls', [join(bundleDir, 'revisions', PROFILE)])
    .toString()
    .split('\n')
    .filter(Boolean);
  return names.map((n) => ({
    profile: PROFILE,
    revision: Number(n.replace(/\.json$/, '')),
    text: readFileSync(join(bundleDir, 'revisions', PROFILE, n), 'utf8'),
  }));
}
const outcomes = (records: AuditRecord[]) =>
  records.filter((r) => r.event === 'devices.outcome' && (r.evidence as { mode?: string }).mode === 'apply');
const entriesOf = (r: AuditRecord) => (r.evidence as { devices: Entry[] }).devices;
function entryOf(records: AuditRecord[], id: string): { record: AuditRecord; entry: Entry; receipt: Receipt } {
  for (const record of outcomes(records))
    for (const entry of entriesOf(record))
      if (entry.id === id && entry.receipt) {
        const parsed = parseReceipt(entry.receipt);
        if (parsed.ok) return { record, entry, receipt: parsed.receipt };
      }
  throw new Error(`no receipt of ${id}`);
}

describe('a rollout every device proves, exported and verified by anyone', () => {
  it('every device is applied and proven; the export verifies offline with nothing refused', async () => {
    const status = await runCli(['status', rolloutId, '--json', ...ctx.temporalArgs()], { env: NO_CONFIG });
    const s = JSON.parse(status.stdout) as { devices: Array<{ id: string; state: string; proven?: boolean }> };
    for (const id of ALL)
      expect(
        s.devices.find((d) => d.id === id),
        id,
      ).toMatchObject({ state: 'applied', proven: true });
    const exported = await runCli(
      [
        'audit',
        'export',
        rolloutId,
        '--bundle',
        bundleDir,
        '--inventory',
        inventory,
        '--profiles',
        root,
        '--audit-dir',
        auditDir,
        '--log-key',
        logPin,
        '--witness-key',
        agentKeyPin(witnessPair.publicKey),
      ],
      { env: NO_CONFIG },
    );
    expect(exported.code, `${exported.stdout}\n${exported.stderr}`).toBe(0);
    const run = await verify(bundleDir);
    expect(run.code, `${run.stdout}\n${run.stderr}`).toBe(0);
    const verdict = JSON.parse(run.stdout) as {
      findings: unknown[];
      proven: number;
      receipts: number;
      checkpoints: number;
    };
    expect(verdict.findings).toEqual([]);
    expect(verdict.proven).toBe(ALL.length);
    expect(verdict.receipts).toBe(ALL.length);
    // A checkpoint at each transition, each cosigned by the witness.
    expect(verdict.checkpoints).toBeGreaterThanOrEqual(4);
  });

  it("fails closed on the bundle with its checkpoints stripped; pinned keys must be the bundle's", async () => {
    type Verdict = { findings: Array<{ check: string; message: string }>; keys: Record<string, unknown> };
    const stripped = join(scratch.dir, 'bundle-stripped');
    cpSync(bundleDir, stripped, { recursive: true });
    writeFileSync(join(stripped, 'checkpoints.jsonl'), '');
    const closed = await verify(stripped);
    expect(closed.code).toBe(1);
    expect((JSON.parse(closed.stdout) as Verdict).findings).toEqual([
      { check: 'checkpoint', message: expect.stringMatching(/holds no checkpoint.*--no-checkpoints-expected/) },
    ]);
    // The auditor's own copies of the keys the worker and the witness run with: the real bundle holds up.
    const witnessPin = agentKeyPin(witnessPair.publicKey);
    const pinned = await verify(bundleDir, '--log-key', logPin, '--witness-key', witnessPin);
    expect(pinned.code, pinned.stdout).toBe(0);
    expect((JSON.parse(pinned.stdout) as Verdict).keys).toEqual({
      log: { keyId: logPair.kid, from: 'pinned' },
      witness: { keyId: witnessPair.kid, from: 'pinned' },
    });
    // Another log key pinned: refused, naming it.
    const other = agentKeyPin(keyPairFromSeed(new Uint8Array(32).fill(9)).publicKey);
    const wrong = await verify(bundleDir, '--log-key', other, '--witness-key', witnessPin);
    expect(wrong.code).toBe(1);
    expect((JSON.parse(wrong.stdout) as Verdict).findings).toContainEqual({
      check: 'pinned-key',
      message: expect.stringMatching(/^keys\/log\.pub: the log's key .* is not the pinned --log-key/),
    });
  });

  it('examples/verify-receipt.mjs checks an agent receipt and an SSH one with nothing of wavegate', () => {
    const script = join(PROJECT_ROOT, 'examples', 'verify-receipt.mjs');
    const agentOut = execFileSync('node', [script, bundleDir, 'agent-1'], { encoding: 'utf8' });
    expect(agentOut).toMatch(/agent-1: (GOOD|good|OK)/i);
    const out = join(scratch.dir, 'ssh-check');
    mkdirSync(out, { recursive: true });
    execFileSync('node', [script, bundleDir, 'ssh-1', out], { encoding: 'utf8' });
    const good = execFileSync(
      'ssh-keygen',
      [
        '-Y',
        'verify',
        '-f',
        join(out, 'allowed_signers'),
        '-I',
        'ssh-1',
        '-n',
        'wavegate-receipt',
        '-s',
        join(out, 'receipt.sig'),
      ],
      { input: readFileSync(join(out, 'receipt.txt')), encoding: 'utf8' },
    );
    expect(good).toMatch(/Good "wavegate-receipt" signature for ssh-1/);
  });

  /** Each corpus case applied to the real bundle: refused, the finding naming the device and the check. */
  const CORPUS: Array<[string, string | undefined, string, () => string]> = [];
  const corpus = (name: string, device: string | undefined, check: string, make: () => string) =>
    CORPUS.push([name, device, check, make]);

  corpus('forged signature', 'ssh-1', 'signature', () =>
    tampered('forged', (records) => {
      const { entry } = entryOf(records, 'ssh-1');
      entry.receipt = entry.receipt!.replace(/sig (.)/, (_m, c: string) => `sig ${c === 'A' ? 'B' : 'A'}`);
    }),
  );
  corpus('another device key', 'ssh-1', 'key', () =>
    tampered('other-key', (records) => {
      const { entry, receipt } = entryOf(records, 'ssh-1');
      entry.receipt = signAs('ssh-2', receipt.fields);
    }),
  );
  corpus('a receipt of another rollout', 'agent-1', 'rollout', () =>
    tampered('other-rollout', (records) => {
      const { entry, receipt } = entryOf(records, 'agent-1');
      entry.receipt = signAs('agent-1', { ...receipt.fields, rollout: 'rollout:conf:20200101-000000' });
    }),
  );
  corpus('wrong observed digest', 'agent-2', 'observed', () =>
    tampered('observed', (records) => {
      const { entry, receipt } = entryOf(records, 'agent-2');
      entry.receipt = signAs('agent-2', { ...receipt.fields, observed: 'e'.repeat(64) });
    }),
  );
  corpus('replayed nonce', 'agent-1', 'nonce', () =>
    tampered('replayed', (records) => {
      // agent-1's receipt again, as the answer to a later request of the same device.
      const { entry } = entryOf(records, 'agent-1');
      const last = outcomes(records).at(-1)!;
      entriesOf(last).push({ ...entry, request: `${entry.request}9` });
    }),
  );
  corpus('reused counter', 'ssh-2', 'counter', () =>
    tampered('reused', (records) => {
      const { entry, receipt } = entryOf(records, 'ssh-2');
      const again = signAs('ssh-2', { ...receipt.fields, prev: receiptHash(receipt), clock: receipt.fields.clock + 1 });
      entriesOf(outcomes(records).at(-1)!).push({ ...entry, receipt: again });
    }),
  );
  corpus('a dropped receipt (counter gap)', 'ssh-2', 'counter', () =>
    tampered('dropped', (records) => {
      const { entry, receipt } = entryOf(records, 'ssh-2');
      const third = signAs('ssh-2', {
        ...receipt.fields,
        counter: receipt.fields.counter + 2,
        prev: receiptHash(receipt),
        clock: receipt.fields.clock + 1,
      });
      entriesOf(outcomes(records).at(-1)!).push({ ...entry, receipt: third });
    }),
  );
  corpus('reordered chain', 'agent-2', 'chain', () =>
    tampered('reordered', (records) => {
      const { entry, receipt } = entryOf(records, 'agent-2');
      // A second receipt that names a previous receipt other than the one before it.
      const next = signAs('agent-2', {
        ...receipt.fields,
        counter: receipt.fields.counter + 1,
        prev: 'f'.repeat(64),
        clock: receipt.fields.clock + 1,
      });
      entriesOf(outcomes(records).at(-1)!).push({ ...entry, receipt: next });
    }),
  );
  corpus('a below-floor claim', 'agent-1', 'floor', () =>
    tampered('below-floor', (records) => {
      const { entry, receipt } = entryOf(records, 'agent-1');
      const r1 = readdirRevisions().find((r) => r.revision === 1)!;
      const digest1 = envelopeDigestOf(JSON.parse(r1.text));
      const below = signAs('agent-1', {
        ...receipt.fields,
        counter: receipt.fields.counter + 1,
        prev: receiptHash(receipt),
        revision: 1,
        requested: digest1,
        observed: digest1,
        clock: receipt.fields.clock + 1,
      });
      entriesOf(outcomes(records).at(-1)!).push({ ...entry, receipt: below });
    }),
  );
  corpus('a revoked enrolment', 'agent-2', 'revoked', () =>
    tampered(
      'revoked',
      () => {},
      (dir) => {
        const path = join(dir, 'enrolment.json');
        const enrolment = JSON.parse(readFileSync(path, 'utf8')) as {
          devices: Array<{ id: string; revoked?: object }>;
        };
        enrolment.devices.find((d) => d.id === 'agent-2')!.revoked = {
          at: '2020-01-01T00:00:00.000Z',
          reason: 'stolen',
        };
        writeFileSync(path, `${JSON.stringify(enrolment, null, 2)}\n`);
      },
    ),
  );
  corpus('an uncosigned checkpoint', undefined, 'checkpoint', () =>
    tampered(
      'uncosigned',
      () => {},
      (dir) => {
        const path = join(dir, 'checkpoints.jsonl');
        const notes = readFileSync(path, 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l) as string);
        const last = notes.at(-1)!;
        // The log's signature line alone: the witness's is dropped.
        notes[notes.length - 1] = last
          .split('\n')
          .filter((line) => !line.startsWith('— ') || line.includes(LOG_NAME))
          .join('\n');
        writeFileSync(path, notes.map((n) => `${JSON.stringify(n)}\n`).join(''));
      },
    ),
  );
  corpus('a forked trail (two checkpoints of one size)', undefined, 'fork', () =>
    tampered(
      'forked',
      () => {},
      (dir) => {
        const path = join(dir, 'checkpoints.jsonl');
        const notes = readFileSync(path, 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l) as string);
        const parsed = parseCheckpoint(notes.at(-1)!);
        if (!parsed.ok) throw new Error('checkpoint');
        const { origin, size } = parsed.note.checkpoint;
        // The same size with another root, signed by the log and cosigned by the witness (both keys held here).
        const body = checkpointBody({ origin, size, root: new Uint8Array(32).fill(7) });
        const fork = signedNote(body, [
          signCheckpoint(body, logPair, LOG_NAME),
          cosign(body, witnessPair, 'witness', Math.floor(Date.now() / 1000)),
        ]);
        notes.push(fork);
        writeFileSync(path, notes.map((n) => `${JSON.stringify(n)}\n`).join(''));
      },
    ),
  );

  it('has at least 12 corpus cases', () => {
    expect(CORPUS.length).toBeGreaterThanOrEqual(12);
  });

  for (const [name, device, check] of CORPUS.map(([n, d, c]) => [n, d, c] as const))
    it(`refuses ${name}, naming ${device ?? 'the trail'} and the ${check} check`, async () => {
      const make = CORPUS.find(([n]) => n === name)![3];
      const run = await verify(make());
      expect(run.code, `${run.stdout}\n${run.stderr}`).toBe(1);
      const verdict = JSON.parse(run.stdout) as {
        findings: Array<{ device?: string; check: string; message: string }>;
      };
      expect(
        verdict.findings.some((f) => f.check === check && (device === undefined || f.device === device)),
        `${name}: ${JSON.stringify(verdict.findings, null, 1)}`,
      ).toBe(true);
    });
});
