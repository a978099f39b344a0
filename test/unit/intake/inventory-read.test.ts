import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { parseAnsibleInventory } from '../../../core/ansible';
import { parseInventory } from '../../../core/inventory';
import { slicedValue } from '../../../core/yaml-slices';
import { readInventory } from '../../../intake/inventory';

const dir = mkdtempSync(join(tmpdir(), 'inventory-read-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function file(name: string, text: string): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

/** An inventory large enough to be read in slices (core/yaml-slices.ts). */
function largeInventoryText(n: number): string {
  return stringify({
    pools: { web: { disruptionBudget: '10%' }, office: { disruptionBudget: 0.25 } },
    defaults: { user: 'wavegate', runtimes: ['motd'], labels: { env: 'production' } },
    devices: Array.from({ length: n }, (_, i) => ({
      id: `dev-${i}`,
      host: `10.0.${i >> 8}.${i & 255}`,
      pool: i % 3 ? 'web' : 'office',
      ...(i % 7 === 0 ? { updateClass: 'best-effort', labels: { rack: `r${i % 5}` } } : {}),
      ...(i % 11 === 0 ? { port: 2222, class: 'desktop', os: 'debian-12' } : {}),
    })),
  });
}

describe('intake/inventory: an inventory file is parsed once, and reads as before', () => {
  it('a large YAML inventory (read in slices) is the inventory its whole document gives', () => {
    const text = largeInventoryText(2000);
    expect(slicedValue(text)).toBeDefined();
    const read = readInventory(file('large.yaml', text));
    expect(read.format).toBe('wavegate');
    expect(read.inventory).toEqual(parseInventory(parse(text), 'large.yaml'));
    expect(read.inventory.devices).toHaveLength(2000);
  });

  it('Ansible inventories are still told apart: by name, by a [group] first line, and by a YAML document of groups', () => {
    for (const name of ['fleet.ini', 'fleet.ansible.yaml']) {
      const text = readFileSync(`examples/plan/${name}`, 'utf8');
      const read = readInventory(file(name, text));
      expect(read.format, name).toBe('ansible');
      expect(read.inventory, name).toEqual(parseInventory(parseAnsibleInventory(text, join(dir, name)), name));
    }
    expect(
      readInventory(file('groups.inventory', '# groups\n[web]\nweb01 ansible_host=10.0.0.1 ansible_user=ops\n')).format,
    ).toBe('ansible');
    expect(readInventory(file('wavegate.yaml', readFileSync('examples/plan/fleet-20.yaml', 'utf8'))).format).toBe(
      'wavegate',
    );
  });

  it('what is not an inventory is refused as before, naming the file', () => {
    expect(() => readInventory(file('bad.yaml', 'devices: [\n'))).toThrow(/bad\.yaml: not valid YAML/);
    expect(() => readInventory(file('bad.json', '{"devices": '))).toThrow(/bad\.json: not valid JSON/);
    expect(() => readInventory(file('proto.yaml', 'devices:\n  - id: a\n    __proto__: x\n'))).toThrow(
      /proto\.yaml: invalid\n {2}devices\[0\]\.__proto__: is a reserved name/,
    );
    expect(() => readInventory(file('empty.yaml', '# nothing\n'))).toThrow(/empty\.yaml: invalid/);
  });
});
