import { randomBytes } from 'node:crypto';
import { chmodSync, mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname, resolve } from 'node:path';
import type { Command } from 'commander';
import { stringify as toYaml } from 'yaml';
import { WavegateError } from '../../core/errors';
import { ESCAPE_FLAGS, runRegistrationGates } from '../../core/gates';
import {
  fillPayloadDigests,
  parseProfile,
  parseRevision,
  parseRevisionSource,
  type Revision,
  type RevisionSource,
} from '../../core/revision';
import {
  assertSignable,
  bodyDigest,
  DEFAULT_VALIDITY_DAYS,
  MAX_VALIDITY_DAYS,
  cosignEnvelope,
  Envelope,
  keyPairFromSeed,
  parseSecretKeyFile,
  parseTrust,
  pinOf,
  secretKeyFile,
  signedContent,
  signRevision,
  verifyEnvelope,
} from '../../core/signing';
import { invalidFields, parseWith } from '../../core/validation';
import { payloadSourceProblems } from '../../intake/profile-dir';
import { readDocument } from '../../intake/files';
import { readPayloadFacts } from '../../intake/payload-digest';
import { shellWord } from '../../intake/scaffold';
import { action, EXIT_OK, EXIT_REFUSED } from '../run';
import { registerTrust } from './trust';
import { loadInventory } from '../../intake/inventory';

/**
 * Offline key handling: `keygen`, `sign`, `cosign`, `verify`. Keys are files on disk (private key file
 * mode 0600); only pins (kid + public key) are ever printed. The control plane never needs these.
 */

function loadKey(path: string) {
  return parseSecretKeyFile(readDocument(path, 'json'), path);
}

function loadEnvelope(path: string): Envelope {
  return parseWith(Envelope, readDocument(path, 'json'), path);
}

/**
 * Write through a new temporary file, so a crash never leaves half an envelope and the file's mode is
 * always `mode`: the temporary file is created (never reused) with it, and the rename replaces the old
 * file, whatever its mode was. A mode only applies to a file being created, so writing over an existing
 * 0644 file in place would leave a private key readable by others.
 */
function writeAtomic(path: string, text: string, mode = 0o644): void {
  const tmp = `${path}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
  // A new profile's first `sign --out envelopes/1.json` creates envelopes/.
  mkdirSync(dirname(path), { recursive: true });
  try {
    writeFileSync(tmp, text, { mode, flag: 'wx' });
    chmodSync(tmp, mode); // the umask may have narrowed it further; never widened
    renameSync(tmp, path);
  } catch (err) {
    rmSync(tmp, { force: true });
    throw err;
  }
}

function parseNow(value: string | undefined): number {
  if (value === undefined) return Date.now();
  const ms = Date.parse(value);
  if (Number.isNaN(ms))
    throw new WavegateError('INVALID_INPUT', `--now: must be an ISO 8601 time (got ${JSON.stringify(value)})`);
  return ms;
}

/**
 * The profile directory a revision being signed belongs to: the directory of `--profile <dir>/profile.yaml`,
 * else `<dir>` of a revision at `<dir>/revisions/<n>.yaml` (the layout of intake/profile-dir.ts); else unknown.
 */
function signedProfileDir(revisionPath: string, profileFile: string | undefined): string | undefined {
  if (profileFile !== undefined) return dirname(resolve(profileFile));
  const dir = dirname(resolve(revisionPath));
  return basename(dir) === 'revisions' ? dirname(dir) : undefined;
}

/**
 * The revision `sign` signs: the source with every omitted payload `sha256`/`size` filled from its file
 * in the profile's payload/, and every given one checked against it (a difference is refused, exit 2,
 * naming the entry, the field, the value written and the file's). Files are read only where the
 * profile directory is known; a given value of a file that is not there (yet) is signed as written.
 */
function payloadDigests(
  source: RevisionSource,
  profileDir: string | undefined,
  revisionPath: string,
): { revision: Revision; filled: string[] } {
  const reads = source.payload.map((entry) =>
    profileDir === undefined ? undefined : readPayloadFacts(profileDir, entry.source),
  );
  const decision = fillPayloadDigests(
    source,
    (i) => {
      const read = reads[i];
      return read && 'facts' in read ? read.facts : undefined;
    },
    (i) => {
      const read = reads[i];
      if (read && 'missing' in read) return read.missing;
      return `the profile directory is unknown, so sign cannot find ${source.payload[i]!.source}: sign <profile>/revisions/<n>.yaml, or pass --profile <profile>/profile.yaml`;
    },
  );
  if (decision.problems.length) invalidFields(revisionPath, decision.problems);
  return { revision: parseRevision(decision.revision, revisionPath), filled: decision.filled };
}

/** What sign filled, said once: the revision file itself is left as the user wrote it (the envelope carries the values). */
function filledNote(revision: Revision, filled: readonly string[], revisionPath: string): string {
  const entries = [...new Set(filled.map((path) => Number(/^payload\[(\d+)\]/.exec(path)![1])))];
  if (!entries.length) return '';
  const lines = entries.map((i) => {
    const f = revision.payload[i]!;
    return `  payload "${f.name}" (${f.source}): sha256 ${f.sha256}, size ${f.size}\n`;
  });
  return `filled from the payload files into the signed content (${revisionPath} is left as written; the envelope carries them):\n${lines.join('')}`;
}

/** `--allow-no-payload` → `allowNoPayload`, as commander names it. */
function camel(flag: string): string {
  return flag.replace(/^--/, '').replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
}

/** The group's commands, in the order the help lists them. */
export function register(program: Command): void {
  for (const add of [registerKeygen, registerTrust, registerSign, registerCosign, registerVerify]) add(program);
}

function registerKeygen(program: Command): void {
  program
    .command('keygen')
    .description('Make an Ed25519 signing key; writes the private key file (mode 0600) and prints its pin')
    .requiredOption('--out <file>', 'private key file to create')
    .option('--name <name>', 'a name for the pin (who holds the key)')
    .option('--force', 'overwrite an existing file')
    .action(action(runKeygen));
}

/** `wavegate keygen`: the private key file (0600, never over an existing one without --force) and its pin beside it. */
function runKeygen(opts: { out: string; name?: string; force?: boolean }): number {
  const pair = keyPairFromSeed(new Uint8Array(randomBytes(32)));
  const text = `${JSON.stringify(secretKeyFile(pair), null, 2)}\n`;
  try {
    if (opts.force) writeAtomic(opts.out, text, 0o600);
    else writeFileSync(opts.out, text, { mode: 0o600, flag: 'wx' });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new WavegateError(
      code === 'EEXIST' ? 'CONFLICT' : 'INVALID_INPUT',
      `${opts.out}: ${code === 'EEXIST' ? 'already exists (use --force to overwrite)' : `cannot write (${code ?? String(err)})`}`,
    );
  }
  const pin = pinOf(pair, opts.name);
  writeFileSync(`${opts.out}.pub.yaml`, toYaml(pin));
  // The trust file is written by `wavegate trust` from the .pub.yaml files (the next documented step), not by hand.
  const pub = `${opts.out}.pub.yaml`;
  process.stdout.write(
    `wrote ${opts.out} (private, mode 0600) and ${pub}\nkid: ${pair.kid}\n\nits pin (public, in ${pub}):\n${toYaml(pin).replace(/^/gm, '  ').trimEnd()}\n\n` +
      `next: pin the signers for a profile: \`wavegate trust\` writes its trust file from every signer's .pub.yaml:\n` +
      `  wavegate trust ${shellWord(pub)} [<other signers>.pub.yaml ...] --threshold <n> --out <profiles>/<profile>/trust.yaml\n`,
  );
  return EXIT_OK;
}

