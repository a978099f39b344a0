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
    .exitOverride();
  for (const group of GROUPS) group.register(program);
  // Positional options on the program, set after the commands exist so they do not inherit it: `agent`
  // (which sets its own) can then give `agent enroll --state-dir` to its subcommand, while `worker
  // set-current <id> --deployment-name d` still takes the worker command's options after its subcommand.
  program.enablePositionalOptions();
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
