import { execFile, execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { appendFileSync, chmodSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveAuditLocation } from '../../audit/file';
import { deviceSetDigest } from '../../cli/board/fleet';
import { startBoard } from '../../cli/board/server';
import { abortUpdate } from '../../contracts/rollout';
import type { RolloutStatus } from '../../core/rollout/status';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { demoDevices } from '../../sim';
import { freePort } from '../../sim/ports';
import { runCli, spawnCliUntil, stopChild } from '../support/cli';
import { writeDemoSpec } from '../support/harness';
import { realRollouts, type TestFleet } from '../support/real-rollouts';
import { makeTestPki } from '../support/tls-proxy';
import { until } from '../support/until';

/**
 * Who can use `wavegate board`: a real board process (the CLI) over a real Temporal dev server, a real
 * worker and simulated fleets over SSH. On loopback the board makes a token file of its own (0600) and
 * answers nobody without a token: another OS user can neither read the file nor pause a rollout, and
 * the recorded operator is the token's name. Weak tokens are refused at start, wrong ones cost 250 ms and
 * a log line (bearer or login) and a source is cut off past 10; no other site's page is answered (a
 * fleet check runs nothing); sessions are per operator; 300 streams at once get 32; a stream ends by its
 * age; a revert starts only over the exact set the page showed; and
 * docs/operations.md's nginx recipe works as written (real nginx terminating TLS).
 */
const real = realRollouts('board-access');
const execFileAsync = promisify(execFile);
const ALICE = 'alice-9f86d081884c7d659a2feaa0c55ad015a3bf4f1b';
const BOB = 'bob-2c26b46b68ffc68ff99b453c1d30413413422d70';
const blind = { TEMPORAL_ADDRESS: '', TEMPORAL_PROFILE: '', TEMPORAL_CONFIG_FILE: '/nonexistent/none.toml' };
const children: ChildProcess[] = [];
let running: TestFleet;
let heldId = '';

interface Board {
  url: string;
  child: ChildProcess;
  output: () => string;
}

/** `wavegate board` on a free loopback port, against the test's Temporal and worker; once it says where it listens. */
async function boardProcess(args: string[]): Promise<Board> {
  const port = await freePort();
  const { child, output } = await spawnCliUntil(
    [
      'board',
      '--listen',
      `127.0.0.1:${port}`,
      ...real.cliFlags(),
      '--audit-dir',
      real.auditDir,
      '--profiles',
      join(PROJECT_ROOT, 'profiles'),
      ...args,
    ],
    /board listening on \S+ \(.*\)\n/,
    60_000,
    { ...blind, WAVEGATE_PROFILES: '' },
  );
  children.push(child);
  return { url: `http://127.0.0.1:${port}`, child, output };
}

function tokenFile(name: string, lines: string): string {
  const path = join(real.dir, name);
  writeFileSync(path, lines, { mode: 0o600 });
  return path;
}

interface Answer {
  status: number;
  body: { code?: string; message?: string; [k: string]: unknown };
  headers: Headers;
  ms: number;
}

async function call(url: string, init: RequestInit = {}): Promise<Answer> {
  const started = Date.now();
  const res = await fetch(url, init);
  const text = await res.text();
  let body: Answer['body'];
  try {
    body = JSON.parse(text);
  } catch {
    body = { text };
  }
  return { status: res.status, body, headers: res.headers, ms: Date.now() - started };
}

/** A session as the login form makes it: its cookie and CSRF token. */
async function login(board: Board, token: string): Promise<{ cookie: string; csrf: string; operator: string }> {
  const res = await fetch(`${board.url}/api/login`, {
    method: 'POST',
    headers: { origin: board.url, 'content-type': 'application/json' },
    body: JSON.stringify({ token }),
  });
  expect(res.status, board.output()).toBe(200);
  const { csrf, operator } = (await res.json()) as { csrf: string; operator: string };
  return { cookie: res.headers.get('set-cookie')!.split(';')[0]!, csrf, operator };
}

function post(board: Board, path: string, s: { cookie: string; csrf: string }, body: unknown): Promise<Answer> {
  return call(`${board.url}${path}`, {
    method: 'POST',
    headers: { cookie: s.cookie, origin: board.url, 'content-type': 'application/json', 'x-csrf-token': s.csrf },
    body: JSON.stringify(body),
  });
}

const statusOf = (id: string) => real.env.client.workflow.getHandle(id).query<RolloutStatus>('status');
const pausePath = () => `/api/rollouts/${encodeURIComponent(heldId)}/pause`;

beforeAll(async () => {
  // A rollout held at its canary's manual gate for the whole file: the one every pause is tried on.
  running = await real.fleet(demoDevices(3), { 'pool-a': 0.5, 'pool-b': 0.5 });
  const spec = writeDemoSpec(real.dir, 'held', {
    phases: [
      { canary: '1 device', gate: 'manual' },
      { bulk: 'remainder', gate: '0s' },
    ],
  });
  const started = await real.cli(['start', '-f', spec, '--inventory', running.inventoryPath, '--json']);
  expect(started.code, started.stderr).toBe(0);
  heldId = (JSON.parse(started.stdout.split('\n')[0]!) as { rolloutId: string }).rolloutId;
  await until('the canary at its manual gate', async () =>
    (await statusOf(heldId)).phases[0]?.stage === 'awaiting-approval' ? true : undefined,
  );
}, 120_000);

afterAll(async () => {
  await Promise.all(children.map((c) => stopChild(c)));
});

describe('who the board answers', () => {
  it('on loopback makes a token file of its own (0600) and answers no one without a token: another OS user can neither read it nor pause a rollout; the operator recorded is the token name', async () => {
    const stateDir = join(real.dir, 'state');
    mkdirSync(stateDir, { recursive: true });
    // Only the file's own mode stands between another account and the token: the directories are open.
    for (const dir of [real.dir, stateDir]) chmodSync(dir, 0o755);
    const first = await boardProcess(['--state-dir', stateDir]);
    const file = join(stateDir, 'board.tokens');
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const [name, token] = readFileSync(file, 'utf8')
      .split('\n')
      .find((l) => l && !l.startsWith('#'))!
      .split(' ');
    expect(token).toMatch(/^[0-9a-f]{48}$/);
    await until('how to sign in', async () => (/board: made /.test(first.output()) ? true : undefined));
    expect(first.output()).toContain(`made ${file} (mode 0600, yours alone)`);
    expect(first.output()).toContain(`sign in with the token of "${name}" in ${file}`);
    expect(first.output()).not.toContain(token!);

    // No token, no answer: not the list, not a control (with the page's own origin, as a local script would send).
    expect((await call(`${first.url}/api/rollouts`)).status).toBe(401);
    const unsigned = await call(`${first.url}${pausePath()}`, {
      method: 'POST',
      headers: { origin: first.url, 'content-type': 'application/json' },
      body: JSON.stringify({ reason: 'not mine to pause' }),
    });
    expect(unsigned.status).toBe(401);

    if (process.getuid?.() === 0) {
      // Another account on this host (CI runs as root): it reaches the port, not the file, not a control.
      const other = `wgboard${process.pid}`;
      execFileSync('useradd', ['--no-create-home', '--shell', '/usr/sbin/nologin', other]);
      try {
        const read = spawnSync('runuser', ['-u', other, '--', 'cat', file], { encoding: 'utf8' });
        expect(read.status).not.toBe(0);
        expect(read.stderr).toMatch(/Permission denied/);
        const curl = (args: string[]) =>
          spawnSync('runuser', ['-u', other, '--', 'curl', '-s', '-o', '/dev/null', '-w', '%{http_code}', ...args], {
            encoding: 'utf8',
          }).stdout;
        expect(curl([`${first.url}/api/rollouts`])).toBe('401');
        expect(curl([`${first.url}/api/session`])).toBe('401');
        expect(
          curl([
            '-X',
            'POST',
            '-H',
            `Origin: ${first.url}`,
            '-H',
            'Content-Type: application/json',
            '--data',
            '{"reason":"another account pausing"}',
            `${first.url}${pausePath()}`,
          ]),
        ).toBe('401');
      } finally {
        execFileSync('userdel', [other]);
      }
    }
    const held = await statusOf(heldId);
    expect(held.state).toBe('running');
    expect(held.controls).toEqual([]);
    await stopChild(first.child);

    // The file is the board's list of operators: a line added is a name recorded, whoever runs the board.
    const carol = 'carol-7d865e959b2466918c9863afca942d0fb89d7c9a';
    appendFileSync(file, `carol ${carol}\n`);
    const again = await boardProcess(['--state-dir', stateDir]);
    await until('how to sign in', async () => (again.output().includes(`reading ${file}`) ? true : undefined));
    const s = await login(again, carol);
    expect(s.operator).toBe('carol');
    const paused = await post(again, pausePath(), s, { reason: 'carol holds it' });
    expect(paused.status, JSON.stringify(paused.body)).toBe(200);
    expect((await statusOf(heldId)).controls.at(-1)).toMatchObject({ control: 'pause', by: 'carol', accepted: true });
    const resumed = await post(again, pausePath().replace(/pause$/, 'resume'), s, { reason: 'carol lets go' });
    expect(resumed.status, JSON.stringify(resumed.body)).toBe(200);
    expect(again.output()).not.toContain(carol);
    await stopChild(again.child);
  });

  it('refuses a weak token at start (exit 2) naming its name, not its value, and a token file others can read', async () => {
    const weak = 'bob-password-1234567890';
    const file = tokenFile('weak.tokens', `alice ${ALICE}\nbob ${weak}\n`);
    const run = await runCli(['board', '--token-file', file, ...real.cliFlags()], { env: blind });
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/line 2: the token of "bob" is weak \(23 characters\); a token needs at least 32/);
    expect(run.stderr + run.stdout).not.toContain(weak);
    const open = tokenFile('open.tokens', `alice ${ALICE}\n`);
    chmodSync(open, 0o644);
    const readable = await runCli(['board', '--token-file', open, ...real.cliFlags()], { env: blind });
    expect(readable.code).toBe(2);
    expect(readable.stderr).toMatch(/the token file is readable by others \(mode 644\); chmod 600 it/);
  });

  it("answers no other site's page: a cross-site or same-site fetch, or a foreign Origin, is 403 and checks nothing", async () => {
    const board = await boardProcess([
      '--token-file',
      tokenFile('site.tokens', `alice ${ALICE}\n`),
      '--inventory',
      running.inventoryPath,
    ]);
    try {
      const s = await login(board, ALICE);
      const before = running.fleet.totalCommands();
      // A page of 127.0.0.1:<another port> is the same site: the browser sends the SameSite=Strict cookie to it.
      const asked: Record<string, string>[] = [
        { 'sec-fetch-site': 'cross-site' },
        { 'sec-fetch-site': 'same-site' },
        { origin: 'http://127.0.0.1:9' },
        { origin: 'https://evil.example' },
      ];
      for (const path of ['/api/fleet/demo?fresh=1', '/api/rollouts', '/api/session', `/api/rollouts/${heldId}/events`])
        for (const headers of asked) {
          const a = await call(`${board.url}${path}`, { headers: { cookie: s.cookie, ...headers } });
          expect({ path, headers, status: a.status, code: a.body.code }).toEqual({
            path,
            headers,
            status: 403,
            code: 'FORBIDDEN',
          });
          expect(a.body.message).toMatch(/^(Sec-Fetch-Site|Origin) ".*": the board's API answers only its own page/);
        }
      expect(running.fleet.totalCommands()).toBe(before); // no fleet check ran
      // Its own page (same-origin) and the address bar (none) are answered.
      const own = await call(`${board.url}/api/fleet/demo`, {
        headers: { cookie: s.cookie, 'sec-fetch-site': 'same-origin' },
      });
      expect(own.status, JSON.stringify(own.body)).toBe(200);
      expect(running.fleet.totalCommands()).toBeGreaterThan(before);
      expect(
        (await call(`${board.url}/api/session`, { headers: { cookie: s.cookie, 'sec-fetch-site': 'none' } })).status,
      ).toBe(200);
    } finally {
      await stopChild(board.child);
    }
  });

  it("keeps sessions per operator: bob signing in again and again ends only his own oldest, never alice's", async () => {
    const board = await boardProcess(['--token-file', tokenFile('sessions.tokens', `alice ${ALICE}\nbob ${BOB}\n`)]);
    try {
      const alice = await login(board, ALICE);
      const bobs = [];
      for (let i = 0; i < 1_001; i++) bobs.push(await login(board, BOB));
      const session = (cookie: string) => call(`${board.url}/api/session`, { headers: { cookie } });
      const hers = await session(alice.cookie);
      expect({ status: hers.status, operator: hers.body.operator }).toEqual({ status: 200, operator: 'alice' });
      expect((await session(bobs.at(-1)!.cookie)).status).toBe(200);
      expect((await session(bobs[0]!.cookie)).status).toBe(401); // his own oldest ended
      // Signing out ends the caller's own session only.
      const out = await call(`${board.url}/api/logout`, {
        method: 'POST',
        headers: { cookie: bobs.at(-1)!.cookie, origin: board.url, 'content-type': 'application/json' },
        body: '{}',
      });
      expect(out.status).toBe(200);
      expect((await session(bobs.at(-1)!.cookie)).status).toBe(401);
      expect((await session(alice.cookie)).status).toBe(200);
    } finally {
      await stopChild(board.child);
    }
  });

  it('makes a wrong token cost 250 ms and a log line, bearer or login alike, and refuses a source any token past 10', async () => {
    const board = await boardProcess(['--token-file', tokenFile('guess.tokens', `alice ${ALICE}\n`)]);
    try {
      const guess = 'alice-0000000000000000000000000000000000000000';
      const bearer = await call(`${board.url}/api/rollouts`, { headers: { authorization: `Bearer ${guess}` } });
      expect({ status: bearer.status, code: bearer.body.code }).toEqual({ status: 401, code: 'UNAUTHORIZED' });
      expect(bearer.ms).toBeGreaterThanOrEqual(250);
      const form = await call(`${board.url}/api/login`, {
        method: 'POST',
        headers: { origin: board.url, 'content-type': 'application/json' },
        body: JSON.stringify({ token: guess }),
      });
      expect(form.status).toBe(401);
      expect(form.ms).toBeGreaterThanOrEqual(250);
      await until('the log lines', async () =>
        /a login with an unknown token/.test(board.output()) ? true : undefined,
      );
      expect(board.output()).toMatch(/board: a request with an unknown token from 127\.0\.0\.1/);
      expect(board.output()).not.toContain(guess);
      // Eight more at once (10 in all), then every token is refused, the right one too, until the budget refills.
      const more = await Promise.all(
        Array.from({ length: 8 }, () =>
          call(`${board.url}/api/rollouts`, { headers: { authorization: `Bearer ${guess}` } }),
        ),
      );
      expect(more.map((a) => a.status)).toEqual(Array(8).fill(401));
      const right = await call(`${board.url}/api/rollouts`, { headers: { authorization: `Bearer ${ALICE}` } });
      expect({ status: right.status, code: right.body.code }).toEqual({ status: 429, code: 'TOO_MANY_REQUESTS' });
      expect(right.body.message).toMatch(/^wrong tokens from 127\.0\.0\.1: more than 10 in a row/);
      expect(Number(right.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      await new Promise((r) => setTimeout(r, Number(right.headers.get('retry-after')) * 1000));
      expect((await call(`${board.url}/api/rollouts`, { headers: { authorization: `Bearer ${ALICE}` } })).status).toBe(
        200,
      );
    } finally {
      await stopChild(board.child);
    }
  });

  it('lets 32 of 300 live streams opened at once in, and no more', async () => {
    const board = await boardProcess(['--token-file', tokenFile('streams.tokens', `alice ${ALICE}\n`)]);
    const held = new AbortController();
    try {
      const events = `${board.url}/api/rollouts/${encodeURIComponent(heldId)}/events`;
      const answers = await Promise.all(
        Array.from({ length: 300 }, () =>
          fetch(events, { headers: { authorization: `Bearer ${ALICE}` }, signal: held.signal }).then((r) => r.status),
        ),
      );
      const open = answers.filter((s) => s === 200).length;
      expect(open).toBe(32);
      expect(answers.filter((s) => s === 503).length).toBe(268);
    } finally {
      held.abort();
      await stopChild(board.child);
    }
  });
});

describe('live streams end', () => {
  it('after their time: the page opens another', async () => {
    const logged: string[] = [];
    const board = await startBoard({
      sources: {
        client: real.env.client,
        audit: { where: resolveAuditLocation({ auditDir: real.auditDir }, { env: {} }) },
        transports: new Map(),
        taskQueue: real.worker.taskQueue,
        profilesRoot: join(PROJECT_ROOT, 'profiles'),
      },
      listen: { host: '127.0.0.1', port: 0 },
      tokens: [{ name: 'alice', token: ALICE }],
      log: (line) => logged.push(line),
      pollMs: 100,
      maxStreams: 1,
      streamMs: 1_500,
    });
    try {
      const bearer = { authorization: `Bearer ${ALICE}` };
      const started = Date.now();
      const aged = await fetch(`${board.url}/api/rollouts/${encodeURIComponent(heldId)}/events`, { headers: bearer });
      expect(aged.status).toBe(200);
      const text = await aged.text(); // ends by itself
      expect(Date.now() - started).toBeGreaterThanOrEqual(1_500);
      expect(Date.now() - started).toBeLessThan(6_000);
      expect(text).toMatch(/^retry: 2000\n\nevent: view\n/);
      expect(text).not.toContain('event: end'); // not the rollout's end: the page opens the stream again

      // Its slot is free again (one stream is this board's limit).
      const next = new AbortController();
      const again = await fetch(`${board.url}/api/rollouts/${encodeURIComponent(heldId)}/events`, {
        headers: bearer,
        signal: next.signal,
      });
      expect(again.status).toBe(200);
      next.abort();
    } finally {
      await board.close();
    }
  });
});

describe("docs/operations.md's proxy recipe", () => {
  it('works as written: through nginx terminating TLS, a browser-like client signs in and pauses a rollout', async () => {
    const pki = makeTestPki(join(real.dir, 'pki'));
    const nginxPort = await freePort();
    const publicUrl = `https://localhost:${nginxPort}`;
    const boardPort = await freePort();
    const { server, board: boardLine } = recipeFromDocs();
    const board = await (async () => {
      const { child, output } = await spawnCliUntil(
        [
          ...boardLine
            .replace('127.0.0.1:8080', `127.0.0.1:${boardPort}`)
            .replace('https://board.example.com', publicUrl)
            .replace('board.tokens', tokenFile('proxy.tokens', `alice ${ALICE}\n`))
            .split(/\s+/)
            .slice(1),
          ...real.cliFlags(),
          '--audit-dir',
          real.auditDir,
        ],
        /board listening on/,
        60_000,
        blind,
      );
      children.push(child);
      return { child, output };
    })();
    const prefix = join(real.dir, 'nginx-board');
    mkdirSync(join(prefix, 'tmp'), { recursive: true });
    const conf = join(prefix, 'nginx.conf');
    writeFileSync(
      conf,
      `${process.getuid?.() === 0 ? 'user root;' : ''}
worker_processes 1;
pid ${join(prefix, 'nginx.pid')};
error_log ${join(prefix, 'error.log')} info;
events { worker_connections 64; }
http {
  access_log ${join(prefix, 'access.log')};
  client_body_temp_path ${join(prefix, 'tmp')};
  proxy_temp_path ${join(prefix, 'tmp')};
  fastcgi_temp_path ${join(prefix, 'tmp')};
  uwsgi_temp_path ${join(prefix, 'tmp')};
  scgi_temp_path ${join(prefix, 'tmp')};
${server
  .replace('listen 443 ssl;', `listen 127.0.0.1:${nginxPort} ssl;`)
  .replace('/etc/ssl/board.crt', pki.serverCert)
  .replace('/etc/ssl/board.key', pki.serverKey)
  .replace('127.0.0.1:8080', `127.0.0.1:${boardPort}`)}
}
`,
    );
    // nginx in the foreground, a child of the test (ended in the finally), as test/support/tls-proxy.ts runs it.
    const nginx = spawn('nginx', ['-p', prefix, '-c', conf, '-e', join(prefix, 'error.log'), '-g', 'daemon off;'], {
      stdio: 'ignore',
    });
    try {
      await until('nginx listening', async () =>
        spawnSync('curl', ['-s', '--cacert', pki.caCert, '-o', '/dev/null', publicUrl]).status === 0 ? true : undefined,
      );
      const jar = join(prefix, 'cookies');
      // curl as a browser: through the proxy's name and port, with its Origin, its cookie jar. Run without
      // blocking: the worker that takes the pause runs in this process.
      const curl = async (path: string, args: string[]) => {
        const run = await execFileAsync(
          'curl',
          ['-s', '--cacert', pki.caCert, '-b', jar, '-c', jar, '-w', '\n%{http_code}', ...args, `${publicUrl}${path}`],
          { encoding: 'utf8' },
        );
        const lines = run.stdout.trimEnd().split('\n');
        const status = Number(lines.pop());
        return { status, body: JSON.parse(lines.join('\n') || '{}') as Record<string, string> };
      };
      const json = ['-H', `Origin: ${publicUrl}`, '-H', 'Content-Type: application/json'];
      const signedIn = await curl('/api/login', ['-X', 'POST', ...json, '--data', JSON.stringify({ token: ALICE })]);
      expect(signedIn.status, JSON.stringify(signedIn.body)).toBe(200);
      expect(readFileSync(jar, 'utf8')).toMatch(/#HttpOnly_localhost\tFALSE\t\/\tTRUE\t/); // Secure: the browser speaks HTTPS
      const paused = await curl(pausePath(), [
        '-X',
        'POST',
        ...json,
        '-H',
        `X-CSRF-Token: ${signedIn.body.csrf}`,
        '--data',
        JSON.stringify({ reason: 'through the proxy' }),
      ]);
      if (paused.status !== 200) await new Promise((r) => setTimeout(r, 1_000)); // for its log line
      expect(paused.status, JSON.stringify(paused.body) + board.output()).toBe(200);
      expect((await statusOf(heldId)).controls.at(-1)).toMatchObject({ control: 'pause', by: 'alice', accepted: true });
      // A page of another origin through the same proxy is still refused.
      const foreign = await curl(pausePath().replace(/pause$/, 'resume'), [
        '-X',
        'POST',
        '-H',
        'Origin: https://evil.example',
        '-H',
        'Content-Type: application/json',
        '-H',
        `X-CSRF-Token: ${signedIn.body.csrf}`,
        '--data',
        '{"reason":"x"}',
      ]);
      expect(foreign.status).toBe(403);
      // The live updates pass through unbuffered: the stream's first view arrives.
      const stream = await execFileAsync(
        'curl',
        [
          '-s',
          '-N',
          '--max-time',
          '3',
          '--cacert',
          pki.caCert,
          '-b',
          jar,
          `${publicUrl}/api/rollouts/${encodeURIComponent(heldId)}/events`,
        ],
        { encoding: 'utf8' },
      ).catch((err: { stdout: string }) => err); // --max-time ends it (exit 28)
      expect(stream.stdout).toMatch(/event: view\ndata: \{/);
      const resumed = await curl(pausePath().replace(/pause$/, 'resume'), [
        '-X',
        'POST',
        ...json,
        '-H',
        `X-CSRF-Token: ${signedIn.body.csrf}`,
        '--data',
        JSON.stringify({ reason: 'done with the proxy' }),
      ]);
      expect(resumed.status).toBe(200);
    } finally {
      nginx.kill('SIGTERM');
      await new Promise((r) => (nginx.exitCode === null ? nginx.once('exit', r) : r(undefined)));
      await stopChild(board.child);
    }
  });
});

describe('a revert from the board', () => {
  it('starts only over the exact set of devices the page showed, not another set of the same size', async () => {
    // One rollout of a profile at a time: the held one ends first.
    await real.env.client.workflow
      .getHandle(heldId)
      .executeUpdate(abortUpdate, { args: [{ by: 'test', reason: 'make way for the revert test', rollback: false }] });
    await real.env.client.workflow
      .getHandle(heldId)
      .result()
      .catch(() => undefined);
    const done = await real.fleet(demoDevices(4), { 'pool-a': 0.5, 'pool-b': 0.5 });
    const spec = writeDemoSpec(done.dir, 'done', {
      phases: [
        { canary: '1 device', gate: '0s' },
        { bulk: 'remainder', gate: '0s' },
      ],
    });
    const started = await real.cli(['start', '-f', spec, '--inventory', done.inventoryPath, '--json', '--wait']);
    expect(started.code, started.stderr).toBe(0);
    const id = (JSON.parse(started.stdout.split('\n')[0]!) as { rolloutId: string }).rolloutId;
    const board = await boardProcess([
      '--token-file',
      tokenFile('revert.tokens', `alice ${ALICE}\n`),
      '--inventory',
      done.inventoryPath,
    ]);
    try {
      const path = `/api/rollouts/${encodeURIComponent(id)}/revert`;
      const preview = await call(`${board.url}${path}`, { headers: { authorization: `Bearer ${ALICE}` } });
      expect(preview.status, JSON.stringify(preview.body)).toBe(200);
      const shown = preview.body.devices as string[];
      expect(shown, JSON.stringify(preview.body)).toBeDefined();
      expect(shown.length).toBe(4);
      expect(preview.body.digest).toBe(deviceSetDigest(shown));
      // Another set of the same size (one device swapped for one the rollout did not change).
      const other = [...shown.slice(1), 'edge-99'];
      const s = await login(board, ALICE);
      const refused = await post(board, path, s, { devices: 4, digest: deviceSetDigest(other), fast: true });
      expect({ status: refused.status, code: refused.body.code }).toEqual({ status: 409, code: 'CONFLICT' });
      expect(refused.body.message).toMatch(
        /^devices: the page showed 4 device\(s\) to revert, .* has 4 now \(.*\), not the same set; look again before reverting; nothing was started$/,
      );
      const listed = await real.env.client.workflow.list({ query: `WorkflowId STARTS_WITH "${id}"` });
      const ids: string[] = [];
      for await (const w of listed) ids.push(w.workflowId);
      expect(ids).toEqual([id]);
    } finally {
      await stopChild(board.child);
    }
  });
});

/** The nginx server block and the board's command line of docs/operations.md, "The board behind a proxy". */
function recipeFromDocs(): { server: string; board: string } {
  const doc = readFileSync(join(PROJECT_ROOT, 'docs', 'operations.md'), 'utf8');
  const section = doc.split('\n### The board behind a proxy\n')[1]!.split(/\n##+ /)[0]!;
  const server = /```nginx\n([\s\S]*?)```/.exec(section)![1]!;
  const board = /```sh\n([\s\S]*?)```/
    .exec(section)![1]!
    .split('\n')
    .filter((l) => l.trim() && !l.trim().startsWith('#'))
    .join(' ')
    .replace(/\\ /g, ' ');
  return { server, board };
}
