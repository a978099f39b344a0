import { rmSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { wavegateHome } from '../../intake/package-layout';
import { dirname, join, resolve } from 'node:path';
import type { Command } from 'commander';
import { Client } from 'ssh2';
import { parseAnsibleInventory } from '../../core/ansible';
import { WavegateError } from '../../core/errors';
import {
  acceptedKeys,
  changedKeysRefusal,
  judgeHostKeys,
  parseAcceptKeyFlag,
  scanTimeoutMs,
  type KeyJudgement,
} from '../../core/init-keys';
import { parseInventory, type Device } from '../../core/inventory';
import { knownHostFingerprints, sshFingerprint } from '../../intake/known-hosts';
import { readText } from '../../intake/files';
import { checkProfileName } from '../../core/profile-name';
import {
  nextCommands,
  scaffoldFiles,
  shellWord,
  writeScaffold,
  type ScaffoldHost,
  type ScaffoldInput,
} from '../../intake/scaffold';
import { readScannedKeys, scannedKeysPathFor, writeScannedKeys } from '../../intake/scanned-keys';
import { readSshConfig } from '../../intake/ssh-config';
import { action, EXIT_FAILED, EXIT_OK } from '../run';

/**
 * `wavegate init`: a profile, an inventory and a rollout spec to start from, for the user's own hosts,
 * with every host key pinned the way a careful operator would: from a known_hosts file, or read from
 * the host, printed and recorded (intake/scanned-keys.ts), and pinned only by a second run that is given
 * exactly those fingerprints (--accept-scanned-keys <record>, --accept-key ID=SHA256:...) and reads the
 * same keys again (core/init-keys.ts): a key swapped between the two runs is refused, never pinned. The
 * files themselves come from intake/scaffold.ts.
 */

interface InitOptions {
  profiles?: string;
  profile: string;
  inventory: string;
  spec?: string;
  host: string[];
  fromAnsible?: string;
  fromSshConfig?: string | true;
  user?: string;
  pool: string;
  sshKey?: string;
  sshAgent?: boolean;
  knownHosts?: string;
  /** true: the record beside the inventory; a path: that record. */
  acceptScannedKeys?: boolean | string;
  acceptKey: string[];
  threshold?: string;
  signers?: string;
  keysDir?: string;
  gate: string;
  force?: boolean;
  scanTimeout: string;
}

/** A host before its key is pinned. */
type Candidate = Omit<ScaffoldHost, 'hostKey'> & { hostKey?: string };

const collect = (value: string, previous: string[]) => [...previous, value];

/** `[id=][user@]host[:port]`, IPv6 as `[addr]:port`. */
export function parseHostFlag(value: string, opts: { user?: string; pool: string }): Candidate {
  const m = /^(?:([^=@\s]+)=)?(?:([^@\s]+)@)?(\[[^\]\s]+\]|[^:@\s[\]]+)(?::(\d+))?$/.exec(value);
  if (!m)
    throw new WavegateError(
      'INVALID_INPUT',
      `--host: must be [id=][user@]host[:port], like web-01=deploy@10.0.1.11:22 (got ${JSON.stringify(value)})`,
      { field: '--host', value },
    );
  const host = m[3]!.replace(/^\[|\]$/g, '');
  const port = m[4] === undefined ? 22 : Number(m[4]);
  if (port < 1 || port > 65535)
    throw new WavegateError('INVALID_INPUT', `--host ${value}: port must be 1-65535 (got ${m[4]})`, {
      field: '--host',
      value,
    });
  const user = m[2] ?? opts.user;
  if (!user)
    throw new WavegateError('INVALID_INPUT', `--host ${value}: no login user (write user@host, or give --user)`, {
      field: '--host',
      value,
    });
  return { id: m[1] ?? (port === 22 ? host : `${host}-${port}`), host, port, user, pool: opts.pool };
}

