import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { defaultPayloadConverter, type Logger } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import { describe, expect, it } from 'vitest';
import { createConvergeActivities } from '../../device/twin/converge';
import { convergeEnrolledDevice } from '../../device/twin/enrolled';
import { enrolmentHook } from '../../gateway/enrolled';
import type { AgentPins } from '../../gateway/pins';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { join } from 'node:path';
import { parseInventory } from '../../core/inventory';
import type { RevisionSteps } from '../../core/rollout/input';
import { twinWorkflowId, type DesiredRequest, type ProfileReportState, type TwinView } from '../../core/twin';

/**
 * Convergence never goes down (issue 21 item 4): both the after-rollout convergence of skipped agent
 * devices and the first-sync convergence of a newly enrolled one read the twin first and leave a device
 * alone that reports the revision or a higher one. The twins are a stand-in Temporal client holding one
 * view per device (what the twin query answers) and recording the desire signals it is sent.
 */
const quiet: Logger = { trace() {}, debug() {}, info() {}, warn() {}, error() {}, log() {} };
const steps = (revision: number): RevisionSteps => ({
  profile: 'demo',
  revision,
  apply: 'a',
  verify: 'v',
  payload: [],
});

function twinView(
  deviceId: string,
  reported: number | null,
  desired?: number,
  state: ProfileReportState = 'applied',
): TwinView {
  return {
    deviceId,
    version: 3,
    desired:
      desired === undefined
        ? {}
        : {
            demo: {
              requestId: `r:x:${desired}`,
              profile: 'demo',
              revision: desired,
              steps: steps(desired),
              envelopeDigest: '',
              holder: { rollout: 'r', run: 'x', activity: '1', attempt: 1 },
              rollout: 'r',
              fromRevision: null,
              setAt: '2026-06-01T00:00:00.000Z',
            },
          },
    report:
      reported === undefined
        ? null
        : {
            profiles: reported === null ? {} : { demo: { revision: reported, state, at: '2026-06-01T00:00:00.000Z' } },
            health: [],
            healthAt: null,
            agentVersion: 't',
          },
    lastSeenAt: '2026-06-01T00:00:00.000Z',
    reverify: false,
  };
}

/** One pinned agent device of an inventory. */
const device = (id: string) =>
  parseInventory(
    {
      defaults: { pool: 'p' },
      devices: [{ id, transport: 'agent', agentKey: `ed25519:${Buffer.alloc(32, id.length).toString('base64')}` }],
    },
    'fleet.yaml',
  ).devices[0]!;

/** Twins by device id (absent: no twin), the desire signals sent, and one completed rollout of demo to `target`. */
function fakeTemporal(views: Record<string, TwinView>, target = 2) {
  const desired: { device: string; request: DesiredRequest }[] = [];
  const input = { spec: { fromRevision: 1, toRevision: target }, steps: steps(target) };
  const client = {
    workflow: {
      getHandle: (workflowId: string) => ({
        query: async () => {
          const view = Object.values(views).find((v) => twinWorkflowId(v.deviceId) === workflowId);
          if (!view) throw new WorkflowNotFoundError('not found', workflowId, undefined);
          return view;
        },
        fetchHistory: async () => ({
          events: [
            {
              workflowExecutionStartedEventAttributes: {
                input: { payloads: [defaultPayloadConverter.toPayload(input)] },
              },
            },
          ],
        }),
      }),
      signalWithStart: async (_type: string, opts: { workflowId: string; signalArgs: [DesiredRequest] }) => {
        desired.push({ device: opts.workflowId.replace(/^device:/, ''), request: opts.signalArgs[0] });
      },
      list: async function* () {
        yield {
          workflowId: 'rollout:demo-2',
          runId: 'run-1',
          closeTime: new Date('2026-06-01T00:00:00Z'),
          startTime: new Date('2026-05-31T00:00:00Z'),
        };
      },
    },
  };
  return { client: client as unknown as Client, desired };
}

