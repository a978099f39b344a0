import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Command } from 'commander';
import { stringify as toYaml } from 'yaml';
import { WavegateError } from '../../core/errors';
import { verifyRevocations } from '../../core/revocation';
import {
  cosignEnvelope,
  Envelope,
  KID_PATTERN,
  parseSecretKeyFile,
  peekBody,
  parseTrust,
  type KeyPair,
  type Trust,
} from '../../core/signing';
import { signDocument } from '../../core/signed-document';
import {
  draftKind,
  listTallyText,
  nextRevocationsContent,
  nextRootContent,
  rootTally,
  rootTallyText,
  signedBy,
  type RevocationChange,
  type RoleDoc,
} from '../../core/trust-admin';
import { anchorVersion, verifyNextRoot, type RootAnchor, type TrustRoot } from '../../core/trust-root';
import { parseWith } from '../../core/validation';
import { readDocument, writeFileAtomic } from '../../intake/files';
import { profileDir, type ProfileDir } from '../../intake/profile-dir';
import { profilesOptionHelp, resolveProfilesRoot } from '../../intake/profiles-root';
import { profileTrustState, type ProfileTrustState } from '../../intake/trust';
import { action, EXIT_OK } from '../run';
import { withTemporalOptions } from '../temporal-options';
import type { TemporalFlags } from '../../workers/connection';

/**
 * `wavegate trust`: a profile's trust as the operator handles it (docs/operations.md, "Moving from trust.yaml to a
 * signed root", "Replacing a signer", "Revoking a revision or a key"). `trust <pubfiles…>` writes a trust.yaml
 * (version 0 of the trust root); `init` signs version 1 from it; `rotate` drafts the next version, `revoke` the
 * next revocation list; `cosign` adds signatures to a draft; `publish` writes a draft into the profile only when
 * it verifies as the next one (core/trust-root.ts, core/revocation.ts), then reads the profile back as every
 * verifier does (intake/trust.ts). Keys are files; nothing a key signs leaves this machine but its signature.
 */

const out = (line: string) => process.stdout.write(`${line}\n`);

/** `--key a.key --key b.key`: every key file given, read (a bad file names itself, never its secret). */
function loadKeys(paths: readonly string[]): KeyPair[] {
  if (!paths.length)
    throw new WavegateError('INVALID_INPUT', '--key: at least one private key file is required', { field: '--key' });
  const pairs = paths.map((path) => parseSecretKeyFile(readDocument(path, 'json'), path));
  const seen = new Set<string>();
  pairs.forEach((pair, i) => {
    if (seen.has(pair.kid))
      throw new WavegateError('INVALID_INPUT', `--key ${paths[i]}: ${pair.kid} given twice`, {
        field: '--key',
        value: paths[i],
      });
    seen.add(pair.kid);
  });
  return pairs;
}

const collect = (value: string, previous: string[]) => [...previous, value];

interface ProfileFlags {
  profile: string;
  profiles?: string;
}

function layoutOf(opts: ProfileFlags): ProfileDir {
  return profileDir(resolveProfilesRoot({ flag: opts.profiles }).dir, opts.profile, '--profile');
}

/** The profile's trust as every verifier reads it; a profile without trust.yaml has nothing to sign for. */
function stateOf(layout: ProfileDir): ProfileTrustState {
  const state = profileTrustState(layout);
  if (!state)
    throw new WavegateError(
      'INVALID_INPUT',
      `--profile ${layout.name}: no trust.yaml at ${layout.trustFile}: an unsigned profile has no trust root (write one with \`wavegate trust <signers>.pub.yaml --threshold <n> --out ${layout.trustFile}\`)`,
      { field: '--profile', value: layout.name },
    );
  return state;
}

/** `--timestamp-pub` files and `--timestamp-threshold`: the online timestamp role, or undefined when none given. */
function timestampRole(pubs: readonly string[], threshold: string | undefined): RoleDoc | undefined {
  if (!pubs.length) {
    if (threshold !== undefined)
      throw new WavegateError('INVALID_INPUT', '--timestamp-threshold: given without --timestamp-pub', {
        field: '--timestamp-threshold',
        value: threshold,
      });
    return undefined;
  }
  const n = Number(threshold ?? '1');
  if (!Number.isInteger(n) || n < 1)
    throw new WavegateError(
      'INVALID_INPUT',
      `--timestamp-threshold: must be a whole number of at least 1 (got ${JSON.stringify(threshold)})`,
      { field: '--timestamp-threshold', value: threshold },
    );
  const trust = parseTrust({ threshold: n, pins: pubs.map((p) => readDocument(p)) }, '--timestamp-pub');
  return { threshold: trust.threshold, pins: trust.pins };
}

