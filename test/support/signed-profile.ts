import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { toBase64, utf8Encode } from '../../core/bytes';
import { canonicalize } from '../../core/canonical';
import type { Revision, RevisionHealth } from '../../core/revision';
import {
  cosignEnvelope,
  keyPairFromSeed,
  pinOf,
  signedContent,
  signRevision,
  type Envelope,
  type KeyPair,
} from '../../core/signing';

/**
 * A signed profile of the test's own, under a profiles root of its own: fresh Ed25519 keys (in memory,
 * never written), `trust.yaml` pinning them with a threshold, and every revision signed by `threshold`
 * of them into `envelopes/<n>.json` with its source in `revisions/<n>.yaml` (exactly the signed content)
 * and its payload files in `payload/`. What `wavegate init` + keygen/trust/sign/cosign would leave,
 * made with the core/signing.ts functions directly (no CLI round trips).
 *
 *   const p = writeSignedProfile({ root, name: 'conf', revisions: [{ revision: 1, apply, verify, payload: { conf: 'a\n' } }] });
 *   // a worker:  wavegate worker --profiles <root>   (or createActivities({ profilesRoot: root }))
 *   // an agent:  p.writePins(dir) then wavegate agent --trust <dir>
 *   // refusals:  p.sign(p.revision(2), { signers: [p.keys[0]!] })  (below threshold), p.tampered(2), p.sign(..., { now: past })
 *
 * Payload files are named by their key; the revision's entry gets `source: payload/<profile>-r<n>-<name>`.
 */
export interface RevisionSource {
  revision: number;
  apply: string;
  verify: string;
  /** File name (in `$WAVEGATE_STAGING`) -> content. */
  payload?: Record<string, string>;
  health?: RevisionHealth;
  rollback?: string;
  /** Default: the revision before (none for r1). */
  previous?: number;
  risk?: 'risky' | 'safe';
  description?: string;
  /** The signed way back (ms): how long after a device confirms it the rollout that brought it may take it back. */
  wayBack?: number;
}

export interface SignedProfileOptions {
  /** The profiles root (created if needed): `<root>/<name>/...`. */
  root: string;
  name: string;
  revisions: RevisionSource[];
  /** How many keys to pin (default 2). */
  keys?: number;
  /** How many signatures a revision needs (default: every key). */
  threshold?: number;
  /** `profile.yaml`'s scope (default: every device of the inventory). */
  scope?: Record<string, unknown>;
  /** Signing time (default now). */
  now?: number;
}

export interface SignedProfile {
  root: string;
  name: string;
  /** `<root>/<name>` */
  dir: string;
  trustFile: string;
  threshold: number;
  /** The pinned keys, in pin order. */
  keys: KeyPair[];
  /** The revision's content as signed into its envelope (issuedAt/expiresAt included). */
  revision(n: number): Revision;
  /** The envelope written to `envelopes/<n>.json`. */
  envelope(n: number): Envelope;
  /** Sign `content` (default: revision n's source) by `signers` (default: the first `threshold` keys) at `now`. */
  sign(content: Revision, opts?: { signers?: KeyPair[]; now?: number; validityDays?: number }): Envelope;
  /** Revision n's envelope with its body changed (apply replaced) and the signatures kept: BAD_SIGNATURE. */
  tampered(n: number, apply?: string): Envelope;
  /** Copy the pins to `<dir>/<name>/trust.yaml` (a device's `--trust DIR`); returns `dir`. */
  writePins(dir: string): string;
}

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

export function writeSignedProfile(opts: SignedProfileOptions): SignedProfile {
  const now = opts.now ?? Date.now();
  const dir = join(opts.root, opts.name);
  for (const sub of ['revisions', 'envelopes', 'payload']) mkdirSync(join(dir, sub), { recursive: true });
  const keys = Array.from({ length: opts.keys ?? 2 }, () => keyPairFromSeed(randomBytes(32)));
  const threshold = opts.threshold ?? keys.length;
  const trust = { threshold, pins: keys.map((k, i) => pinOf(k, `${opts.name}-signer-${i + 1}`)) };
  const trustFile = join(dir, 'trust.yaml');
  writeFileSync(trustFile, stringify(trust));
  writeFileSync(
    join(dir, 'profile.yaml'),
    stringify({ name: opts.name, description: `${opts.name} (test profile)`, scope: opts.scope ?? {} }),
  );

  const sources = new Map<number, Revision>();
  const signed = new Map<number, Revision>();
  const envelopes = new Map<number, Envelope>();
  const sign = (content: Revision, o: { signers?: KeyPair[]; now?: number; validityDays?: number } = {}): Envelope => {
    const [first, ...rest] = o.signers ?? keys.slice(0, threshold);
    if (!first) throw new Error('signed-profile: no signer');
    return rest.reduce(
      (env, k) => cosignEnvelope(env, k),
      signRevision(content, first, { now: o.now ?? now, ...(o.validityDays ? { validityDays: o.validityDays } : {}) }),
    );
  };

  for (const src of opts.revisions) {
    const n = src.revision;
    const payload = Object.entries(src.payload ?? {}).map(([name, content]) => {
      const source = `payload/${opts.name}-r${n}-${name}`;
      writeFileSync(join(dir, source), content);
      return { name, sha256: sha256(content), size: Buffer.byteLength(content), source };
    });
    const previous = src.previous ?? (n > 1 ? n - 1 : undefined);
    const revision: Revision = {
      profile: opts.name,
      revision: n,
      ...(src.description ? { description: src.description } : {}),
      apply: src.apply,
      verify: src.verify,
      ...(src.rollback ? { rollback: src.rollback } : {}),
      ...(previous ? { previous } : {}),
      payload,
      risk: src.risk ?? (previous || src.rollback ? 'risky' : 'safe'),
      ...(src.health ? { health: src.health } : {}),
      ...(src.wayBack !== undefined ? { wayBack: src.wayBack } : {}),
    };
    sources.set(n, revision);
    const envelope = sign(revision);
    const content = signedContent(revision, { now });
    envelopes.set(n, envelope);
    signed.set(n, content);
    writeFileSync(join(dir, 'envelopes', `${n}.json`), `${JSON.stringify(envelope, null, 2)}\n`);
    writeFileSync(join(dir, 'revisions', `${n}.yaml`), stringify(content));
  }

  const get = <T>(m: Map<number, T>, n: number): T => {
    const v = m.get(n);
    if (v === undefined) throw new Error(`signed-profile: ${opts.name} has no revision ${n}`);
    return v;
  };
  return {
    root: opts.root,
    name: opts.name,
    dir,
    trustFile,
    threshold,
    keys,
    revision: (n) => get(signed, n),
    envelope: (n) => get(envelopes, n),
    sign: (content, o) => sign(content, o),
    tampered(n, apply = 'echo tampered >> "$HOME/tampered"') {
      const good = get(envelopes, n);
      const evil = { ...get(signed, n), apply };
      return { ...good, body: toBase64(utf8Encode(canonicalize(evil))) };
    },
    writePins(pinsDir) {
      mkdirSync(join(pinsDir, opts.name), { recursive: true });
      writeFileSync(join(pinsDir, opts.name, 'trust.yaml'), stringify(trust));
      return pinsDir;
    },
  };
}
