import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inspect } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { WavegateError } from '../../../core/errors';
import { refusal } from '../../support/refusal';
import { connectionOptions, describeConnection, resolveConnectionSettings } from '../../../workers/connection';

const dir = mkdtempSync(join(tmpdir(), 'wavegate-connection-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
// No ambient profile or config file of this machine.
const env = { TEMPORAL_CONFIG_FILE: join(dir, 'none.toml') };
const SECRET = 'sekret-api-key-123';

describe('workers/connection: one resolver for the CLI and the worker', () => {
  it('defaults to the local dev server without TLS', () => {
    const s = resolveConnectionSettings({}, env);
    expect(s).toMatchObject({
      address: '127.0.0.1:7233',
      namespace: 'default',
      taskQueue: 'wavegate',
      uiUrl: 'http://127.0.0.1:8233',
    });
    expect(s.tls).toBeUndefined();
    expect(s.apiKey).toBeUndefined();
  });

  it('takes the API key by reference (file, named variable, TEMPORAL_API_KEY), implies TLS, and never shows it', () => {
    const keyFile = join(dir, 'key');
    writeFileSync(keyFile, `${SECRET}\n`);
    for (const s of [
      resolveConnectionSettings({ address: 'ns.a1b2c.tmprl.cloud:7233', apiKeyFile: keyFile }, env),
      resolveConnectionSettings(
        { address: 'ns.a1b2c.tmprl.cloud:7233', apiKeyEnv: 'MY_KEY' },
        { ...env, MY_KEY: SECRET },
      ),
      resolveConnectionSettings({ address: 'ns.a1b2c.tmprl.cloud:7233' }, { ...env, TEMPORAL_API_KEY: SECRET }),
    ]) {
      expect(s.tls).toBe(true);
      expect(connectionOptions(s).apiKey).toBe(SECRET);
      expect(JSON.stringify(s)).not.toContain(SECRET);
      expect(inspect(s, { depth: 5 })).not.toContain(SECRET);
      expect(describeConnection(s)).not.toContain(SECRET);
      expect(s.uiUrl).toBe('https://cloud.temporal.io');
    }
  });

  it('refuses an unreadable or empty key reference naming the flag, never a key', () => {
    const empty = join(dir, 'empty');
    writeFileSync(empty, '\n');
    const cases: Array<[() => unknown, string]> = [
      [() => resolveConnectionSettings({ apiKeyFile: join(dir, 'missing') }, env), '--api-key-file'],
      [() => resolveConnectionSettings({ apiKeyFile: empty }, env), '--api-key-file'],
      [() => resolveConnectionSettings({ apiKeyEnv: 'UNSET_KEY_VAR' }, env), '--api-key-env UNSET_KEY_VAR'],
      [() => resolveConnectionSettings({ tlsCert: join(dir, 'c.pem') }, env), '--tls-cert and --tls-key'],
    ];
    for (const [fn, named] of cases) {
      const caught = refusal(fn);
      expect(caught).toBeInstanceOf(WavegateError);
      expect(caught.code).toBe('INVALID_INPUT');
      expect(caught.message).toContain(named);
    }
  });
});
