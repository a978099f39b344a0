import { WavegateError } from '../core/errors';

/**
 * The `--listen` flag of the servers (the gateway, the board, the witness), in a module of its own: a command that
 * parses it loads nothing else of another command (the gateway's command module loads the Temporal client).
 */

/** `host:port` (IPv6 in brackets), port 0-65535. */
export function parseListen(value: string): { host: string; port: number } {
  const m = /^(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9.-]+)):(\d{1,5})$/.exec(value);
  const port = m ? Number(m[3]) : NaN;
  if (!m || port > 65535)
    throw new WavegateError(
      'INVALID_INPUT',
      `--listen: must be host:port (IPv6 as [::1]:port) (got ${JSON.stringify(value)})`,
      { field: '--listen', value },
    );
  return { host: m[1] ?? m[2]!, port };
}