/** A draft file: an envelope of a trust root or a revocation list. */
function readDraft(path: string): { envelope: Envelope; kind: 'root' | 'revocations' } {
  const envelope = parseWith(Envelope, readDocument(path, 'json'), path);
  const kind = draftKind(envelope);
  if (!kind)
    throw new WavegateError(
      'INVALID_INPUT',
      `${path}: body: not a trust root or revocation list draft (type ${JSON.stringify((peekBody(envelope) as { type?: unknown } | undefined)?.type ?? null)})`,
      { field: 'type', source: path },
    );
  return { envelope, kind };
}

/** A public trust document, written whole or not at all. */
function writeDocument(path: string, envelope: Envelope): void {
  mkdirSync(dirname(path), { recursive: true });
  writeFileAtomic(path, `${JSON.stringify(envelope, null, 2)}\n`, 0o644);
}

/**
 * The profile's revocation list, if any, verified under `trust` (a root about to be published): a new root whose
 * keys no longer carry the list would make the profile refuse every revision, so it is refused before it is
 * written (the new keys cosign the list in place first: its body, so its version and marks, stay the same).
 */
function listUnder(layout: ProfileDir, trust: Trust, what: string): void {
  if (!existsSync(layout.revocationsFile)) return;
  const list = verifyRevocations(readDocument(layout.revocationsFile, 'json'), trust, { profile: layout.name });
  if (!('content' in list))
    throw new WavegateError(
      'INVALID_STATE',
      `${layout.revocationsFile}: does not verify under ${what} (${list.reason}: ${list.message}); nothing was written: a root the profile's revocation list does not verify under would refuse every revision. Have the new keys cosign the list first (its body, version and marks unchanged): wavegate trust cosign ${layout.revocationsFile} --key <a new signer's key>`,
      { field: 'revocations.json', reason: list.reason },
    );
}

/** Read the profile back as a verifier does, after a write: the one proof that what was written is in force. */
function readBack(layout: ProfileDir): ProfileTrustState {
  return stateOf(layout);
}

function describeRoot(root: RootAnchor): string {
  const t = root.trust;
  return `${t.pins.length} pin(s), threshold ${t.threshold}${'timestamp' in root && root.timestamp ? `, timestamp role ${root.timestamp.threshold} of ${root.timestamp.pins.length}` : ''}`;
}

/** `trust init`: trust.yaml → root v1, the same pins and threshold, signed by a threshold of trust.yaml's keys. */
function runInit(
  opts: ProfileFlags & { key: string[]; timestampPub: string[]; timestampThreshold?: string; note?: string },
): number {
  const layout = layoutOf(opts);
  const state = stateOf(layout);
  const version = anchorVersion(state.root);
  if (version > 0)
    throw new WavegateError(
      'CONFLICT',
      `--profile ${layout.name}: already at trust root v${version} (${layout.rootFile(version)}): init is the first step only; change the signers with \`wavegate trust rotate\``,
      { field: '--profile', value: layout.name },
    );
  const pairs = loadKeys(opts.key);
  const content = nextRootContent({
    profile: layout.name,
    from: state.root,
    next: { threshold: state.root.trust.threshold, pins: state.root.trust.pins },
    timestamp: timestampRole(opts.timestampPub, opts.timestampThreshold) ?? null,
    ...(opts.note !== undefined ? { note: opts.note } : {}),
    now: Date.now(),
  });
  const unpinned = pairs.filter((p) => !state.root.trust.keys.has(p.kid));
  if (unpinned.length)
    throw new WavegateError(
      'INVALID_INPUT',
      `--key: ${unpinned.map((p) => p.kid).join(', ')} is not pinned in ${layout.trustFile}: root v1 is signed by the keys trust.yaml pins`,
      { field: '--key', value: unpinned[0]!.kid },
    );
  const envelope = signDocument(content, pairs);
  const next = verifyNextRoot(state.root, envelope, { profile: layout.name });
  if (!('content' in next))
    throw new WavegateError(
      'INVALID_INPUT',
      `--key: ${pairs.length} key(s) given, ${layout.trustFile}'s threshold is ${state.root.trust.threshold} (${next.reason}: ${next.message}); nothing was written`,
      { field: '--key', value: pairs.length, reason: next.reason },
    );
  return publishRoot(layout, next, 'init');
}

