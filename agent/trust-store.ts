import { existsSync, lstatSync, mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { WavegateError } from '../core/errors';
import {
  heldTrustRecord,
  heldVersionsOf,
  reopenHeldTrust,
  takeTrustNews,
  type HeldTrust,
  type HeldVersions,
  type NewsRefusal,
} from '../core/held-trust';
import { PROFILE_NAME } from '../core/profile-name';
import type { Trust } from '../core/signing';
import { readText, writeFileAtomic } from '../intake/files';
import { syncDir } from './receipts';

/**
 * The trust the agent learned through the gateway (docs/formats.md, "Agent state directory"): per profile, the newest
 * trust root, revocation list and timestamp it verified (core/held-trust.ts), in `<state>/trust/<profile>.json`,
 * written whole, synced and renamed (and the directory synced) before anything is taken from it. The versions held
 * are kept in report.json too (agent/report-file.ts); read strictly at start: a file that is not regular, too big or
 * not such a record, or whose versions are below those report.json holds (restored from an old copy, or removed), is
 * refused (exit 2), never reset: an agent that forgot a revocation or a root would accept what it rules out.
 */
export const TRUST_DIR = 'trust';

/** Three envelopes: a root of 64 pins, a list of 1,000 revocations, a timestamp; with room to spare. */
const MAX_TRUST_FILE_BYTES = 1024 * 1024;

export interface HeldTrustStore {
  /** What is held for `profile` (nothing yet: the pins file alone, version 0). */
  get(profile: string): HeldTrust;
  /** Take the profile's news from a sync answer (kept on disk first when it changes anything); the refusals. */
  take(profile: string, news: unknown, anchor: Trust, now: number): NewsRefusal[];
}

export interface HeldTrustStoreOptions {
  stateDir: string;
  deviceId: string;
  /** The versions report.json says this agent held (agent/report-file.ts `trust`): a file below them is refused. */
  marks: Record<string, HeldVersions>;
  /** Called once a profile's versions rose (after its file is on disk): report.json keeps them. */
  onHeld: (profile: string, versions: HeldVersions) => void;
}

export function heldTrustStore(opts: HeldTrustStoreOptions): HeldTrustStore {
  const dir = join(opts.stateDir, TRUST_DIR);
  const held = readHeldTrust(opts.stateDir, opts.marks);
  return {
    get: (profile) => held.get(profile) ?? { profile },
    take(profile, news, anchor, now) {
      const before = held.get(profile) ?? { profile };
      const outcome = takeTrustNews(before, news, { anchor, device: opts.deviceId, now });
      if (!outcome.changed) return outcome.refused;
      mkdirSync(dir, { recursive: true, mode: 0o700 });
      writeFileAtomic(join(dir, `${profile}.json`), `${JSON.stringify(heldTrustRecord(outcome.held))}\n`);
      syncDir(dir);
      held.set(profile, outcome.held);
      const [was, now_] = [heldVersionsOf(before), heldVersionsOf(outcome.held)];
      if (was.root !== now_.root || was.revocations !== now_.revocations) opts.onHeld(profile, now_);
      return outcome.refused;
    },
  };
}

/** Every `<state>/trust/<profile>.json`, re-read and held to the marks; INVALID_INPUT naming the file otherwise. */
export function readHeldTrust(stateDir: string, marks: Record<string, HeldVersions>): Map<string, HeldTrust> {
  const dir = join(stateDir, TRUST_DIR);
  const refuse = (path: string, why: string) =>
    new WavegateError(
      'INVALID_INPUT',
      `--state-dir ${stateDir}: ${path}: ${why}; refusing to start: an agent that forgot a trust root or a revocation would accept what it rules out. Restore the file from its latest copy`,
      { field: '--state-dir', value: path },
    );
  const held = new Map<string, HeldTrust>();
  if (existsSync(dir)) {
    if (!lstatSync(dir).isDirectory()) throw refuse(dir, 'not a directory');
    for (const name of readdirSync(dir).sort()) {
      if (name.startsWith('.')) continue; // a write's temporary file, left by a kill
      const path = join(dir, name);
      const profile = name.endsWith('.json') ? name.slice(0, -'.json'.length) : '';
      if (!PROFILE_NAME.test(profile)) throw refuse(path, 'not <profile>.json');
      held.set(profile, readOne(path, profile, refuse));
    }
  }
  for (const [profile, mark] of Object.entries(marks)) {
    const has = heldVersionsOf(held.get(profile) ?? { profile });
    if (has.root < mark.root || has.revocations < mark.revocations)
      throw refuse(
        join(dir, `${profile}.json`),
        `${held.has(profile) ? `holds root v${has.root} and revocations v${has.revocations}` : 'missing'}, but this agent held root v${mark.root} and revocations v${mark.revocations} (report.json): it is older than what was verified`,
      );
  }
  return held;
}

function readOne(path: string, profile: string, refuse: (path: string, why: string) => WavegateError): HeldTrust {
  const stat = lstatSync(path);
  if (!stat.isFile()) throw refuse(path, 'not a regular file');
  if (stat.size > MAX_TRUST_FILE_BYTES) throw refuse(path, `${stat.size} bytes, at most ${MAX_TRUST_FILE_BYTES}`);
  let data: unknown;
  try {
    data = JSON.parse(readText(path));
  } catch (err) {
    throw refuse(path, err instanceof SyntaxError ? 'not JSON' : (err as Error).message.replace(`${path}: `, ''));
  }
  const reopened = reopenHeldTrust(data, profile);
  if (typeof reopened === 'string') throw refuse(path, `not a held trust record: ${reopened}`);
  return reopened;
}
