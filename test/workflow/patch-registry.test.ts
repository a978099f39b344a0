import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  CURRENT_RELEASE,
  fateAt,
  PATCHES,
  RELEASES,
  releaseIndex,
  SUPPORT_WINDOW,
  type PatchRecord,
} from '../../workflows/patches';
import {
  ARCHIVE_DIR,
  currentHistories,
  HISTORIES_DIR,
  loadHistory,
  patchMarkers,
  type PatchMarker,
} from '../support/histories';
import { replayPatchMeetings, type PatchMeeting } from '../support/patch-probe';

const PROJECT_ROOT = join(__dirname, '..', '..');

/** Every .ts file under a project folder, with its path from the project root. */
function sources(folder: string): { path: string; text: string }[] {
  const root = join(PROJECT_ROOT, folder);
  if (!existsSync(root)) return [];
  return readdirSync(root, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile() && e.name.endsWith('.ts'))
    .map((e) => join(e.parentPath, e.name))
    .map((path) => ({ path: relative(PROJECT_ROOT, path), text: readFileSync(path, 'utf8') }));
}

/** The patch ids the workflow code asks, by kind of call, with the files that ask each. */
function askedInSource(): {
  patched: Map<string, Set<string>>;
  deprecated: Map<string, Set<string>>;
  unresolved: string[];
} {
  const constants = new Map<string, string>();
  for (const { text } of [...sources('workflows'), ...sources('core'), ...sources('contracts')]) {
    for (const m of text.matchAll(/export const ([A-Z][A-Z0-9_]*) = ['"]([a-z0-9-]+)['"]/g))
      constants.set(m[1]!, m[2]!);
  }
  const patched = new Map<string, Set<string>>();
  const deprecated = new Map<string, Set<string>>();
  const unresolved: string[] = [];
  for (const { path, text } of sources('workflows')) {
    if (path === join('workflows', 'patches.ts')) continue;
    for (const m of text.matchAll(
      /\b(patched|deprecatePatch)\(\s*(?:['"]([^'"]+)['"]|([A-Za-z_][A-Za-z0-9_]*))\s*\)/g,
    )) {
      const id = m[2] ?? constants.get(m[3]!);
      if (id === undefined) {
        unresolved.push(`${path}: ${m[0]}`);
        continue;
      }
      const into = m[1] === 'patched' ? patched : deprecated;
      into.set(id, (into.get(id) ?? new Set()).add(path));
    }
  }
  return { patched, deprecated, unresolved };
}

const fileOf = (where: string) => where.split(' ')[0]!;
const withStatus = (status: PatchRecord['status']) => PATCHES.filter((p) => p.status === status);

describe('the patch registry (workflows/patches.ts)', () => {
  const current = new Set(currentHistories());
  const markers = new Map<string, PatchMarker[]>();
  const markersOf = (name: string) => {
    if (!markers.has(name)) markers.set(name, patchMarkers(loadHistory(`${name}.json`).history));
    return markers.get(name)!;
  };

  it('registers every patch id the workflow code asks, as it asks it, where it asks it; no registered id is asked otherwise', () => {
    const asked = askedInSource();
    expect(asked.unresolved).toEqual([]);
    const ids = PATCHES.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    const unregistered = [...asked.patched.keys(), ...asked.deprecated.keys()].filter((id) => !ids.includes(id));
    expect(unregistered).toEqual([]);
    for (const p of PATCHES) {
      const byPatched = [...(asked.patched.get(p.id) ?? [])].sort();
      const byDeprecate = [...(asked.deprecated.get(p.id) ?? [])].sort();
      const files = [...new Set(p.askedIn.map(fileOf))].sort();
      if (p.status === 'live')
        expect({ id: p.id, byPatched, byDeprecate }).toEqual({ id: p.id, byPatched: files, byDeprecate: [] });
      if (p.status === 'deprecated')
        expect({ id: p.id, byPatched, byDeprecate }).toEqual({ id: p.id, byPatched: [], byDeprecate: files });
      if (p.status === 'removed')
        expect({ id: p.id, byPatched, byDeprecate }).toEqual({ id: p.id, byPatched: [], byDeprecate: [] });
    }
  });

  it('dates every patch to a known release (the current one for a patch new in it), and each retirement to a later one (a removal to no earlier one)', () => {
    expect(RELEASES.map((r) => r.id)).toEqual(RELEASES.map((_, i) => `r${i + 1}`));
    for (const p of PATCHES) {
      expect(releaseIndex(p.introducedIn), p.id).toBeLessThanOrEqual(releaseIndex(CURRENT_RELEASE));
      if (p.status !== 'live')
        expect(releaseIndex(p.deprecatedIn!), p.id).toBeGreaterThan(releaseIndex(p.introducedIn));
      if (p.status === 'removed')
        expect(releaseIndex(p.removedIn!), p.id).toBeGreaterThanOrEqual(releaseIndex(p.deprecatedIn!));
    }
  });

  it('every live patch has a current history that carries its marker, and one that reaches it without (or says why none can)', () => {
    for (const p of withStatus('live')) {
      expect(p.replayedWith.length, `${p.id}: no history replays its new branch`).toBeGreaterThan(0);
      expect(
        p.replayedWithout.length > 0 !== (p.noOldBranch !== undefined),
        `${p.id}: histories without its marker, or why there are none (not both)`,
      ).toBe(true);
      for (const name of [...p.replayedWith, ...p.replayedWithout])
        expect(current.has(`${name}.json`), `${p.id}: ${name}.json is not a current history`).toBe(true);
      for (const name of p.replayedWith)
        expect(markersOf(name), `${p.id} in ${name}`).toContainEqual({ id: p.id, deprecated: false });
      for (const name of p.replayedWithout)
        expect(
          markersOf(name).map((m) => m.id),
          `${p.id} in ${name}`,
        ).not.toContain(p.id);
    }
  });

  it('no current history takes the old branch of a retired patch', () => {
    for (const p of PATCHES.filter((x) => x.status !== 'live'))
      expect({ id: p.id, without: p.replayedWithout }).toEqual({ id: p.id, without: [] });
  });

  it('every archived history sits under a release that replays it and is named by the patch whose retirement moved it', () => {
    const releases = new Set<string>(RELEASES.map((r) => r.id));
    const named = new Set(PATCHES.flatMap((p) => p.archived ?? []));
    const archived = existsSync(ARCHIVE_DIR)
      ? readdirSync(ARCHIVE_DIR, { recursive: true, withFileTypes: true })
          .filter((e) => e.isFile())
          .map((e) => relative(HISTORIES_DIR, join(e.parentPath, e.name)))
      : [];
    for (const path of archived) {
      expect(path, 'archive/<release>/<name>.json').toMatch(/^archive\/r\d+\/[^/]+\.json$/);
      expect(releases.has(path.split('/')[1]!), `${path}: not a landed release`).toBe(true);
      expect(named.has(path.replace(/\.json$/, '')), `${path}: no retired patch names it`).toBe(true);
    }
    for (const p of PATCHES) {
      if (p.archived?.length) expect(p.status, `${p.id} archived histories but is live`).not.toBe('live');
      for (const name of p.archived ?? []) {
        expect(archived, `${p.id}: ${name}.json`).toContain(`${name}.json`);
        if (p.status === 'deprecated')
          expect(
            markersOf(name).map((m) => m.id),
            `${p.id} in ${name}`,
          ).not.toContain(p.id);
      }
    }
  });

  describe('on replay', () => {
    let meetings: PatchMeeting[] = [];
    let errors: string[] = [];
    beforeAll(async () => {
      ({ meetings, errors } = await replayPatchMeetings([...current]));
    }, 300_000);

    it('replays every current history', () => {
      expect(errors).toEqual([]);
    });

    it('the histories listed with a live patch take its new branch, and exactly those listed without take its old one', () => {
      for (const p of withStatus('live')) {
        const taken = meetings.filter((m) => m.patchId === p.id);
        const newBranch = taken.filter((m) => m.taken).map((m) => m.file);
        expect(
          p.replayedWith.map((n) => `${n}.json`).filter((f) => !newBranch.includes(f)),
          `${p.id}: listed with, not taken`,
        ).toEqual([]);
        expect(
          taken
            .filter((m) => !m.taken)
            .map((m) => m.file)
            .sort(),
          `${p.id}: old branch`,
        ).toEqual(p.replayedWithout.map((n) => `${n}.json`).sort());
      }
    });

    it('no history meets a patch the registry does not list as live', () => {
      const live = new Set(withStatus('live').map((p) => p.id));
      expect([...new Set(meetings.map((m) => m.patchId))].filter((id) => !live.has(id))).toEqual([]);
    });
  });
});

describe('the retirement policy (fateAt)', () => {
  it('deprecates a live patch at the first boundary past the support window, and keeps one inside it', () => {
    expect(SUPPORT_WINDOW).toBe(2);
    expect(fateAt({ status: 'live', introducedIn: 'r7' }, 'r9')).toBe('deprecated');
    expect(fateAt({ status: 'live', introducedIn: 'r8' }, 'r9')).toBe('live');
    expect(fateAt({ status: 'live', introducedIn: 'r8' }, 'r10')).toBe('deprecated');
    expect(fateAt({ status: 'live', introducedIn: 'r8' }, 'r10', 3)).toBe('live');
  });

  it('removes a deprecated call only once no supported history can carry its marker undeprecated', () => {
    expect(fateAt({ status: 'deprecated', introducedIn: 'r2', deprecatedIn: 'r8' }, 'r10')).toBe('removed');
    expect(fateAt({ status: 'deprecated', introducedIn: 'r2', deprecatedIn: 'r9' }, 'r10')).toBe('deprecated');
    expect(fateAt({ status: 'removed', introducedIn: 'r2', deprecatedIn: 'r3' }, 'r10')).toBe('removed');
  });

  it('knows only the releases it records', () => {
    expect(() => releaseIndex('r99')).toThrow(/unknown release r99/);
  });
});