/** Write a verified next root as root/<n>.json (never over one), then read the profile back. */
function publishRoot(layout: ProfileDir, next: TrustRoot, how: string, gate?: () => () => void): number {
  const path = layout.rootFile(next.content.version);
  listUnder(layout, next.trust, `trust root v${next.content.version}`);
  if (existsSync(path))
    throw new WavegateError('CONFLICT', `${path}: already exists; nothing was written`, { field: 'version' });
  // A signer rotation's retire gate runs last, just before the write: every other refusal leaves it unrecorded.
  const recordRetire = gate?.();
  mkdirSync(layout.rootDir, { recursive: true });
  writeDocument(path, next.envelope);
  let state: ProfileTrustState;
  try {
    state = readBack(layout);
  } catch (err) {
    // Every check ran before the write; a profile that refuses now changed under us: take ours back out.
    rmSync(path, { force: true });
    throw err;
  }
  recordRetire?.();
  out(
    `wrote ${path}: trust root v${next.content.version} of ${layout.name} (${describeRoot(next)}), body sha256 ${next.digest}`,
  );
  out(
    `verified (${how}): ${layout.name} is now trusted by root v${anchorVersion(state.root)}, walked from ${layout.trustFile}; give every worker's and agent's profiles root the new root/ file`,
  );
  out(registryHint(layout));
  return EXIT_OK;
}

/** `trust rotate`: the draft of root v N+1 (the pins and threshold of --trust), signed by the keys given. */
function runRotate(
  opts: ProfileFlags & {
    trust: string;
    key: string[];
    out: string;
    timestampPub: string[];
    timestampThreshold?: string;
    note?: string;
  },
): number {
  const layout = layoutOf(opts);
  const state = stateOf(layout);
  const nextTrust = parseTrust(readDocument(opts.trust), opts.trust);
  const pairs = loadKeys(opts.key);
  const timestamp = timestampRole(opts.timestampPub, opts.timestampThreshold);
  const content = nextRootContent({
    profile: layout.name,
    from: state.root,
    next: { threshold: nextTrust.threshold, pins: nextTrust.pins },
    ...(timestamp ? { timestamp } : {}),
    ...(opts.note !== undefined ? { note: opts.note } : {}),
    now: Date.now(),
  });
  const useless = pairs.filter((p) => !state.root.trust.keys.has(p.kid) && !nextTrust.keys.has(p.kid));
  if (useless.length)
    throw new WavegateError(
      'INVALID_INPUT',
      `--key: ${useless.map((p) => p.kid).join(', ')} is pinned neither by v${anchorVersion(state.root)} nor by ${opts.trust}: its signature would count for nothing`,
      { field: '--key', value: useless[0]!.kid },
    );
  const envelope = signDocument(content, pairs);
  writeDocument(opts.out, envelope);
  out(
    `wrote ${opts.out}: draft of trust root v${content.version} of ${layout.name} (${nextTrust.pins.length} pin(s), threshold ${nextTrust.threshold}${content.removes ? `; removes ${content.removes.join(', ')}` : ''})`,
  );
  out(`signed: ${rootTallyText(rootTally(state.root, envelope, content))}`);
  out(
    `next: \`wavegate trust cosign ${opts.out} --key <key>\` up to both thresholds, then \`wavegate trust publish ${opts.out} --profile ${layout.name}\``,
  );
  return EXIT_OK;
}

type RevokeFlags = ProfileFlags & {
  revision?: string;
  digest?: string;
  signerKey?: string;
  reason?: string;
  lift?: boolean;
  key: string[];
  out?: string;
};

