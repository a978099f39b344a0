import { randomBytes } from 'node:crypto';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { isDrift, reverifyEntry, type EntryContext } from '../../agent/apply-entry';
import type { AgentTrust } from '../../agent/pins';
import { localDeviceSession } from '../../device/transport/local';
import type { Revision } from '../../core/revision';
import { keyPairFromSeed, parseTrust, pinOf, signRevision } from '../../core/signing';
import { envelopeDigestOf, type DesiredEntry, type ProfileReport } from '../../core/twin';
import { scratchDir } from '../support/harness';

/**
 * Re-verify recovers (issue 21 item 3): the agent's reverifyEntry over the real local device session
 * (the one `wavegate agent` runs its commands with), with envelopes signed by a key the agent pins. A
 * re-verify that fails is drift; once the fact is back, the next re-verify of that drift reports the
 * revision in place again, `applied`, or `claimed` when the revision's own steps cannot prove it.
 */
const scratch = scratchDir('agent-reverify');
afterAll(() => scratch.cleanup());
const signer = keyPairFromSeed(randomBytes(32));
const pinned = parseTrust({ threshold: 1, pins: [pinOf(signer)] }, 'test trust');
const trust: AgentTrust = { of: () => pinned, describe: () => 'test pins' };

function setup(name: string, apply: string) {
  const home = join(scratch.dir, name);
  mkdirSync(home, { recursive: true });
  const fact = join(home, 'fact');
  const revision: Revision = {
    profile: 'rv',
    revision: 2,
    apply,
    verify: `grep -qx 'rev 2' "$HOME/fact"`,
    payload: [],
    risk: 'risky',
  } as Revision;
  const envelope = signRevision(revision, signer, { now: Date.now() });
  const entry: DesiredEntry = {
    requestId: 'rollout:rv:run-1:7',
    profile: 'rv',
    revision: 2,
    steps: { profile: 'rv', revision: 2, apply: '(signed)', verify: '(signed)', payload: [], envelope },
    envelopeDigest: envelopeDigestOf(envelope),
    holder: { rollout: 'rollout:rv', run: 'run-1', activity: '7', attempt: 1 },
    rollout: 'rollout:rv',
    fromRevision: 1,
    setAt: new Date().toISOString(),
  };
  const ctx: EntryContext = {
    deviceId: name,
    stateDir: join(home, 'state'),
    trust,
    connect: async () => localDeviceSession(name, home),
    download: async () => Buffer.alloc(0),
    commandTimeoutMs: 10_000,
    log: () => {},
  };
  const markAt = async (n: number) => {
    const s = localDeviceSession(name, home);
    try {
      await s.writeMarker('rv', n, { timeoutMs: 10_000 });
    } finally {
      s.close();
    }
  };
  return { fact, entry, ctx, markAt };
}

const applied = (state: ProfileReport['state']): ProfileReport => ({
  revision: 2,
  state,
  requestId: 'rollout:rv:run-1:7',
  steps: ['verify', 'apply', 'verify', 'marker'],
  at: new Date().toISOString(),
});

describe('reverifyEntry: a drift recovers once the fact is back', () => {
  it('applied -> drift (failed VERIFY) -> fact restored -> applied again, with no reason left over', async () => {
    const { fact, entry, ctx, markAt } = setup('provable', `cp "$HOME/src" "$HOME/fact"`);
    writeFileSync(fact, 'rev 2\n');
    await markAt(2);
    rmSync(fact);
    const drift = await reverifyEntry(ctx, entry, applied('applied'));
    expect(drift).toMatchObject({
      state: 'failed',
      reason: 'VERIFY',
      revision: 2,
      steps: ['reverify'],
      requestId: entry.requestId,
    });
    expect(drift.detail).toMatch(/^re-verify of r2 exited 2: grep: .*fact: No such file/);
    expect(isDrift(drift)).toBe(true);
    // Still drifted: asked again, it stays drift.
    expect(await reverifyEntry(ctx, entry, drift)).toMatchObject({ state: 'failed', reason: 'VERIFY' });
    writeFileSync(fact, 'rev 2\n');
    const back = await reverifyEntry(ctx, entry, drift);
    expect(back).toEqual({
      revision: 2,
      state: 'applied',
      requestId: entry.requestId,
      steps: ['reverify'],
      at: expect.any(String),
    });
  });

  it('a revision whose apply proves nothing (core/provability.ts) recovers as claimed, never applied', async () => {
    const { fact, entry, ctx, markAt } = setup('claimed', 'true');
    await markAt(2);
    const drift = await reverifyEntry(ctx, entry, applied('claimed'));
    expect(drift).toMatchObject({ state: 'failed', reason: 'VERIFY' });
    writeFileSync(fact, 'rev 2\n');
    expect(await reverifyEntry(ctx, entry, drift)).toMatchObject({
      state: 'claimed',
      revision: 2,
      steps: ['reverify'],
    });
  });

  it('the fact back but the marker moved: still drift, naming the marker', async () => {
    const { fact, entry, ctx, markAt } = setup('moved', `cp "$HOME/src" "$HOME/fact"`);
    await markAt(2);
    const drift = await reverifyEntry(ctx, entry, applied('applied'));
    await markAt(1);
    writeFileSync(fact, 'rev 2\n');
    const still = await reverifyEntry(ctx, entry, drift);
    expect(still).toMatchObject({
      state: 'failed',
      reason: 'VERIFY',
      revision: 1,
      detail: "re-verify of r2 passed, but the device's marker is r1",
    });
  });

  it("only a re-verify's drift is one: an apply whose own verify failed is not re-verified into place", () => {
    expect(isDrift({ revision: 1, state: 'failed', reason: 'VERIFY', steps: ['reverify'], at: '' })).toBe(true);
    expect(
      isDrift({ revision: 1, state: 'failed', reason: 'VERIFY', steps: ['verify', 'apply', 'verify'], at: '' }),
    ).toBe(false);
    expect(isDrift({ revision: 1, state: 'refused', reason: 'VERIFY', steps: ['reverify'], at: '' })).toBe(false);
    expect(isDrift({ revision: 1, state: 'failed', reason: 'CONFLICT', at: '' })).toBe(false);
  });
});
