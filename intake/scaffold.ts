import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { parse as fromYaml, stringify as toYaml } from 'yaml';
import { WavegateError } from '../core/errors';
import { parseInventory } from '../core/inventory';
import { parseProfile, parseRevision, parseRevisionSource } from '../core/revision';
import { parseRolloutSpec } from '../core/spec';
import { classifyRevision } from '../core/provability';
import { profileDir } from './profile-dir';

/**
 * What `wavegate init` writes: a profile (profile.yaml, revisions 1 and 2 with payload files whose
 * digest and size are filled in, an empty envelopes/), an inventory with every host key pinned, and a
 * rollout spec r1 → r2; then the commands that sign and roll it out. Every file is validated by the
 * parser that will read it, so what init writes is what plan and start accept.
 */

/** A host of the new inventory, its host key already pinned. */
export interface ScaffoldHost {
  id: string;
  host: string;
  port: number;
  user: string;
  pool: string;
  /** `SHA256:...` */
  hostKey: string;
  /** A private key file on the worker for this host only (else the inventory's default). */
  key?: string;
  /** Fields carried over from an Ansible inventory as they are. */
  extra?: { class?: string; os?: string; labels?: Record<string, string>; updateClass?: string; runtimes?: string[] };
}

export interface ScaffoldInput {
  /** The profiles root (absolute). */
  profilesRoot: string;
  profile: string;
  inventoryPath: string;
  specPath: string;
  hosts: ScaffoldHost[];
  pools: Record<string, { disruptionBudget?: number }>;
  /** The worker's default login: a private key file on the worker, or its SSH agent (else each host's own key). */
  login?: { key: string } | { agent: true };
  /** Each phase's gate (a duration or "manual"). */
  gate: string;
  threshold: number;
  signers: string[];
  keysDir: string;
}

export interface ScaffoldFile {
  path: string;
  text: string;
}

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

function payloadText(profile: string, revision: number): string {
  return `${profile} revision ${revision}\n`;
}

/** Revision `n` of the template: installs payload/<profile>-r<n>.txt as $HOME/etc/<profile>.txt, verified by its content. */
function revisionText(profile: string, revision: 1 | 2): string {
  const payload = payloadText(profile, revision);
  const target = `"$HOME/etc/${profile}.txt"`;
  const doc = {
    profile,
    revision,
    description: `Template revision ${revision}: replace apply, verify and the payload with your change`,
    apply: `mkdir -p "$HOME/etc" && install -m 0644 "$WAVEGATE_STAGING/${profile}.txt" ${target}`,
    // Provable: the exit status reads the fact back (core/provability.ts). Never `|| true`, `echo ok`.
    verify: `grep -qx '${payload.trimEnd()}' ${target}`,
    ...(revision === 1 ? { rollback: `rm -f ${target}` } : { previous: 1 }),
    // No sha256/size: `wavegate sign` fills them from the file, so editing the payload needs no digest by hand.
    payload: [{ name: `${profile}.txt`, source: `payload/${profile}-r${revision}.txt` }],
    risk: 'risky',
    health: { checks: [{ name: `${profile}-present`, command: `test -s ${target}` }] },
  };
  const why =
    revision === 1
      ? '# The way back: a rollout r1 -> r2 rolls back to this revision. Its `rollback` (a way back from r1 itself)\n# satisfies the no-way-back registration gate.\n'
      : "# The change. `previous: 1` names the way back (the spec's fromRevision is what a rollback runs).\n";
  return `# wavegate revision (docs/formats.md section 5). apply and verify run as the inventory's user, in $HOME,\n# with $WAVEGATE_STAGING holding the payload files. verify must read the fact back: exit 0 only when\n# the revision is in place. The health: section is signed with the rest; a spec selects its checks by name.\n# Each payload entry's sha256 and size: wavegate sign fills them from the file in payload/ (edit the file, sign again).\n${why}${toYaml(doc, { lineWidth: 0 })}`;
}

function profileText(profile: string, scope: Record<string, string>): string {
  return `# wavegate profile (docs/formats.md section 4): which inventory devices a rollout of "${profile}" targets.\n${toYaml({ name: profile, description: `${profile} (made by wavegate init)`, scope })}`;
}

function inventoryText(input: ScaffoldInput): string {
  const defaults = input.login ? { ssh: 'key' in input.login ? { key: input.login.key } : { agent: true } } : {};
  const devices = input.hosts.map((h) => ({
    id: h.id,
    host: h.host,
    port: h.port,
    user: h.user,
    pool: h.pool,
    ...(h.extra ?? {}),
    ssh: { hostKey: h.hostKey, ...(h.key ? { key: h.key } : {}) },
  }));
  const pools = Object.fromEntries(
    Object.keys(input.pools)
      .sort()
      .map((p) => [
        p,
        input.pools[p]!.disruptionBudget === undefined ? {} : { disruptionBudget: input.pools[p]!.disruptionBudget },
      ]),
  );
  return `# wavegate inventory (docs/formats.md section 7), made by wavegate init. Host keys are pinned (ssh.hostKey);\n# the key file is read on the worker. A changed host key is refused, never trusted.\n${toYaml({ pools, defaults, devices })}`;
}

function specText(profile: string, gate: string): string {
  const healthGate = ['devices-online', `check: ${profile}-present`];
  const doc = {
    rollout: {
      profile,
      fromRevision: 1,
      toRevision: 2,
      phases: [
        { canary: '1 device', gate, healthGate: [...healthGate] },
        // Gated as the canary is: a device broken outside the canary rolls the rollout back too.
        { bulk: 'remainder', gate, healthGate: [...healthGate] },
      ],
      rollback: { on: 'healthGate-fail' },
    },
  };
  return `# wavegate rollout spec (docs/formats.md section 8): ${profile} r1 -> r2, a one-device canary first.\n# Every phase waits its gate, then runs its health gate; a failed health gate rolls back every device changed.\n${toYaml(doc, { lineWidth: 0 })}`;
}

