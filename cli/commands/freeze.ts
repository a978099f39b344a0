import type { Command } from 'commander';
import { WavegateError } from '../../core/errors';
import { checkFreezeId, freezeRequestOf, isActive, liftReasonOf, scopeText } from '../../core/freeze';
import { addFreeze, liftFreeze, listFreezes } from '../../clients/freeze';
import type { ListedFreeze } from '../../contracts/freeze';
import { resolveConnectionSettings, type TemporalFlags } from '../../workers/connection';
import { withClient, withTemporalOptions } from '../client';
import { action } from '../run';
import { operatorName } from './rollout';

/**
 * `wavegate freeze | unfreeze | freeze list`: change freezes (core/freeze.ts, workflows/freeze.ts). A freeze holds
 * every running rollout in its scope (a pause recorded as the freeze's) and refuses new starts, converges, reverts
 * and nightly canaries in scope until it ends or is lifted; a lift resumes the rollouts it paused that are still
 * paused by it.
 */
const log = (line: string) => process.stdout.write(`${line}\n`);

type FreezeFlags = TemporalFlags & {
  reason?: string;
  profile?: string;
  pool?: string;
  all?: boolean;
  from?: string;
  until?: string;
  json?: boolean;
};

function windowLine(w: ListedFreeze, now: number): string {
  const when = isActive(w, now) ? 'in force' : `scheduled from ${w.from}`;
  return `${w.id} ${when}: "${w.reason}" (${scopeText(w.scope)}, ${w.until ? `until ${w.until}` : 'until lifted'}; by ${w.by})`;
}

export function register(program: Command): void {
  const freeze = withTemporalOptions(
    program
      .command('freeze')
      .description(
        'Freeze rollouts (all, a profile or a pool), now or in a window: running rollouts in scope are held (paused under the freeze), and new starts, converges, reverts and nightly canaries in scope are refused naming the freeze until it ends or is lifted',
      )
      .argument('[scope]', 'all (the default when no --profile or --pool is given)')
      .option('--reason <text>', 'why (required, one line of at most 200 characters): shown to everyone it stops')
      .option('--profile <name>', 'freeze only this profile')
      .option('--pool <name>', 'freeze only rollouts with devices in this pool of their inventory')
      .option('--all', 'freeze everything (the default)')
      .option('--from <time>', 'start at this ISO 8601 date-time with a zone, or after a duration (2h); default now')
      .option('--until <time>', 'end at this date-time, or a duration after --from (8h); default: until unfreeze')
      .option('--json', 'print {window, paused} as JSON'),
  );
  freeze.action(
    action(async (scopeWord: string | undefined, opts: FreezeFlags) => {
      // Checked before Temporal is contacted: bad input exits 2 and starts nothing.
      const req = freezeRequestOf({ ...opts, scopeWord }, operatorName(), Date.now());
      const settings = resolveConnectionSettings(opts);
      return withClient(settings, async (client) => {
        const { window, paused } = await addFreeze(client, settings.taskQueue, req);
        if (opts.json) return void log(JSON.stringify({ window, paused }));
        log(windowLine(window, Date.now()));
        if (isActive(window, Date.now()))
          log(`held ${paused.length} running rollout(s)${paused.length ? `: ${paused.join(', ')}` : ''}`);
        log(`lift it with: wavegate unfreeze ${window.id}`);
      });
    }),
  );
  withTemporalOptions(
    freeze
      .command('list')
      .description('Freeze windows in force or scheduled, with the rollouts each holds')
      .option('--json', 'print the windows as JSON'),
  ).action(
    action(async (_opts: unknown, cmd: Command) => {
      const opts = cmd.optsWithGlobals<FreezeFlags>();
      await withClient(resolveConnectionSettings(opts), async (client) => {
        const windows = await listFreezes(client);
        if (opts.json) return void log(JSON.stringify(windows));
        if (!windows.length) return void log('no freeze');
        const now = Date.now();
        for (const w of windows) {
          log(windowLine(w, now));
          if (w.paused.length) log(`  holds ${w.paused.join(', ')}`);
        }
      });
    }),
  );
  withTemporalOptions(
    program
      .command('unfreeze')
      .description(
        'Lift a freeze (or every one with --all): the rollouts it paused that are still paused by it resume; one an operator paused or resumed since is left as it is',
      )
      .argument('[id]', 'the freeze (freeze-<n>, from wavegate freeze list)')
      .option('--all', 'lift every freeze')
      .option('--reason <text>', 'why (recorded in each rollout it resumes)')
      .option('--json', 'print {lifted, resumed, left} as JSON'),
  ).action(
    action(async (id: string | undefined, opts: TemporalFlags & { all?: boolean; reason?: string; json?: boolean }) => {
      if ((id === undefined) === !opts.all)
        throw new WavegateError(
          'INVALID_INPUT',
          `unfreeze: give a freeze id or --all (got ${id === undefined ? 'neither' : `${JSON.stringify(id)} and --all`})`,
          { field: 'id' },
        );
      if (id !== undefined) checkFreezeId(id, 'id');
      const reason = opts.reason !== undefined ? liftReasonOf(opts.reason, '--reason') : undefined;
      await withClient(resolveConnectionSettings(opts), async (client) => {
        const lifted = await liftFreeze(client, {
          ...(id ? { id } : { all: true }),
          by: operatorName(),
          ...(reason ? { reason } : {}),
        });
        if (opts.json) return void log(JSON.stringify(lifted));
        log(`lifted ${lifted.lifted.length ? lifted.lifted.join(', ') : 'nothing (no freeze was held)'}`);
        log(
          `resumed ${lifted.resumed.length} rollout(s)${lifted.resumed.length ? `: ${lifted.resumed.join(', ')}` : ''}`,
        );
        for (const l of lifted.left) log(`  left as it is: ${l.rolloutId} (${l.why})`);
      });
    }),
  );
}
