import { z } from 'zod';
import { WavegateError } from './errors';
import { showValue } from './validation';

/**
 * `wavegate init` pins exactly the host keys the operator checked. The first run reads each
 * host's key, prints its fingerprint and records it (the scanned-keys file, docs/formats.md); the second
 * run is given those fingerprints (the file, and/or `--accept-key ID=SHA256:...`) and reads the keys
 * again: a host that now shows another key is refused naming it and both fingerprints, a host no one
 * accepted is printed again, and nothing is pinned unless every host's key is one the operator accepted.
 * Pure: the record's shape, the flag's syntax and the judgement; the file store is intake/scanned-keys.ts.
 */

/** `SHA256:` and 43 characters of unpadded base64, as ssh-keygen -lf prints a host key's fingerprint. */
export const FINGERPRINT = /^SHA256:[A-Za-z0-9+/]{43}$/;
const FINGERPRINT_RULE = 'must be SHA256: and 43 base64 characters, as ssh-keygen -lf prints it';

/** The record's kind and version (its first fields). */
export const SCANNED_KEYS_KIND = 'wavegate.init.scanned-keys';
/** A record names at most this many hosts (init's own inputs are far below it). */
export const MAX_SCANNED_HOSTS = 10_000;

export const ScannedHostKey = z
  .object({
    id: z.string().min(1).max(256),
    host: z.string().min(1).max(1024),
    port: z.number().int().min(1).max(65535),
    type: z.string().max(64).optional(),
    fingerprint: z.string().regex(FINGERPRINT, FINGERPRINT_RULE),
  })
  .strict();
export type ScannedHostKey = z.output<typeof ScannedHostKey>;

export const ScannedKeysFile = z
  .object({
    kind: z.literal(SCANNED_KEYS_KIND),
    version: z.literal(1),
    /** The inventory the run was to write (absolute): a record is for one init. */
    inventory: z.string().min(1).max(4096),
    scannedAt: z.iso.datetime(),
    hosts: z.array(ScannedHostKey).max(MAX_SCANNED_HOSTS),
  })
  .strict();
export type ScannedKeysFile = z.output<typeof ScannedKeysFile>;

/** One fingerprint the operator accepted for a device; `host`/`port` when the record says where it was read. */
export interface AcceptedKey {
  id: string;
  fingerprint: string;
  host?: string;
  port?: number;
  /** `--accept-key` or the record file: for messages. */
  from: string;
}

/** `--scan-timeout` of `init` and `fleet repin`: the milliseconds to read one host key, 100 to 120,000. */
export function scanTimeoutMs(value: string): number {
  const ms = Number(value);
  if (!Number.isInteger(ms) || ms < 100 || ms > 120_000)
    throw new WavegateError(
      'INVALID_INPUT',
      `--scan-timeout: must be milliseconds 100-120000 (got ${JSON.stringify(value)})`,
      {
        field: '--scan-timeout',
        value,
      },
    );
  return ms;
}

/** `--accept-key ID=SHA256:...`: INVALID_INPUT naming the flag and the value otherwise. */
export function parseAcceptKeyFlag(value: string): AcceptedKey {
  const eq = value.indexOf('=');
  const id = eq > 0 ? value.slice(0, eq) : '';
  const fingerprint = eq > 0 ? value.slice(eq + 1) : '';
  if (!id || /\s/.test(id) || id.length > 256)
    throw new WavegateError(
      'INVALID_INPUT',
      `--accept-key: must be ID=SHA256:<fingerprint>, the device id and the fingerprint init printed for it (got ${showValue(value)})`,
      { field: '--accept-key', value },
    );
  if (!FINGERPRINT.test(fingerprint))
    throw new WavegateError('INVALID_INPUT', `--accept-key ${showValue(value)}: the fingerprint ${FINGERPRINT_RULE}`, {
      field: '--accept-key',
      value,
    });
  return { id, fingerprint, from: '--accept-key' };
}

