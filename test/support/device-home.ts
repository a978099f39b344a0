import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * What a real `wavegate agent`'s device home says after a rollout (its `--home`): how often the apply really ran
 * and which revision the device's marker holds. For the e2e tests over real agents.
 */

/** The lines of `$HOME/apply-runs`: one per apply that really ran (written by the `install` of `writeApplyTools`). */
export function applyRunsIn(home: string): string[] {
  const file = join(home, 'apply-runs');
  return existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean) : [];
}

/** The device's marker for `profile` (`.wavegate/profiles/<profile>/revision` in its home), null before any apply. */
export function homeMarker(home: string, profile = 'demo'): number | null {
  const file = join(home, '.wavegate', 'profiles', profile, 'revision');
  return existsSync(file) ? Number(readFileSync(file, 'utf8').trim()) : null;
}

/**
 * The commands the demo revisions run on a device, written to `binDir` (put first on the agents' PATH): `install`
 * appends to `$HOME/apply-runs`, sleeps the seconds `$HOME/slow` names when that file is there, then runs the real
 * one; `sim-runtime-health` fails while `$HOME/unhealthy` exists; `sim-error-rate` prints `$HOME/error-rate`, else 0.
 */
export function writeApplyTools(binDir: string): void {
  const tools = {
    install: `echo "install $*" >> "$HOME/apply-runs"\n[ -f "$HOME/slow" ] && sleep "$(cat "$HOME/slow")"\nexec /usr/bin/install "$@"`,
    'sim-runtime-health': '[ ! -e "$HOME/unhealthy" ]',
    'sim-error-rate': 'cat "$HOME/error-rate" 2>/dev/null || echo 0',
  };
  mkdirSync(binDir, { recursive: true });
  for (const [name, body] of Object.entries(tools)) {
    writeFileSync(join(binDir, name), `#!/bin/sh\n${body}\n`);
    chmodSync(join(binDir, name), 0o755);
  }
}
