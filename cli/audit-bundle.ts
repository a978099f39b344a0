import type { Command } from 'commander';
import { WavegateError } from '../core/errors';
import { verifyReceiptsBundle, type ReceiptFinding, type ReceiptsVerdict } from '../core/receipt-verify';
import { exportReceiptsBundle, readReceiptsBundle } from '../audit/bundle';
import { resolveAuditLocation } from '../audit/file';
import { nativeEd25519Verify } from '../device/ed25519-native';
import { readPinnedKey } from '../intake/checkpoint-keys';
import { checkProfilesRoot, describeProfilesRoot, resolveProfilesRoot } from '../intake/profiles-root';
import { action, EXIT_FAILED } from './run';

/**
 * `wavegate audit export <id> --bundle <dir>` and `wavegate audit verify --receipts <dir>` (docs/cli.md): a
 * rollout's trail with everything needed to check its receipts offline, and the check itself (core/receipt-verify.ts),
 * which reads nothing but the bundle: no Temporal, no audit store, no profiles root.
 */

interface ExportFlags {
  bundle: string;
  inventory: string;
  profiles?: string;
  revoked?: string;
  rotationProofs?: string[];
  logKey?: string;
  witnessKey?: string;
  auditDir?: string;
  auditStore?: string;
}

interface VerifyFlags {
  receipts: string;
  json?: boolean;
  strict?: boolean;
  /** commander's --no-checkpoints-expected: false when given. */
  checkpointsExpected?: boolean;
  logKey?: string;
  witnessKey?: string;
}

/** `<device>: <check>: <message>`, `-` for a finding no one device is concerned by (the trail, a checkpoint). */
export function findingLine(f: ReceiptFinding): string {
  return `${f.device ?? '-'}: ${f.check}: ${f.message}`;
}

/** The summary `audit verify --receipts` prints before the findings. */
export function verdictSummary(dir: string, rollout: string, v: ReceiptsVerdict): string[] {
  const inclusion = v.inclusion
    ? `inclusion: ${v.inclusion.proofs} record(s) proved under the last checkpoint (size ${v.inclusion.size}), largest proof ${v.inclusion.largestBytes} bytes`
    : v.checkpoints === 0
      ? 'inclusion: NOT checked: the bundle holds no checkpoint (a trail rewritten wholesale by the control plane cannot be ruled out)'
      : 'inclusion: NOT checked: no checkpoint of the bundle holds up';
  const s = v.slices;
  // A slice's receipt is included through the slice's hash chain up to the head its linking record names.
  const slices =
    s.trails === 0
      ? []
      : [
          `slices: ${s.anchored} of ${s.trails} linked slice trail(s) anchored at the head their link names (${s.records} records, ${s.receipts} receipts: each included through its slice's chain up to that head and the link's own inclusion)`,
        ];
  return [
    `receipts bundle ${dir}: rollout ${rollout}, ${v.records} records, ${v.checkpoints} checkpoint(s)`,
    `receipts: ${v.receipts} checked for ${v.devices} devices; ${v.proven} proven, ${v.claimed} claimed (no receipt, or one refused)`,
    inclusion,
    ...slices,
    ...keyLines(v.keys),
    v.findings.length === 0 ? 'verdict: every receipt holds' : `verdict: ${v.findings.length} finding(s)`,
  ];
}

/** The checkpoint keys the verification trusted, by key id; the bundle's own word is said to be so. */
function keyLines(keys: ReceiptsVerdict['keys']): string[] {
  const lines = (['log', 'witness'] as const).map((kind) => {
    const k = keys[kind];
    if (!k) return `${kind} key: none (the bundle holds no keys/${kind}.pub and --${kind}-key was not given)`;
    return `${kind} key: ${k.keyId} (${k.from === 'pinned' ? `pinned with --${kind}-key` : `from the bundle's keys/${kind}.pub`})`;
  });
  // The bundle vouches for its own keys: a control plane rewriting the trail can re-sign it under keys of its own.
  if (keys.log?.from === 'bundle' || keys.witness?.from === 'bundle')
    lines.push(
      "keys: those from the bundle are its own word: compare their key ids with the auditor's own copies of the log's and the witness's keys, or pin them (--log-key, --witness-key)",
    );
  return lines;
}

async function exportBundle(id: string, opts: ExportFlags): Promise<number> {
  const root = resolveProfilesRoot({ flag: opts.profiles });
  if (!checkProfilesRoot(root))
    throw new WavegateError('INVALID_INPUT', `profiles root ${describeProfilesRoot(root)}: not a directory`, {
      field: '--profiles',
    });
  const where = resolveAuditLocation(opts, { besideKey: false });
  const manifest = await exportReceiptsBundle({
    rolloutId: id,
    bundleDir: opts.bundle,
    inventory: opts.inventory,
    profilesRoot: root.dir,
    ...(opts.revoked ? { revoked: opts.revoked } : {}),
    ...(opts.rotationProofs ? { rotations: opts.rotationProofs } : {}),
    ...(opts.logKey ? { logKey: opts.logKey } : {}),
    ...(opts.witnessKey ? { witnessKey: opts.witnessKey } : {}),
    ...(opts.auditStore ? { store: opts.auditStore } : {}),
    auditDir: where.auditDir,
  });
  const c = manifest.counts;
  const slices = c.slices === undefined ? '' : `, ${c.slices} slice trail(s) of ${c.sliceRecords} records`;
  console.log(
    `wrote ${opts.bundle}: ${c.records} records${slices}, ${c.receipts} receipts of ${c.devices} devices, ${c.revisions} signed revision(s), ${c.checkpoints} checkpoint(s)`,
  );
  // A linked trail the store has not is in the bundle as missing (the verifier refuses it): say which.
  for (const slice of manifest.slices ?? [])
    if ('missing' in slice)
      console.log(`missing: slice trail ${slice.trail}: linked by the trail but not in the store; the bundle names it`);
  return 0;
}