/** The files `wavegate init` writes, each checked by the parser that will read it. */
export function scaffoldFiles(input: ScaffoldInput): ScaffoldFile[] {
  const layout = profileDir(input.profilesRoot, input.profile, '--profile');
  const pools = new Set(input.hosts.map((h) => h.pool));
  const scope: Record<string, string> = pools.size === 1 ? { pool: [...pools][0]! } : {};
  const files: ScaffoldFile[] = [
    { path: layout.profileFile, text: profileText(input.profile, scope) },
    { path: layout.revisionFile(1), text: revisionText(input.profile, 1) },
    { path: layout.revisionFile(2), text: revisionText(input.profile, 2) },
    { path: join(layout.payloadDir, `${input.profile}-r1.txt`), text: payloadText(input.profile, 1) },
    { path: join(layout.payloadDir, `${input.profile}-r2.txt`), text: payloadText(input.profile, 2) },
    { path: input.inventoryPath, text: inventoryText(input) },
    { path: input.specPath, text: specText(input.profile, input.gate) },
  ];
  // What init writes must be what plan, sign and start accept: refuse here rather than write a broken file.
  const [profile, r1, r2, , , inventory, spec] = files.map((f) => parseYaml(f));
  parseProfile(profile, files[0]!.path);
  for (const [n, doc, file] of [
    [1, r1, files[1]!],
    [2, r2, files[2]!],
  ] as const) {
    // Checked as sign will sign it: with the payload's digest filled in.
    const text = payloadText(input.profile, n);
    const source = parseRevisionSource(doc, file.path);
    const revision = parseRevision(
      {
        ...source,
        payload: source.payload.map((f) => ({ ...f, sha256: sha256(text), size: Buffer.byteLength(text) })),
      },
      file.path,
    );
    if (!classifyRevision(revision).provable) throw new Error(`wavegate init: template ${file.path} is not provable`);
  }
  parseInventory(inventory, input.inventoryPath);
  parseRolloutSpec(spec, input.specPath);
  return files;
}

function parseYaml(file: ScaffoldFile): unknown {
  return fromYaml(file.text);
}

/**
 * Write the files, creating their directories (and `envelopes/` for sign). An existing file is never
 * overwritten without `force`: CONFLICT naming it, and nothing is written at all.
 */
export function writeScaffold(files: ScaffoldFile[], opts: { force: boolean; envelopesDir: string }): void {
  if (!opts.force) {
    const existing = files.filter((f) => existsSync(f.path)).map((f) => f.path);
    if (existing.length) {
      throw new WavegateError(
        'CONFLICT',
        `${existing.join(', ')}: already exist${existing.length === 1 ? 's' : ''}; wavegate init never overwrites a file, and wrote nothing (use --force to overwrite, or choose another --profiles, --profile, --inventory or --spec)`,
        { files: existing },
      );
    }
  }
  for (const f of files) {
    mkdirSync(dirname(f.path), { recursive: true });
    writeFileSync(f.path, f.text);
  }
  mkdirSync(opts.envelopesDir, { recursive: true });
}

/** `'a b'` for the shell; plain paths stay as they are. */
export function shellWord(word: string): string {
  return /^[A-Za-z0-9_./:@%+=,-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}

/** The commands after init, in order, with the paths filled in. */
export function nextCommands(input: ScaffoldInput): string[] {
  const q = shellWord;
  const layout = profileDir(input.profilesRoot, input.profile, '--profile');
  const keys = input.signers.map((name) => ({ name, key: join(input.keysDir, `${name}.key`) }));
  const [first, ...others] = keys;
  const where = `--inventory ${q(input.inventoryPath)} --profiles ${q(input.profilesRoot)}`;
  const lines = [
    `# 1. Signing keys, one per signer, kept offline (only the .pub.yaml files are shared):`,
    `mkdir -p -m 0700 ${q(input.keysDir)}`,
    ...keys.map((k) => `wavegate keygen --out ${q(k.key)} --name ${q(k.name)}`),
    `# 2. Pin them for the profile (the worker and the CLI verify every revision against these pins):`,
    `wavegate trust ${keys.map((k) => q(`${k.key}.pub.yaml`)).join(' ')} --threshold ${input.threshold} --out ${q(layout.trustFile)}`,
    `# 3. Sign both revisions (the registration gates run against the inventory)${input.threshold > 1 ? ', then cosign' : ''}:`,
  ];
  for (const n of [1, 2]) {
    const envelope = layout.envelopeFile(n);
    lines.push(
      `wavegate sign ${q(layout.revisionFile(n))} --key ${q(first!.key)} --out ${q(envelope)} --inventory ${q(input.inventoryPath)} --profile ${q(layout.profileFile)}`,
    );
    for (const k of others.slice(0, input.threshold - 1))
      lines.push(`wavegate cosign ${q(envelope)} --key ${q(k.key)}`);
  }
  lines.push(
    `# 4. Check the plan (contacts no device; once a worker runs, it also checks what only the worker reads):`,
    `wavegate plan -f ${q(input.specPath)} ${where}`,
    `# 5. A worker that reads the same profiles root (next to your Temporal server; \`wavegate worker --help\`):`,
    `wavegate worker --profiles ${q(input.profilesRoot)}`,
    `# 6. Start and wait for the outcome (exit 0 only when every device is at r2):`,
    `wavegate start -f ${q(input.specPath)} ${where} --wait`,
    `# 7. The fleet as it is now, verified over SSH:`,
    `wavegate fleet status --profile ${q(input.profile)} ${where}`,
  );
  return lines;
}
