import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PROJECT_ROOT } from '../../intake/package-layout';

/**
 * The layering rules of docs/architecture.md, checked on the source itself: who may import whom, no
 * import cycle, and SSH only behind the transport seam. A change that breaks a rule fails here, naming
 * the file and the import.
 */
const SOURCE_DIRS = ['activities', 'agent', 'bench', 'cli', 'core', 'gateway', 'intake', 'sim', 'workers', 'workflows'];

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) out.push(...sourceFiles(path));
    else if (name.endsWith('.ts')) out.push(path);
  }
  return out;
}

const IMPORT = /(?:^|\n)\s*(?:import|export)\s[^'"]*?from\s+'([^']+)'|require\('([^']+)'\)|import\('([^']+)'\)/g;

/** Project-relative paths a file imports (relative specifiers only), resolved to files. */
function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const found: string[] = [];
  for (const m of text.matchAll(IMPORT)) {
    const spec = m[1] ?? m[2] ?? m[3];
    if (!spec || !spec.startsWith('.')) continue;
    const base = resolve(dirname(file), spec);
    const candidates = [`${base}.ts`, join(base, 'index.ts'), base];
    const hit = candidates.find((c) => {
      try {
        return statSync(c).isFile();
      } catch {
        return false;
      }
    });
    if (hit) found.push(relative(PROJECT_ROOT, hit));
  }
  return found;
}

const files = SOURCE_DIRS.flatMap((d) => sourceFiles(join(PROJECT_ROOT, d))).map((f) => relative(PROJECT_ROOT, f));
const graph = new Map(files.map((f) => [f, importsOf(join(PROJECT_ROOT, f))]));
const layer = (f: string) => f.split('/')[0]!;

/**
 * What only a device channel's implementations may use (activities/channel/, over activities/transport/
 * and activities/agent/): dialling a device, the twin client, and each transport's own apply and reads.
 * Anything else in activities/ that used one would be a branch around the channel.
 */
const BEHIND_THE_CHANNEL = new Set([
  'connectDevice', 'transportFor', 'openSsh', 'sshTransport', 'sshDeviceSession', 'localDeviceSession',
  'readTwin', 'desireOnTwin', 'reverifyTwin', 'twinOf', 'applyThroughTwin', 'applyToDevice', 'agentSnapshot',
  'agentBoardAnswer', 'agentDriftAnswer', 'agentOnline', 'agentChecks', 'agentErrorRate',
]);
const CHANNEL_SIDE = ['activities/channel/', 'activities/transport/', 'activities/agent/'];
/** The session-level apply the SSH channel wraps (and the agent runs over its local session): it opens a session by default. */
const CHANNEL_SIDE_FILES = ['activities/device-steps.ts'];

/** How `text` (the source of `file`) goes around the device channel: imports of what is behind it, and branches on a transport's name. */
function channelBypasses(file: string, text: string): string[] {
  const found: string[] = [];
  for (const m of text.matchAll(/(?:^|\n)\s*(?:import|export)\s+(type\s+)?\{([^}]*)\}\s*from\s*'([^']+)'/g)) {
    if (m[1]) continue;
    for (const spec of m[2]!.split(',')) {
      const [name] = spec.trim().split(/\s+as\s+/);
      if (name && !name.startsWith('type ') && BEHIND_THE_CHANNEL.has(name)) found.push(`${file} imports ${name} from '${m[3]}'`);
    }
  }
  for (const m of text.matchAll(/(?:^|\n)\s*import\s+\*\s+as\s+\w+\s+from\s*'([^']*\/(?:transport|agent)\/[^']*)'/g)) found.push(`${file} imports all of '${m[1]}'`);
  for (const m of text.matchAll(/\btransport\s*[!=]==?\s*['"`]|['"`][\w-]*['"`]\s*[!=]==?\s*[\w.?]*\btransport\b/g)) found.push(`${file} branches on a transport: ${m[0]}`);
  return found;
}

describe('architecture rules (docs/architecture.md)', () => {
  it('finds the source to check', () => {
    expect(files.length).toBeGreaterThan(60);
    expect(graph.get('workflows/rollout.ts')).toContain('core/rollout/model.ts');
  });

  it('core/ imports only core/', () => {
    const bad = files.filter((f) => layer(f) === 'core').flatMap((f) => graph.get(f)!.filter((i) => layer(i) !== 'core').map((i) => `${f} -> ${i}`));
    expect(bad).toEqual([]);
  });

  it('nothing in activities/, workers/, core/ or intake/ imports cli/; nothing outside test/ imports test/', () => {
    const bad = files.flatMap((f) =>
      graph
        .get(f)!
        .filter((i) => layer(i) === 'test' || (layer(i) === 'cli' && ['activities', 'workers', 'core', 'intake'].includes(layer(f))))
        .map((i) => `${f} -> ${i}`),
    );
    expect(bad).toEqual([]);
  });

  it('workflow code imports only workflows/ and core/ (activities by type only)', () => {
    const bad: string[] = [];
    for (const f of files.filter((x) => layer(x) === 'workflows')) {
      const text = readFileSync(join(PROJECT_ROOT, f), 'utf8');
      for (const i of graph.get(f)!) {
        if (layer(i) === 'workflows' || layer(i) === 'core') continue;
        const typeOnly = new RegExp(`import type [^;]*from '[./]*${i.replace(/(\/index)?\.ts$/, '').split('/').pop()}'`).test(text);
        if (!typeOnly) bad.push(`${f} -> ${i}`);
      }
    }
    expect(bad).toEqual([]);
  });

  it('gateway/ and agent/ import core/, intake/, activities/, workers/connection.ts (and the twin\'s message definitions); only cli/ (and the benchmarks) import them', () => {
    const allowed = (i: string) => ['core', 'intake', 'activities'].includes(layer(i)) || i === 'workers/connection.ts' || i === 'workflows/twin-messages.ts';
    const bad = files.flatMap((f) =>
      graph
        .get(f)!
        .filter((i) => (['gateway', 'agent'].includes(layer(f)) ? !allowed(i) && layer(i) !== layer(f) : ['gateway', 'agent'].includes(layer(i)) && !['cli', 'bench'].includes(layer(f)) && layer(f) !== layer(i)))
        .map((i) => `${f} -> ${i}`),
    );
    expect(bad).toEqual([]);
    expect(graph.get('cli/commands/agent.ts')).toContain('agent/run.ts');
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

  it('activities reach a device only through its channel: outside activities/channel/, transport/ and agent/, nothing dials, reads a twin or branches on the transport', () => {
    const outside = files.filter((f) => layer(f) === 'activities' && !CHANNEL_SIDE.some((d) => f.startsWith(d)) && !CHANNEL_SIDE_FILES.includes(f));
    expect(outside).toContain('activities/health.ts');
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
    expect(channelBypasses('activities/x.ts', "import type { DeviceSession } from './transport';\nimport { channelFor, type TwinReader } from './channel';")).toEqual([]);
  });

  it('SSH is reached only through the transport seam', () => {
    const bad = files.filter((f) => !f.startsWith('activities/transport/') && /\bopenSsh\b/.test(readFileSync(join(PROJECT_ROOT, f), 'utf8')));
    expect(bad).toEqual([]);
  });
});