function fromSshConfig(path: string, opts: { user?: string; pool: string }): { hosts: Candidate[]; notes: string[] } {
  const { hosts, skipped } = readSshConfig(path);
  if (hosts.length === 0)
    throw new WavegateError(
      'INVALID_INPUT',
      `--from-ssh-config ${path}: no Host entry names a concrete host (patterns such as * are not hosts)`,
      { field: '--from-ssh-config', value: path },
    );
  return {
    hosts: hosts.map((h) => {
      const user = h.user ?? opts.user;
      if (!user)
        throw new WavegateError(
          'INVALID_INPUT',
          `${path}:${h.line}: Host ${h.alias} has no User (add one, or give --user)`,
          { source: path, line: h.line },
        );
      return {
        id: h.alias,
        host: h.host,
        port: h.port ?? 22,
        user,
        pool: opts.pool,
        ...(h.identityFile ? { key: resolve(h.identityFile) } : {}),
      };
    }),
    notes: skipped.map((s) => `skipped ${s}`),
  };
}

function fromAnsible(
  path: string,
  opts: { user?: string },
): { hosts: Candidate[]; pools: Record<string, { disruptionBudget?: number }> } {
  const doc = parseAnsibleInventory(readText(path), path) as { defaults?: Record<string, unknown> };
  // --user fills in hosts the Ansible file gives no ansible_user; the file's own values win.
  const inventory = parseInventory(
    opts.user ? { ...doc, defaults: { user: opts.user, ...(doc.defaults ?? {}) } } : doc,
    path,
  );
  const extra = (d: Device): Candidate['extra'] => ({
    ...(d.class !== 'server' ? { class: d.class } : {}),
    ...(d.os !== 'linux' ? { os: d.os } : {}),
    ...(Object.keys(d.labels).length ? { labels: d.labels } : {}),
    ...(d.updateClass !== 'required' ? { updateClass: d.updateClass } : {}),
    ...(d.runtimes.length ? { runtimes: d.runtimes } : {}),
  });
  return {
    hosts: inventory.devices.map((d) => ({
      id: d.id,
      host: d.host,
      port: d.port,
      user: d.user,
      pool: d.pool,
      extra: extra(d),
      ...(d.ssh.key ? { key: d.ssh.key } : {}),
      // A key the Ansible file pins (wavegate_host_key) is the operator's own statement: kept.
      ...(d.ssh.hostKey ? { hostKey: d.ssh.hostKey } : {}),
    })),
    pools: Object.fromEntries(
      Object.values(inventory.pools).map((p) => [p.name, { disruptionBudget: p.disruptionBudget }]),
    ),
  };
}

/**
 * The host key `host:port` presents to wavegate's own SSH client (the same algorithm negotiation as
 * the worker's, so the key read is the key the worker will be shown), without logging in: the key is
 * refused in the handshake.
 */
export function scanHostKey(
  host: string,
  port: number,
  timeoutMs: number,
): Promise<{ type: string; fingerprint: string }> {
  return new Promise((done, fail) => {
    const client = new Client();
    let key: Buffer | undefined;
    const finish = () => {
      client.destroy();
      if (!key)
        return fail(new Error(`no SSH host key read from ${host}:${port}${lastError ? ` (${lastError})` : ''}`));
      const typeLength = key.readUInt32BE(0);
      done({ type: key.subarray(4, 4 + typeLength).toString('latin1'), fingerprint: sshFingerprint(key) });
    };
    let lastError = '';
    client.on('error', (err: Error) => (lastError = err.message));
    client.on('close', finish);
    client.connect({
      host,
      port,
      username: 'wavegate-init-keyscan',
      readyTimeout: timeoutMs,
      hostVerifier: (blob: Buffer) => {
        key = Buffer.from(blob);
        return false;
      },
    });
  });
}

interface Pinned {
  host: ScaffoldHost;
  /** Where the pin came from. */
  source: 'known_hosts' | 'scanned' | 'inventory';
  type?: string;
  /** A scanned key: where the operator accepted it (--accept-key, or the record's path). */
  acceptedFrom?: string;
}

