import { sha256, sha512 } from '@noble/hashes/sha2.js';
import { bytesToHex } from '@noble/hashes/utils.js';
import { bytesEqual, fromBase64, toBase64, utf8Decode, utf8Encode } from './bytes';
import { ed25519, ed25519Verify, type KeyPair, keyId } from './signing';

/**
 * A receipt: what one device says, under its own key, about one apply it was asked for (docs/formats.md,
 * "Receipts"). The control plane's `applied` is its own word; a receipt is the device's, and an auditor who
 * trusts neither the worker nor Temporal nor the audit store checks it offline (core/receipt-verify.ts).
 *
 * The signed bytes are a short text, one `name value` per line in a fixed order, so that a person can read it and
 * anyone can check it without wavegate: an agent's receipt with any Ed25519 library over exactly these bytes,
 * an SSH device's with `ssh-keygen -Y verify -n wavegate-receipt` (its signature is an OpenSSH SSHSIG blob).
 *
 * What the device itself keeps (never the control plane's to choose): its key, the `counter` (persisted before
 * the answer leaves the device, one per receipt, never reused), `prev` (the hash of its previous receipt: the
 * device's receipts form one chain) and `clock` (its own time). The rest is the request it was sent and what it
 * observed. Pure (no Node APIs): safe in workflow code.
 */

export const RECEIPT_CONTEXT = 'wavegate-receipt-v1';
/** The SSHSIG namespace of an SSH device's receipt signature (`ssh-keygen -Y sign -n …`). */
export const RECEIPT_SSH_NAMESPACE = 'wavegate-receipt';
/** A whole receipt (the signed text and its `sig` line). */
export const RECEIPT_MAX_BYTES = 1024;
/** The `prev` of a device's first receipt. */
export const RECEIPT_GENESIS = '0'.repeat(64);

/** Which kind of key signed it: an agent's identity key, or an SSH device's enrolled receipt key. */
export const RECEIPT_KEY_KINDS = ['agent', 'ssh'] as const;
export type ReceiptKeyKind = (typeof RECEIPT_KEY_KINDS)[number];

/**
 * What the device says happened. `applied`, `already-applied` and `claimed` are the apply's answers (a `claimed`
 * revision's verify cannot read its fact back); `refused` is a check the device made before anything ran (its
 * reason: BELOW_FLOOR, UNPINNED_KEY, EXPIRED, DIGEST, …); `failed` is a step that said no (its reason: VERIFY, …).
 */
export const RECEIPT_RESULTS = ['applied', 'already-applied', 'claimed', 'refused', 'failed'] as const;
export type ReceiptResult = (typeof RECEIPT_RESULTS)[number];

/** The request, as the control plane sent it, and what the device observed. */
export interface ReceiptClaim {
  device: string;
  rollout: string;
  /** The rollout's phase index (0-based); null when the request named none (a convergence). */
  phase: number | null;
  /**
   * receiptNonce() of the request: it binds the run and the activity that asked, which the receipt does not
   * repeat (1 KB holds a 128-character device id and the SSH signature, not both ids twice).
   */
  nonce: string;
  profile: string;
  revision: number;
  /** Hex SHA-256 of the canonical JSON of the requested revision's envelope ('' unsigned: not receiptable). */
  requested: string;
  /** The envelope digest of the revision whose verify passed on the device; null when none passed. */
  observed: string | null;
  result: ReceiptResult;
  /** A code (A-Z, 0-9, `_`, `-`), null when the result needs none. */
  reason: string | null;
}

/** What the device adds from its own records. */
export interface ReceiptDeviceFields {
  keyKind: ReceiptKeyKind;
  /**
   * Which key signs: an agent's is core/signing.ts keyId() (`sha256/…`, as its pin), an SSH device's is the
   * OpenSSH fingerprint `ssh-keygen -l` prints (`SHA256:…`, of the key's wire form): receiptKeyId().
   */
  keyId: string;
  counter: number;
  prev: string;
  /** The device's clock, epoch ms. */
  clock: number;
}

