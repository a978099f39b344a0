import { existsSync } from 'node:fs';
import type { Command } from 'commander';
import {
  boardIsGreen,
  readDrift,
  behindRows,
  readFleetBoard,
  reverifyFleet,
  type BoardRow,
  type DriftRow,
  type FleetBoard,
} from '../../device/fleet';
import { WavegateError } from '../../core/errors';
import { classifyRevision } from '../../core/provability';
import type { Revision } from '../../core/revision';
import { revocationOf } from '../../core/revocation';
import { bodyDigest, type Trust } from '../../core/signing';
import { readDocument } from '../../intake/files';
import { loadInventory } from '../../intake/inventory';
import { loadProfile, type LoadedProfile } from '../../intake/profile';
import { profilesOptionHelp, resolveProfilesRoot } from '../../intake/profiles-root';
import { listRevisions, newestRevisionAbove } from '../../clients/registry';
import { fileRevisionNumbers, findFileRevision, registeredRevision, registryTrust } from '../../intake/revisions';
import { loadProfileTrust } from '../../intake/trust';
import { resolveConnectionSettings, type TemporalFlags } from '../../workers/connection';
import {
  lastCompletedRollout,
  activeRolloutsOf,
  retryNote,
  retryTransient,
  withClient,
  withTemporalOptions,
} from '../client';
import { action, EXIT_FAILED, EXIT_OK } from '../run';
import { judgeVerdicts } from '../../intake/node-down-recheck';
import { registerVerdictCommands } from './fleet-verdicts';
import { registerRepinCommand } from './fleet-repin';
import { operatorName } from './rollout';
import { devicesWithTwins, twinReader, type TwinReader } from '../../device/channel';
import { parseDurationMs } from '../../core/duration';
import type { Inventory } from '../../core/inventory';

/**
 * Operator reads of the fleet, computed now over SSH from the CLI (no workflow, no activity): the board
 * of one revision, and drift. Revisions come from the profile's files (signed envelopes verified against
 * its pins when it has pins), or with --registry from `registry:<profile>`.
 */

interface ProfileFiles extends LoadedProfile {
  trust: Trust | undefined;
}

function loadProfileFiles(profilesRoot: string, name: string): ProfileFiles {
  const loaded = loadProfile(profilesRoot, name, '--profile');
  return { ...loaded, trust: loadProfileTrust(loaded.layout) };
}

/**
 * Why revision `n` is revoked by the profile's signers (its revocation list), or undefined. A revocation of one
 * envelope (by digest) counts when the profile's own envelope of `n` is that one, or when it has none here.
 */
export function revokedReason(files: Pick<ProfileFiles, 'trust' | 'layout'>, n: number): string | undefined {
  const revoked = files.trust?.revoked;
  if (!revoked?.revisions.has(n)) return undefined;
  const path = files.layout.envelopeFile(n);
  const envelope = existsSync(path) ? (readDocument(path, 'json') as { body?: unknown }) : undefined;
  const digest = typeof envelope?.body === 'string' ? bodyDigest({ body: envelope.body }) : undefined;
  return revocationOf(revoked, n, digest)?.reason;
}

export interface BoardFlags extends TemporalFlags {
  profile: string;
  inventory: string;
  profiles?: string;
  revision?: number;
  registry?: boolean;
  json?: boolean;
  concurrency: number;
  reverify?: boolean;
  reverifyWait?: string;
}

/** `--reverify-wait`: how long `--reverify` waits for fresh reports (1s-10m, default 60s). */
function reverifyWaitMs(value: string | undefined): number {
  if (value === undefined) return 60_000;
  const ms = parseDurationMs(value);
  if (ms === undefined || ms < 1_000 || ms > 600_000)
    throw new WavegateError(
      'INVALID_INPUT',
      `--reverify-wait ${JSON.stringify(value)}: must be a duration between 1s and 10m (e.g. 30s)`,
    );
  return ms;
}

/**
 * The re-verify wait reads every asked device's twin each half second: a read cut by a transient failure
 * (Temporal restarting, a query cut) is tried again rather than ending the command, said once on stderr
 * per run of failures across all the reads, and given up (exit 1, named) past the wait itself.
 */