async function pinHostKeys(
  candidates: Candidate[],
  opts: { knownHosts?: string; timeoutMs: number },
): Promise<Pinned[]> {
  const pinned: Pinned[] = [];
  const unreadable: string[] = [];
  for (const c of candidates) {
    if (c.hostKey) {
      pinned.push({ host: { ...c, hostKey: c.hostKey }, source: 'inventory' });
      continue;
    }
    const known = opts.knownHosts ? knownHostFingerprints(opts.knownHosts, c.host, c.port) : [];
    if (known.length === 1) {
      pinned.push({ host: { ...c, hostKey: known[0]! }, source: 'known_hosts' });
      continue;
    }
    try {
      const seen = await scanHostKey(c.host, c.port, opts.timeoutMs);
      if (known.length > 1 && !known.includes(seen.fingerprint)) {
        throw new Error(
          `it presents ${seen.type} ${seen.fingerprint}, which ${opts.knownHosts} does not list for it (listed: ${known.join(', ')}): refusing to pin`,
        );
      }
      // With several keys in known_hosts, the one the host presents is pinned: it is both listed and what the worker will see.
      pinned.push({
        host: { ...c, hostKey: seen.fingerprint },
        source: known.length > 1 ? 'known_hosts' : 'scanned',
        type: seen.type,
      });
    } catch (err) {
      unreadable.push(`  ${c.id} (${c.host}:${c.port}): ${(err as Error).message}`);
    }
  }
  if (unreadable.length) {
    throw new WavegateError(
      'UNAVAILABLE',
      `cannot pin the host key of ${unreadable.length} host(s); nothing was written:\n${unreadable.join('\n')}\nlist them in a known_hosts file given with --known-hosts, or make them reachable`,
    );
  }
  return pinned;
}

/**
 * The command that pins what this run printed: this very command line, with the record it wrote as
 * --accept-scanned-keys (any earlier --accept-scanned-keys replaced).
 */
export function secondCommandOf(argv: readonly string[], recordPath: string): string {
  const kept: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg.startsWith('--accept-scanned-keys=')) continue;
    if (arg === '--accept-scanned-keys') {
      if (argv[i + 1] !== undefined && !argv[i + 1]!.startsWith('-')) i++; // its optional record
      continue;
    }
    kept.push(arg);
  }
  return ['wavegate', ...kept, '--accept-scanned-keys', recordPath].map(shellWord).join(' ');
}

const secondCommand = (recordPath: string) => secondCommandOf(process.argv.slice(2), recordPath);

function absoluteFile(path: string, field: string): string {
  const abs = resolve(path);
  let isFile = false;
  try {
    isFile = statSync(abs).isFile();
  } catch {
    /* reported below */
  }
  if (!isFile)
    throw new WavegateError('INVALID_INPUT', `${field}: ${JSON.stringify(path)} is not a readable file`, {
      field,
      value: path,
    });
  return abs;
}

function signersOf(opts: InitOptions): { threshold: number; signers: string[] } {
  const threshold = opts.threshold === undefined ? 2 : Number(opts.threshold);
  if (!Number.isInteger(threshold) || threshold < 1 || threshold > 16)
    throw new WavegateError(
      'INVALID_INPUT',
      `--threshold: must be a whole number 1-16 (got ${JSON.stringify(opts.threshold)})`,
      { field: '--threshold', value: opts.threshold },
    );
  const signers = opts.signers
    ? opts.signers
        .split(',')
        .map((s) => s.trim())
        .filter(Boolean)
    : ['alice', 'bob', 'carol', 'dave'].slice(0, threshold);
  while (signers.length < threshold) signers.push(`signer${signers.length + 1}`);
  for (const s of signers)
    if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/.test(s))
      throw new WavegateError(
        'INVALID_INPUT',
        `--signers: each name must be 1-64 letters, digits, ".", "_" or "-" (got ${JSON.stringify(s)})`,
        { field: '--signers', value: s },
      );
  return { threshold, signers };
}

