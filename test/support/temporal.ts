import { temporal } from '@temporalio/proto';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { WAVEGATE_SEARCH_ATTRIBUTES } from '../../contracts/search-attributes';
import { ensureTools } from '../../workers/toolchain';
import { installQuietRuntime, WORKFLOWS_PATH } from '../../workers/worker';
import { builtOncePerRun } from './run-dir';

// The real dev server (`startDevServerEnv`) lives in workers/dev-server.ts: the benchmark uses it too.

/** The time-skipping test server, for long gate timers. */
export async function startTimeSkippingEnv(): Promise<TestWorkflowEnvironment> {
  const { testServer } = ensureTools();
  installQuietRuntime();
  const env = await TestWorkflowEnvironment.createTimeSkipping({
    server: { executable: { type: 'existing-path', path: testServer } },
  });
  // The test server has no flag for search attributes: register them through the operator service.
  const { IndexedValueType } = temporal.api.enums.v1;
  await env.connection.operatorService.addSearchAttributes({
    namespace: env.namespace ?? 'default',
    searchAttributes: Object.fromEntries(
      WAVEGATE_SEARCH_ATTRIBUTES.map((k) => [
        k.name,
        k.type === 'INT' ? IndexedValueType.INDEXED_VALUE_TYPE_INT : IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
      ]),
    ),
  });
  return env;
}

let bundle: Promise<WorkflowBundleWithSourceMap> | undefined;
/**
 * The workflow code, bundled once per test run (test/support/run-dir.ts) and once per process outside one:
 * webpack takes 4-5 s of CPU, and about 50 test files start workers. The sources do not change during a run.
 */
export function workflowBundle(): Promise<WorkflowBundleWithSourceMap> {
  bundle ??= builtOncePerRun('workflow-bundle.js', async () => {
    const { code } = await bundleWorkflowCode({ workflowsPath: WORKFLOWS_PATH, logger: quietLogger });
    return code;
  }).then((code) => ({ code, sourceMap: '' }));
  return bundle;
}

const noop = () => {};
const quietLogger = {
  log: noop,
  trace: noop,
  debug: noop,
  info: noop,
  warn: noop,
  error: (m: string) => console.error(m),
};