function retryingTwinReader(read: TwinReader, waitMs: number): TwinReader {
  let told = false;
  return async (id) => {
    const view = await retryTransient(() => read(id), {
      what: `the twin read of ${id}`,
      giveUpAfterMs: waitMs,
      onRetry: (err) => {
        if (!told) console.error(retryNote('a twin read', err));
        told = true;
      },
    });
    told = false;
    return view;
  };
}

/**
 * Run `read` with a reader of twins when some device has a twin to read (its channel says: an agent device,
 * never dialled), over a Temporal client opened only then; `--reverify` first asks those devices (every online
 * agent) to verify again, and waits for them.
 */
async function withTwins<T>(
  inventory: Inventory,
  opts: BoardFlags,
  read: (twins?: TwinReader) => Promise<T>,
): Promise<T> {
  const twinned = devicesWithTwins(inventory.devices);
  const waitMs = reverifyWaitMs(opts.reverifyWait);
  if (twinned.length === 0) return read();
  return withClient(resolveConnectionSettings(opts), async (client) => {
    if (opts.reverify) {
      const twins = retryingTwinReader(twinReader(client), waitMs);
      const r = await reverifyFleet(
        twinned,
        { client: () => client, twins },
        { waitMs, concurrency: opts.concurrency },
      );
      const note = `re-verify: ${r.answered.length} of ${r.asked.length} online agents answered${r.silent.length ? ` (no answer within ${waitMs / 1000}s: ${r.silent.join(', ')})` : ''}${r.offline.length ? `; ${r.offline.length} not asked (offline or never synced)` : ''}`;
      console.error(note);
    }
    return read(twinReader(client));
  });
}

/** The board's revision and why it is that one (printed: a board of the wrong revision reads as a broken fleet). */
interface BoardChoice {
  revision: Revision;
  why: string;
  /** Rollouts of the profile running now (running or paused), with their target: devices there are ahead, not behind. */
  active: ActiveRollout[];
  /** The newest completed rollout that changed a device (read once: the converge advice uses it too). */
  last?: LastCompleted;
}

/**
 * The profile's newest completed rollout that changed a device (lastCompletedRollout: a re-run that changed
 * nothing does not move the board), and the rollouts of the profile running now, or why there is none to go by.
 */
async function lastCompletedRevision(
  opts: BoardFlags,
  profile: string,
): Promise<{ last: LastCompleted; active: ActiveRollout[] } | { none: string; active: ActiveRollout[] }> {
  const settings = resolveConnectionSettings(opts);
  try {
    return await withClient(settings, async (client) => {
      const active = await activeRolloutsOf(client, profile);
      const last = await lastCompletedRollout(client, profile);
      if (!last)
        return {
          none: `no completed rollout of "${profile}" that changed a device found in namespace ${settings.namespace} at ${settings.address}`,
          active,
        };
      return { last, active };
    });
  } catch (err) {
    // A flag at fault (TLS files, namespace) is bad input; a server that is not there only loses the default.
    if (err instanceof WavegateError && err.code === 'INVALID_INPUT') throw err;
    return {
      none: `Temporal at ${settings.address} not reachable, so no completed rollout could be read (${firstLine(err)})`,
      active: [],
    };
  }
}

type ActiveRollout = Awaited<ReturnType<typeof activeRolloutsOf>>[number];
export type LastCompleted = NonNullable<Awaited<ReturnType<typeof lastCompletedRollout>>>;

function firstLine(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).split('\n')[0]!.slice(0, 200);
}

/** Revision `n` from the registry (--registry) or the files; undefined when they do not hold it. */
async function revisionFrom(files: ProfileFiles, opts: BoardFlags, n: number): Promise<Revision | undefined> {
  if (!opts.registry) return findFileRevision(files.layout, files.trust, n)?.revision;
  return withClient(resolveConnectionSettings(opts), async (client) => {
    const trust = registryTrust(files.layout, files.trust, '--registry');
    return (
      await registeredRevision(client, files.layout, trust, n).catch((err: unknown) => {
        if (err instanceof WavegateError && err.code === 'NOT_FOUND') return undefined;
        throw err;
      })
    )?.revision;
  });
}

