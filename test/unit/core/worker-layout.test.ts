import { describe, expect, it } from 'vitest';
import { PARK_CONNECTIONS_RETIRED_NOTE, resolveWorkerLayout, workerLayoutNotes } from '../../../core/worker-layout';
import { refusal } from '../../support/refusal';

describe('resolveWorkerLayout', () => {
  it('no flags: both roles with the default slots', () => {
    expect(resolveWorkerLayout({})).toEqual({
      role: 'all',
      maxActivities: 200,
      maxWorkflowTasks: 40,
      maxCachedWorkflows: 300,
    });
  });
  it('--park-connections (retired at r10) is accepted with any value, changes nothing, and is named in a note', () => {
    for (const parkConnections of ['30s', '0s', 'soon']) {
      expect(resolveWorkerLayout({ parkConnections })).toEqual(resolveWorkerLayout({}));
      expect(resolveWorkerLayout({ activitiesOnly: true, parkConnections })).toEqual(
        resolveWorkerLayout({ activitiesOnly: true }),
      );
      expect(workerLayoutNotes({ parkConnections })).toEqual([PARK_CONNECTIONS_RETIRED_NOTE]);
    }
    expect(resolveWorkerLayout({ workflowsOnly: true, parkConnections: '5s' }).role).toBe('workflows');
    expect(workerLayoutNotes({})).toEqual([]);
    expect(PARK_CONNECTIONS_RETIRED_NOTE).toMatch(
      /--park-connections no longer does anything .* removed in a later release/,
    );
  });
  it('--workflows-only has no activity slots; --activities-only no workflow task slots', () => {
    expect(resolveWorkerLayout({ workflowsOnly: true, maxWorkflowTasks: '8', workflowCache: '300' })).toEqual({
      role: 'workflows',
      maxActivities: 0,
      maxWorkflowTasks: 8,
      maxCachedWorkflows: 300,
    });
    expect(resolveWorkerLayout({ activitiesOnly: true, maxActivities: '50' })).toEqual({
      role: 'activities',
      maxActivities: 50,
      maxWorkflowTasks: 0,
      maxCachedWorkflows: 0,
    });
  });
  it('refuses both roles off, and slots outside 1..limit, naming the flag and the value', () => {
    /** The message of resolveWorkerLayout's refusal: always INVALID_INPUT. */
    const refused = (f: Parameters<typeof resolveWorkerLayout>[0]): string => {
      const err = refusal(() => resolveWorkerLayout(f));
      expect(err.code).toBe('INVALID_INPUT');
      return err.message;
    };
    expect(refused({ workflowsOnly: true, activitiesOnly: true })).toMatch(/--workflows-only and --activities-only/);
    expect(refused({ maxActivities: '0' })).toContain('--max-activities "0"');
    expect(refused({ maxActivities: '2001' })).toContain('--max-activities "2001"');
    expect(refused({ maxActivities: '1.5' })).toContain('--max-activities "1.5"');
    expect(refused({ maxWorkflowTasks: '501' })).toContain('--max-workflow-tasks "501"');
    expect(refused({ workflowCache: '0' })).toContain('--workflow-cache "0"');
    expect(refused({ workflowCache: '30' })).toContain(
      '--workflow-cache "30": must be at least 2 and at least --max-workflow-tasks (40)',
    );
    expect(resolveWorkerLayout({ workflowCache: '30', maxWorkflowTasks: '30' }).maxCachedWorkflows).toBe(30);
    expect(refused({ workflowCache: '100001' })).toContain('--workflow-cache "100001"');
    expect(refused({ activitiesOnly: true, workflowCache: '10' })).toContain(
      '--workflow-cache "10" with --activities-only',
    );
    expect(refused({ activitiesOnly: true, maxWorkflowTasks: '4' })).toContain(
      '--max-workflow-tasks "4" with --activities-only',
    );
  });
});
