import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { judgeVerdicts, runRecheck } from '../../../intake/node-down-recheck';
import { markDown, markUp, newVerdict, EMPTY_NODE_DOWN_FILE } from '../../../core/node-down';
import { MAX_DOCUMENT_BYTES } from '../../../intake/files';
import { readVerdicts, updateVerdicts, verdictsPathFor, writeVerdicts } from '../../../intake/node-down';
import { runCli } from '../../support/cli';
import { scratchDir } from '../../support/harness';
import { refusal } from '../../support/refusal';

const scratch = scratchDir('node-down-store');
afterAll(() => scratch.cleanup());

let n = 0;
/** A fresh 0700 directory with an inventory path in it (the inventory itself is not needed here). */
function place(): { dir: string; inventory: string; verdicts: string } {
  const dir = join(scratch.dir, `d${++n}`);
  mkdirSync(dir, { mode: 0o700 });
  const inventory = join(dir, 'fleet.yaml');
  return { dir, inventory, verdicts: verdictsPathFor(inventory) };
}

const verdict = (device: string, recheck: string, nowMs = Date.now(), expires?: string) =>
  newVerdict({ device, reason: 'down for test', recheck, by: 'tester', nowMs, ...(expires ? { expires } : {}) });

describe('the verdicts file (intake/node-down.ts)', () => {
  it('lives beside the inventory as <name>.verdicts.yaml', () => {
    expect(verdictsPathFor('/srv/fleet.yaml')).toBe('/srv/fleet.verdicts.yaml');
    expect(verdictsPathFor('/srv/hosts')).toBe('/srv/hosts.verdicts.yaml');
    expect(verdictsPathFor('/srv/fleet.json')).toBe('/srv/fleet.verdicts.yaml');
  });

  it('is empty when absent; written atomically with mode 0600 and no temp file left; read back the same', () => {
    const { dir, verdicts } = place();
    expect(readVerdicts(verdicts)).toEqual({ verdicts: [], history: [] });
    const file = markDown(EMPTY_NODE_DOWN_FILE, verdict('edge-01', 'exit 1'));
    writeVerdicts(verdicts, file);
    expect(readVerdicts(verdicts)).toEqual(file);
    expect(readdirSync(dir)).toEqual(['fleet.verdicts.yaml']);
    expect(readFileSync(verdicts, 'utf8')).toContain('device: edge-01');
    expect(statSync(verdicts).mode & 0o777).toBe(0o600);
  });

  it('refuses a file others may write, a symlink, or one in a directory others may write (StrictModes)', () => {
    const { dir, verdicts } = place();
    writeVerdicts(verdicts, EMPTY_NODE_DOWN_FILE);
    chmodSync(verdicts, 0o620);
    expect(refusal(() => readVerdicts(verdicts)).message).toMatch(
      /refused: is group-writable \(mode 0620\).*SECURITY\.md/,
    );
    chmodSync(verdicts, 0o606);
    expect(refusal(() => readVerdicts(verdicts)).message).toContain('refused: is world-writable (mode 0606)');
    chmodSync(verdicts, 0o600);
    chmodSync(dir, 0o777);
    expect(refusal(() => readVerdicts(verdicts)).message).toContain(
      `its directory ${dir} is writable by others (mode 0777)`,
    );
    chmodSync(dir, 0o700);
    const link = join(dir, 'other.verdicts.yaml');
    symlinkSync(verdicts, link);
    expect(refusal(() => readVerdicts(link)).message).toContain('refused: is a symbolic link');
    expect(readVerdicts(verdicts)).toEqual(EMPTY_NODE_DOWN_FILE);
  });

  it('a bad file is INVALID_INPUT naming the file, the field and the value; an oversized one is refused before it is parsed', () => {
    const { verdicts } = place();
    writeFileSync(verdicts, stringify({ verdicts: [{ ...verdict('edge-01', 'true'), expiresAt: 'next week' }] }), {
      mode: 0o600,
    });
    const err = refusal(() => readVerdicts(verdicts));
    expect(err.code).toBe('INVALID_INPUT');
    expect(err.message).toContain(verdicts);
    expect(err.message).toContain('verdicts[0].expiresAt');
    expect(err.message).toContain('"next week"');
    writeFileSync(verdicts, Buffer.alloc(MAX_DOCUMENT_BYTES + 10, 0x20), { mode: 0o600 });
    expect(refusal(() => readVerdicts(verdicts)).message).toContain('above the limit');
  });

  it('a reader holds the file to what mark-down writes: a device not in the inventory, or a verdict of more than 365 days, is INVALID_INPUT naming the field; mark-up still lifts it', () => {
    const { verdicts } = place();
    const now = Date.now();
    const ghost = verdict('ghost', 'true', now);
    const forever = { ...verdict('edge-01', 'true', now), expiresAt: '9999-12-31T00:00:00.000Z' };
    writeVerdicts(verdicts, { verdicts: [ghost, forever], history: [] });
    const inventory = [{ id: 'edge-01' }, { id: 'edge-02' }];
    const err = refusal(() => readVerdicts(verdicts, { inventory }));
    expect(err.code).toBe('INVALID_INPUT');
    expect(err.message).toContain(
      `verdicts[0].device: names a device the inventory does not hold; lift the verdict with wavegate fleet mark-up ghost --inventory <the inventory> (got "ghost")`,
    );
    expect(err.message).toMatch(
      /verdicts\[1\]\.expiresAt: is \d+ days after since \(.*\); a verdict holds at most 365 days .*\(got "9999-12-31T00:00:00.000Z"\)/,
    );
    // Without the inventory (a worker's page of it) the expiry rule still holds.
    expect(refusal(() => readVerdicts(verdicts)).message).toContain('verdicts[1].expiresAt');
    expect(refusal(() => readVerdicts(verdicts)).message).not.toContain('verdicts[0].device');
    // A verdict from the future cannot stretch the year: its since is refused.
    writeVerdicts(verdicts, { verdicts: [{ ...forever, since: '9999-01-01T00:00:00.000Z' }], history: [] });
    expect(refusal(() => readVerdicts(verdicts)).message).toContain('verdicts[0].since: is in the future');
    // The writers read the shape only, so mark-up can lift what readers refuse.
    writeVerdicts(verdicts, { verdicts: [ghost, forever], history: [] });
    updateVerdicts(verdicts, (f) => markUp(markUp(f, 'ghost', 'tester', now), 'edge-01', 'tester', now));
    expect(readVerdicts(verdicts, { inventory }).verdicts).toEqual([]);
    // 365 days exactly (what mark-down --expires 365d writes) is read.
    writeVerdicts(verdicts, markDown(EMPTY_NODE_DOWN_FILE, verdict('edge-02', 'true', now, '365d')));
    expect(readVerdicts(verdicts, { inventory }).verdicts).toHaveLength(1);
  });

  it('fleet verdicts and plan refuse a verdicts file naming a device not in the inventory, exit 2 naming the field', async () => {
    const { dir } = place();
    const inventory = join(dir, 'fleet-20.yaml');
    copyFileSync('examples/plan/fleet-20.yaml', inventory);
    writeVerdicts(verdictsPathFor(inventory), markDown(EMPTY_NODE_DOWN_FILE, verdict('decommissioned-01', 'exit 1')));
    const spec = join(dir, 'spec.yaml');
    writeFileSync(
      spec,
      stringify({
        rollout: {
          profile: 'demo',
          fromRevision: 1,
          toRevision: 2,
          phases: [{ canary: '1 device' }, { bulk: 'remainder' }],
        },
      }),
    );
    const runs = await Promise.all([
      runCli(['fleet', 'verdicts', '--inventory', inventory]),
      runCli(['plan', '--what-if', '-f', spec, '--inventory', inventory, '--profiles', join(dir, 'no-profiles')]),
    ]);
    for (const run of runs) {
      expect(run.code, run.stderr).toBe(2);
      expect(run.stderr).toContain('verdicts[0].device: names a device the inventory does not hold');
      expect(run.stderr).toContain('"decommissioned-01"');
    }
  });

  it('updateVerdicts applies a change to the file on disk', () => {
    const { verdicts } = place();
    updateVerdicts(verdicts, (f) => markDown(f, verdict('a', 'true')));
    updateVerdicts(verdicts, (f) => markDown(f, verdict('b', 'true')));
    expect(readVerdicts(verdicts).verdicts.map((v) => v.device)).toEqual(['a', 'b']);
  });

  it("writers at the same moment (separate processes) never lose each other's update: the file lock", async () => {
    const { dir } = place();
    const inventory = join(dir, 'fleet-20.yaml');
    copyFileSync('examples/plan/fleet-20.yaml', inventory);
    const devices = ['srv-01', 'srv-02', 'srv-03', 'srv-04', 'srv-05', 'srv-06'];
    const runs = await Promise.all(
      devices.map((d) =>
        runCli(['fleet', 'mark-down', d, '--inventory', inventory, '--recheck', 'exit 1', '--reason', `down ${d}`]),
      ),
    );
    for (const run of runs) expect(run.code, run.stderr).toBe(0);
    const file = readVerdicts(verdictsPathFor(inventory));
    expect(file.verdicts.map((v) => v.device).sort()).toEqual(devices);
    expect(file.history.filter((h) => h.event === 'marked-down')).toHaveLength(devices.length);
    expect(existsSync(`${verdictsPathFor(inventory)}.lock`)).toBe(false);
  });

  it('a lock left by a dead writer is taken over once stale; a fresh one held too long is CONFLICT', () => {
    const { verdicts } = place();
    const lock = `${verdicts}.lock`;
    writeFileSync(lock, '');
    const old = new Date(Date.now() - 120_000);
    utimesSync(lock, old, old);
    updateVerdicts(verdicts, (f) => markDown(f, verdict('a', 'true')));
    expect(readVerdicts(verdicts).verdicts.map((v) => v.device)).toEqual(['a']);
    expect(existsSync(lock)).toBe(false);
    writeFileSync(lock, '');
    expect(refusal(() => updateVerdicts(verdicts, (f) => markDown(f, verdict('b', 'true')))).code).toBe('CONFLICT');
    expect(readVerdicts(verdicts).verdicts.map((v) => v.device)).toEqual(['a']);
  }, 20_000);
});

