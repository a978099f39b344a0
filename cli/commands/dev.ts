import { rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { Option, type Command } from 'commander';
import type { NativeConnection } from '@temporalio/worker';
import { readAuditKey, readAuditSegments, resolveAuditLocation } from '../../audit/file';
import { verifyAuditSegments } from '../../core/audit';
import { WavegateError } from '../../core/errors';
import { summarizeCounts, type DeviceState } from '../../core/rollout-state';
import type { DevStack, startDevStack as StartDevStack } from '../../workers/dev-stack';
import { PROJECT_ROOT, STATE_DIR } from '../../intake/package-layout';
import {
  type ConnectionSettings,
  describeConnection,
  localConnectionSettings,
  resolveConnectionSettings,
  type TemporalFlags,
} from '../../workers/connection';
import { connectWorker, createWorker, installQuietRuntime } from '../../workers/worker';
import { describeVersioning, resolveWorkerVersioning, type VersioningFlags } from '../../workers/versioning';
import { registerWorkerVersionCommands } from './worker-versions';
import { connectionFailure } from '../../workers/connection-failure';
import { ensureSearchAttributes } from '../../workers/search-attributes';
import { workerAuditStore } from '../../audit/worker';
import { describeCheckpoints, resolveCheckpointConfig, type CheckpointFlags } from '../../audit/checkpoint-config';
import type { PostgresAuditStore } from '../../audit/postgres';
import { installWorkerRuntime, metricsBindOf } from '../../workers/metrics';
import {
  describeWorkerLayout,
  MAX_ACTIVITIES_LIMIT,
  MAX_WORKFLOW_TASKS_LIMIT,
  DEFAULT_WORKFLOW_CACHE,
  WORKFLOW_CACHE_LIMIT,
  resolveWorkerLayout,
  workerLayoutNotes,
  type WorkerLayoutFlags,
} from '../../core/worker-layout';
import { statusQuery, type RolloutStatus } from '../../contracts/rollout';
import type { Client } from '@temporalio/client';
import { loadRolloutContent, prepareRollout, readSpec } from '../../intake/prepare';
import { hasProfile } from '../../intake/profile';
import {
  checkProfilesRoot,
  describeProfilesRoot,
  profilesOptionHelp,
  resolveProfilesRoot,
} from '../../intake/profiles-root';
import { connectClient, retryWait, startRollout, withTemporalOptions, workflowUrl } from '../client';
import { registerProfileEnvelopes } from '../registry-client';
import { INVENTORY_ROOTS_ENV, resolveInventoryRoots } from '../../intake/worker-files';

/** A repeatable flag's values, in order. */
const collectRoots = (value: string, previous: string[] | undefined) => [...(previous ?? []), value];

interface DevFlags {
  demo?: boolean;
  port?: number;
  uiPort?: number;
  stateDir: string;
  profiles?: string;
  inventoryRoot?: string[];
}

/** The worker's start line about its inventory roots. */
function describeInventoryRoots(roots: readonly string[]): string {
  return roots.length
    ? `inventory roots: ${roots.join(', ')} (files rollouts name are read only under these)`
    : `inventory roots: none, so this worker reads no inventory a rollout names (--inventory-on-worker) and no nightly canary's files (--inventory-root or $${INVENTORY_ROOTS_ENV})`;
}
import { action, EXIT_FAILED, EXIT_OK } from '../run';

const log = (line: string) => process.stdout.write(`${line}\n`);

/** Run `body` with a dev stack, taking the whole stack down on return, error, Ctrl-C or SIGTERM. */
async function withDevStack<T>(
  opts: Parameters<typeof StartDevStack>[0],
  body: (stack: DevStack) => Promise<T>,
): Promise<T> {
  // Loaded here, not at the top: the dev stack pulls in the SDK's worker, which other commands never need.
  const { startDevStack } = require('../../workers/dev-stack') as typeof import('../../workers/dev-stack');
  let stack: DevStack | undefined;
  let stopping: Promise<void> | undefined;
  const shutdown = (signal: string) => {
    log(`\n${signal}: stopping the dev stack...`);
    stopping ??= (stack?.stop() ?? Promise.resolve()).then(() => process.exit(130));
  };
  const onInt = () => shutdown('SIGINT');
  const onTerm = () => shutdown('SIGTERM');
  process.on('SIGINT', onInt);
  process.on('SIGTERM', onTerm);
  try {
    stack = await startDevStack({
      ...opts,
      // The worker gone, the stack is no use: take it down in order and exit 1 (no stack trace).
      onWorkerFailed: () => {
        log('stopping the dev stack');
        stopping ??= (stack?.stop() ?? Promise.resolve()).then(() => process.exit(1));
      },
    });
    return await body(stack);
  } finally {
    if (!stopping) await stack?.stop();
    process.off('SIGINT', onInt);
    process.off('SIGTERM', onTerm);
  }
}

const ICON: Record<DeviceState, string> = {
  pending: '·',
  applying: '…',
  applied: '✔',
  claimed: '~',
  failed: '✘',
  skipped: '-',
  'not-for-me': '○',
  'not-started': '-',
  'rolling-back': '↺',
  'rolled-back': '↩',
  'rollback-failed': '!',
  waiting: '⧗',
};

/** Print each device transition once, then a summary line when the counts move. */
export function progressPrinter(out: (line: string) => void) {
  const seen = new Map<string, string>();
  let lastSummary = '';
  return (status: RolloutStatus) => {
    for (const d of status.devices) {
      const key = `${d.state}|${d.reason ?? ''}`;
      if (seen.get(d.id) === key) continue;
      seen.set(d.id, key);
      out(`  ${ICON[d.state]} ${d.id.padEnd(10)} ${d.state}${d.reason ? ` (${d.reason})` : ''}`);
    }
    const summary = `[${status.state}] phase ${status.phase}: ${summarizeCounts(status.counts)}`;
    if (summary !== lastSummary) out(summary);
    lastSummary = summary;
  };
}

/** The demo's profiles (and the dev stack's default root): this checkout's profiles/. */
const DEMO_PROFILES = join(PROJECT_ROOT, 'profiles');

/** Seed registry:demo with the demo's signed revisions from `<profilesRoot>/demo` (idempotent: `existing` on a second run). */
async function registerDemoEnvelopes(client: Client, stack: DevStack, profilesRoot: string): Promise<void> {
  const results = await registerProfileEnvelopes(client, {
    profile: 'demo',
    profileDir: join(profilesRoot, 'demo'),
    by: 'wavegate dev',
    taskQueue: stack.taskQueue,
  });
  log(`registry:demo: ${results.map((r) => `r${r.revision} ${r.outcome}`).join(', ')}`);
}

/** The group's commands, in the order the help lists them. */
export function register(program: Command): void {
  for (const add of [registerDev, registerDemo, registerWorker]) add(program);
}

function registerDev(program: Command): void {
  program
    .command('dev')
    .description(
      'Run the embedded dev stack: Temporal dev server with Web UI, a worker, and with --demo a 12-device simulated fleet. Ctrl-C stops all of it.',
    )
    .option('--demo', 'also start the simulated demo fleet and write its inventory')
    .option('--port <port>', 'Temporal frontend port (default 7233, or a free one)', (v) => Number(v))
    .option('--ui-port <port>', 'Web UI port (default 8233, or a free one)', (v) => Number(v))
    .option('--state-dir <dir>', 'where the SQLite state, logs and demo fleet live', STATE_DIR)
    .option('--profiles <dir>', profilesOptionHelp(`this checkout's profiles/ (${DEMO_PROFILES})`))
    .option(
      '--inventory-root <dir>',
      `a directory the worker reads files rollouts name from (--inventory-on-worker, the nightly canary's inventory and spec); repeatable; default $${INVENTORY_ROOTS_ENV}, else the current directory and --state-dir`,
      collectRoots,
    )
    .action(action(runDev));
}

/** `wavegate dev`: the stack until a signal takes it down. */
async function runDev(opts: DevFlags): Promise<void> {
  const profiles = resolveProfilesRoot({ flag: opts.profiles, fallback: DEMO_PROFILES });
  checkProfilesRoot(profiles);
  // A dev stack is one user's: by default its worker reads inventories where that user works and where the demo's is.
  const inventoryRoots =
    opts.inventoryRoot || process.env[INVENTORY_ROOTS_ENV]?.trim()
      ? resolveInventoryRoots(opts.inventoryRoot)
      : [process.cwd(), resolve(opts.stateDir)];
  if (opts.demo && !hasProfile(profiles.dir, 'demo'))
    throw new WavegateError(
      'INVALID_INPUT',
      `--demo: the profiles root ${describeProfilesRoot(profiles)} has no demo profile (demo/profile.yaml); the demo's is in ${DEMO_PROFILES}`,
      { field: '--profiles' },
    );
  await withDevStack(
    {
      stateDir: opts.stateDir,
      demo: !!opts.demo,
      port: opts.port,
      uiPort: opts.uiPort,
      profilesRoot: profiles.dir,
      inventoryRoots,
      log,
    },
    async (stack) => {
      log(`\nTemporal address: ${stack.server.address}   (export TEMPORAL_ADDRESS=${stack.server.address})`);
      log(`Web UI:           ${stack.server.uiUrl}`);
      log(`profiles root:    ${describeProfilesRoot(profiles)}`);
      log(`inventory roots:  ${inventoryRoots.join(', ')}`);
      if (stack.inventoryPath) log(`demo inventory:   ${stack.inventoryPath}`);
      if (opts.demo) {
        const client = await connectClient(localConnectionSettings(stack.server, stack.taskQueue));
        try {
          await registerDemoEnvelopes(client, stack, profiles.dir);
        } finally {
          await client.connection.close();
        }
      }
      log('Ctrl-C to stop.');
      await new Promise<never>(() => {}); // until a signal takes the stack down
    },
  );
}

function registerDemo(program: Command): void {
  program
    .command('demo')
    .description(
      'Bring up the dev stack and the demo fleet, roll the demo profile r1 → r2 to completion, and shut everything down.',
    )
    .option('--state-dir <dir>', 'where the demo keeps its state (wiped at start)', join(STATE_DIR, 'demo'))
    .option('--spec <file>', 'rollout spec to run', join(PROJECT_ROOT, 'examples', 'demo-rollout.yaml'))
    .action(action(runDemo));
}

/** `wavegate demo`: a fresh stack, the demo rollout to its end, its audit trail checked, the stack down. */
async function runDemo(opts: { stateDir: string; spec: string }): Promise<number> {
  const profilesRoot = DEMO_PROFILES; // the demo is this checkout's own content, always
  loadRolloutContent({ spec: readSpec(opts.spec), specSource: opts.spec, profilesRoot }); // bad input starts nothing
  const stateDir = resolve(opts.stateDir);
  rmSync(stateDir, { recursive: true, force: true });
  // The demo's rollout names its fleet's inventory, which the demo writes in its own state directory:
  // its worker reads inventories from there and nowhere else.
  return withDevStack({ stateDir, demo: true, profilesRoot, inventoryRoots: [stateDir], log }, async (stack) => {
    const client = await connectClient(localConnectionSettings(stack.server, stack.taskQueue));
    await registerDemoEnvelopes(client, stack, profilesRoot);
    // The revisions come from the registry, verified against profiles/demo/trust.yaml.
    const input = await prepareRollout({
      specPath: opts.spec,
      inventoryPath: stack.inventoryPath!,
      profilesRoot,
      startedBy: 'wavegate demo',
      client,
    });
    const handle = await startRollout(client, stack.taskQueue, input);
    log(
      `\nrollout ${handle.workflowId} started: ${input.spec.profile} r${input.spec.fromRevision} → r${input.spec.toRevision}`,
    );
    log(`Web UI: ${workflowUrl(stack.server.uiUrl, stack.server.namespace, handle.workflowId)}\n`);
    const print = progressPrinter(log);
    const result = handle.result();
    let done = false;
    void result.finally(() => (done = true)).catch(() => {});
    while (!done) {
      await new Promise((r) => setTimeout(r, 300));
      if (!done) print(await retryWait(`status query of ${handle.workflowId}`, () => handle.query(statusQuery)));
    }
    const final = await result;
    print(final);
    await client.connection.close();
    const ok = final.state === 'completed';
    log(`\nrollout ${final.state}: ${summarizeCounts(final.counts)}`);
    const trail = verifyAuditSegments(readAuditSegments(stack.auditDir, handle.workflowId), {
      head: final.auditHead,
      key: readAuditKey(stack.auditKeyFile),
    });
    log(
      `audit trail: ${trail.count} records, ${trail.ok ? 'chain intact, head and MACs checked' : `BROKEN: ${trail.failure!.message}`} (wavegate audit ${handle.workflowId} --verify --audit-dir ${stack.auditDir} --audit-key-file ${stack.auditKeyFile})`,
    );
    // The stack (and the Web UI with it) stops as this returns: no link that is dead by the time it is read.
    log(
      `Web UI: closes with the demo's stack, which stops now (the link above answers only while it runs). To keep one open, run the stack yourself: \`npm run dev\` (wavegate dev --demo; Ctrl-C stops it), and start the rollout from another terminal as in the README's quick start.`,
    );
    return ok ? EXIT_OK : EXIT_FAILED;
  });
}

type WorkerFlags = TemporalFlags & {
  auditDir?: string;
  auditKeyFile?: string;
  profiles?: string;
  inventoryRoot?: string[];
  registerSearchAttributes?: boolean;
} & CheckpointFlags &
  VersioningFlags &
  WorkerLayoutFlags;

function registerWorker(program: Command): void {
  const workerCommand = withTemporalOptions(workerOptions(program.command('worker'))).action(action(runWorker));
  registerWorkerVersionCommands(workerCommand);
}

/** `wavegate worker`'s description and options (the connection's are withTemporalOptions'). */
function workerOptions(command: Command): Command {
  return (
    command
      .description(
        'Run a wavegate worker against a Temporal server: the same connection flags, environment and config profile as every other command (TLS and API key included).',
      )
      .option(
        '--audit-dir <dir>',
        'where the audit trails are written (default $WAVEGATE_AUDIT_DIR or .wavegate/audit)',
      )
      .option(
        '--audit-key-file <path>',
        'the audit MAC key, a 0600 file of hex (e.g. `openssl rand -hex 32`), by reference (default $WAVEGATE_AUDIT_KEY_FILE)',
      )
      .option(
        '--audit-store <url>',
        'where the audit goes: file (default: --audit-dir on this worker) or postgres://user@host:port/db shared by every worker (default $WAVEGATE_AUDIT_STORE); no password in the URL: $PGPASSWORD, $WAVEGATE_AUDIT_STORE_PASSWORD_FILE or ~/.pgpass',
      )
      .option(
        '--checkpoint-key <file>',
        'sign a checkpoint of the audit trail at every phase transition with this key (a `wavegate keygen` key file, mode 0600); default: no checkpoints',
      )
      .option(
        '--checkpoint-name <name>',
        "the key name on the checkpoints' signature lines (default the host name, else wavegate)",
      )
      .option(
        '--witness <url>',
        "the witness (`wavegate witness`) asked to cosign each checkpoint, within 5 s; a checkpoint it does not cosign is kept uncosigned and said in this worker's log",
      )
      .option(
        '--witness-key <key>',
        "the witness's public key, pinned: a pin file (<key>.pub.yaml) or ed25519:<base64> (as `wavegate witness` prints it)",
      )
      .option(
        '--profiles <dir>',
        `${profilesOptionHelp()}: the worker's own pins (trust.yaml) and payload files are read there, and nowhere else`,
      )
      .option(
        '--inventory-root <dir>',
        `a directory this worker reads files rollouts name from: an inventory started with --inventory-on-worker, a nightly canary's inventory and spec (repeatable; default $${INVENTORY_ROOTS_ENV}, ":"-separated; none: no such file is read)`,
        collectRoots,
      )
      .option(
        '--metrics-bind <host:port>',
        "serve Prometheus metrics (the SDK's and wavegate's) at http://<host:port>/metrics (default $WAVEGATE_METRICS_BIND; none: no endpoint)",
      )
      .option(
        '--deployment-name <name>',
        'Temporal Worker Versioning: poll as a version of this worker deployment (default $WAVEGATE_DEPLOYMENT_NAME; none: unversioned)',
      )
      .option(
        '--build-id <id>',
        "this worker's build id in the deployment (default $WAVEGATE_BUILD_ID, else <package version>-<hash of the workflow sources>)",
      )
      .option(
        '--versioning-behavior <pinned|auto-upgrade>',
        'for versioned workers: pinned (default) keeps a rollout on the build it started on; auto-upgrade moves it to the current build at its next task',
      )
      .option(
        '--workflows-only',
        'poll workflow tasks only: no activities registered, no activity slots (run --activities-only workers beside it on the same task queue)',
      )
      .option(
        '--activities-only',
        'poll activity tasks only: no workflow code loaded (run a --workflows-only worker beside it on the same task queue)',
      )
      .option(
        '--max-activities <n>',
        `activity slots: devices this worker applies to at once, at most the sum of the pool budgets it serves (1-${MAX_ACTIVITIES_LIMIT}, default 200)`,
      )
      .option('--max-workflow-tasks <n>', `workflow task slots (1-${MAX_WORKFLOW_TASKS_LIMIT}, default 40)`)
      .option(
        '--workflow-cache <n>',
        `workflow executions kept in memory between tasks (1-${WORKFLOW_CACHE_LIMIT}, default ${DEFAULT_WORKFLOW_CACHE})`,
      )
      .option(
        '--no-register-search-attributes',
        'only check that the namespace has the search attributes wavegate needs; missing ones are named with the command that adds them (exit 2) instead of added through the operator API',
      )
      // Retired at r10 (it served the floor pass): accepted so existing unit files still start, and named on stderr.
      .addOption(
        new Option(
          '--park-connections <duration>',
          'retired: does nothing; will be removed in a later release',
        ).hideHelp(),
      )
  );
}

/** `wavegate worker`: every flag checked (exit 2) before connecting, then the worker polls until a signal. */
async function runWorker(flags: WorkerFlags): Promise<void> {
  const layout = resolveWorkerLayout(flags); // bad layout flags: exit 2 before connecting
  for (const note of workerLayoutNotes(flags)) process.stderr.write(`${note}\n`);
  const versioning = resolveWorkerVersioning(flags); // bad versioning input: exit 2 before connecting
  const profiles = resolveProfilesRoot({ flag: flags.profiles });
  const profilesFound = checkProfilesRoot(profiles); // a root someone named must exist: exit 2 before connecting
  const inventoryRoots = resolveInventoryRoots(flags.inventoryRoot); // likewise each inventory root
  const settings = resolveConnectionSettings(flags);
  const metricsBind = metricsBindOf((flags as { metricsBind?: string }).metricsBind); // bad address: exit 2 before connecting
  const checkpoints = resolveCheckpointConfig(flags); // a bad key, name, URL or witness key: exit 2 before connecting
  // A bad --audit-store is exit 2 before connecting; a PostgreSQL store is migrated here, at start.
  // A workflows-only worker appends no audit records (activities do), so it opens no store.
  const auditStore =
    layout.role === 'workflows'
      ? undefined
      : await workerAuditStore({
          flag: (flags as { auditStore?: string }).auditStore,
          auditKeyFile: flags.auditKeyFile ?? (process.env.WAVEGATE_AUDIT_KEY_FILE || undefined),
          log,
        });
  installWorkerRuntime({ ...(metricsBind ? { metricsBind } : {}) }); // the Runtime must exist before the first connection
  installQuietRuntime();
  const connection = await connectWithSearchAttributes(settings, flags, auditStore);
  const auditDir = flags.auditDir ?? (process.env.WAVEGATE_AUDIT_DIR || undefined);
  const auditKeyFile = flags.auditKeyFile ?? (process.env.WAVEGATE_AUDIT_KEY_FILE || undefined);
  // Where the trails go, said at start (a PostgreSQL store said it when it was opened, its URL without secrets).
  if (layout.role !== 'workflows' && !auditStore) {
    const where = resolveAuditLocation({ auditDir: flags.auditDir }, { besideKey: false });
    log(
      `audit store: files in ${where.auditDir} (${where.dirFrom}); read them with: wavegate audit <rollout id> --audit-dir ${where.auditDir}`,
    );
  }
  if (!auditKeyFile)
    log(
      "warning: no --audit-key-file or $WAVEGATE_AUDIT_KEY_FILE: audit records carry no MAC, so a trail rewritten wholesale is caught only against the workflow's head",
    );
  log(
    `profiles root: ${describeProfilesRoot(profiles)}${profilesFound ? '' : ': no such directory, so this worker holds no pins and refuses every signed revision'}`,
  );
  log(describeInventoryRoots(inventoryRoots));
  if (layout.role !== 'workflows') log(describeCheckpoints(checkpoints));
  const worker = await createWorker({
    connection,
    namespace: settings.namespace,
    taskQueue: settings.taskQueue,
    layout,
    ...(versioning ? { versioning } : {}),
    deps: {
      log,
      profilesRoot: profiles.dir,
      inventoryRoots,
      ...(auditDir ? { auditDir } : {}),
      ...(auditKeyFile ? { auditKeyFile } : {}),
      ...(auditStore ? { auditStore } : {}),
      ...(checkpoints ? { checkpoints } : {}),
    },
  });
  log(`versioning: ${describeVersioning(versioning)}`);
  log(`runs: ${describeWorkerLayout(layout)}`);
  if (versioning)
    log(
      `  new rollouts reach this build once it is current: wavegate worker set-current ${versioning.version.buildId} --deployment-name ${versioning.version.deploymentName}`,
    );
  if (metricsBind) log(`metrics: http://${metricsBind}/metrics`);
  log(
    `worker ${worker.options.identity} polling ${describeConnection(settings)} task queue ${settings.taskQueue}; Ctrl-C to stop`,
  );
  // The SDK shuts the worker down gracefully on SIGINT/SIGTERM.
  await worker.run();
  await connection.close();
  await auditStore?.close();
}

/**
 * The worker's connection, once the namespace has wavegate's search attributes: added here where the server
 * lets this worker (self-hosted), else exit 2 naming each one and the command that adds it. Nothing polls before.
 */
async function connectWithSearchAttributes(
  settings: ConnectionSettings,
  flags: WorkerFlags,
  auditStore: PostgresAuditStore | undefined,
): Promise<NativeConnection> {
  let connection: NativeConnection;
  try {
    connection = await connectWorker(settings);
  } catch (err) {
    throw await connectionFailure(settings, err);
  }
  try {
    log(await ensureSearchAttributes(connection, settings, { register: flags.registerSearchAttributes !== false }));
  } catch (err) {
    await connection.close().catch(() => {});
    await auditStore?.close();
    throw err;
  }
  return connection;
}
