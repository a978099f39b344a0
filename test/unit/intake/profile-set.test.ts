import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { WavegateError } from '../../../core/errors';
import { parseInventory } from '../../../core/inventory';
import { checkAlsoScopes, loadAlsoContent } from '../../../intake/profile-set';
import { scratchDir } from '../../support/harness';
import { refusal } from '../../support/refusal';
import { writeSignedProfile } from '../../support/signed-profile';

/** The profiles of a spec's `also`, opened with the main profile's own checks, each refusal naming the member's field. */

const scratch = scratchDir('profile-set');
afterAll(() => scratch.cleanup());
const root = scratch.dir;
const rev = (revision: number) => ({
  revision,
  apply: `echo ${revision} > "$HOME/m"`,
  verify: `grep -qx ${revision} "$HOME/m"`,
  payload: { conf: `r${revision}\n` },
});
const pkg = writeSignedProfile({ root, name: 'pkg', revisions: [rev(1), rev(2)] });
const motd = writeSignedProfile({ root, name: 'motd', revisions: [rev(1), rev(2)], scope: { pool: 'a' } });
const main = { profile: 'pkg', fromRevision: 1, toRevision: 2 };
const withAlso = (toRevision: number, profile = 'motd') => ({
  ...main,
  also: [{ profile, fromRevision: 1, toRevision }],
});

function invalid(fn: () => unknown): string {
  const err = refusal(fn, WavegateError);
  expect(err.code).toBe('INVALID_INPUT');
  return err.message;
}

describe('loadAlsoContent', () => {
  it('opens each also profile and its revisions against its own pins', () => {
    const [content] = loadAlsoContent(root, withAlso(2), 'spec.yaml');
    expect(content!.member.profile).toBe('motd');
    expect(content!.target.revision.revision).toBe(2);
    expect(content!.target.envelope).toBeDefined();
    expect(content!.from.revision.revision).toBe(1);
    expect(pkg.name).toBe('pkg');
  });

  it('refuses a profile that does not exist, and a revision with no signed envelope, naming the member field', () => {
    expect(invalid(() => loadAlsoContent(root, withAlso(2, 'nosuch'), 'spec.yaml'))).toMatch(
      /^spec\.yaml: rollout\.also\[0\]\.profile: no profile "nosuch"/,
    );
    expect(invalid(() => loadAlsoContent(root, withAlso(9), 'spec.yaml'))).toMatch(
      /^spec\.yaml: rollout\.also\[0\]\.toRevision: profile "motd" has pins .* but revision 9 has no signed envelope/,
    );
  });

  it('refuses a revision whose signature does not verify against its pins, as it would the main one', () => {
    const envelopeFile = join(motd.dir, 'envelopes', '2.json');
    const good = `${JSON.stringify(motd.envelope(2), null, 2)}\n`;
    try {
      writeFileSync(envelopeFile, `${JSON.stringify(motd.tampered(2), null, 2)}\n`);
      expect(invalid(() => loadAlsoContent(root, withAlso(2), 'spec.yaml'))).toContain(
        `${envelopeFile}: envelope refused (BAD_SIGNATURE)`,
      );
      // Below the threshold of 2: one signature only.
      writeFileSync(envelopeFile, JSON.stringify(motd.sign(motd.revision(2), { signers: [motd.keys[0]!] })));
      expect(invalid(() => loadAlsoContent(root, withAlso(2), 'spec.yaml'))).toContain(
        `${envelopeFile}: envelope refused (BELOW_THRESHOLD)`,
      );
    } finally {
      writeFileSync(envelopeFile, good);
    }
    expect(loadAlsoContent(root, withAlso(2), 'spec.yaml')).toHaveLength(1);
  });

  it('refuses a payload file that is not the one signed, naming the member field', () => {
    const file = join(motd.dir, 'payload', 'motd-r2-conf');
    try {
      writeFileSync(file, 'edited\n');
      expect(invalid(() => loadAlsoContent(root, withAlso(2), 'spec.yaml'))).toMatch(
        /^spec\.yaml: rollout\.also\[0\]\.toRevision: r2 of profile "motd": a payload file .* is not the file that was signed/,
      );
    } finally {
      writeFileSync(file, 'r2\n');
    }
  });
});

describe('checkAlsoScopes', () => {
  const inventory = parseInventory(
    {
      pools: { a: { disruptionBudget: '50%' }, b: { disruptionBudget: '50%' } },
      defaults: { user: 'wavegate', host: '127.0.0.1' },
      devices: [
        { id: 'edge-01', pool: 'a', port: 2201 },
        { id: 'edge-02', pool: 'b', port: 2202 },
      ],
    },
    'fleet.yaml',
  );

  it('refuses an also profile whose scope leaves out a device of the main scope', () => {
    const also = loadAlsoContent(root, withAlso(2), 'spec.yaml');
    expect(() => checkAlsoScopes(withAlso(2), inventory, ['edge-01'], also, 'spec.yaml')).not.toThrow();
    expect(invalid(() => checkAlsoScopes(withAlso(2), inventory, ['edge-01', 'edge-02'], also, 'spec.yaml'))).toContain(
      'rollout.also[0].profile: its scope leaves out 1 device(s) of profile "pkg"\'s scope (edge-02)',
    );
  });
});
