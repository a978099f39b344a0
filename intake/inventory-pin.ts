import { chmodSync, statSync } from 'node:fs';
import { isAlias, isMap, isSeq, parseDocument, type Document } from 'yaml';
import { knownHostFingerprints } from '../intake/known-hosts';
import { looksLikeAnsible } from '../core/ansible';
import { WavegateError } from '../core/errors';
import type { PinSource } from '../core/host-repin';
import { parseInventory, type Device, type Inventory } from '../core/inventory';
import { showValue } from '../core/validation';
import { readDocument, readText, writeFileAtomic } from './files';

/**
 * The inventory file `fleet repin` edits (core/host-repin.ts): the device's entry found by id, where its
 * pin comes from, and the same file with that one device's `ssh.hostKey` set. A YAML file is edited as a
 * document (its comments, order and styles kept); a JSON file is rewritten with two-space indentation.
 * The file is replaced atomically, keeping its mode, and only if it is still the text that was read.
 */
export interface PinnableInventory {
  path: string;
  text: string;
  format: 'yaml' | 'json';
  inventory: Inventory;
  device: Device;
  /** The device's index in `devices`. */
  index: number;
  pin: PinSource;
}

type Raw = {
  defaults?: { ssh?: { hostKey?: unknown } };
  devices?: Array<{ id?: unknown; ssh?: { hostKey?: unknown } }>;
};

function knownHostsPins(file: string, host: string, port: number): string[] {
  try {
    return knownHostFingerprints(file, host, port);
  } catch {
    return []; // unreadable: no pin from it (the worker refuses the device the same way)
  }
}

/** The inventory file and the device `id` in it: INVALID_INPUT naming both when there is no such device. */
export function readPinnableInventory(path: string, id: string): PinnableInventory {
  const text = readText(path);
  const format = path.endsWith('.json') ? 'json' : 'yaml';
  if (format === 'yaml' && looksLikeAnsible(text, path)) {
    throw new WavegateError(
      'INVALID_INPUT',
      `--inventory ${path}: an Ansible inventory; fleet repin writes wavegate inventories (YAML or JSON). Check the key on the host and set wavegate_host_key=SHA256:... on ${showValue(id)}'s line by hand`,
      { field: '--inventory', value: path },
    );
  }
  // Read and bounded as every inventory is (depth, size); the text above is what gets edited.
  const raw = readDocument(path, format) as Raw;
  const inventory = parseInventory(raw, path);
  const index = inventory.devices.findIndex((d) => d.id === id);
  if (index < 0) {
    const ids = inventory.devices.map((d) => d.id);
    throw new WavegateError(
      'INVALID_INPUT',
      `<device> ${showValue(id)}: no such device in the inventory ${path} (devices: ${ids.slice(0, 10).join(', ')}${ids.length > 10 ? `, ... ${ids.length} in all` : ''})`,
      { field: '<device>', value: id },
    );
  }
  const device = inventory.devices[index]!;
  const own = raw.devices?.[index]?.ssh?.hostKey;
  const pin: PinSource =
    typeof own === 'string'
      ? { kind: 'device', fingerprints: [own] }
      : typeof raw.defaults?.ssh?.hostKey === 'string'
        ? { kind: 'defaults', fingerprints: [raw.defaults.ssh.hostKey] }
        : device.ssh.knownHosts
          ? {
              kind: 'known-hosts',
              file: device.ssh.knownHosts,
              fingerprints: knownHostsPins(device.ssh.knownHosts, device.host, device.port),
            }
          : { kind: 'none', fingerprints: [] };
  return { path, text, format, inventory, device, index, pin };
}

function setYamlSsh(doc: Document, index: number, field: 'hostKey' | 'key', value: string, path: string): void {
  const devices = doc.get('devices', true);
  const entry = isSeq(devices) ? devices.items[index] : undefined;
  const ssh = isMap(entry) ? entry.get('ssh', true) : undefined;
  // An alias shares its node with other entries: setting it would change them too.
  if (!isMap(entry) || isAlias(ssh) || (ssh !== undefined && !isMap(ssh))) {
    throw new WavegateError(
      'INVALID_INPUT',
      `--inventory ${path}: devices[${index}] ${isMap(entry) ? 'shares its ssh settings through a YAML alias' : 'is not a plain mapping'}; set its ssh.${field} by hand`,
      { field: '--inventory', value: path },
    );
  }
  doc.setIn(['devices', index, 'ssh', field], value);
}

