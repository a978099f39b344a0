import { randomBytes } from 'node:crypto';
import { closeSync, lstatSync, mkdirSync, openSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type { Command } from 'commander';
import { LOOPBACK, parseAccessFile, parsePublicUrl } from '../../core/board';
import { readSigningKeyFile } from '../../intake/checkpoint-keys';
import { WavegateError } from '../../core/errors';
import { resolveAuditLocation } from '../../audit/file';
import { readFlagFile } from '../../intake/files';
import { loadInventory } from '../../intake/inventory';
import { STATE_DIR } from '../../intake/package-layout';
import { profilesOptionHelp, resolveProfilesRoot } from '../../intake/profiles-root';
import { describeConnection, resolveConnectionSettings, type TemporalFlags } from '../../workers/connection';
import { startBoard } from '../board/server';
import { connectClient, withTemporalOptions } from '../client';
import { action } from '../run';
import { parseListen } from '../../http/listen';
import { operatorName } from './rollout';

interface BoardFlags extends TemporalFlags {
  listen: string;
  httpsCert?: string;
  httpsKey?: string;
  tokenFile?: string;
  clientCa?: string;
  approvalKey?: string;
  publicUrl?: string;
  stateDir: string;
  auditDir?: string;
  auditKeyFile?: string;
  auditStore?: string;
  inventory?: string;
  profiles?: string;
  pollInterval: string;
}

const log = (line: string) => process.stdout.write(`${line}\n`);

/**
 * Every refusal of the flags, before anything listens or connects (exit 2, naming the flag and value):
 * beyond loopback the board needs HTTPS and a way to tell operators apart (tokens or client certificates).
 */
export function boardSetup(flags: BoardFlags) {
  const listen = parseListen(flags.listen);
  if (!!flags.httpsCert !== !!flags.httpsKey)
    throw new WavegateError(
      'INVALID_INPUT',
      '--https-cert and --https-key: give both (HTTPS) or neither (HTTP on loopback)',
      {
        field: flags.httpsCert ? '--https-key' : '--https-cert',
      },
    );
  const tls =
    flags.httpsCert && flags.httpsKey
      ? {
          cert: readFlagFile('--https-cert', flags.httpsCert),
          key: readFlagFile('--https-key', flags.httpsKey),
          ...(flags.clientCa ? { clientCa: readFlagFile('--client-ca', flags.clientCa) } : {}),
        }
      : undefined;
  if (flags.clientCa && !tls)
    throw new WavegateError(
      'INVALID_INPUT',
      '--client-ca: client certificates need HTTPS; give --https-cert and --https-key',
      {
        field: '--client-ca',
        value: flags.clientCa,
      },
    );
  // Without --token-file or --client-ca, the board's own token file: every local account can reach a
  // loopback port, so a board never answers whoever asks (SECURITY.md, "The board").
  const own = flags.tokenFile === undefined && !flags.clientCa ? ownTokenFile(flags.stateDir) : undefined;
  const tokenFile = flags.tokenFile ?? own?.path;
  const access =
    tokenFile === undefined
      ? undefined
      : parseAccessFile(
          readTokenFile(flags.tokenFile ? '--token-file' : '--state-dir', tokenFile),
          `--token-file ${tokenFile}`,
        );
  const tokens = access?.tokens;
  const approvalKey =
    flags.approvalKey === undefined ? undefined : readSigningKeyFile('--approval-key', flags.approvalKey);
  const publicUrl = flags.publicUrl === undefined ? undefined : parsePublicUrl(flags.publicUrl);
  if (!LOOPBACK.has(listen.host) && (!tls || (!tokens && !flags.clientCa)))
    throw new WavegateError(
      'INVALID_INPUT',
      `--listen ${flags.listen}: beyond 127.0.0.1, ::1 or localhost the board needs HTTPS (--https-cert, --https-key) and a way to know its operators (--token-file or --client-ca)`,
      { field: '--listen', value: flags.listen },
    );
  const pollMs = Number(flags.pollInterval);
  if (!/^\d+$/.test(flags.pollInterval) || pollMs < 250 || pollMs > 60_000)
    throw new WavegateError(
      'INVALID_INPUT',
      `--poll-interval ${JSON.stringify(flags.pollInterval)}: must be 250-60000 ms`,
      {
        field: '--poll-interval',
        value: flags.pollInterval,
      },
    );
  const where = resolveAuditLocation(flags, {
    besideKey: (flags.auditStore ?? process.env.WAVEGATE_AUDIT_STORE ?? 'file') === 'file',
  });
  const transports = new Map<string, string>();
  if (flags.inventory)
    for (const d of loadInventory(flags.inventory).devices) transports.set(d.id, d.transport ?? 'ssh');
  return {
    listen: { ...listen, ...(tls ? { tls } : {}) },
    tokens,
    certRoles: access?.certRoles,
    approvalKey,
    tokenFile: own ? { ...own, name: tokens![0]!.name } : undefined,
    publicUrl,
    pollMs,
    where,
    transports,
  };
}

/** The board's own token file in the state directory. */
export const OWN_TOKEN_FILE = 'board.tokens';

/**
 * `<state dir>/board.tokens`, made on the first start (mode 0600, never replaced: O_EXCL) with one token
 * for the OS user who runs the board, or the one there: a file an operator may add `<name> <token>` lines
 * to, and delete to revoke every token (a new one is made at the next start).
 */
function ownTokenFile(stateDir: string): { path: string; made: boolean } {
  const path = join(stateDir, OWN_TOKEN_FILE);
  mkdirSync(stateDir, { recursive: true, mode: 0o700 });
  let fd: number;
  try {
    fd = openSync(path, 'wx', 0o600);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return { path, made: false };
    throw new WavegateError(
      'INVALID_INPUT',
      `--state-dir ${stateDir}: cannot make the board's token file ${path} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`,
      { field: '--state-dir', value: stateDir },
    );
  }
  try {
    writeSync(
      fd,
      `# wavegate board tokens: "<name> <token> [viewer|operator|approver]" per line (no role: operator); <name> is recorded as who sent each control\n${ownTokenName()} ${randomBytes(24).toString('hex')}\n`,
    );
  } finally {
    closeSync(fd);
  }
  return { path, made: true };
}

/** The generated token's name: the OS user's, as a token name may be spelled. */
function ownTokenName(): string {
  const name = operatorName()
    .replace(/[^A-Za-z0-9._@-]/g, '-')
    .slice(0, 64);
  return /^[A-Za-z0-9]/.test(name) ? name : 'operator';
}

/**
 * A token file's text: a regular file of this user's that no other account can read (mode 0600), or
 * INVALID_INPUT naming it and what to do; never its content.
 */
function readTokenFile(flag: string, path: string): string {
  let stat: ReturnType<typeof lstatSync>;
  try {
    stat = lstatSync(path);
  } catch (err) {
    throw new WavegateError(
      'INVALID_INPUT',
      `${flag} ${path}: cannot read it (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`,
      { field: flag, value: path },
    );
  }
  if (!stat.isFile())
    throw new WavegateError('INVALID_INPUT', `${flag} ${path}: the token file is not a regular file`, {
      field: flag,
      value: path,
    });
  if (process.getuid && stat.uid !== process.getuid())
    throw new WavegateError(
      'INVALID_INPUT',
      `${flag} ${path}: the token file belongs to uid ${stat.uid}, not to this user`,
      {
        field: flag,
        value: path,
      },
    );
  if ((stat.mode & 0o077) !== 0)
    throw new WavegateError(
      'INVALID_INPUT',
      `${flag} ${path}: the token file is readable by others (mode ${(stat.mode & 0o777).toString(8)}); chmod 600 it`,
      { field: flag, value: path },
    );
  return readFlagFile(flag, path).toString('utf8');
}

export function register(program: Command): void {
  withTemporalOptions(
    program
      .command('board')
      .description(
        'Serve the fleet board: every rollout with its true outcome, one rollout live (phases, gate evidence, devices worst first), controls with a reason, its audit trail verified. Loopback by default; beyond it HTTPS and tokens or client certificates',
      )
      .option('--listen <host:port>', 'address to serve on (port 0: any free port, printed)', '127.0.0.1:8080')
      .option('--https-cert <file>', "the board's TLS certificate (PEM); --tls-* are the Temporal connection's")
      .option('--https-key <file>', 'its private key (PEM)')
      .option(
        '--token-file <file>',
        'one "<name> <token> [viewer|operator|approver]" per line (default operator), and "cert:<CN> <role>" for a client certificate: a browser logs in with a token, <name> is recorded as who sent each control, and a viewer sends none',
      )
      .option(
        '--approval-key <file>',
        "the board's key (a `wavegate keygen` file, mode 0600), pinned with role: board in a profile's approvers.yaml: approvals from the board are signed naming the operator and their role, and count under the two-person rule",
      )
      .option(
        '--client-ca <file>',
        "CA (PEM) of the operators' client certificates; the certificate's CN is recorded as who sent a control",
      )
      .option(
        '--public-url <url>',
        'the origin browsers reach the board at through a proxy, e.g. https://board.example.com: its Host is answered and its Origin expected',
      )
      .option(
        '--state-dir <dir>',
        `without --token-file or --client-ca: where the board's own token file (${OWN_TOKEN_FILE}, mode 0600) is made or read`,
        STATE_DIR,
      )
      .option('--audit-dir <dir>', "the worker's audit directory (default $WAVEGATE_AUDIT_DIR, as `wavegate audit`)")
      .option('--audit-store <url>', 'read trails from this store, e.g. postgres://… (default $WAVEGATE_AUDIT_STORE)')
      .option(
        '--audit-key-file <path>',
        "the worker's audit key, to check every record's MAC (as `wavegate audit --verify`)",
      )
      .option(
        '--inventory <fleet.yaml>',
        "the inventory: the fleet view (each device verified now, as `fleet status` and `drift`; node-down verdicts; agents' last sync; converge) and each device's transport",
      )
      .option('--profiles <dir>', profilesOptionHelp())
      .option('--poll-interval <ms>', 'how often a live page is brought up to date', '1000'),
  ).action(
    action(async (flags: BoardFlags) => {
      const setup = boardSetup(flags);
      const settings = resolveConnectionSettings(flags);
      const client = await connectClient(settings);
      const board = await startBoard({
        sources: {
          client,
          audit: { ...(flags.auditStore ? { store: flags.auditStore } : {}), where: setup.where },
          transports: setup.transports,
          taskQueue: settings.taskQueue,
          profilesRoot: resolveProfilesRoot(flags.profiles !== undefined ? { flag: flags.profiles } : {}).dir,
          ...(flags.inventory ? { inventory: flags.inventory } : {}),
          ...(setup.approvalKey ? { approvalKey: setup.approvalKey } : {}),
        },
        listen: setup.listen,
        ...(setup.tokens ? { tokens: setup.tokens } : {}),
        ...(setup.certRoles?.size ? { certRoles: setup.certRoles } : {}),
        ...(setup.publicUrl ? { publicUrl: setup.publicUrl } : {}),
        ...(flags.inventory
          ? {
              fleet: {
                client,
                inventory: flags.inventory,
                ...(flags.profiles !== undefined ? { profiles: flags.profiles } : {}),
                temporal: flags,
              },
            }
          : {}),
        pollMs: setup.pollMs,
        log,
      });
      const who = setup.tokenFile
        ? `the token of "${setup.tokenFile.name}" in ${setup.tokenFile.path}`
        : setup.tokens
          ? `${setup.tokens.length} token(s)${flags.clientCa ? ' or a client certificate' : ''}`
          : 'client certificates';
      log(`board listening on ${board.url} (Temporal ${describeConnection(settings)}; sign in with ${who})`);
      // Said once, at start: where the token is and how to sign in with it, never the token itself.
      if (setup.tokenFile) {
        const { path, made } = setup.tokenFile;
        log(
          `board: ${made ? 'made' : 'reading'} ${path} (mode 0600, yours alone). Open ${setup.publicUrl?.origin ?? board.url} and paste its token line, or from a script: curl -H "Authorization: Bearer $(awk '!/^#/{print $2; exit}' ${path})" ${board.url}/api/rollouts`,
        );
      }
      await new Promise<void>((resolve) => {
        const stop = (signal: string) => {
          log(`${signal}: stopping the board`);
          resolve();
        };
        process.once('SIGTERM', () => stop('SIGTERM'));
        process.once('SIGINT', () => stop('SIGINT'));
      });
      await board.close();
      await client.connection.close().catch(() => {});
    }),
  );
}