/** The newest revision: registered (--registry), else the newest in the files (signed, when the profile has pins). */
async function newestRevision(files: ProfileFiles, opts: BoardFlags): Promise<{ revision: Revision; what: string }> {
  const name = files.profile.name;
  if (opts.registry) {
    return withClient(resolveConnectionSettings(opts), async (client) => {
      const trust = registryTrust(files.layout, files.trust, '--registry');
      // The newest unexpired registered revision its signers have not revoked.
      const now = Date.now();
      const n = (await listRevisions(client, name))
        .filter(
          (r) => (r.expiresAt === undefined || Date.parse(r.expiresAt) > now) && !revokedReason(files, r.revision),
        )
        .reduce<number | undefined>((best, r) => Math.max(best ?? 0, r.revision), undefined);
      if (n === undefined)
        throw new WavegateError('NOT_FOUND', `profile "${name}" has no registered revision that is not revoked`);
      return {
        revision: (await registeredRevision(client, files.layout, trust, n)).revision,
        what: 'newest registered',
      };
    });
  }
  const n = fileRevisionNumbers(files.layout, files.trust)
    .filter((r) => !revokedReason(files, r))
    .at(-1);
  if (n === undefined)
    throw new WavegateError(
      'NOT_FOUND',
      `profile "${name}" has no revisions in ${files.layout.dir} that are not revoked`,
    );
  const revision = findFileRevision(files.layout, files.trust, n)?.revision;
  if (!revision) throw new WavegateError('NOT_FOUND', `profile "${name}" has no revision ${n} in ${files.layout.dir}`);
  return { revision, what: files.trust ? 'newest signed' : 'newest in the files' };
}

/**
 * The revision the board is about: --revision; else the revision the profile's last completed rollout
 * left the fleet at (a newer revision signed but not rolled out yet is not what the fleet should be
 * at); else, with no completed rollout or no Temporal to ask, the newest one, saying why.
 */
async function boardRevision(files: ProfileFiles, opts: BoardFlags): Promise<BoardChoice> {
  const name = files.profile.name;
  const read = await lastCompletedRevision(opts, name);
  const { active } = read;
  const last = 'last' in read ? read.last : undefined;
  const known = last ? { last } : {};
  if (opts.revision !== undefined) {
    const revision = await revisionFrom(files, opts, opts.revision);
    if (!revision)
      throw new WavegateError(
        'NOT_FOUND',
        `--revision ${opts.revision}: profile "${name}" has no revision ${opts.revision} ${opts.registry ? `in registry:${name}` : `in ${files.layout.dir}`}`,
      );
    return { revision, why: `r${opts.revision}: --revision`, active, ...known };
  }
  if ('none' in read) {
    const newest = await newestRevision(files, opts);
    return { revision: newest.revision, why: `r${newest.revision.revision}: ${newest.what}, ${read.none}`, active };
  }
  const { last: done } = read;
  const by = `left by rollout ${done.rolloutId} completed ${done.closeTime}`;
  const revoked = revokedReason(files, done.toRevision);
  if (revoked !== undefined) {
    // Never the board of a revision its signers revoked: the newest one they stand behind, its devices listed.
    const newest = await newestRevision(files, opts);
    return {
      revision: newest.revision,
      why: `r${newest.revision.revision}: ${newest.what}; r${done.toRevision} (${by}) is revoked: ${revoked}`,
      active,
      ...known,
    };
  }
  const left = await revisionFrom(files, opts, done.toRevision);
  if (left) return { revision: left, why: `r${done.toRevision}: ${by}`, active, ...known };
  const newest = await newestRevision(files, opts);
  return {
    revision: newest.revision,
    why: `r${newest.revision.revision}: ${newest.what}; r${done.toRevision} (${by}) is not ${opts.registry ? `in registry:${name}` : `in ${files.layout.dir}`}`,
    active,
    ...known,
  };
}

