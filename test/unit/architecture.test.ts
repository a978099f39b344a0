import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { WORKFLOW_SOURCE_DIRS } from '../../workers/versioning';
import { PRODUCT_DIRS, SOURCE_DIRS, sourceFiles } from '../support/source-files';

/**
 * The layering rules of docs/architecture.md ("Layers"), checked on the source itself: who may import
 * whom (one table, LAYER_RULES, read by one checker, layerViolations), no import cycle, message
 * definitions and activity proxies each in their one place, SSH only behind the transport seam, and
 * tsconfig.json covering every source folder. A change that breaks a rule fails here, naming the file
 * and the import.
 */

/** One import of a source file: the project file it names (or the package / node built-in), and whether it is erased at compile time. */
interface Edge {
  to: string;
  typeOnly: boolean;
}

const IMPORT =
  /(?:^|\n)\s*(?:import|export)\s+(type\s+)?[^'"]*?from\s+'([^']+)'|require\('([^']+)'\)|import\('([^']+)'\)/g;

/** What a file imports: project files (relative specifiers, resolved) by path, packages as `pkg:<name>`, built-ins as `node:<name>`. */
function importsOf(file: string, text = readFileSync(file, 'utf8')): Edge[] {
  const found: Edge[] = [];
  for (const m of text.matchAll(IMPORT)) {
    const spec = m[2] ?? m[3] ?? m[4];
    if (!spec) continue;
    const typeOnly = !!m[1];
    if (!spec.startsWith('.')) {
      found.push({
        to: spec.startsWith('node:')
          ? spec
          : `pkg:${spec
              .split('/')
              .slice(0, spec.startsWith('@') ? 2 : 1)
              .join('/')}`,
        typeOnly,
      });
      continue;
    }
    const base = resolve(dirname(file), spec);
    const candidates = [`${base}.ts`, join(base, 'index.ts'), base];
    const hit = candidates.find((c) => {
      try {
        return statSync(c).isFile();
      } catch {
        return false;
      }
    });
    if (hit) found.push({ to: relative(PROJECT_ROOT, hit), typeOnly });
  }
  return found;
}

const files = SOURCE_DIRS.flatMap((d) => sourceFiles(join(PROJECT_ROOT, d))).map((f) => relative(PROJECT_ROOT, f));
const edges = new Map(files.map((f) => [f, importsOf(join(PROJECT_ROOT, f))]));
/** The project-file imports only, as paths (for the cycle check). */
const graph = new Map([...edges].map(([f, es]) => [f, es.filter((e) => !e.to.includes(':')).map((e) => e.to)]));
const layer = (f: string) => f.split('/')[0]!;

/** The packages code that runs inside the workflow sandbox may import (besides project files). */
const WORKFLOW_SAFE_PACKAGES = ['pkg:@temporalio/workflow', 'pkg:@temporalio/common'];
/** Pure libraries core/ may use: no I/O, safe in workflow code. */
const PURE_PACKAGES = ['pkg:@noble/curves', 'pkg:@noble/hashes', 'pkg:yaml', 'pkg:zod'];

interface LayerRule {
  /** Layers whose files it may import (its own is always allowed). */
  imports: string[];
  /** Layers it may import types from only (erased at compile time). */
  typesFrom?: string[];
  /** Files of other layers it may import: a path, or a folder ending in `/`. */
  files?: string[];
  /** When set, the only packages and built-ins it may import at run time (types from any package are erased). */
  packages?: string[];
}

/**
 * Who may import whom, bottom up, as docs/architecture.md "Layers" states it. test/ imports anything,
 * and nothing else imports test/ but bench/, its shared fixtures in test/support/ (a layer missing
 * from every `imports` list, as test/ is, is imported by nobody).
 */
/**
 * What the CLI may import: every product layer but its own and activities/ (the worker registers those;
 * the CLI reaches a device through device/, a trail through audit/).
 */
const CLI_IMPORTS = PRODUCT_DIRS.filter((d) => d !== 'activities' && d !== 'cli');

const LAYER_RULES: Record<string, LayerRule> = {
  core: { imports: [], packages: PURE_PACKAGES },
  contracts: { imports: ['core'], packages: WORKFLOW_SAFE_PACKAGES },
  workflows: { imports: ['contracts', 'core'], typesFrom: ['activities'], packages: WORKFLOW_SAFE_PACKAGES },
  clients: { imports: ['contracts', 'core'] },
  intake: { imports: ['clients', 'contracts', 'core'] },
  audit: { imports: ['core', 'intake'] },
  device: { imports: ['clients', 'contracts', 'core', 'intake'] },
  activities: { imports: ['audit', 'clients', 'contracts', 'core', 'device', 'intake'] },
  sim: { imports: ['core', 'intake'] },
  http: { imports: ['core'] },
  gateway: { imports: ['clients', 'contracts', 'core', 'device', 'http', 'intake'], files: ['workers/connection.ts'] },
  agent: { imports: ['clients', 'contracts', 'core', 'device', 'intake'], files: ['workers/connection.ts'] },
  workers: { imports: ['activities', 'audit', 'clients', 'contracts', 'core', 'device', 'intake', 'sim', 'workflows'] },
  cli: { imports: CLI_IMPORTS },
  // The benchmarks drive the tests' shared fixtures (history bounds, the gateway flood) and a worker's activities.
  bench: { imports: [...CLI_IMPORTS, 'activities', 'cli'], files: ['test/support/'] },
  scripts: { imports: ['cli', 'clients', 'contracts', 'core', 'intake', 'workers', 'workflows'] },
};

/** Every import in `edgesOf` that a rule of LAYER_RULES forbids, as `<file> -> <import>`. */
function layerViolations(
  edgesOf: ReadonlyMap<string, readonly Edge[]>,
  rules: Record<string, LayerRule> = LAYER_RULES,
): string[] {
  const bad: string[] = [];
  for (const [file, es] of edgesOf) {
    const rule = rules[layer(file)];
    if (!rule) continue;
    for (const { to, typeOnly } of es) {
      if (to.includes(':')) {
        if (rule.packages && !typeOnly && !rule.packages.includes(to)) bad.push(`${file} -> ${to}`);
        continue;
      }
      const target = layer(to);
      const named = rule.files?.some((f) => (f.endsWith('/') ? to.startsWith(f) : to === f));
      if (
        target === layer(file) ||
        rule.imports.includes(target) ||
        named ||
        (typeOnly && rule.typesFrom?.includes(target))
      )
        continue;
      bad.push(`${file} -> ${to}${typeOnly ? ' (type)' : ''}`);
    }
  }
  return bad.sort();
}

/**
 * What only a device channel's implementations may use (device/channel/, over device/transport/
 * and device/twin/): dialling a device, the twin client, and each transport's own apply and reads.
 * Anything else in activities/ that used one would be a branch around the channel.
 */
const BEHIND_THE_CHANNEL = new Set([
  'connectDevice',
  'openSsh',
  'sshTransport',
  'sshDeviceSession',
  'localDeviceSession',
  'readTwin',
  'desireOnTwin',
  'reverifyTwin',
  'twinOf',
  'applyThroughTwin',
  'applyToDevice',
  'agentSnapshot',
  'agentBoardAnswer',
  'agentDriftAnswer',
  'agentOnline',
  'agentChecks',
  'agentErrorRate',
]);
const CHANNEL_SIDE = ['device/channel/', 'device/transport/', 'device/twin/'];
/** The session-level apply the SSH channel wraps (and the agent runs over its local session): it opens a session by default. */
const CHANNEL_SIDE_FILES = ['device/steps.ts'];

/** How `text` (the source of `file`) goes around the device channel: imports of what is behind it, and branches on a transport's name. */
function channelBypasses(file: string, text: string): string[] {
  const found: string[] = [];
  for (const m of text.matchAll(/(?:^|\n)\s*(?:import|export)\s+(type\s+)?\{([^}]*)\}\s*from\s*'([^']+)'/g)) {
    if (m[1]) continue;
    for (const spec of m[2]!.split(',')) {
      const [name] = spec.trim().split(/\s+as\s+/);
      if (name && !name.startsWith('type ') && BEHIND_THE_CHANNEL.has(name))
        found.push(`${file} imports ${name} from '${m[3]}'`);
    }
  }
  for (const m of text.matchAll(/(?:^|\n)\s*import\s+\*\s+as\s+\w+\s+from\s*'([^']*\/(?:transport|agent)\/[^']*)'/g))
    found.push(`${file} imports all of '${m[1]}'`);
  for (const m of text.matchAll(/\btransport\s*[!=]==?\s*['"`]|['"`][\w-]*['"`]\s*[!=]==?\s*[\w.?]*\btransport\b/g))
    found.push(`${file} branches on a transport: ${m[0]}`);
  return found;
}

describe('architecture rules (docs/architecture.md)', () => {
  it('finds the source to check', () => {
    expect(files.length).toBeGreaterThan(60);
    expect(graph.get('workflows/rollout.ts')).toContain('core/rollout/model.ts');
    expect(edges.get('clients/twin.ts')).toContainEqual({ to: 'contracts/twin.ts', typeOnly: false });
  });

  it('every import follows the layer rules: no import runs back up a layer', () => {
    expect(layerViolations(edges)).toEqual([]);
  });

  it('the layer check fails on the imports that ran back up (6c519b1), on a workflow taking an activity by value and on core reaching I/O', () => {
    const upward = new Map<string, Edge[]>([
      ['device/twin/twin-client.ts', [{ to: 'workflows/twin-messages.ts', typeOnly: false }]],
      ['intake/registry.ts', [{ to: 'workflows/registry.ts', typeOnly: false }]],
      ['audit/file.ts', [{ to: 'workers/toolchain.ts', typeOnly: false }]],
      ['sim/openssh.ts', [{ to: 'workers/dev-server.ts', typeOnly: false }]],
      [
        'workflows/canary.ts',
        [
          { to: 'activities/index.ts', typeOnly: false },
          { to: 'activities/index.ts', typeOnly: true },
        ],
      ],
      [
        'core/audit.ts',
        [
          { to: 'node:fs', typeOnly: false },
          { to: 'pkg:zod', typeOnly: false },
        ],
      ],
      ['contracts/twin.ts', [{ to: 'pkg:@temporalio/client', typeOnly: false }]],
      [
        'clients/twin.ts',
        [
          { to: 'contracts/twin.ts', typeOnly: false },
          { to: 'workflows/device-twin.ts', typeOnly: true },
        ],
      ],
      ['cli/main.ts', [{ to: 'test/support/cli.ts', typeOnly: false }]],
      [
        'bench/agent-scale.ts',
        [
          { to: 'test/support/history-bounds.ts', typeOnly: false },
          { to: 'test/e2e/x.test.ts', typeOnly: false },
        ],
      ],
    ]);
    expect(layerViolations(upward)).toEqual([
      'audit/file.ts -> workers/toolchain.ts',
      'bench/agent-scale.ts -> test/e2e/x.test.ts',
      'cli/main.ts -> test/support/cli.ts',
      'clients/twin.ts -> workflows/device-twin.ts (type)',
      'contracts/twin.ts -> pkg:@temporalio/client',
      'core/audit.ts -> node:fs',
      'device/twin/twin-client.ts -> workflows/twin-messages.ts',
      'intake/registry.ts -> workflows/registry.ts',
      'sim/openssh.ts -> workers/dev-server.ts',
      'workflows/canary.ts -> activities/index.ts',
    ]);
  });

  it('the checker reads a real file: a temp source with an upward import is caught', () => {
    const text =
      "import { STATE_DIR } from '../workers/toolchain';\nimport type { Activities } from '../activities';\n";
    const parsed = importsOf(join(PROJECT_ROOT, 'activities', 'x.ts'), text);
    expect(parsed).toEqual([
      { to: 'workers/toolchain.ts', typeOnly: false },
      { to: 'activities/index.ts', typeOnly: true },
    ]);
    expect(layerViolations(new Map([['activities/x.ts', parsed]]))).toEqual([
      'activities/x.ts -> workers/toolchain.ts',
    ]);
  });

  it('only cli/ (and bench/) import gateway/ and agent/; cli/commands/agent.ts runs the agent', () => {
    const importers = files.filter((f) =>
      graph.get(f)!.some((i) => ['gateway', 'agent'].includes(layer(i)) && layer(i) !== layer(f)),
    );
    expect(importers.filter((f) => !['cli', 'bench'].includes(layer(f)))).toEqual([]);
    expect(graph.get('cli/commands/agent.ts')).toContain('agent/run.ts');
  });

  it('message definitions and search attribute keys live in contracts/ only, and clients use them; activity proxies in workflows/activity-proxies.ts only', () => {
    const outside = (pattern: RegExp, home: (f: string) => boolean) =>
      files.filter((f) => !home(f) && pattern.test(readFileSync(join(PROJECT_ROOT, f), 'utf8')));
    expect(outside(/\bdefine(Signal|Update|Query|SearchAttributeKey)\b/, (f) => layer(f) === 'contracts')).toEqual([]);
    expect(outside(/\bproxy(Local)?Activities\b/, (f) => f === 'workflows/activity-proxies.ts')).toEqual([]);
    expect(outside(/^type Acts\b/m, () => false)).toEqual([]);
    // A client names a message by its definition, never by a string of its own (SQL and SSH channel
    // signals are not Temporal messages).
    const notTemporal = (f: string) => f.startsWith('audit/') || f.startsWith('device/transport/');
    expect(outside(/\.(query|signal|executeUpdate|startUpdate)(<[^>]*>)?\(\s*['"`]/, notTemporal)).toEqual([]);
  });

  it('the build id hashes every folder workflow code imports at run time', () => {
    const hashed = WORKFLOW_SOURCE_DIRS.map((d) => relative(PROJECT_ROOT, d));
    const bundled = new Set(
      files
        .filter((f) => layer(f) === 'workflows')
        .flatMap((f) =>
          edges
            .get(f)!
            .filter((e) => !e.typeOnly && !e.to.includes(':'))
            .map((e) => layer(e.to)),
        ),
    );
    expect([...bundled].filter((l) => !hashed.includes(l))).toEqual([]);
    expect(hashed).toContain('contracts');
  });

  it('tsconfig.json type-checks every source folder; tsconfig.build.json compiles every one the package runs', () => {
    const include = (file: string) =>
      (JSON.parse(readFileSync(join(PROJECT_ROOT, file), 'utf8')) as { include: string[] }).include;
    const withSources = readdirSync(PROJECT_ROOT, { withFileTypes: true })
      .filter((d) => d.isDirectory() && d.name !== 'node_modules' && !d.name.startsWith('.') && d.name !== 'dist')
      .map((d) => d.name)
      .filter((d) => sourceFiles(join(PROJECT_ROOT, d)).length > 0);
    expect(withSources.filter((d) => !include('tsconfig.json').includes(d))).toEqual([]);
    const runtime = withSources.filter((d) => !['test', 'bench', 'scripts'].includes(d));
    expect(runtime.filter((d) => !include('tsconfig.build.json').includes(d))).toEqual([]);
  });

  it('has no import cycle', () => {
    const cycles: string[] = [];
    const state = new Map<string, 'visiting' | 'done'>();
    const stack: string[] = [];
    const visit = (f: string) => {
      if (state.get(f) === 'done') return;
      if (state.get(f) === 'visiting') {
        cycles.push([...stack.slice(stack.indexOf(f)), f].join(' -> '));
        return;
      }
      state.set(f, 'visiting');
      stack.push(f);
      for (const i of graph.get(f) ?? []) visit(i);
      stack.pop();
      state.set(f, 'done');
    };
    for (const f of files) visit(f);
    expect(cycles).toEqual([]);
  });

  it('activities, device/ helpers and the CLI reach a device only through its channel: outside device/channel/, transport/ and twin/, nothing dials, reads a twin or branches on the transport', () => {
    const outside = files.filter(
      (f) =>
        ['activities', 'device', 'cli'].includes(layer(f)) &&
        !CHANNEL_SIDE.some((d) => f.startsWith(d)) &&
        !CHANNEL_SIDE_FILES.includes(f),
    );
    expect(outside).toContain('activities/health/index.ts');
    expect(outside).toContain('device/fleet.ts');
    const bad = outside.flatMap((f) => channelBypasses(f, readFileSync(join(PROJECT_ROOT, f), 'utf8')));
    expect(bad).toEqual([]);
  });

  it('the channel rule catches the branches it was written against (the code before the channel)', () => {
    // activities/index.ts and health.ts as they were: an agent branch beside an SSH session.
    const before = [
      "import { connectDevice, StepFailed, TransportError } from './transport';",
      "import { applyThroughTwin } from './agent/apply';",
      "import { agentChecks, agentOnline, twinOf, type AgentHealthAnswer } from './agent/health';",
      "          if (device.transport === 'agent') return await agentSnapshot(client, device, input.profile);",
    ].join('\n');
    expect(channelBypasses('activities/x.ts', before)).toEqual([
      "activities/x.ts imports connectDevice from './transport'",
      "activities/x.ts imports applyThroughTwin from './agent/apply'",
      "activities/x.ts imports agentChecks from './agent/health'",
      "activities/x.ts imports agentOnline from './agent/health'",
      "activities/x.ts imports twinOf from './agent/health'",
      "activities/x.ts branches on a transport: transport === '",
    ]);
    // Types and the channel itself are fine.
    expect(
      channelBypasses(
        'activities/x.ts',
        "import type { DeviceSession } from './transport';\nimport { channelFor, type TwinReader } from './channel';",
      ),
    ).toEqual([]);
  });

  it('SSH is reached only through the transport seam', () => {
    const bad = files.filter(
      (f) => !f.startsWith('device/transport/') && /\bopenSsh\b/.test(readFileSync(join(PROJECT_ROOT, f), 'utf8')),
    );
    expect(bad).toEqual([]);
  });
});
