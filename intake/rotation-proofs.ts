import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { RotationProof } from '../core/agent-rotation';
import { WavegateError } from '../core/errors';
import { lazySchema, zod } from '../core/lazy-schema';
import { parseWith } from '../core/validation';
import { readDocument } from './files';

/**
 * An agent identity key rotation's proofs file, `<state dir>/<id>.proofs.json` (docs/formats.md section 18): what
 * each device proved (core/agent-rotation.ts). Its one writer is the gateway (gateway/identity-rotation.ts); the
 * CLI's `rotation activate` and `audit export --rotation-proofs` read it, and check every proof again themselves.
 */

export const PROOFS_TYPE = 'wavegate/agent-identity-proofs';

export interface ProofsFile {
  type: typeof PROOFS_TYPE;
  id: string;
  /** The schedule's body digest: proofs of another schedule of the same id are not mixed in. */
  schedule: string;
  devices: Record<string, { at: string; proof: RotationProof }>;
}

const ProofsSchema = lazySchema(() =>
  zod()
    .object({
      type: zod().literal(PROOFS_TYPE),
      id: zod().string().max(64),
      schedule: zod()
        .string()
        .regex(/^[0-9a-f]{64}$/),
      devices: zod().record(
        zod().string().max(128),
        zod()
          .object({
            at: zod().string().max(64),
            proof: zod()
              .object({
                id: zod().string().max(64),
                old: zod().string().max(64),
                new: zod().string().max(64),
                byOld: zod().string().max(100),
                byNew: zod().string().max(100),
              })
              .strict(),
          })
          .strict(),
      ),
    })
    .strict(),
);

export function proofsPath(statePath: string, id: string): string {
  return join(dirname(statePath), `${id}.proofs.json`);
}

/** A rotation's proofs file, or an empty one; another schedule's file of the same id is CONFLICT. */
export function readProofs(path: string, id: string, schedule: string): ProofsFile {
  if (!existsSync(path)) return { type: PROOFS_TYPE, id, schedule, devices: {} };
  const file = parseWith(ProofsSchema, readDocument(path, 'json'), path) as ProofsFile;
  if (file.id !== id || file.schedule !== schedule)
    throw new WavegateError(
      'CONFLICT',
      `${path}: the proofs of rotation ${file.id} (schedule ${file.schedule.slice(0, 12)}), not of ${id} (${schedule.slice(0, 12)})`,
      { field: '--rotation', value: path },
    );
  return file;
}
