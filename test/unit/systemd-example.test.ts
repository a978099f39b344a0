import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { runCli } from '../support/cli';

/**
 * The example systemd unit (examples/systemd/) cannot rot: every flag its ExecStart passes is one
 * `wavegate worker --help` lists, every variable its env file sets is one wavegate or Temporal's client
 * config reads, the env file holds references only, and the hardening docs/production.md promises is there.
 */
const dir = join(PROJECT_ROOT, 'examples', 'systemd');
const unit = readFileSync(join(dir, 'wavegate-worker.service'), 'utf8');
const envFile = readFileSync(join(dir, 'worker.env'), 'utf8');

/** `Key=value` lines of the unit (continuations joined, comments dropped), in order. */
function directives(text: string): Array<[string, string]> {
  return text
    .replace(/\\\n/g, ' ')
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line && !line.startsWith('#') && !line.startsWith(';') && !line.startsWith('['))
    .map((line) => {
      const eq = line.indexOf('=');
      return [line.slice(0, eq), line.slice(eq + 1).trim()] as [string, string];
    });
}

const values = (key: string) =>
  directives(unit)
    .filter(([k]) => k === key)
    .map(([, v]) => v);

/** `VAR=value` assignments of the env file, commented-out alternatives included. */
const assignments = envFile
  .split('\n')
  .map((line) => /^#?([A-Z][A-Z0-9_]*)=(.*)$/.exec(line.trim()))
  .filter((m): m is RegExpExecArray => m !== null)
  .map((m) => ({ name: m[1]!, value: m[2]! }));

let help = '';
beforeAll(async () => {
  const run = await runCli(['worker', '--help']);
  expect(run.code, run.stderr).toBe(0);
  help = run.stdout;
}, 60_000);

describe('examples/systemd/wavegate-worker.service', () => {
  it('ExecStart runs `wavegate worker` with flags that `wavegate worker --help` lists, each with a value where it takes one', () => {
    const [execStart, ...more] = values('ExecStart');
    expect(more).toEqual([]);
    const words = execStart!.split(/\s+/);
    // A heap limit before the script (docs/operations.md "Memory": Node's default lets the heap grow to several times what is live).
    expect(words.slice(0, 4)).toEqual([
      '/usr/bin/node',
      '--max-old-space-size=1024',
      '/opt/wavegate/bin/wavegate.js',
      'worker',
    ]);
    const accepted = new Map(
      [...help.matchAll(/^\s+(?:-\w, )?(--[a-z][a-z-]*)( <[^>]+>)?/gm)].map((m) => [m[1]!, m[2] !== undefined]),
    );
    expect(accepted.size).toBeGreaterThan(10);
    const flags = words.slice(4);
    expect(flags.length).toBeGreaterThan(0);
    for (let i = 0; i < flags.length; i++) {
      const flag = flags[i]!;
      expect(accepted.has(flag), `${flag} is not an option of wavegate worker`).toBe(true);
      if (accepted.get(flag)) {
        const value = flags[++i];
        expect(value && !value.startsWith('--'), `${flag} needs a value`).toBe(true);
      }
    }
  });

  it('runs as the wavegate user with the promised hardening, and writes only under its state directory', () => {
    expect(values('User')).toEqual(['wavegate']);
    expect(values('NoNewPrivileges')).toEqual(['yes']);
    expect(values('ProtectSystem')).toEqual(['strict']);
    expect(values('PrivateTmp')).toEqual(['yes']);
    expect(values('EnvironmentFile')).toEqual(['/etc/wavegate/worker.env']);
    const writable = values('ReadWritePaths').flatMap((v) => v.split(/\s+/));
    expect(writable).toEqual(['/var/lib/wavegate']);
    // The audit directory (the file store's fallback) and the working directory are writable.
    const auditDir = /--audit-dir (\S+)/.exec(values('ExecStart')[0]!)![1]!;
    for (const path of [auditDir, values('WorkingDirectory')[0]!])
      expect(
        writable.some((w) => path === w || path.startsWith(`${w}/`)),
        path,
      ).toBe(true);
  });
});

describe('examples/systemd/worker.env', () => {
  it('sets only variables wavegate or the Temporal client config reads', () => {
    const lib = dirname(require.resolve('@temporalio/envconfig'));
    const envconfig = readdirSync(lib)
      .filter((f) => f.endsWith('.js'))
      .map((f) => readFileSync(join(lib, f), 'utf8'))
      .join('\n');
    const sources = ['audit/config.ts', 'cli/commands/dev.ts', 'workers/connection.ts']
      .map((f) => readFileSync(join(PROJECT_ROOT, f), 'utf8'))
      .join('\n');
    expect(assignments.length).toBeGreaterThan(5);
    for (const { name } of assignments) {
      const known = name.startsWith('TEMPORAL_')
        ? envconfig.includes(`'${name}'`) || envconfig.includes(`"${name}"`)
        : sources.includes(name);
      expect(known, `${name} is read by nothing`).toBe(true);
    }
  });

  it('holds references only: no inline key, password or token, and the store URL carries no password', () => {
    for (const { name, value } of assignments) {
      expect(name, `${name}: a secret by value`).not.toMatch(
        /^(TEMPORAL_API_KEY|PGPASSWORD|TEMPORAL_TLS_CLIENT_KEY_DATA)$/,
      );
      if (/PASSWORD|KEY|TOKEN|SECRET/.test(name)) expect(value, name).toMatch(/^\//);
    }
    const store = assignments.find((a) => a.name === 'WAVEGATE_AUDIT_STORE')!.value;
    expect(new URL(store).password).toBe('');
  });
});

/** The gateway's and the agent's units: the same checks against their own commands' --help. */
describe.each([
  { file: 'wavegate-gateway.service', command: 'gateway', user: 'wavegate-gateway' },
  { file: 'wavegate-agent.service', command: 'agent', user: 'wavegate-agent' },
])('examples/systemd/$file', ({ file, command, user }) => {
  const text = readFileSync(join(dir, file), 'utf8');
  const of = (key: string) =>
    directives(text)
      .filter(([k]) => k === key)
      .map(([, v]) => v);
  let commandHelp = '';
  beforeAll(async () => {
    const run = await runCli([command, '--help']);
    expect(run.code, run.stderr).toBe(0);
    commandHelp = run.stdout;
  }, 60_000);

  it(`ExecStart runs \`wavegate ${command}\` with flags its --help lists, each with its value`, () => {
    const [execStart, ...more] = of('ExecStart');
    expect(more).toEqual([]);
    const words = execStart!.split(/\s+/);
    expect(words[0]).toBe('/usr/bin/node');
    // Node's own options come before the script: only a heap size (the gateway's, docs/operations.md "Gateway memory").
    const script = words.indexOf('/opt/wavegate/bin/wavegate.js');
    for (const option of words.slice(1, script)) expect(option).toMatch(/^--max-old-space-size=\d+$/);
    expect(words[script + 1]).toBe(command);
    const accepted = new Map(
      [...commandHelp.matchAll(/^\s+(?:-\w, )?(--[a-z][a-z-]*)( <[^>]+>)?/gm)].map((m) => [m[1]!, m[2] !== undefined]),
    );
    const flags = words.slice(script + 2);
    expect(flags.length).toBeGreaterThan(4);
    for (let i = 0; i < flags.length; i++) {
      const flag = flags[i]!;
      expect(accepted.has(flag), `${flag} is not an option of wavegate ${command}`).toBe(true);
      if (accepted.get(flag)) expect(flags[++i] && !flags[i]!.startsWith('--'), `${flag} needs a value`).toBe(true);
    }
  });

  it('runs as its own user, hardened, writing only under its state directory', () => {
    expect(of('User')).toEqual([user]);
    expect(of('NoNewPrivileges')).toEqual(['yes']);
    expect(of('ProtectSystem')).toEqual(['strict']);
    expect(of('ReadWritePaths')).toEqual([`/var/lib/${user}`]);
    expect(of('UMask')).toEqual(['0077']);
  });

  it(
    command === 'gateway'
      ? 'serves HTTPS and reloads the inventory on systemctl reload (SIGHUP)'
      : 'a stop ends only the agent, so an apply in flight finishes and the restart reattaches',
    () => {
      const execStart = of('ExecStart')[0]!;
      if (command === 'gateway') {
        expect(execStart).toMatch(/--https-cert \S+\s+--https-key \S+/);
        expect(execStart).not.toContain('--insecure-http');
        expect(of('ExecReload')).toEqual(['/bin/kill -HUP $MAINPID']);
        // V8's heap grows up to 4x what is live under Node's default limit: 1 GiB holds 10,000 agents under 512 MiB.
        expect(execStart).toMatch(/^\/usr\/bin\/node --max-old-space-size=1024 /);
      } else {
        expect(of('KillMode')).toEqual(['process']);
        expect(execStart).toMatch(/--gateway https:\/\//);
        expect(execStart).toMatch(/--key \/var\/lib\/wavegate-agent\/state\//);
      }
    },
  );
});