/** The hosts `init` was given: --host, then --from-ansible's, then --from-ssh-config's (each with its pool). */
function candidatesOf(opts: InitOptions): {
  candidates: Candidate[];
  pools: Record<string, { disruptionBudget?: number }>;
  notes: string[];
} {
  const candidates: Candidate[] = opts.host.map((h) => parseHostFlag(h, opts));
  let pools: Record<string, { disruptionBudget?: number }> = {};
  const notes: string[] = [];
  if (opts.fromAnsible) {
    const imported = fromAnsible(opts.fromAnsible, opts);
    candidates.push(...imported.hosts);
    pools = imported.pools;
  }
  if (opts.fromSshConfig !== undefined) {
    const file = opts.fromSshConfig === true ? join(homedir(), '.ssh', 'config') : opts.fromSshConfig;
    const imported = fromSshConfig(file, opts);
    candidates.push(...imported.hosts);
    notes.push(...imported.notes);
  }
  if (candidates.length === 0)
    throw new WavegateError(
      'INVALID_INPUT',
      'no hosts: give --host user@host[:port] (repeatable), --from-ansible <file> or --from-ssh-config [file]',
      { field: '--host' },
    );
  for (const c of candidates) pools[c.pool] ??= {};
  return { candidates, pools, notes };
}

/** The worker's login to the hosts (--ssh-agent or --ssh-key), required unless every host names its own key. */
function loginOf(opts: InitOptions, candidates: readonly Candidate[]): ScaffoldInput['login'] | undefined {
  const login: ScaffoldInput['login'] | undefined = opts.sshAgent
    ? { agent: true }
    : opts.sshKey
      ? { key: absoluteFile(opts.sshKey, '--ssh-key') }
      : undefined;
  const keyless = candidates.filter((c) => !c.key);
  if (!login && keyless.length) {
    throw new WavegateError(
      'INVALID_INPUT',
      `--ssh-key: required: ${keyless
        .slice(0, 5)
        .map((c) => c.id)
        .join(
          ', ',
        )}${keyless.length > 5 ? ', ...' : ''} ha${keyless.length === 1 ? 's' : 've'} no login key; give the worker's private key file with --ssh-key <file>, or --ssh-agent`,
      { field: '--ssh-key' },
    );
  }
  return login;
}

/**
 * Everything `init` checks without the network, before any host is contacted (bad input: exit 2): the
 * flags, the hosts, the scaffold's input, and the fingerprints the operator accepted.
 */
function initRequest(opts: InitOptions) {
  const profilesRoot = opts.profiles ?? (process.env.WAVEGATE_PROFILES || undefined);
  if (!profilesRoot)
    throw new WavegateError(
      'INVALID_INPUT',
      '--profiles: required (or set WAVEGATE_PROFILES): the directory that will hold your profiles, for example ~/wavegate/profiles',
      { field: '--profiles' },
    );
  checkProfileName(opts.profile, '--profile');
  const { threshold, signers } = signersOf(opts);
  const timeoutMs = scanTimeoutMs(opts.scanTimeout);
  if (opts.sshKey && opts.sshAgent)
    throw new WavegateError('INVALID_INPUT', '--ssh-key and --ssh-agent: give one, not both', { field: '--ssh-agent' });
  const knownHosts = opts.knownHosts ? absoluteFile(opts.knownHosts, '--known-hosts') : undefined;
  const { candidates, pools, notes } = candidatesOf(opts);
  const login = loginOf(opts, candidates);

  const inventoryPath = resolve(opts.inventory);
  const input: Omit<ScaffoldInput, 'hosts'> = {
    profilesRoot: resolve(profilesRoot),
    profile: opts.profile,
    inventoryPath,
    specPath: resolve(opts.spec ?? join(dirname(inventoryPath), `${opts.profile}-rollout.yaml`)),
    pools,
    ...(login ? { login } : {}),
    gate: opts.gate,
    threshold,
    signers,
    keysDir: resolve(opts.keysDir ?? join(wavegateHome(), 'keys')),
  };
  // The fingerprints the operator accepted, checked before any host is contacted.
  const recordPath = scannedKeysPathFor(inventoryPath);
  const givenRecord =
    typeof opts.acceptScannedKeys === 'string'
      ? resolve(opts.acceptScannedKeys)
      : opts.acceptScannedKeys
        ? recordPath
        : undefined;
  const recorded = givenRecord ? readScannedKeys(givenRecord, inventoryPath, '--accept-scanned-keys') : [];
  const accepted = acceptedKeys(opts.acceptKey.map(parseAcceptKeyFlag), recorded, new Set(candidates.map((c) => c.id)));

  // Everything that can be checked without the network, before any host is contacted.
  const placeholderKey = 'SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA';
  scaffoldFiles({ ...input, hosts: candidates.map((c) => ({ ...c, hostKey: c.hostKey ?? placeholderKey })) });
  return { input, candidates, notes, knownHosts, timeoutMs, inventoryPath, recordPath, accepted };
}

