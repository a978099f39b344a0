/**
 * The pull transport at scale (bench/README.md, "Agent devices at scale"): one rollout over N
 * `transport: agent` devices through a dev server, one worker and a REAL `wavegate gateway` process,
 * the devices being simulated agents in this process (the worker in a process of its own,
 * bench/agent-worker.ts, so that it is measured alone): each signs its requests with its own identity
 * key and long-polls `/v1/sync` like `wavegate agent`, and answers a desired entry by reporting it
 * applied after --apply-ms (it runs and verifies nothing: the rollout side, the twins and the gateway
 * are what is measured). The phases are `bench/rollout-scale.ts`'s (canary 1 device, 25%, remainder), so
 * the two makespans at the same --devices, --in-flight, --slice and --gate compare.
 *
 * Prints the makespan; failed requests by kind (the agents' count) and the gateway's non-200 lines; the
 * peak RSS of the worker process, of the gateway process, of the Temporal dev server and of this
 * process (the simulated agents), sampled every second; CPU by process; per-execution events and peak pending work;
 * the twins' history sizes and the events each twin gained during the rollout. Optionally:
 *   --offline K   K agents stop before the rollout and stay away until it completes (offline at its
 *                 snapshot/apply: skipped, then asked by the rollout's convergence); then they start again
 *                 and the time from each restart to its report of the new revision is measured.
 *   --idle M      after the rollout (or after the first syncs with --no-rollout) every agent keeps syncing
 *                 for M minutes: the events the Temporal server persisted meanwhile (every execution's
 *                 history length, before and after), the idle syncs made, and the gateway's CPU per 1,000.
 *
 *   ulimit -n 20000   # or more: the agents' sockets (this process) and the gateway's, about N each
 *   npx tsx bench/agent-scale.ts --devices 1000 [--slice 200] [--in-flight 100] [--apply-ms 0] [--wait-ms 30000]
 *       [--gate 1s] [--health-gates] [--offline 100] [--idle 10] [--no-rollout] [--records auto|parent|slices]
 */
import { fork, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Client, Connection } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { stringify } from 'yaml';
import { agentKeyPin } from '../core/agent-auth';
import { keyPairFromSeed, type KeyPair } from '../core/signing';
import { TWIN_OFFLINE_AFTER_MS, twinWorkflowId, type AgentReport } from '../core/twin';
import { prepareRollout } from '../intake/prepare';
import { loadRolloutInventory } from '../intake/inventory';
import { storeMembership } from '../clients/membership';
import { SLICED_RECORDS_FROM } from '../core/rollout/sliced-plan';
import { gatewayClient, GatewayError } from '../agent/gateway-client';
import { mapLimit } from '../core/map-limit';
import { startDevServerEnv } from '../workers/dev-server';
import { PROJECT_ROOT } from '../intake/package-layout';
import type { AgentWorkerReply, AgentWorkerRequest } from './agent-worker';
import { rolloutWorkflow } from '../workflows/rollout';
import { executionTreeShapes, HISTORY_EVENT_LIMIT, PENDING_LIMIT } from '../test/support/history-bounds';
import { wholeFlag } from './flags';
import { DEFAULT_WORKFLOW_CACHE } from '../core/worker-layout';
import { childPid, processCpu, startCpuSplit, vmRss } from './cpu-account';

const { values: flags } = parseArgs({
  options: {
    devices: { type: 'string', default: '1000' },
    slice: { type: 'string', default: '200' },
    'in-flight': { type: 'string', default: '100' },
    'apply-ms': { type: 'string', default: '0' },
    'wait-ms': { type: 'string', default: '30000' },
    gate: { type: 'string', default: '1s' },
    'health-gates': { type: 'boolean', default: false },
    offline: { type: 'string', default: '0' },
    /**
     * Where the rollout keeps its device records: `slices` (core/rollout/sliced-plan.ts, the inventory stored as a
     * membership), `parent`, or `auto`: as `start` does, slices from SLICED_RECORDS_FROM devices.
     */
    records: { type: 'string', default: 'auto' },
    idle: { type: 'string', default: '0' },
    'no-rollout': { type: 'boolean', default: false },
    'rollout-timeout': { type: 'string', default: '30' },
    'workflow-cache': { type: 'string', default: String(DEFAULT_WORKFLOW_CACHE) },
    /**
     * Node options for the gateway process (space-separated): by default the heap limit of the shipped systemd unit
     * (examples/systemd/wavegate-gateway.service); `--gateway-node-args ''` runs it on Node's default.
     */
    'gateway-node-args': { type: 'string', default: '--max-old-space-size=1024' },
    /**
     * Node options for the worker process: by default the heap limit of the shipped systemd unit
     * (examples/systemd/wavegate-worker.service), as bench/sliced-scale.ts runs it; also for profiles (`--cpu-prof`).
     */
    'worker-node-args': { type: 'string', default: '--max-old-space-size=1024' },
  },
});
const GATEWAY_NODE_ARGS = flags['gateway-node-args']!.split(/\s+/).filter(Boolean);
const WORKER_NODE_ARGS = flags['worker-node-args']!.split(/\s+/).filter(Boolean);
const DEVICES = wholeFlag('devices', flags.devices, 1, 100_000);
const SLICE = wholeFlag('slice', flags.slice, 1, 10_000);
if (!['auto', 'parent', 'slices'].includes(flags.records!))
  throw new Error(`--records: expected auto, parent or slices, got ${JSON.stringify(flags.records)}`);
