import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import * as net from 'node:net';
import { join } from 'node:path';
import { WorkflowUpdateFailedError } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DeviceTarget } from '../../core/rollout-state';
import { applyToDevice } from '../../device/steps';
import { connectDevice, StepFailed, TransportError } from '../../device/transport';
import { startDevServerEnv } from '../../workers/dev-server';
import { approveUpdate, resumeUpdate } from '../../contracts/rollout';
import { approvalStatement, startStatement } from '../../cli/operator-statement';
import { keyPairFromSeed, pinOf } from '../../core/signing';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { rolloutWorkflow, type RolloutInput } from '../../workflows/rollout';
import { demoRolloutInput, scratchDir, startTestWorker } from '../support/harness';
import { waitForStatus } from '../support/rollout-helpers';
import { rejection } from '../support/refusal';
import { until } from '../support/until';
import { startSshdFleet, type SshdDevice, type SshdFleet } from '../support/sshd';

const MARKER = '.wavegate/profiles/demo/revision';
const MOTD_R2 = 'wavegate demo revision 2 - rolled out in phases, gated and audited';

/** Connections sshd accepted, from its VERBOSE log. */
const accepted = (d: SshdDevice): number => (d.log().match(/Accepted publickey for /g) ?? []).length;
/** `direct-tcpip` tunnels the jump host opened to `port` (sshd logs them at DEBUG1). */
const tunnelsTo = (jump: SshdDevice, port: number): number =>
  (
    jump
      .log()
      .match(new RegExp(`server_request_direct_tcpip: originator .* target 127\\.0\\.0\\.1 port ${port}\\b`, 'g')) ?? []
  ).length;