async function verifyBundle(opts: VerifyFlags): Promise<number> {
  if (opts.strict && opts.checkpointsExpected === false)
    throw new WavegateError(
      'INVALID_INPUT',
      '--strict and --no-checkpoints-expected: --strict requires checkpoints, which --no-checkpoints-expected says there are none of',
      { field: '--no-checkpoints-expected' },
    );
  // Bad flag input refused (exit 2) before the bundle is read.
  const pinned = {
    ...(opts.logKey !== undefined ? { log: readPinnedKey('--log-key', opts.logKey, 'log') } : {}),
    ...(opts.witnessKey !== undefined ? { witness: readPinnedKey('--witness-key', opts.witnessKey, 'witness') } : {}),
  };
  let bundle: ReturnType<typeof readReceiptsBundle>;
  try {
    bundle = readReceiptsBundle(opts.receipts);
  } catch (err) {
    if (err instanceof WavegateError) throw err;
    // A directory where a file should be, and the like: the bundle cannot be read, which is a refusal (exit 2).
    throw new WavegateError('INVALID_INPUT', `--receipts ${opts.receipts}: cannot be read (${(err as Error).message})`);
  }
  const verdict = verifyReceiptsBundle(bundle, {
    verifySignature: nativeEd25519Verify,
    pinned,
    checkpointsExpected: opts.checkpointsExpected !== false,
  });
  if (opts.json)
    console.log(JSON.stringify({ rollout: bundle.rollout, ok: verdict.findings.length === 0, ...verdict }));
  else {
    for (const line of verdictSummary(opts.receipts, bundle.rollout, verdict)) console.log(line);
    for (const f of verdict.findings) console.log(findingLine(f));
  }
  if (verdict.findings.length > 0) return EXIT_FAILED;
  if (opts.checkpointsExpected === false && verdict.checkpoints === 0)
    process.stderr.write(
      "wavegate: --no-checkpoints-expected: the bundle holds no checkpoint, so inclusion was not checked: the trail is the control plane's word\n",
    );
  return 0;
}

/** The two subcommands of `audit`; their options are read with the parent's (`audit` defines some of the same). */
export function registerBundleCommands(audit: Command): void {
  audit
    .command('export <rollout-id>')
    .description(
      "Write a receipts bundle of a rollout: its trail, the devices' enrolled keys, the signed revisions and their pins, the checkpoints and the log's and witness's keys, for `audit verify --receipts` anywhere (refuses an existing non-empty --bundle)",
    )
    .requiredOption('--bundle <dir>', 'the directory to write (must not exist, or be empty)')
    .requiredOption('--inventory <file>', "the inventory: each device's enrolled key (agentKey, receipts.key)")
    .option(
      '--profiles <dir>',
      'profiles root: the signed envelopes and trust.yaml of the profile (default $WAVEGATE_PROFILES, else ./profiles)',
    )
    .option('--revoked <file>', 'a YAML list of { key, at, reason }: enrolled keys revoked (the key line or its id)')
    .option(
      '--rotation-proofs <file>',
      "an agent identity key rotation's proofs file (the gateway's <id>.proofs.json; the state file <id>.json beside it gives each device's retire): each device's key history, so receipts signed before and after the rotation verify; repeatable",
      (v: string, all: string[] = []) => [...all, v],
    )
    .option(
      '--log-key <key>',
      "the control plane's checkpoint key, as the worker's flags take it: a pin file (<key>.pub.yaml), ed25519:<base64> or a C2SP verifier key",
    )
    .option(
      '--witness-key <key>',
      "the witness's key, as the worker's --witness-key takes it: a pin file (<key>.pub.yaml), ed25519:<base64> or a C2SP verifier key",
    )
    .option('--audit-dir <dir>', "where the audit files are: the worker's --audit-dir (default $WAVEGATE_AUDIT_DIR)")
    .option(
      '--audit-store <url>',
      'read the trail from this store instead: postgres://user@host:port/db (default $WAVEGATE_AUDIT_STORE)',
    )
    .action(
      action((id: string, _opts: ExportFlags, command: Command) =>
        exportBundle(id, command.optsWithGlobals() as ExportFlags),
      ),
    );
  audit
    .command('verify')
    .description(
      'Check a receipts bundle offline: every receipt against its device, request, revision and chain, the checkpoints and inclusion; prints each finding as <device>: <check>: <message> (exit 1 on any, 2 for a bundle that cannot be read)',
    )
    .requiredOption('--receipts <dir>', 'the bundle directory (wavegate audit export --bundle)')
    .option('--json', 'print the verdict as JSON: counts and findings')
    .option(
      '--no-checkpoints-expected',
      'the rollout ran without checkpoints: a bundle with none is not a finding (inclusion is then not checked); without it, a bundle with no checkpoint fails (exit 1)',
    )
    .option(
      '--log-key <key>',
      "the auditor's own copy of the log's checkpoint key (a wavegate keygen pin file <key>.pub.yaml, ed25519:<base64> or a C2SP verifier key, or a file holding one): the bundle's keys/log.pub must be it",
    )
    .option(
      '--witness-key <key>',
      "the auditor's own copy of the witness's key (as --log-key): the bundle's keys/witness.pub must be it",
    )
    .option(
      '--strict',
      'checkpoints are required (the default since --no-checkpoints-expected; refused together with it), kept for scripts',
    )
    .action(action((_opts: VerifyFlags, command: Command) => verifyBundle(command.optsWithGlobals() as VerifyFlags)));
}