/**
 * The accepted fingerprints by device id: every `--accept-key` (a device given twice with two
 * fingerprints is refused), then the record's for devices no flag names. Ids no host of this run has are
 * refused when they come from a flag (a typo would otherwise leave a host unaccepted without a word).
 */
export function acceptedKeys(
  flags: readonly AcceptedKey[],
  recorded: readonly AcceptedKey[],
  hostIds: ReadonlySet<string>,
): Map<string, AcceptedKey> {
  const out = new Map<string, AcceptedKey>();
  for (const a of flags) {
    if (!hostIds.has(a.id))
      throw new WavegateError(
        'INVALID_INPUT',
        `--accept-key ${a.id}=${a.fingerprint}: no host of this init has the id ${showValue(a.id)} (hosts: ${[...hostIds].slice(0, 10).join(', ')}${hostIds.size > 10 ? ', ...' : ''})`,
        { field: '--accept-key', value: a.id },
      );
    const before = out.get(a.id);
    if (before && before.fingerprint !== a.fingerprint)
      throw new WavegateError(
        'INVALID_INPUT',
        `--accept-key ${a.id}: given twice with two fingerprints (${before.fingerprint}, ${a.fingerprint}); accept one`,
        { field: '--accept-key', value: a.id },
      );
    out.set(a.id, a);
  }
  for (const r of recorded) if (!out.has(r.id)) out.set(r.id, r);
  return out;
}

/** A host key as read now. */
export interface SeenKey {
  id: string;
  host: string;
  port: number;
  type?: string;
  fingerprint: string;
}

export type KeyJudgement =
  /** The key read now is the one accepted: pin it. */
  | { id: string; verdict: 'accepted'; seen: SeenKey; accepted: AcceptedKey }
  /** Another key than the one accepted: refuse, naming both. */
  | { id: string; verdict: 'changed'; seen: SeenKey; accepted: AcceptedKey }
  /** No fingerprint accepted for this host (or the record's was read at another address): print it, pin nothing. */
  | { id: string; verdict: 'unconfirmed'; seen: SeenKey };

/**
 * Each host's key read now against what the operator accepted. A record's fingerprint counts only for
 * the address it was read at: the same id at another host or port is another machine, unconfirmed.
 */
export function judgeHostKeys(seen: readonly SeenKey[], accepted: ReadonlyMap<string, AcceptedKey>): KeyJudgement[] {
  return seen.map((s) => {
    const a = accepted.get(s.id);
    if (!a || (a.host !== undefined && (a.host !== s.host || a.port !== s.port)))
      return { id: s.id, verdict: 'unconfirmed', seen: s };
    return { id: s.id, verdict: a.fingerprint === s.fingerprint ? 'accepted' : 'changed', seen: s, accepted: a };
  });
}

/** The refusal when any host now shows another key than the one accepted: CONFLICT naming each device and both fingerprints. */
export function changedKeysRefusal(changed: readonly Extract<KeyJudgement, { verdict: 'changed' }>[]): WavegateError {
  const lines = changed.map(
    (c) =>
      `  ${c.id} (${c.seen.host}:${c.seen.port}): accepted ${c.accepted.fingerprint} (${c.accepted.from}), now shows ${c.seen.type ? `${c.seen.type} ` : ''}${c.seen.fingerprint}`,
  );
  return new WavegateError(
    'CONFLICT',
    `host key changed since it was accepted: ${changed.map((c) => c.id).join(', ')}; nothing was written:\n${lines.join('\n')}\nthe host may have been reinstalled, or someone is in the middle: check the key on the host itself (ssh-keygen -lf /etc/ssh/ssh_host_<type>_key.pub, or your provider's console) before you accept another`,
    { devices: changed.map((c) => ({ id: c.id, accepted: c.accepted.fingerprint, seen: c.seen.fingerprint })) },
  );
}