export type ReceiptFields = ReceiptClaim & ReceiptDeviceFields;

export interface Receipt {
  fields: ReceiptFields;
  /** The exact signed bytes, as text. */
  body: string;
  /** base64: a 64-byte Ed25519 signature (agent) or an SSHSIG blob (ssh). */
  sig: string;
}

/** The order of the lines (and the only names allowed). */
const LINES = [
  'device',
  'key',
  'rollout',
  'phase',
  'nonce',
  'counter',
  'profile',
  'revision',
  'requested',
  'observed',
  'result',
  'reason',
  'prev',
  'clock',
] as const;

const ID = /^[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,127}$/;
const HEX64 = /^[0-9a-f]{64}$/;
const HEX32 = /^[0-9a-f]{32}$/;
const REASON = /^[A-Za-z0-9_-]{1,24}$/;
const KID: Record<ReceiptKeyKind, RegExp> = { agent: /^sha256\/[A-Za-z0-9_-]{43}$/, ssh: /^SHA256:[A-Za-z0-9+/]{43}$/ };
const NONE = '-';

/**
 * The nonce of a request: bound to the Temporal run id (random, made by the server when the run starts: nobody
 * can know it earlier), the activity that asks (one per request, stable across its retries) and the device. The
 * device puts it in its receipt; the verifier recomputes it from the receipt's own fields and the trail's run.
 */
export function receiptNonce(req: { rollout: string; run: string; activity: string; device: string }): string {
  const text = `wavegate-receipt-nonce-v1\n${req.rollout}\n${req.run}\n${req.activity}\n${req.device}`;
  return bytesToHex(sha256(utf8Encode(text))).slice(0, 32);
}

/** Why these fields cannot be a receipt, naming the field and the value; null when they can. */
export function receiptFieldsProblem(f: ReceiptFields): string | null {
  const bad = (field: string, value: unknown, rule: string) => `receipt ${field} ${JSON.stringify(value)}: ${rule}`;
  for (const field of ['device', 'rollout'] as const) {
    if (typeof f[field] !== 'string' || !ID.test(f[field]))
      return bad(field, f[field], 'must be 1-128 of A-Za-z0-9._:@/+-');
  }
  if (!/^[a-z0-9][a-z0-9-]{0,62}$/.test(f.profile)) return bad('profile', f.profile, 'must be a profile name');
  if (!(RECEIPT_KEY_KINDS as readonly string[]).includes(f.keyKind))
    return bad('key kind', f.keyKind, 'must be agent or ssh');
  if (!KID[f.keyKind].test(f.keyId))
    return bad(
      'key',
      f.keyId,
      f.keyKind === 'agent'
        ? 'must be "sha256/" + 43 base64url characters'
        : 'must be "SHA256:" + 43 base64 characters',
    );
  if (f.phase !== null && !(Number.isSafeInteger(f.phase) && f.phase >= 0 && f.phase < 1000))
    return bad('phase', f.phase, 'must be an integer 0-999 or null');
  if (!HEX32.test(f.nonce)) return bad('nonce', f.nonce, 'must be 32 lowercase hex characters');
  if (!(Number.isSafeInteger(f.counter) && f.counter >= 1)) return bad('counter', f.counter, 'must be an integer >= 1');
  if (!(Number.isSafeInteger(f.revision) && f.revision >= 0))
    return bad('revision', f.revision, 'must be an integer >= 0');
  if (!HEX64.test(f.requested)) return bad('requested', f.requested, 'must be 64 lowercase hex characters');
  if (f.observed !== null && !HEX64.test(f.observed))
    return bad('observed', f.observed, 'must be 64 lowercase hex characters or null');
  if (!(RECEIPT_RESULTS as readonly string[]).includes(f.result))
    return bad('result', f.result, `must be one of ${RECEIPT_RESULTS.join(', ')}`);
  if (f.reason !== null && !REASON.test(f.reason)) return bad('reason', f.reason, 'must be 1-24 of A-Za-z0-9_-');
  if (!HEX64.test(f.prev)) return bad('prev', f.prev, 'must be 64 lowercase hex characters');
  if (!(Number.isSafeInteger(f.clock) && f.clock >= 0)) return bad('clock', f.clock, 'must be epoch milliseconds');
  return null;
}

