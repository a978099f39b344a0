import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { wavegateHome } from '../intake/package-layout';

/**
 * Where a local dev stack says which Web UI serves it, so a command run from another terminal links to
 * the UI actually serving that server (`wavegate dev --ui-port 29234` is not "the port plus 1000").
 * One small file per server address under `$WAVEGATE_HOME/dev-ui/` (default `~/.wavegate`; or `$WAVEGATE_DEV_UI_DIR`).
 */
function registryDir(env: NodeJS.ProcessEnv = process.env): string {
  return env.WAVEGATE_DEV_UI_DIR || join(wavegateHome(env), 'dev-ui');
}

function entryName(address: string): string {
  return address.replace(/[^A-Za-z0-9.-]/g, '_');
}

/** Record the UI of the dev server at `address`; returns how to take the record back. */
export function registerDevUi(address: string, uiUrl: string, env: NodeJS.ProcessEnv = process.env): () => void {
  const dir = registryDir(env);
  const file = join(dir, entryName(address));
  try {
    mkdirSync(dir, { recursive: true });
    writeFileSync(file, `${uiUrl}\n`);
  } catch {
    return () => {}; // a read-only home only costs the links their port
  }
  return () => rmSync(file, { force: true });
}

/** The UI a local dev stack registered for `address`, if one did. */
export function registeredDevUi(address: string, env: NodeJS.ProcessEnv = process.env): string | undefined {
  try {
    const url = readFileSync(join(registryDir(env), entryName(address)), 'utf8').trim();
    return /^https?:\/\/[^\s]+$/.test(url) ? url : undefined;
  } catch {
    return undefined;
  }
}
