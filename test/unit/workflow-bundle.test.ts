import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { prebuiltWorkflowBundle, WORKFLOW_BUNDLE_FILE, writeWorkflowBundle } from '../../workers/workflow-bundle';

/**
 * The workflow bundle the build ships (workers/workflow-bundle.ts) is loaded only while every file it was made
 * from is as it was: a worker must never run workflow code other than the build's. Made here from a compiled
 * workflows folder of two files (the entry and a module it requires), in a folder of the checkout so that
 * webpack finds @temporalio/workflow as it does from dist/.
 */
describe('the prebuilt workflow bundle', () => {
  let base: string;
  const entry = () => join(base, 'workflows', 'index.js');
  const greeting = () => join(base, 'lib', 'greeting.js');
  const GREETING = "exports.greeting = 'hello';\n";

  beforeAll(async () => {
    mkdirSync(join(PROJECT_ROOT, 'test-output'), { recursive: true });
    base = mkdtempSync(join(PROJECT_ROOT, 'test-output', 'workflow-bundle-'));
    mkdirSync(join(base, 'workflows'));
    mkdirSync(join(base, 'lib'));
    writeFileSync(
      entry(),
      "const { greeting } = require('../lib/greeting');\nexports.hello = async function hello() { return greeting; };\n",
    );
    writeFileSync(greeting(), GREETING);
    await writeWorkflowBundle(entry());
  }, 120_000);
  afterAll(() => rmSync(base, { recursive: true, force: true }));

  it('is written beside the workflows folder, stamped with the files and the packages it was made from', () => {
    const code = readFileSync(join(base, WORKFLOW_BUNDLE_FILE), 'utf8');
    const stamp = JSON.parse(code.slice(code.indexOf('{'), code.indexOf('\n'))) as {
      files: Record<string, string>;
      packages: Record<string, string>;
    };
    // The two modules, and the package.json files webpack read on its way (a change to one rebundles too).
    const files = Object.keys(stamp.files).sort();
    expect(files.filter((f) => f.endsWith('.js'))).toEqual(['lib/greeting.js', 'workflows/index.js']);
    expect(files.filter((f) => !f.endsWith('.js')).every((f) => f.endsWith('package.json'))).toBe(true);
    const sdk = JSON.parse(readFileSync(join(PROJECT_ROOT, 'node_modules/@temporalio/workflow/package.json'), 'utf8'));
    expect(stamp.packages['@temporalio/workflow']).toBe((sdk as { version: string }).version);
    // The workflow's own code is in it.
    expect(code).toContain('function hello()');
    expect(prebuiltWorkflowBundle(entry())?.code).toBe(code);
  });

  it('is not used once a file it was made from changed, and again once it is as it was', () => {
    writeFileSync(greeting(), "exports.greeting = 'bonjour';\n");
    expect(prebuiltWorkflowBundle(entry())).toBeUndefined();
    writeFileSync(greeting(), GREETING);
    expect(prebuiltWorkflowBundle(entry())).toBeDefined();
  });

  it('is not used once a file it was made from is gone', () => {
    rmSync(greeting());
    try {
      expect(prebuiltWorkflowBundle(entry())).toBeUndefined();
    } finally {
      writeFileSync(greeting(), GREETING);
    }
  });

  it('is not used without its stamp (a bundle written by hand, a damaged first line)', () => {
    const file = join(base, WORKFLOW_BUNDLE_FILE);
    const code = readFileSync(file, 'utf8');
    try {
      writeFileSync(file, code.slice(code.indexOf('\n') + 1));
      expect(prebuiltWorkflowBundle(entry())).toBeUndefined();
      writeFileSync(file, `${code.slice(0, 60)}${code.slice(code.indexOf('\n'))}`);
      expect(prebuiltWorkflowBundle(entry())).toBeUndefined();
    } finally {
      writeFileSync(file, code);
    }
    expect(prebuiltWorkflowBundle(entry())).toBeDefined();
  });

  it('is absent for a workflows folder never bundled (a checkout run from its sources bundles at start)', () => {
    expect(prebuiltWorkflowBundle(join(PROJECT_ROOT, 'workflows', 'index.ts'))).toBeUndefined();
  });
});