async function init(opts: InitOptions): Promise<number> {
  const { input, candidates, notes, knownHosts, timeoutMs, inventoryPath, recordPath, accepted } = initRequest(opts);
  const pins = await pinHostKeys(candidates, { knownHosts, timeoutMs });
  for (const note of notes) process.stderr.write(`note: ${note}\n`);
  // Every key read now against what the operator accepted: a scanned key is pinned only when it is the
  // fingerprint accepted for that device at that address; a known_hosts or Ansible pin that an
  // --accept-key contradicts is refused as well.
  const judged = judgeHostKeys(
    pins.map((p) => ({
      id: p.host.id,
      host: p.host.host,
      port: p.host.port,
      fingerprint: p.host.hostKey,
      ...(p.type ? { type: p.type } : {}),
    })),
    accepted,
  );
  const changed = judged.filter((j): j is Extract<KeyJudgement, { verdict: 'changed' }> => j.verdict === 'changed');
  if (changed.length) throw changedKeysRefusal(changed);
  const scannedJudged = judged.filter((_, i) => pins[i]!.source === 'scanned');
  const unconfirmed = scannedJudged.filter((j) => j.verdict === 'unconfirmed');
  if (unconfirmed.length) {
    recordUnconfirmed(recordPath, inventoryPath, scannedJudged, unconfirmed);
    return EXIT_FAILED;
  }
  const acceptedBy = new Map(
    scannedJudged.map((j) => [j.id, j.verdict === 'accepted' ? j.accepted.from : undefined] as const),
  );
  for (const p of pins) if (p.source === 'scanned') p.acceptedFrom = acceptedBy.get(p.host.id);

  const full: ScaffoldInput = { ...input, hosts: pins.map((p) => p.host) };
  const files = scaffoldFiles(full);
  writeScaffold(files, { force: !!opts.force, envelopesDir: join(full.profilesRoot, opts.profile, 'envelopes') });
  // The record is spent: a later init reads and records its hosts afresh.
  rmSync(recordPath, { force: true });
  printWritten(full, files, pins, knownHosts);
  return EXIT_OK;
}

/**
 * Keys read from the hosts that no one accepted yet: recorded (what is printed now, and the keys already
 * accepted and read the same again) and printed, with the command that pins exactly these.
 */
function recordUnconfirmed(
  recordPath: string,
  inventoryPath: string,
  scannedJudged: readonly KeyJudgement[],
  unconfirmed: readonly KeyJudgement[],
): void {
  writeScannedKeys(
    recordPath,
    inventoryPath,
    scannedJudged.map((j) => ({
      id: j.id,
      host: j.seen.host,
      port: j.seen.port,
      ...(j.seen.type ? { type: j.seen.type } : {}),
      fingerprint: j.seen.fingerprint,
    })),
  );
  process.stderr.write(
    `wavegate: ${unconfirmed.length} host key(s) were read from the hosts, not pinned from a known_hosts file. Nothing of the profile, inventory or spec was written.\n` +
      `Check each fingerprint on the host itself (ssh-keygen -lf /etc/ssh/ssh_host_<type>_key.pub, or your provider's console):\n` +
      unconfirmed
        .map(
          (j) =>
            `  ${j.id.padEnd(16)} ${`${j.seen.host}:${j.seen.port}`.padEnd(22)} ${j.seen.type} ${j.seen.fingerprint}\n`,
        )
        .join('') +
      `These fingerprints are recorded in ${recordPath}. When each one is right, pin exactly these with:\n` +
      `  ${secondCommand(recordPath)}\n` +
      `(or give --accept-key ID=SHA256:... for each host, or pin them with --known-hosts <file>). A host that shows another key then is refused, not pinned.\n`,
  );
}

