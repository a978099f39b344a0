import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DeviceTarget } from '../../core/rollout-state';
import { applyToDevice, EnvelopeRejected, StepFailed, TransportError, type RevisionSteps } from '../../device/steps';
import { startFleet, type Fleet } from '../../sim';
import { scratchDir } from '../support/harness';
import { rejection } from '../support/refusal';

/**
 * One connection and ONE remote command per device apply (issue 12 item 1), against the fleet
 * simulator, which records every exec: each step's semantic is kept, read from the device's files
 * (`$HOME/runs` counts the applies that really ran), not from the worker's word.
 */
describe('the single-command apply keeps every step semantic', () => {
  const scratch = scratchDir('apply-unit');
  let fleet: Fleet;
  const ids = [
    'fresh',
    'in-place',
    'apply-fails',
    'verify-fails',
    'unprovable',
    'mismatch',
    'payload',
    'refused',
    'cut',
  ];
  const profilesRoot = join(scratch.dir, 'profiles');
  const body = 'signed payload\n';
  const sha = createHash('sha256').update(body).digest('hex');

  const target = (id: string): DeviceTarget => {
    const d = fleet.device(id);
    return {
      id,
      host: d.host,
      port: d.port,
      user: fleet.user,
      pool: 'p',
      class: 'server',
      ssh: { hostKey: d.hostKeyFingerprint, key: fleet.clientKeyPath },
    };
  };
  const steps = (over: Partial<RevisionSteps> = {}): RevisionSteps => ({
    profile: 'unit',
    revision: 2,
    apply: 'echo run >> "$HOME/runs" && touch "$HOME/fact-2"',
    verify: 'test -f "$HOME/fact-2"',
    payload: [],
    ...over,
  });
  const runs = (id: string): number => {
    const file = join(fleet.device(id).sandbox, 'runs');
    return existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean).length : 0;
  };
  const profileFile = (id: string, rel: string) => join(fleet.device(id).sandbox, '.wavegate/profiles/unit', rel);
  const opts = { commandTimeoutMs: 20_000, profilesRoot: profilesRoot, heartbeatIntervalMs: 200 };
  const failure = (p: Promise<unknown>) => rejection(p, Error);

  beforeAll(async () => {
    fleet = await startFleet({ devices: ids.map((id) => ({ id })), dir: join(scratch.dir, 'fleet') });
    const file = join(profilesRoot, 'unit', 'payload', 'file.txt');
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(file, body);
    writeFileSync(join(profilesRoot, 'unit', 'payload', 'forged.txt'), body.replace('signed', 'forged'));
  });
  afterAll(async () => {
    await fleet?.stop();
    scratch.cleanup();
  });

  it('a fresh apply of a revision without payload is exactly one exec on the device, and so is the next one that finds it in place', async () => {
    const result = await applyToDevice(target('fresh'), steps(), opts);
    expect(result).toEqual({ device: 'fresh', outcome: 'applied', steps: ['verify', 'apply', 'verify', 'marker'] });
    expect(fleet.commands('fresh')).toHaveLength(1);
    expect(runs('fresh')).toBe(1);
    expect(readFileSync(profileFile('fresh', 'revision'), 'utf8')).toBe('2\n');
    expect(readFileSync(profileFile('fresh', 'last-apply/released'), 'utf8')).toBe(
      'apply of r2 done: verified, marker written\n',
    );

    const again = await applyToDevice(target('fresh'), steps(), opts);
    expect(again).toEqual({ device: 'fresh', outcome: 'already-applied', steps: ['verify', 'marker'] });
    expect(fleet.commands('fresh')).toHaveLength(2);
    expect(runs('fresh')).toBe(1);
  });

  it('already in place: one exec, nothing applied, the marker written and the lock released as verify only', async () => {
    writeFileSync(join(await fleet.ensureSandbox('in-place'), 'fact-2'), '');
    const result = await applyToDevice(target('in-place'), steps(), opts);
    expect(result).toEqual({ device: 'in-place', outcome: 'already-applied', steps: ['verify', 'marker'] });
    expect(fleet.commands('in-place')).toHaveLength(1);
    expect(runs('in-place')).toBe(0);
    expect(readFileSync(profileFile('in-place', 'revision'), 'utf8')).toBe('2\n');
    expect(readFileSync(profileFile('in-place', 'last-apply/released'), 'utf8')).toBe(
      'r2 already in place (verify only)\n',
    );
  });

  it('apply fails: StepFailed apply with its exit code and output, no marker, the lock released with the exit', async () => {
    const err = await failure(
      applyToDevice(
        target('apply-fails'),
        steps({ apply: 'echo run >> "$HOME/runs"; echo "disk full" >&2; exit 3' }),
        opts,
      ),
    );
    expect(err).toBeInstanceOf(StepFailed);
    expect((err as StepFailed).step).toBe('apply');
    expect((err as StepFailed).result.code).toBe(3);
    expect(err.message).toMatch(/^apply-fails: apply exited 3: .*disk full/s);
    expect(fleet.commands('apply-fails')).toHaveLength(1);
    expect(runs('apply-fails')).toBe(1);
    expect(existsSync(profileFile('apply-fails', 'revision'))).toBe(false);
    expect(existsSync(profileFile('apply-fails', 'apply.lock'))).toBe(false);
    expect(readFileSync(profileFile('apply-fails', 'last-apply/released'), 'utf8')).toBe('apply exited 3\n');
  });

  it('verify fails after the apply: StepFailed verify, no marker, the lock released with the verify exit', async () => {
    const err = await failure(
      applyToDevice(
        target('verify-fails'),
        steps({ apply: 'echo run >> "$HOME/runs"', verify: 'echo "fact-2 missing"; false' }),
        opts,
      ),
    );
    expect(err).toBeInstanceOf(StepFailed);
    expect((err as StepFailed).step).toBe('verify');
    expect(err.message).toContain('fact-2 missing');
    expect(fleet.commands('verify-fails')).toHaveLength(1);
    expect(runs('verify-fails')).toBe(1);
    expect(existsSync(profileFile('verify-fails', 'revision'))).toBe(false);
    expect(readFileSync(profileFile('verify-fails', 'last-apply/released'), 'utf8')).toBe(
      'verify after apply exited 1\n',
    );
  });

  it('a non-provable revision (a verify forced to succeed) runs as before: verify first says in place, nothing is applied (the workflow records it claimed)', async () => {
    const result = await applyToDevice(target('unprovable'), steps({ verify: 'test -f "$HOME/fact-2" || true' }), opts);
    expect(result).toEqual({ device: 'unprovable', outcome: 'already-applied', steps: ['verify', 'marker'] });
    expect(runs('unprovable')).toBe(0);
    expect(fleet.commands('unprovable')).toHaveLength(1);
  });

  it('a payload file that does not match its signed digest is refused before the device is contacted', async () => {
    const err = await failure(
      applyToDevice(
        target('mismatch'),
        steps({ payload: [{ name: 'file.txt', sha256: sha, size: body.length, source: 'payload/forged.txt' }] }),
        opts,
      ),
    );
    expect(err).toBeInstanceOf(EnvelopeRejected);
    expect((err as EnvelopeRejected).reason).toBe('PAYLOAD_DIGEST_MISMATCH');
    expect(fleet.commands('mismatch')).toHaveLength(0);
    expect(fleet.sftpUploads('mismatch')).toBe(0);
  });

  it('a payload revision: a small payload is streamed in the one exec; above the stream limit it is uploaded by SFTP; a device that has it staged is one exec and no upload', async () => {
    const payload = [{ name: 'file.txt', sha256: sha, size: body.length, source: 'payload/file.txt' }];
    const install = 'echo run >> "$HOME/runs" && cp "$WAVEGATE_STAGING/file.txt" "$HOME/fact-2"';
    const first = await applyToDevice(target('payload'), steps({ payload, apply: install }), opts);
    expect(first).toEqual({
      device: 'payload',
      outcome: 'applied',
      steps: ['verify', 'stage', 'apply', 'verify', 'marker'],
    });
    expect(fleet.commands('payload')).toHaveLength(1);
    expect(fleet.sftpUploads('payload')).toBe(0);
    expect(readFileSync(join(fleet.device('payload').sandbox, 'fact-2'), 'utf8')).toBe(body);

    // Revision 4, over the stream limit: the script stops (stage needed), SFTP upload and its digest check, the script again.
    fleet.resetCounters();
    const big = await applyToDevice(
      target('payload'),
      steps({ revision: 4, payload, apply: install.replace('fact-2', 'fact-4'), verify: 'test -f "$HOME/fact-4"' }),
      { ...opts, streamPayloadMaxBytes: 0 },
    );
    expect(big).toEqual({
      device: 'payload',
      outcome: 'applied',
      steps: ['verify', 'stage', 'apply', 'verify', 'marker'],
    });
    expect(fleet.commands('payload')).toHaveLength(4);
    expect(fleet.sftpUploads('payload')).toBe(1);
    expect(runs('payload')).toBe(2);

    // Revision 3 with the same file already staged under its own directory: one exec, no upload.
    const staged = join(fleet.device('payload').sandbox, '.wavegate/staging/unit/3');
    mkdirSync(staged, { recursive: true });
    writeFileSync(join(staged, 'file.txt'), body);
    fleet.resetCounters();
    const next = await applyToDevice(
      target('payload'),
      steps({ revision: 3, payload, apply: install.replace('fact-2', 'fact-3'), verify: 'test -f "$HOME/fact-3"' }),
      opts,
    );
    expect(next).toEqual({
      device: 'payload',
      outcome: 'applied',
      steps: ['verify', 'stage', 'apply', 'verify', 'marker'],
    });
    expect(fleet.commands('payload')).toHaveLength(1);
    expect(fleet.sftpUploads('payload')).toBe(0);
    expect(runs('payload')).toBe(3);
  });

  it('a script the device refuses as a whole is the apply saying no; a session cut before the report ends is dropped, and the retry reattaches', async () => {
    await fleet.setFaults('refused', { failCommand: 'WAVEGATE-STEP' });
    const no = await failure(applyToDevice(target('refused'), steps(), opts));
    expect(no).toBeInstanceOf(StepFailed);
    expect(no.message).toMatch(/^refused: apply exited 1: simulated failure/);
    expect(runs('refused')).toBe(0);

    // The script runs, and the connection dies under it while the apply sleeps: no report, no guess.
    await fleet.setFaults('cut', { dropConnection: 'WAVEGATE-STEP', dropAfterMs: 400 });
    const slow = steps({ apply: 'echo run >> "$HOME/runs" && sleep 2 && touch "$HOME/fact-2"' });
    const cut = await failure(
      applyToDevice(target('cut'), slow, { ...opts, holder: { rollout: 'r', run: 'u', activity: '1', attempt: 1 } }),
    );
    expect(cut).toBeInstanceOf(TransportError);
    expect((cut as TransportError).kind).toBe('dropped');
    await fleet.setFaults('cut', {});
    const retry = await applyToDevice(target('cut'), slow, {
      ...opts,
      holder: { rollout: 'r', run: 'u', activity: '1', attempt: 2 },
    });
    expect(retry).toEqual({ device: 'cut', outcome: 'applied', steps: ['reattach', 'verify', 'marker'] });
    expect(runs('cut')).toBe(1);
  });
});
