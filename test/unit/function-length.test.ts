import { readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { PRODUCT_DIRS, sourceFiles } from '../support/source-files';

/**
 * No function over 150 lines (the developers' guide: "a long closure is a module waiting to be named").
 * The rooms that were split into their parts (the board's and the gateway's servers, the health checks, the audit stores)
 * hold none at all. Elsewhere the functions still over the limit are listed below with their length
 * today: a listed one may shrink (then lower or drop its entry), never grow, and no new one may appear.
 */
const MAX_LINES = 150;

/** Rooms with no function over MAX_LINES, no exception. */
const STRICT_ROOMS = ['cli/board/', 'gateway/', 'activities/health', 'audit/', 'http/'];

/**
 * Functions over the limit outside the strict rooms, `<file>#<name>` → lines today. `applyScript` is the
 * device's shell script as one template (docs/formats.md "The apply script"): its length is the script's.
 */
const KNOWN_LONG: Record<string, number> = {
  'device/transport/apply-script.ts#applyScript': 279,
};

interface LongFunction {
  key: string;
  lines: number;
}

/** Every function (declaration, method, arrow, expression) of `text` longer than `max` lines, named by its binding. */
function longFunctions(file: string, text: string, max = MAX_LINES): LongFunction[] {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.ES2022, true);
  const found: LongFunction[] = [];
  const nameOf = (node: ts.Node): string => {
    const named = (node as { name?: ts.Node }).name;
    if (named) return named.getText(source);
    const parent = node.parent;
    if (parent && (ts.isVariableDeclaration(parent) || ts.isPropertyAssignment(parent)))
      return parent.name.getText(source);
    return `(anonymous at line ${source.getLineAndCharacterOfPosition(node.getStart(source)).line + 1})`;
  };
  const visit = (node: ts.Node) => {
    if (ts.isFunctionLike(node) && 'body' in node && node.body) {
      const first = source.getLineAndCharacterOfPosition(node.getStart(source)).line;
      const last = source.getLineAndCharacterOfPosition(node.end).line;
      const lines = last - first + 1;
      if (lines > max) found.push({ key: `${file}#${nameOf(node)}`, lines });
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

const all = PRODUCT_DIRS.flatMap((d) => sourceFiles(join(PROJECT_ROOT, d))).flatMap((path) =>
  longFunctions(relative(PROJECT_ROOT, path), readFileSync(path, 'utf8')),
);

describe('function length (no function over 150 lines)', () => {
  it('finds functions by their binding, whatever their form', () => {
    const body = Array.from({ length: 160 }, (_, i) => `  const v${i} = ${i};`).join('\n');
    const text = [
      `export function declared() {\n${body}\n}`,
      `const arrow = () => {\n${body}\n};`,
      `class Stages {\n  method() {\n${body}\n  }\n}`,
      `function short() {\n  return 1;\n}`,
    ].join('\n');
    expect(longFunctions('x/y.ts', text).map((f) => f.key)).toEqual([
      'x/y.ts#declared',
      'x/y.ts#arrow',
      'x/y.ts#method',
    ]);
  });

  it('the board, the gateway, the health checks and the audit stores have none', () => {
    const strict = all.filter((f) => STRICT_ROOMS.some((room) => f.key.startsWith(room)));
    expect(strict).toEqual([]);
  });

  it('elsewhere, only the listed ones, none longer than listed', () => {
    const elsewhere = all.filter((f) => !STRICT_ROOMS.some((room) => f.key.startsWith(room)));
    const grown = elsewhere.filter((f) => !(f.key in KNOWN_LONG) || f.lines > KNOWN_LONG[f.key]!);
    expect(grown).toEqual([]);
  });

  it('the list holds no entry that is gone or shorter now (lower it as they shrink)', () => {
    const now = new Map(all.map((f) => [f.key, f.lines]));
    const stale = Object.entries(KNOWN_LONG).filter(([key, lines]) => now.get(key) !== lines);
    expect(stale).toEqual([]);
  });
});