/** The line a running rollout of the profile gets above the board: what it is doing and where it goes. */
export function activeRolloutLine(r: ActiveRollout, checked: number): string {
  const target = r.toRevision !== undefined ? ` to r${r.toRevision}` : '';
  const note =
    r.toRevision !== undefined && r.toRevision > checked
      ? `: devices it already brought to r${r.toRevision} show as ahead of r${checked}, not behind`
      : '';
  return `rollout ${r.rolloutId} is ${r.state}${r.phase ? ` (${r.phase})` : ''}${target}${note}`;
}

function parseRevisionFlag(value: string): number {
  if (!/^\d+$/.test(value) || Number(value) < 1)
    throw new WavegateError('INVALID_INPUT', `--revision ${JSON.stringify(value)}: must be a positive whole number`);
  return Number(value);
}

function rowLine(r: BoardRow): string {
  return (
    `  ${r.id.padEnd(16)} ${r.state.padEnd(11)} ${(r.proof ?? '').padEnd(8)} ${r.marker === undefined || r.marker === null ? '-' : `r${r.marker}`}`.padEnd(
      45,
    ) + (r.reason ? ` ${r.reason}` : '')
  );
}

/**
 * Devices behind the revision the profile's last completed rollout went to: say the one command that
 * brings exactly them there. Only an aid: without a reachable Temporal there is no hint, and no error.
 */
function printConvergeHint(board: FleetBoard, opts: BoardFlags, last: LastCompleted | undefined): void {
  const behind = behindRows(board);
  if (!behind.length || !last || last.toRevision !== board.revision) return;
  console.log(
    `${behind.length} device(s) behind r${last.toRevision}, where ${last.rolloutId} completed (${behind.map((r) => r.id).join(', ')}). Bring them there with:`,
  );
  console.log(
    `  wavegate converge --profile ${board.profile} --file <the spec of ${last.rolloutId}: r${last.fromRevision} → r${last.toRevision}> --inventory ${opts.inventory}${opts.profiles ? ` --profiles ${opts.profiles}` : ''}`,
  );
}

/** Devices on a revoked revision: say which, and the command that rolls them forward (a converge to a newer one). */
function printRevokedHint(board: FleetBoard, opts: BoardFlags): void {
  if (!board.revoked.length) return;
  const byRevision = new Map<number, { reason: string; ids: string[] }>();
  for (const d of board.revoked) {
    const entry = byRevision.get(d.revision) ?? { reason: d.reason, ids: [] };
    entry.ids.push(d.id);
    byRevision.set(d.revision, entry);
  }
  for (const [revision, { reason, ids }] of byRevision)
    console.log(`${ids.length} device(s) on revoked r${revision} (${reason}): ${ids.join(', ')}`);
  console.log(
    `Roll them forward with:\n  wavegate converge --profile ${board.profile} --file <a spec to r${board.revision} or newer, its fromRevision one not revoked> --inventory ${opts.inventory}${opts.profiles ? ` --profiles ${opts.profiles}` : ''}`,
  );
}

/**
 * What `wavegate fleet status` computes, without printing: the board of the profile's revision (verified
 * now over SSH, twins for agent devices, node-down verdicts rechecked) and why that revision. The fleet
 * board's page (`wavegate board`) shows the same.
 */
