import { cpSync, mkdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli, startDevDemo, type CliRun, type DevDemo } from '../support/cli';
import { scratchDir, writeDemoSpecAt } from '../support/harness';
import { until } from '../support/until';
import { PROJECT_ROOT } from '../../intake/package-layout';

/**
 * `wavegate audit --verify` finds the trail and the key where the worker keeps them, from the worker's
 * configuration and never from the working directory: a rollout on `wavegate dev --demo --state-dir S`
 * (trails in S/audit, MAC key S/audit.key), verified from a directory that has nothing to do with it.
 */
const scratch = scratchDir('audit-location');
const stateDir = join(scratch.dir, 'state');
/** An unrelated working directory (and HOME): nothing of the stack is under it. */
const elsewhere = join(scratch.dir, 'elsewhere');
let stack: DevDemo | undefined;
let rolloutId = '';

/** No ambient configuration: the machine's TEMPORAL_* and WAVEGATE_AUDIT_* never leak in. */
const CLEAN = {
  TEMPORAL_ADDRESS: '',
  TEMPORAL_PROFILE: '',
  WAVEGATE_AUDIT_DIR: '',
  WAVEGATE_AUDIT_KEY_FILE: '',
  WAVEGATE_AUDIT_STORE: '',
};

function fromElsewhere(args: string[], env: NodeJS.ProcessEnv = {}, address = stack!.address): Promise<CliRun> {
  return runCli([...args, '--address', address], {
    cwd: elsewhere,
    env: { ...CLEAN, HOME: elsewhere, TEMPORAL_CONFIG_FILE: join(elsewhere, 'none.toml'), ...env },
  });
}

beforeAll(async () => {
  mkdirSync(elsewhere, { recursive: true });
  stack = await startDevDemo(stateDir);
  const spec = join(scratch.dir, 'quick.yaml');
  writeDemoSpecAt(spec, {
    phases: [
      { canary: '1 device', gate: '1s' },
      { bulk: 'remainder', gate: '1s' },
    ],
  });
  const started = await fromElsewhere([
    'start',
    '-f',
    spec,
    '--inventory',
    stack.inventory,
    '--profiles',
    join(PROJECT_ROOT, 'profiles'),
    '--json',
  ]);
  expect(started.code, started.stderr).toBe(0);
  rolloutId = (JSON.parse(started.stdout) as { rolloutId: string }).rolloutId;
  await until(
    'the rollout to complete',
    async () => {
      const run = await fromElsewhere(['status', rolloutId, '--json']);
      return (JSON.parse(run.stdout) as { state: string }).state === 'completed' ? true : undefined;
    },
    180_000,
  );
}, 240_000);

afterAll(async () => {
  await stack?.stop();
  scratch.cleanup();
});