describe('the recheck runner (intake/node-down-recheck.ts)', () => {
  it('runs on this host with a clean environment; the device reaches it only as environment variables', async () => {
    process.env.WAVEGATE_TEST_SECRET = 'leak';
    // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell parameter expansion, run by sh, not a template
    const command = 'echo "$WAVEGATE_DEVICE|$WAVEGATE_HOST|$WAVEGATE_PORT|${WAVEGATE_TEST_SECRET:-clean}"; exit 3';
    const res = await runRecheck(command, { id: 'edge-01', host: '10.0.0.1', port: 2222 });
    delete process.env.WAVEGATE_TEST_SECRET;
    expect(res).toMatchObject({ passed: false, result: 'exit 3: edge-01|10.0.0.1|2222|clean' });
    const ok = await runRecheck('test "$WAVEGATE_DEVICE" = "x;y"', { id: 'x;y', host: 'h' });
    expect(ok.passed).toBe(true);
  });

  it('a device field is never spliced into the command: shell syntax in it stays data', async () => {
    const { dir } = place();
    const marker = join(dir, 'pwned');
    const res = await runRecheck('printf %s "$WAVEGATE_HOST"', { id: 'd', host: `$(touch ${marker})` });
    expect(res.result).toBe(`exit 0: $(touch ${marker})`);
    expect(existsSync(marker)).toBe(false);
  });

  // A recheck that does not answer in time: node-down-timeout.test.ts (a wall-clock bound, run alone).

  it('judgeVerdicts: a passing recheck lifts and records it, a failing one records its result, an expired one is not run', async () => {
    const { dir, inventory, verdicts } = place();
    const ran = join(dir, 'ran-');
    const now = Date.now();
    let file = markDown(EMPTY_NODE_DOWN_FILE, verdict('up', `touch ${ran}up; true`, now));
    file = markDown(file, verdict('down', `touch ${ran}down; echo no route; exit 1`, now));
    file = markDown(file, { ...verdict('old', `touch ${ran}old; true`, now - 3 * 3_600_000, '1h') });
    writeVerdicts(verdicts, file);
    const devices = ['up', 'down', 'old', 'none'].map((id) => ({ id, host: `${id}.example` }));
    const standings = await judgeVerdicts({ inventoryPath: inventory, devices, by: 'worker test' });
    expect(Object.fromEntries([...standings].map(([id, s]) => [id, s.kind]))).toEqual({
      up: 'lifted',
      down: 'holds',
      old: 'expired',
    });
    expect(existsSync(`${ran}up`) && existsSync(`${ran}down`)).toBe(true);
    expect(existsSync(`${ran}old`)).toBe(false);
    const after = readVerdicts(verdicts);
    expect(after.verdicts.map((v) => v.device).sort()).toEqual(['down', 'old']);
    expect(after.verdicts.find((v) => v.device === 'down')).toMatchObject({ lastCheckResult: 'exit 1: no route' });
    expect(after.history.at(-1)).toMatchObject({ device: 'up', event: 'lifted-by-recheck', by: 'worker test' });
  });
});
