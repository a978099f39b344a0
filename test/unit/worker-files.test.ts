import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { WavegateError } from '../../core/errors';
import { loadInventory } from '../../intake/inventory';
import {
  fileUnderRoots,
  readUnderRoots,
  resolveInventoryRoots,
  sameDirectory,
  WORKER_INVENTORY_ROOTS,
} from '../../intake/worker-files';
import { scratchDir } from '../support/harness';
import { refusal } from '../support/refusal';

/**
 * Files an input names are read only under the roots the process was configured with (real paths: no
 * `..` or link escapes), and a refusal of one says nothing of its content (intake/worker-files.ts).
 */
const scratch = scratchDir('worker-files');
afterAll(() => scratch.cleanup());

const root = join(scratch.dir, 'inventories');
const outside = join(scratch.dir, 'secrets');
mkdirSync(join(root, 'sub'), { recursive: true });
mkdirSync(outside, { recursive: true });
const SECRET = '5f3c9a7be81d2046c4a1f0e97d3b5c28a6e4f1d09b7c3a5e8f2d6b4c0a9e7f13';
writeFileSync(join(outside, 'audit.key'), `${SECRET}\n`, { mode: 0o600 });
const FLEET = 'devices:\n  - { id: d1, host: 127.0.0.1, port: 22, user: u, pool: p, class: c, os: linux }\n';
writeFileSync(join(root, 'fleet.yaml'), FLEET);
// A link inside the root to the secret, and a directory link out of it.
symlinkSync(join(outside, 'audit.key'), join(root, 'key-link.yaml'));
symlinkSync(outside, join(root, 'sub', 'out'));
symlinkSync(join(root, 'fleet.yaml'), join(root, 'alias.yaml'));

const read = (path: string, roots = [root]) =>
  readUnderRoots('inventoryPath', path, roots, WORKER_INVENTORY_ROOTS, 'wavegate inventory', (p) => loadInventory(p));

describe('a path an input names is read only under the configured roots', () => {
  it('reads a file under a root, and a link to a file under it, by the real path', () => {
    expect(fileUnderRoots('inventoryPath', join(root, 'fleet.yaml'), [root], WORKER_INVENTORY_ROOTS)).toBe(
      join(root, 'fleet.yaml'),
    );
    expect(fileUnderRoots('inventoryPath', join(root, 'alias.yaml'), [root], WORKER_INVENTORY_ROOTS)).toBe(
      join(root, 'fleet.yaml'),
    );
    expect(read(join(root, 'fleet.yaml')).devices.map((d) => d.id)).toEqual(['d1']);
  });

  it.each([
    ['a file outside every root', join(outside, 'audit.key')],
    ['".." out of the root', join(root, '..', 'secrets', 'audit.key')],
    ['a link in the root to a file outside', join(root, 'key-link.yaml')],
    ['a path through a directory link out of the root', join(root, 'sub', 'out', 'audit.key')],
    ['a relative path', 'secrets/audit.key'],
  ])('refuses %s, naming the field, the path, the roots and how to allow it', (_, path) => {
    const err = refusal(() => read(path), WavegateError);
    expect(err.code).toBe('INVALID_INPUT');
    expect(err.message).toContain(`inventoryPath ${JSON.stringify(path)}: outside the directories this worker reads`);
    expect(err.message).toContain(root);
    expect(err.message).toContain('--inventory-root <dir>');
    expect(err.message).not.toContain(SECRET.slice(0, 8));
  });

  it('with no roots configured, reads nothing and says how to allow it', () => {
    const err = refusal(() => read(join(root, 'fleet.yaml'), []), WavegateError);
    expect(err.message).toMatch(/not read: this worker reads inventories and canary specs from no directory/);
    expect(err.message).toContain('$WAVEGATE_INVENTORY_ROOTS');
  });

  it('a missing file under a root is said as such, without reading anything', () => {
    const err = refusal(() => read(join(root, 'gone.yaml')), WavegateError);
    expect(err.message).toContain('cannot be read on this host');
  });

  it("a canary's profiles root must be the worker's own, links resolved", () => {
    symlinkSync(root, join(scratch.dir, 'root-link'));
    expect(sameDirectory(join(scratch.dir, 'root-link'), root)).toBe(true);
    expect(sameDirectory(outside, root)).toBe(false);
    expect(sameDirectory('inventories', root)).toBe(false);
  });

  it('the roots come from --inventory-root, else the variable; each must be a directory', () => {
    expect(resolveInventoryRoots([root], { WAVEGATE_INVENTORY_ROOTS: outside })).toEqual([root]);
    expect(resolveInventoryRoots(undefined, { WAVEGATE_INVENTORY_ROOTS: `${root}:${outside}` })).toEqual([
      root,
      outside,
    ]);
    expect(resolveInventoryRoots(undefined, {})).toEqual([]);
    const err = refusal(() => resolveInventoryRoots([join(outside, 'audit.key')], {}), WavegateError);
    expect(err.message).toBe(`--inventory-root ${JSON.stringify(join(outside, 'audit.key'))}: not a directory`);
  });
});

describe('a refusal of a file under a root names the file, the field and the position, never a value', () => {
  const refusalOf = (name: string, text: string) => {
    writeFileSync(join(root, name), text);
    return refusal(() => read(join(root, name)), WavegateError).message;
  };

  it('YAML the parser refuses: the line and column, not the line itself', () => {
    const message = refusalOf('broken.yaml', `devices:\n  - id: ${SECRET}: [x\n`);
    expect(message).toMatch(
      /^inventoryPath ".*broken\.yaml": not valid YAML at line \d+, column \d+ \(values not shown/,
    );
    expect(message).not.toContain(SECRET.slice(0, 8));
  });

  it('JSON the parser refuses: the position', () => {
    const message = refusalOf('broken.json', `{"devices": [${SECRET}]}`);
    expect(message).toMatch(/not valid JSON at character \d+/);
    expect(message).not.toContain(SECRET.slice(0, 8));
  });

  it('a document of the wrong shape (a key file read as YAML): the field paths, not the values', () => {
    expect(refusalOf('key.yaml', `${SECRET}\n`)).toMatch(/not a valid wavegate inventory: 1 problem, at \(root\)/);
    const message = refusalOf(
      'fields.yaml',
      `devices:\n  - id: a\n    host: ${SECRET}\n    port: x-${SECRET}\n    ${SECRET}: 1\n`,
    );
    expect(message).toContain('devices[0].port');
    expect(message).toContain('devices[0] (an unknown field)');
    expect(message).not.toContain(SECRET.slice(0, 8));
  });
});