describe('audit --verify finds the trail and key where the worker keeps them', () => {
  it("the dev stack's trail, named by --audit-dir or $WAVEGATE_AUDIT_DIR from an unrelated directory: the key beside it is found, every MAC checked, --strict passes", async () => {
    const keyLine = `MAC: every record checked against the audit key ${join(stateDir, 'audit.key')} (the dev stack's key beside the audit directory)`;
    const byFlag = await fromElsewhere([
      'audit',
      rolloutId,
      '--verify',
      '--strict',
      '--audit-dir',
      join(stateDir, 'audit'),
    ]);
    expect(byFlag.code, byFlag.stdout + byFlag.stderr).toBe(0);
    expect(byFlag.stdout).toMatch(/records, chain intact/);
    expect(byFlag.stdout).toContain(keyLine);
    expect(byFlag.stdout).toMatch(/^head: compared with the workflow's head/m);

    const byEnv = await fromElsewhere(['audit', rolloutId, '--verify', '--strict'], {
      WAVEGATE_AUDIT_DIR: join(stateDir, 'audit'),
    });
    expect(byEnv.code, byEnv.stdout + byEnv.stderr).toBe(0);
    expect(byEnv.stdout).toContain(keyLine);

    // A relative --audit-dir is resolved once against where the command runs, and said as the absolute path.
    const relativeDir = relative(elsewhere, join(stateDir, 'audit'));
    const byRelative = await fromElsewhere(['audit', rolloutId, '--verify', '--json', '--audit-dir', relativeDir]);
    expect(byRelative.code, byRelative.stderr).toBe(0);
    expect(JSON.parse(byRelative.stdout)).toMatchObject({
      ok: true,
      macChecked: true,
      auditKeyFile: join(stateDir, 'audit.key'),
    });
  });

  it('a key given by $WAVEGATE_AUDIT_KEY_FILE wins over the one beside the directory, and a refusal names where it came from', async () => {
    const run = await fromElsewhere(['audit', rolloutId, '--verify', '--audit-dir', join(stateDir, 'audit')], {
      WAVEGATE_AUDIT_KEY_FILE: join(elsewhere, 'no-such.key'),
    });
    expect(run.code).toBe(2);
    expect(run.stderr).toContain(
      `$WAVEGATE_AUDIT_KEY_FILE "${join(elsewhere, 'no-such.key')}": cannot read it (ENOENT)`,
    );
  });

  it('a trail whose key is not beside it: MAC NOT checked, naming where the key was looked for and how to give it; --strict exits 1 saying the same', async () => {
    const copy = join(scratch.dir, 'copied', 'trails');
    cpSync(join(stateDir, 'audit'), copy, { recursive: true });
    const run = await fromElsewhere(['audit', rolloutId, '--verify', '--audit-dir', copy]);
    expect(run.code, run.stdout + run.stderr).toBe(0);
    const looked = `no --audit-key-file, no $WAVEGATE_AUDIT_KEY_FILE, no ${join(scratch.dir, 'copied', 'audit.key')} (where \`wavegate dev\` keeps its key beside ${copy})`;
    expect(run.stdout).toContain(
      `MAC: NOT checked: no audit key found (${looked}); give the key the worker was started with by --audit-key-file <path> or $WAVEGATE_AUDIT_KEY_FILE`,
    );
    const strict = await fromElsewhere(['audit', rolloutId, '--verify', '--strict', '--audit-dir', copy]);
    expect(strict.code).toBe(1);
    expect(strict.stderr).toContain(`--strict: the MAC could not be checked (MAC: no audit key found (${looked})`);
    // Pointed at the key: checked.
    const pointed = await fromElsewhere([
      'audit',
      rolloutId,
      '--verify',
      '--strict',
      '--audit-dir',
      copy,
      '--audit-key-file',
      join(stateDir, 'audit.key'),
    ]);
    expect(pointed.code, pointed.stdout + pointed.stderr).toBe(0);
    expect(pointed.stdout).toContain(`against the audit key ${join(stateDir, 'audit.key')} (--audit-key-file)`);
  });

  it("no trail in the directory: names the directory, what named it, and how to point at the worker's (exit 1 when the workflow holds a head, 2 when it cannot be asked)", async () => {
    const empty = join(scratch.dir, 'empty-audit');
    mkdirSync(empty, { recursive: true });
    // The workflow holds a head, so an empty directory reads as a deleted trail (exit 1): it says where it looked.
    const run = await fromElsewhere(['audit', rolloutId, '--verify'], { WAVEGATE_AUDIT_DIR: empty });
    expect(run.code).toBe(1);
    expect(run.stdout).toContain(
      `trail: looked in ${empty} ($WAVEGATE_AUDIT_DIR); if the worker keeps its trails elsewhere, give its directory with --audit-dir <dir> or $WAVEGATE_AUDIT_DIR`,
    );
    const offline = await fromElsewhere(['audit', rolloutId, '--verify'], { WAVEGATE_AUDIT_DIR: empty }, '127.0.0.1:1');
    expect(offline.code).toBe(2);
    expect(offline.stderr).toContain(`NOT_FOUND: no audit trail for rollout "${rolloutId}"`);
    expect(offline.stderr).toContain(
      `looked in ${empty} ($WAVEGATE_AUDIT_DIR); if the worker keeps its trails elsewhere`,
    );
    const show = await fromElsewhere(['audit', rolloutId, '--audit-dir', empty]);
    expect(show.code).toBe(2);
    expect(show.stderr).toContain(`looked in ${empty} (--audit-dir)`);
  });
});
