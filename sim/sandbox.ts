/**
 * A device's file system: the sandbox directory `<dir>/<id>` is its HOME, its WAVEGATE_ROOT and its
 * SFTP root. `<sandbox>/.sim/bin/` holds the device-side commands the health probes call:
 *   sim-runtime-health <name>...  exit 1 if any name is listed in .sim/unhealthy, else 0
 *                                 (prints "<name> healthy|unhealthy"; no args: exit 2)
 *   sim-error-rate                prints .sim/error_rate (default "0"); hangs while
 *                                 .sim/error_rate_hangs exists
 *   sim-device-info               id= pool= class= os= updateClass= and label.<k>=<v> lines
 * and the files those read, written by setFaults: `unhealthy` (one runtime name per line),
 * `error_rate`, `error_rate_hangs` (exists => hang), `faults.json` (informational copy).
 *
 * Sandboxes are created lazily (first exec / SFTP / setFaults, or Fleet.ensureSandbox) so a fleet of
 * a thousand devices starts without writing a thousand directories.
 */
import { promises as fsp } from 'node:fs';
import * as path from 'node:path';
import type { DeviceState, SimDevice } from './device';
import type { SimFaults } from './faults';

function shQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/** The whole environment of a device's commands: nothing of the simulator's own is inherited. */
export function sandboxEnv(sandbox: string, deviceId: string): NodeJS.ProcessEnv {
  return {
    PATH: `${sandbox}/.sim/bin:/usr/local/bin:/usr/bin:/bin`,
    HOME: sandbox,
    WAVEGATE_DEVICE_ID: deviceId,
    WAVEGATE_ROOT: sandbox,
    LANG: 'C',
  };
}

/** Makes sure the device's sandbox and its `.sim/` helpers exist; concurrent callers share one write. */
export function ensureSandbox(st: DeviceState): Promise<string> {
  if (!st.sandboxReady) {
    st.sandboxReady = writeSandbox(st.dev).catch((err: unknown) => {
      st.sandboxReady = undefined; // let the next caller retry
      throw err;
    });
  }
  return st.sandboxReady;
}

async function writeSandbox(dev: SimDevice): Promise<string> {
  const sandbox = dev.sandbox;
  const simDir = path.join(sandbox, '.sim');
  const binDir = path.join(simDir, 'bin');
  await fsp.mkdir(binDir, { recursive: true });
  const q = shQuote(simDir);
  const spec = dev.spec;
  const infoLines = [
    `id=${spec.id}`,
    `pool=${spec.pool ?? ''}`,
    `class=${spec.class ?? ''}`,
    `os=${spec.os ?? ''}`,
    `updateClass=${spec.updateClass ?? 'required'}`,
    ...Object.entries(spec.labels ?? {}).map(([k, v]) => `label.${k}=${v}`),
  ].map((l) => l.replace(/[\r\n]/g, ' '));

  const scripts: Record<string, string> = {
    'sim-runtime-health': `#!/bin/sh
# wavegate fleet simulator: exits 1 if any named runtime is listed in .sim/unhealthy
SIM=${q}
if [ $# -lt 1 ]; then echo "usage: sim-runtime-health <name>..." >&2; exit 2; fi
rc=0
for name in "$@"; do
  if [ -f "$SIM/unhealthy" ] && grep -Fqx -- "$name" "$SIM/unhealthy"; then
    echo "$name unhealthy"
    rc=1
  else
    echo "$name healthy"
  fi
done
exit $rc
`,
    'sim-error-rate': `#!/bin/sh
# wavegate fleet simulator: prints the device error rate (.sim/error_rate, default 0);
# hangs forever when .sim/error_rate_hangs exists (a metrics source timing out)
SIM=${q}
if [ -f "$SIM/error_rate_hangs" ]; then
  while :; do sleep 3600; done
fi
if [ -s "$SIM/error_rate" ]; then cat "$SIM/error_rate"; else echo 0; fi
`,
    'sim-device-info': `#!/bin/sh
# wavegate fleet simulator: device identity as key=value lines
cat <<'__WAVEGATE_SIM_EOF__'
${infoLines.join('\n')}
__WAVEGATE_SIM_EOF__
`,
  };
  await Promise.all(
    Object.entries(scripts).map(async ([name, body]) => {
      const p = path.join(binDir, name);
      await fsp.writeFile(p, body, { mode: 0o755 });
      await fsp.chmod(p, 0o755);
    }),
  );
  return sandbox;
}

/** The device-side faults as the files the sim-* commands read; a cleared knob removes its file. */
export async function writeFaultFiles(sandbox: string, faults: SimFaults): Promise<void> {
  const simDir = path.join(sandbox, '.sim');
  const put = (name: string, content: string | undefined): Promise<void> =>
    content === undefined
      ? fsp.rm(path.join(simDir, name), { force: true })
      : fsp.writeFile(path.join(simDir, name), content);
  const unhealthy = faults.unhealthyRuntimes ?? [];
  await Promise.all([
    put('unhealthy', unhealthy.length ? `${unhealthy.join('\n')}\n` : undefined),
    put('error_rate', faults.errorRate !== undefined ? `${faults.errorRate}\n` : undefined),
    put('error_rate_hangs', faults.errorRateHangs ? '1\n' : undefined),
    put('faults.json', `${JSON.stringify(faults, null, 2)}\n`),
  ]);
}