/** `--revision N [--digest hex]` or `--signer-key kid`, exactly one. */
function revocationChange(opts: RevokeFlags): RevocationChange {
  if ((opts.revision === undefined) === (opts.signerKey === undefined))
    throw new WavegateError('INVALID_INPUT', '--revision / --signer-key: give exactly one of them', {
      field: '--revision',
    });
  if (opts.signerKey !== undefined) {
    if (opts.digest !== undefined)
      throw new WavegateError('INVALID_INPUT', `--digest: names a revision's envelope, not a key (with --signer-key)`, {
        field: '--digest',
        value: opts.digest,
      });
    if (!KID_PATTERN.test(opts.signerKey))
      throw new WavegateError(
        'INVALID_INPUT',
        `--signer-key: must be a key id sha256/<43 base64url> (got ${JSON.stringify(opts.signerKey)})`,
        { field: '--signer-key', value: opts.signerKey },
      );
    return { kid: opts.signerKey };
  }
  const n = Number(opts.revision);
  if (!/^[1-9][0-9]{0,8}$/.test(opts.revision!))
    throw new WavegateError(
      'INVALID_INPUT',
      `--revision: must be a revision number (got ${JSON.stringify(opts.revision)})`,
      { field: '--revision', value: opts.revision },
    );
  if (opts.digest !== undefined && !/^[0-9a-f]{64}$/.test(opts.digest))
    throw new WavegateError(
      'INVALID_INPUT',
      `--digest: must be an envelope's body sha256, 64 lowercase hex (got ${JSON.stringify(opts.digest)})`,
      { field: '--digest', value: opts.digest },
    );
  return { revision: n, ...(opts.digest !== undefined ? { digest: opts.digest } : {}) };
}

/** `trust revoke`: the next revocation list, published at once when the keys given meet the root's threshold, else a draft. */
function runRevoke(opts: RevokeFlags): number {
  const layout = layoutOf(opts);
  const state = stateOf(layout);
  const change = revocationChange(opts);
  if (opts.lift && opts.reason !== undefined)
    throw new WavegateError('INVALID_INPUT', '--reason: a lift takes no reason (the entry is taken out)', {
      field: '--reason',
    });
  const pairs = loadKeys(opts.key);
  const content = nextRevocationsContent({
    profile: layout.name,
    ...(state.revocations ? { current: state.revocations.content } : {}),
    change,
    ...(opts.reason !== undefined ? { reason: opts.reason } : {}),
    ...(opts.lift ? { lift: true } : {}),
    now: Date.now(),
  });
  const useless = pairs.filter((p) => !state.root.trust.keys.has(p.kid));
  if (useless.length)
    throw new WavegateError(
      'INVALID_INPUT',
      `--key: ${useless.map((p) => p.kid).join(', ')} is not a key of root v${anchorVersion(state.root)}: its signature would count for nothing`,
      { field: '--key', value: useless[0]!.kid },
    );
  const envelope = signDocument(content, pairs);
  const tally = listTallyText({
    version: anchorVersion(state.root),
    signed: signedBy(envelope, state.root.trust),
    threshold: state.root.trust.threshold,
  });
  const what = `revocation list v${content.version} of ${layout.name} (${content.revisions.length} revision(s), ${content.keys.length} key(s) revoked)`;
  if (opts.out !== undefined) {
    writeDocument(opts.out, envelope);
    out(`wrote ${opts.out}: draft of ${what}`);
    out(`signed: ${tally}`);
    out(
      `next: \`wavegate trust cosign ${opts.out} --key <key>\` up to the threshold, then \`wavegate trust publish ${opts.out} --profile ${layout.name}\``,
    );
    return EXIT_OK;
  }
  return publishList(
    layout,
    state,
    envelope,
    `signed: ${tally}; write a draft with --out and have other signers cosign it`,
  );
}

