import { randomBytes } from 'node:crypto';
import { utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ed25519 } from '@noble/curves/ed25519.js';
import { afterAll, describe, expect, it } from 'vitest';
import { agentKeyPin } from '../../core/agent-auth';
import { inventoryPins } from '../../gateway/pins';
import { scratchDir } from '../support/harness';

/** The gateway's agentKey pins (gateway/pins.ts): read again on change, a bad reload keeps what it had. */
describe('gateway inventory pins', () => {
  const scratch = scratchDir('gateway-pins');
  afterAll(() => scratch.cleanup());
  const file = join(scratch.dir, 'inventory.yaml');
  const key = () => ed25519.getPublicKey(randomBytes(32));
  const write = (devices: object[], at: number) => {
    writeFileSync(file, JSON.stringify({ pools: { p: {} }, devices }));
    utimesSync(file, at / 1000, at / 1000);
  };

  it('answers a key, null (no agentKey) or undefined (unknown); re-reads a changed file at most once a second; keeps the old pins when the new file is bad', () => {
    const k1 = key();
    const k2 = key();
    write(
      [
        { id: 'a', pool: 'p', transport: 'agent', agentKey: agentKeyPin(k1) },
        { id: 's', pool: 'p', host: 'h', user: 'u' },
      ],
      1_000_000,
    );
    const lines: string[] = [];
    let now = 10_000;
    const pins = inventoryPins(
      file,
      (l) => lines.push(l),
      () => now,
    );
    expect(pins.keyOf('a')).toEqual(k1);
    expect(pins.keyOf('s')).toBeNull();
    expect(pins.keyOf('zz')).toBeUndefined();

    write([{ id: 'a', pool: 'p', transport: 'agent', agentKey: agentKeyPin(k2) }], 2_000_000);
    now += 500;
    expect(pins.keyOf('a')).toEqual(k1); // looked less than a second ago
    now += 1_000;
    expect(pins.keyOf('a')).toEqual(k2);
    expect(lines.at(-1)).toMatch(/reloaded \(the file changed\): 1 devices, 1 with an agentKey/);

    writeFileSync(file, '{ "devices": [ { "id": "a", ');
    utimesSync(file, 3_000, 3_000);
    now += 1_000;
    expect(pins.keyOf('a')).toEqual(k2);
    expect(lines.at(-1)).toMatch(/reload \(the file changed\) failed, keeping the pins loaded before/);
    const failures = lines.length;
    now += 1_000;
    pins.keyOf('a');
    expect(lines).toHaveLength(failures); // one line per bad version of the file, not one a second
    expect(lines.join('\n')).not.toContain(agentKeyPin(k1).slice(8));
  });
});
