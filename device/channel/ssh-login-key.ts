import { utils as sshUtils, type ParsedKey } from 'ssh2';
import { WavegateError } from '../../core/errors';
import type { DeviceTarget } from '../../core/rollout-state';
import { readText } from '../../intake/files';
import { sshFingerprint } from '../../intake/known-hosts';
import { connectDevice, StepFailed, TransportError, type DeviceSession } from '../transport';
import { shQuote } from '../transport/apply-lock';
import type { LoginKey, LoginKeyChange, LoginKeys } from './types';

/**
 * The SSH login key's rotation on a device (docs/operations.md, "Rotating the SSH login key"): the new key's
 * line added to the login's authorized_keys beside the old one, a fresh login with the new key proven, and at
 * retire the old key's line removed and a login with it proven refused. The file is edited on the device
 * itself, atomically (a copy beside it with the same mode, then a rename over it), every other line kept.
 */

/** The login key in a private key file on the worker: its public line and fingerprint (never the secret). */
export function loginKeyOf(path: string): LoginKey {
  let parsed: ParsedKey | Error | ParsedKey[];
  try {
    parsed = sshUtils.parseKey(readText(path));
  } catch (err) {
    throw new WavegateError('INVALID_INPUT', `${path}: cannot read the key file (${(err as Error).message})`, {
      value: path,
    });
  }
  const key = Array.isArray(parsed) ? parsed[0] : parsed;
  if (!key || key instanceof Error || !key.isPrivateKey())
    throw new WavegateError(
      'INVALID_INPUT',
      `${path}: not an unencrypted OpenSSH private key${key instanceof Error ? ` (${key.message})` : ''}`,
      { value: path },
    );
  const blob = key.getPublicSSH();
  return {
    path,
    type: key.type,
    blob: blob.toString('base64'),
    fingerprint: sshFingerprint(blob),
  };
}

/** The file's path on the device: relative ones are under the login's $HOME (`.ssh/authorized_keys`). */
function fileOnDevice(file: string): string {
  return file.startsWith('/') ? `f=${shQuote(file)}` : `f="$HOME"/${shQuote(file)}`;
}

/** A shell function `has <blob>`: whether a line of the file has exactly that key (options and comments aside). */
const HAS = `has() { [ -f "$f" ] && awk -v k="$1" '{ for (i = 1; i <= NF; i++) if ($i == k) { found = 1; exit } } END { exit !found }' "$f"; }`;
/** Replace the file with what `$tmp` was made into: a copy with the same mode and owner (cp -p), renamed over it. */
const SWAP = `mv -f "$tmp" "$f" || { rm -f "$tmp"; exit 4; }`;

/** Exit 3: the device answered, and the file is not as the rotation expects (a refusal, not a failure to retry). */
const NOT_AS_EXPECTED = 3;

/** The add: idempotent; refused (exit 3) when the old key is not in the file, so an unread file is never edited. */
function addScript(change: LoginKeyChange): string {
  const line = `${change.new.type} ${change.new.blob} wavegate-rotation:${change.rotation}`;
  return [
    'set -u',
    fileOnDevice(change.file),
    HAS,
    `if has ${shQuote(change.new.blob)}; then echo present; exit 0; fi`,
    `has ${shQuote(change.old.blob)} || { echo "the old key ${change.old.fingerprint} is not in $f: this is not the file its login is authorized by" >&2; exit ${NOT_AS_EXPECTED}; }`,
    'tmp="$f.wavegate-rotation.$$"',
    `cp -p "$f" "$tmp" || { rm -f "$tmp"; exit 4; }`,
    // A last line without its newline would run into the new one.
    `if [ -n "$(tail -c 1 "$f")" ]; then printf '\\n' >> "$tmp" || { rm -f "$tmp"; exit 4; }; fi`,
    `printf '%s\\n' ${shQuote(line)} >> "$tmp" || { rm -f "$tmp"; exit 4; }`,
    SWAP,
    'echo added',
  ].join('\n');
}

/** The retire: only with the new key's line in place (exit 3 otherwise); every line of the old key removed. */
function removeScript(change: LoginKeyChange): string {
  return [
    'set -u',
    fileOnDevice(change.file),
    HAS,
    `has ${shQuote(change.new.blob)} || { echo "the new key ${change.new.fingerprint} is not in $f: refusing to remove the old one" >&2; exit ${NOT_AS_EXPECTED}; }`,
    `has ${shQuote(change.old.blob)} || { echo absent; exit 0; }`,
    'tmp="$f.wavegate-rotation.$$"',
    `cp -p "$f" "$tmp" || { rm -f "$tmp"; exit 4; }`,
    `awk -v k=${shQuote(change.old.blob)} '{ for (i = 1; i <= NF; i++) if ($i == k) next; print }' "$f" > "$tmp" || { rm -f "$tmp"; exit 4; }`,
    SWAP,
    `if has ${shQuote(change.old.blob)}; then echo "the old key is still in $f" >&2; exit 5; fi`,
    'echo removed',
  ].join('\n');
}

/** The target logging in with `key` (a key file) instead of its own credentials. */
function withKey(target: DeviceTarget, key: LoginKey): DeviceTarget {
  const ssh = { ...target.ssh, key: key.path };
  delete ssh.agent;
  return { ...target, ssh };
}

async function run(session: DeviceSession, target: DeviceTarget, step: string, script: string, timeoutMs: number) {
  const res = await session.exec(script, { timeoutMs });
  if (res.code !== 0) throw new StepFailed(step, res, target.id);
  return res.stdout.trim();
}

/** One command over a fresh session logged in with `key`: a login with that key, proven. */
async function withSession<T>(
  target: DeviceTarget,
  key: LoginKey,
  timeouts: { connectTimeoutMs: number },
  fn: (session: DeviceSession) => Promise<T>,
): Promise<T> {
  const session = await connectDevice(withKey(target, key), { connectTimeoutMs: timeouts.connectTimeoutMs });
  try {
    return await fn(session);
  } finally {
    session.close();
  }
}

/** The SSH channel's login keys: every step a fresh, pinned connection. */
export const sshLoginKeys: LoginKeys = {
  async add(target, change, opts) {
    return withSession(target, change.old, opts, async (session) => {
      const out = await run(session, target, 'add the new login key', addScript(change), opts.commandTimeoutMs);
      return out === 'present' ? 'present' : 'added';
    });
  },

  async prove(target, key, opts) {
    await withSession(target, key, opts, async (session) => {
      const res = await session.exec('echo wavegate-login', { timeoutMs: opts.commandTimeoutMs });
      if (res.code !== 0 || !res.stdout.includes('wavegate-login'))
        throw new StepFailed('prove the login', res, target.id);
    });
  },

  async remove(target, change, opts) {
    // Logged in with the new key: the retire itself proves again that it works before the old one goes.
    return withSession(target, change.new, opts, async (session) => {
      const out = await run(session, target, 'remove the old login key', removeScript(change), opts.commandTimeoutMs);
      return out === 'absent' ? 'absent' : 'removed';
    });
  },

  async refuses(target, key, opts) {
    try {
      await withSession(target, key, opts, async () => undefined);
      return false;
    } catch (err) {
      if (err instanceof TransportError && err.kind === 'auth') return true;
      throw err;
    }
  },
};

/** Whether a failed step is the device saying the file is not as the rotation expects (no retry can help). */
export function notAsExpected(err: unknown): boolean {
  return err instanceof StepFailed && err.result.code === NOT_AS_EXPECTED;
}
