import type { Command } from 'commander';
import { parseTokenFile } from '../../core/board';
import { WavegateError } from '../../core/errors';
import { resolveAuditLocation } from '../../activities/audit';
import { readFlagFile } from '../../intake/files';
import { loadInventory } from '../../intake/inventory';
import { profilesOptionHelp, resolveProfilesRoot } from '../../intake/profiles-root';
import { describeConnection, resolveConnectionSettings, type TemporalFlags } from '../../workers/connection';
import { LOOPBACK, startBoard } from '../board/server';
import { connectClient, withTemporalOptions } from '../client';
import { action } from '../run';
import { parseListen } from './gateway';
import { operatorName } from './rollout';

interface BoardFlags extends TemporalFlags {
  listen: string;
  httpsCert?: string;
  httpsKey?: string;
  tokenFile?: string;
  clientCa?: string;
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
  const tokens =
    flags.tokenFile === undefined
      ? undefined
      : parseTokenFile(
          readFlagFile('--token-file', flags.tokenFile).toString('utf8'),
          `--token-file ${flags.tokenFile}`,
        );
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
  return { listen: { ...listen, ...(tls ? { tls } : {}) }, tokens, pollMs, where, transports };
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
        'one "<name> <token>" per line: a browser logs in with a token, and <name> is recorded as who sent each control',
      )
      .option(
        '--client-ca <file>',
        "CA (PEM) of the operators' client certificates; the certificate's CN is recorded as who sent a control",
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
        },
        listen: setup.listen,
        ...(setup.tokens ? { tokens: setup.tokens } : {}),
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
        localOperator: operatorName(),
        pollMs: setup.pollMs,
        log,
      });
      const who = setup.tokens
        ? `${setup.tokens.length} token(s)${flags.clientCa ? ' or a client certificate' : ''}`
        : flags.clientCa
          ? 'client certificates'
          : `no login (loopback; controls are recorded as ${operatorName()})`;
      log(`board listening on ${board.url} (Temporal ${describeConnection(settings)}; ${who})`);
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
