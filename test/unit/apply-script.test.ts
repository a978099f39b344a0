import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  applyScript,
  parseReportLines,
  readApplyReport,
  ReportUnreadable,
  APPLY_SCRIPT_VERSION,
  APPLY_WRAPPER,
  type ApplyScriptInput,
} from '../../device/transport/apply-script';
import { shellFor } from '../../device/steps';
import { formatFloor, parseFloor } from '../../core/floor';
import { scratchDir } from '../support/harness';

/**
 * The one-script apply (device/transport/apply-script.ts): the report parser on its own, and the
 * generated script run by the machine's POSIX sh (dash) in a HOME of its own: the files it leaves are
 * the apply lock's (docs/formats.md "The apply lock"), its report says each step's outcome.
 */
const hex = (s: string) => Buffer.from(s).toString('hex');
const line = (name: string, status: string, detail = '') => `WAVEGATE-STEP ${name} ${status} ${hex(detail)}`;
const BEGIN = `WAVEGATE-STEP begin ${APPLY_SCRIPT_VERSION} `;
const END = (e: string) => `WAVEGATE-STEP end ${e} `;
const report = (...lines: string[]) => [...lines, ''].join('\n');

describe('the apply script report parser', () => {
  it('reads an applied unit, ignoring what the login shell printed before begin', () => {
    const out = report(
      'motd from .bashrc',
      BEGIN,
      line('floor', 'ok'),
      line('lock', 'acquired', 'launched=0\n'),
      line('verify-first', '1', 'no'),
      line('launch', 'launched'),
      line('apply', '0', 'done'),
      line('verify', '0'),
      line('marker', 'written'),
      line('release', 'released', 'apply of r2 done'),
      END('applied'),
    );
    const r = readApplyReport(out, 'apply');
    expect(r.kind).toBe('applied');
    expect(parseReportLines(out).steps.map((s) => s.name)).toEqual([
      'floor',
      'lock',
      'verify-first',
      'launch',
      'apply',
      'verify',
      'marker',
      'release',
    ]);
    expect(parseReportLines(out).steps[4]!.detail).toBe('done');
  });

  it('a report cut short, garbled, or claiming success without its steps is unreadable (never a guessed success)', () => {
    const cut = report(
      BEGIN,
      line('floor', 'ok'),
      line('lock', 'acquired'),
      line('verify-first', '1'),
      line('launch', 'launched'),
    );
    expect(() => readApplyReport(cut, 'apply')).toThrow(ReportUnreadable);
    expect(() => readApplyReport(report(line('floor', 'ok'), END('applied')), 'apply')).toThrow(
      /no "WAVEGATE-STEP begin/,
    );
    expect(() => readApplyReport(report(BEGIN, 'stray output', END('stop')), 'apply')).toThrow(/not a report line/);
    expect(() => readApplyReport(report(BEGIN, line('lock', 'acquired'), END('applied')), 'apply')).toThrow(
      ReportUnreadable,
    );
    // A successful apply whose verify after failed must not read as applied.
    expect(() =>
      readApplyReport(
        report(
          BEGIN,
          line('launch', 'launched'),
          line('apply', '0'),
          line('verify', '1'),
          line('marker', 'written'),
          line('release', 'released'),
          END('applied'),
        ),
        'apply',
      ),
    ).toThrow(ReportUnreadable);
    expect(() => readApplyReport(report(BEGIN, line('nonsense', 'x'), END('stop')), 'apply')).toThrow(/unknown step/);
    expect(() => readApplyReport(report(BEGIN, 'WAVEGATE-STEP apply 0 abc', END('stop')), 'apply')).toThrow(/odd hex/);
    expect(() => readApplyReport(report(BEGIN, END('applied'), line('apply', '0')), 'apply')).toThrow(ReportUnreadable);
  });

  it('stops are read from their last step: failures name the step that said no', () => {
    expect(
      readApplyReport(
        report(
          BEGIN,
          line('lock', 'acquired'),
          line('verify-first', '1'),
          line('launch', 'launched'),
          line('apply', '3', 'boom'),
          line('release', 'released'),
          END('stop'),
        ),
        'rollback',
      ),
    ).toEqual({ kind: 'failed', failed: 'rollback', code: 3, output: 'boom', reattached: false });
    expect(
      readApplyReport(
        report(
          BEGIN,
          line('reattach', 'ok'),
          line('apply', '0'),
          line('verify', '1', 'missing'),
          line('release', 'released'),
          END('stop'),
        ),
        'apply',
      ),
    ).toMatchObject({ kind: 'failed', failed: 'verify', code: 1, output: 'missing', reattached: true });
    expect(
      readApplyReport(report(BEGIN, line('apply', 'unknown'), line('release', 'released'), END('stop')), 'apply'),
    ).toMatchObject({ kind: 'failed', failed: 'apply', code: null });
    expect(readApplyReport(report(BEGIN, line('floor', 'refused', 'revision=9\n'), END('stop')), 'apply')).toEqual({
      kind: 'floor',
      verdict: 'refused',
      text: 'revision=9\n',
    });
    const held = readApplyReport(
      report(
        BEGIN,
        line('floor', 'ok'),
        line('lock', 'held', 'rollout=r\nrun=u\nactivity=3\nattempt=1\nlaunched=1\npid=42\nrunning=1\n'),
        END('stop'),
      ),
      'apply',
    );
    expect(held).toMatchObject({
      kind: 'lock-held',
      record: { holder: { rollout: 'r', run: 'u', activity: '3', attempt: 1 }, pid: 42, running: true },
    });
    expect(readApplyReport(report(BEGIN, line('stage', 'needed'), END('stop')), 'apply')).toEqual({
      kind: 'stage-needed',
    });
    expect(readApplyReport(report(BEGIN, line('ahead', 'above', '12'), END('stop')), 'apply')).toEqual({
      kind: 'ahead',
      marker: 12,
    });
    expect(() => readApplyReport(report(BEGIN, line('ahead', 'above', 'x1'), END('stop')), 'apply')).toThrow(
      /not a revision/,
    );
    expect(readApplyReport(report(BEGIN, line('apply', 'gone', 'pid=7\n'), END('stop')), 'apply')).toMatchObject({
      kind: 'apply-gone',
    });
    // A release is not a reason to stop unless the step before it said no.
    expect(() =>
      readApplyReport(report(BEGIN, line('apply', '0'), line('release', 'released'), END('stop')), 'apply'),
    ).toThrow(ReportUnreadable);
  });
});

