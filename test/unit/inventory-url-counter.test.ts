import { describe, expect, it } from 'vitest';
import { DeviceCounter, parseInventoryDeadline } from '../../intake/inventory-url';

/**
 * The device count of an inventory page, taken in its bytes as they stream (intake/inventory-url.ts):
 * it must never be below what JSON.parse keeps in `devices` (else the 100,000 bound is passed while
 * reading), whatever the chunking, strings holding brackets and quotes, escapes, nesting or spacing.
 */
function countInChunks(text: string, chunk: number): number {
  const counter = new DeviceCounter();
  const bytes = Buffer.from(text, 'utf8');
  for (let i = 0; i < bytes.length; i += chunk) counter.push(bytes.subarray(i, i + chunk));
  return counter.count;
}

const PAGES: string[] = [
  '{"devices":[],"next":null}',
  '{"devices":[{}],"next":null}',
  '{"devices":[{},{},{}]}',
  ' {\n "next" : "/p?x=]" ,\n "devices" : [ {} , { "id": "a,b]" } ,\t[1,[2,3]] , "s\\"]," , 7, null, true ] }',
  '{"pools":{"devices":[1,2,3]},"devices":[{"devices":[{},{}]}],"defaults":{"x":["devices",[1,2]]}}',
  '{"\\u0064evices":[{},{},{},{}],"next":null}',
  '{"de\\u0076ices":[{}, {}]}',
  '{"devicesX":[{},{}],"devices":[{"id":"é, ü, 💥, ]"}]}',
  `{"devices":[${Array.from({ length: 50 }, (_, i) => JSON.stringify({ id: `d-${i}`, labels: { 'k"]': `v\\${i},` } })).join(',')}],"next":"/n"}`,
  '{"next":"\\"devices\\":[1,2,3]","devices":[1]}',
];

describe('DeviceCounter: the devices of a page counted while it streams', () => {
  it.each(PAGES.map((p, i) => [i, p] as const))(
    'page %i: the count JSON.parse keeps, in one chunk or byte by byte',
    (_i, page) => {
      const kept = (JSON.parse(page) as { devices: unknown[] }).devices.length;
      for (const chunk of [1, 2, 3, 7, page.length]) expect(countInChunks(page, chunk)).toBe(kept);
    },
  );

  it('a duplicate devices key is counted twice: never below what JSON.parse keeps (the last)', () => {
    expect(countInChunks('{"devices":[{},{},{}],"devices":[{}]}', 4)).toBe(4);
  });

  it('1.33 million empty devices are counted without building them, and a million levels of nesting cost nothing', () => {
    expect(countInChunks(`{"devices":[${'{},'.repeat(1_329_999)}{}]}`, 65_536)).toBe(1_330_000);
    expect(countInChunks(`{"devices":[${'['.repeat(1_000_000)}${']'.repeat(1_000_000)},{}]}`, 65_536)).toBe(2);
  });
});

describe('--inventory-deadline', () => {
  it('takes a duration from 1s to 1h; 120s by default; refuses anything else naming the flag and the value', () => {
    expect(parseInventoryDeadline(undefined)).toBe(120_000);
    expect(parseInventoryDeadline('90s')).toBe(90_000);
    expect(parseInventoryDeadline('1h')).toBe(3_600_000);
    for (const bad of ['0', '999ms', '2h', 'soon', '-5s', ''])
      expect(() => parseInventoryDeadline(bad)).toThrow(
        `--inventory-deadline ${JSON.stringify(bad)}: must be a duration from 1s to 1h`,
      );
  });
});
