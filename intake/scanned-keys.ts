import { existsSync, mkdirSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { WavegateError } from '../core/errors';
import { SCANNED_KEYS_KIND, ScannedKeysFile, type AcceptedKey, type ScannedHostKey } from '../core/init-keys';
import { parseWith } from '../core/validation';
import { readDocument, writeFileAtomic } from './files';

/**
 * The scanned-keys record of `wavegate init` (core/init-keys.ts, docs/formats.md): what the first run
 * read from each host and printed, kept beside the inventory it is for, so the second run pins exactly
 * those fingerprints. Written atomically, mode 0600; read through the bounded reader and validated
 * field by field.
 */

/** `fleet.yaml` → `fleet.init-scanned-keys.json`, beside it. */
export function scannedKeysPathFor(inventoryPath: string): string {
  const name = basename(inventoryPath).replace(/\.(ya?ml|json)$/i, '');
  return join(dirname(resolve(inventoryPath)), `${name}.init-scanned-keys.json`);
}

/**
 * The fingerprints a record holds, as accepted keys (each bound to the address it was read at). `flag`
 * names where the path came from in messages. Refused (INVALID_INPUT naming the flag and the path) when
 * there is none, when it is not a record, or when it was made for another inventory.
 */
export function readScannedKeys(path: string, inventoryPath: string, flag: string): AcceptedKey[] {
  if (!existsSync(path)) {
    throw new WavegateError(
      'INVALID_INPUT',
      `${flag}: no fingerprints recorded at ${path}; run init without ${flag} first, check the fingerprints it prints on each host, then run the command it prints`,
      { field: flag, value: path },
    );
  }
  let record: ScannedKeysFile;
  try {
    record = parseWith(ScannedKeysFile, readDocument(path, 'json'), path);
  } catch (err) {
    if (err instanceof WavegateError)
      throw new WavegateError('INVALID_INPUT', `${flag} ${err.message}`, { field: flag, value: path });
    throw err;
  }
  const inventory = resolve(inventoryPath);
  if (record.inventory !== inventory) {
    throw new WavegateError(
      'INVALID_INPUT',
      `${flag} ${path}: recorded for the inventory ${record.inventory}, not ${inventory}; accept the fingerprints of this init's own first run`,
      { field: flag, value: path },
    );
  }
  return record.hosts.map((h) => ({ id: h.id, host: h.host, port: h.port, fingerprint: h.fingerprint, from: path }));
}

/** Replace the record at once (a temp file in the same directory, then rename), mode 0600. */
export function writeScannedKeys(
  path: string,
  inventoryPath: string,
  hosts: ScannedHostKey[],
  now: Date = new Date(),
): void {
  const record: ScannedKeysFile = {
    kind: SCANNED_KEYS_KIND,
    version: 1,
    inventory: resolve(inventoryPath),
    scannedAt: now.toISOString(),
    hosts,
  };
  mkdirSync(dirname(path), { recursive: true });
  writeFileAtomic(path, `${JSON.stringify(record, null, 2)}\n`);
}
