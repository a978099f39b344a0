import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { countHostPattern, expandHostPattern, looksLikeAnsible, parseAnsibleInventory } from '../../../core/ansible';
import { parseInventory } from '../../../core/inventory';

const read = (p: string) => readFileSync(p, 'utf8');

describe('Ansible inventory import', () => {
  it('expands host patterns', () => {
    expect(expandHostPattern('web[01:03].x')).toEqual(['web01.x', 'web02.x', 'web03.x']);
    expect(expandHostPattern('db-[a:c]')).toEqual(['db-a', 'db-b', 'db-c']);
    expect(expandHostPattern('n[1:7:3]')).toEqual(['n1', 'n4', 'n7']);
  });

  it('counts a pattern arithmetically and refuses one above the limit without expanding it', () => {
    expect(countHostPattern('web-[0:9999999]')).toBe(10_000_000);
    expect(countHostPattern('w[0:999]-[a:j]')).toBe(10_000);
    expect(() => expandHostPattern('web-[0:9999999]')).toThrow(
      /expands to 10000000 hosts; a pattern must name at most 100000/,
    );
    expect(() => expandHostPattern('n[0:9:0]')).toThrow(/the step must be at least 1/);
    expect(() => expandHostPattern('n[9:0]')).toThrow(/names no host/);
  });

  it('refuses an inventory whose patterns together name more than 100,000 hosts, naming the line', () => {
    const text = `[web]\n${Array.from({ length: 3 }, (_, i) => `g${i}-[0:49999]`).join('\n')}\n`;
    expect(() => parseAnsibleInventory(text, 'big.ini')).toThrow(
      /big\.ini: invalid Ansible inventory at line 4: host pattern "g2-\[0:49999\]": expands to 50000 hosts; only 0 of the 100000 host names an inventory may hold are left/,
    );
  });

  it('imports an INI inventory: hosts, ports, users, groups as pools, vars as fields', () => {
    const text = read('examples/plan/fleet.ini');
    expect(looksLikeAnsible(text, 'fleet.ini')).toBe(true);
    const inv = parseInventory(parseAnsibleInventory(text, 'fleet.ini'), 'fleet.ini');
    expect(inv.devices.map((d) => d.id)).toEqual([
      'web01.example.net',
      'web02.example.net',
      'web03.example.net',
      'web04.example.net',
      'web05.example.net',
      'desk-a',
      'desk-b',
      'desk-c',
      'kiosk-01',
    ]);
    const web05 = inv.devices.find((d) => d.id === 'web05.example.net')!;
    expect(web05).toMatchObject({
      host: '10.0.1.5',
      port: 2222,
      user: 'wavegate',
      pool: 'web',
      class: 'server',
      os: 'debian-12',
      runtimes: ['app'],
    });
    expect(web05.labels).toEqual({ 'group/web': 'true', 'group/production': 'true', env: 'production' });
    expect(inv.devices.find((d) => d.id === 'web01.example.net')).toMatchObject({
      host: 'web01.example.net',
      port: 22,
    });
    expect(inv.devices.find((d) => d.id === 'kiosk-01')).toMatchObject({
      pool: 'office',
      updateClass: 'left-behind',
      class: 'kiosk',
    });
    expect(inv.pools.web!.disruptionBudget).toBe(0.25);
    expect(inv.pools.office!.disruptionBudget).toBe(0.05);
  });

  it('imports a YAML inventory with nested children and host vars', () => {
    const text = read('examples/plan/fleet.ansible.yaml');
    expect(looksLikeAnsible(text, 'fleet.ansible.yaml')).toBe(true);
    expect(looksLikeAnsible(read('examples/plan/fleet-20.yaml'), 'fleet-20.yaml')).toBe(false);
    const inv = parseInventory(parseAnsibleInventory(text, 'fleet.ansible.yaml'), 'fleet.ansible.yaml');
    expect(inv.devices).toHaveLength(7);
    expect(inv.devices.find((d) => d.id === 'web05.example.net')).toMatchObject({
      port: 2222,
      labels: { env: 'production', rack: 'r2', 'group/web': 'true' },
    });
    expect(inv.devices.find((d) => d.id === 'desk-b')).toMatchObject({
      pool: 'office',
      class: 'desktop',
      updateClass: 'best-effort',
      host: '10.0.2.12',
    });
    expect(inv.pools.web!.disruptionBudget).toBe(0.25);
  });

  it('nearer group vars win over farther ones, host vars over groups; winrm means windows', () => {
    const text =
      '[all:vars]\nansible_user=a\nwavegate_class=server\n[pcs]\npc1 ansible_connection=winrm\npc2 wavegate_class=laptop\n[pcs:vars]\nwavegate_class=desktop\n';
    const doc = parseAnsibleInventory(text, 'h.ini') as { devices: Array<Record<string, unknown>> };
    expect(doc.devices).toEqual([
      expect.objectContaining({ id: 'pc1', class: 'desktop', os: 'windows', pool: 'pcs' }),
      expect.objectContaining({ id: 'pc2', class: 'laptop', pool: 'pcs' }),
    ]);
  });

  it('rejects malformed inventories with the file and line', () => {
    expect(() => parseAnsibleInventory('[web\nhost1\n', 'bad.ini')).toThrow(/bad\.ini: .* at line 1: .*section header/);
    expect(() => parseAnsibleInventory('[web]\nhost1 ansible_port\n', 'bad.ini')).toThrow(
      /bad\.ini: .* at line 2: .*key=value/,
    );
    expect(() => parseAnsibleInventory('all:\n  hostz: {}\n', 'bad.yaml')).toThrow(/all\.hostz: unknown key/);
    // A bad value travels on to the inventory schema, which names the field.
    expect(() =>
      parseInventory(parseAnsibleInventory('[web]\nh1 ansible_user=u ansible_port=99999\n', 'p.ini'), 'p.ini'),
    ).toThrow(/devices\[0\]\.port/);
  });
});