describe('desireAgentRevision: convergence after a rollout never goes down', () => {
  it('asks only devices reporting below the revision (or nothing, or no twin); one at or above it, or desired above it, is left alone and not counted', async () => {
    const views = {
      below: twinView('below', 1),
      same: twinView('same', 2),
      above: twinView('above', 3),
      failedAbove: twinView('failedAbove', 3, undefined, 'failed'),
      silent: twinView('silent', null),
      desiredAbove: twinView('desiredAbove', 1, 3),
    };
    const { client, desired } = fakeTemporal(views);
    const acts = createConvergeActivities({ client, concurrency: 2 });
    const result = await new MockActivityEnvironment(undefined, { logger: quiet }).run(acts.desireAgentRevision, {
      rollout: 'rollout:demo-2',
      run: 'run-1',
      devices: [...Object.keys(views), 'no-twin'],
      steps: steps(2),
      fromRevision: 1,
    });
    expect(result).toEqual({ asked: 3, atOrAbove: 4 });
    expect(desired.map((d) => d.device).sort()).toEqual(['below', 'no-twin', 'silent']);
    expect(
      desired.every(
        (d) => d.request.revision === 2 && d.request.requestId === `rollout:demo-2:run-1:converge:${d.device}`,
      ),
    ).toBe(true);
  });
});

describe('convergeEnrolledDevice: a newly enrolled device is never desired below what it reports', () => {
  const demo = [{ name: 'demo', scope: {} }];

  it('reporting the latest completed revision or above: left alone', async () => {
    for (const reported of [2, 3]) {
      const { client, desired } = fakeTemporal({ e1: twinView('e1', reported) });
      expect(await convergeEnrolledDevice(client, 'q', device('e1'), demo), `reports r${reported}`).toEqual([]);
      expect(desired).toEqual([]);
    }
  });

  it("reporting below it, nothing, or no twin yet: desired the rollout's revision", async () => {
    for (const view of [twinView('e1', 1), twinView('e1', null), undefined]) {
      const { client, desired } = fakeTemporal(view ? { e1: view } : {});
      expect(await convergeEnrolledDevice(client, 'q', device('e1'), demo)).toEqual(['demo']);
      expect(desired).toMatchObject([
        { device: 'e1', request: { revision: 2, requestId: 'rollout:demo-2:run-1:converge:e1', fromRevision: 1 } },
      ]);
    }
  });

  it('already desired: left alone', async () => {
    const { client, desired } = fakeTemporal({ e1: twinView('e1', null, 1) });
    expect(await convergeEnrolledDevice(client, 'q', device('e1'), demo)).toEqual([]);
    expect(desired).toEqual([]);
  });
});

describe("the gateway's enrolment hook says whether it asked the twin anything (the gateway reads it again only then)", () => {
  const pins = (known: string[]): AgentPins => ({
    keyOf: () => null,
    deviceOf: (id) => (known.includes(id) ? device(id) : undefined),
    reload() {},
    devices: known.length,
  });
  const hookFor = (client: Client, known: string[], lines: string[] = []) =>
    enrolmentHook({
      client,
      taskQueue: 'q',
      pins: pins(known),
      profilesRoot: join(PROJECT_ROOT, 'profiles'),
      log: (l) => lines.push(l),
    });

  it('true when it desired the latest completed rollout, false when the device already reports it or is not pinned', async () => {
    const asking = fakeTemporal({});
    expect(await hookFor(asking.client, ['e1'])('e1')).toBe(true);
    expect(asking.desired).toMatchObject([{ device: 'e1', request: { revision: 2 } }]);
    const there = fakeTemporal({ e1: twinView('e1', 2) });
    expect(await hookFor(there.client, ['e1'])('e1')).toBe(false);
    expect(there.desired).toEqual([]);
    expect(await hookFor(fakeTemporal({}).client, [])('e1')).toBe(false);
  });

  it('true when the lookup failed part way (it may have asked one profile before failing on another)', async () => {
    const { client } = fakeTemporal({});
    const failing = {
      workflow: {
        ...(client.workflow as object),
        list: () => {
          throw new Error('Failed to query Workflow');
        },
      },
    } as unknown as Client;
    const lines: string[] = [];
    expect(await hookFor(failing, ['e1'], lines)('e1')).toBe(true);
    expect(lines.join('\n')).toMatch(/e1: first sync: could not look up the latest completed rollouts/);
  });
});