/** What `init` wrote, each host's pin and where it came from, and the commands that come next. */
function printWritten(
  full: ScaffoldInput,
  files: ReturnType<typeof scaffoldFiles>,
  pins: readonly Pinned[],
  knownHosts: string | undefined,
): void {
  const out = (line: string) => process.stdout.write(`${line}\n`);
  out(`wrote profile ${full.profile} under ${full.profilesRoot}:`);
  for (const f of files) out(`  ${f.path}`);
  out(`host keys pinned in ${full.inventoryPath}:`);
  for (const p of pins)
    out(
      `  ${p.host.id.padEnd(16)} ${`${p.host.host}:${p.host.port}`.padEnd(22)} ${p.host.hostKey} (${p.source === 'scanned' ? `scanned, accepted: ${p.acceptedFrom === '--accept-key' ? '--accept-key' : `recorded in ${p.acceptedFrom}`}` : p.source === 'known_hosts' ? `from ${knownHosts}` : 'as the Ansible inventory pins it'})`,
    );
  out('');
  out(
    `next, in order (edit revisions/2.yaml and payload/ for your change first; sign fills each payload sha256/size from the file):`,
  );
  for (const line of nextCommands(full)) out(line.startsWith('#') ? line : `  ${line}`);
  out(
    `\n(run the worker with WAVEGATE_PROFILES=${shellWord(full.profilesRoot)} in its environment to the same effect as --profiles)`,
  );
}

export function register(program: Command): void {
  program
    .command('init')
    .description(
      'Scaffold a profile (revisions 1 and 2, payload, health checks), an inventory with pinned host keys and a rollout spec; print the commands that sign and roll it out',
    )
    .option(
      '--profiles <dir>',
      'profiles root to create the profile in (default $WAVEGATE_PROFILES); keep it outside the wavegate checkout',
    )
    .requiredOption('--profile <name>', 'the new profile\'s name (lowercase letters, digits, "-")')
    .requiredOption('--inventory <file>', 'the inventory file to write')
    .option('--spec <file>', 'the rollout spec to write (default <inventory dir>/<profile>-rollout.yaml)')
    .option('--host <[id=]user@host[:port]>', 'a host (repeatable)', collect, [])
    .option('--from-ansible <file>', 'hosts from an Ansible inventory (INI or YAML)')
    .option(
      '--from-ssh-config [file]',
      'hosts from the Host entries of an OpenSSH client config (default ~/.ssh/config)',
    )
    .option('--user <name>', 'login user for hosts that name none')
    .option('--pool <name>', 'pool of hosts given by --host or --from-ssh-config', 'fleet')
    .option('--ssh-key <file>', "the worker's private key file (referenced, never read into the inventory)")
    .option('--ssh-agent', "log in with the worker's SSH agent instead")
    .option(
      '--known-hosts <file>',
      'pin host keys from this known_hosts file (hosts it does not list are read from the host, printed and recorded, and need --accept-scanned-keys or --accept-key)',
    )
    .option(
      '--accept-scanned-keys [record]',
      'pin the host keys the first run printed, as it recorded them (default <inventory>.init-scanned-keys.json beside the inventory); a host that now shows another key is refused',
    )
    .option(
      '--accept-key <id=SHA256:...>',
      'pin this fingerprint for this host, checked on the host itself (repeatable); a host that shows another key is refused',
      collect,
      [],
    )
    .option('--scan-timeout <ms>', 'time to read one host key', '5000')
    .option('--threshold <n>', 'distinct signers every revision needs (default 2)')
    .option('--signers <names>', 'comma-separated signer names for the printed commands (default alice,bob)')
    .option(
      '--keys-dir <dir>',
      'where the printed keygen commands put the private keys (default $WAVEGATE_HOME/keys, else ~/.wavegate/keys)',
    )
    .option('--gate <duration>', 'each phase\'s gate in the spec ("10m", "manual", ...)', '10m')
    .option('--force', 'overwrite files that already exist')
    .action(action((opts: InitOptions) => init(opts)));
}
