import { mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { isCheckout, PROJECT_ROOT, STATE_DIR, VENV_DIR, wavegateLayout } from '../../intake/package-layout';
import { defaultBuildId, derivedBuildId } from '../../workers/versioning';
import { WORKFLOWS_PATH } from '../../workers/worker';
import { scratchDir } from '../support/harness';

/** Where wavegate keeps its files and finds its build id, in a checkout and as an installed package. */
const scratch = scratchDir('package-layout');
afterAll(() => scratch.cleanup());

describe('checkout or installed package', () => {
  it('a checkout keeps its state and Temporal venv in itself, as always', () => {
    expect(isCheckout(PROJECT_ROOT)).toBe(true);
    expect(STATE_DIR).toBe(join(PROJECT_ROOT, '.wavegate'));
    expect(VENV_DIR).toBe(join(PROJECT_ROOT, '.tools', 'venv'));
    expect(wavegateLayout('/src/wavegate', true, { WAVEGATE_HOME: '/elsewhere' })).toEqual({
      stateDir: '/src/wavegate/.wavegate',
      venvDir: '/src/wavegate/.tools/venv',
    });
    expect(WORKFLOWS_PATH).toBe(join(PROJECT_ROOT, 'workflows', 'index.ts'));
  });

  it('an installed package keeps them in $WAVEGATE_HOME, default ~/.wavegate, never in its (maybe read-only) prefix', () => {
    const installed = join(scratch.dir, 'lib', 'node_modules', 'wavegate');
    mkdirSync(join(installed, 'dist', 'cli'), { recursive: true });
    writeFileSync(join(installed, 'dist', 'cli', 'main.js'), '');
    expect(isCheckout(installed)).toBe(false);
    expect(wavegateLayout(installed, false, {}, () => '/home/op')).toEqual({
      stateDir: '/home/op/.wavegate',
      venvDir: '/home/op/.wavegate/tools/venv',
    });
    expect(wavegateLayout(installed, false, { WAVEGATE_HOME: '/var/lib/wavegate' }, () => '/home/op')).toEqual({
      stateDir: '/var/lib/wavegate',
      venvDir: '/var/lib/wavegate/tools/venv',
    });
    expect(wavegateLayout(installed, false, { WAVEGATE_HOME: '' }, () => '/home/op').stateDir).toBe(
      '/home/op/.wavegate',
    );
  });

  it('the package ships the SSH receipt signer and its setup as executable scripts (they run on devices, not from dist/)', () => {
    const pkg = JSON.parse(readFileSync(join(PROJECT_ROOT, 'package.json'), 'utf8')) as { files: string[] };
    expect(pkg.files).toContain('device/receipt-signer/');
    for (const script of ['wavegate-sign-receipt', 'wavegate-receipt-setup']) {
      const path = join(PROJECT_ROOT, 'device', 'receipt-signer', script);
      expect(statSync(path).mode & 0o111).toBe(0o111);
      expect(readFileSync(path, 'utf8').startsWith('#!/bin/sh\n')).toBe(true);
    }
  });

  it('the build id: hashed from the sources in a checkout, read from dist/build-info.json when installed', () => {
    expect(derivedBuildId(PROJECT_ROOT)).toBe(defaultBuildId());
    const installed = join(scratch.dir, 'pkg');
    const info = join(installed, 'dist', 'build-info.json');
    mkdirSync(join(installed, 'dist'), { recursive: true });
    expect(() => derivedBuildId(installed, info)).toThrow(/build-info\.json is missing.*--build-id/);
    writeFileSync(info, JSON.stringify({ buildId: '0.1.0-abcdef123456' }));
    expect(derivedBuildId(installed, info)).toBe('0.1.0-abcdef123456');
    writeFileSync(info, JSON.stringify({ buildId: 'bad id!' }));
    expect(() => derivedBuildId(installed, info)).toThrow(/build id/);
  });
});
