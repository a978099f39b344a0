import { homedir } from 'node:os';
import { WavegateError } from '../core/errors';
import { readText } from './files';

/** One concrete `Host` entry of an OpenSSH client config, as `wavegate init --from-ssh-config` reads it. */
export interface SshConfigHost {
  /** The alias after `Host` (the device id). */
  alias: string;
  /** `HostName`, else the alias. */
  host: string;
  port?: number;
  user?: string;
  /** `IdentityFile`, with `~` expanded. */
  identityFile?: string;
  /** The line of the `Host` keyword, for messages. */
  line: number;
}

/**
 * The concrete hosts of an OpenSSH client config (`~/.ssh/config`): every `Host` alias that is not a
 * pattern (`*`, `?`, `!`), with its `HostName`, `Port`, `User` and first `IdentityFile`. As in OpenSSH
 * the first value of a keyword wins. `Match` blocks and `Include` are not followed (they are named in
 * `skipped`), and settings of `Host *` patterns are not inherited: what is pinned is only what the file
 * says of each host itself.
 */
export function parseSshConfig(text: string, source: string): { hosts: SshConfigHost[]; skipped: string[] } {
  const hosts: SshConfigHost[] = [];
  const skipped: string[] = [];
  let current: SshConfigHost[] = [];
  const lines = text.split(/\r?\n/);
  lines.forEach((raw, index) => {
    const lineNo = index + 1;
    const line = raw.trim();
    if (!line || line.startsWith('#')) return;
    const m = /^(\S+?)(?:\s*=\s*|\s+)(.*)$/.exec(line);
    if (!m) return;
    const keyword = m[1]!.toLowerCase();
    const value = unquote(m[2]!.trim());
    if (keyword === 'host') {
      current = [];
      for (const alias of value.split(/\s+/)) {
        if (/[*?!]/.test(alias)) {
          skipped.push(`${source}:${lineNo}: Host ${alias} (a pattern, not a host)`);
          continue;
        }
        const entry: SshConfigHost = { alias, host: alias, line: lineNo };
        hosts.push(entry);
        current.push(entry);
      }
      return;
    }
    if (keyword === 'match') {
      current = [];
      skipped.push(`${source}:${lineNo}: Match ${value} (Match blocks are not read)`);
      return;
    }
    if (keyword === 'include') {
      skipped.push(`${source}:${lineNo}: Include ${value} (not followed; name that file with --from-ssh-config)`);
      return;
    }
    for (const entry of current) {
      if (keyword === 'hostname' && entry.host === entry.alias) entry.host = value;
      else if (keyword === 'user' && entry.user === undefined) entry.user = value;
      else if (keyword === 'identityfile' && entry.identityFile === undefined)
        entry.identityFile = value.replace(/^~(?=\/|$)/, homedir());
      else if (keyword === 'port' && entry.port === undefined) {
        const port = Number(value);
        if (!/^\d+$/.test(value) || port < 1 || port > 65535) {
          throw new WavegateError(
            'INVALID_INPUT',
            `${source}:${lineNo}: Port of Host ${entry.alias}: must be a TCP port 1-65535 (got ${JSON.stringify(value)})`,
            { source, line: lineNo },
          );
        }
        entry.port = port;
      }
    }
  });
  return { hosts, skipped };
}

function unquote(value: string): string {
  return value.length >= 2 && value.startsWith('"') && value.endsWith('"') ? value.slice(1, -1) : value;
}

/** The hosts of the ssh config file at `path`. */
export function readSshConfig(path: string): { hosts: SshConfigHost[]; skipped: string[] } {
  return parseSshConfig(readText(path), path);
}