/** The signed text of a receipt. Throws a plain Error naming the field when the fields are not a receipt. */
export function receiptBody(f: ReceiptFields): string {
  const problem = receiptFieldsProblem(f);
  if (problem) throw new Error(problem);
  const values: Record<(typeof LINES)[number], string> = {
    device: f.device,
    key: `${f.keyKind} ${f.keyId}`,
    rollout: f.rollout,
    phase: f.phase === null ? NONE : String(f.phase),
    nonce: f.nonce,
    counter: String(f.counter),
    profile: f.profile,
    revision: String(f.revision),
    requested: f.requested,
    observed: f.observed ?? NONE,
    result: f.result,
    reason: f.reason ?? NONE,
    prev: f.prev,
    clock: String(f.clock),
  };
  return `${RECEIPT_CONTEXT}\n${LINES.map((name) => `${name} ${values[name]}\n`).join('')}`;
}

/** The whole receipt as it travels and is stored: the signed text, then `sig <base64>`. */
export function receiptText(r: Pick<Receipt, 'body' | 'sig'>): string {
  return `${r.body}sig ${r.sig}\n`;
}

/** The hash a device's next receipt names as `prev`: hex SHA-256 of the signed text. */
export function receiptHash(r: Pick<Receipt, 'body'>): string {
  return bytesToHex(sha256(utf8Encode(r.body)));
}

export type ReceiptParse = { ok: true; receipt: Receipt } | { ok: false; problem: string };

/** Read a receipt's text strictly: at most RECEIPT_MAX_BYTES, the lines in their order, every field valid. */
export function parseReceipt(text: unknown): ReceiptParse {
  const fail = (problem: string): ReceiptParse => ({ ok: false, problem });
  if (typeof text !== 'string') return fail('receipt: must be text');
  const size = utf8Encode(text).length;
  if (size > RECEIPT_MAX_BYTES) return fail(`receipt: ${size} bytes, at most ${RECEIPT_MAX_BYTES}`);
  if (!text.endsWith('\n')) return fail('receipt: must end with a newline');
  const lines = text.slice(0, -1).split('\n');
  if (lines[0] !== RECEIPT_CONTEXT) return fail(`receipt: first line must be ${RECEIPT_CONTEXT}`);
  if (lines.length !== LINES.length + 2) return fail(`receipt: ${lines.length} lines, must be ${LINES.length + 2}`);
  const values: Record<string, string> = {};
  for (const [i, name] of LINES.entries()) {
    const line = lines[i + 1]!;
    if (!line.startsWith(`${name} `)) return fail(`receipt line ${i + 2}: must be "${name} <value>"`);
    values[name] = line.slice(name.length + 1);
  }
  const sigLine = lines[LINES.length + 1]!;
  if (!sigLine.startsWith('sig ')) return fail(`receipt line ${LINES.length + 2}: must be "sig <base64>"`);
  const sig = sigLine.slice(4);
  if (!fromBase64(sig)) return fail('receipt sig: must be standard base64');
  const [keyKind, kid, ...extra] = values.key!.split(' ');
  const int = (v: string) => (/^(0|[1-9][0-9]{0,15})$/.test(v) ? Number(v) : Number.NaN);
  const fields: ReceiptFields = {
    device: values.device!,
    keyKind: keyKind as ReceiptKeyKind,
    keyId: extra.length === 0 ? (kid ?? '') : '',
    rollout: values.rollout!,
    phase: values.phase === NONE ? null : int(values.phase!),
    nonce: values.nonce!,
    counter: int(values.counter!),
    profile: values.profile!,
    revision: int(values.revision!),
    requested: values.requested!,
    observed: values.observed === NONE ? null : values.observed!,
    result: values.result as ReceiptResult,
    reason: values.reason === NONE ? null : values.reason!,
    prev: values.prev!,
    clock: int(values.clock!),
  };
  const problem = receiptFieldsProblem(fields);
  if (problem) return fail(problem);
  const body = `${lines.slice(0, LINES.length + 1).join('\n')}\n`;
  // One text per receipt: the fields written back must be the very bytes that were signed.
  if (receiptBody(fields) !== body) return fail('receipt: not in its canonical form');
  return { ok: true, receipt: { fields, body, sig } };
}

