import type { Command } from 'commander';
import { WavegateError } from '../../core/errors';
import { isExpired, markDown, markUp, newVerdict, shortTime, verdictStanding } from '../../core/node-down';
import { loadInventory } from '../../intake/inventory';
import { readVerdicts, updateVerdicts, verdictsPathFor } from '../../intake/node-down';
import { action, EXIT_OK } from '../run';
import { operatorName } from './rollout';

/**
 * `wavegate fleet mark-down / mark-up / verdicts`: node-down verdicts in the file beside the inventory
 * (intake/node-down.ts). Marking down needs a device the inventory holds, a reason and a recheck command
 * (run on the control host by `fleet status` and by the worker before each rollout); a verdict expires
 * (30 days unless --expires says otherwise) and only another mark-down renews it.
 */

function inventoryDevice(inventoryPath: string, device: string): { id: string; host: string } {
  const found = loadInventory(inventoryPath).devices.find((d) => d.id === device);
  if (!found)
    throw new WavegateError(
      'INVALID_INPUT',
      `device ${JSON.stringify(device)}: not in the inventory ${inventoryPath}`,
      { field: 'device', value: device },
    );
  return found;
}

export function registerVerdictCommands(fleet: Command): void {
  fleet
    .command('mark-down <device>')
    .description(
      'Record a node-down verdict: the device is not-for-me in every plan while it holds; its --recheck runs on the control host at every board run and before each rollout (exit 0 lifts it); it expires (default 30d, 1h to 365d) and is never extended but by another mark-down',
    )
    .requiredOption('--inventory <fleet.yaml>', 'the inventory (the verdicts live beside it, in <name>.verdicts.yaml)')
    .requiredOption(
      '--recheck <command>',
      'a command run by /bin/sh on the control host (never on the device) with WAVEGATE_DEVICE, WAVEGATE_HOST, WAVEGATE_PORT set; exit 0 means the device is back',
    )
    .requiredOption('--reason <text>', 'why the device is down (recorded with your user name)')
    .option('--expires <duration>', 'how long the verdict holds: 1h to 365d', '30d')
    .option('--json', 'print the verdict as JSON')
    .action(
      action(
        (
          device: string,
          opts: { inventory: string; recheck: string; reason: string; expires: string; json?: boolean },
        ) => {
          const verdict = newVerdict({
            device,
            reason: opts.reason,
            recheck: opts.recheck,
            expires: opts.expires,
            by: operatorName(),
            nowMs: Date.now(),
          });
          inventoryDevice(opts.inventory, device);
          const path = verdictsPathFor(opts.inventory);
          updateVerdicts(path, (file) => markDown(file, verdict));
          if (opts.json) console.log(JSON.stringify({ file: path, verdict }, null, 2));
          else
            console.log(
              `${device}: ${verdictStanding(verdict, Date.now()).text} (by ${verdict.by}; recheck: ${verdict.recheck}) — ${path}`,
            );
          return EXIT_OK;
        },
      ),
    );

  fleet
    .command('mark-up <device>')
    .description('Lift a node-down verdict by hand: the device is back in the next plan')
    .requiredOption('--inventory <fleet.yaml>', 'the inventory the verdict is beside')
    .action(
      action((device: string, opts: { inventory: string }) => {
        const path = verdictsPathFor(opts.inventory);
        updateVerdicts(path, (file) => markUp(file, device, operatorName(), Date.now()));
        console.log(`${device}: node-down verdict lifted by ${operatorName()} — ${path}`);
        return EXIT_OK;
      }),
    );

  fleet
    .command('verdicts')
    .description(
      'List the node-down verdicts beside an inventory, holding or expired, with their last recheck (fleet status reruns the rechecks)',
    )
    .requiredOption('--inventory <fleet.yaml>', 'the inventory the verdicts are beside')
    .option('--history', 'also print the history (marked down, marked up, lifted by recheck)')
    .option('--json', 'print JSON')
    .action(
      action((opts: { inventory: string; history?: boolean; json?: boolean }) => {
        const path = verdictsPathFor(opts.inventory);
        const file = readVerdicts(path, { inventory: loadInventory(opts.inventory).devices });
        const now = Date.now();
        if (opts.json) {
          console.log(
            JSON.stringify(
              {
                file: path,
                verdicts: file.verdicts.map((v) => ({ ...v, standing: isExpired(v, now) ? 'expired' : 'holds' })),
                ...(opts.history ? { history: file.history } : {}),
              },
              null,
              2,
            ),
          );
          return EXIT_OK;
        }
        console.log(`node-down verdicts in ${path}: ${file.verdicts.length}`);
        for (const v of file.verdicts) {
          console.log(`  ${v.device.padEnd(16)} ${verdictStanding(v, now).text}`);
          console.log(
            `  ${''.padEnd(16)} by ${v.by}; recheck: ${v.recheck}${v.lastCheckedAt ? `; last checked ${shortTime(v.lastCheckedAt)}: ${v.lastCheckResult ?? ''}` : '; not checked yet'}`,
          );
        }
        if (opts.history)
          for (const h of file.history)
            console.log(`  ${shortTime(h.at)} ${h.device} ${h.event} by ${h.by}${h.detail ? `: ${h.detail}` : ''}`);
        return EXIT_OK;
      }),
    );
}
