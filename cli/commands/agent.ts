import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { resolve } from 'node:path';
import type { Command } from 'commander';
import { agentKeyPin } from '../../core/agent-auth';
import { WavegateError } from '../../core/errors';
import { enrollIdentity, loadIdentity } from '../../agent/identity';
import { identityRotation } from '../../agent/identity-rotation';
import { gatewayClient } from '../../agent/gateway-client';
import { checkHomeDir, gatewayUrl, prepareStateDir, readFlagFile } from '../../agent/inputs';
import { parseTrustFlags } from '../../agent/pins';
import { startAgent } from '../../agent/run';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { action } from '../run';

const log = (line: string) => process.stdout.write(`${line}\n`);
const DEVICE_ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

function agentVersion(): string {
  try {
    return (
      (JSON.parse(readFileSync(resolve(PROJECT_ROOT, 'package.json'), 'utf8')) as { version?: string }).version ??
      'unknown'
    );
  } catch {
    return 'unknown';
  }
}

interface AgentFlags {
  deviceId: string;
  gateway: string;
  trust: string[];
  stateDir: string;
  key: string;
  home?: string;
  gatewayCa?: string;
  insecureHttp?: boolean;
}

export function register(program: Command): void {
  const agent = program
    .command('agent')
    // `agent enroll --state-dir` and `agent --state-dir`: a subcommand's options are its own.
    .enablePositionalOptions()
    .description(
      'Run the pull agent on a device: sync with its twin through the gateway, verify each desired revision against this device\'s own pins, apply it locally under the device apply lock, and report (docs/formats.md, "Gateway HTTP API")',
    )
    .option('--device-id <id>', "this device's id in the inventory")
    .option('--gateway <url>', 'the gateway, e.g. https://gateway.example:8443')
    .option(
      '--trust <dir|profile=file>',
      "this device's own pins: a profiles directory (DIR/<profile>/trust.yaml) or <profile>=<trust.yaml>; repeatable",
      (v: string, all: string[] = []) => [...all, v],
    )
    .option('--state-dir <dir>', "the agent's state directory (0700): report.json, pins and payload downloads")
    .option('--key <file>', 'the identity key `wavegate agent enroll` made (0600)')
    .option(
      '--home <dir>',
      'the device home whose .wavegate/ holds markers, floors and apply locks, and where commands run (default $HOME)',
    )
    .option('--gateway-ca <file>', "a CA certificate (PEM) to trust for the gateway, beside the system's")
    .option(
      '--insecure-http',
      'allow a plain http:// gateway off loopback (behind a TLS-terminating proxy or on a private link only)',
    )
    .action(
      action(async (flags: AgentFlags) => {
        for (const [flag, value] of [
          ['--device-id', flags.deviceId],
          ['--gateway', flags.gateway],
          ['--state-dir', flags.stateDir],
          ['--key', flags.key],
        ] as const) {
          if (!value)
            throw new WavegateError(
              'INVALID_INPUT',
              `${flag}: required (wavegate agent --device-id ID --gateway URL --trust DIR --state-dir DIR --key FILE)`,
              { field: flag },
            );
        }
        if (!DEVICE_ID.test(flags.deviceId))
          throw new WavegateError(
            'INVALID_INPUT',
            `--device-id: must be 1-128 letters, digits, ".", "_", ":" or "-" (got ${JSON.stringify(flags.deviceId)})`,
            { field: '--device-id', value: flags.deviceId },
          );
        // Every input checked before anything starts: each refusal names its flag and the path or value.
        const url = gatewayUrl(flags.gateway, !!flags.insecureHttp);
        const trust = parseTrustFlags(flags.trust ?? []);
        const pair = loadIdentity(flags.key);
        const ca = flags.gatewayCa ? readFlagFile('--gateway-ca', flags.gatewayCa) : undefined;
        // Like the audit directory: made 0700, a looser mode that lets others only read it is fixed and
        // said; one that lets others write it, or a file, is refused (report.json, pins, payloads live here).
        const stateDir = prepareStateDir('--state-dir', flags.stateDir, log);
        const home = checkHomeDir(flags.home ?? (process.env.HOME || homedir()));
        const running = startAgent({
          deviceId: flags.deviceId,
          // A getter: an identity key rotation replaces the pair's key in place (agent/identity-rotation.ts).
          gateway: gatewayClient({
            url,
            device: flags.deviceId,
            secretKey: () => pair.secretKey,
            ...(ca ? { ca } : {}),
          }),
          trust,
          stateDir,
          home,
          version: agentVersion(),
          key: pair,
          rotation: identityRotation({
            stateDir,
            keyFile: resolve(flags.key),
            deviceId: flags.deviceId,
            key: pair,
            log,
          }),
          log,
        });
        log(
          `agent ${flags.deviceId} started (identity ${agentKeyPin(pair.publicKey)}, gateway ${url}); SIGTERM stops it`,
        );
        const stop = (signal: string) => {
          log(`${signal}: stopping (an apply in flight keeps running on the device; the next start reattaches to it)`);
          running.stop();
        };
        process.once('SIGTERM', () => stop('SIGTERM'));
        process.once('SIGINT', () => stop('SIGINT'));
        await running.done;
      }),
    );

  agent
    .command('enroll')
    .description(
      "Create this device's Ed25519 identity key (0600, in a 0700 state directory; never overwritten) and print its pin for the inventory's agentKey",
    )
    .requiredOption('--state-dir <dir>', "the agent's state directory")
    .action(
      action((flags: { stateDir: string }) => {
        const { keyFile, pin } = enrollIdentity(flags.stateDir, (line) => process.stderr.write(`${line}\n`));
        process.stderr.write(
          `identity key written to ${keyFile} (mode 0600); put this pin in the inventory as the device's agentKey:\n`,
        );
        log(pin);
      }),
    );

  agent
    .command('pin')
    .description('Print the agentKey pin of an identity key file')
    .requiredOption('--key <file>', 'the identity key')
    .action(
      action((flags: { key: string }) => {
        log(agentKeyPin(loadIdentity(flags.key).publicKey));
      }),
    );
}
