import type { Client } from '@temporalio/client';
import type { Inventory } from '../core/inventory';
import type { RolloutInput } from '../core/rollout/input';
import { parseRolloutSpec, type RolloutSpec } from '../core/spec';
import { loadDependencies, type LoadedDependency } from './dependencies';
import type { SignedRevision } from './envelope';
import { readDocument } from './files';
import { loadRolloutInventory } from './inventory';
import { loadProfile, type LoadedProfile } from './profile';
import { fileRevision, registeredRevision, registryTrust } from './revisions';
import { assembleRolloutInput } from './rollout-input';
import { checkMetricsPolicy, checkWebhookPolicy } from './secret-policy';
import { loadProfileTrust } from './trust';
import { readPayloadFacts } from './payload-digest';
import { checkSignedPayload } from './signed-payload';

/** A spec (parsed) with the profile it names and its two revisions, loaded and verified; no inventory yet. */
export interface RolloutContent extends LoadedProfile {
  spec: RolloutSpec;
  specSource: string;
  target: SignedRevision;
  from: SignedRevision;
  /** The profiles the spec's `after` names, each found with that revision in the profiles root. */
  dependencies: LoadedDependency[];
}

/** A parsed spec and where its profile and inventory are. */
export interface SpecRequest {
  spec: RolloutSpec;
  /** Names the spec in errors: its file, or what made it. */
  specSource: string;
  profilesRoot: string;
}

export interface RolloutFromSpec extends SpecRequest {
  /** The inventory; read from `inventoryPath` when not given. */
  inventory?: Inventory;
  inventoryPath: string;
  startedBy: string;
  rolloutId?: string;
}

export interface RolloutRequest {
  specPath: string;
  inventoryPath: string;
  /** The inventory already read and validated (e.g. from `--inventory-url`); read from `inventoryPath` when not given. */
  inventory?: Inventory;
  profilesRoot: string;
  startedBy: string;
  /**
   * Take the target and from revisions from the profile's registry (`registry:<profile>`) through this
   * client, verified against the profile's pins. Without it they come from the profile's files.
   */
  client?: Client;
}

/** A rollout spec file, validated (its webhooks also against the webhook policy of this environment). */
export function readSpec(path: string): RolloutSpec {
  const spec = parseRolloutSpec(readDocument(path), path);
  checkWebhookPolicy(spec, path);
  return spec;
}

/** The spec's profile, its metrics token within the metrics policy of this environment. */
function loadSpecProfile(req: SpecRequest): LoadedProfile {
  const loaded = loadProfile(req.profilesRoot, req.spec.profile, `${req.specSource}: rollout.profile`);
  checkMetricsPolicy(loaded.profile, loaded.layout.profileFile);
  return loaded;
}

/** The spec's profile and revisions from the profile's files (signed envelopes when it has pins). */
export function loadRolloutContent(req: SpecRequest): RolloutContent {
  const loaded = loadSpecProfile(req);
  const trust = loadProfileTrust(loaded.layout);
  const field = (name: string) => `${req.specSource}: rollout.${name}`;
  const target = fileRevision(loaded.layout, trust, req.spec.toRevision, field('toRevision'));
  const from = fileRevision(loaded.layout, trust, req.spec.fromRevision, field('fromRevision'));
  checkSignedPayload(loaded.layout, trust, target, field('toRevision'));
  checkSignedPayload(loaded.layout, trust, from, field('fromRevision'));
  return rolloutContent(req, loaded, target, from);
}

/** The payload files of the content that are not in this profile directory (the worker's own copy is checked by start). */
export function payloadNotHere(content: RolloutContent): string[] {
  const missing = new Set<string>();
  for (const { revision } of [content.target, content.from])
    for (const file of revision.payload)
      if ('missing' in readPayloadFacts(content.layout.dir, file.source))
        missing.add(`${file.source} (r${revision.revision})`);
  return [...missing];
}

/** The same from `registry:<profile>`, each envelope verified again against the profile's pins. */
export async function loadRegisteredRolloutContent(client: Client, req: SpecRequest): Promise<RolloutContent> {
  const loaded = loadSpecProfile(req);
  const field = (name: string) => `${req.specSource}: rollout.${name}`;
  const trust = registryTrust(loaded.layout, loadProfileTrust(loaded.layout), field('profile'));
  const target = await registeredRevision(client, loaded.layout, trust, req.spec.toRevision, field('toRevision'));
  const from = await registeredRevision(client, loaded.layout, trust, req.spec.fromRevision, field('fromRevision'));
  return rolloutContent(req, loaded, target, from);
}

/** The content of a rollout; its dependencies from the files either way: they are what the worker verifies them against. */
function rolloutContent(
  req: SpecRequest,
  loaded: ReturnType<typeof loadSpecProfile>,
  target: RolloutContent['target'],
  from: RolloutContent['from'],
): RolloutContent {
  return {
    ...req,
    ...loaded,
    target,
    from,
    dependencies: loadDependencies(req.spec, req.profilesRoot, req.specSource),
  };
}

function inputOf(content: RolloutContent, req: RolloutFromSpec): RolloutInput {
  return assembleRolloutInput({
    ...content,
    inventory: req.inventory ?? loadRolloutInventory(req.inventoryPath),
    inventoryPath: req.inventoryPath,
    startedBy: req.startedBy,
    ...(req.rolloutId ? { rolloutId: req.rolloutId } : {}),
  });
}

/** A rollout's input from a parsed spec, with the revisions from the profile's files. */
export function rolloutInputFromFiles(req: RolloutFromSpec): RolloutInput {
  return inputOf(loadRolloutContent(req), req);
}

/** A rollout's input from a parsed spec, with the revisions from the profile's registry. */
export async function rolloutInputFromRegistry(client: Client, req: RolloutFromSpec): Promise<RolloutInput> {
  return inputOf(await loadRegisteredRolloutContent(client, req), req);
}

/**
 * Everything `start` validates before it contacts Temporal, from files: the spec, the inventory, the
 * profile and the revisions, each against the same core/ schemas the workflow trusts. Any problem is
 * INVALID_INPUT (exit 2) and nothing starts. With `client` the revisions come from the registry and this
 * returns a promise; without, it reads files and returns synchronously.
 */
export function prepareRollout(req: RolloutRequest & { client?: undefined }): RolloutInput;
export function prepareRollout(req: RolloutRequest & { client: Client }): Promise<RolloutInput>;
export function prepareRollout(req: RolloutRequest): RolloutInput | Promise<RolloutInput>;
export function prepareRollout(req: RolloutRequest): RolloutInput | Promise<RolloutInput> {
  const spec: RolloutFromSpec = {
    spec: readSpec(req.specPath),
    specSource: req.specPath,
    profilesRoot: req.profilesRoot,
    inventoryPath: req.inventoryPath,
    startedBy: req.startedBy,
    ...(req.inventory ? { inventory: req.inventory } : {}),
  };
  return req.client ? rolloutInputFromRegistry(req.client, spec) : rolloutInputFromFiles(spec);
}
