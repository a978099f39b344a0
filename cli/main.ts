import { Command, CommanderError } from 'commander';
import * as agentCommands from './commands/agent';
import * as auditCommands from './commands/audit';
import * as convergeCommands from './commands/converge';
import * as devCommands from './commands/dev';
import * as fleetCommands from './commands/fleet';
import * as gatewayCommands from './commands/gateway';
import * as initCommands from './commands/init';
import * as keysCommands from './commands/keys';
import * as planCommands from './commands/plan';
import * as registryCommands from './commands/registry';
import * as revertCommands from './commands/revert';
import * as rolloutCommands from './commands/rollout';
import * as scheduleCommands from './commands/schedule';
import * as toolsCommands from './commands/tools';
import { EXIT_REFUSED } from './run';

/**
 * The `wavegate` command. Each group of commands lives in cli/commands/<group>.ts and exports a
 * `register(program)` function; this file only assembles them.
 */
const GROUPS: Array<{ register(program: Command): void }> = [devCommands, planCommands, rolloutCommands, convergeCommands, revertCommands, fleetCommands, scheduleCommands, auditCommands, keysCommands, registryCommands, toolsCommands, initCommands, gatewayCommands, agentCommands];

export async function main(argv: string[]): Promise<void> {
  const program = new Command('wavegate')
    .description('Phased, gated, audited rollouts of signed profile revisions to device fleets, on Temporal.')
    .showHelpAfterError()
    // Lets a command with options of its own have subcommands with the same options (`agent --state-dir`, `agent enroll --state-dir`).
    .enablePositionalOptions()
    .exitOverride();
  for (const group of GROUPS) group.register(program);
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
