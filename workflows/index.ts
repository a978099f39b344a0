// Every workflow the worker registers. Workflow code imports only core/ and @temporalio/workflow.
export { rolloutWorkflow } from './rollout';
export { rolloutSliceWorkflow } from './slice';
export { revisionRegistryWorkflow } from './registry';
export { nightlyCanaryWorkflow } from './canary';
export { preflightWorkflow } from './preflight';
export { membershipWorkflow } from './membership';
export { deviceTwinWorkflow } from './device-twin';
export { profileLockWorkflow } from './profile-lock';
export { presenceWorkflow } from './presence';
