import { spawn } from 'node:child_process';
import { mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { packArgs } from './compiled-build';

/** wavegate as a user installs it: `npm pack` of this checkout, installed globally into a prefix of its own. */
export interface InstalledPackage {
  prefix: string;
  /** `<prefix>/lib/node_modules/wavegate` */
  installed: string;
  /** `<prefix>/bin/wavegate` */
  bin: string;
}

function npm(args: string[], cwd: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn('npm', args, {
      cwd,
      env: { ...process.env, npm_config_audit: 'false', npm_config_fund: 'false', npm_config_update_notifier: 'false' },
    });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    child.once('error', reject);
    child.once('exit', (code) =>
      code === 0 ? resolve() : reject(new Error(`npm ${args.join(' ')} exited ${code}:\n${out}`)),
    );
  });
}

/**
 * Pack this checkout (the test run's fresh dist/, else its prepack builds dist/: compiled-build.ts) into `dir`
 * and install the tarball globally into `<dir>/prefix`, from the cache `npm ci` filled (--prefer-offline). Asynchronous, so other set-up
 * (an sshd fleet, a dev server) can run meanwhile.
 */
export async function packAndInstall(dir: string): Promise<InstalledPackage> {
  const prefix = join(dir, 'prefix');
  const away = join(dir, 'npm-cwd');
  mkdirSync(prefix, { recursive: true });
  mkdirSync(away, { recursive: true });
  await npm(packArgs(dir), PROJECT_ROOT);
  const tarball = readdirSync(dir).find((f) => /^wavegate-.*\.tgz$/.test(f));
  if (!tarball) throw new Error(`npm pack wrote no tarball in ${dir}`);
  await npm(['install', '--global', '--prefix', prefix, '--prefer-offline', join(dir, tarball)], away);
  return { prefix, installed: join(prefix, 'lib', 'node_modules', 'wavegate'), bin: join(prefix, 'bin', 'wavegate') };
}
