import { resolve } from 'node:path';
import { createInterface } from 'node:readline';
import type { Command } from 'commander';
import { acceptMismatch, decideRepin, describePin, parseAcceptFingerprint, repinRefusal } from '../../core/host-repin';
import { WavegateError } from '../../core/errors';
import { scanTimeoutMs } from '../../core/init-keys';
import { readPinnableInventory, withHostKey, writePinnedInventory } from '../../intake/inventory-pin';
import { shellWord } from '../../intake/scaffold';
import { action, EXIT_FAILED, EXIT_OK } from '../run';
import { scanHostKey } from './init';

/**
 * `wavegate fleet repin <device>`: a re-keyed host's new key, pinned only with the operator's
 * confirmation (core/host-repin.ts). It reads the key the host presents the way init does (wavegate's
 * own SSH client, no login), prints the old pin and the new key, and writes the inventory (atomically,
 * the rest of the file kept: intake/inventory-pin.ts) only when the operator answers y on a terminal or
 * names that exact key with --accept.
 */

interface RepinFlags {
  inventory?: string;
  inventoryUrl?: string;
  accept?: string;
  scanTimeout: string;
}

const out = (line: string) => process.stdout.write(`${line}\n`);

/** y/N on the terminal: anything but y or yes is no. */
function confirm(question: string): Promise<boolean> {
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  return new Promise((done) => {
    rl.question(question, (answer) => {
      done(/^\s*y(es)?\s*$/i.test(answer)); // before close(), whose event would answer no first
      rl.close();
    });
    rl.on('close', () => done(false)); // Ctrl-D: no
  });
}

async function repin(id: string, opts: RepinFlags): Promise<number> {
  if (opts.inventoryUrl !== undefined || (opts.inventory !== undefined && /^https?:\/\//i.test(opts.inventory))) {
    const url = opts.inventoryUrl ?? opts.inventory!;
    throw new WavegateError(
      'INVALID_INPUT',
      `--inventory-url ${url}: an inventory served over HTTP is not a file repin can write; pin the new key where that registry keeps the device (its ssh.hostKey), or give the inventory file with --inventory <file>`,
      { field: '--inventory-url', value: url },
    );
  }
  if (!opts.inventory)
    throw new WavegateError(
      'INVALID_INPUT',
      '--inventory: required: the inventory file that pins the device (wavegate fleet repin <device> --inventory <fleet.yaml>)',
      { field: '--inventory' },
    );
  const accept = opts.accept === undefined ? undefined : parseAcceptFingerprint(opts.accept);
  const timeoutMs = scanTimeoutMs(opts.scanTimeout);
  const path = resolve(opts.inventory);
  const file = readPinnableInventory(path, id);
  const { device, pin } = file;
  const refusal = repinRefusal(device, path);
  if (refusal) throw refusal;

  let presented: { type: string; fingerprint: string };
  try {
    presented = await scanHostKey(device.host, device.port, timeoutMs);
  } catch (err) {
    throw new WavegateError(
      'UNAVAILABLE',
      `${device.id} (${device.host}:${device.port}): ${(err as Error).message}; nothing was written`,
    );
  }
  const where = `${device.id} (${device.host}:${device.port})`;
  const decision = decideRepin(pin, presented.fingerprint, accept);
  if (decision.verdict === 'mismatch') throw acceptMismatch(device, decision.accepted, presented);
  if (decision.verdict === 'unchanged') {
    out(
      `${where} presents ${presented.type} ${presented.fingerprint}, the key it is pinned to (${describePin(pin, path)}): nothing to re-pin, nothing written`,
    );
    return EXIT_OK;
  }
  out(`${where}: the host presents another key than the one pinned`);
  out(
    `  pinned:   ${pin.fingerprints.length ? pin.fingerprints.join(', ') : 'nothing (the worker refuses to dial it until a key is pinned)'}${pin.kind === 'none' ? '' : `  (${describePin(pin, path)})`}`,
  );
  out(`  presents: ${presented.type} ${presented.fingerprint}`);
  out(
    `Check the new fingerprint on the host itself (ssh-keygen -lf /etc/ssh/ssh_host_${presented.type.replace(/^ssh-|-.*$/g, '') || '<type>'}_key.pub, or your provider's console) before you accept it: a key you did not expect may be someone in the middle.`,
  );

  let confirmedBy: string;
  if (decision.verdict === 'pin') confirmedBy = '--accept';
  else if (process.stdin.isTTY && process.stderr.isTTY) {
    if (!(await confirm(`Pin ${presented.fingerprint} for ${device.id} in ${path}? [y/N] `))) {
      out('not pinned: nothing written');
      return EXIT_FAILED;
    }
    confirmedBy = 'confirmed on the terminal';
  } else {
    out('not pinned: no terminal to confirm on, and no --accept. When it is the key on the host, pin exactly it with:');
    out(
      `  ${['wavegate', 'fleet', 'repin', device.id, '--inventory', path, '--accept', presented.fingerprint].map(shellWord).join(' ')}`,
    );
    return EXIT_FAILED;
  }
  const text = withHostKey(file, presented.fingerprint);
  writePinnedInventory(file, text);
  out(
    `pinned ${device.id} to ${presented.type} ${presented.fingerprint} in ${path} (ssh.hostKey; ${confirmedBy}); was ${pin.fingerprints.length ? pin.fingerprints.join(', ') : 'unpinned'}`,
  );
  out(
    'Rollouts started from now on, fleet status and drift use it; a rollout already running keeps the inventory it started with.',
  );
  return EXIT_OK;
}

export function registerRepinCommand(fleet: Command): void {
  fleet
    .command('repin <device>')
    .description(
      'Re-pin a re-keyed host: read the key it presents now, show it beside the pinned one, and pin it in the inventory file only when you confirm it (y on a terminal, or --accept with that exact fingerprint). Exit 0 pinned or unchanged, 1 not confirmed, 2 refused',
    )
    .option(
      '--inventory <fleet.yaml>',
      'the inventory file that pins the device (written in place, atomically, the rest of it kept)',
    )
    .option(
      '--inventory-url <url>',
      'refused: an inventory served over HTTP is not a file to write (pin the key in that registry)',
    )
    .option(
      '--accept <SHA256:...>',
      'pin only if the host presents exactly this fingerprint (checked on the host itself); without a terminal, the only way to pin',
    )
    .option('--scan-timeout <ms>', 'time to read the host key', '5000')
    .action(action((id: string, opts: RepinFlags) => repin(id, opts)));
}
