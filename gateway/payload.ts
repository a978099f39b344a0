import { peekBody } from '../core/signing';
import { PayloadFile } from '../core/revision';
import type { TwinView } from '../core/twin';
import { PayloadRefused, readPayload, resolvePayload } from '../activities/payload-file';
import { HttpRefusal } from './http';

/**
 * The bytes of `<profile>/<revision>/<name>` for a device: only a payload entry named in the signed
 * body of that device's desired envelope for that profile and revision, found by that entry under the
 * gateway's own profiles root (activities/payload-file.ts, the worker's rules: inside the profile's
 * payload/, a regular file of the signed size and digest). The agent checks the SHA-256 again.
 */
export function payloadFor(view: TwinView | null, profilesRoot: string, profile: string, revision: number, name: string): Buffer {
  const entry = view && Object.hasOwn(view.desired, profile) ? view.desired[profile] : undefined;
  if (!entry || entry.revision !== revision) {
    throw new HttpRefusal(403, 'FORBIDDEN', `${profile} r${revision} is not this device's desired revision${entry ? ` (that is r${entry.revision})` : ''}: its payload is not yours to fetch`);
  }
  const body = entry.steps.envelope ? peekBody(entry.steps.envelope) : undefined;
  const files = body && typeof body === 'object' && Array.isArray((body as { payload?: unknown }).payload) ? (body as { payload: unknown[] }).payload : [];
  const match = files.map((f) => PayloadFile.safeParse(f)).find((p) => p.success && p.data.name === name);
  if (!match?.success) throw new HttpRefusal(403, 'FORBIDDEN', `"${name}" is not a payload file of the signed ${profile} r${revision} this device is to run`);
  try {
    return readPayload(resolvePayload(profilesRoot, profile, match.data), match.data);
  } catch (err) {
    if (err instanceof PayloadRefused) throw new HttpRefusal(err.reason === 'PAYLOAD_MISSING' ? 404 : 409, err.reason, err.message.slice(err.reason.length + 2));
    throw err;
  }
}
