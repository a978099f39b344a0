/**
 * The pull transport at scale (bench/README.md, "Agent devices at scale"): one rollout over N
 * `transport: agent` devices through a dev server, one worker and a REAL `wavegate gateway` process,
 * the devices being simulated agents in this process: each signs its requests with its own identity
 * key and long-polls `/v1/sync` like `wavegate agent`, and answers a desired entry by reporting it
 * applied after --apply-ms (it runs and verifies nothing: the rollout side, the twins and the gateway
 * are what is measured). Prints the makespan, per-execution event counts and peak pending work, the
 * gateway's requests per second, and the twins' history sizes.
 *
 *   npx tsx bench/agent-scale.ts --devices 1000 [--slice 200] [--in-flight 100] [--apply-ms 0] [--wait-ms 30000] [--gate 1s]
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { stringify } from 'yaml';
import { agentKeyPin } from '../core/agent-auth';
import { keyPairFromSeed, type KeyPair } from '../core/signing';
import { twinWorkflowId, type AgentReport } from '../core/twin';
import { prepareRollout } from '../intake/prepare';
import { gatewayClient } from '../agent/gateway-client';
import { startDevServerEnv } from '../workers/dev-server';
import { PROJECT_ROOT } from '../intake/package-layout';
import { createWorker } from '../workers/worker';
import { rolloutWorkflow } from '../workflows/rollout';
import { executionTreeShapes, HISTORY_EVENT_LIMIT, PENDING_LIMIT } from '../test/support/history-bounds';
import { wholeFlag } from './flags';

const { values: flags } = parseArgs({
  options: {
    devices: { type: 'string', default: '1000' },
    slice: { type: 'string', default: '200' },
    'in-flight': { type: 'string', default: '100' },
    'apply-ms': { type: 'string', default: '0' },
    'wait-ms': { type: 'string', default: '30000' },
    gate: { type: 'string', default: '1s' },
  },
});
const DEVICES = wholeFlag('devices', flags.devices, 1, 100_000);
const SLICE = wholeFlag('slice', flags.slice, 1, 10_000);
const IN_FLIGHT = wholeFlag('in-flight', flags['in-flight'], 1, 10_000);
const APPLY_MS = wholeFlag('apply-ms', flags['apply-ms'], 0, 60_000);
const WAIT_MS = wholeFlag('wait-ms', flags['wait-ms'], 0, 30_000);
const GATE = flags.gate!;
if (!/^\d+(ms|s|m)$/.test(GATE))
  throw new Error(`--gate: expected a duration like 0s, 1s or 500ms, got ${JSON.stringify(GATE)}`);

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface SimAgent {
  id: string;
  key: KeyPair;
}

/** Gateway request counts per wall-clock second, for the rate and its peak. */
const perSecond = new Map<number, number>();
let requests = 0;
let failures = 0;
const failureKinds = new Map<string, number>();
function counted<T>(p: Promise<T>): Promise<T> {
  return p.then(
    (v) => {
      requests++;
      const s = Math.floor(Date.now() / 1000);
      perSecond.set(s, (perSecond.get(s) ?? 0) + 1);
      return v;
    },
    (err: unknown) => {
      failures++;
      const why =
        err instanceof Error
          ? 'code' in err && typeof err.code === 'string'
            ? err.code
            : err.message.replace(/\d+/g, 'N').slice(0, 80)
          : String(err);
      failureKinds.set(why, (failureKinds.get(why) ?? 0) + 1);
      throw err;
    },
  );
}

/** One simulated agent: sync (long-poll), answer each new desired entry as applied, report, repeat. */
async function runAgent(agent: SimAgent, url: string, stop: AbortSignal): Promise<void> {
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
      const view = await counted(gw.sync({ report, knownVersion, waitMs: WAIT_MS }, stop));
      knownVersion = view.version;
      for (const entry of Object.values(view.desired)) {
        if (report.profiles[entry.profile]?.requestId === entry.requestId) continue;
        if (APPLY_MS) await sleep(APPLY_MS);
        report.profiles[entry.profile] = {
          revision: entry.revision,
          state: 'applied',
          requestId: entry.requestId,
          steps: ['verify', 'apply', 'verify', 'marker'],
          at: new Date().toISOString(),
        };
        // The answer goes out at once (the next sync would only carry it after its wait).
        await counted(gw.report(report, stop));
      }
    } catch {
      if (!stop.aborted) await sleep(1_000 + Math.random() * 1_000);
    }
  }
}

