/**
 * bench/agent-scale.ts's worker, in a process of its own so that its memory and CPU are measured apart from the
 * simulated agents (issue 29's target is the worker's RSS). Driven over IPC:
 *   parent → { address, namespace, taskQueue, auditDir, maxActivities, maxCachedWorkflows }   connect and run
 *   worker → { ready: true } once polling, or { error } if it could not start
 *   parent → { stop: true }                         shut down and exit
 * It ends with its parent: a parent that dies (its IPC channel closes) takes it down.
 */
import { dirname } from 'node:path';
import { NativeConnection } from '@temporalio/worker';
import { createWorker } from '../workers/worker';

export interface AgentWorkerRequest {
  address: string;
  namespace: string;
  taskQueue: string;
  auditDir: string;
  maxActivities: number;
  maxCachedWorkflows: number;
}
export type AgentWorkerReply = { ready: true } | { error: string };

const send = (reply: AgentWorkerReply) => process.send?.(reply);

process.once('message', (request: AgentWorkerRequest) => {
  void (async () => {
    const connection = await NativeConnection.connect({ address: request.address });
    const worker = await createWorker({
      connection,
      namespace: request.namespace,
      taskQueue: request.taskQueue,
      // The run's inventory (unsliced: read on this worker) is beside the audit directory, in the bench's own temp dir.
      deps: { auditDir: request.auditDir, inventoryRoots: [dirname(request.auditDir)] },
      layout: {
        role: 'all',
        maxActivities: request.maxActivities,
        maxWorkflowTasks: 40,
        maxCachedWorkflows: request.maxCachedWorkflows,
      },
    });
    const running = worker.run();
    let stopping = false;
    const stop = () => {
      // A stop message and the parent's disconnect both stop it: once.
      if (stopping) return;
      stopping = true;
      // Where its memory is, said once as it stops (the main thread's V8 heap; the workflow thread's is apart).
      const m = process.memoryUsage();
      const mib = (n: number) => Math.round(n / 1048576);
      console.log(
        `worker process at its stop: RSS ${mib(m.rss)} MiB; main thread's V8 heap ${mib(m.heapUsed)} of ${mib(m.heapTotal)} MiB, external ${mib(m.external)} MiB, array buffers ${mib(m.arrayBuffers)} MiB`,
      );
      worker.shutdown();
    };
    process.on('message', (m: { stop?: boolean }) => m?.stop && stop());
    process.once('disconnect', stop);
    send({ ready: true });
    await running;
    await connection.close();
    process.exit(0);
  })().catch((err: unknown) => {
    send({ error: err instanceof Error ? err.message : String(err) });
    process.exit(1);
  });
});
