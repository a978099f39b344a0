import { Command } from 'commander';
import { readdirSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { runCli } from '../support/cli';

/**
 * docs/cli.md cannot drift from the commands: every command `wavegate --help` lists (and each of its
 * subcommands) has a section "### `wavegate <command>`" under "## Options of every command", and every
 * long option the command defines is named in that section, or, for the Temporal connection options, in
 * "### Connection options" with the section linking there. The tree is read from the command modules
 * themselves (cli/commands/*.ts), so a new command or option fails here until it is documented; the
 * failure prints the missing rows.
 */

const DOC = readFileSync(join(PROJECT_ROOT, 'docs', 'cli.md'), 'utf8');

interface CommandDoc {
  path: string;
  usage: string;
  description: string;
  options: Array<{ flags: string; long: string; description: string; defaultValue?: unknown }>;
}

/**
 * An option's row as docs/cli.md writes it: its description and default, with this checkout's path
 * written `<checkout>` and this user's home `~` (a default computed where the command runs is not the
 * reader's: the rows are the same on every machine).
 */
function optionRow(o: { flags: string; description: string; defaultValue?: unknown }): string {
  const shown = o.defaultValue === undefined ? '' : ` (default: ${JSON.stringify(o.defaultValue)})`;
  return `| \`${o.flags.replace(/\|/g, '\\|')}\` | ${placeholders(`${o.description}${shown}`)} |`;
}

function placeholders(text: string): string {
  return text.split(PROJECT_ROOT).join('<checkout>').split(homedir()).join('~');
}

/** Every command under `program`, depth first, with its own options (not the inherited ones). */
function walk(command: Command, prefix: string): CommandDoc[] {
  return command.commands.flatMap((c) => {
    const path = `${prefix} ${c.name()}`.trim();
    const options = c.options
      .filter((o) => o.long)
      .map((o) => ({ flags: o.flags, long: o.long!, description: o.description, defaultValue: o.defaultValue }));
    return [{ path, usage: c.usage(), description: c.description(), options }, ...walk(c, path)];
  });
}

/** The command tree as the modules build it: each cli/commands/*.ts `register(program)`, on one program. */
async function commandTree(topLevel: Set<string>): Promise<CommandDoc[]> {
  const program = new Command('wavegate');
  const dir = join(PROJECT_ROOT, 'cli', 'commands');
  for (const file of readdirSync(dir)
    .filter((f) => f.endsWith('.ts'))
    .sort()) {
    const module = (await import(join(dir, file))) as { register?: (program: Command) => void };
    if (typeof module.register === 'function') module.register(program);
  }
  // A module may export a `register` meant for a group (not the program): only the commands the real
  // `wavegate --help` lists are top-level commands.
  const top = new Command('wavegate');
  for (const c of program.commands) if (topLevel.has(c.name())) top.addCommand(c);
  return walk(top, '');
}

/** The text of a `### ` section of docs/cli.md, up to the next heading of level 3 or above. */
function section(heading: string): string | undefined {
  const lines = DOC.split('\n');
  const start = lines.indexOf(`### ${heading}`);
  if (start < 0) return undefined;
  const end = lines.findIndex((l, i) => i > start && /^#{1,3} /.test(l));
  return lines.slice(start, end < 0 ? undefined : end).join('\n');
}

/** Whether `text` names the option in code: `--key <key>`, or `-f, --file <spec.yaml>` after its short flag. */
const named = (text: string, long: string) => new RegExp(`\`(-\\w, )?${long}(?![\\w-])`).test(text);

describe('docs/cli.md documents every command and option', () => {
  it('has a section for each command and names each of its options', async () => {
    const help = await runCli(['--help']);
    expect(help.code).toBe(0);
    const listed = new Set(
      [...help.stdout.split(/^Commands:$/m)[1]!.matchAll(/^ {2}([a-z][\w-]*)/gm)].map((m) => m[1]!),
    );
    expect(listed.has('start') && listed.has('fleet')).toBe(true);
    const tree = await commandTree(listed);
    expect(new Set(tree.filter((c) => !c.path.includes(' ')).map((c) => c.path))).toEqual(
      new Set([...listed].filter((n) => n !== 'help')),
    );

    const connection = section('Connection options');
    expect(connection, 'docs/cli.md: "### Connection options"').toBeDefined();
    const missing: string[] = [];
    for (const command of tree) {
      const text = section(`\`wavegate ${command.path}\``);
      if (!text) {
        missing.push(
          `### \`wavegate ${command.path}\`\n\nUsage: \`wavegate ${command.path} ${command.usage}\`\n\n${placeholders(command.description)}\n\n${command.options.map(optionRow).join('\n')}`,
        );
        continue;
      }
      for (const option of command.options) {
        const viaConnection = named(connection!, option.long) && text.includes('](#connection-options)');
        if (!named(text, option.long) && !viaConnection) missing.push(`wavegate ${command.path}: ${optionRow(option)}`);
      }
    }
    expect(missing, `add to docs/cli.md, "## Options of every command":\n${missing.join('\n')}`).toEqual([]);
  });

  it("names neither this checkout's path nor this user's home: <checkout> and ~ in their place", () => {
    const lines = DOC.split('\n');
    expect(lines.filter((l) => l.includes(PROJECT_ROOT))).toEqual([]);
    expect(lines.filter((l) => homedir().length > 1 && new RegExp(`${homedir()}(?![\\w-])`).test(l))).toEqual([]);
    // And a default the help prints as a path is written as one of them, never as some author's absolute path.
    expect(lines.filter((l) => /\(default: "\//.test(l))).toEqual([]);
    expect(placeholders(`${PROJECT_ROOT}/.wavegate and ${homedir()}/.wavegate/keys`)).toBe(
      '<checkout>/.wavegate and ~/.wavegate/keys',
    );
  });

  it('would notice an undocumented option', () => {
    const text = section('`wavegate start`')!;
    expect(named(text, '--key')).toBe(true);
    expect(named(text, '--no-such-option')).toBe(false);
    expect(named('`-f, --file <spec.yaml>`', '--file')).toBe(true);
    // `--tls` is not documented by `--tls-cert`.
    expect(named('`--tls-cert <file>`', '--tls')).toBe(false);
  });
});
