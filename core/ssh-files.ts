import { WavegateError } from './errors';
import type { Device } from './inventory';

/*
 * The SSH files a rollout's devices name (ssh.key, ssh.knownHosts, the agent): only the worker reads
 * them, at connect. `start` and `plan` ask a worker whether it can (activities/preflight.ts), and what it
 * answers is turned into a refusal here, naming the devices each problem stops, never a file's content.
 */

/** Each file once (a fleet of 10,000 devices names a few paths), with the hosts a known_hosts file must pin. */
export interface SshFilesQuestion {
  /** Every `ssh.key` path the devices name. */
  keys: string[];
  /** Every `ssh.knownHosts` path, with the `host:port` of each device that has no `ssh.hostKey` (pinned by the file). */
  knownHosts: Array<{ path: string; hosts: string[] }>;
  /** Whether a device logs in through the worker's SSH agent (`ssh.agent: true`). */
  agent: boolean;
}

/** A file the worker could not use as the devices need it; never a word of its content. */
export interface SshFileProblem {
  field: 'ssh.key' | 'ssh.knownHosts' | 'ssh.agent';
  /** The path (absent for ssh.agent). */
  path?: string;
  problem: string;
  /** For ssh.knownHosts: the `host:port` it lists no key for (the rest of the file was readable). */
  hosts?: string[];
}

/** The devices' SSH files, each once: what the worker must be able to read to log in to them. */
export function sshFilesOf(devices: readonly Device[]): SshFilesQuestion {
  const keys = new Set<string>();
  const knownHosts = new Map<string, Set<string>>();
  let agent = false;
  for (const d of devices) {
    if (d.transport !== 'ssh') continue;
    // The agent wins over a key file at connect (device/transport/ssh.ts credentials).
    if (d.ssh.agent) agent = true;
    else if (d.ssh.key) keys.add(d.ssh.key);
    if (d.ssh.knownHosts) {
      const hosts = knownHosts.get(d.ssh.knownHosts) ?? new Set<string>();
      if (!d.ssh.hostKey) hosts.add(`${d.host}:${d.port}`);
      knownHosts.set(d.ssh.knownHosts, hosts);
    }
  }
  return { keys: [...keys], knownHosts: [...knownHosts].map(([path, hosts]) => ({ path, hosts: [...hosts] })), agent };
}

/** Devices that have no host key pinned at all: the worker refuses to connect to them (host-key), whatever they present. */
export function unpinnedDevices(devices: readonly Device[]): string[] {
  return devices.filter((d) => d.transport === 'ssh' && !d.ssh.hostKey && !d.ssh.knownHosts).map((d) => d.id);
}

/** The devices a problem the worker reported stops, as the transport reads each device's settings. */
function devicesOf(problem: SshFileProblem, devices: readonly Device[]): string[] {
  const ssh = devices.filter((d) => d.transport === 'ssh');
  const hosts = problem.hosts ? new Set(problem.hosts) : undefined;
  return ssh
    .filter((d) => {
      if (problem.field === 'ssh.agent') return !!d.ssh.agent;
      if (problem.field === 'ssh.key') return !d.ssh.agent && d.ssh.key === problem.path;
      if (d.ssh.knownHosts !== problem.path) return false;
      return !hosts || (!d.ssh.hostKey && hosts.has(`${d.host}:${d.port}`));
    })
    .map((d) => d.id);
}

const SSH_FIXES: Record<SshFileProblem['field'], string> = {
  'ssh.key':
    "put the private key at that path on the worker's host, readable by the user the worker runs as (or name another file in the inventory's ssh.key)",
  'ssh.knownHosts':
    "list each host's key in that file on the worker's host, or pin ssh.hostKey in the inventory (`wavegate init`, `wavegate fleet repin`)",
  'ssh.agent': 'run the worker with SSH_AUTH_SOCK set to an ssh-agent holding the login key',
};

/** A list of ids a person can read: the first ten, and how many more. */
function someIds(ids: readonly string[]): string {
  return ids.length > 10 ? `${ids.slice(0, 10).join(', ')} and ${ids.length - 10} more` : ids.join(', ');
}

/**
 * The SSH files the worker could not use, as one refusal: each problem with the devices it stops and the
 * fix. Every such device would be refused at the snapshot (config) and fail: a start that knows it now
 * starts nothing (exit 2), and a plan says so.
 */
export function sshRefusal(
  problems: readonly SshFileProblem[],
  devices: readonly Device[],
  worker: string,
): WavegateError {
  const lines = problems.map((p) => {
    const ids = devicesOf(p, devices);
    // The reader's words start with the path: said once, after the field.
    const said = p.path && p.problem.startsWith(`${p.path}: `) ? p.problem.slice(p.path.length + 2) : p.problem;
    const what = p.hosts ? `${said}: ${someIds(p.hosts)}` : said;
    return `  ${p.field}${p.path ? ` ${p.path}` : ''}: ${what} (${ids.length} device(s): ${someIds(ids)}); ${SSH_FIXES[p.field]}`;
  });
  const stopped = new Set(problems.flatMap((p) => devicesOf(p, devices)));
  return new WavegateError(
    'INVALID_INPUT',
    `worker ${worker} cannot log in to ${stopped.size} of the ${devices.length} device(s) in scope: each would be refused at the snapshot (config). Nothing was started and no device was contacted.\n${lines.join('\n')}`,
    { field: problems[0]!.field, ...(problems[0]!.path ? { value: problems[0]!.path } : {}), contentFree: true },
  );
}