/** Write a revocation list that verifies under the current root and is above the list held, then read back. */
function publishList(layout: ProfileDir, state: ProfileTrustState, envelope: Envelope, short: string): number {
  const held = state.revocations;
  const list = verifyRevocations(envelope, state.root.trust, {
    profile: layout.name,
    ...(held ? { held: { version: held.content.version, digest: held.digest } } : {}),
  });
  if (!('content' in list))
    throw new WavegateError(
      'INVALID_INPUT',
      `revocation list: ${list.reason}: ${list.message}${list.reason === 'BELOW_THRESHOLD' || list.reason === 'UNPINNED_KEY' ? ` (${short})` : ''}; nothing was written`,
      { reason: list.reason },
    );
  if (held && list.content.version <= held.content.version)
    throw new WavegateError(
      'CONFLICT',
      `revocation list v${list.content.version}: ${layout.revocationsFile} already holds v${held.content.version}; a list is published once, above the one held`,
      { field: 'version', value: list.content.version },
    );
  const before = existsSync(layout.revocationsFile) ? readDocument(layout.revocationsFile, 'json') : undefined;
  writeDocument(layout.revocationsFile, envelope);
  try {
    readBack(layout);
  } catch (err) {
    if (before === undefined) rmSync(layout.revocationsFile, { force: true });
    else writeDocument(layout.revocationsFile, before as Envelope);
    throw err;
  }
  out(
    `wrote ${layout.revocationsFile}: revocation list v${list.content.version} of ${layout.name}, body sha256 ${list.digest}`,
  );
  for (const r of list.content.revisions)
    out(`  revoked r${r.revision}${r.digest ? ` (envelope ${r.digest.slice(0, 16)}…)` : ''}: ${r.reason}`);
  for (const k of list.content.keys) out(`  revoked key ${k.kid}: ${k.reason}`);
  out(
    `verified: in force for plan, start, converge and this profiles root's workers; give every worker's and agent's profiles root the new revocations.json`,
  );
  out(registryHint(layout));
  return EXIT_OK;
}

/** `trust cosign`: add signatures to a draft, in place (or to --out), and say what it still needs. */
function runCosign(path: string, opts: { key: string[]; out?: string; profiles?: string }): number {
  const { envelope, kind } = readDraft(path);
  let signed = envelope;
  for (const pair of loadKeys(opts.key)) signed = cosignEnvelope(signed, pair);
  writeDocument(opts.out ?? path, signed);
  out(`cosigned: ${signed.signatures.length} signature(s); wrote ${opts.out ?? path}`);
  const profile = (peekBody(signed) as { profile?: unknown }).profile;
  const layout =
    typeof profile === 'string' ? profileDir(resolveProfilesRoot({ flag: opts.profiles }).dir, profile) : undefined;
  const state = layout && existsSync(layout.trustFile) ? profileTrustState(layout) : undefined;
  if (state) out(`signed: ${draftTally(state, signed, kind)}`);
  return EXIT_OK;
}

function draftTally(state: ProfileTrustState, envelope: Envelope, kind: 'root' | 'revocations'): string {
  if (kind === 'revocations')
    return listTallyText({
      version: anchorVersion(state.root),
      signed: signedBy(envelope, state.root.trust),
      threshold: state.root.trust.threshold,
    });
  const content = peekBody(envelope) as Parameters<typeof rootTally>[2];
  return Array.isArray(content?.pins) ? rootTallyText(rootTally(state.root, envelope, content)) : 'unreadable draft';
}

type PublishFlags = ProfileFlags &
  TemporalFlags & { rotation?: string; inventory?: string; state?: string; statement?: string; force?: boolean };

/**
 * A root dropping the old signer of the `--rotation` schedule (kind signer) is that rotation's retire: the gate
 * (cli/signer-rotation.ts) refuses it while a required device holds no root pinning the new signer. Undefined: no
 * schedule given, or this root drops no key of it.
 */