describe('a rollout over real OpenSSH sshd devices on loopback', () => {
  const scratch = scratchDir('openssh');
  // The two-person rule's people: alice starts the rollout, bob approves its canary (approvers.yaml of the worker's root).
  const alice = keyPairFromSeed(new Uint8Array(createHash('sha256').update(`alice-${process.pid}`).digest()));
  const bob = keyPairFromSeed(new Uint8Array(createHash('sha256').update(`bob-${process.pid}`).digest()));
  const profilesRoot = join(scratch.dir, 'profiles');
  let env: TestWorkflowEnvironment;
  let sshd: SshdFleet;
  let inventoryPath: string;
  let input: RolloutInput;

  const target = (d: SshdDevice, ssh: Partial<DeviceTarget['ssh']> = {}): DeviceTarget => ({
    id: d.id,
    host: d.host,
    port: d.port,
    user: d.user,
    pool: 'lab',
    class: 'server',
    ssh: { hostKey: d.hostKeyFingerprint, key: sshd.clientKeyPath, ...ssh },
  });

  beforeAll(async () => {
    [env, sshd] = await Promise.all([
      startDevServerEnv(),
      startSshdFleet({ dir: join(scratch.dir, 'sshd'), ids: ['ssh-a', 'ssh-b', 'ssh-c', 'ssh-bad', 'ssh-d'] }),
    ]);
    const [a, b, c, bad] = ['ssh-a', 'ssh-b', 'ssh-c', 'ssh-bad'].map((id) => sshd.device(id)) as [
      SshdDevice,
      SshdDevice,
      SshdDevice,
      SshdDevice,
    ];
    const device = (d: SshdDevice, cls: string, ssh: Record<string, unknown>) => ({
      id: d.id,
      host: d.host,
      port: d.port,
      class: cls,
      labels: { site: 'lab' },
      ssh,
    });
    inventoryPath = join(scratch.dir, 'inventory.yaml');
    writeFileSync(
      inventoryPath,
      stringify({
        pools: { lab: { disruptionBudget: 1 } },
        defaults: { user: sshd.user, pool: 'lab', runtimes: ['motd'], ssh: { key: sshd.clientKeyPath } },
        devices: [
          device(a, 'server', { hostKey: a.hostKeyFingerprint }),
          device(b, 'server', { hostKey: b.hostKeyFingerprint }),
          // Reached through ssh-a as its jump host, each hop with its own pinned key.
          device(c, 'desktop', {
            hostKey: c.hostKeyFingerprint,
            jumpHost: { host: a.host, port: a.port, user: sshd.user, hostKey: a.hostKeyFingerprint },
          }),
          // Pinned to another device's key: whatever answers on that port is not the device we know.
          device(bad, 'server', { hostKey: a.hostKeyFingerprint }),
        ],
      }),
    );
    const specPath = join(scratch.dir, 'rollout.yaml');
    writeFileSync(
      specPath,
      stringify({
        rollout: {
          profile: 'demo',
          fromRevision: 1,
          toRevision: 2,
          phases: [
            { canary: '1 device', gate: 'manual', healthGate: ['all-runtimes-healthy', 'error-rate < 0.01'] },
            { bulk: 'remainder', gateMs: 500 },
          ],
          rollback: { on: 'healthGate-fail' },
          approval: { required: 1, notBy: 'starter' },
        },
      }),
    );
    input = demoRolloutInput(specPath, inventoryPath, 'rollout:demo-openssh');
    cpSync(join(PROJECT_ROOT, 'profiles', 'demo'), join(profilesRoot, 'demo'), { recursive: true });
    const keys = [pinOf(alice, 'alice'), pinOf(bob, 'bob')].map((p) => ({ ...p, role: 'approver' }));
    writeFileSync(join(profilesRoot, 'demo', 'approvers.yaml'), stringify({ keys }));
  });
  afterAll(async () => {
    await sshd?.stop();
    await env?.teardown();
    scratch.cleanup();
  });

  it('our fingerprints are the ones OpenSSH prints (ssh-keygen -lf)', () => {
    for (const d of sshd.devices) {
      const res = spawnSync('ssh-keygen', ['-l', '-E', 'sha256', '-f', d.hostKeyPubPath], { encoding: 'utf8' });
      expect(res.status, res.stderr).toBe(0);
      expect(res.stdout.split(/\s+/)[1]).toBe(d.hostKeyFingerprint);
    }
  });

  it('applies r2 through Temporal to every sshd device (one via a jump host) and refuses the host-key mismatch; the starter cannot approve its canary', async () => {
    const worker = await startTestWorker(env, { profilesRoot });
    try {
      const handle = await env.client.workflow.start(rolloutWorkflow, {
        workflowId: input.rolloutId,
        taskQueue: worker.taskQueue,
        args: [{ ...input, startStatement: startStatement(alice, input.rolloutId) }],
      });
      // The canary waits at its manual gate under approval: { required: 1, notBy: starter }: alice's own
      // signed approval is refused, bob's moves it on.
      const waiting = await waitForStatus(handle, (s) => s.phases[0]?.stage === 'awaiting-approval', 90_000);
      const at = { rolloutId: input.rolloutId, runId: (await handle.describe()).runId, phase: waiting.phases[0]!.name };
      const approve = (pair: typeof alice) =>
        handle.executeUpdate(approveUpdate, { args: [{ by: 'bob', statement: approvalStatement(pair, at) }] });
      const own = await rejection(approve(alice), WorkflowUpdateFailedError);
      expect(own.cause?.message).toBe('alice started this rollout, and approval.notBy: starter');
      await approve(bob);
      // The host-key refusal is a failure, not an offline device: the bulk phase's failure gate trips and
      // the rollout pauses for an operator (rollback.on is healthGate-fail); resumed, it completes.
      const paused = await waitForStatus(handle, (s) => s.state === 'paused', 90_000);
      expect(paused.pausedReason).toMatch(/^failure-gate: 1 of \d+ devices failed/);
      await handle.executeUpdate(resumeUpdate, { args: [{ by: 'test' }] });
      const result = await handle.result();
      expect(result.state).toBe('completed');
      for (const id of ['ssh-a', 'ssh-b', 'ssh-c']) {
        expect(
          result.devices.find((d) => d.id === id),
          id,
        ).toMatchObject({ state: 'applied' });
        const d = sshd.device(id);
        expect(readFileSync(join(d.home, MARKER), 'utf8').trim()).toBe('2');
        expect(readFileSync(join(d.home, 'etc/motd'), 'utf8').trim()).toBe(MOTD_R2);
        expect(readFileSync(join(d.home, '.wavegate/staging/demo/2/motd'), 'utf8').trim()).toBe(MOTD_R2);
      }
      // ssh-c's session came through a tunnel ssh-a opened to it: its apply (the snapshot reads the
      // membership only, and its floor rose within the apply's own command).
      expect(tunnelsTo(sshd.device('ssh-a'), sshd.device('ssh-c').port)).toBeGreaterThanOrEqual(1);

      const bad = result.devices.find((d) => d.id === 'ssh-bad')!;
      expect(bad.state).toBe('failed');
      expect(bad.reason).toMatch(
        /^refused at snapshot \(host-key\): .*host key SHA256:\S+ .*does not match the pinned/,
      );
      // Refused during key exchange: the device never saw a login, let alone a command.
      expect(accepted(sshd.device('ssh-bad'))).toBe(0);
      expect(existsSync(join(sshd.device('ssh-bad').home, '.wavegate'))).toBe(false);
    } finally {
      await worker.stop();
    }
  });

  describe('the transport alone, against sshd', () => {
    it('reaches a device through a jump host: both keys pinned, payload over SFTP, marker in the device home', async () => {
      const a = sshd.device('ssh-a');
      const d = sshd.device('ssh-d');
      const tunnelsBefore = tunnelsTo(a, d.port);
      const beats: string[] = [];
      const result = await applyToDevice(
        target(d, { jumpHost: { host: a.host, port: a.port, user: a.user, hostKey: a.hostKeyFingerprint } }),
        input.steps,
        // Never streamed in the apply's command: the device lacks the payload, so it goes by SFTP.
        { commandTimeoutMs: 30_000, heartbeat: (x) => beats.push(x), streamPayloadMaxBytes: 0 },
      );
      expect(result).toEqual({
        device: 'ssh-d',
        outcome: 'applied',
        steps: ['verify', 'stage', 'apply', 'verify', 'marker'],
      });
      expect(readFileSync(join(d.home, MARKER), 'utf8').trim()).toBe('2');
      expect(tunnelsTo(a, d.port)).toBe(tunnelsBefore + 1);
      // The steps in order (the clock repeats the current one every second; a running apply reports its
      // time): the unit's script, which stops for the payload, the SFTP upload, the script again.
      const stepsBeaten = beats.filter((b, i) => b !== beats[i - 1] && !/ running \d+s$/.test(b));
      expect(stepsBeaten).toEqual(['connect', 'apply', 'stage', 'staged motd', 'apply']);
    });

    it('an apply runs detached under sshd: the connection is cut mid-apply, the apply runs on to its end, and the retry reattaches to it (it ran once)', async () => {
      const b = sshd.device('ssh-b');
      const profilesRoot = join(scratch.dir, 'unsigned-profiles');
      const steps = {
        profile: 'detached',
        revision: 1,
        apply:
          'echo run >> "$HOME/detached-runs" && sleep 3 && echo "finished after the cut" && touch "$HOME/detached-done"',
        verify: 'test -f "$HOME/detached-done"',
        payload: [],
      };
      const holder = { rollout: 'rollout:openssh-detached', run: 'run-1', activity: '1', attempt: 1 };
      const cut = new AbortController();
      const first = await rejection(
        applyToDevice(target(b), steps, {
          commandTimeoutMs: 30_000,
          profilesRoot: profilesRoot,
          holder,
          heartbeatIntervalMs: 200,
          signal: cut.signal,
          heartbeat: (beat) => {
            if (/^apply running/.test(beat)) cut.abort(); // the worker's connection goes away mid-apply
          },
        }),
        TransportError,
      );
      expect(first).toBeInstanceOf(TransportError);
      expect(first?.kind).toBe('dropped');
      expect(existsSync(join(b.home, 'detached-done'))).toBe(false); // cut before the apply was done

      const retry = await applyToDevice(target(b), steps, {
        commandTimeoutMs: 30_000,
        profilesRoot: profilesRoot,
        holder: { ...holder, attempt: 2 },
        heartbeatIntervalMs: 200,
      });
      expect(retry).toEqual({ device: 'ssh-b', outcome: 'applied', steps: ['reattach', 'verify', 'marker'] });
      expect(readFileSync(join(b.home, 'detached-runs'), 'utf8')).toBe('run\n');
      const last = join(b.home, '.wavegate/profiles/detached/last-apply');
      expect(readFileSync(join(last, 'exitcode'), 'utf8').trim()).toBe('0');
      expect(readFileSync(join(last, 'out'), 'utf8')).toBe('finished after the cut\n');
      expect(readFileSync(join(last, 'owner'), 'utf8')).toMatch(/^attempt=2$/m);
      expect(readFileSync(join(b.home, '.wavegate/profiles/detached/revision'), 'utf8')).toBe('1\n');
    });

    it('one command per apply under sshd: a fresh apply with its payload streamed, in place, apply fails, verify fails after apply', async () => {
      const a = sshd.device('ssh-a');
      const profilesRoot = join(scratch.dir, 'single-profiles');
      const body = 'single payload\n';
      mkdirSync(join(profilesRoot, 'single', 'payload'), { recursive: true });
      writeFileSync(join(profilesRoot, 'single', 'payload', 'file.txt'), body);
      const payload = [
        {
          name: 'file.txt',
          sha256: createHash('sha256').update(body).digest('hex'),
          size: body.length,
          source: 'payload/file.txt',
        },
      ];
      const steps = (revision: number, apply: string, verify: string) => ({
        profile: 'single',
        revision,
        apply,
        verify,
        payload,
      });
      /** exec requests sshd answered (its DEBUG1 log names each channel request). */
      const execs = () => (a.log().match(/request exec reply/g) ?? []).length;
      const opts = { commandTimeoutMs: 30_000, profilesRoot: profilesRoot };
      const lockDir = join(a.home, '.wavegate/profiles/single');

      let before = execs();
      const fresh = await applyToDevice(
        target(a),
        steps(
          1,
          'echo run >> "$HOME/single-runs" && cp "$WAVEGATE_STAGING/file.txt" "$HOME/single-1"',
          'cmp -s "$HOME/single-1" "$WAVEGATE_STAGING/file.txt"',
        ),
        opts,
      );
      expect(fresh).toEqual({
        device: 'ssh-a',
        outcome: 'applied',
        steps: ['verify', 'stage', 'apply', 'verify', 'marker'],
      });
      await until('sshd logs the exec', async () => (execs() - before >= 1 ? true : undefined), 10_000);
      expect(execs() - before).toBe(1);
      expect(readFileSync(join(a.home, 'single-1'), 'utf8')).toBe(body);
      expect(readFileSync(join(lockDir, 'revision'), 'utf8')).toBe('1\n');

      before = execs();
      const again = await applyToDevice(
        target(a),
        steps(1, 'echo run >> "$HOME/single-runs"', 'cmp -s "$HOME/single-1" "$WAVEGATE_STAGING/file.txt"'),
        opts,
      );
      expect(again).toEqual({ device: 'ssh-a', outcome: 'already-applied', steps: ['verify', 'marker'] });
      await until('sshd logs the exec', async () => (execs() - before >= 1 ? true : undefined), 10_000);
      expect(execs() - before).toBe(1);
      expect(readFileSync(join(a.home, 'single-runs'), 'utf8')).toBe('run\n');

      const failed = await rejection(
        applyToDevice(target(a), steps(2, 'echo "no space left" >&2; exit 5', 'test -f "$HOME/single-2"'), opts),
        StepFailed,
      );
      expect(failed).toBeInstanceOf(StepFailed);
      expect((failed as StepFailed).step).toBe('apply');
      expect((failed as StepFailed).message).toMatch(/apply exited 5: .*no space left/s);
      expect(readFileSync(join(lockDir, 'last-apply/released'), 'utf8')).toBe('apply exited 5\n');

      const unverified = await rejection(
        applyToDevice(target(a), steps(3, 'echo run >> "$HOME/single-runs"', 'test -f "$HOME/single-3"'), opts),
        StepFailed,
      );
      expect((unverified as StepFailed).step).toBe('verify');
      expect(readFileSync(join(a.home, 'single-runs'), 'utf8')).toBe('run\nrun\n');
      expect(readFileSync(join(lockDir, 'revision'), 'utf8')).toBe('1\n');
      expect(readFileSync(join(lockDir, 'last-apply/released'), 'utf8')).toBe('verify after apply exited 1\n');
    });

    it('a wrong jump host key is refused as host-key before the device is contacted', async () => {
      const a = sshd.device('ssh-a');
      const d = sshd.device('ssh-d');
      const before = accepted(d);
      const err = await rejection(
        connectDevice(
          target(d, { jumpHost: { host: a.host, port: a.port, user: a.user, hostKey: d.hostKeyFingerprint } }),
        ),
        TransportError,
      );
      expect(err).toBeInstanceOf(TransportError);
      expect(err!.kind).toBe('host-key');
      expect(err!.message).toContain(`via jump host 127.0.0.1:${a.port}`);
      expect(accepted(d)).toBe(before);
    });

    it('a device the jump host cannot reach is a retryable connect error; a wrong device key behind the jump is host-key', async () => {
      const a = sshd.device('ssh-a');
      const d = sshd.device('ssh-d');
      const jumpHost = { host: a.host, port: a.port, user: a.user, hostKey: a.hostKeyFingerprint };
      const closedPort = await new Promise<number>((resolve) => {
        const srv = net.createServer();
        srv.listen(0, '127.0.0.1', () => {
          const port = (srv.address() as net.AddressInfo).port;
          srv.close(() => resolve(port));
        });
      });
      const unreachable = await rejection(
        connectDevice({ ...target(d, { jumpHost }), port: closedPort }),
        TransportError,
      );
      expect(unreachable?.kind).toBe('connect');
      expect(unreachable?.retryable).toBe(true);
      expect(unreachable?.message).toContain(`the jump host cannot reach 127.0.0.1:${closedPort}`);

      const wrongKey = await rejection(
        connectDevice(target(d, { jumpHost, hostKey: a.hostKeyFingerprint })),
        TransportError,
      );
      expect(wrongKey?.kind).toBe('host-key');
      expect(wrongKey?.retryable).toBe(false);
    });

    it('sshd dropping the connection mid-command is `dropped`; a command timeout is `timeout` and the session survives', async () => {
      const b = sshd.device('ssh-b');
      const session = await connectDevice(target(b));
      try {
        const timedOut = await rejection(session.exec('sleep 30', { timeoutMs: 300 }), TransportError);
        expect(timedOut?.kind).toBe('timeout');
        expect((await session.exec('echo "$HOME"')).stdout.trim()).toBe(b.home);
        // Kill this session's own sshd process (the parent of the shell running the command).
        const dropped = await rejection(session.exec('kill -9 $PPID; sleep 5'), TransportError);
        expect(dropped?.kind).toBe('dropped');
        expect(dropped?.retryable).toBe(true);
      } finally {
        session.close();
      }
    });
  });
});
