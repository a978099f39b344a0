/**
 * The side-by-side benchmark on real OpenSSH (bench/README.md, issue 12 item 6): N real `sshd` on
 * 127.0.0.1 (sim/openssh.ts: one per device, its own host key and HOME, sessions that read no rc file),
 * then, on that same fleet, reset between runs:
 *   (a) wavegate: a dev server and one worker started once (not timed), then `wavegate start --wait` of
 *       phases [canary 1, 25%, remainder], gates 0, `--in-flight` devices at once (the pool budget), for
 *       the profile `wavegate init` scaffolds (apply installs a file from the signed payload, verify
 *       reads it back); timed as the CLI's wall and the workflow's own time (first to last event);
 *   (b) Ansible (Debian's ansible-playbook) with the same serial phases (`serial: [1, "25%", "100%"]`),
 *       `forks: --in-flight`, verify / apply / verify / marker as shell tasks;
 *   (c) plain parallel ssh: `--in-flight` `ssh` processes at once, one per device running the same
 *       commands, no phases.
 * Each is checked afterwards by reading every device's file and marker from disk.
 *
 *   npx tsx bench/sshd-compare.ts --devices 100 [--runs 3] [--in-flight 50] [--wavegate-root DIR]
 *       [--only wavegate,ansible,ssh] [--base-port 20000] [--dir DIR] [--split-workers] [--keep] [--cpu-prof DIR]
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { stringify } from 'yaml';
import { Client, Connection } from '@temporalio/client';
import { startOpenSshFleet, type OpenSshFleet } from '../sim/openssh';
import { startDevServerEnv } from '../workers/dev-server';
import { PROJECT_ROOT } from '../intake/package-layout';
import { wholeFlag } from './flags';

const { values: flags } = parseArgs({
  options: {
    devices: { type: 'string', default: '100' },
    runs: { type: 'string', default: '1' },
    'in-flight': { type: 'string', default: '50' },
    'wavegate-root': { type: 'string', default: PROJECT_ROOT },
    only: { type: 'string', default: 'wavegate,ansible,ssh' },
    'base-port': { type: 'string', default: '20000' },
    dir: { type: 'string' },
    'split-workers': { type: 'boolean', default: false },
    keep: { type: 'boolean', default: false },
    'cpu-prof': { type: 'string' },
  },
});
const DEVICES = wholeFlag('devices', flags.devices, 1, 1000);
const RUNS = wholeFlag('runs', flags.runs, 1, 20);
const IN_FLIGHT = wholeFlag('in-flight', flags['in-flight'], 1, 500);
const BASE_PORT = wholeFlag('base-port', flags['base-port'], 1, 32767);
if (BASE_PORT + DEVICES > 32768)
  throw new Error(
    `--base-port ${BASE_PORT} + --devices ${DEVICES}: ports must stay below 32768 (the kernel's ephemeral range)`,
  );
const WAVEGATE_ROOT = resolve(flags['wavegate-root']!);
if (!existsSync(join(WAVEGATE_ROOT, 'bin', 'wavegate.js')))
  throw new Error(`--wavegate-root ${WAVEGATE_ROOT}: no bin/wavegate.js there`);
const PEERS = ['wavegate', 'ansible', 'ssh'] as const;
type Peer = (typeof PEERS)[number];
const ONLY = flags.only!.split(',').map((s) => s.trim());
for (const p of ONLY)
  if (!(PEERS as readonly string[]).includes(p))
    throw new Error(
      `--only: unknown run ${JSON.stringify(p)}; expected a comma-separated subset of ${PEERS.join(',')}`,
    );
const DIR = resolve(flags.dir ?? `/tmp/wavegate-sshd-bench-${DEVICES}`);

const PROFILE = 'motd';
const CONTENT_R2 = 'motd revision 2';
const MARKER = `.wavegate/profiles/${PROFILE}/revision`;
// The peers' commands: the same verify / apply / verify / marker wavegate runs for the init profile
// (wavegate's apply installs the file from its signed, uploaded payload; the peers write it in place).
const VERIFY = `grep -qx '${CONTENT_R2}' "$HOME/etc/motd.txt"`;
const APPLY = `mkdir -p "$HOME/etc" && printf '%s\\n' '${CONTENT_R2}' > "$HOME/etc/motd.txt"`;
const WRITE_MARKER = `mkdir -p "$HOME/.wavegate/profiles/${PROFILE}" && echo 2 > "$HOME/${MARKER}"`;

const log = (line: string) => process.stdout.write(`${line}\n`);
const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
/** The machine is shared: every figure is printed with the load it was measured under. */
const load = () =>
  `load ${loadavg()
    .map((l) => l.toFixed(1))
    .join(' ')}`;