describe('the apply script run by the POSIX sh', () => {
  const scratch = scratchDir('apply-script');
  afterAll(() => scratch.cleanup());
  let n = 0;
  const home = () => {
    const dir = join(scratch.dir, `home-${++n}`);
    mkdirSync(dir, { recursive: true });
    return dir;
  };
  const holder = { rollout: 'rollout:t', run: 'run-1', activity: '5', attempt: 1 };
  const input = (over: Partial<ApplyScriptInput> = {}): ApplyScriptInput => {
    const steps = { profile: 'p', revision: 4 };
    return {
      profile: 'p',
      revision: 4,
      step: 'apply',
      holder,
      nowMs: Date.parse('2026-01-01T00:00:00Z'),
      floorNowMs: Date.parse('2026-01-01T00:00:00Z'),
      verify: shellFor(steps, 'test -f "$HOME/fact"'),
      apply: shellFor(steps, 'echo run >> "$HOME/runs"; touch "$HOME/fact"'),
      stagingDir: '.wavegate/staging/p/4',
      payload: [],
      ownerlessGraceSeconds: 0,
      ...over,
    };
  };
  const run = (dir: string, script: string, stdin?: Buffer) => {
    const res = spawnSync('/bin/sh', ['-c', script], {
      env: { PATH: process.env.PATH, HOME: dir },
      cwd: dir,
      encoding: 'utf8',
      timeout: 20_000,
      ...(stdin ? { input: stdin } : {}),
    });
    return { code: res.status, stdout: res.stdout, stderr: res.stderr };
  };

  it('is valid POSIX sh (dash -n) for apply and rollback, with and without payload and answers', () => {
    for (const over of [
      {},
      { step: 'rollback' as const, skipFloor: true },
      { payload: [{ name: 'f', sha256: 'a'.repeat(64), size: 3 }], afterStage: true },
      { payload: [{ name: 'f', sha256: 'a'.repeat(64), size: 3 }], streamed: true },
      { breakTheirs: { holder, reason: "it's closed" } },
    ]) {
      const res = spawnSync('/bin/sh', ['-n', '-c', applyScript(input(over))], { encoding: 'utf8' });
      expect(res.status, res.stderr).toBe(0);
    }
  });

  it("fresh: one run takes the lock, verifies first, applies once, verifies, writes the marker and releases with today's reason", () => {
    const dir = home();
    const res = run(dir, applyScript(input()));
    const r = readApplyReport(res.stdout, 'apply');
    expect(r.kind, res.stdout + res.stderr).toBe('applied');
    expect(parseReportLines(res.stdout).steps.map((s) => `${s.name} ${s.status}`)).toEqual([
      'floor ok',
      'lock acquired',
      'verify-first 1',
      'launch launched',
      'apply 0',
      'verify 0',
      'marker written',
      'release released',
    ]);
    expect(readFileSync(join(dir, 'runs'), 'utf8')).toBe('run\n');
    const p = join(dir, '.wavegate/profiles/p');
    expect(readFileSync(join(p, 'revision'), 'utf8')).toBe('4\n');
    expect(existsSync(join(p, 'apply.lock'))).toBe(false);
    expect(readFileSync(join(p, 'last-apply/released'), 'utf8')).toBe('apply of r4 done: verified, marker written\n');
    expect(readFileSync(join(p, 'last-apply/owner'), 'utf8')).toBe(
      'rollout=rollout:t\nrun=run-1\nactivity=5\nattempt=1\nattemptAt=2026-01-01T00:00:00.000Z\nrevision=4\nstep=apply\ntaken=2026-01-01T00:00:00.000Z\n',
    );
    expect(readFileSync(join(p, 'last-apply/exitcode'), 'utf8')).toBe('0\n');

    // Again: verify first passes, nothing is applied.
    const again = run(dir, applyScript(input({ holder: { ...holder, run: 'run-2' } })));
    expect(readApplyReport(again.stdout, 'apply').kind).toBe('already-applied');
    expect(readFileSync(join(dir, 'runs'), 'utf8')).toBe('run\n');
    expect(readFileSync(join(p, 'last-apply/released'), 'utf8')).toBe('r4 already in place (verify only)\n');
  });

  it('a fresh apply starts only the processes its files need: none to report a step, read the floor, a pid or the owner', () => {
    // Every external tool the script could reach is a shim that logs its name, then runs the real one.
    const dir = home();
    const bin = join(dir, 'shims');
    mkdirSync(bin);
    const log = join(dir, 'ran.log');
    const tools = [
      'mkdir',
      'mv',
      'cat',
      'rm',
      'sha256sum',
      'setsid',
      'nohup',
      'od',
      'tr',
      'tail',
      'head',
      'sed',
      'grep',
      'sleep',
      'touch',
    ];
    for (const tool of tools) {
      const real = spawnSync('/bin/sh', ['-c', `command -v ${tool}`], { encoding: 'utf8' }).stdout.trim();
      writeFileSync(join(bin, tool), `#!/bin/sh\necho ${tool} >> ${log}\nexec ${real} "$@"\n`, { mode: 0o755 });
    }
    const content = Buffer.from('payload\n');
    const sha256 = createHash('sha256').update(content).digest('hex');
    const floorDir = join(dir, '.wavegate/profiles/p');
    mkdirSync(floorDir, { recursive: true });
    writeFileSync(join(floorDir, 'floor'), 'revision=3\nfrom=2\nrevertUntil=0\nrollout=r\n');
    const script = applyScript(
      input({ payload: [{ name: 'f', sha256, size: content.length }], streamed: true, aheadAbove: 4 }),
    );
    const res = spawnSync('/bin/sh', ['-c', script], {
      env: { PATH: `${bin}:${process.env.PATH}`, HOME: dir },
      cwd: dir,
      encoding: 'utf8',
      timeout: 20_000,
      input: content,
    });
    expect(readApplyReport(res.stdout, 'apply').kind, res.stdout + res.stderr).toBe('applied');
    const ran = readFileSync(log, 'utf8').trim().split('\n');
    // The revision's own commands: verify is `test -f` (a builtin), apply runs touch once.
    expect(ran.filter((t) => t === 'touch')).toEqual(['touch']);
    // The script's own: the lock (mkdir, mv of its owner), staging (mkdir, cat of the stream, its
    // sha256sum), the detached launch (setsid), the exit code's rename, the release's rename.
    expect(ran.filter((t) => t !== 'touch').sort()).toEqual([
      'cat',
      'mkdir',
      'mkdir',
      'mv',
      'mv',
      'mv',
      'setsid',
      'sha256sum',
    ]);
  });

  it("the floor: at or above it the unit goes on; below it (or a number too long to compare) the worker decides, with the floor's text and the device's clock", () => {
    const dir = home();
    const floor = join(dir, '.wavegate/profiles/p/floor');
    mkdirSync(join(dir, '.wavegate/profiles/p'), { recursive: true });
    writeFileSync(floor, 'revision=4\nfrom=3\nrevertUntil=0\nrollout=r\nrun=u\n');
    expect(readApplyReport(run(dir, applyScript(input())).stdout, 'apply').kind).toBe('applied');
    // Below: the shell cannot tell a compensation or a revert of the raising rollout from a downgrade.
    const text = `revision=5\nfrom=4\nrevertUntil=${Date.parse('2026-01-02T00:00:00Z')}\nrollout=r\n`;
    writeFileSync(floor, text);
    const before = Date.now();
    const below = readApplyReport(run(dir, applyScript(input({ holder: { ...holder, run: 'x' } }))).stdout, 'apply');
    expect(below).toMatchObject({ kind: 'floor', verdict: 'check' });
    const reported = (below as { text: string }).text;
    expect(reported.startsWith(text), reported).toBe(true);
    // The device's clock comes with it (whole seconds): the way back is judged on it, not on the worker's.
    const now = Number(/\nnow=(\d+)\n$/.exec(reported)?.[1]);
    expect(now).toBeGreaterThanOrEqual(Math.floor(before / 1000) * 1000);
    expect(now).toBeLessThanOrEqual(Date.now());
    expect(parseFloor(reported)).toMatchObject({ revision: 5, from: 4 });
    expect(existsSync(join(dir, '.wavegate/profiles/p/apply.lock'))).toBe(false); // stopped before the lock
    writeFileSync(floor, 'revision=12345678901234567890\n');
    expect(readApplyReport(run(dir, applyScript(input())).stdout, 'apply')).toMatchObject({
      kind: 'floor',
      verdict: 'check',
    });
    writeFileSync(floor, 'revision=garbage\n');
    expect(
      readApplyReport(run(dir, applyScript(input({ holder: { ...holder, run: 'y' } }))).stdout, 'apply').kind,
    ).toBe('already-applied');
  });

  /** A floor as the device wrote it: its `at` between `before` and now (the device's clock, whole seconds). */
  const floorOf = (p: string, before: number) => {
    const floor = parseFloor(readFileSync(join(p, 'floor'), 'utf8'))!;
    expect(floor.at).toBeGreaterThanOrEqual(Math.floor(before / 1000) * 1000);
    expect(floor.at).toBeLessThanOrEqual(Date.now());
    return floor;
  };

  it('the floor rises with the confirmed apply in the same run, stamped with the device clock, its way back never below the floor it replaced; found in place it only rises from below', () => {
    const dir = home();
    const p = join(dir, '.wavegate/profiles/p');
    mkdirSync(p, { recursive: true });
    const old = 'revision=3\nfrom=2\nrevertUntil=0\nrollout=rollout:old\nrun=r0\n';
    writeFileSync(join(p, 'floor'), old);
    // The worker's text leaves `from` and `at` to the device.
    const raised = 'revision=4\nrevertUntil=0\nrollout=rollout:t\nrun=run-1\nwindow=60000\nwayBack=604800000\n';
    const inPlace = 'revision=4\nfrom=4\nrevertUntil=0\nrollout=rollout:t\nrun=run-1\nwindow=0\nwayBack=0\n';
    const before = Date.now();
    const res = run(dir, applyScript(input({ floorWrite: { raise: raised, raiseFrom: 3, inPlace } })));
    expect(readApplyReport(res.stdout, 'apply').kind, res.stdout + res.stderr).toBe('applied');
    expect(parseReportLines(res.stdout).steps.map((s) => `${s.name} ${s.status}`)).toEqual([
      'floor ok',
      'lock acquired',
      'verify-first 1',
      'launch launched',
      'apply 0',
      'verify 0',
      'marker written',
      'floor raised',
      'release released',
    ]);
    const first = floorOf(p, before);
    expect(first).toEqual({
      revision: 4,
      from: 3,
      revertUntil: 0,
      rollout: 'rollout:t',
      run: 'run-1',
      window: 60000,
      wayBack: 604800000,
      at: first.at,
    });
    const firstText = readFileSync(join(p, 'floor'), 'utf8');
    // Written as core/floor.ts formats it: `from` in its place, the device's `at` last.
    expect(firstText).toBe(formatFloor(first));
    // Nothing is kept to restore: a floor only ever gives way to another.
    expect(existsSync(join(p, 'floor.prev'))).toBe(false);

    // Another rollout finds it in place: its floor is at the target already, so it is kept as it is.
    const again = run(
      dir,
      applyScript(
        input({
          holder: { ...holder, run: 'run-2' },
          floorWrite: {
            raise: raised.replace('run-1', 'run-2'),
            raiseFrom: 3,
            inPlace: inPlace.replace('run-1', 'run-2'),
          },
        }),
      ),
    );
    expect(readApplyReport(again.stdout, 'apply').kind).toBe('already-applied');
    expect(parseReportLines(again.stdout).steps.map((s) => `${s.name} ${s.status}`)).toContain('floor kept');
    expect(readFileSync(join(p, 'floor'), 'utf8')).toBe(firstText);

    // The same run again (its worker died after the script ended, before it heard): found in place with the
    // floor this run raised, reported `ours` so the worker counts the device as changed by this rollout.
    const retry = run(
      dir,
      applyScript(
        input({
          holder: { ...holder, activity: '5b' },
          floorWrite: { raise: raised, raiseFrom: 3, inPlace, rollout: 'rollout:t', run: 'run-1' },
        }),
      ),
    );
    expect(readApplyReport(retry.stdout, 'apply').kind).toBe('already-applied');
    expect(parseReportLines(retry.stdout).steps.map((s) => `${s.name} ${s.status}`)).toContain('floor ours');
    expect(readFileSync(join(p, 'floor'), 'utf8')).toBe(firstText);

    // The apply runs again under this run's own floor (an attempt cut off after its floor, before its
    // release): the floor stays as the first confirmation wrote it (its time too).
    rmSync(join(dir, 'fact'));
    const rerun = run(
      dir,
      applyScript(
        input({
          holder: { ...holder, activity: '5c' },
          floorWrite: { raise: raised, raiseFrom: 3, inPlace, rollout: 'rollout:t', run: 'run-1' },
        }),
      ),
    );
    expect(readApplyReport(rerun.stdout, 'apply').kind, rerun.stdout).toBe('applied');
    expect(readFileSync(join(p, 'floor'), 'utf8')).toBe(firstText);
    expect(readFileSync(join(dir, 'runs'), 'utf8')).toBe('run\nrun\n');

    // Found in place over a floor below the target (or none): raised to it, with no way back.
    writeFileSync(join(p, 'floor'), old);
    const low = run(
      dir,
      applyScript(input({ holder: { ...holder, run: 'run-3' }, floorWrite: { raise: raised, raiseFrom: 3, inPlace } })),
    );
    expect(readApplyReport(low.stdout, 'apply').kind).toBe('already-applied');
    expect(floorOf(p, before)).toMatchObject({ revision: 4, from: 4, wayBack: 0, window: 0, run: 'run-1' });
    expect(readFileSync(join(dir, 'runs'), 'utf8')).toBe('run\nrun\n');
  });

  it("a raise keeps `from` at or above the floor it replaces (a converge, or a forged raise, opens no way below it); a revert's raise below the floor lands with no way back", () => {
    const dir = home();
    const p = join(dir, '.wavegate/profiles/p');
    mkdirSync(p, { recursive: true });
    writeFileSync(join(p, 'floor'), 'revision=4\nfrom=3\nrevertUntil=0\nrollout=rollout:old\nrun=r0\nat=1\n');
    const raised = 'revision=4\nrevertUntil=0\nrollout=rollout:c\nrun=run-c\nwindow=60000\nwayBack=604800000\n';
    const before = Date.now();
    // A converge of a drifted device: r4 again, asking a way back to r1. The device keeps it at r4.
    const res = run(dir, applyScript(input({ floorWrite: { raise: raised, raiseFrom: 1 } })));
    expect(readApplyReport(res.stdout, 'apply').kind, res.stdout + res.stderr).toBe('applied');
    expect(floorOf(p, before)).toMatchObject({ revision: 4, from: 4, run: 'run-c' });
    // Below the floor (the worker allowed a revert of the rollout that raised it): r2 with no way back.
    const down = home();
    const q = join(down, '.wavegate/profiles/p');
    mkdirSync(q, { recursive: true });
    writeFileSync(join(q, 'floor'), 'revision=5\nfrom=2\nrevertUntil=0\nrollout=rollout:old\nrun=r0\nat=1\n');
    const revert = run(
      down,
      applyScript(
        input({
          revision: 2,
          skipFloor: true,
          floorWrite: { raise: raised.replace('revision=4', 'revision=2'), raiseFrom: 2 },
        }),
      ),
    );
    expect(readApplyReport(revert.stdout, 'apply').kind, revert.stdout + revert.stderr).toBe('applied');
    expect(floorOf(q, before)).toMatchObject({ revision: 2, from: 2 });
  });

  it('compensation steps the floor its own rollout raised down to where it went, for good (never removed); it keeps one raised by anyone else', () => {
    const dir = home();
    const p = join(dir, '.wavegate/profiles/p');
    mkdirSync(p, { recursive: true });
    const old = 'revision=3\nfrom=2\nrevertUntil=0\nrollout=rollout:old\nrun=r0\n';
    writeFileSync(join(p, 'floor'), old);
    const raised = 'revision=4\nrevertUntil=0\nrollout=rollout:t\nrun=run-1\nwindow=0\nwayBack=604800000\n';
    const stepDown = 'revision=3\nfrom=3\nrevertUntil=0\nrollout=rollout:t\nrun=run-1\nwindow=0\nwayBack=0\n';
    const before = Date.now();
    expect(
      readApplyReport(run(dir, applyScript(input({ floorWrite: { raise: raised, raiseFrom: 3 } }))).stdout, 'apply')
        .kind,
    ).toBe('applied');
    const raisedText = readFileSync(join(p, 'floor'), 'utf8');
    const back = (over: Partial<ApplyScriptInput>) =>
      applyScript(
        input({
          step: 'rollback',
          revision: 3,
          skipFloor: true,
          holder: { ...holder, activity: `rb-${++n}` },
          verify: shellFor({ profile: 'p', revision: 3 }, '! test -f "$HOME/fact"'),
          apply: shellFor({ profile: 'p', revision: 3 }, 'rm -f "$HOME/fact"'),
          ...over,
        }),
      );
    // Another run's compensation: the device goes back (the worker allowed it) but the floor stays.
    const other = run(dir, back({ floorRestore: { rollout: 'rollout:t', run: 'someone-else', text: stepDown } }));
    expect(readApplyReport(other.stdout, 'rollback').kind, other.stdout).toBe('applied');
    expect(parseReportLines(other.stdout).steps.map((s) => `${s.name} ${s.status}`)).toContain('floor kept');
    expect(readFileSync(join(p, 'floor'), 'utf8')).toBe(raisedText);
    // Its own: found in place now (verify first passes); the floor is r3 with no way back, not the one before it.
    const own = run(dir, back({ floorRestore: { rollout: 'rollout:t', run: 'run-1', text: stepDown } }));
    expect(readApplyReport(own.stdout, 'rollback').kind).toBe('already-applied');
    expect(parseReportLines(own.stdout).steps.map((s) => `${s.name} ${s.status}`)).toContain('floor restored');
    expect(floorOf(p, before)).toMatchObject({ revision: 3, from: 3, wayBack: 0, run: 'run-1' });
    // A floor raised where there was none stays after its compensation, at the revision it went back to.
    const bare = home();
    const q = join(bare, '.wavegate/profiles/p');
    expect(
      readApplyReport(run(bare, applyScript(input({ floorWrite: { raise: raised, raiseFrom: 3 } }))).stdout, 'apply')
        .kind,
    ).toBe('applied');
    expect(
      readApplyReport(
        run(bare, back({ floorRestore: { rollout: 'rollout:t', run: 'run-1', text: stepDown } })).stdout,
        'rollback',
      ).kind,
    ).toBe('applied');
    expect(floorOf(q, before)).toMatchObject({ revision: 3, from: 3, wayBack: 0 });
    expect(existsSync(join(q, 'floor.prev'))).toBe(false);
  });

  it('ahead: a marker above aheadAbove stops before the lock with nothing run; at or below it, or garbage, the unit goes on', () => {
    const dir = home();
    const p = join(dir, '.wavegate/profiles/p');
    mkdirSync(p, { recursive: true });
    writeFileSync(join(p, 'revision'), '7\n');
    const res = run(dir, applyScript(input({ aheadAbove: 4 })));
    expect(readApplyReport(res.stdout, 'apply')).toEqual({ kind: 'ahead', marker: 7 });
    expect(parseReportLines(res.stdout).steps.map((s) => `${s.name} ${s.status}`)).toEqual(['ahead above']);
    expect(existsSync(join(p, 'apply.lock'))).toBe(false);
    expect(existsSync(join(p, 'last-apply'))).toBe(false);
    expect(existsSync(join(dir, 'runs'))).toBe(false);
    expect(readFileSync(join(p, 'revision'), 'utf8')).toBe('7\n');
    // A revert comes down from 7: aheadAbove 7 lets it run.
    expect(readApplyReport(run(dir, applyScript(input({ aheadAbove: 7 }))).stdout, 'apply').kind).toBe('applied');
    expect(readFileSync(join(dir, 'runs'), 'utf8')).toBe('run\n');
    // A marker that is not a revision is no reason to stop (verify decides, as before).
    const other = home();
    mkdirSync(join(other, '.wavegate/profiles/p'), { recursive: true });
    writeFileSync(join(other, '.wavegate/profiles/p/revision'), 'garbage\n');
    expect(readApplyReport(run(other, applyScript(input({ aheadAbove: 4 }))).stdout, 'apply').kind).toBe('applied');
    // Without aheadAbove (a rollback goes down on purpose) nothing is checked.
    const down = home();
    mkdirSync(join(down, '.wavegate/profiles/p'), { recursive: true });
    writeFileSync(join(down, '.wavegate/profiles/p/revision'), '9\n');
    expect(readApplyReport(run(down, applyScript(input({ step: 'rollback' }))).stdout, 'rollback').kind).toBe(
      'applied',
    );
  });

  it('a lock of another run that is not running stops with its record for the worker to ask Temporal; with the answer it is broken and recorded', () => {
    const dir = home();
    const lock = join(dir, '.wavegate/profiles/p/apply.lock');
    mkdirSync(lock, { recursive: true });
    writeFileSync(
      join(lock, 'owner'),
      'rollout=rollout:other\nrun=o-run\nactivity=9\nattempt=2\nrevision=3\nstep=apply\ntaken=2024-01-01T00:00:00.000Z\n',
    );
    const r = readApplyReport(run(dir, applyScript(input())).stdout, 'apply');
    expect(r).toMatchObject({
      kind: 'lock-theirs',
      record: { holder: { rollout: 'rollout:other', run: 'o-run', activity: '9', attempt: 2 }, launched: false },
    });
    const other = { rollout: 'rollout:other', run: 'o-run', activity: '9', attempt: 2 };
    const res = run(
      dir,
      applyScript(
        input({
          breakTheirs: {
            holder: other,
            reason: 'stale, broken by rollout:t activity 5 attempt 1: its workflow run o-run is closed',
          },
        }),
      ),
    );
    expect(readApplyReport(res.stdout, 'apply').kind).toBe('applied');
    expect(readFileSync(join(dir, 'runs'), 'utf8')).toBe('run\n');
  });

  it('a launch of this unit cut off before it started (launched, no pid, nothing running): after the grace the next attempt takes over and applies once', () => {
    const dir = home();
    const lock = join(dir, '.wavegate/profiles/p/apply.lock');
    mkdirSync(lock, { recursive: true });
    // Attempt 1 marked the launch and was killed before its wrapper started: no pid, apply.pid or exit code.
    writeFileSync(
      join(lock, 'owner'),
      'rollout=rollout:t\nrun=run-1\nactivity=5\nattempt=1\nattemptAt=2026-01-01T00:00:00.000Z\nrevision=4\nstep=apply\ntaken=2026-01-01T00:00:00.000Z\n',
    );
    writeFileSync(join(lock, 'launched'), '');
    const res = run(dir, applyScript(input({ holder: { ...holder, attempt: 2 } })));
    const steps = parseReportLines(res.stdout).steps.map((s) => `${s.name} ${s.status}`);
    expect(readApplyReport(res.stdout, 'apply').kind, res.stdout + res.stderr).toBe('applied');
    expect(steps.slice(0, 4)).toEqual(['floor ok', 'lock interrupted', 'release released', 'lock acquired']);
    expect(readFileSync(join(dir, 'runs'), 'utf8')).toBe('run\n');
    expect(existsSync(join(lock))).toBe(false);
  });

  /** An earlier attempt's script, still alive, that marked the launch (its pid in `launched`) and runs `then` after `delay` s. */
  const slowLauncher = (dir: string, lock: string, delay: number, then = '') => {
    mkdirSync(lock, { recursive: true });
    writeFileSync(
      join(lock, 'owner'),
      'rollout=rollout:t\nrun=run-1\nactivity=5\nattempt=1\nattemptAt=2026-01-01T00:00:00.000Z\nrevision=4\nstep=apply\ntaken=2026-01-01T00:00:00.000Z\n',
    );
    // Started in the background of a shell that exits at once: like a device's, the launcher is reaped
    // when it ends (a child of this process would stay a zombie while spawnSync blocks, alive to kill -0).
    writeFileSync(join(dir, 'launcher.sh'), `sleep ${delay}\n${then}\n`);
    const pid = Number(
      spawnSync('/bin/sh', ['-c', 'sh ../../../../launcher.sh > /dev/null 2>&1 & echo $!'], {
        cwd: lock,
        env: { PATH: process.env.PATH, HOME: dir },
        encoding: 'utf8',
      }).stdout.trim(),
    );
    writeFileSync(join(lock, 'launched'), `${pid}\n`);
    return {
      kill: () => {
        try {
          process.kill(pid);
        } catch {
          /* already ended */
        }
      },
    };
  };

  it('a launch an earlier attempt is still starting (its script alive, no pid yet) is waited for, never taken over: the apply runs once', () => {
    const dir = home();
    const lock = join(dir, '.wavegate/profiles/p/apply.lock');
    // Attempt 1's script, starved: it marked the launch, and starts the apply (as its wrapper would) 1.5 s later.
    const launcher = slowLauncher(
      dir,
      lock,
      1.5,
      'echo $$ > pid; echo run >> "$HOME/runs"; touch "$HOME/fact"; echo 0 > exitcode.tmp && mv exitcode.tmp exitcode',
    );
    try {
      const res = run(dir, applyScript(input({ holder: { ...holder, attempt: 2 } })));
      const steps = parseReportLines(res.stdout).steps.map((s) => `${s.name} ${s.status}`);
      expect(readApplyReport(res.stdout, 'apply').kind, res.stdout + res.stderr).toBe('applied');
      expect(steps).toEqual([
        'floor ok',
        'lock ours',
        'reattach ok',
        'apply 0',
        'verify 0',
        'marker written',
        'release released',
      ]);
      expect(readFileSync(join(dir, 'runs'), 'utf8')).toBe('run\n'); // once: attempt 1's, never attempt 2's too
    } finally {
      launcher.kill();
    }
  });

  it('an earlier attempt that dies while launching, with nothing started: the waiting attempt reports the apply gone, the next one applies once', () => {
    const dir = home();
    const lock = join(dir, '.wavegate/profiles/p/apply.lock');
    slowLauncher(dir, lock, 1); // marks the launch, then exits without starting anything
    const waited = run(dir, applyScript(input({ holder: { ...holder, attempt: 2 } })));
    expect(readApplyReport(waited.stdout, 'apply'), waited.stdout + waited.stderr).toMatchObject({
      kind: 'apply-gone',
    });
    expect(existsSync(join(dir, 'runs'))).toBe(false);
    const next = run(dir, applyScript(input({ holder: { ...holder, attempt: 3 } })));
    expect(readApplyReport(next.stdout, 'apply').kind, next.stdout + next.stderr).toBe('applied');
    expect(
      parseReportLines(next.stdout)
        .steps.slice(0, 4)
        .map((s) => `${s.name} ${s.status}`),
    ).toEqual(['floor ok', 'lock interrupted', 'release released', 'lock acquired']);
    expect(readFileSync(join(dir, 'runs'), 'utf8')).toBe('run\n');
  });

  it('the launch wrapper starts nothing under a lock that was taken over (moved aside) before it got going', () => {
    const dir = home();
    const p = join(dir, '.wavegate/profiles/p');
    for (const name of ['apply.lock', 'last-apply']) mkdirSync(join(p, name), { recursive: true });
    const wrap = (cwd: string) =>
      spawnSync('/bin/sh', ['-c', APPLY_WRAPPER, 'wavegate-apply', 'echo run >> "$HOME/runs"'], {
        cwd,
        env: { PATH: process.env.PATH, HOME: dir },
        encoding: 'utf8',
      });
    wrap(join(p, 'last-apply'));
    expect(existsSync(join(dir, 'runs'))).toBe(false);
    expect(readFileSync(join(p, 'last-apply/out'), 'utf8')).toContain('not started: its apply lock was taken over');
    expect(existsSync(join(p, 'last-apply/exitcode'))).toBe(false);
    wrap(join(p, 'apply.lock'));
    expect(readFileSync(join(dir, 'runs'), 'utf8')).toBe('run\n');
    expect(readFileSync(join(p, 'apply.lock/exitcode'), 'utf8')).toBe('0\n');
  });

  it('payload not staged: stops under the lock with stage needed; once staged the rerun goes on without verifying first again', () => {
    const dir = home();
    const body = 'payload\n';
    const sha = createHash('sha256').update(body).digest('hex');
    const withPayload = input({ payload: [{ name: 'f', sha256: sha, size: body.length }] });
    const first = run(dir, applyScript(withPayload));
    expect(readApplyReport(first.stdout, 'apply').kind).toBe('stage-needed');
    expect(existsSync(join(dir, '.wavegate/profiles/p/apply.lock/owner'))).toBe(true);
    mkdirSync(join(dir, '.wavegate/staging/p/4'), { recursive: true });
    writeFileSync(join(dir, '.wavegate/staging/p/4/f'), body);
    const second = run(dir, applyScript({ ...withPayload, afterStage: true, holder: { ...holder, attempt: 1 } }));
    expect(parseReportLines(second.stdout).steps.map((s) => `${s.name} ${s.status}`)).toEqual([
      'floor ok',
      'lock ours',
      'stage present',
      'launch launched',
      'apply 0',
      'verify 0',
      'marker written',
      'release released',
    ]);
  });

  it('streamed payload: the files on stdin are cut by their signed sizes, written and checked in the same run; a bad stream stops with stage needed', () => {
    const dir = home();
    const a = Buffer.from('first file\n');
    const b = Buffer.from([0, 1, 2, 255, 10, 0]);
    const digest = (x: Buffer) => createHash('sha256').update(x).digest('hex');
    const payload = [
      { name: 'a.txt', sha256: digest(a), size: a.length },
      { name: 'b.bin', sha256: digest(b), size: b.length },
    ];
    const res = run(dir, applyScript(input({ payload, streamed: true })), Buffer.concat([a, b]));
    expect(parseReportLines(res.stdout).steps.map((s) => `${s.name} ${s.status}`)).toEqual([
      'floor ok',
      'lock acquired',
      'verify-first 1',
      'stage streamed',
      'launch launched',
      'apply 0',
      'verify 0',
      'marker written',
      'release released',
    ]);
    expect(readFileSync(join(dir, '.wavegate/staging/p/4/b.bin'))).toEqual(b);
    expect(existsSync(join(dir, '.wavegate/staging/p/4/.wavegate-stream'))).toBe(false);

    const other = home();
    const bad = run(other, applyScript(input({ payload, streamed: true })), Buffer.concat([b, a]));
    expect(readApplyReport(bad.stdout, 'apply').kind).toBe('stage-needed');
    expect(existsSync(join(other, 'runs'))).toBe(false);
  });
});
