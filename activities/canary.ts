import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Context } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { stringify } from 'yaml';
import { WavegateError } from '../core/errors';
import { parseInventory } from '../core/inventory';
import { parseProfile } from '../core/revision';
import { readDocument } from '../intake/files';
import { prepareRollout } from '../cli/prepare';
import type { RolloutInput } from '../core/rollout/input';
import { readFleetRevision } from './fleet';

/**
 * Activities of the nightly canary (workflows/canary.ts): read the fleet's revision over SSH, and build
 * the canary's RolloutInput from the files and the registry, validated exactly as `wavegate start` does.
 */
export interface CanaryActivityDeps {
  /** Client for the registry (default: the worker's own, from the activity context). */
  client?: Client;
}

export interface CanaryTarget {
  profile: string;
  inventoryPath: string;
  profilesDir: string;
}

export interface PrepareCanaryInput extends CanaryTarget {
  /** A rollout spec whose first phase is the canary (its from/to revisions are replaced); default: one device, 5 min gate. */
  specPath?: string;
  fromRevision: number;
  toRevision: number;
  keep: boolean;
  rolloutId: string;
  startedBy: string;
}

/** The canary phase when no spec is given: one device of the majority class, a short gate, the profile's health checks. */
function defaultCanaryRollout(profileDir: string) {
  const profilePath = join(profileDir, 'profile.yaml');
  const profile = parseProfile(readDocument(profilePath), profilePath);
  const healthGate = [...(profile.runtimes.length ? ['all-runtimes-healthy'] : []), ...(profile.metrics ? ['error-rate < 0.01'] : []), 'devices-online'];
  return { phases: [{ canary: '1 device', gate: '5m', healthGate }] };
}

function toFailure(err: unknown): never {
  if (err instanceof WavegateError && err.code !== 'UNAVAILABLE' && err.code !== 'FAILED') {
    throw ApplicationFailure.create({ type: `Canary.${err.code}`, message: err.message, nonRetryable: true });
  }
  throw err;
}

export function createCanaryActivities(deps: CanaryActivityDeps = {}) {
  const client = () => deps.client ?? Context.current().client;
  return {
    /** The revision most target devices' markers name now (null: none has a marker). */
    async fleetRevision(input: CanaryTarget): Promise<{ revision: number | null; unreachable: string[]; devices: number }> {
      try {
        const profilePath = join(resolve(input.profilesDir, input.profile), 'profile.yaml');
        const profile = parseProfile(readDocument(profilePath), profilePath);
        const inventory = parseInventory(readDocument(input.inventoryPath), input.inventoryPath);
        const read = await readFleetRevision({ inventory, profile: profile.name, scope: profile.scope });
        return { revision: read.revision, unreachable: read.unreachable, devices: Object.keys(read.markers).length + read.unreachable.length };
      } catch (err) {
        return toFailure(err);
      }
    },

    /**
     * The canary's rollout input: the spec (file or default) with fromRevision = the fleet's revision and
     * toRevision = the newest registered one, prepared by cli/prepare.ts from the registry (envelopes
     * verified against the profile's pins), with `canary: { keep }`.
     */
    async prepareCanary(input: PrepareCanaryInput): Promise<RolloutInput> {
      const profileDir = resolve(input.profilesDir, input.profile);
      const scratch = mkdtempSync(join(tmpdir(), 'wavegate-canary-'));
      try {
        const base = input.specPath ? ((readDocument(input.specPath) as { rollout?: Record<string, unknown> } | null)?.rollout ?? {}) : defaultCanaryRollout(profileDir);
        if (input.specPath && typeof base !== 'object') throw new WavegateError('INVALID_INPUT', `${input.specPath}: rollout: expected a rollout spec`);
        const specPath = join(scratch, 'canary-spec.yaml');
        writeFileSync(specPath, stringify({ rollout: { ...base, profile: input.profile, fromRevision: input.fromRevision, toRevision: input.toRevision } }));
        const prepared = await prepareRollout({ specPath, inventoryPath: input.inventoryPath, profilesDir: input.profilesDir, startedBy: input.startedBy, client: client() });
        return { ...prepared, rolloutId: input.rolloutId, canary: { keep: input.keep } };
      } catch (err) {
        return toFailure(err);
      } finally {
        rmSync(scratch, { recursive: true, force: true });
      }
    },
  };
}