/**
 * The file's text with the device's own `ssh.<field>` set to `value`, checked to read back as exactly that
 * (the same devices, this one's setting the new value); INVALID_STATE, nothing written, otherwise.
 */
function withSshSetting(file: PinnableInventory, field: 'hostKey' | 'key', value: string): string {
  let next: string;
  if (file.format === 'json') {
    const doc = JSON.parse(file.text) as {
      devices: Array<Record<string, unknown> & { ssh?: Record<string, unknown> }>;
    };
    const entry = doc.devices[file.index]!;
    entry.ssh = { ...(entry.ssh ?? {}), [field]: value };
    next = `${JSON.stringify(doc, null, 2)}\n`;
  } else {
    const doc = parseDocument(file.text);
    setYamlSsh(doc, file.index, field, value, file.path);
    next = doc.toString({ lineWidth: 0 }); // no re-folding: every line not edited stays as it was
  }
  const reread = parseInventory(file.format === 'json' ? JSON.parse(next) : parseDocument(next).toJS(), file.path);
  const device = reread.devices[file.index];
  if (
    reread.devices.length !== file.inventory.devices.length ||
    device?.id !== file.device.id ||
    device.ssh[field] !== value
  ) {
    throw new WavegateError(
      'INVALID_STATE',
      `--inventory ${file.path}: the edited inventory does not read back with ${file.device.id}'s ssh.${field} ${value}; nothing was written`,
    );
  }
  return next;
}

/** The file's text with the device's own `ssh.hostKey` set to `fingerprint`, checked to read back as that pin. */
export function withHostKey(file: PinnableInventory, fingerprint: string): string {
  return withSshSetting(file, 'hostKey', fingerprint);
}

/** The file's text with the device's own `ssh.key` set to `keyFile` (a rotated login key), checked to read back. */
export function withLoginKey(file: PinnableInventory, keyFile: string): string {
  return withSshSetting(file, 'key', keyFile);
}

/**
 * The file's text with the device's own `agentKey` set to `pin` (an identity key rotated and proven: `wavegate
 * rotation activate`), checked to read back as that pin; INVALID_STATE, nothing written, otherwise.
 */
export function withAgentKey(file: PinnableInventory, pin: string): string {
  let next: string;
  if (file.format === 'json') {
    const doc = JSON.parse(file.text) as { devices: Array<Record<string, unknown>> };
    doc.devices[file.index]!.agentKey = pin;
    next = `${JSON.stringify(doc, null, 2)}\n`;
  } else {
    const doc = parseDocument(file.text);
    const entry = (doc.get('devices', true) as { items?: unknown[] } | undefined)?.items?.[file.index];
    if (!isMap(entry))
      throw new WavegateError(
        'INVALID_INPUT',
        `--inventory ${file.path}: devices[${file.index}] is not a plain mapping; set its agentKey by hand`,
        { field: '--inventory', value: file.path },
      );
    doc.setIn(['devices', file.index, 'agentKey'], pin);
    next = doc.toString({ lineWidth: 0 });
  }
  const reread = parseInventory(file.format === 'json' ? JSON.parse(next) : parseDocument(next).toJS(), file.path);
  const device = reread.devices[file.index];
  if (
    reread.devices.length !== file.inventory.devices.length ||
    device?.id !== file.device.id ||
    device.agentKey !== pin
  )
    throw new WavegateError(
      'INVALID_STATE',
      `--inventory ${file.path}: the edited inventory does not read back with ${file.device.id}'s agentKey ${pin}; nothing was written`,
    );
  return next;
}

/** Replace the file at once, unless someone changed it since it was read; its mode is kept. */
export function writePinnedInventory(file: PinnableInventory, text: string): void {
  if (readText(file.path) !== file.text) {
    throw new WavegateError(
      'CONFLICT',
      `--inventory ${file.path}: changed since it was read (another writer); nothing was written, run it again`,
      { field: '--inventory', value: file.path },
    );
  }
  const mode = statSync(file.path).mode & 0o777;
  writeFileAtomic(file.path, text);
  chmodSync(file.path, mode);
}
