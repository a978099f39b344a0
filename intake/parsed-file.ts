import { readBytes } from './files';

/**
 * A file the worker reads on every activity (trust.yaml for each device's apply, an inventory for each
 * snapshot page), parsed once per content: the bytes are read every time and compared with the ones
 * parsed last, so any edit, however quick, is parsed afresh. A file that cannot be read is handed to
 * `parse` every time (it reports why, or decides there is none), and what `parse` throws is not kept;
 * a FIFO, a device or an oversized file counts as unreadable (intake/files.ts readBytes).
 * At most `limit` files are held; the oldest goes first.
 */
export function parsedPerContent<T>(limit: number): (path: string, parse: () => T) => T {
  const held = new Map<string, { bytes: Buffer; value: T }>();
  return (path, parse) => {
    let bytes: Buffer | undefined;
    try {
      // Bounded, regular files only (a FIFO here would stall the worker): anything else is parse's to refuse.
      bytes = readBytes(path);
    } catch {
      bytes = undefined;
    }
    const known = held.get(path);
    if (known && bytes && known.bytes.equals(bytes)) return known.value;
    const value = parse();
    if (bytes) {
      held.delete(path);
      if (held.size >= limit) held.delete(held.keys().next().value!);
      held.set(path, { bytes, value });
    }
    return value;
  };
}
