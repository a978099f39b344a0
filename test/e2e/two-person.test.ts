import { randomBytes } from 'node:crypto';
import { chmodSync, cpSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { WorkflowFailedError } from '@temporalio/client';
import { stringify } from 'yaml';
import { describe, expect, it } from 'vitest';
import { readAuditFile, resolveAuditLocation } from '../../audit/file';
import { startBoard, type BoardServer } from '../../cli/board/server';
import { startStatement } from '../../cli/operator-statement';
import { approveSignal } from '../../contracts/rollout';
import { keyPairFromSeed, pinOf, secretKeyFile, type KeyPair } from '../../core/signing';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { demoDevices } from '../../sim';
import { recordHistory } from '../support/histories';
import { realRollouts } from '../support/real-rollouts';
import { rejection } from '../support/refusal';
import { markerOf, waitForStatus } from '../support/rollout-helpers';

/**
 * The two-person rule (issue 46 item 4) on a real Temporal dev server, a real worker whose profiles root pins
 * the approvers (approvers.yaml beside demo's trust.yaml), simulated devices over SSH, the real CLI and a
 * board in this process. A rollout started by alice (her signed statement) under `approval: { required: 2,
 * notBy: starter }` waits at its canary's manual gate: alice's own approval (her key, `wavegate approve --key`)
 * is refused, bob's counts once (his second is refused), a stranger's unpinned key is refused, an operator's
 * board approval is refused (not an approver), a viewer's token is refused any control on the board's API,
 * and dave's approval through the board (its key vouching for him) is the second: the phase goes on and the
 * rollout completes. Each refusal is in the audit trail with why; the approvals with who. A start without an
 * authenticated starter starts nothing: the CLI exits 2, a workflow started anyway fails before any device.
 */
const key = (): KeyPair => keyPairFromSeed(new Uint8Array(randomBytes(32)));
const alice = key();
const bob = key();
const stranger = key();
const boardKey = key();
const PROFILES = 'profiles-two-person';
const TOKENS = {
  vera: `vera-${randomBytes(16).toString('hex')}`,
  olga: `olga-${randomBytes(16).toString('hex')}`,
  dave: `dave-${randomBytes(16).toString('hex')}`,
};

const real = realRollouts('two-person', {
  profilesRoot: () => join(real.dir, PROFILES),
  prepare: () => {
    const demo = join(real.dir, PROFILES, 'demo');
    cpSync(join(PROJECT_ROOT, 'profiles', 'demo'), demo, { recursive: true });
    const keys = [
      { ...pinOf(alice, 'alice'), role: 'approver' },
      { ...pinOf(bob, 'bob'), role: 'approver' },
      { ...pinOf(boardKey, 'board-1'), role: 'board' },
    ];
    writeFileSync(join(demo, 'approvers.yaml'), stringify({ keys }));
    mkdirSync(join(real.dir, 'keys'), { recursive: true });
    for (const [name, pair] of Object.entries({ alice, bob, stranger })) {
      writeFileSync(keyFile(name), JSON.stringify(secretKeyFile(pair)), { mode: 0o600 });
      chmodSync(keyFile(name), 0o600);
    }
  },
});
const keyFile = (name: string) => join(real.dir, 'keys', `${name}.key`);
const RULE = {
  approval: { required: 2, notBy: 'starter' },
  phases: [
    { canary: '1 device', gate: 'manual' },
    { bulk: 'remainder', gate: 0 },
  ],
};

/** A board in this process on the test's server: vera a viewer, olga an operator, dave an approver; its key signs. */
async function boardOf(): Promise<BoardServer> {
  return startBoard({
    sources: {
      client: real.env.client,
      audit: { where: resolveAuditLocation({ auditDir: real.auditDir }, { env: {} }) },
      transports: new Map(),
      taskQueue: real.worker.taskQueue,
      profilesRoot: join(real.dir, PROFILES),
      approvalKey: boardKey,
    },
    listen: { host: '127.0.0.1', port: 0 },
    tokens: [
      { name: 'vera', token: TOKENS.vera, role: 'viewer' },
      { name: 'olga', token: TOKENS.olga, role: 'operator' },
      { name: 'dave', token: TOKENS.dave, role: 'approver' },
    ],
    log: () => {},
  });
}

/** A control as the board's page sends it, by a token's session. */
async function boardControl(
  board: BoardServer,
  token: string,
  id: string,
  control: string,
): Promise<{ status: number; body: { code?: string; message?: string } }> {
  const login = await fetch(`${board.url}/api/login`, {
    method: 'POST',
    headers: { origin: board.url, 'content-type': 'application/json' },
    body: JSON.stringify({ token }),
  });
  expect(login.status).toBe(200);
  const cookie = login.headers.get('set-cookie')!.split(';')[0]!;
  const { csrf } = (await login.json()) as { csrf: string };
  const res = await fetch(`${board.url}/api/rollouts/${encodeURIComponent(id)}/${control}`, {
    method: 'POST',
    headers: { cookie, origin: board.url, 'content-type': 'application/json', 'x-csrf-token': csrf },
    body: JSON.stringify({ reason: `${control} from the board` }),
  });
  return { status: res.status, body: (await res.json()) as { code?: string; message?: string } };
}

describe('two-person rule: approval: { required: 2, notBy: starter }', () => {
  it("refuses the starter's own approval, the same approver twice, an unpinned key, an operator and a viewer; two distinct approvers let the phase go on", async () => {
    const { fleet, input } = await real.rollout(RULE, demoDevices(3), { 'pool-a': 0.5, 'pool-b': 0.5 });
    const handle = await real.start({ ...input, startStatement: startStatement(alice, input.rolloutId) });
    const board = await boardOf();
    try {
      const waiting = await waitForStatus(handle, (s) => s.phases[0]?.stage === 'awaiting-approval');
      const id = input.rolloutId;
      const approve = (who: string) => real.cli(['approve', id, '--key', keyFile(who), '--reason', `${who} says go`]);

      const own = await approve('alice');
      expect({ code: own.code, err: own.stderr }).toMatchObject({
        code: 2,
        err: expect.stringMatching(/alice started this rollout, and approval.notBy: starter/),
      });
      const first = await approve('bob');
      expect(first.code, first.stderr).toBe(0);
      // The status says how far the phase is: one approval of two, and whose.
      const status = await real.cli(['status', id]);
      expect(status.stdout).toMatch(
        /last control: approve by bob \(bob says go\) accepted: approval 1 of 2 \(key bob\)$/m,
      );
      const again = await approve('bob');
      expect(again.code).toBe(2);
      expect(again.stderr).toMatch(
        /bob already approved phase "canary 1 device" \(1 of 2\); the same person twice counts once/,
      );
      const unpinned = await approve('stranger');
      expect(unpinned.code).toBe(2);
      expect(unpinned.stderr).toMatch(
        /not authenticated: key sha256\/\S+ is not pinned in this profile's approvers.yaml/,
      );

      // The control plane's word is not authority: a signal saying it is dave proves nobody.
      await handle.signal(approveSignal, { by: 'dave', reason: 'trust me' });
      await waitForStatus(handle, (s) => s.controls.some((c) => c.note?.includes('no signed statement')));

      const viewer = await boardControl(board, TOKENS.vera, id, 'pause');
      expect(viewer).toEqual({
        status: 403,
        body: {
          code: 'FORBIDDEN',
          message: 'vera is a viewer on this board: a viewer reads, and sends no control (its role in the token file)',
        },
      });
      const operator = await boardControl(board, TOKENS.olga, id, 'approve');
      expect(operator.status).toBe(409);
      expect(operator.body.message).toMatch(/olga is an operator, not an approver/);

      // Nothing so far moved the phase on: the canary alone holds revision 2.
      const held = await handle.query('status');
      expect((held as typeof waiting).phases[0]?.stage).toBe('awaiting-approval');
      const second = await boardControl(board, TOKENS.dave, id, 'approve');
      expect(second.status, second.body.message).toBe(200);

      const result = await handle.result();
      await recordHistory(handle, 'two-person-approval');
      expect(result.state).toBe('completed');
      for (const d of fleet.devices) expect(markerOf(fleet, d.id)).toBe(2);

      const trail = readAuditFile(real.auditDir, id);
      const said = (event: string) => trail.filter((r) => r.event === event).map((r) => [r.by, r.reason]);
      expect(said('rollout.starter')).toEqual([['alice', null]]);
      expect(said('rollout.approved')).toEqual([
        ['bob', 'bob says go'],
        ['dave', 'approve from the board'],
      ]);
      expect(trail.find((r) => r.event === 'rollout.approved' && r.by === 'dave')?.evidence).toMatchObject({
        approvals: 2,
        required: 2,
        via: 'board board-1',
        approvedBy: ['bob', 'dave'],
      });
      expect(said('rollout.approval-refused')).toEqual([
        ['alice', 'alice started this rollout, and approval.notBy: starter'],
        ['bob', 'bob already approved phase "canary 1 device" (1 of 2); the same person twice counts once'],
        ['unauthenticated', expect.stringMatching(/^not authenticated: key sha256\/\S+ is not pinned/)],
        ['unauthenticated', expect.stringMatching(/^not authenticated: no signed statement came with it/)],
        ['olga', 'olga is an operator, not an approver'],
      ]);
    } finally {
      await board.close();
    }
  });

  it('starts nothing without an authenticated starter: the CLI exits 2, a workflow started anyway fails before any device', async () => {
    const { dir, fleet, input, inventoryPath } = await real.rollout(RULE, demoDevices(2));
    const spec = join(dir, 'spec.yaml');
    writeFileSync(spec, stringify({ rollout: { profile: 'demo', fromRevision: 1, toRevision: 2, ...RULE } }));
    const cli = await real.cli(['start', '-f', spec, '--inventory', inventoryPath]);
    expect(cli.code).toBe(2);
    expect(cli.stderr).toMatch(
      /approval.notBy: starter: the starter must be authenticated: sign the start with --identity-key/,
    );
    // A converge starts a rollout from the same spec: the same rule, before Temporal is asked.
    const converge = await real.cli(['converge', '--profile', 'demo', '-f', spec, '--inventory', inventoryPath]);
    expect({ code: converge.code, err: converge.stderr }).toMatchObject({
      code: 2,
      err: expect.stringMatching(/approval.notBy: starter: the starter must be authenticated/),
    });

    // A statement by a key the worker does not pin proves nobody.
    const handle = await real.start({ ...input, startStatement: startStatement(stranger, input.rolloutId) });
    const failed = await rejection(handle.result(), WorkflowFailedError);
    expect(failed.cause?.message).toMatch(
      /^approval.notBy: starter needs an authenticated starter \(wavegate start --identity-key <key file>\): not authenticated: key sha256\/\S+ is not pinned/,
    );
    // No device was applied to (a fresh simulated device holds no revision marker).
    for (const d of fleet.devices) expect(markerOf(fleet, d.id)).toBeNull();
  });
});