type SignFlags = { key: string; out: string; validityDays: string; inventory?: string; profile?: string } & Record<
  string,
  unknown
>;

function registerSign(program: Command): void {
  const sign = program
    .command('sign <revision>')
    .description('Sign a revision (YAML/JSON) into an envelope: { body: base64(canonical JSON), signatures }')
    .requiredOption('--key <file>', 'private key file (from keygen)')
    .requiredOption('--out <file>', 'envelope file to write (JSON)')
    .option(
      '--validity-days <n>',
      `expiry when the revision has no expiresAt (at most ${MAX_VALIDITY_DAYS})`,
      String(DEFAULT_VALIDITY_DAYS),
    )
    .option('--inventory <file>', 'run the registration gates against this inventory before signing')
    .option('--profile <file>', 'profile whose scope selects the targets (with --inventory)');
  for (const [gate, flag] of Object.entries(ESCAPE_FLAGS))
    sign.option(flag, `escape the "${gate}" registration gate (loudly, on the record)`);
  sign.action(action(runSign));
}

/** `wavegate sign`: the revision checked (payload files, validity, with --inventory the gates), signed, written. */
function runSign(revisionPath: string, opts: SignFlags): number {
  const source = parseRevisionSource(readDocument(revisionPath), revisionPath);
  const profileDir = signedProfileDir(revisionPath, opts.profile);
  // Payload sources inside the profile's payload/ only (what a worker would send): by their text, and on disk where the profile is known.
  const sourceProblems = payloadSourceProblems(source.payload, profileDir);
  if (sourceProblems.length) invalidFields(revisionPath, sourceProblems);
  const { revision, filled } = payloadDigests(source, profileDir, revisionPath);
  const days = Number(opts.validityDays);
  if (!Number.isInteger(days) || days < 1 || days > MAX_VALIDITY_DAYS) {
    throw new WavegateError(
      'INVALID_INPUT',
      `--validity-days: must be a whole number of days 1-${MAX_VALIDITY_DAYS} (got ${JSON.stringify(opts.validityDays)})`,
    );
  }
  // Refused before any gate runs or key is read: expired content, or a validity above the maximum.
  const now = Date.now();
  assertSignable(signedContent(revision, { now, validityDays: days }), now, revisionPath);
  const escapes = opts.inventory ? gateEscapes(revision, revisionPath, opts.inventory, opts) : [];
  if (escapes === undefined) return EXIT_REFUSED;
  const pair = loadKey(opts.key);
  const signed = escapes.length ? { ...revision, escapes: [...(revision.escapes ?? []), ...escapes] } : revision;
  const envelope = signRevision(signed, pair, { now, validityDays: days });
  writeAtomic(opts.out, `${JSON.stringify(envelope, null, 2)}\n`);
  process.stdout.write(
    `signed ${revision.profile} r${revision.revision} by ${pair.kid}\nbody sha256 ${bodyDigest(envelope)}\n${filledNote(revision, filled, revisionPath)}wrote ${opts.out}\n`,
  );
  return EXIT_OK;
}

