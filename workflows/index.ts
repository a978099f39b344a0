/**
 * Every workflow the worker registers. Workflow code imports only core/ and @temporalio/workflow.
 *
 * Each workflow's module is loaded when an execution of that type first runs, not here. Why: the worker's reusable
 * V8 context evaluates the modules an execution loads once for EVERY cached execution, so with plain re-exports a
 * device twin carried the rollout's, the registry's and every other workflow's code (and paid the CPU of evaluating
 * it at each start and each replay after an eviction). A twin now loads only its own module and what it imports
 * (bench/twin-memory.ts, bench/README.md "Worker memory per cached twin"). The workflow type is the export's name.
 */
import type * as Canary from './canary';
import type * as DeviceTwin from './device-twin';
import type * as Freeze from './freeze';
import type * as Membership from './membership';
import type * as Preflight from './preflight';
import type * as Presence from './presence';
import type * as ProfileLock from './profile-lock';
import type * as Registry from './registry';
import type * as Rollout from './rollout';
import type * as Slice from './slice';

export const rolloutWorkflow: typeof Rollout.rolloutWorkflow = (...args) =>
  (require('./rollout') as typeof Rollout).rolloutWorkflow(...args);
export const rolloutSliceWorkflow: typeof Slice.rolloutSliceWorkflow = (...args) =>
  (require('./slice') as typeof Slice).rolloutSliceWorkflow(...args);
export const revisionRegistryWorkflow: typeof Registry.revisionRegistryWorkflow = (...args) =>
  (require('./registry') as typeof Registry).revisionRegistryWorkflow(...args);
export const nightlyCanaryWorkflow: typeof Canary.nightlyCanaryWorkflow = (...args) =>
  (require('./canary') as typeof Canary).nightlyCanaryWorkflow(...args);
export const preflightWorkflow: typeof Preflight.preflightWorkflow = (...args) =>
  (require('./preflight') as typeof Preflight).preflightWorkflow(...args);
export const membershipWorkflow: typeof Membership.membershipWorkflow = (...args) =>
  (require('./membership') as typeof Membership).membershipWorkflow(...args);
export const deviceTwinWorkflow: typeof DeviceTwin.deviceTwinWorkflow = (...args) =>
  (require('./device-twin') as typeof DeviceTwin).deviceTwinWorkflow(...args);
export const profileLockWorkflow: typeof ProfileLock.profileLockWorkflow = (...args) =>
  (require('./profile-lock') as typeof ProfileLock).profileLockWorkflow(...args);
export const presenceWorkflow: typeof Presence.presenceWorkflow = (...args) =>
  (require('./presence') as typeof Presence).presenceWorkflow(...args);
export const freezeWorkflow: typeof Freeze.freezeWorkflow = (...args) =>
  (require('./freeze') as typeof Freeze).freezeWorkflow(...args);
