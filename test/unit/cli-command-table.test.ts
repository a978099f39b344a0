import { Command, Help } from 'commander';
import { describe, expect, it } from 'vitest';
import * as agent from '../../cli/commands/agent';
import * as audit from '../../cli/commands/audit';
import * as board from '../../cli/commands/board';
import * as converge from '../../cli/commands/converge';
import * as dev from '../../cli/commands/dev';
import * as fleet from '../../cli/commands/fleet';
import * as freeze from '../../cli/commands/freeze';
import * as gateway from '../../cli/commands/gateway';
import * as init from '../../cli/commands/init';
import * as keys from '../../cli/commands/keys';
import * as plan from '../../cli/commands/plan';
import * as registry from '../../cli/commands/registry';
import * as revert from '../../cli/commands/revert';
import * as rotation from '../../cli/commands/rotation';
import * as rollout from '../../cli/commands/rollout';
import * as schedule from '../../cli/commands/schedule';
import * as tools from '../../cli/commands/tools';
import * as witness from '../../cli/commands/witness';
import {
  COMMANDS,
  GROUP_NAMES,
  groupsFor,
  programWith,
  topLevelProgram,
  type Group,
  type GroupName,
  type TopCommand,
} from '../../cli/main';

/**
 * cli/main.ts loads only the group of commands the arguments name, and prints the top-level help from its
 * static COMMANDS table. Both are right only while the table says what the groups really register: this
 * derives the table from the groups and compares, and checks that the lazy program answers every kind of
 * top-level invocation exactly as the program with every group loaded does.
 */
// The groups imported here (vitest loads TypeScript through imports; main.ts requires them at run time).
const MODULES: Record<GroupName, Group> = {
  dev,
  plan,
  rollout,
  converge,
  revert,
  fleet,
  schedule,
  freeze,
  audit,
  board,
  keys,
  rotation,
  registry,
  tools,
  init,
  gateway,
  agent,
  witness,
};
const load = (name: GroupName) => MODULES[name];

function derivedTable(): TopCommand[] {
  const help = new Help();
  return GROUP_NAMES.flatMap((group) => {
    const program = new Command('wavegate');
    load(group).register(program);
    return program.commands.map((c) => ({
      name: c.name(),
      group,
      term: help.subcommandTerm(c),
      description: help.subcommandDescription(c),
    }));
  });
}

async function answer(
  program: Command,
  args: string[],
): Promise<{ out: string; err: string; exitCode: number | undefined }> {
  let out = '';
  let err = '';
  let exitCode: number | undefined;
  const quiet = (c: Command): void => {
    c.configureOutput({ writeOut: (s) => (out += s), writeErr: (s) => (err += s) }).exitOverride();
    c.commands.forEach(quiet);
  };
  quiet(program);
  try {
    await program.parseAsync(['node', 'wavegate', ...args]);
  } catch (e) {
    exitCode = (e as { exitCode?: number }).exitCode;
  }
  return { out, err, exitCode };
}

describe('the CLI command table (lazy command loading)', () => {
  it('names every top-level command with the group that registers it, its usage term and description, in order', () => {
    // On a mismatch: `npx tsx scripts/command-table.ts` rewrites COMMANDS in cli/main.ts from the groups.
    expect(COMMANDS).toEqual(derivedTable());
  });

  it('the named command loads only its own group; help <command> likewise; nothing for the top-level help', () => {
    expect(groupsFor(['plan', '-f', 'x.yaml'])).toEqual(['plan']);
    expect(groupsFor(['status', 'rollout-1'])).toEqual(['rollout']);
    expect(groupsFor(['help', 'worker'])).toEqual(['dev']);
    expect(groupsFor(['--help'])).toEqual([]);
    expect(groupsFor([])).toEqual([]);
    expect(groupsFor(['no-such-command'])).toBeUndefined(); // every group: Commander reports it as before
  });

  it.each([
    [[]],
    [['--help']],
    [['-h']],
    [['help']],
    [['help', 'plan']],
    [['--help', 'plan']],
    [['nope']],
    [['pla']],
    [['--foo']],
    [['help', 'nope']],
    [['plan', '--help']],
    [['fleet', '--help']],
    [['schedule']],
  ])('wavegate %j answers exactly as with every group loaded', async (args) => {
    const groups = groupsFor(args);
    const lazy =
      groups === undefined
        ? programWith(GROUP_NAMES, load)
        : groups.length === 0
          ? topLevelProgram()
          : programWith(groups, load);
    expect(await answer(lazy, args)).toEqual(await answer(programWith(GROUP_NAMES, load), args));
  });
});