/**
 * `sign --inventory`: the registration gates run against the inventory; the gates escaped (with their flags)
 * to sign into the revision, or undefined when a gate blocked it (each block said on stderr).
 */
function gateEscapes(
  revision: Revision,
  revisionPath: string,
  inventoryPath: string,
  opts: SignFlags,
): Array<{ gate: string; flag: string; reason: string }> | undefined {
  const inventory = loadInventory(inventoryPath);
  const scope = opts.profile ? parseProfile(readDocument(opts.profile), opts.profile).scope : {};
  const allow = Object.values(ESCAPE_FLAGS).filter((flag) => opts[camel(flag)] === true);
  const report = runRegistrationGates({ revision, scope, devices: inventory.devices, allow });
  for (const line of report.warnings) process.stderr.write(`${line}\n`);
  for (const note of report.notes) process.stderr.write(`note: ${note}\n`);
  if (!report.ok) {
    for (const b of report.blocked)
      process.stderr.write(
        `wavegate: gate "${b.gate}" blocked ${revisionPath} (${b.reason}): ${b.message} [escape: ${b.flag}]\n`,
      );
    return undefined;
  }
  if (!report.escaped.length) return [];
  process.stdout.write(`${JSON.stringify({ escaped: report.escaped })}\n`);
  return report.escaped;
}

function registerCosign(program: Command): void {
  program
    .command('cosign <envelope>')
    .description('Add a signature to an envelope, in place (or to --out)')
    .requiredOption('--key <file>', 'private key file (from keygen)')
    .option('--out <file>', 'write the cosigned envelope here instead of in place')
    .action(
      action((envelopePath: string, opts: { key: string; out?: string }) => {
        const envelope = loadEnvelope(envelopePath);
        const pair = loadKey(opts.key);
        const cosigned = cosignEnvelope(envelope, pair);
        writeAtomic(opts.out ?? envelopePath, `${JSON.stringify(cosigned, null, 2)}\n`);
        process.stdout.write(
          `cosigned by ${pair.kid}: ${cosigned.signatures.length} signature(s)\nwrote ${opts.out ?? envelopePath}\n`,
        );
        return EXIT_OK;
      }),
    );
}

function registerVerify(program: Command): void {
  program
    .command('verify <envelope>')
    .description('Verify an envelope against a trust file (pins + threshold); exit 0 valid, 2 refused')
    .requiredOption('--trust <file>', 'trust file: { threshold, pins: [{ kid, publicKey }] }')
    .option('--current <n>', 'the highest registered revision: the envelope must be above it')
    .option('--now <iso>', 'verify as of this time (default: now)')
    .option('--json', 'print the verdict as JSON')
    .action(action(runVerify));
}

/** `wavegate verify`: the envelope's verdict against the trust file; exit 0 valid, 2 refused. */
function runVerify(envelopePath: string, opts: { trust: string; current?: string; now?: string; json?: boolean }) {
  const trust = parseTrust(readDocument(opts.trust), opts.trust);
  const envelope = readDocument(envelopePath, 'json');
  let current: number | undefined;
  if (opts.current !== undefined) {
    current = Number(opts.current);
    if (!Number.isInteger(current) || current < 0)
      throw new WavegateError(
        'INVALID_INPUT',
        `--current: must be a revision number (got ${JSON.stringify(opts.current)})`,
      );
  }
  const verdict = verifyEnvelope(envelope, trust, {
    now: parseNow(opts.now),
    ...(current !== undefined ? { current } : {}),
  });
  if (opts.json) {
    process.stdout.write(
      `${JSON.stringify(verdict.ok ? { ok: true, profile: verdict.revision.profile, revision: verdict.revision.revision, signers: verdict.signers, ignored: verdict.ignored, bodyDigest: verdict.bodyDigest } : verdict)}\n`,
    );
  }
  if (!verdict.ok) {
    process.stderr.write(`wavegate: ${envelopePath}: refused (${verdict.reason}): ${verdict.message}\n`);
    return EXIT_REFUSED;
  }
  if (!opts.json) {
    process.stdout.write(
      `valid: ${verdict.revision.profile} r${verdict.revision.revision}, ${verdict.signers.length} of ${trust.threshold} required pinned signer(s), expires ${verdict.revision.expiresAt}\n` +
        `body sha256 ${verdict.bodyDigest}\n` +
        (verdict.ignored.length ? `ignored unpinned signatures: ${verdict.ignored.join(', ')}\n` : ''),
    );
  }
  return EXIT_OK;
}
