/**
 * Rewrites COMMANDS in cli/main.ts from what the command groups really register (after a command is
 * added, renamed, or its description changed): `npx tsx scripts/command-table.ts`. With --check it only
 * says whether the table is current (exit 1 when not); test/unit/cli-command-table.test.ts checks the same.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Command, Help } from 'commander';
import { GROUP_NAMES, programWith } from '../cli/main';

const help = new Help();
const rows = GROUP_NAMES.flatMap((group) => {
  const program = new Command('wavegate');
  for (const c of programWith([group]).commands) program.addCommand(c);
  return program.commands.map(
    (c) =>
      `  { name: ${JSON.stringify(c.name())}, group: '${group}', term: ${JSON.stringify(help.subcommandTerm(c))}, description: ${JSON.stringify(help.subcommandDescription(c))} },`,
  );
});
const file = join(__dirname, '..', 'cli', 'main.ts');
const text = readFileSync(file, 'utf8');
const begin = 'export const COMMANDS: TopCommand[] = [\n';
const start = text.indexOf(begin) + begin.length;
const end = text.indexOf('\n];\n', start);
if (start < begin.length || end < 0) throw new Error(`${file}: no COMMANDS table found`);
// The rows as the formatter lays them out (npm run lint checks cli/main.ts), so --check compares like with like.
const updated = execFileSync(
  join(__dirname, '..', 'node_modules', '.bin', 'biome'),
  ['format', `--stdin-file-path=${file}`],
  {
    input: `${text.slice(0, start)}${rows.join('\n')}${text.slice(end)}`,
    encoding: 'utf8',
  },
);
if (process.argv.includes('--check')) {
  process.stdout.write(
    updated === text ? 'COMMANDS is current\n' : 'COMMANDS is out of date: run npx tsx scripts/command-table.ts\n',
  );
  process.exit(updated === text ? 0 : 1);
}
writeFileSync(file, updated);
process.stdout.write(`${file}: ${rows.length} commands\n`);