/** Sliced records (the membership stored first), as `start` would choose them at this size unless told. */
const SLICED = flags.records === 'slices' || (flags.records === 'auto' && DEVICES >= SLICED_RECORDS_FROM);
const IN_FLIGHT = wholeFlag('in-flight', flags['in-flight'], 1, 10_000);
const APPLY_MS = wholeFlag('apply-ms', flags['apply-ms'], 0, 60_000);
const WAIT_MS = wholeFlag('wait-ms', flags['wait-ms'], 0, 30_000);
const OFFLINE = wholeFlag('offline', flags.offline, 0, Math.max(0, DEVICES - 2));
const IDLE_MINUTES = wholeFlag('idle', flags.idle, 0, 24 * 60);
const ROLLOUT = !flags['no-rollout'];
/** Minutes the rollout may take before the bench says what it is waiting on, terminates it and reports the rest. */
const ROLLOUT_TIMEOUT_MIN = wholeFlag('rollout-timeout', flags['rollout-timeout'], 1, 24 * 60);
/** The worker's sticky cache (`wavegate worker --workflow-cache`, its default unless given): what bounds its memory. */
const WORKFLOW_CACHE = wholeFlag('workflow-cache', flags['workflow-cache'], 2, 100_000);
const GATE = flags.gate!;
if (!/^\d+(ms|s|m)$/.test(GATE))
  throw new Error(`--gate: expected a duration like 0s, 1s or 500ms, got ${JSON.stringify(GATE)}`);
if (!ROLLOUT && OFFLINE) throw new Error('--offline needs a rollout: drop --no-rollout');

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const load = () =>
  `load ${loadavg()
    .map((l) => l.toFixed(1))
    .join(' ')}`;
const mib = (bytes: number) => Math.round(bytes / 1024 / 1024);
/** `n× kind` lines, most frequent first. */
const byCount = (m: Map<string, number>, top = 8) =>
  [...m]
    .sort((x, y) => y[1] - x[1])
    .slice(0, top)
    .map(([k, n]) => `${n}× ${k}`)
    .join('; ');
const bump = (m: Map<string, number>, k: string, by = 1) => m.set(k, (m.get(k) ?? 0) + by);

interface SimAgent {
  id: string;
  key: KeyPair;
  /** Aborts this agent's loop and its request in flight (--offline stops some; the end stops all). */
  stop: AbortController;
  /** --offline: when this agent was started again, when it reported the rollout's revision, and its syncs between. */
  restartedAt?: number;
  convergedAt?: number;
  syncsSinceRestart: number;
  /** When this agent last received a new desired entry, and when its report of it was answered (ms). */
  newsAt?: number;
  reportedAt?: number;
  /** Whether one of its syncs has been answered. */
  synced?: boolean;
}

/** What the simulated agents count: every answered request, per wall-clock second, and every failure by kind. */
let requests = 0;
let syncsAnswered = 0;
const perSecond = new Map<number, number>();
const failures = new Map<string, number>();
let failureCount = 0;
let failedLongPolls = 0;
/**
 * How long each sync that brought a new desired entry had been held by the gateway (request to answer): mostly
 * the wait before the desire existed, so spread over the long-poll's wait. Desire → agent is measured per
 * device from the histories (applyLags).
 */
const heldBeforeNews: number[] = [];

function counted<T>(kind: 'sync' | 'report', p: Promise<T>): Promise<T> {
  return p.then(
    (v) => {
      requests++;
      if (kind === 'sync') syncsAnswered++;
      const s = Math.floor(Date.now() / 1000);
      perSecond.set(s, (perSecond.get(s) ?? 0) + 1);
      return v;
    },
    (err: unknown) => {
      if (err instanceof Error && err.name === 'AbortError') throw err; // stopped on purpose, not a failure
      failureCount++;
      if (kind === 'sync') failedLongPolls++;
      const why =
        err instanceof GatewayError
          ? `${err.status} ${err.code}`
          : err instanceof Error
            ? 'code' in err && typeof err.code === 'string'
              ? err.code
              : err.message.replace(/\d+/g, 'N').slice(0, 80)
            : String(err);
      bump(failures, `${kind}: ${why}`);
      throw err;
    },
  );
}

/** One simulated agent: sync (long-poll), answer each new desired entry as applied, report, repeat. */
async function runAgent(agent: SimAgent, url: string, toRevision: number): Promise<void> {
  const stop = agent.stop.signal;
  const gw = gatewayClient({ url, device: agent.id, secretKey: agent.key.secretKey });
  const report: AgentReport = {
    profiles: {},
    health: [{ name: 'motd', ok: true }],
    healthAt: new Date().toISOString(),
    agentVersion: 'bench',
  };
  let knownVersion = 0;
  while (!stop.aborted) {
    try {
      report.healthAt = new Date().toISOString();
      const asked = Date.now();
      const view = await counted('sync', gw.sync({ report, knownVersion, waitMs: WAIT_MS }, stop));
      const held = Date.now() - asked;
      agent.synced = true;
      if (agent.restartedAt !== undefined) agent.syncsSinceRestart++;
      knownVersion = view.version;
      for (const entry of Object.values(view.desired)) {
        if (report.profiles[entry.profile]?.requestId === entry.requestId) continue;
        heldBeforeNews.push(held);
        agent.newsAt = Date.now();
        if (APPLY_MS) await sleep(APPLY_MS);
        report.profiles[entry.profile] = {
          revision: entry.revision,
          state: 'applied',
          requestId: entry.requestId,
          steps: ['verify', 'apply', 'verify', 'marker'],
          at: new Date().toISOString(),
        };
        // The answer goes out at once (the next sync would only carry it after its wait).
        await counted('report', gw.report(report, stop));
        agent.reportedAt = Date.now();
        if (agent.restartedAt !== undefined && agent.convergedAt === undefined && entry.revision === toRevision)
          agent.convergedAt = Date.now();
      }
    } catch {
      if (!stop.aborted) await sleep(1_000 + Math.random() * 1_000);
    }
  }
}

// ---- the gateway process and its log ----

/** The gateway's log, counted as it comes: one line per request, `<device> <METHOD> <path> <status> <ms>[ <code> <message>]`. */
const gatewayLines = {
  /** The gateway's own periodic summary (devices known, long-polls held, syncs answered from memory, ...). */
  lastSummary: '',
  byStatus: new Map<string, number>(),
  refusals: new Map<string, number>(),
  /** Lines that are not a request's: start-up, feed and presence complaints, and anything like a stack trace. */
  other: new Map<string, number>(),
  otherSamples: [] as string[],
};
const REQUEST_LINE = /^(\S+) (GET|POST|PUT|DELETE|HEAD|\S+) (\S+) (\d{3}|-) (\d+)ms(.*)$/;

