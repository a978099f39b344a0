import { statSync } from 'node:fs';
import { parseAgentKey } from '../core/agent-auth';
import { WavegateError } from '../core/errors';
import type { Device } from '../core/inventory';
import { loadInventory } from '../intake/inventory';

/**
 * The agent identity pins the gateway checks requests against: each device's `agentKey` from the
 * inventory. Read at start (a bad file is refused then: exit 2), read again on SIGHUP or when the
 * file's mtime or size changes (looked at no more than once a second). A reload that fails keeps the
 * pins it had and says so: a half-written inventory must not lock every device out.
 */
export interface AgentPins {
  /** The device's public key; null: the device has no agentKey; undefined: not in the inventory. */
  keyOf(device: string): Uint8Array | null | undefined;
  /** Every key the device may sign with now (during an identity key rotation's overlap, two); absent: keyOf's. */
  keysOf?(device: string): Uint8Array[] | null | undefined;
  /** The device's inventory record (for its first sync: which profiles it is in scope of), or undefined. */
  deviceOf(device: string): Device | undefined;
  reload(why: string): void;
  readonly devices: number;
}

export function inventoryPins(path: string, log: (line: string) => void, now: () => number = Date.now): AgentPins {
  let keys = new Map<string, Uint8Array | null>();
  let records = new Map<string, Device>();
  let stamp = '';
  let lookedAt = 0;
  const fileStamp = () => {
    const st = statSync(path);
    return `${st.mtimeMs}:${st.size}`;
  };
  const read = () => {
    const seenStamp = fileStamp();
    const next = new Map<string, Uint8Array | null>();
    const nextRecords = new Map<string, Device>();
    for (const device of loadInventory(path).devices) {
      next.set(
        device.id,
        device.transport === 'agent' && device.agentKey ? (parseAgentKey(device.agentKey) ?? null) : null,
      );
      nextRecords.set(device.id, device);
    }
    keys = next;
    records = nextRecords;
    stamp = seenStamp;
  };
  try {
    read();
  } catch (err) {
    if (err instanceof WavegateError) throw err;
    throw new WavegateError(
      'INVALID_INPUT',
      `--inventory ${path}: cannot read the file (${(err as NodeJS.ErrnoException).code ?? String(err)})`,
      { field: '--inventory', value: path },
    );
  }
  const withKeys = () => [...keys.values()].filter((k) => k !== null).length;
  log(`inventory ${path}: ${keys.size} devices, ${withKeys()} with an agentKey`);

  const pins: AgentPins = {
    deviceOf: (device) => records.get(device),
    keyOf(device) {
      const t = now();
      if (t - lookedAt >= 1_000) {
        lookedAt = t;
        try {
          if (fileStamp() !== stamp) pins.reload('the file changed');
        } catch (err) {
          log(
            `inventory ${path}: cannot stat (${(err as NodeJS.ErrnoException).code ?? String(err)}); keeping the pins loaded before`,
          );
        }
      }
      return keys.has(device) ? keys.get(device) : undefined;
    },
    reload(why) {
      try {
        read();
        log(`inventory ${path} reloaded (${why}): ${keys.size} devices, ${withKeys()} with an agentKey`);
      } catch (err) {
        // Not read again until it changes once more: one line per bad version of the file.
        try {
          stamp = fileStamp();
        } catch {
          /* reported on the next look */
        }
        log(
          `inventory ${path}: reload (${why}) failed, keeping the pins loaded before: ${(err as Error).message.split('\n').slice(0, 3).join(' ')}`,
        );
      }
    },
    get devices() {
      return keys.size;
    },
  };
  return pins;
}
