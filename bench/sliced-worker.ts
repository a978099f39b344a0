/**
 * bench/sliced-scale.ts's worker, in a process of its own so that its memory and CPU are measured apart from the
 * client that generates and uploads the fleet (issue 26's target is the worker's RSS). Every apply is mocked, as in
 * the bench. Driven over IPC:
 *   parent → { address, namespace, taskQueue, auditDir }   connect and run
 *   worker → { ready: true } once polling, or { error }
 *   worker → { heap, heapTotal, external, cached } every second: V8's heap in use and reserved, the memory outside it (bytes), workflows cached
 *   parent → { stop: true }                                 shut down, answer { applies }, and exit
 * It ends with its parent: a parent that dies (its IPC channel closes) takes it down.
 */
import { NativeConnection, Worker } from '@temporalio/worker';
import { createActivities } from '../activities';
import { mockedApply } from '../test/support/sliced-fleet';
import { workflowBundle } from '../test/support/temporal';
import { DEFAULT_WORKFLOW_CACHE } from '../core/worker-layout';

export interface SlicedWorkerRequest {
  address: string;
  namespace: string;
  taskQueue: string;
  auditDir: string;
}
export type SlicedWorkerReply =
  | { ready: true }
  | { error: string }
  | { applies: number }
  | { heap: number; heapTotal: number; external: number; cached: number };

const send = (reply: SlicedWorkerReply) => process.send?.(reply);

process.once('message', (request: SlicedWorkerRequest) => {
  void (async () => {
    let applies = 0;
    const connection = await NativeConnection.connect({ address: request.address });
    const worker = await Worker.create({
      connection,
      namespace: request.namespace,
      taskQueue: request.taskQueue,
      workflowBundle: await workflowBundle(),
      activities: {
        ...createActivities({ auditDir: request.auditDir }),
        applyRevision: mockedApply(() => (applies += 1)),
      },
      maxConcurrentActivityTaskExecutions: 500,
      // What `wavegate worker` keeps (core/worker-layout.ts), not the SDK's default, which sizes it to the heap limit.
      maxCachedWorkflows: DEFAULT_WORKFLOW_CACHE,
    });
    const running = worker.run();
    let sampler: ReturnType<typeof setInterval> | undefined;
    let stopping = false;
    const stop = () => {
      if (stopping) return;
      stopping = true;
      clearInterval(sampler);
      send({ applies });
      worker.shutdown();
    };
    process.on('message', (m: { stop?: boolean }) => m?.stop && stop());
    process.once('disconnect', stop);
    send({ ready: true });
    // After `ready`: the parent takes the first message it gets as the answer to its request.
    sampler = setInterval(() => {
      const m = process.memoryUsage();
      send({
        heap: m.heapUsed,
        heapTotal: m.heapTotal,
        external: m.external,
        cached: worker.getStatus().numCachedWorkflows,
      });
    }, 1000);
    await running;
    await connection.close();
    process.exit(0);
  })().catch((err: unknown) => {
    send({ error: err instanceof Error ? err.message : String(err) });
    process.exit(1);
  });
});