export async function fleetStatusOf(opts: BoardFlags): Promise<{
  board: FleetBoard;
  why: string;
  active: ActiveRollout[];
  revisions: number[];
  last: LastCompleted | undefined;
}> {
  const files = loadProfileFiles(resolveProfilesRoot({ flag: opts.profiles }).dir, opts.profile);
  const inventory = loadInventory(opts.inventory);
  const { revision, why, active, last } = await boardRevision(files, opts);
  // A device whose marker names a higher revision is asked that revision's verify: ahead, never behind.
  // Read (and its envelope verified) only when a device names it, once for all of them.
  const known = new Map<number, { verify: string; provable: boolean } | undefined>();
  const higher = (n: number) => {
    if (!known.has(n)) {
      // A revoked revision is never verified again (its envelope is refused): its devices are listed as revoked.
      const r =
        revokedReason(files, n) === undefined ? findFileRevision(files.layout, files.trust, n)?.revision : undefined;
      known.set(n, r ? { verify: r.verify, provable: classifyRevision(r).provable } : undefined);
    }
    return known.get(n);
  };
  const revisions = fileRevisionNumbers(files.layout, files.trust);
  // Node-down verdicts beside the inventory: every one that holds is rechecked now, on this host.
  const verdicts = await judgeVerdicts({
    inventoryPath: opts.inventory,
    devices: inventory.devices,
    inventory: inventory.devices,
    by: operatorName(),
  });
  const board = await withTwins(inventory, opts, (twins) =>
    readFleetBoard({
      verdicts,
      inventory,
      profile: files.profile.name,
      scope: files.profile.scope,
      revision: revision.revision,
      verify: revision.verify,
      provable: classifyRevision(revision).provable,
      verifyOf: higher,
      revokedOf: (n) => revokedReason(files, n),
      probe: { concurrency: opts.concurrency, ...(twins ? { twins } : {}) },
    }),
  );
  return { board, why, active, revisions, last };
}

/** What `wavegate drift` computes, without printing: each target device's marker and whether its verify still passes. */
export async function driftOf(opts: BoardFlags): Promise<{ profile: string; rows: DriftRow[] }> {
  const files = loadProfileFiles(resolveProfilesRoot({ flag: opts.profiles }).dir, opts.profile);
  const inventory = loadInventory(opts.inventory);
  const known = new Map<number, string | undefined>();
  const verifyOf = (n: number) => {
    if (!known.has(n))
      known.set(
        n,
        revokedReason(files, n) === undefined
          ? findFileRevision(files.layout, files.trust, n)?.revision.verify
          : undefined,
      );
    return known.get(n);
  };
  if (opts.registry) {
    // Pre-load the registered revisions: the probe runs many devices at once.
    await withClient(resolveConnectionSettings(opts), async (client) => {
      const trust = registryTrust(files.layout, files.trust, '--registry');
      let n = 0;
      for (;;) {
        const next = await newestRevisionAbove(client, files.profile.name, n);
        if (!next) break;
        n = next.revision;
      }
      for (let r = 1; r <= n; r++) {
        if (revokedReason(files, r) !== undefined) continue;
        const signed = await registeredRevision(client, files.layout, trust, r).catch((err: unknown) => {
          if (err instanceof WavegateError && err.code === 'NOT_FOUND') return undefined;
          throw err;
        });
        if (signed) known.set(r, signed.revision.verify);
      }
    });
  }
  const rows = await withTwins(inventory, { ...opts, reverify: false }, (twins) =>
    readDrift({
      inventory,
      profile: files.profile.name,
      scope: files.profile.scope,
      verifyOf,
      probe: { concurrency: opts.concurrency, ...(twins ? { twins } : {}) },
    }),
  );
  return { profile: files.profile.name, rows };
}

function withBoardOptions(cmd: Command): Command {
  return withTemporalOptions(
    cmd
      .requiredOption('--profile <name>', 'the profile')
      .requiredOption('--inventory <fleet.yaml>', 'the inventory')
      .option('--profiles <dir>', profilesOptionHelp())
      .option('--registry', 'take revisions from the profile registry (registry:<profile>) instead of the files')
      .option('--concurrency <n>', 'devices probed at once', (v) => Number(v), 16)
      .option('--json', 'print JSON'),
  );
}