// ---- processes ----

interface Ran {
  code: number | null;
  out: string;
}

function runProcess(
  cmd: string,
  args: string[],
  opts: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {},
): Promise<Ran> {
  return new Promise((done, fail) => {
    const child = spawn(cmd, args, {
      cwd: opts.cwd,
      env: { ...process.env, ...opts.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 1_800_000);
    child.once('error', fail);
    child.once('exit', (code) => {
      clearTimeout(timer);
      done({ code, out });
    });
  });
}

function spawnUntil(
  cmd: string,
  args: string[],
  ready: RegExp,
  opts: { cwd: string; env: NodeJS.ProcessEnv },
): Promise<{ child: ChildProcess; output: () => string }> {
  return new Promise((done, fail) => {
    const child = spawn(cmd, args, {
      cwd: opts.cwd,
      env: { ...process.env, ...opts.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    const timer = setTimeout(() => fail(new Error(`${args.join(' ')}: not ready in 120 s:\n${out}`)), 120_000);
    const onData = (c: Buffer) => {
      out += c.toString();
      if (ready.test(out)) {
        clearTimeout(timer);
        done({ child, output: () => out });
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code) => fail(new Error(`${args.join(' ')} exited ${code} before ready:\n${out}`)));
  });
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
  await exited;
  clearTimeout(timer);
}

/** Resident set size of a process in MiB (Linux /proc), 0 once it is gone. */
function rssMiB(pid: number): number {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : 0;
  } catch {
    return 0;
  }
}

// ---- the fleet ----

function resetFleet(fleet: OpenSshFleet): void {
  for (const d of fleet.devices) {
    for (const name of readdirSync(d.home)) rmSync(join(d.home, name), { recursive: true, force: true });
  }
}

interface Check {
  content: number;
  marker: number;
}

function checkFleet(fleet: OpenSshFleet): Check {
  const read = (p: string) => (existsSync(p) ? readFileSync(p, 'utf8').trim() : '');
  let content = 0;
  let marker = 0;
  for (const d of fleet.devices) {
    if (read(join(d.home, 'etc', 'motd.txt')) === CONTENT_R2) content++;
    if (read(join(d.home, MARKER)) === '2') marker++;
  }
  return { content, marker };
}

// ---- (a) wavegate ----

interface Result {
  peer: Peer;
  run: number;
  wallMs: number;
  check: Check;
  ok: boolean;
  /** wavegate only: first to last event of the rollout's history. */
  workflowMs?: number;
  /** wavegate only: the worker's peak RSS during the run (the activities worker's with --split-workers). */
  workerRssMiB?: number;
  note?: string;
}

class Wavegate {
  private env: Awaited<ReturnType<typeof startDevServerEnv>> | undefined;
  private workers: Array<{ child: ChildProcess; output: () => string }> = [];
  private client: Client | undefined;
  private connection: Connection | undefined;
  readonly dir = join(DIR, 'wavegate');
  private specPath = join(this.dir, `${PROFILE}-rollout.yaml`);
  private inventoryPath = join(this.dir, 'fleet.yaml');
  private profilesRoot = join(this.dir, 'profiles');

  private cliEnv(): NodeJS.ProcessEnv {
    return {
      TEMPORAL_ADDRESS: this.env?.address ?? '',
      TEMPORAL_PROFILE: '',
      TEMPORAL_CONFIG_FILE: join(DIR, 'none.toml'),
      WAVEGATE_UI_URL: '',
      WAVEGATE_PROFILES: '',
      WAVEGATE_AUDIT_STORE: '',
    };
  }

  private wg(args: string[], timeoutMs?: number): Promise<Ran> {
    return runProcess(process.execPath, [join(WAVEGATE_ROOT, 'bin', 'wavegate.js'), ...args], {
      cwd: this.dir,
      env: this.cliEnv(),
      ...(timeoutMs ? { timeoutMs } : {}),
    });
  }

  /** Not timed: init's profile, keys, trust and signatures (the commands init prints), the spec, a dev server and the worker(s). */
  async setUp(fleet: OpenSshFleet): Promise<void> {
    rmSync(this.dir, { recursive: true, force: true });
    mkdirSync(this.dir, { recursive: true });
    const knownHosts = join(DIR, 'known_hosts');
    const init = await this.wg([
      'init',
      '--profiles',
      this.profilesRoot,
      '--profile',
      PROFILE,
      '--inventory',
      this.inventoryPath,
      '--spec',
      this.specPath,
      ...fleet.devices.flatMap((d) => ['--host', `${d.id}=${d.user}@${d.host}:${d.port}`]),
      '--known-hosts',
      knownHosts,
      '--ssh-key',
      fleet.clientKeyPath,
      '--keys-dir',
      join(this.dir, 'keys'),
      '--gate',
      '0s',
      '--force',
    ]);
    if (init.code !== 0) throw new Error(`wavegate init exited ${init.code}:\n${init.out}`);
    const printed = init.out
      .split('\n')
      .filter((l) => /^ {2}(wavegate|mkdir) /.test(l))
      .map((l) => l.trim().split(' '));
    for (const [tool, ...args] of printed) {
      if (tool === 'mkdir') {
        mkdirSync(args[args.length - 1]!, { recursive: true, mode: 0o700 });
        continue;
      }
      if (!['keygen', 'trust', 'sign', 'cosign'].includes(args[0]!)) continue;
      const ran = await this.wg(args);
      if (ran.code !== 0) throw new Error(`wavegate ${args.join(' ')} exited ${ran.code}:\n${ran.out}`);
    }
    // The benchmark's spec: three phases, gates 0, no health gate, IN_FLIGHT devices at once.
    const budget = Math.min(1, (IN_FLIGHT + 0.5) / DEVICES); // max(1, floor(size × budget)) = IN_FLIGHT
    writeFileSync(
      this.specPath,
      stringify({
        rollout: {
          profile: PROFILE,
          fromRevision: 1,
          toRevision: 2,
          phases: [
            { canary: '1 device', gate: '0s' },
            { bulk: '25%', gate: '0s' },
            { bulk: 'remainder', gate: '0s' },
          ],
          disruptionBudget: { fleet: budget },
        },
      }),
    );

    this.env = await startDevServerEnv();
    this.connection = await Connection.connect({
      address: this.env.address,
      channelArgs: { 'grpc.max_receive_message_length': 64 * 1024 * 1024 },
    });
    this.client = new Client({ connection: this.connection, namespace: this.env.namespace ?? 'default' });
    const workerArgs = ['worker', '--profiles', this.profilesRoot, '--audit-dir', join(this.dir, 'audit')];
    const layouts = flags['split-workers'] ? [['--workflows-only'], ['--activities-only']] : [[]];
    for (const layout of layouts) {
      // --cpu-prof DIR: the worker writes a V8 CPU profile there when it stops (open it in Chrome's DevTools).
      const prof = flags['cpu-prof'] ? ['--cpu-prof', '--cpu-prof-dir', resolve(flags['cpu-prof'])] : [];
      this.workers.push(
        await spawnUntil(
          process.execPath,
          [...prof, join(WAVEGATE_ROOT, 'bin', 'wavegate.js'), ...workerArgs, ...layout],
          /worker \S+ polling/,
          { cwd: this.dir, env: this.cliEnv() },
        ),
      );
    }
  }

  async run(fleet: OpenSshFleet, run: number): Promise<Result> {
    const activitiesWorker = this.workers[this.workers.length - 1]!.child.pid!;
    let peak = 0;
    const sampler = setInterval(() => (peak = Math.max(peak, rssMiB(activitiesWorker))), 200);
    const started = Date.now();
    const ran = await this.wg([
      'start',
      '-f',
      this.specPath,
      '--inventory',
      this.inventoryPath,
      '--profiles',
      this.profilesRoot,
      '--wait',
    ]);
    const wallMs = Date.now() - started;
    clearInterval(sampler);
    const check = checkFleet(fleet);
    let workflowMs: number | undefined;
    try {
      // Each rollout has an id of its own (issue 23): the one start printed.
      const rolloutId = /^rollout (\S+) started$/m.exec(ran.out)?.[1] ?? `rollout:${PROFILE}`;
      const history = await this.client!.workflow.getHandle(rolloutId).fetchHistory();
      // Kept for reading where the time went (`npx tsx bench/history-timeline.ts <file>`).
      writeFileSync(join(this.dir, `history-run${run}.json`), JSON.stringify(history));
      const times = (history.events ?? []).map(
        (e) => Number(e.eventTime!.seconds) * 1000 + Math.floor((e.eventTime!.nanos ?? 0) / 1e6),
      );
      workflowMs = times[times.length - 1]! - times[0]!;
    } catch (err) {
      log(`  (workflow history not read: ${(err as Error).message})`);
    }
    const ok = ran.code === 0 && check.content === DEVICES && check.marker === DEVICES;
    if (!ok) log(`  wavegate start exited ${ran.code}:\n${ran.out.split('\n').slice(-15).join('\n')}`);
    return {
      peer: 'wavegate',
      run,
      wallMs,
      check,
      ok,
      ...(workflowMs !== undefined ? { workflowMs } : {}),
      workerRssMiB: Math.round(peak),
    };
  }

  async tearDown(): Promise<void> {
    for (const w of this.workers) await stopChild(w.child);
    await this.connection?.close();
    await this.env?.teardown();
  }
}

// ---- (b) Ansible ----

class Ansible {
  readonly dir = join(DIR, 'ansible');

  setUp(fleet: OpenSshFleet): void {
    rmSync(this.dir, { recursive: true, force: true });
    mkdirSync(join(this.dir, 'cp'), { recursive: true });
    mkdirSync(join(this.dir, 'home'), { recursive: true });
    const knownHosts = join(DIR, 'known_hosts');
    writeFileSync(
      join(this.dir, 'inventory.ini'),
      [
        '[fleet]',
        ...fleet.devices.map((d) => `${d.id} ansible_host=${d.host} ansible_port=${d.port}`),
        '',
        '[fleet:vars]',
        `ansible_user=${fleet.user}`,
        `ansible_ssh_private_key_file=${fleet.clientKeyPath}`,
        `ansible_ssh_common_args='-o UserKnownHostsFile=${knownHosts} -o StrictHostKeyChecking=yes -o BatchMode=yes'`,
        'ansible_python_interpreter=/usr/bin/python3',
        '',
      ].join('\n'),
    );
    writeFileSync(
      join(this.dir, 'ansible.cfg'),
      [
        '[defaults]',
        `forks = ${IN_FLIGHT}`,
        'gathering = explicit',
        'host_key_checking = True',
        'retry_files_enabled = False',
        `local_tmp = ${join(this.dir, 'tmp')}`,
        '',
        '[ssh_connection]',
        `control_path_dir = ${join(this.dir, 'cp')}`,
        '',
      ].join('\n'),
    );
    const task = (name: string, shell: string, extra: Record<string, unknown> = {}) => ({ name, shell, ...extra });
    writeFileSync(
      join(this.dir, 'rollout.yml'),
      stringify([
        {
          name: `${PROFILE} r1 -> r2`,
          hosts: 'fleet',
          gather_facts: false,
          serial: [1, '25%', '100%'],
          tasks: [
            task('verify first', VERIFY, { register: 'first', failed_when: false, changed_when: false }),
            task('apply', APPLY, { when: 'first.rc != 0' }),
            task('verify', VERIFY, { when: 'first.rc != 0', changed_when: false }),
            task('marker', WRITE_MARKER),
          ],
        },
      ]),
    );
  }

  async run(fleet: OpenSshFleet, run: number): Promise<Result> {
    const started = Date.now();
    const ran = await runProcess(
      'ansible-playbook',
      ['-i', join(this.dir, 'inventory.ini'), join(this.dir, 'rollout.yml')],
      {
        cwd: this.dir,
        env: {
          ANSIBLE_CONFIG: join(this.dir, 'ansible.cfg'),
          ANSIBLE_HOME: join(this.dir, 'home'),
          ANSIBLE_NOCOLOR: '1',
        },
      },
    );
    const wallMs = Date.now() - started;
    writeFileSync(join(this.dir, `run-${run}.log`), ran.out);
    const check = checkFleet(fleet);
    const ok = ran.code === 0 && check.content === DEVICES && check.marker === DEVICES;
    if (!ok) log(`  ansible-playbook exited ${ran.code}:\n${ran.out.split('\n').slice(-15).join('\n')}`);
    return { peer: 'ansible', run, wallMs, check, ok };
  }
}

// ---- (c) plain parallel ssh ----

async function parallelSsh(fleet: OpenSshFleet, run: number): Promise<Result> {
  const script = `${VERIFY} || { ${APPLY} && ${VERIFY}; } && ${WRITE_MARKER}`;
  const knownHosts = join(DIR, 'known_hosts');
  let next = 0;
  let failed = 0;
  let firstFailure = '';
  const started = Date.now();
  await Promise.all(
    Array.from({ length: Math.min(IN_FLIGHT, DEVICES) }, async () => {
      while (next < fleet.devices.length) {
        const d = fleet.devices[next++]!;
        const ran = await runProcess('ssh', [
          '-i',
          fleet.clientKeyPath,
          '-o',
          `UserKnownHostsFile=${knownHosts}`,
          '-o',
          'StrictHostKeyChecking=yes',
          '-o',
          'BatchMode=yes',
          '-p',
          String(d.port),
          `${d.user}@${d.host}`,
          script,
        ]);
        if (ran.code !== 0) {
          failed++;
          firstFailure ||= `${d.id}: exit ${ran.code}: ${ran.out.trim()}`;
        }
      }
    }),
  );
  const wallMs = Date.now() - started;
  const check = checkFleet(fleet);
  const ok = failed === 0 && check.content === DEVICES && check.marker === DEVICES;
  if (!ok) log(`  parallel ssh: ${failed} failed; first: ${firstFailure}`);
  return { peer: 'ssh', run, wallMs, check, ok };
}

// ---- report ----

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

function report(results: Result[]): void {
  const NAMES: Record<Peer, string> = {
    wavegate: 'wavegate (start --wait)',
    ansible: `Ansible (forks ${IN_FLIGHT}, serial [1, 25%, 100%])`,
    ssh: `parallel ssh (${IN_FLIGHT} at once, no phases)`,
  };
  log(
    `\n## ${DEVICES} sshd devices, ${IN_FLIGHT} in flight, ${RUNS} run(s), wavegate from ${WAVEGATE_ROOT}${flags['split-workers'] ? ' (split workers)' : ''}\n`,
  );
  log('| run | wall (median) | each run | verified (content / marker) |');
  log('|---|---:|---|---|');
  const medians: Partial<Record<Peer, number>> = {};
  for (const peer of PEERS) {
    const rs = results.filter((r) => r.peer === peer);
    if (rs.length === 0) continue;
    medians[peer] = median(rs.map((r) => r.wallMs));
    const verified = rs.map((r) => `${r.check.content}/${r.check.marker}${r.ok ? '' : ' FAILED'}`).join(', ');
    log(
      `| ${NAMES[peer]} | ${seconds(medians[peer]!)} | ${rs.map((r) => seconds(r.wallMs)).join(', ')} | ${verified} of ${DEVICES} |`,
    );
  }
  const wg = results.filter((r) => r.peer === 'wavegate');
  if (wg.length > 0) {
    const wf = wg.filter((r) => r.workflowMs !== undefined).map((r) => r.workflowMs!);
    if (wf.length > 0)
      log(
        `\nwavegate workflow (first to last history event): median ${seconds(median(wf))} (${wf.map(seconds).join(', ')})`,
      );
    log(`wavegate worker peak RSS: ${wg.map((r) => `${r.workerRssMiB} MiB`).join(', ')}`);
  }
  if (medians.wavegate !== undefined && medians.ansible !== undefined)
    log(`wavegate / Ansible: ${(medians.wavegate / medians.ansible).toFixed(2)}×`);
  if (medians.wavegate !== undefined && medians.ssh !== undefined)
    log(`wavegate / parallel ssh: ${(medians.wavegate / medians.ssh).toFixed(2)}×`);
  if (results.some((r) => !r.ok)) log('SOME RUNS FAILED (see above): their times are not comparable');
}

async function main(): Promise<void> {
  mkdirSync(DIR, { recursive: true });
  log(
    `fleet: ${DEVICES} OpenSSH sshd on 127.0.0.1:${BASE_PORT}-${BASE_PORT + DEVICES - 1} under ${join(DIR, 'fleet')}`,
  );
  const fleetStarted = Date.now();
  const fleet = await startOpenSshFleet({
    dir: join(DIR, 'fleet'),
    ids: Array.from({ length: DEVICES }, (_, i) => `dev-${String(i).padStart(4, '0')}`),
    basePort: BASE_PORT,
    logLevel: 'ERROR',
    // --keep leaves the fleet running past this process (the watchdog of sim/reaper.ts ends it otherwise).
    detach: flags.keep === true,
  });
  writeFileSync(join(DIR, 'known_hosts'), fleet.knownHosts());
  // The sshd are detached (so --keep can leave them): on Ctrl-C take them down unless asked to keep them.
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      log(
        `\n${signal}: ${flags.keep ? `leaving the fleet running: kill $(cat ${join(DIR, 'fleet')}/*/sshd.pid)` : 'stopping the fleet'}`,
      );
      void (flags.keep ? Promise.resolve() : fleet.stop()).then(() => process.exit(130));
    });
  }
  log(`fleet up in ${seconds(Date.now() - fleetStarted)}`);
  const wavegate = new Wavegate();
  const ansible = new Ansible();
  const results: Result[] = [];
  try {
    if (ONLY.includes('wavegate')) {
      log(`wavegate (${WAVEGATE_ROOT}): init, keys, signatures, dev server, worker (not timed)...`);
      await wavegate.setUp(fleet);
    }
    if (ONLY.includes('ansible')) ansible.setUp(fleet);
    for (let run = 1; run <= RUNS; run++) {
      for (const peer of PEERS) {
        if (!ONLY.includes(peer)) continue;
        resetFleet(fleet);
        const r =
          peer === 'wavegate'
            ? await wavegate.run(fleet, run)
            : peer === 'ansible'
              ? await ansible.run(fleet, run)
              : await parallelSsh(fleet, run);
        results.push(r);
        log(
          `run ${run} ${peer}: ${seconds(r.wallMs)}${r.workflowMs !== undefined ? ` (workflow ${seconds(r.workflowMs)})` : ''}; content ${r.check.content}, marker ${r.check.marker} of ${DEVICES}${r.ok ? '' : ' FAILED'}; ${load()} (1/5/15 min)`,
        );
      }
    }
    report(results);
  } finally {
    await wavegate.tearDown();
    if (flags.keep) {
      log(
        `\n--keep: the fleet is still running (${DEVICES} sshd). Stop it with:\n  kill $(cat ${join(DIR, 'fleet')}/*/sshd.pid)`,
      );
    } else {
      await fleet.stop();
    }
  }
  // With --keep the sshd children are detached in their own process groups: let them outlive us.
  process.exit(results.every((r) => r.ok) ? 0 : 1);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