async function signerGate(next: TrustRoot, opts: PublishFlags): Promise<(() => () => void) | undefined> {
  if (opts.rotation === undefined) {
    for (const flag of ['inventory', 'state', 'statement', 'force'] as const)
      if (opts[flag] !== undefined)
        throw new WavegateError('INVALID_INPUT', `--${flag}: only with --rotation <schedule>`, { field: `--${flag}` });
    return undefined;
  }
  const { signerContext, gateSignerRetire } = require('../signer-rotation') as typeof import('../signer-rotation');
  const now = Date.now();
  const ctx = await signerContext(opts.rotation, opts, now);
  const rotation = ctx.schedule.rotation;
  if (!(next.content.removes ?? []).includes(rotation.old!)) {
    out(`rotation ${rotation.id}: trust root v${next.content.version} keeps ${rotation.old}: no retire to gate`);
    return undefined;
  }
  const statement =
    opts.statement !== undefined
      ? {
          path: opts.statement,
          envelope: readDocument(opts.statement, 'json'),
          trust: stateOf(layoutOf(opts)).root.trust,
        }
      : undefined;
  return () => {
    const decision = gateSignerRetire({
      ctx,
      root: next,
      force: opts.force === true,
      now,
      ...(statement ? { statement } : {}),
    });
    if (decision.forced)
      process.stderr.write(
        `wavegate: FORCED retire of ${rotation.id}: ${decision.notActive.map((d) => d.device).join(', ')} still on a root without the new signer (recorded in ${ctx.statePath})\n`,
      );
    return decision.record;
  };
}

/** `trust publish`: write a draft into the profile only when it verifies as the next root / the next list. */
async function runPublish(path: string, opts: PublishFlags): Promise<number> {
  const layout = layoutOf(opts);
  const { envelope, kind } = readDraft(path);
  const profile = (peekBody(envelope) as { profile?: unknown }).profile;
  if (profile !== layout.name)
    throw new WavegateError(
      'INVALID_INPUT',
      `${path}: a draft for profile ${JSON.stringify(profile)}, not --profile ${layout.name}`,
      { field: 'profile', value: profile },
    );
  const state = stateOf(layout);
  if (kind === 'revocations')
    return publishList(layout, state, envelope, `signed: ${draftTally(state, envelope, kind)}`);
  const next = verifyNextRoot(state.root, envelope, { profile: layout.name });
  if (!('content' in next)) {
    const content = peekBody(envelope) as Parameters<typeof rootTally>[2];
    const missing = Array.isArray(content?.pins)
      ? ` (signed: ${rootTallyText(rootTally(state.root, envelope, content))})`
      : '';
    throw new WavegateError(
      'INVALID_INPUT',
      `${path}: not the next trust root of ${layout.name} (${next.reason}: ${next.message})${missing}; nothing was written`,
      { reason: next.reason, source: path },
    );
  }
  return publishRoot(layout, next, 'publish', await signerGate(next, opts));
}

/** The registry verifies only what it was offered: the way to offer it now. */
function registryHint(layout: ProfileDir): string {
  return `registry:${layout.name} takes it at the next \`wavegate register --profiles\`, or now: \`wavegate trust sync --profile ${layout.name}\``;
}

/**
 * `trust sync`: offer `registry:<profile>` the trust roots above the one it holds and the revocation list when newer
 * (cli/registry-client.ts); it walks them itself and refuses what does not verify (exit 2 with its reason, what it
 * held kept). A profile without a registry is left alone: the first `wavegate register` creates one. Loaded here
 * only when run: the rest of this group never talks to Temporal.
 */
async function runSync(opts: ProfileFlags & TemporalFlags & { json?: boolean }): Promise<number> {
  const layout = layoutOf(opts);
  stateOf(layout);
  const { connectClient } = require('../client') as typeof import('../client');
  const { syncNotes, syncRegistryTrust } = require('../registry-client') as typeof import('../registry-client');
  const { resolveConnectionSettings } =
    require('../../workers/connection') as typeof import('../../workers/connection');
  const client = await connectClient(resolveConnectionSettings(opts));
  try {
    const sync = (await syncRegistryTrust(client, { layout }))!;
    if (opts.json) out(JSON.stringify({ profile: layout.name, ...sync, refused: sync.refused?.message }));
    else if (!sync.before)
      out(`registry:${layout.name} does not exist: nothing to offer (the first \`wavegate register\` creates it)`);
    else if (!sync.adopted.length && !sync.refused)
      out(
        `registry:${layout.name} already holds trust root v${sync.before.root} and revocation list v${sync.before.revocations}: nothing to offer`,
      );
    else for (const line of syncNotes(layout.name, sync)) if (!line.startsWith('note: ')) out(line);
    if (sync.refused) throw sync.refused;
    return EXIT_OK;
  } finally {
    await client.connection.close();
  }
}

