import { ansibleByText, isAnsibleDocument, parseAnsibleInventory } from '../core/ansible';
import { WavegateError } from '../core/errors';
import { parseInventory, type Inventory } from '../core/inventory';
import { parseDocumentText, readText } from './files';

export type InventoryFormat = 'wavegate' | 'ansible';

/**
 * Read an inventory file: a wavegate inventory (YAML or JSON), or an Ansible inventory (INI, or YAML
 * with `all:`/groups of `hosts:`) imported through core/ansible. Any problem is INVALID_INPUT naming
 * the file and the field.
 */
export function readInventory(path: string): { inventory: Inventory; format: InventoryFormat } {
  const text = readText(path);
  const format = path.endsWith('.json') ? 'json' : 'yaml';
  const ansible = () => ({
    inventory: parseInventory(parseAnsibleInventory(text, path), path),
    format: 'ansible' as const,
  });
  if (format === 'yaml' && ansibleByText(text, path)) return ansible();
  // Parsed once (a 100,000-device YAML file takes seconds), and the parsed document says which format it is.
  const data = parseDocumentText(text, path, format);
  if (format === 'yaml' && isAnsibleDocument(data)) return ansible();
  // parseInventory checks the document's shape first, as readDocument would have.
  return { inventory: parseInventory(data, path), format: 'wavegate' };
}

/** The inventory in a file, whichever format it is in. */
export function loadInventory(path: string): Inventory {
  return readInventory(path).inventory;
}

/**
 * The inventory a rollout runs on. The worker reads this file again when it snapshots the fleet, and
 * reads wavegate inventories only: an Ansible file is refused here, before anything starts, rather
 * than failing the snapshot.
 */
export function loadRolloutInventory(path: string, field = '--inventory'): Inventory {
  const { inventory, format } = readInventory(path);
  if (format === 'ansible') {
    throw new WavegateError(
      'INVALID_INPUT',
      `${field} ${path}: an Ansible inventory; a rollout needs a wavegate inventory (the worker reads it again at snapshot time). \`wavegate plan\` reads Ansible inventories`,
      { field, value: path, contentFree: true },
    );
  }
  return inventory;
}