export function register(program: Command): void {
  const fleet = program.command('fleet').description('The fleet as it is now, read over SSH');
  registerVerdictCommands(fleet);
  registerRepinCommand(fleet);
  withBoardOptions(
    fleet
      .command('status')
      .description(
        'The board: each device applied / claimed / pending / not-for-me for a revision, computed now by running its verify over SSH. Exit 0 only when every target is applied or not-for-me',
      ),
  )
    .option(
      '--revision <n>',
      'the revision (default: the one the last completed rollout of the profile left; without one, or without Temporal, the newest)',
      parseRevisionFlag,
    )
    .option(
      '--reverify',
      'first ask every online agent device (transport: agent) to re-verify now, and wait for their reports',
    )
    .option('--reverify-wait <duration>', 'how long --reverify waits for the agents (1s-10m)', '60s')
    .action(
      action(async (opts: BoardFlags) => {
        const { board, why, active, last } = await fleetStatusOf(opts);
        if (opts.json) console.log(JSON.stringify({ ...board, revisionWhy: why, active }, null, 2));
        else {
          const c = board.counts;
          console.log(`checking ${why}`);
          for (const r of active) console.log(activeRolloutLine(r, board.revision));
          console.log(
            `fleet ${board.profile} r${board.revision}${board.provable ? '' : ' (NOT provable: devices can only reach claimed)'}: ${c.total} devices, verified now over SSH`,
          );
          // Applied and claimed are different facts: never one number.
          console.log(`  applied     ${c.applied}`);
          console.log(`  claimed     ${c.claimed}`);
          console.log(
            `  pending     ${c.pending}${c.pending ? ` (never answered: ${board.rows.filter((r) => r.reason?.startsWith('never answered')).length}; never reported: ${board.rows.filter((r) => r.reason?.includes('never reported')).length})` : ''}`,
          );
          if (c.ahead) console.log(`  ahead       ${c.ahead} (at a higher revision, verified now)`);
          console.log(`  not-for-me  ${c.notForMe}`);
          const proven = board.rows.filter((r) => r.proof === 'proven').length;
          console.log(`  proof       ${proven} of ${c.applied + c.claimed} proven by their own receipts`);
          if (board.revoked.length)
            console.log(`  revoked     ${board.revoked.length} (on a revision its signers revoked)`);
          for (const r of board.rows) console.log(rowLine(r));
          printRevokedHint(board, opts);
          // A converge waits for a running rollout of the profile (it refuses to start beside one).
          if (!active.length) printConvergeHint(board, opts, last);
        }
        return boardIsGreen(board) ? EXIT_OK : EXIT_FAILED;
      }),
    );

  withBoardOptions(
    program
      .command('drift')
      .description(
        'Devices whose marker names a revision whose verify no longer passes, checked now over SSH. Exit 1 when any has drifted or was refused (host key, login or config not as pinned); an unreachable device is listed, not counted',
      ),
  ).action(
    action(async (opts: BoardFlags) => {
      const { profile, rows } = await driftOf(opts);
      const drifted = rows.filter((r) => r.status === 'drifted');
      // A refused device (host key, login or config not as pinned) may be another machine at that address:
      // its drift is unknown and the refusal itself is news, so it fails the check. An unreachable one (no
      // answer) is reported but does not: a device that is down has not drifted (node-down, fleet status).
      const refused = rows.filter((r) => r.status === 'refused');
      const unreachable = rows.filter((r) => r.status === 'unreachable').length;
      if (opts.json)
        console.log(
          JSON.stringify(
            {
              profile,
              drifted: drifted.length,
              refused: refused.length,
              unreachable,
              devices: rows,
            },
            null,
            2,
          ),
        );
      else {
        console.log(
          `drift ${profile}: ${drifted.length} drifted of ${rows.length} devices in scope (${rows.filter((r) => r.status === 'ok').length} ok, ${rows.filter((r) => r.status === 'no-marker').length} without marker, ${refused.length} refused, ${unreachable} unreachable)`,
        );
        for (const r of rows)
          console.log(
            `  ${r.id.padEnd(16)} ${r.status.padEnd(16)} ${r.marker === null ? '-' : `r${r.marker}`}${r.detail ? `  ${r.detail}` : ''}`,
          );
        if (refused.length)
          console.log(
            `${refused.length} device(s) refused as pinned (${refused.map((r) => r.id).join(', ')}): their drift is unknown; exit 1`,
          );
        if (unreachable)
          console.log(
            `${unreachable} device(s) unreachable: not checked, not counted as drift (exit 0 unless something drifted or was refused)`,
          );
      }
      return drifted.length || refused.length ? EXIT_FAILED : EXIT_OK;
    }),
  );
}