/** `trust status`: what the profile is trusted by now, as its verifiers read it. */
function runStatus(opts: ProfileFlags & { json?: boolean }): number {
  const layout = layoutOf(opts);
  const state = stateOf(layout);
  const root = state.root;
  const held = existsSync(layout.heldTrustFile) ? readDocument(layout.heldTrustFile, 'json') : null;
  const list = state.revocations?.content;
  const role = (t: Trust) => ({
    threshold: t.threshold,
    pins: t.pins.map((p) => ({ kid: p.kid, ...(p.name ? { name: p.name } : {}) })),
  });
  const status = {
    profile: layout.name,
    root: {
      version: anchorVersion(root),
      file: 'content' in root ? layout.rootFile(root.content.version) : layout.trustFile,
      ...('content' in root
        ? {
            digest: root.digest,
            issuedAt: root.content.issuedAt,
            ...(root.content.note ? { note: root.content.note } : {}),
          }
        : {}),
      ...role(root.trust),
      timestamp: 'timestamp' in root && root.timestamp ? role(root.timestamp) : null,
    },
    revocations: list
      ? {
          version: list.version,
          digest: state.revocations!.digest,
          issuedAt: list.issuedAt,
          revisions: list.revisions,
          keys: list.keys,
        }
      : null,
    held,
  };
  if (opts.json) {
    out(JSON.stringify(status, null, 2));
    return EXIT_OK;
  }
  const r = status.root;
  out(`profile ${layout.name}: trust root v${r.version} (${r.file})${r.version ? `, issued ${r.issuedAt}` : ''}`);
  if ('note' in r && r.note) out(`  note: ${r.note}`);
  out(`  threshold ${r.threshold} of ${r.pins.length} pin(s):`);
  for (const p of r.pins) out(`    ${p.kid}${p.name ? `  ${p.name}` : ''}`);
  out(
    r.timestamp
      ? `  timestamp role: threshold ${r.timestamp.threshold} of ${r.timestamp.pins.map((p) => p.kid).join(', ')}`
      : '  timestamp role: none',
  );
  if (!list) out('revocations: none');
  else {
    out(`revocations: list v${list.version}, issued ${list.issuedAt}`);
    for (const e of list.revisions)
      out(`  revoked r${e.revision}${e.digest ? ` (envelope ${e.digest.slice(0, 16)}…)` : ''}: ${e.reason}`);
    for (const k of list.keys) out(`  revoked key ${k.kid}: ${k.reason}`);
    if (!list.revisions.length && !list.keys.length) out('  (nothing revoked)');
  }
  out(`held marks (${layout.heldTrustFile}): ${held ? JSON.stringify(held) : 'none yet'}`);
  return EXIT_OK;
}

/**
 * The `trust` command: `trust <pubfiles…> --out trust.yaml` writes a trust file (version 0); its subcommands sign
 * and publish what comes after it. Options are positional (a subcommand's `--out` is its own).
 */
