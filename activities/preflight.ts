import { join } from 'node:path';
import { utils as sshUtils } from 'ssh2';
import { WavegateError } from '../core/errors';
import type { Envelope } from '../core/signing';
import { readText } from '../intake/files';
import type { SshFileProblem, SshFilesQuestion } from '../core/ssh-files';
import { knownHostFingerprints } from '../intake/known-hosts';
import type { RevisionSteps } from '../core/rollout/input';
import type { Dependency } from '../core/dependencies';
import { openDependency } from '../device/dependencies';
import {
  CHECKOUT_PROFILES_ROOT,
  EnvelopeRejected,
  loadWorkerTrust,
  signedSteps,
  type VerifiedSteps,
} from '../device/steps';
import { PayloadRefused, readPayload } from '../device/payload-file';

/**
 * What `start` asks a worker before it starts a rollout: would you run these envelopes? The rollout's
 * target steps and its way back, as the workflow will hand them to `applyRevision` (public content only).
 */
export interface WorkerContentInput {
  profile: string;
  revision: number;
  envelope?: Envelope;
  /** The way back (fromRevision's steps): its envelope, and the target's envelope when its `rollback` command is the way. */
  rollback?: { revision: number; envelope?: Envelope; rollbackOf?: Envelope };
  /** The spec's `after`: the worker must hold each dependency's revision (signed, under its pins) to verify it on devices. */
  after?: Dependency[];
  /** The SSH files the rollout's devices name: the worker reads them at connect, so it says now whether it can. */
  ssh?: SshFilesQuestion;
}

export type { SshFileProblem, SshFilesQuestion };

export type WorkerContentAnswer =
  | { ok: true; worker: string; ssh?: SshFileProblem[] }
  | { ok: false; reason: string; message: string; worker: string; ssh?: SshFileProblem[] };

export interface PreflightDeps {
  /** The worker's profiles root, as `applyRevision` reads it. */
  profilesRoot?: string;
  allowUnsigned?: boolean;
  /** The worker's identity (as Temporal knows it), named in every answer. */
  identity: string;
}

/** Steps without commands: only the envelopes (and the payload entries inside them) are checked. */
function stepsFor(
  profile: string,
  revision: number,
  envelope: Envelope | undefined,
  rollbackOf?: Envelope,
): RevisionSteps {
  return {
    profile,
    revision,
    apply: '',
    verify: '',
    payload: [],
    ...(envelope ? { envelope } : {}),
    ...(rollbackOf ? { rollbackOf } : {}),
  };
}

/** Every payload file of verified steps read against its signed size and digest (PayloadRefused otherwise). */
function payloadBytes(steps: VerifiedSteps): void {
  for (const file of steps.payload) readPayload(file.source, file);
}

/** Why a file could not be read: the reader's words (which never quote content) or the system's code. */
function unreadable(err: unknown): string {
  if (err instanceof WavegateError) return err.message;
  return `cannot read file (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`;
}

/**
 * The SSH files as the transport will read them at connect (device/transport/ssh.ts: the bounded
 * reader, known_hosts pins by host:port, the agent's socket from the environment), judged now. The answer
 * names the field, the path and what is wrong, never what the file holds: a key file that is no private
 * key is "not an SSH private key", whatever it is.
 */
export function checkSshFiles(question: SshFilesQuestion, env: NodeJS.ProcessEnv = process.env): SshFileProblem[] {
  const problems: SshFileProblem[] = [];
  for (const path of question.keys) {
    let text: string;
    try {
      text = readText(path);
    } catch (err) {
      problems.push({ field: 'ssh.key', path, problem: unreadable(err) });
      continue;
    }
    const parsed = sshUtils.parseKey(text);
    const key = Array.isArray(parsed) ? parsed[0] : parsed;
    if (!key || key instanceof Error || !key.isPrivateKey())
      problems.push({
        field: 'ssh.key',
        path,
        problem: `${path}: not an SSH private key the worker can use (an OpenSSH or PEM private key without a passphrase)`,
      });
  }
  for (const { path, hosts } of question.knownHosts) {
    try {
      const unlisted = hosts.filter((at) => {
        const colon = at.lastIndexOf(':');
        return knownHostFingerprints(path, at.slice(0, colon), Number(at.slice(colon + 1))).length === 0;
      });
      if (unlisted.length)
        problems.push({
          field: 'ssh.knownHosts',
          path,
          problem: `${path}: lists no key for these hosts`,
          hosts: unlisted,
        });
    } catch (err) {
      problems.push({ field: 'ssh.knownHosts', path, problem: unreadable(err) });
    }
  }
  if (question.agent && !env.SSH_AUTH_SOCK)
    problems.push({ field: 'ssh.agent', problem: "SSH_AUTH_SOCK is not set in the worker's environment" });
  return problems;
}

export function createPreflightActivities(deps: PreflightDeps) {
  const profilesRoot = deps.profilesRoot ?? CHECKOUT_PROFILES_ROOT;
  return {
    /**
     * Whether this worker would run the rollout's content: the same verification `applyRevision` does
     * before it contacts a device (its own pins, signature threshold, expiry, profile and revision, the
     * rollback pairing, the payload files under its own root). Contacts no device; a refusal is an
     * answer, not a failure.
     */
    async checkWorkerContent(input: WorkerContentInput): Promise<WorkerContentAnswer> {
      const worker = deps.identity;
      const ssh = input.ssh ? { ssh: checkSshFiles(input.ssh) } : {};
      try {
        const opts = {
          trust: loadWorkerTrust(profilesRoot, input.profile),
          requireEnvelope: !deps.allowUnsigned,
          now: Date.now(),
          profilesRoot,
        };
        // Each payload file read whole against its signed digest, as the apply will (a file edited to
        // the same size passes the size check signedSteps makes and would fail on every device).
        payloadBytes(signedSteps(stepsFor(input.profile, input.revision, input.envelope), opts));
        if (input.rollback)
          payloadBytes(
            signedSteps(
              stepsFor(input.profile, input.rollback.revision, input.rollback.envelope, input.rollback.rollbackOf),
              opts,
            ),
          );
        for (const dep of input.after ?? [])
          openDependency(dep, { profilesRoot, requireEnvelope: !deps.allowUnsigned });
        return { ok: true, worker, ...ssh };
      } catch (caught) {
        const err =
          caught instanceof PayloadRefused
            ? new EnvelopeRejected(caught.reason, caught.message.slice(caught.reason.length + 2))
            : caught;
        if (!(err instanceof EnvelopeRejected)) throw err;
        const where = err.reason.startsWith('PAYLOAD_')
          ? `this worker reads payload files under ${join(profilesRoot, input.profile, 'payload')}`
          : `this worker reads its pins from ${join(profilesRoot, input.profile, 'trust.yaml')}`;
        return { ok: false, reason: err.reason, message: `${err.message} (${where})`, worker, ...ssh };
      }
    },
  };
}