/** The gateway's own log: one line per request, `<device> <METHOD> <path> <status> <ms>[ <code> <message>]`. */
let gatewayLog = '';

function startGateway(args: string[]): Promise<{ child: ChildProcess; url: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [join(PROJECT_ROOT, 'bin', 'wavegate.js'), 'gateway', ...args], {
      cwd: PROJECT_ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    const onData = (c: Buffer) => {
      out += c.toString();
      gatewayLog += c.toString();
      if (gatewayLog.length > 64 * 1024 * 1024) gatewayLog = gatewayLog.slice(-32 * 1024 * 1024);
      const m = /gateway listening on (http:\/\/\S+)/.exec(out);
      if (m) resolve({ child, url: m[1]! });
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.on('exit', (code) => reject(new Error(`gateway exited ${code}:\n${out}`)));
  });
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'wavegate-agent-scale-'));
  const agents: SimAgent[] = Array.from({ length: DEVICES }, (_, i) => ({
    id: `agent-${String(i).padStart(5, '0')}`,
    key: keyPairFromSeed(randomBytes(32)),
  }));
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
  writeFileSync(
    specPath,
    stringify({
      rollout: {
        profile: 'demo',
        fromRevision: 1,
        toRevision: 2,
        gate: GATE,
        maxFailureRatio: 0.05,
        phases: [
          { canary: '1 device', healthGate: ['devices-online', 'all-runtimes-healthy'] },
          { bulk: '10%' },
          { bulk: 'remainder', healthGate: ['devices-online'] },
        ],
      },
    }),
  );

  const env = await startDevServerEnv();
  const taskQueue = 'agent-scale';
  const worker = await createWorker({
    connection: env.nativeConnection,
    namespace: env.namespace ?? 'default',
    taskQueue,
    deps: { auditDir: join(dir, 'audit') },
    layout: {
      role: 'all',
      maxActivities: Math.max(200, IN_FLIGHT * 2),
      maxWorkflowTasks: 40,
      maxCachedWorkflows: 1_000,
    },
  });
  const running = worker.run();
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
    env.namespace ?? 'default',
    '--task-queue',
    taskQueue,
  ]);
  const stop = new AbortController();
  setMaxListeners(0, stop.signal); // one listener per simulated agent's request in flight
  try {
    console.log(
      `${DEVICES} simulated agents against ${gateway.url}; ${IN_FLIGHT} in flight; slices of ${SLICE}; apply ${APPLY_MS} ms; long-poll ${WAIT_MS} ms; gates ${GATE}`,
    );
    const upStart = Date.now();
    // The agents' loops run until stop aborts them; nothing waits on them.
    for (const a of agents) void runAgent(a, gateway.url, stop.signal);
    // Every twin seen before the rollout (its snapshot counts a never-seen agent offline).
    for (;;) {
      const synced = new Set<string>();
      for await (const w of env.client.workflow.list({ query: `WorkflowType = 'deviceTwinWorkflow'` }))
        synced.add(w.workflowId);
      if (synced.size >= DEVICES) break;
      await sleep(1_000);
    }
    console.log(
      `agents up (every twin started) in ${seconds(Date.now() - upStart)}; ${requests} gateway requests so far`,
    );

    const input = {
      ...prepareRollout({ specPath, inventoryPath, profilesRoot: join(PROJECT_ROOT, 'profiles'), startedBy: 'bench' }),
      rolloutId: `rollout:agent-scale-${Date.now()}`,
      sliceSize: SLICE,
    };
    const before = requests;
    const started = Date.now();
    const handle = await env.client.workflow.start(rolloutWorkflow, {
      workflowId: input.rolloutId,
      taskQueue,
      args: [input],
    });
    const progress = setInterval(() => {
      handle
        .query<{ phase?: string; counts: Record<string, number> }>('status')
        .then((s) =>
          console.log(
            `  ${seconds(Date.now() - started)}: ${s.phase ?? '-'} applied ${s.counts.applied} applying ${s.counts.applying} skipped ${s.counts.skipped} failed ${s.counts.failed}; ${requests - before} gateway requests`,
          ),
        )
        .catch(() => {});
    }, 30_000);
    // The result's long-poll can time out on a loaded server: ask again until the rollout has closed.
    const result = await (async () => {
      for (;;) {
        try {
          return await handle.result();
        } catch (err) {
          if (!/DEADLINE_EXCEEDED|deadline exceeded/i.test(String((err as { cause?: unknown }).cause ?? err)))
            throw err;
        }
      }
    })().finally(() => clearInterval(progress));
    const makespan = Date.now() - started;
    const during = requests - before;
    console.log(
      `\nrollout ${result.state}: ${JSON.stringify(result.counts)} in ${seconds(makespan)} (${(DEVICES / (makespan / 1000)).toFixed(1)} devices/s)`,
    );
    const window = [...perSecond.entries()]
      .filter(([s]) => s * 1000 >= started && s * 1000 <= started + makespan)
      .map(([, n]) => n);
    console.log(
      `gateway: ${during} requests during the rollout, ${(during / (makespan / 1000)).toFixed(1)}/s average, peak ${Math.max(0, ...window)}/s; ${failures} failed requests in all${
        failures
          ? ` (${[...failureKinds]
              .sort((x, y) => y[1] - x[1])
              .slice(0, 5)
              .map(([k, n]) => `${n}× ${k}`)
              .join('; ')})`
          : ''
      }`,
    );

    const refusals = new Map<string, number>();
    for (const m of gatewayLog.matchAll(/ (5\d\d|4\d\d) \d+ms (.{0,90})/g)) {
      const kind = `${m[1]} ${m[2]!.replace(/agent-\d+/g, 'agent-N').replace(/[0-9a-f-]{36}/g, 'RUN')}`;
      refusals.set(kind, (refusals.get(kind) ?? 0) + 1);
    }
    if (refusals.size)
      console.log(
        `gateway refusals by kind (its log): ${[...refusals]
          .sort((x, y) => y[1] - x[1])
          .slice(0, 5)
          .map(([k, n]) => `${n}× ${k}`)
          .join(' | ')}`,
      );

    const shapes = await executionTreeShapes(env.client, input.rolloutId);
    console.log(
      `\nper-execution history (limits: < ${HISTORY_EVENT_LIMIT} events, ≤ ${PENDING_LIMIT} pending activities/children)`,
    );
    console.log('| execution | events | bytes | activities | max pending activities | max pending children |');
    console.log('|---|---:|---:|---:|---:|---:|');
    for (const s of shapes)
      console.log(
        `| ${s.workflowId} | ${s.events} | ${s.bytes} | ${s.activitiesScheduled} | ${s.maxPendingActivities} | ${s.maxPendingChildren} |`,
      );
    const over = shapes.filter(
      (s) =>
        s.events >= HISTORY_EVENT_LIMIT ||
        s.maxPendingActivities > PENDING_LIMIT ||
        s.maxPendingChildren > PENDING_LIMIT,
    );
    console.log(
      over.length === 0
        ? 'every execution within the limits'
        : `OVER THE LIMITS: ${over.map((s) => s.workflowId).join(', ')}`,
    );

    // Twins: history length of each current run, and how many runs (continue-as-new) each has had.
    const lengths: number[] = [];
    for (let i = 0; i < agents.length; i += 50) {
      const batch = await Promise.all(
        agents.slice(i, i + 50).map((a) => env.client.workflow.getHandle(twinWorkflowId(a.id)).describe()),
      );
      lengths.push(...batch.map((d) => d.historyLength));
    }
    lengths.sort((a, b) => a - b);
    const pct = (p: number) => lengths[Math.min(lengths.length - 1, Math.floor((p / 100) * lengths.length))]!;
    console.log(
      `\ntwin histories (current run): median ${pct(50)} events, p99 ${pct(99)}, max ${lengths.at(-1)} (continue-as-new past 2,000)`,
    );
  } finally {
    stop.abort();
    gateway.child.kill('SIGTERM');
    worker.shutdown();
    await running.catch(() => {});
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
