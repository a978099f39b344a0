import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { WavegateError } from '../core/errors';
import { heldTrustOf, MAX_HELD_PROFILES } from '../core/held-trust';
import { PROFILE_NAME, PROFILE_NAME_RULE } from '../core/profile-name';
import { parseTrust, type Trust } from '../core/signing';
import { readDocument } from '../intake/files';
import { profileDir } from '../intake/profile-dir';
import { checkTrustDir, checkTrustFile } from './inputs';
import type { HeldTrustStore } from './trust-store';

/**
 * The agent's OWN pins, per profile: what it verifies every desired envelope against, whatever the
 * gateway or the control plane says. `--trust DIR` is a profiles directory (`DIR/<profile>/trust.yaml`,
 * the worker's layout); `--trust <profile>=<file>` names one profile's trust file (repeatable). Read
 * again for every apply, so an edited trust file counts from the next apply on.
 *
 * The trust files are this device's trust anchor, held to StrictModes (core/agent-inputs.ts): a file, its
 * directory or a profiles directory that others may write is refused at start (exit 2 naming the path and
 * the mode) and, should it become so later, at every read (`of` throws INVALID_INPUT: the apply is refused).
 */
export interface AgentTrust {
  /** The profile's pins, or undefined when the agent holds none for it (it then refuses: NO_TRUST). */
  of(profile: string): Trust | undefined;
  /** Where the pins for `profile` are read from (for messages). */
  describe(): string;
  /** The profiles it holds pins for, at most MAX_HELD_PROFILES: the trust learned through the gateway is for these. */
  profiles?(): string[];
  /** The profile's pins file alone: version 0 of its trust root, what learned roots are walked from. */
  anchorOf?(profile: string): Trust | undefined;
}

/**
 * The agent's pins with what it learned through the gateway (agent/trust-store.ts): a profile's pins are its newest
 * verified trust root's (its pins file is version 0) with its newest revocation list applied, so a revoked revision
 * is refused (REVOKED) and a revoked or rotated-away key counts no more. A profile without a pins file has none,
 * whatever was learned for it: the pins file stays the anchor of the profile on this device.
 */
export function withHeldTrust(base: AgentTrust, store: Pick<HeldTrustStore, 'get'>): AgentTrust {
  return {
    of(profile) {
      const anchor = base.of(profile);
      return anchor && heldTrustOf(store.get(profile), anchor);
    },
    anchorOf: (profile) => base.of(profile),
    profiles: () => base.profiles?.() ?? [],
    describe: () => base.describe(),
  };
}

export function parseTrustFlags(values: readonly string[]): AgentTrust {
  if (values.length === 0)
    throw new WavegateError(
      'INVALID_INPUT',
      '--trust: required: a profiles directory (DIR/<profile>/trust.yaml) or <profile>=<trust file>',
      { field: '--trust' },
    );
  const dirs: string[] = [];
  const files = new Map<string, string>();
  for (const value of values) {
    const eq = value.indexOf('=');
    if (eq > 0) {
      const profile = value.slice(0, eq);
      const file = resolve(value.slice(eq + 1));
      if (!PROFILE_NAME.test(profile))
        throw new WavegateError('INVALID_INPUT', `--trust ${value}: the profile ${PROFILE_NAME_RULE}`, {
          field: '--trust',
          value,
        });
      if (!existsSync(file))
        throw new WavegateError('INVALID_INPUT', `--trust ${value}: no such file ${file}`, { field: '--trust', value });
      if (files.has(profile))
        throw new WavegateError('INVALID_INPUT', `--trust ${value}: profile "${profile}" given twice`, {
          field: '--trust',
          value,
        });
      checkTrustFile(file, `--trust ${value}`);
      parseTrust(readTrustDocument(file, `--trust ${value}`), `--trust ${value}`); // a bad file is refused at start, not at the first apply
      files.set(profile, file);
    } else {
      const dir = resolve(value);
      let isDir = false;
      try {
        isDir = statSync(dir).isDirectory();
      } catch {
        /* refused below */
      }
      if (!isDir)
        throw new WavegateError(
          'INVALID_INPUT',
          `--trust ${value}: not a directory; give a profiles directory (DIR/<profile>/trust.yaml) or <profile>=<trust file>`,
          { field: '--trust', value },
        );
      checkTrustDir(dir, `--trust ${value}`);
      // Every trust file already there is checked now: a bad mode is refused at start, not at an apply.
      for (const name of readdirSync(dir)) {
        if (!PROFILE_NAME.test(name)) continue;
        const file = profileDir(dir, name).trustFile;
        if (existsSync(file)) checkTrustFile(file, `--trust ${value}`);
      }
      dirs.push(dir);
    }
  }
  return {
    of(profile) {
      const file = files.get(profile) ?? dirs.map((d) => profileDir(d, profile).trustFile).find((f) => existsSync(f));
      if (!file) return undefined;
      checkTrustFile(file, `trust file of profile "${profile}"`);
      return parseTrust(readTrustDocument(file, file), file);
    },
    profiles() {
      const names = new Set(files.keys());
      for (const dir of dirs) {
        let entries: string[] = [];
        try {
          entries = readdirSync(dir);
        } catch {
          /* unreadable now: its profiles are refused at their apply */
        }
        for (const name of entries.sort())
          if (PROFILE_NAME.test(name) && existsSync(profileDir(dir, name).trustFile)) names.add(name);
      }
      return [...names].sort().slice(0, MAX_HELD_PROFILES);
    },
    describe: () =>
      [...dirs.map((d) => `${d}/<profile>/trust.yaml`), ...[...files].map(([p, f]) => `${p}=${f}`)].join(', '),
  };
}

/** A trust file's document through the bounded reader (a FIFO or /dev/zero is refused, not read), named as `what`. */
function readTrustDocument(file: string, what: string): unknown {
  try {
    return readDocument(file);
  } catch (err) {
    if (err instanceof WavegateError && !err.message.startsWith(what))
      throw new WavegateError('INVALID_INPUT', `${what}: ${err.message}`, { field: '--trust', value: file });
    throw err;
  }
}

/**
 * applyToDevice reads pins and payload files from a profiles directory (its `profilesRoot`): the agent's is
 * `<state>/profiles`, where it writes the profile's pins from its own trust before each apply and its
 * checked payload downloads. Returns that directory.
 */
export function stagePins(stateDir: string, profile: string, trust: Trust): string {
  const root = join(stateDir, 'profiles');
  const layout = profileDir(root, profile);
  mkdirSync(layout.dir, { recursive: true, mode: 0o700 });
  const text = JSON.stringify({ threshold: trust.threshold, pins: trust.pins });
  if (!existsSync(layout.trustFile) || readFileSync(layout.trustFile, 'utf8') !== text) {
    writeFileSync(layout.trustFile, text, { mode: 0o600 });
    chmodSync(layout.trustFile, 0o600);
  }
  return root;
}