function countGatewayLine(line: string): void {
  const m = REQUEST_LINE.exec(line);
  if (m) {
    const path = m[3]!.replace(/\/v1\/payload\/.*/, '/v1/payload/…');
    bump(gatewayLines.byStatus, `${m[4]} ${m[2]} ${path}`);
    if (m[4] !== '200')
      bump(
        gatewayLines.refusals,
        `${m[4]} ${path}${m[6]!
          .replace(/agent-\d+/g, 'agent-N')
          .replace(/[0-9a-f-]{36}/g, 'RUN')
          .replace(/\d+/g, 'N')
          .slice(0, 110)}`,
      );
    return;
  }
  if (/^gateway: \d+ devices known/.test(line)) {
    gatewayLines.lastSummary = line;
    return;
  }
  const kind = line
    .replace(/agent-\d+/g, 'agent-N')
    .replace(/\d+/g, 'N')
    .slice(0, 140);
  bump(gatewayLines.other, kind);
  if (gatewayLines.otherSamples.length < 40) gatewayLines.otherSamples.push(line.slice(0, 400));
}

/** How the gateway process ended, if it did before the bench stopped it. */
let gatewayExit: string | undefined;

function startGateway(args: string[]): Promise<{ child: ChildProcess; url: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [...GATEWAY_NODE_ARGS, join(PROJECT_ROOT, 'bin', 'wavegate.js'), 'gateway', ...args],
      {
        cwd: PROJECT_ROOT,
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let head = '';
    let partial = '';
    let listening = false;
    const onData = (c: Buffer) => {
      const text = partial + c.toString();
      const lines = text.split('\n');
      partial = lines.pop()!;
      for (const line of lines) {
        if (!listening) {
          head += `${line}\n`;
          const m = /gateway listening on (http:\/\/\S+)/.exec(line);
          if (m) {
            listening = true;
            resolve({ child, url: m[1]! });
          }
          continue;
        }
        countGatewayLine(line);
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.on('exit', (code, signal) => {
      gatewayExit = `${code ?? signal}`;
      reject(new Error(`gateway exited ${code ?? signal}:\n${head}`));
    });
  });
}

// ---- the worker process ----

/** How the worker process ended, if it did before the bench stopped it. */
let workerExit: string | undefined;

function startWorker(request: AgentWorkerRequest): Promise<{ pid: number; stop: () => Promise<void> }> {
  const child = fork(join(__dirname, 'agent-worker.ts'), [], {
    execArgv: ['--require', 'tsx/cjs', ...WORKER_NODE_ARGS],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const exited = new Promise<void>((resolve) =>
    child.once('exit', (code, signal) => {
      workerExit = `${code ?? signal}`;
      resolve();
    }),
  );
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.send({ stop: true });
      const killer = setTimeout(() => child.kill('SIGKILL'), 20_000);
      await exited;
      clearTimeout(killer);
    }
  };
  return new Promise((resolve, reject) => {
    child.once('message', (reply: AgentWorkerReply) =>
      'error' in reply ? reject(new Error(`worker process: ${reply.error}`)) : resolve({ pid: child.pid!, stop }),
    );
    child.once('exit', (code, signal) =>
      reject(new Error(`worker process exited ${code ?? signal} before it was ready`)),
    );
    child.send(request);
  });
}

// ---- memory: peaks per stage, sampled every second ----

interface Peaks {
  bench: number;
  worker: number;
  gateway: number;
  server: number;
}
const peaks = new Map<string, Peaks>();
let stage = 'start-up';
function sampleMemory(workerPid: number, gatewayPid: number | undefined, serverPid: number | undefined): void {
  const p = peaks.get(stage) ?? { bench: 0, worker: 0, gateway: 0, server: 0 };
  p.bench = Math.max(p.bench, process.memoryUsage.rss());
  p.worker = Math.max(p.worker, vmRss(workerPid));
  p.gateway = Math.max(p.gateway, vmRss(gatewayPid));
  p.server = Math.max(p.server, vmRss(serverPid));
  peaks.set(stage, p);
}

// ---- Temporal's side: every execution's persisted events ----

/**
 * The events the server holds for every execution in the namespace (open and closed, every run): a closed
 * run's length from the list (final), an open run's from describe (the list's copy is only as new as its
 * last visibility update).
 */
async function namespaceEvents(
  client: Client,
): Promise<{ events: number; executions: number; open: number; byType: Map<string, number> }> {
  const open: { workflowId: string; runId: string; type: string }[] = [];
  const byType = new Map<string, number>();
  let executions = 0;
  for await (const w of client.workflow.list()) {
    executions++;
    if (w.status.name === 'RUNNING') open.push({ workflowId: w.workflowId, runId: w.runId, type: w.type });
    else bump(byType, w.type, w.historyLength);
  }
  const lengths = await mapLimit(open, 64, (w) =>
    client.workflow
      .getHandle(w.workflowId, w.runId)
      .describe()
      .then((d) => d.historyLength),
  );
  for (const [i, w] of open.entries()) bump(byType, w.type, lengths[i]!);
  const events = [...byType.values()].reduce((a, b) => a + b, 0);
  return { events, executions, open: open.length, byType };
}

/** Each twin's current run and its history length. */
async function twinLengths(client: Client, ids: string[]): Promise<Map<string, { runId: string; events: number }>> {
  const out = await mapLimit(ids, 64, (id) =>
    client.workflow
      .getHandle(twinWorkflowId(id))
      .describe()
      .then(
        (d) => ({ runId: d.runId, events: d.historyLength }),
        // No twin yet: a new agent with nothing to report starts none; its first desire does.
        (err: Error) => {
          if (err.name === 'WorkflowNotFoundError') return { runId: '', events: 0 };
          throw err;
        },
      ),
  );
  return new Map(ids.map((id, i) => [id, out[i]!]));
}

/**
 * Per device, from the kept slice histories: when its apply activity started and closed (server clock, the
 * same machine's as this process's), against when its agent got the desired entry and had its report taken.
 * Says how long a desire took to reach a held long-poll, and a report to finish the apply.
 */
function applyLags(keptDir: string, agents: SimAgent[]): { toAgent: number[]; toApply: number[] } {
  type Ev = { eventId: string; eventType: string; eventTime: { seconds: string; nanos?: number } | string } & Record<
    string,
    { scheduledEventId?: string; activityType?: { name: string }; input?: { payloads: { data: string }[] } }
  >;
  const ms = (t: Ev['eventTime']) =>
    typeof t === 'string' ? Date.parse(t) : Number(t.seconds) * 1000 + Math.floor((t.nanos ?? 0) / 1e6);
  const byId = new Map(agents.map((a) => [a.id, a]));
  const toAgent: number[] = [];
  const toApply: number[] = [];
  for (const file of readdirSync(keptDir)) {
    const { events } = JSON.parse(readFileSync(join(keptDir, file), 'utf8')) as { events: Ev[] };
    const device = new Map<string, string>();
    const started = new Map<string, number>();
    for (const e of events) {
      if (e.eventType === 'EVENT_TYPE_ACTIVITY_TASK_SCHEDULED') {
        const a = e.activityTaskScheduledEventAttributes!;
        if (a.activityType?.name !== 'applyRevision' || !a.input) continue;
        const input = JSON.parse(Buffer.from(a.input.payloads[0]!.data, 'base64').toString('utf8')) as {
          device: { id: string };
        };
        device.set(e.eventId, input.device.id);
      } else if (e.eventType === 'EVENT_TYPE_ACTIVITY_TASK_STARTED') {
        const id = e.activityTaskStartedEventAttributes!.scheduledEventId!;
        if (device.has(id)) started.set(id, ms(e.eventTime));
      } else if (e.eventType === 'EVENT_TYPE_ACTIVITY_TASK_COMPLETED') {
        const id = e.activityTaskCompletedEventAttributes!.scheduledEventId!;
        const agent = byId.get(device.get(id) ?? '');
        const startedAt = started.get(id);
        if (!agent || startedAt === undefined || agent.newsAt === undefined || agent.reportedAt === undefined) continue;
        toAgent.push(agent.newsAt - startedAt);
        toApply.push(ms(e.eventTime) - agent.reportedAt);
      }
    }
  }
  return { toAgent: toAgent.sort((x, y) => x - y), toApply: toApply.sort((x, y) => x - y) };
}

const percentile = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;

/**
 * What a rollout past its time is waiting on: each running slice's pending applies (attempt, heartbeat detail),
 * and for some of their devices the twin's desired entry: when the twin stamped it (`setAt`, its workflow clock,
 * which is also what WavegateDesiredAt carries for the gateways' feed) against when the apply last started.
 */
async function describeStuckApplies(client: Client, say: (line: string) => void): Promise<void> {
  const tsMs = (t: { seconds?: unknown; nanos?: number | null } | null | undefined) =>
    t ? Number(String(t.seconds ?? 0)) * 1000 + Math.floor((t.nanos ?? 0) / 1e6) : 0;
  const stuck: { device: string; startedMs: number; attempt: number; detail: string }[] = [];
  for await (const w of client.workflow.list({
    query: `WorkflowType = 'rolloutSliceWorkflow' AND ExecutionStatus = 'Running'`,
  })) {
    const handle = client.workflow.getHandle(w.workflowId, w.runId);
    const [description, history] = await Promise.all([handle.describe(), handle.fetchHistory()]);
    const deviceOf = new Map<string, string>();
    for (const e of history.events ?? []) {
      const a = e.activityTaskScheduledEventAttributes;
      const data = a?.input?.payloads?.[0]?.data;
      if (a?.activityType?.name !== 'applyRevision' || !data || !a.activityId) continue;
      deviceOf.set(
        a.activityId,
        (JSON.parse(Buffer.from(data).toString('utf8')) as { device: { id: string } }).device.id,
      );
    }
    for (const p of description.raw.pendingActivities ?? []) {
      const device = deviceOf.get(p.activityId ?? '');
      if (!device) continue;
      const hb = p.heartbeatDetails?.payloads?.[0]?.data;
      stuck.push({
        device,
        startedMs: tsMs(p.lastStartedTime),
        attempt: p.attempt ?? 0,
        detail: hb ? Buffer.from(hb).toString('utf8').slice(0, 80) : '',
      });
    }
  }
  const attempts = new Map<string, number>();
  const details = new Map<string, number>();
  for (const s of stuck) {
    bump(attempts, `attempt ${s.attempt}`);
    bump(details, s.detail.replace(/\d+/g, 'N'));
  }
  say(
    `pending applies in running slices: ${stuck.length} (${byCount(attempts)}); heartbeat details: ${byCount(details, 5)}`,
  );
  let stale = 0;
  const sample = stuck.slice(0, 40);
  for (const s of sample) {
    try {
      const view = await client.workflow.getHandle(twinWorkflowId(s.device)).query<{
        desired: Record<string, { setAt?: string }>;
      }>('twinView');
      const setAt = Date.parse(Object.values(view.desired)[0]?.setAt ?? '');
      const lag = s.startedMs - setAt;
      if (lag > 60_000) stale++;
      if (sample.indexOf(s) < 5)
        say(
          `  ${s.device}: apply attempt ${s.attempt} started ${new Date(s.startedMs).toISOString()}; its twin's desired entry stamped setAt ${Number.isFinite(setAt) ? new Date(setAt).toISOString() : 'none'}`,
        );
    } catch (err) {
      say(`  ${s.device}: twin not readable (${(err as Error).message.slice(0, 100)})`);
    }
  }
  say(
    `of ${sample.length} stuck devices looked at, ${stale} have a desired entry stamped more than 60 s before their apply started (the twin's workflow clock behind: the gateways' feed, which looks back 5 s past the newest stamp it saw, never lists that change)`,
  );
}

/** The whole run's figures: peak memory, failures by kind, the gateway's lines (also printed on Ctrl-C or SIGTERM). */
function printSummary(): void {
  const say = (line: string) => console.log(line);
  say(
    '\npeak RSS by stage (sampled every second): the worker process, the gateway, the dev server, and this process (the simulated agents)',
  );
  say('| stage | worker | gateway | Temporal dev server | this process (agents) |');
  say('|---|---:|---:|---:|---:|');
  for (const [name, p] of peaks)
    say(
      `| ${name} | ${mib(p.worker)} MiB | ${mib(p.gateway)} MiB | ${p.server ? `${mib(p.server)} MiB` : '?'} | ${mib(p.bench)} MiB |`,
    );
  say(
    `\nall run: ${requests} requests answered, ${failureCount} failed (long-polls ${failedLongPolls})${failures.size ? `: ${byCount(failures)}` : ''}`,
  );
  say(`gateway's lines by status: ${byCount(gatewayLines.byStatus, 12)}`);
  if (gatewayLines.refusals.size) say(`gateway's non-200 lines by kind: ${byCount(gatewayLines.refusals, 10)}`);
  if (gatewayLines.other.size) {
    say(`gateway's other lines: ${byCount(gatewayLines.other, 10)}`);
    for (const l of gatewayLines.otherSamples.slice(0, 10)) say(`  ${l}`);
  }
  if (gatewayLines.lastSummary) say(`gateway's last summary: ${gatewayLines.lastSummary}`);
  say(gatewayExit === undefined ? 'gateway process still running at the end' : `GATEWAY EXITED: ${gatewayExit}`);
  if (workerExit !== undefined) say(`WORKER EXITED: ${workerExit}`);
}

// ---- the run ----

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'wavegate-agent-scale-'));
  const agents: SimAgent[] = Array.from({ length: DEVICES }, (_, i) => ({
    id: `agent-${String(i).padStart(5, '0')}`,
    key: keyPairFromSeed(randomBytes(32)),
    stop: new AbortController(),
    syncsSinceRestart: 0,
  }));
  for (const a of agents) setMaxListeners(0, a.stop.signal);
  const inventoryPath = join(dir, 'inventory.yaml');
  writeFileSync(
    inventoryPath,
    stringify({
      pools: { agents: { disruptionBudget: Math.min(1, IN_FLIGHT / DEVICES) } },
      devices: agents.map((a, i) => ({
        id: a.id,
        transport: 'agent',
        agentKey: agentKeyPin(a.key.publicKey),
        pool: 'agents',
        class: i % 3 ? 'edge' : 'kiosk',
      })),
    }),
  );
  const specPath = join(dir, 'spec.yaml');
  const TO_REVISION = 2;
  writeFileSync(
    specPath,
    stringify({
      rollout: {
        profile: 'demo',
        fromRevision: 1,
        toRevision: TO_REVISION,
        gate: GATE,
        maxFailureRatio: 0.05,
        // bench/rollout-scale.ts's phases; --health-gates adds the gates this benchmark used to have.
        phases: flags['health-gates']
          ? [
              { canary: '1 device', healthGate: ['devices-online', 'all-runtimes-healthy'] },
              { bulk: '25%' },
              { bulk: 'remainder', healthGate: ['devices-online'] },
            ]
          : [{ canary: '1 device' }, { bulk: '25%' }, { bulk: 'remainder' }],
      },
    }),
  );

  const env = await startDevServerEnv();
  const serverPid = childPid('start-dev');
  const namespace = env.namespace ?? 'default';
  // At 10,000 devices a page of the parent's history is over gRPC's default 4 MB receive limit.
  const bigConnection = await Connection.connect({
    address: env.address,
    channelArgs: { 'grpc.max_receive_message_length': 64 * 1024 * 1024 },
  });
  const client = new Client({ connection: bigConnection, namespace });
  const taskQueue = 'agent-scale';
  // The worker runs in a process of its own (bench/agent-worker.ts): its RSS and CPU are measured apart from the agents.
  const worker = await startWorker({
    address: env.address,
    namespace,
    taskQueue,
    auditDir: join(dir, 'audit'),
    maxActivities: Math.max(200, IN_FLIGHT * 2),
    maxCachedWorkflows: WORKFLOW_CACHE,
  });
  const workerPid = worker.pid;
  // Every agent comes from 127.0.0.1: the per-source limits are raised to the fleet (a sync and a report each) + margin.
  const perSource = String(2 * DEVICES + 1_000);
  const gateway = await startGateway([
    '--listen',
    '127.0.0.1:0',
    '--inventory',
    inventoryPath,
    '--profiles',
    join(PROJECT_ROOT, 'profiles'),
    '--address',
    env.address,
    '--namespace',
    namespace,
    '--task-queue',
    taskQueue,
    '--max-connections',
    String(Math.max(20_000, 2 * DEVICES + 1_000)),
    '--max-connections-per-source',
    perSource,
    '--max-requests',
    String(Math.max(20_000, 2 * DEVICES + 1_000)),
    '--max-requests-per-source',
    perSource,
    '--max-long-polls',
    String(Math.max(20_000, DEVICES + 1_000)),
    // Every refusal logged, so the log's count is whole.
    '--refusal-log-per-second',
    '100000',
  ]);
  const gatewayPid = gateway.child.pid;
  // Stopped by hand (or by `timeout`): what was counted so far is still printed; the dev server ends with us (its reaper).
  for (const sig of ['SIGINT', 'SIGTERM'] as const)
    process.once(sig, () => {
      console.log(`\n${sig}: stopping; the figures so far:`);
      printSummary();
      gateway.child.kill('SIGTERM');
      process.exit(130);
    });
  const sampler = setInterval(() => sampleMemory(workerPid, gatewayPid, serverPid), 1_000);
  const startAgent = (a: SimAgent) => void runAgent(a, gateway.url, TO_REVISION);
  const say = (line: string) => console.log(line);
  try {
    say(
      `${DEVICES} simulated agents against ${gateway.url} (pid ${gatewayPid}); dev server pid ${serverPid ?? '?'}; ${IN_FLIGHT} in flight; slices of ${SLICE}, records in ${SLICED ? 'the slices' : 'the parent'}; apply ${APPLY_MS} ms; long-poll ${WAIT_MS} ms; worker cache ${WORKFLOW_CACHE}, node ${WORKER_NODE_ARGS.join(' ') || '(defaults)'}; gates ${GATE}${flags['health-gates'] ? ' (health gates)' : ''}; ${load()}`,
    );
    stage = 'first syncs';
    const upStart = Date.now();
    // The agents' loops run until their stop aborts them; nothing waits on them.
    for (const a of agents) startAgent(a);
    // Every agent synced once before the rollout (its snapshot counts a never-seen agent offline). A new agent with
    // nothing to report starts no twin (r11): it is seen through its presence shard, written within a second.
    while (agents.some((a) => !a.synced)) await sleep(1_000);
    await sleep(2_000);
    const { count: twins } = await client.workflow.count(
      `WorkflowType = 'deviceTwinWorkflow' AND ExecutionStatus = 'Running'`,
    );
    say(
      `agents up (every agent synced once; ${twins} twins started) in ${seconds(Date.now() - upStart)}; ${requests} gateway requests so far, ${failureCount} failed; ${load()}`,
    );
    // The twins' first workflow tasks are still queued when they show as started: a rollout started now waits
    // behind them for its own first task (28 s at 1,000 agents). Its makespan is measured on a settled fleet.
    const settleStart = Date.now();
    for (let empty = 0; empty < 3; ) {
      const { stats } = await client.workflowService.describeTaskQueue({
        namespace,
        taskQueue: { name: taskQueue },
        taskQueueType: temporal.api.enums.v1.TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        reportStats: true,
      });
      empty = Number(stats?.approximateBacklogCount ?? 0) === 0 ? empty + 1 : 0;
      await sleep(1_000);
    }
    say(
      `first syncs settled (the workflow task queue empty for 3 s) ${seconds(Date.now() - settleStart)} later; ${seconds(Date.now() - upStart)} since the agents started; ${load()}`,
    );

    let rolloutEnd = Date.now();
    if (ROLLOUT) {
      // --offline: the last K agents stop, and the rollout starts once they count as offline (silent past
      // TWIN_OFFLINE_AFTER_MS): each is skipped, and the rollout's convergence asks it when it completes.
      const offline = agents.slice(DEVICES - OFFLINE);
      if (OFFLINE) {
        for (const a of offline) a.stop.abort();
        const wait = TWIN_OFFLINE_AFTER_MS + 5_000;
        say(`stopped ${OFFLINE} agents (${offline[0]!.id}…); waiting ${seconds(wait)} until they count as offline`);
        await sleep(wait);
      }
      const twinIds = agents.map((a) => a.id);
      const describeStart = Date.now();
      const twinsBefore = await twinLengths(client, twinIds);
      say(`twins described before the rollout in ${seconds(Date.now() - describeStart)}`);

      const input = {
        ...prepareRollout({
          specPath,
          inventoryPath,
          profilesRoot: join(PROJECT_ROOT, 'profiles'),
          startedBy: 'bench',
        }),
        rolloutId: `rollout:agent-scale-${Date.now()}`,
        sliceSize: SLICE,
        ...(SLICED
          ? {
              membership: await storeMembership(client, taskQueue, loadRolloutInventory(inventoryPath), inventoryPath),
              records: 'slices' as const,
            }
          : {}),
      };
      stage = 'rollout';
      const requestsBefore = requests;
      const failuresBefore = new Map(failures);
      const failedBefore = failureCount;
      const longPollsFailedBefore = failedLongPolls;
      const refusalsBefore = new Map(gatewayLines.refusals);
      const cpuSince = startCpuSplit(gatewayPid ? [gatewayPid] : []);
      const serverCpuBefore = serverPid ? processCpu(serverPid).own : 0;
      const workerCpuBefore = processCpu(workerPid).own;
      const loadAtStart = load();
      const started = Date.now();
      const handle = await client.workflow.start(rolloutWorkflow, {
        workflowId: input.rolloutId,
        taskQueue,
        args: [input],
      });
      const progress = setInterval(() => {
        handle
          .query<{ phase?: string; counts: Record<string, number> }>('status')
          .then((s) =>
            console.log(
              `  ${seconds(Date.now() - started)}: ${s.phase ?? '-'} applied ${s.counts.applied} applying ${s.counts.applying} skipped ${s.counts.skipped} failed ${s.counts.failed}; ${requests - requestsBefore} gateway requests; ${load()}`,
            ),
          )
          .catch(() => {});
      }, 30_000);
      // The result's long-poll can time out on a loaded server: ask again until the rollout has closed.
      let deadline: NodeJS.Timeout | undefined;
      const result = await Promise.race([
        (async () => {
          for (;;) {
            try {
              return await handle.result();
            } catch (err) {
              if (!/DEADLINE_EXCEEDED|deadline exceeded/i.test(String((err as { cause?: unknown }).cause ?? err)))
                throw err;
            }
          }
        })(),
        new Promise<undefined>((resolve) => {
          deadline = setTimeout(() => resolve(undefined), ROLLOUT_TIMEOUT_MIN * 60_000);
        }),
      ]).finally(() => {
        clearInterval(progress);
        clearTimeout(deadline);
      });
      if (result === undefined) {
        say(`\nROLLOUT NOT COMPLETED within ${ROLLOUT_TIMEOUT_MIN} min; ${load()}`);
        try {
          const status = await handle.query<{ phase?: string; counts: Record<string, number> }>('status');
          say(`its status: ${status.phase ?? '-'} ${JSON.stringify(status.counts)}`);
        } catch (err) {
          say(`its status could not be read: ${(err as Error).message.slice(0, 200)}`);
        }
        await describeStuckApplies(client, say);
        await handle.terminate('agent-scale bench: rollout timeout').catch(() => {});
        printSummary();
        return;
      }
      const makespan = Date.now() - started;
      rolloutEnd = Date.now();
      const cpu = cpuSince((serverPid ? processCpu(serverPid).own : 0) - serverCpuBefore);
      const workerCpu = processCpu(workerPid).own - workerCpuBefore;
      const loadAtEnd = load();
      stage = 'after the rollout';

      // --offline: the stopped agents come back; each should converge within about one sync.
      if (OFFLINE) {
        for (const a of offline) {
          a.stop = new AbortController();
          setMaxListeners(0, a.stop.signal);
          a.restartedAt = Date.now();
          startAgent(a);
        }
        const deadline = Date.now() + 5 * 60_000;
        while (offline.some((a) => a.convergedAt === undefined) && Date.now() < deadline) await sleep(200);
      }

      const during = requests - requestsBefore;
      say(
        `\nrollout ${result.state}: ${JSON.stringify(result.counts)} in ${seconds(makespan)} (${(DEVICES / (makespan / 1000)).toFixed(1)} devices/s); ${loadAtStart} at its start, ${loadAtEnd} at its end`,
      );
      const window = [...perSecond.entries()]
        .filter(([s]) => s * 1000 >= started && s * 1000 <= started + makespan)
        .map(([, n]) => n);
      const failuresDuring = new Map(
        [...failures].map(([k, n]) => [k, n - (failuresBefore.get(k) ?? 0)] as const).filter(([, n]) => n > 0),
      );
      say(
        `gateway: ${during} requests answered during the rollout, ${(during / (makespan / 1000)).toFixed(1)}/s average, peak ${Math.max(0, ...window)}/s`,
      );
      say(
        `failed requests during the rollout (the agents' count): ${failureCount - failedBefore}, of them long-polls (sync) ${failedLongPolls - longPollsFailedBefore}${failuresDuring.size ? ` (${byCount(failuresDuring)})` : ''}`,
      );
      const refusalsDuring = new Map(
        [...gatewayLines.refusals]
          .map(([k, n]) => [k, n - (refusalsBefore.get(k) ?? 0)] as const)
          .filter(([, n]) => n > 0),
      );
      say(
        `gateway's non-200 lines during the rollout: ${[...refusalsDuring.values()].reduce((a, b) => a + b, 0)}${refusalsDuring.size ? ` (${byCount(refusalsDuring)})` : ''}`,
      );
      say(
        `CPU during the rollout (core-seconds): worker ${workerCpu.toFixed(1)}, this process (${DEVICES} simulated agents + client) ${cpu.process.toFixed(1)}, Temporal server ${cpu.server.toFixed(1)}, gateway ${cpu.shards.toFixed(1)}, whole machine ${cpu.machine.toFixed(1)} = ${((cpu.machine / DEVICES) * 1000).toFixed(1)} ms per device`,
      );
      const held = [...heldBeforeNews].sort((x, y) => x - y);
      say(
        `syncs that brought a new desired entry: ${held.length}; held by the gateway before that answer: median ${seconds(percentile(held, 50))}, p90 ${seconds(percentile(held, 90))}, max ${seconds(held.at(-1) ?? 0)} (how long the long-poll had been held in all, mostly before the desire existed: the per-device lags below say how long a desire took to reach its agent)`,
      );
      const mem = process.memoryUsage();
      say(
        `this process's (the agents') memory after the rollout: RSS ${mib(mem.rss)} MiB, V8 heap used ${mib(mem.heapUsed)} of ${mib(mem.heapTotal)} MiB, external ${mib(mem.external)} MiB (array buffers ${mib(mem.arrayBuffers)})`,
      );
      if (gatewayLines.lastSummary) say(`gateway's last summary: ${gatewayLines.lastSummary}`);
      if (OFFLINE) {
        const back = offline.filter((a) => a.convergedAt !== undefined);
        const took = back.map((a) => a.convergedAt! - a.restartedAt!).sort((x, y) => x - y);
        const syncs = back.map((a) => a.syncsSinceRestart).sort((x, y) => x - y);
        say(
          `convergence after reconnect: ${back.length} of ${OFFLINE} agents reported r${TO_REVISION} after their restart: median ${seconds(percentile(took, 50))}, p99 ${seconds(percentile(took, 99))}, max ${seconds(took.at(-1) ?? 0)} from restart to the report; syncs until then median ${percentile(syncs, 50)}, max ${syncs.at(-1) ?? 0}`,
        );
      }

      // Every execution's history kept for reading where the time went (npx tsx bench/history-timeline.ts <file>).
      const kept = join(tmpdir(), `wavegate-agent-scale-${DEVICES}-histories`);
      rmSync(kept, { recursive: true, force: true });
      mkdirSync(kept, { recursive: true });
      const shapes = await executionTreeShapes(client, input.rolloutId, (id, history) =>
        writeFileSync(join(kept, `${id.replace(/[^A-Za-z0-9_.-]/g, '_')}.json`), JSON.stringify(history)),
      );
      say(`histories kept in ${kept}`);
      const lags = applyLags(kept, agents);
      const spread = (xs: number[]) =>
        `median ${seconds(percentile(xs, 50))}, p90 ${seconds(percentile(xs, 90))}, max ${seconds(xs.at(-1) ?? 0)}`;
      say(
        `per device apply (${lags.toAgent.length} slice applies): its activity's start → its agent got the desired entry: ${spread(lags.toAgent)}; the agent's report answered → the activity completed: ${spread(lags.toApply)}`,
      );
      say(
        `\nper-execution history (limits: < ${HISTORY_EVENT_LIMIT} events, ≤ ${PENDING_LIMIT} pending activities/children)`,
      );
      say(
        '| execution | events | bytes | activities | max pending activities | max pending children | longest workflow task |',
      );
      say('|---|---:|---:|---:|---:|---:|---:|');
      for (const s of shapes)
        say(
          `| ${s.workflowId} | ${s.events} | ${s.bytes} | ${s.activitiesScheduled} | ${s.maxPendingActivities} | ${s.maxPendingChildren} | ${s.maxWorkflowTaskMs} ms |`,
        );
      const over = shapes.filter(
        (s) =>
          s.events >= HISTORY_EVENT_LIMIT ||
          s.maxPendingActivities > PENDING_LIMIT ||
          s.maxPendingChildren > PENDING_LIMIT,
      );
      say(
        over.length === 0
          ? 'every execution within the limits'
          : `OVER THE LIMITS: ${over.map((s) => s.workflowId).join(', ')}`,
      );

      // Twins: each one's current run now, and what it gained during the rollout (same run; a twin that
      // continued as new meanwhile is counted apart).
      const twinsAfter = await twinLengths(client, twinIds);
      const lengths = [...twinsAfter.values()].map((t) => t.events).sort((a, b) => a - b);
      const gained: number[] = [];
      const startedByRollout: number[] = [];
      let newRuns = 0;
      for (const id of twinIds) {
        const b = twinsBefore.get(id)!;
        const a = twinsAfter.get(id)!;
        if (b.runId === '') startedByRollout.push(a.events);
        else if (a.runId === b.runId) gained.push(a.events - b.events);
        else newRuns++;
      }
      startedByRollout.sort((a, b) => a - b);
      if (startedByRollout.length)
        say(
          `twins started by the rollout (agents that had synced with nothing to report): ${startedByRollout.length}, their whole history: median ${percentile(startedByRollout, 50)}, max ${startedByRollout.at(-1)} events`,
        );
      gained.sort((a, b) => a - b);
      const mean = gained.reduce((x, y) => x + y, 0) / Math.max(1, gained.length);
      say(
        `\ntwin histories (current run): median ${percentile(lengths, 50)} events, p99 ${percentile(lengths, 99)}, max ${lengths.at(-1)} (continue-as-new past 2,000)`,
      );
      say(
        `twin history per device per rollout (events each twin gained from before the rollout to after it${OFFLINE ? ' and the offline agents’ return' : ''}): mean ${mean.toFixed(1)}, median ${percentile(gained, 50)}, p99 ${percentile(gained, 99)}, max ${gained.at(-1)}${newRuns ? `; ${newRuns} twins continued as new meanwhile (not counted)` : ''}`,
      );
    }

    if (IDLE_MINUTES) {
      stage = 'idle';
      // Let the rollout's last writes (presence flush, late reports) land before the first count.
      await sleep(Math.max(0, 20_000 - (Date.now() - rolloutEnd)));
      const scanStart = Date.now();
      const before = await namespaceEvents(client);
      const scanMs = Date.now() - scanStart;
      const syncsBefore = syncsAnswered;
      const failedBefore = failureCount;
      const gatewayCpuBefore = gatewayPid ? processCpu(gatewayPid).own : 0;
      const serverCpuBefore = serverPid ? processCpu(serverPid).own : 0;
      const benchCpuBefore = process.cpuUsage();
      const workerCpuBefore = processCpu(workerPid).own;
      const idleStart = Date.now();
      if (gatewayLines.lastSummary) say(`gateway's last summary: ${gatewayLines.lastSummary}`);
      say(
        `\nidle: ${before.events} events in ${before.executions} executions (${before.open} open), counted in ${seconds(scanMs)}; ${DEVICES} agents syncing idle for ${IDLE_MINUTES} min; ${load()}`,
      );
      while (Date.now() - idleStart < IDLE_MINUTES * 60_000) {
        await sleep(Math.min(60_000, IDLE_MINUTES * 60_000 - (Date.now() - idleStart)));
        console.log(
          `  idle ${seconds(Date.now() - idleStart)}: ${syncsAnswered - syncsBefore} syncs answered, ${failureCount - failedBefore} failed; ${load()}`,
        );
      }
      const idleMs = Date.now() - idleStart;
      const syncs = syncsAnswered - syncsBefore;
      const gatewayCpu = (gatewayPid ? processCpu(gatewayPid).own : 0) - gatewayCpuBefore;
      const serverCpu = (serverPid ? processCpu(serverPid).own : 0) - serverCpuBefore;
      const benchCpuUsage = process.cpuUsage(benchCpuBefore);
      const benchCpu = (benchCpuUsage.user + benchCpuUsage.system) / 1e6;
      const workerCpu = processCpu(workerPid).own - workerCpuBefore;
      const failedIdle = failureCount - failedBefore;
      const loadAtEnd = load();
      const after = await namespaceEvents(client);
      const added = after.events - before.events;
      say(
        `idle ${seconds(idleMs)}: ${syncs} idle syncs answered (${(syncs / (idleMs / 1000)).toFixed(1)}/s), ${failedIdle} failed requests; the server persisted ${added} events meanwhile (${before.events} → ${after.events}, executions ${before.executions} → ${after.executions}): ${(added / Math.max(1, syncs)).toFixed(4)} events per idle sync; ${loadAtEnd}`,
      );
      const addedByType = new Map(
        [...after.byType].map(([t, n]) => [t, n - (before.byType.get(t) ?? 0)] as const).filter(([, n]) => n !== 0),
      );
      say(`events added by workflow type: ${addedByType.size ? byCount(addedByType) : 'none'}`);
      say(
        `CPU during the idle window (core-seconds): gateway ${gatewayCpu.toFixed(1)} = ${((gatewayCpu / Math.max(1, syncs)) * 1000).toFixed(2)} s per 1,000 idle syncs; Temporal server ${serverCpu.toFixed(1)}; worker ${workerCpu.toFixed(1)}; this process (agents) ${benchCpu.toFixed(1)}`,
      );
    }

    printSummary();
  } finally {
    clearInterval(sampler);
    for (const a of agents) a.stop.abort();
    gateway.child.kill('SIGTERM');
    await worker.stop();
    await bigConnection.close();
    await env.teardown();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