export function registerTrust(program: Command): void {
  const trust = program
    .command('trust <pubfiles...>')
    .description(
      'Write a trust file (version 0 of the trust root) from public pin files (<key>.pub.yaml from keygen); its subcommands init, rotate, revoke, cosign, publish, status and sync sign and publish the trust root and revocation list',
    )
    .option('--out <file>', 'trust file to write (YAML)')
    .option('--threshold <n>', 'distinct pinned signers required', '1')
    .enablePositionalOptions()
    .action(action(runTrustFile));
  const profileOptions = (cmd: Command) =>
    cmd.requiredOption('--profile <name>', 'the profile').option('--profiles <dir>', profilesOptionHelp());
  profileOptions(
    trust
      .command('init')
      .description(
        "Sign the profile's first trust root (root/1.json) from its trust.yaml: the same pins and threshold, signed by a threshold of trust.yaml's keys, then verified as every verifier reads it",
      ),
  )
    .option('--key <file>', 'a signer private key file (repeat up to the threshold)', collect, [])
    .option('--timestamp-pub <file>', 'a timestamp role pin (<key>.pub.yaml; repeat)', collect, [])
    .option('--timestamp-threshold <n>', 'timestamp signatures required (default 1)')
    .option('--note <text>', 'why this version exists (shown by trust status)')
    .action(action(runInit));
  profileOptions(
    trust
      .command('rotate')
      .description(
        "Draft the next trust root: the pins and threshold of --trust, the keys it drops named in removes, signed by the keys given (it needs a threshold of the current root's keys and of its own)",
      ),
  )
    .requiredOption('--trust <file>', 'the next pins and threshold (a trust.yaml)')
    .requiredOption('--out <file>', 'the draft to write (JSON)')
    .option('--key <file>', 'a signer private key file (repeat)', collect, [])
    .option('--timestamp-pub <file>', "the next timestamp role's pins (default: the current role)", collect, [])
    .option('--timestamp-threshold <n>', 'timestamp signatures required (default 1)')
    .option('--note <text>', 'why this version exists (shown by trust status)')
    .action(action(runRotate));
  profileOptions(
    trust
      .command('revoke')
      .description(
        "Revoke a revision or a signer key (or --lift a revocation): the next revocation list, signed by the keys given; published at once when they meet the root's threshold, else written to --out to cosign",
      ),
  )
    .option('--revision <n>', 'the revision to revoke')
    .option('--digest <hex>', "only the revision's envelope with this body sha256")
    .option('--signer-key <kid>', 'the signer key to revoke (its signatures no longer count)')
    .option('--reason <text>', 'why (one line, shown wherever it is refused)')
    .option('--lift', 'take the revocation out instead')
    .option('--key <file>', 'a signer private key file (repeat)', collect, [])
    .option('--out <file>', 'write a draft to cosign instead of publishing')
    .action(action(runRevoke));
  trust
    .command('cosign <draft>')
    .description('Add signatures to a trust root or revocation list draft, in place (or to --out)')
    .option('--key <file>', 'a signer private key file (repeat)', collect, [])
    .option('--out <file>', 'write the cosigned draft here instead')
    .option('--profiles <dir>', profilesOptionHelp())
    .action(action(runCosign));
  withTemporalOptions(
    profileOptions(
      trust
        .command('publish <draft>')
        .description(
          'Write a draft into the profile (root/<n>.json or revocations.json) only when it verifies as the next one; else exit 2 naming what is missing. With --rotation (a signer schedule), a root dropping its old signer is refused (exit 2, CONFLICT naming them) while a required device holds no root pinning the new one',
        ),
    ),
  )
    .option('--rotation <schedule>', 'the signed rotation schedule (kind signer) this root carries out')
    .option('--inventory <fleet.yaml>', 'with --rotation: the devices whose held root the retire waits for')
    .option('--state <dir>', 'with --rotation: directory of the rotation state file (default beside the inventory)')
    .option(
      '--statement <file>',
      'with --rotation: a retire statement signed forced (rotation retire-statement --forced)',
    )
    .option(
      '--force',
      'with --rotation: go ahead past required devices not active (the statement must be signed forced)',
    )
    .action(action(runPublish));
  profileOptions(
    trust
      .command('status')
      .description(
        'The trust root, its pins and threshold, the timestamp role, the revocation list and the held marks',
      ),
  )
    .option('--json', 'print JSON')
    .action(action(runStatus));
  withTemporalOptions(
    profileOptions(
      trust
        .command('sync')
        .description(
          "Offer the profile's revision registry (registry:<profile>) the trust roots and revocation list it lacks; it takes them only when they verify from what it holds, else exit 2 with the reason",
        ),
    ),
  )
    .option('--json', 'print JSON')
    .action(action(runSync));
}

/** `trust <pubfiles…> --out trust.yaml`: version 0 of the trust root, from the signers' public pin files. */
function runTrustFile(pubfiles: string[], opts: { out?: string; threshold: string }): number {
  if (opts.out === undefined)
    throw new WavegateError('INVALID_INPUT', '--out: required (the trust file to write, e.g. <profile>/trust.yaml)', {
      field: '--out',
    });
  const pins = pubfiles.map((path) => readDocument(path));
  const doc = { threshold: Number(opts.threshold), pins };
  const trust = parseTrust(doc, opts.out);
  mkdirSync(dirname(opts.out), { recursive: true });
  writeFileAtomic(opts.out, toYaml(doc), 0o644);
  out(`wrote ${opts.out}: ${trust.pins.length} pin(s), threshold ${trust.threshold}`);
  return EXIT_OK;
}
