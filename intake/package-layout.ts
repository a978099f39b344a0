import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';

/*
 * Where wavegate's own files are: the package root (its demo profiles, its sources in a checkout) and
 * the state directory (dev stack, demo, the default audit directory). Below every layer that needs it:
 * the activities' defaults, the worker's toolchain, the CLI.
 */

/**
 * The package root: the checkout, or the installed package's directory. This file runs as
 * `<root>/intake/package-layout.ts` from source (tsx) and as `<root>/dist/intake/package-layout.js`
 * compiled.
 */
export const PROJECT_ROOT = resolve(__dirname, __filename.endsWith('.ts') ? '..' : join('..', '..'));

/** wavegate's version, as its package.json says (`wavegate --version`). */
export function packageVersion(root: string = PROJECT_ROOT): string {
  return (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string }).version;
}

/**
 * A checkout has its TypeScript sources; the published package ships only dist/ (package.json "files").
 * The same test decides how bin/wavegate.js runs (source through tsx, or dist/).
 */
export function isCheckout(root: string = PROJECT_ROOT): boolean {
  return existsSync(join(root, 'cli', 'main.ts'));
}

export interface WavegateLayout {
  /** Dev stack, demo and default audit state (was `<checkout>/.wavegate`). */
  stateDir: string;
  /** The Temporal binaries' Python venv. */
  venvDir: string;
}

/**
 * Where wavegate keeps its own files. A checkout keeps them in itself, as always (`.wavegate/`,
 * `.tools/venv`; tests and scripts rely on that). An installed package may sit in a read-only prefix
 * (`npm install -g` as root, a Nix store), so it keeps them in a per-user home: `$WAVEGATE_HOME`, default
 * `~/.wavegate` (state in it, the venv in `tools/venv`). WAVEGATE_HOME only applies to an installed package.
 */
export function wavegateLayout(
  root: string,
  checkout: boolean,
  env: NodeJS.ProcessEnv = process.env,
  home: () => string = homedir,
): WavegateLayout {
  if (checkout) return { stateDir: join(root, '.wavegate'), venvDir: join(root, '.tools', 'venv') };
  const home_ = wavegateHome(env, home);
  return { stateDir: home_, venvDir: join(home_, 'tools', 'venv') };
}

/** The user's wavegate home: `$WAVEGATE_HOME`, default `~/.wavegate` (an installed package's state; anyone's signing keys). */
export function wavegateHome(env: NodeJS.ProcessEnv = process.env, home: () => string = homedir): string {
  return resolve(env.WAVEGATE_HOME || join(home(), '.wavegate'));
}

const LAYOUT = wavegateLayout(PROJECT_ROOT, isCheckout());
/** `<checkout>/.wavegate`, or `$WAVEGATE_HOME` (default `~/.wavegate`) when installed. */
export const STATE_DIR = LAYOUT.stateDir;
export const VENV_DIR = LAYOUT.venvDir;
