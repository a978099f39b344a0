import { mkdirSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { Worker } from '@temporalio/worker';
import { demoDevices, startFleet, writeFleetInventory, type Fleet } from '../sim';
import { ensureAuditKeyFile } from '../audit/file';
import { startDevServer, type DevServer } from './dev-server';
import { DEFAULT_TASK_QUEUE, localConnectionSettings } from './connection';
import { connectWorker, createWorker, installQuietRuntime } from './worker';
import { registerDevUi } from './dev-ui-registry';

export interface DevStack {
  server: DevServer;
  /** Where the worker writes the per-rollout audit trails. */
  auditDir: string;
  /** The worker's audit MAC key (`<stateDir>/audit.key`, generated on first start). */
  auditKeyFile: string;
  taskQueue: string;
  fleet?: Fleet;
  /** The demo fleet's inventory file (with --demo). */
  inventoryPath?: string;
  stop(): Promise<void>;
}

/**
 * The embedded default: a Temporal dev server (state in `<stateDir>/temporal.db`), a worker, and with
 * `demo` a simulated fleet of 12 devices in 2 pools and 2 classes on 127.0.0.1. stop() takes all of it down.
 */
export async function startDevStack(opts: {
  stateDir: string;
  demo: boolean;
  port?: number;
  uiPort?: number;
  /** The worker's profiles root (pins and payload files), always given: the stack never guesses it. */
  profilesRoot: string;
  /** Where the worker reads files rollouts name (`--inventory-root`; `wavegate dev` gives its own); none without. */
  inventoryRoots?: readonly string[];
  log: (line: string) => void;
  /** The worker stopped on its own (a fatal error): after its one line is logged. The stack is still up. */
  onWorkerFailed?: (err: Error) => void;
}): Promise<DevStack> {
  const stateDir = resolve(opts.stateDir);
  mkdirSync(stateDir, { recursive: true });
  const stops: Array<() => Promise<void>> = [];
  const stop = async () => {
    for (const fn of stops.reverse()) await fn().catch((err) => opts.log(`stop: ${(err as Error).message}`));
    stops.length = 0;
  };
  try {
    opts.log('starting Temporal dev server...');
    const server = await startDevServer({
      dbFile: join(stateDir, 'temporal.db'),
      logFile: join(stateDir, 'temporal.log'),
      port: opts.port,
      uiPort: opts.uiPort,
      log: opts.log,
    });
    stops.push(() => server.stop());
    opts.log(`Temporal dev server on ${server.address}; Web UI ${server.uiUrl}`);
    // Commands run from another terminal link to this UI, whatever port it got.
    const unregister = registerDevUi(server.address, server.uiUrl);
    stops.push(async () => unregister());

    let fleet: Fleet | undefined;
    let inventoryPath: string | undefined;
    if (opts.demo) {
      const fleetDir = join(stateDir, 'demo-fleet');
      rmSync(fleetDir, { recursive: true, force: true }); // every demo starts from a fresh fleet
      fleet = await startFleet({ devices: demoDevices(12), dir: fleetDir });
      stops.push(() => fleet!.stop());
      inventoryPath = writeFleetInventory(fleet, join(stateDir, 'demo-fleet.yaml'), {
        budgets: { 'pool-a': 0.34, 'pool-b': 0.34 },
      });
      opts.log(`demo fleet: ${fleet.devices.length} simulated SSH devices on 127.0.0.1; inventory ${inventoryPath}`);
    }

    installQuietRuntime();
    const connection = await connectWorker(localConnectionSettings(server));
    stops.push(() => connection.close());
    // The dev stack MACs its audit with a key of its own, kept (0600) with the rest of its state.
    const auditKeyFile = ensureAuditKeyFile(join(stateDir, 'audit.key'));
    const worker: Worker = await createWorker({
      connection,
      namespace: server.namespace,
      taskQueue: DEFAULT_TASK_QUEUE,
      deps: {
        log: opts.log,
        auditDir: join(stateDir, 'audit'),
        auditKeyFile,
        profilesRoot: resolve(opts.profilesRoot),
        inventoryRoots: opts.inventoryRoots ?? [],
      },
    });
    // Never an unhandled rejection (a stack trace): a worker that dies says why in one line, and the caller decides.
    const running = worker.run().catch((err: Error) => {
      opts.log(`the worker stopped: ${err.message.split('\n')[0]!.slice(0, 300)}`);
      opts.onWorkerFailed?.(err);
    });
    stops.push(async () => {
      if (worker.getState() === 'RUNNING') worker.shutdown();
      await running;
    });
    opts.log(`worker polling task queue "${DEFAULT_TASK_QUEUE}"`);
    return {
      server,
      auditDir: join(stateDir, 'audit'),
      auditKeyFile,
      taskQueue: DEFAULT_TASK_QUEUE,
      fleet,
      inventoryPath,
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}
