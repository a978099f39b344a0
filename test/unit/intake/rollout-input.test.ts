import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseInventory } from '../../../core/inventory';
import { parseRolloutSpec } from '../../../core/spec';
import { canarySpec } from '../../../intake/canary-spec';
import { openEnvelope } from '../../../intake/envelope';
import { loadProfile } from '../../../intake/profile';
import { fileRevision } from '../../../intake/revisions';
import { assembleRolloutInput, poolBudgetsOf } from '../../../intake/rollout-input';
import { loadProfileTrust } from '../../../intake/trust';
import { PROJECT_ROOT } from '../../../intake/package-layout';
import { refusal } from '../../support/refusal';

const PROFILES = join(PROJECT_ROOT, 'profiles');
const inventory = parseInventory(
  {
    pools: { web: { disruptionBudget: '20%' } },
    defaults: { user: 'wavegate', host: '127.0.0.1' },
    devices: [
      { id: 'a', pool: 'web', port: 2201 },
      { id: 'b', pool: 'web', port: 2202 },
      { id: 'c', pool: 'office', port: 2203, class: 'desktop' },
    ],
  },
  'fleet.yaml',
);

describe('intake: assembleRolloutInput from objects', () => {
  const { profile, layout } = loadProfile(PROFILES, 'demo');
  const trust = loadProfileTrust(layout);
  const target = fileRevision(layout, trust, 2, 'toRevision');
  const from = fileRevision(layout, trust, 1, 'fromRevision');
  const spec = parseRolloutSpec(
    {
      rollout: {
        profile: 'demo',
        fromRevision: 1,
        toRevision: 2,
        phases: [{ canary: '1 device' }, { bulk: 'remainder' }],
        disruptionBudget: { office: 0.5 },
      },
    },
    'spec',
  );

  it('reads no file: the steps carry the verified envelopes and payload paths, the budgets are resolved once', () => {
    const input = assembleRolloutInput({
      spec,
      specSource: 'spec',
      inventory,
      inventoryPath: 'fleet.yaml',
      profile,
      layout,
      target,
      from,
      startedBy: 'me',
    });
    expect(input.rolloutId).toBe('rollout:demo');
    expect(input.poolBudgets).toEqual({ web: 0.2, office: 0.5 });
    expect(input.poolBudgets).toEqual(poolBudgetsOf(spec, inventory));
    expect(input.inventoryPath).toBe(join(process.cwd(), 'fleet.yaml'));
    expect(input.steps.revision).toBe(2);
    expect(input.steps.envelope).toEqual(JSON.parse(readFileSync(layout.envelopeFile(2), 'utf8')));
    expect(input.steps.payload[0]!.source).toBe(join(layout.payloadDir, 'motd-r2'));
    expect(input.rollbackSteps.revision).toBe(1);
    expect(input.risk).toBe(target.revision.risk);
  });

  it("refuses revisions that are not the spec's, and a spec naming a pool the inventory lacks", () => {
    const swapped = refusal(() =>
      assembleRolloutInput({
        spec,
        specSource: 'spec',
        inventory,
        inventoryPath: 'fleet.yaml',
        profile,
        layout,
        target: from,
        from: target,
        startedBy: 'me',
      }),
    );
    expect(swapped.code).toBe('INVALID_INPUT');
    const badPool = parseRolloutSpec(
      {
        rollout: {
          profile: 'demo',
          fromRevision: 1,
          toRevision: 2,
          phases: [{ bulk: 'remainder' }],
          disruptionBudget: { lab: 0.5 },
        },
      },
      'spec',
    );
    const err = refusal(() =>
      assembleRolloutInput({
        spec: badPool,
        specSource: 'spec',
        inventory,
        inventoryPath: 'fleet.yaml',
        profile,
        layout,
        target,
        from,
        startedBy: 'me',
      }),
    );
    expect(err.message).toContain('rollout.disruptionBudget.lab');
  });

  it('opens an envelope only for the revision expected', () => {
    const envelope = JSON.parse(readFileSync(layout.envelopeFile(2), 'utf8'));
    expect(openEnvelope(envelope, trust!, { profile: 'demo', revision: 2, source: 'e' }).revision.revision).toBe(2);
    const wrong = refusal(() => openEnvelope(envelope, trust!, { profile: 'demo', revision: 3, source: 'e' }));
    expect(wrong.message).toBe('e: the envelope holds demo r2, expected demo r3');
    const missing = refusal(() => fileRevision(layout, trust, 9, 'spec: rollout.toRevision'));
    expect(missing.message).toContain('spec: rollout.toRevision: profile "demo" has pins');
  });

  it("fills a canary spec with the profile and the night's revisions; its default gate selects what the target revision signs", () => {
    const { spec: canary, specSource } = canarySpec({
      profile,
      fromRevision: 1,
      toRevision: 2,
      health: target.revision.health,
    });
    expect(specSource).toBe('nightly canary of demo');
    expect(canary.profile).toBe('demo');
    expect(canary.phases).toHaveLength(1);
    expect(canary.phases[0]!.healthGate).toEqual(['all-runtimes-healthy', 'error-rate < 0.01', 'devices-online']);
    // nothing signed to run on devices: only the worker's own check
    expect(canarySpec({ profile, fromRevision: 1, toRevision: 2 }).spec.phases[0]!.healthGate).toEqual([
      'devices-online',
    ]);
  });
});
