import { parseAgentKey } from '../../../core/agent-auth';
import type { ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { desiredRequestOf } from '../../../device/twin/apply';
import { desireOnTwin, readTwin } from '../../../clients/twin';
import type { RevisionSteps } from '../../../core/rollout/input';
import { runCli, spawnCliUntil, stopChild } from '../../support/cli';
import { until } from '../../support/until';
import type { ConformanceBackend, SuiteContext } from '../backend';
import { twinAnswer } from '../../support/twin-answer';

/**
 * The agent channel: one real `wavegate agent` process per device (its own state directory, identity
 * key and --home), with the device's own pins (`--trust`, the profile's trust.yaml), pulling through
 * one real `wavegate gateway` (plain HTTP on 127.0.0.1, serving payloads from the suite's profiles
 * root) from its twin `device:<id>` on the suite's worker. Crashing the channel is SIGKILLing the
 * device's agent: the detached apply runs on and the restarted agent reattaches to it.
 */
export class AgentBackend implements ConformanceBackend {
  readonly name = 'agent';
  readonly transport = 'agent' as const;
  private dir = '';
  private gateway: { child: ChildProcess; output: () => string } | undefined;
  private gatewayUrl = '';
  private readonly agents = new Map<string, ChildProcess>();
  private readonly pins = new Map<string, string>();

  private stateDir(id: string) {
    return join(this.dir, 'state', id);
  }
  home(id: string): string {
    return join(this.dir, 'homes', id);
  }
  receiptKey(id: string): { kind: 'agent'; publicKey: Uint8Array } {
    const publicKey = parseAgentKey(this.pins.get(id) ?? '');
    if (!publicKey) throw new Error(`conformance: no agent key for ${id}`);
    return { kind: 'agent', publicKey };
  }
  inventoryEntry(id: string): Record<string, unknown> {
    const agentKey = this.pins.get(id);
    if (!agentKey) throw new Error(`conformance: no agent device ${id}`);
    return { id, transport: 'agent', agentKey };
  }
  boardArgs(ctx: SuiteContext): string[] {
    return ['--reverify', '--reverify-wait', '30s', ...ctx.temporalArgs()];
  }

  async start(ctx: SuiteContext, ids: readonly string[]): Promise<void> {
    this.dir = join(ctx.scratch, 'agents');
    // Enrolled and started a few at a time: each is a node process that takes seconds to start.
    await inBatches(ids, 4, async (id) => {
      mkdirSync(this.home(id), { recursive: true });
      const run = await runCli(['agent', 'enroll', '--state-dir', this.stateDir(id)]);
      if (run.code !== 0) throw new Error(`agent enroll ${id}: ${run.stderr}`);
      this.pins.set(id, run.stdout.trim());
    });
    const inventory = join(this.dir, 'gateway-inventory.yaml');
    writeFileSync(
      inventory,
      stringify({ pools: { conf: {} }, devices: ids.map((id) => ({ ...this.inventoryEntry(id), pool: 'conf' })) }),
    );
    this.gateway = await spawnCliUntil(
      [
        'gateway',
        '--listen',
        '127.0.0.1:0',
        '--inventory',
        inventory,
        '--profiles',
        ctx.profilesRoot,
        ...ctx.temporalArgs(),
      ],
      /gateway listening on (http:\/\/\S+)/,
    );
    this.gatewayUrl = /gateway listening on (http:\/\/\S+)/.exec(this.gateway.output())![1]!;
    await inBatches(ids, 4, (id) => this.startAgent(ctx, id));
    await until(
      'every agent synced',
      async () =>
        (await Promise.all(ids.map((id) => readTwin(ctx.client, id)))).every((v) => v?.lastSeenAt) ? true : undefined,
      120_000,
    );
  }

  private async startAgent(ctx: SuiteContext, id: string): Promise<void> {
    const { child } = await spawnCliUntil(
      [
        'agent',
        '--device-id',
        id,
        '--gateway',
        this.gatewayUrl,
        '--trust',
        ctx.devicePins,
        '--state-dir',
        this.stateDir(id),
        '--key',
        join(this.stateDir(id), 'identity.key'),
        '--home',
        this.home(id),
      ],
      /syncing with the gateway/,
      120_000,
    );
    this.agents.set(id, child);
  }

  async crashAndRestart(ctx: SuiteContext, id: string): Promise<void> {
    const child = this.agents.get(id)!;
    const gone = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await gone;
    this.agents.delete(id);
    await new Promise((r) => setTimeout(r, 1_000));
    await this.startAgent(ctx, id);
  }

  async applyOutsideRollout(ctx: SuiteContext, id: string, steps: RevisionSteps): Promise<string> {
    const holder = { rollout: 'conformance:outside', run: randomUUID(), activity: '1', attempt: 1 };
    const request = desiredRequestOf(steps, holder, null, null);
    await desireOnTwin(ctx.client, ctx.taskQueue, id, request);
    const report = await twinAnswer(ctx.client, id, steps.profile, request.requestId);
    return report.state === 'refused' ? (report.reason ?? 'REFUSED') : report.state;
  }

  async stop(): Promise<void> {
    for (const child of this.agents.values()) await stopChild(child);
    if (this.gateway) await stopChild(this.gateway.child);
  }
}

async function inBatches<T>(items: readonly T[], size: number, run: (item: T) => Promise<void>): Promise<void> {
  for (let i = 0; i < items.length; i += size) await Promise.all(items.slice(i, i + size).map(run));
}
