// Rollout intake moved to intake/; kept only for test/workflow/registry.test.ts, which imports it from here.
export { prepareRollout } from '../intake/prepare';