/** The OpenSSH wire form of an ssh-ed25519 public key (the base64 in an `ssh-ed25519 AAAA…` line). */
export function sshEd25519Wire(publicKey: Uint8Array): Uint8Array {
  return concat(sshString(utf8Encode('ssh-ed25519')), sshString(publicKey));
}

/** The key id a receipt of this kind names for this 32-byte Ed25519 public key. */
export function receiptKeyId(kind: ReceiptKeyKind, publicKey: Uint8Array): string {
  if (kind === 'agent') return keyId(publicKey);
  return `SHA256:${toBase64(sha256(sshEd25519Wire(publicKey))).replace(/=+$/, '')}`;
}

/** The 32-byte key of an `ssh-ed25519 AAAA… [comment]` line; undefined for any other. */
export function sshEd25519Key(line: string): Uint8Array | undefined {
  const [type, b64] = line.trim().split(/\s+/);
  const wire = type === 'ssh-ed25519' && b64 ? fromBase64(b64) : undefined;
  if (wire?.length !== 51) return undefined;
  const raw = wire.subarray(19);
  return bytesEqual(sshEd25519Wire(raw), wire) ? raw : undefined;
}

/** An agent signs with its identity key: Ed25519 over the receipt's text. */
export function signAgentReceipt(fields: Omit<ReceiptFields, 'keyKind' | 'keyId'>, key: KeyPair): Receipt {
  const full: ReceiptFields = { ...fields, keyKind: 'agent', keyId: keyId(key.publicKey) };
  const body = receiptBody(full);
  const sig = toBase64(ed25519().sign(utf8Encode(body), key.secretKey));
  return { fields: full, body, sig };
}

/**
 * Is the receipt signed by this 32-byte Ed25519 public key (its enrolled key), as its `key` line says?
 * An agent's signature is plain Ed25519 over the text; an SSH device's is an SSHSIG blob (PROTOCOL.sshsig) made by
 * `ssh-keygen -Y sign -n wavegate-receipt` over the text, checked here byte for byte as `ssh-keygen -Y verify` does.
 */
export function receiptSignatureValid(
  r: Receipt,
  publicKey: Uint8Array,
  verify: Ed25519Check = ed25519Verify,
): boolean {
  if (publicKey.length !== 32 || r.fields.keyId !== receiptKeyId(r.fields.keyKind, publicKey)) return false;
  const sig = fromBase64(r.sig);
  if (!sig) return false;
  const message = utf8Encode(r.body);
  if (r.fields.keyKind === 'agent') return verify(sig, message, publicKey);
  return sshsigValid(sig, message, publicKey, RECEIPT_SSH_NAMESPACE, verify);
}

/**
 * The Ed25519 check a verifier uses: @noble's strict RFC 8032 by default (pure, safe in workflow code); an offline
 * verifier of 100,000 receipts passes Node's own (device/ed25519-native.ts), about ten times faster, same answers.
 */
export type Ed25519Check = (sig: Uint8Array, message: Uint8Array, publicKey: Uint8Array) => boolean;

/** A reader of SSH wire strings (uint32 length, then bytes); undefined past the end. */
function sshReader(bytes: Uint8Array) {
  let at = 0;
  return {
    bytes(n: number): Uint8Array | undefined {
      if (at + n > bytes.length) return undefined;
      const out = bytes.subarray(at, at + n);
      at += n;
      return out;
    },
    uint32(): number | undefined {
      const b = this.bytes(4);
      return b ? ((b[0]! << 24) | (b[1]! << 16) | (b[2]! << 8) | b[3]!) >>> 0 : undefined;
    },
    string(): Uint8Array | undefined {
      const n = this.uint32();
      return n === undefined || n > 4096 ? undefined : this.bytes(n);
    },
    done: () => at === bytes.length,
  };
}

