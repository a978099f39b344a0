import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { resolveConnectionSettings } from '../../workers/connection';
import { registerDevUi, registeredDevUi } from '../../workers/dev-ui-registry';

describe('Web UI links point at the UI actually serving a local dev stack', () => {
  const dir = mkdtempSync(join(tmpdir(), 'wavegate-dev-ui-'));
  const env = { WAVEGATE_DEV_UI_DIR: dir };
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('a command from another terminal links to the registered UI port, not the address port plus 1000', () => {
    const unregister = registerDevUi('127.0.0.1:29233', 'http://127.0.0.1:29234', env);
    expect(resolveConnectionSettings({ address: '127.0.0.1:29233' }, env).uiUrl).toBe('http://127.0.0.1:29234');
    unregister();
    expect(registeredDevUi('127.0.0.1:29233', env)).toBeUndefined();
    expect(resolveConnectionSettings({ address: '127.0.0.1:29233' }, env).uiUrl).toBe('http://127.0.0.1:30233');
  });

  it('an explicit --ui-url or WAVEGATE_UI_URL still wins', () => {
    const unregister = registerDevUi('127.0.0.1:29300', 'http://127.0.0.1:29301', env);
    expect(resolveConnectionSettings({ address: '127.0.0.1:29300', uiUrl: 'http://ui.example/' }, env).uiUrl).toBe(
      'http://ui.example',
    );
    expect(
      resolveConnectionSettings({ address: '127.0.0.1:29300' }, { ...env, WAVEGATE_UI_URL: 'http://other:1' }).uiUrl,
    ).toBe('http://other:1');
    unregister();
  });
});
