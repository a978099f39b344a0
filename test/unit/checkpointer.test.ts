import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { appendFileSync, chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { auditActivitiesOf } from '../../audit';
import { createCheckpointer, type CheckpointerOptions } from '../../audit/checkpointer';
import { createFileAuditStore } from '../../audit/file';
import { auditCheckpointsPath } from '../../audit/file-names';
import type { AuditStore } from '../../audit/types';
import { requestCosignature } from '../../audit/witness-client';
import { startWitness, type WitnessServer } from '../../cli/witness/server';
import { AUDIT_EVENTS, parseAuditLog, type AuditEvent, type AuditEventName } from '../../core/audit';
import { checkpointOrigin, parseCheckpoint, signCheckpoint } from '../../core/checkpoint';
import { consistencyProof, treeRoot } from '../../core/merkle';
import { keyPairFromSeed } from '../../core/signing';
import { checkTrailCheckpoints, type PinnedKey } from '../../core/trail-checkpoints';
import { recordLeafHash, TrailTree } from '../../core/trail-tree';
import { scratchDir } from '../support/harness';

/**
 * The checkpointer (audit/checkpointer.ts) inside the appendAudit activity over the file store, against the
 * witness's own server (cli/witness/server.ts, in this process; the real `wavegate witness` process and a real
 * rollout: test/e2e/checkpoints.test.ts): a checkpoint at each transition and none at devices.outcome, each one
 * the root of the trail as stored, cosigned and consistent with the one before; a retried append adds none; a
 * witness down, refusing, hanging or signing with another key leaves the checkpoint uncosigned, said in the log,
 * within the time bound; a witness that cosigned a checkpoint whose answer was lost is asked again from there.
 */

const scratch = scratchDir('checkpointer');
afterAll(() => scratch.cleanup());

const logPair = keyPairFromSeed(new Uint8Array(32).fill(21));
const witnessPair = keyPairFromSeed(new Uint8Array(32).fill(22));
const WITNESS_KEY: PinnedKey = { publicKey: witnessPair.publicKey };
const LOG_KEY: PinnedKey = { publicKey: logPair.publicKey };
const ID = 'rollout:web:20260102-030405';

let n = 0;
let dir: string;
let store: AuditStore;
let witness: WitnessServer | undefined;
let logs: string[];
let seq: number;

beforeEach(() => {
  dir = join(scratch.dir, `t${++n}`);
  store = createFileAuditStore({ auditDir: join(dir, 'audit') });
  logs = [];
  seq = 0;
});
const servers: Server[] = [];
afterEach(async () => {
  await witness?.close();
  witness = undefined;
  for (const server of servers.splice(0)) {
    server.closeAllConnections();
    server.close();
  }
});

async function runWitness(): Promise<string> {
  const stateDir = join(dir, 'witness');
  mkdirSync(stateDir, { recursive: true, mode: 0o700 });
  witness = await startWitness({
    pair: witnessPair,
    name: 'witness.test/w1',
    logs: [{ name: 'cp.test', publicKey: logPair.publicKey, kind: 'log' }],
    stateDir,
    listen: { host: '127.0.0.1', port: 0 },
    log: () => {},
  });
  return witness.url;
}

function activities(url: string | undefined, extra: Partial<CheckpointerOptions> = {}) {
  const checkpointer = createCheckpointer(store, {
    pair: logPair,
    name: 'cp.test',
    ...(url ? { witness: { url, key: WITNESS_KEY } } : {}),
    log: (line) => logs.push(line),
    ...extra,
  });
  return auditActivitiesOf(store, checkpointer);
}

const event = (name: AuditEventName, at = ++seq): AuditEvent => ({
  seq: at,
  at: new Date(Date.UTC(2026, 0, 2, 3, 4, at)).toISOString(),
  rolloutId: ID,
  runId: 'run-1',
  event: name,
  phase: 'canary',
  by: 'wavegate',
  reason: null,
  counts: null,
  evidence: { at },
});

/** The trail's tree as stored, and its checkpoints parsed. */
async function stored() {
  const records = (await store.segments(ID)).flatMap((s) => parseAuditLog(s.text).records);
  const notes = await store.checkpoints(ID);
  return { records, notes, tree: TrailTree.of(records) };
}

const sizesOf = (notes: string[]) =>
  notes.map((note) => {
    const parsed = parseCheckpoint(note);
    if (!parsed.ok) throw new Error(parsed.message);
    return parsed.note.checkpoint.size;
  });

describe('TrailTree (core/trail-tree.ts)', () => {
  it('has the roots and consistency proofs of core/merkle.ts for every size and pair up to 40, extended leaf by leaf', () => {
    const records = Array.from({ length: 40 }, (_, i) => ({ hash: i.toString(16).padStart(64, '0') }));
    const leaves = records.map(recordLeafHash);
    const tree = new TrailTree();
    for (let size = 0; size <= 40; size++) {
      tree.extend(records.slice(0, size));
      expect(Buffer.from(tree.root(size))).toEqual(Buffer.from(treeRoot(leaves, size)));
      for (let old = 0; old <= size; old++)
        expect(tree.consistencyProof(old, size).map((h) => Buffer.from(h))).toEqual(
          consistencyProof(leaves, old, size).map((h) => Buffer.from(h)),
        );
    }
    expect(tree.extendedBy(records)).toBe(true);
    expect(tree.extendedBy([...records.slice(0, 39), { hash: 'f'.repeat(64) }])).toBe(false);
  });
});

describe('the checkpointer in appendAudit', () => {
  it("checkpoints each transition, cosigned and consistent, and not devices.outcome, devices.skipped nor a watch's healthy checks", async () => {
    const audit = activities(await runWitness());
    const names: AuditEventName[] = [
      'rollout.started',
      'phase.started',
      'devices.outcome',
      'devices.outcome',
      'devices.skipped',
      'phase.applied',
      'gate.passed',
      'devices.outcome',
      // A watch after promotion: its start and end are transitions, its healthy checks (one a minute) are not.
      'watch.started',
      'watch.passed',
      'watch.inconclusive',
      'watch.passed',
      'watch.completed',
      'rollout.completed',
    ];
    for (const name of names) await audit.appendAudit(event(name));
    const { notes, tree } = await stored();
    expect(sizesOf(notes)).toEqual([1, 2, 6, 7, 9, 13, 14]);
    const verdict = checkTrailCheckpoints(ID, notes, tree, { log: LOG_KEY, witness: WITNESS_KEY });
    expect(verdict.checkpoints.map((c) => c.problems)).toEqual([[], [], [], [], [], [], []]);
    expect(verdict).toMatchObject({ ok: true, logChecked: true, witnessChecked: true });
    for (const note of notes) expect(note.startsWith(`${checkpointOrigin(ID)}\n`)).toBe(true);
    expect(logs.filter((l) => l.includes('cosigned by the witness'))).toHaveLength(7);
    expect(logs.join('\n')).not.toContain('UNCOSIGNED');
  });

  it('a retried append of a transition adds no second checkpoint, even after later records', async () => {
    const audit = activities(await runWitness());
    const started = event('rollout.started');
    await audit.appendAudit(started);
    await audit.appendAudit(started);
    await audit.appendAudit(event('devices.outcome'));
    await audit.appendAudit(started);
    expect(sizesOf((await stored()).notes)).toEqual([1]);
  });

  it('with the witness down, each checkpoint is kept uncosigned and said; the next transition with it back is cosigned from the empty tree', async () => {
    const down = await runWitness();
    await witness!.close();
    witness = undefined;
    const audit = activities(down);
    await audit.appendAudit(event('rollout.started'));
    await audit.appendAudit(event('phase.started'));
    const first = await stored();
    expect(sizesOf(first.notes)).toEqual([1, 2]);
    const verdict = checkTrailCheckpoints(ID, first.notes, first.tree, { witness: WITNESS_KEY });
    expect(verdict.ok).toBe(false);
    expect(verdict.checkpoints.map((c) => [c.size, c.cosigned])).toEqual([
      [1, false],
      [2, false],
    ]);
    expect(
      logs.filter((l) => l.startsWith(`WARNING: checkpoint: ${ID} size`) && l.includes('UNCOSIGNED')),
    ).toHaveLength(2);
    expect(logs.join('\n')).toMatch(/answered UNAVAILABLE/);
    // The witness is back (with no state): the next transition is cosigned, its proof from the empty tree.
    await startAgainOn(down);
    await audit.appendAudit(event('phase.applied'));
    const later = await stored();
    expect(sizesOf(later.notes)).toEqual([1, 2, 3]);
    expect(checkTrailCheckpoints(ID, later.notes, later.tree, { witness: WITNESS_KEY }).checkpoints[2]).toMatchObject({
      size: 3,
      cosigned: true,
      problems: [],
    });
  });

  it('a witness that hangs costs at most the time bound: kept uncosigned', async () => {
    const hanging = await listen(createServer(() => {}));
    const audit = activities(hanging, { witnessTimeoutMs: 800 });
    const started = Date.now();
    await audit.appendAudit(event('rollout.started'));
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(sizesOf((await stored()).notes)).toEqual([1]);
    expect(logs.at(-1)).toMatch(
      /UNCOSIGNED: the witness answered UNAVAILABLE: witness http:\/\/127\.0\.0\.1:\d+: no cosignature .* within 800 ms/,
    );
  });

  it('a cosignature under another key than the pinned one is not kept', async () => {
    const audit = createCheckpointer(store, {
      pair: logPair,
      name: 'cp.test',
      witness: { url: await runWitness(), key: { publicKey: keyPairFromSeed(new Uint8Array(32).fill(23)).publicKey } },
      log: (line) => logs.push(line),
    });
    await auditActivitiesOf(store, audit).appendAudit(event('rollout.started'));
    const { notes } = await stored();
    expect(notes[0]!.split('\n').filter((l) => l.startsWith('—'))).toHaveLength(1);
    expect(logs.at(-1)).toContain('none a cosignature under the pinned witness key');
  });

  it("after a lost answer (the witness cosigned, the checkpoint was kept without it), the next proof starts from the witness's size", async () => {
    const url = await runWitness();
    // The witness's answer to size 2 is lost on the way back: it holds size 2, the trail keeps it uncosigned.
    let lose = false;
    const cosign: typeof requestCosignature = async (...args) => {
      const answer = await requestCosignature(...args);
      return lose ? { ok: false, code: 'UNAVAILABLE', message: 'the answer was lost' } : answer;
    };
    const audit = activities(url, { cosign });
    await audit.appendAudit(event('rollout.started'));
    lose = true;
    await audit.appendAudit(event('phase.started'));
    lose = false;
    await audit.appendAudit(event('devices.outcome'));
    await audit.appendAudit(event('phase.applied'));
    const { notes, tree } = await stored();
    expect(sizesOf(notes)).toEqual([1, 2, 4]);
    const cosigned = checkTrailCheckpoints(ID, notes, tree, { witness: WITNESS_KEY }).checkpoints.map(
      (c) => c.cosigned,
    );
    expect(cosigned).toEqual([true, false, true]);
  });

  it('checkpoints the trail as stored: after a record of an earlier segment is edited behind its back, the next root is over the edited trail and the witness refuses the fork', async () => {
    const audit = activities(await runWitness());
    await audit.appendAudit(event('rollout.started'));
    await audit.appendAudit(event('phase.started'));
    // An earlier trail rewritten and resealed wholesale (no MAC key): the store's chain is whole again.
    const path = join(dir, 'audit', 'rollout%3Aweb%3A20260102-030405.jsonl');
    const forged = createFileAuditStore({ auditDir: join(dir, 'forged') });
    const first = { ...event('rollout.started', 1), by: 'mallory' };
    await forged.append(first);
    await forged.append(event('phase.started', 2));
    writeFileSync(path, readFileSync(join(dir, 'forged', 'rollout%3Aweb%3A20260102-030405.jsonl')));
    await audit.appendAudit(event('phase.applied', 3));
    const { notes, tree } = await stored();
    expect(sizesOf(notes)).toEqual([1, 2, 3]);
    const verdict = checkTrailCheckpoints(ID, notes, tree, { witness: WITNESS_KEY });
    expect(verdict.checkpoints.map((c) => c.cosigned)).toEqual([true, true, false]);
    expect(verdict.checkpoints[0]!.problems).toEqual([
      "its root is not the root of the trail's first 1 records: the trail was rewritten",
    ]);
    expect(logs.at(-1)).toMatch(/UNCOSIGNED: .*CONFLICT/);
  });

  it("a checkpoint the store cannot write fails the append's activity; its retry writes it, the record once", async () => {
    let fail = true;
    const flaky: AuditStore = {
      ...store,
      appendCheckpoint: async (id, note) => {
        if (fail) throw new Error('disk full');
        return store.appendCheckpoint(id, note);
      },
    };
    const audit = auditActivitiesOf(
      flaky,
      createCheckpointer(flaky, { pair: logPair, name: 'cp.test', log: (line) => logs.push(line) }),
    );
    const started = event('rollout.started');
    await expect(audit.appendAudit(started)).rejects.toThrow('disk full');
    fail = false;
    expect(await audit.appendAudit(started)).toMatchObject({ seq: 1 });
    const { records, notes } = await stored();
    expect(records).toHaveLength(1);
    expect(sizesOf(notes)).toEqual([1]);
  });

  it('a worker without a checkpointer makes none (the default)', async () => {
    const audit = auditActivitiesOf(store);
    await audit.appendAudit(event('rollout.started'));
    expect(await store.checkpoints(ID)).toEqual([]);
  });
});

describe('the file store keeps checkpoints beside the trail', () => {
  const note = (size: number, records: ReturnType<typeof TrailTree.of>) => {
    const body = `${checkpointOrigin(ID)}\n${size}\n${Buffer.from(records.root(size)).toString('base64')}\n`;
    return `${body}\n${signLine(body)}`;
  };
  const signLine = (body: string) => signCheckpoint(body, logPair, 'cp.test');

  it('appends JSON lines {note} to <trail>.checkpoints, once per size, sizes only growing; refuses another origin and a trail it does not hold', async () => {
    for (const name of AUDIT_EVENTS.slice(0, 4)) await store.append(event(name));
    const tree = (await stored()).tree;
    await store.appendCheckpoint(ID, note(2, tree));
    await store.appendCheckpoint(ID, note(2, tree));
    await store.appendCheckpoint(ID, note(1, tree));
    await store.appendCheckpoint(ID, note(4, tree));
    expect(await store.checkpoints(ID)).toEqual([note(2, tree), note(4, tree)]);
    const path = auditCheckpointsPath(join(dir, 'audit'), ID);
    expect(readFileSync(path, 'utf8')).toBe(
      `${JSON.stringify({ note: note(2, tree) })}\n${JSON.stringify({ note: note(4, tree) })}\n`,
    );
    await expect(store.appendCheckpoint('rollout:other:20260102-030405', note(4, tree))).rejects.toMatchObject({
      code: 'NOT_FOUND',
    });
    await store.append({ ...event('rollout.started', 1), rolloutId: 'rollout:other:20260102-030405' });
    await expect(store.appendCheckpoint('rollout:other:20260102-030405', note(4, tree))).rejects.toMatchObject({
      code: 'INVALID_INPUT',
      message: expect.stringContaining("is not this trail's (wavegate/rollout:other:20260102-030405)"),
    });
    await expect(store.appendCheckpoint(ID, 'not a note')).rejects.toMatchObject({ code: 'INVALID_INPUT' });
  });

  it('leaves out a torn last line (and cuts it before the next append); a damaged line is INVALID_STATE naming the file and line', async () => {
    for (const name of AUDIT_EVENTS.slice(0, 3)) await store.append(event(name));
    const tree = (await stored()).tree;
    await store.appendCheckpoint(ID, note(1, tree));
    const path = auditCheckpointsPath(join(dir, 'audit'), ID);
    appendFileSync(path, '{"note":"wavegate/rollo');
    expect(await store.checkpoints(ID)).toEqual([note(1, tree)]);
    await store.appendCheckpoint(ID, note(3, tree));
    expect(await store.checkpoints(ID)).toEqual([note(1, tree), note(3, tree)]);
    writeFileSync(path, `${readFileSync(path, 'utf8')}{"nope":1}\n`);
    await expect(store.checkpoints(ID)).rejects.toMatchObject({
      code: 'INVALID_STATE',
      message: `${path} line 3: not a checkpoint line {"note": "<signed note>"}`,
    });
    chmodSync(path, 0o600);
  });

  it("a re-used id's next run moves the chain's checkpoints aside with it", async () => {
    await store.append(event('rollout.started'));
    await store.appendCheckpoint(ID, note(1, (await stored()).tree));
    await store.append({ ...event('rollout.started', 1), runId: 'run-2' });
    expect(await store.checkpoints(ID)).toEqual([]);
    expect(readFileSync(auditCheckpointsPath(join(dir, 'audit'), ID, 'run-1'), 'utf8')).toContain('"note"');
  });
});

async function listen(server: Server): Promise<string> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  servers.push(server);
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** The witness again, on the port it had (its state directory empty: it never cosigned). */
async function startAgainOn(url: string): Promise<void> {
  const stateDir = join(dir, 'witness-2');
  mkdirSync(stateDir, { recursive: true, mode: 0o700 });
  witness = await startWitness({
    pair: witnessPair,
    name: 'witness.test/w1',
    logs: [{ name: 'cp.test', publicKey: logPair.publicKey, kind: 'log' }],
    stateDir,
    listen: { host: '127.0.0.1', port: Number(new URL(url).port) },
    log: () => {},
  });
}
