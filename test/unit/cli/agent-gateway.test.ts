import { chmodSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parseAgentKey } from '../../../core/agent-auth';
import { runCli, spawnCliUntil, stopChild } from '../../support/cli';
import { scratchDir } from '../../support/harness';

/**
 * `wavegate agent enroll` and the refusals of `wavegate agent` and `wavegate gateway` before anything
 * listens, connects or syncs: exit 2 with the flag and the value named.
 */
describe('wavegate agent / gateway at the command line', () => {
  const scratch = scratchDir('agent-cli');
  afterAll(() => scratch.cleanup());
  const state = join(scratch.dir, 'state');
  const key = join(state, 'identity.key');
  const inventory = join(scratch.dir, 'inventory.yaml');

  it('enroll makes a 0600 identity key in a 0700 directory, prints its pin, and never overwrites it', async () => {
    const run = await runCli(['agent', 'enroll', '--state-dir', state]);
    expect(run.code, run.stderr).toBe(0);
    const pin = run.stdout.trim();
    expect(parseAgentKey(pin)).toHaveLength(32);
    expect(statSync(state).mode & 0o777).toBe(0o700);
    expect(statSync(key).mode & 0o777).toBe(0o600);
    expect(readFileSync(key, 'utf8')).toContain(pin.slice('ed25519:'.length));
    const before = readFileSync(key, 'utf8');
    const again = await runCli(['agent', 'enroll', '--state-dir', state]);
    expect(again.code).toBe(2);
    expect(again.stderr).toContain('refusing to overwrite');
    expect(readFileSync(key, 'utf8')).toBe(before);
    const printed = await runCli(['agent', 'pin', '--key', key]);
    expect(printed.stdout.trim()).toBe(pin);
  }, 60_000);

  it('agent refusals: a key others can read, a bad gateway URL, missing pins, a bad device id', async () => {
    const pins = join(scratch.dir, 'pins');
    mkdirSync(pins, { recursive: true });
    const base = [
      'agent',
      '--device-id',
      'dev-1',
      '--gateway',
      'http://127.0.0.1:1',
      '--trust',
      pins,
      '--state-dir',
      state,
      '--key',
      key,
    ];
    chmodSync(key, 0o644);
    const loose = await runCli(base);
    expect(loose.code).toBe(2);
    expect(loose.stderr).toMatch(/--key .*mode 0644.*chmod 600/);
    chmodSync(key, 0o600);
    const cases: Array<[string[], RegExp]> = [
      [
        base.map((a) => (a === 'http://127.0.0.1:1' ? 'http://user:pw@127.0.0.1:1' : a)),
        /--gateway: must be an http\(s\):\/\/host:port URL without credentials/,
      ],
      [base.map((a) => (a === pins ? join(scratch.dir, 'nope') : a)), /--trust .*nope: not a directory/],
      [base.map((a) => (a === pins ? 'bad name=x' : a)), /--trust bad name=x: the profile/],
      [base.map((a) => (a === 'dev-1' ? '-x y' : a)), /--device-id: must be/],
      [base.filter((a, i) => a !== '--key' && base[i - 1] !== '--key'), /--key: required/],
    ];
    for (const [args, message] of cases) {
      const run = await runCli(args);
      expect(run.code, args.join(' ')).toBe(2);
      expect(run.stderr).toMatch(message);
      expect(run.stderr).not.toContain('pw@');
    }
  }, 120_000);

  it('a state directory looser than 0700 is set to 0700 and said; the agent then syncs (and backs off from a gateway that is not there)', async () => {
    const loose = join(scratch.dir, 'loose-state');
    mkdirSync(loose, { recursive: true });
    chmodSync(loose, 0o755);
    const pins = join(scratch.dir, 'pins');
    mkdirSync(pins, { recursive: true });
    const { child, output } = await spawnCliUntil(
      [
        'agent',
        '--device-id',
        'dev-1',
        '--gateway',
        'http://127.0.0.1:1',
        '--trust',
        pins,
        '--state-dir',
        loose,
        '--key',
        key,
        '--home',
        scratch.dir,
      ],
      /retrying in/,
      60_000,
    );
    await stopChild(child);
    expect(output()).toMatch(/mode 0755 was looser than 0700; set to 0700/);
    expect(statSync(loose).mode & 0o777).toBe(0o700);
  }, 60_000);

  it('gateway refusals: plain HTTP off loopback, half a certificate, a bad listen address, a bad inventory', async () => {
    writeFileSync(
      inventory,
      JSON.stringify({
        pools: { p: {} },
        devices: [
          {
            id: 'dev-1',
            pool: 'p',
            transport: 'agent',
            agentKey: (await runCli(['agent', 'pin', '--key', key])).stdout.trim(),
          },
        ],
      }),
    );
    const base = ['gateway', '--inventory', inventory, '--address', '127.0.0.1:1'];
    const cases: Array<[string[], RegExp]> = [
      [[...base, '--listen', '0.0.0.0:0'], /--listen 0\.0\.0\.0:0: plain HTTP only on 127\.0\.0\.1, ::1 or localhost/],
      [[...base, '--listen', '127.0.0.1:0', '--https-cert', inventory], /--https-cert and --https-key: give both/],
      [[...base, '--listen', 'nowhere'], /--listen: must be host:port/],
      [[...base, '--listen', '127.0.0.1:0', '--max-long-polls', '0'], /--max-long-polls: must be a whole number/],
      [
        [
          'gateway',
          '--inventory',
          join(scratch.dir, 'missing.yaml'),
          '--listen',
          '127.0.0.1:0',
          '--address',
          '127.0.0.1:1',
        ],
        /missing\.yaml/,
      ],
    ];
    for (const [args, message] of cases) {
      const run = await runCli(args);
      expect(run.code, args.join(' ')).toBe(2);
      expect(run.stderr).toMatch(message);
    }
  }, 120_000);
});