function sshString(bytes: Uint8Array): Uint8Array {
  const out = new Uint8Array(4 + bytes.length);
  new DataView(out.buffer).setUint32(0, bytes.length);
  out.set(bytes, 4);
  return out;
}

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

const utf8Of = (b: Uint8Array | undefined) => (b ? utf8Decode(b) : undefined);

/** An OpenSSH SSHSIG signature (armor removed) by an ssh-ed25519 key over `message` in `namespace`. */
export function sshsigValid(
  blob: Uint8Array,
  message: Uint8Array,
  publicKey: Uint8Array,
  namespace: string,
  verify: Ed25519Check = ed25519Verify,
): boolean {
  const r = sshReader(blob);
  const magic = r.bytes(6);
  if (!magic || utf8Of(magic) !== 'SSHSIG' || r.uint32() !== 1) return false;
  const pub = r.string();
  const ns = r.string();
  const reserved = r.string();
  const hashAlg = utf8Of(r.string());
  const signature = r.string();
  if (!pub || !ns || !reserved || !signature || !r.done()) return false;
  // The public key inside the blob must be the enrolled one, as `ssh-keygen -Y verify` requires of allowed signers.
  const pk = sshReader(pub);
  if (utf8Of(pk.string()) !== 'ssh-ed25519') return false;
  const raw = pk.string();
  if (!raw || !pk.done() || !bytesEqual(raw, publicKey)) return false;
  if (utf8Of(ns) !== namespace) return false;
  const sg = sshReader(signature);
  if (utf8Of(sg.string()) !== 'ssh-ed25519') return false;
  const edSig = sg.string();
  if (!edSig || !sg.done()) return false;
  const digest = hashAlg === 'sha512' ? sha512(message) : hashAlg === 'sha256' ? sha256(message) : undefined;
  if (!digest) return false;
  const signed = concat(
    utf8Encode('SSHSIG'),
    sshString(utf8Encode(namespace)),
    sshString(reserved),
    sshString(utf8Encode(hashAlg!)),
    sshString(digest),
  );
  return verify(edSig, signed, publicKey);
}

/** The SSHSIG blob of an armored `-----BEGIN SSH SIGNATURE-----` text (what `ssh-keygen -Y sign` prints). */
export function sshsigFromArmor(armored: string): Uint8Array | undefined {
  const m = /^-----BEGIN SSH SIGNATURE-----\n([A-Za-z0-9+/=\n]+)\n-----END SSH SIGNATURE-----\n?$/.exec(
    `${armored.trim()}\n`,
  );
  return m ? fromBase64(m[1]!.replace(/\n/g, '')) : undefined;
}

/** The armored form `ssh-keygen -Y verify -s` reads, from a receipt's `sig` (lines of 70, as ssh-keygen writes). */
export function sshsigArmor(sigBase64: string): string {
  const lines = sigBase64.match(/.{1,70}/g) ?? [];
  return `-----BEGIN SSH SIGNATURE-----\n${lines.join('\n')}\n-----END SSH SIGNATURE-----\n`;
}

/** The device's own receipt record: the next counter and the hash its next receipt chains to. */
export interface ReceiptChainState {
  /** The counter of the last receipt made (0: none yet). */
  counter: number;
  /** receiptHash of the last receipt (RECEIPT_GENESIS: none yet). */
  last: string;
}

export const RECEIPT_CHAIN_START: ReceiptChainState = { counter: 0, last: RECEIPT_GENESIS };

/** What the device records, before the receipt leaves it, once it has made one. */
export function chainAfter(receipt: Receipt): ReceiptChainState {
  return { counter: receipt.fields.counter, last: receiptHash(receipt) };
}
