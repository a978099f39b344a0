import { sha256 } from '@noble/hashes/sha2.js';
import type { z } from 'zod';
import { bytesToHex } from '@noble/hashes/utils.js';
import { toBase64, utf8Encode } from './bytes';
import { canonicalize } from './canonical';
import {
  cosignEnvelope,
  documentBody,
  verifySignatures,
  type Envelope,
  type KeyPair,
  type Trust,
  type VerifyFailure,
  verifyFailure,
} from './signing';

/**
 * The trust metadata beside revisions (a trust root, a revocation list, a timestamp, a rotation schedule) travels in
 * the same envelope as a revision: `{ body: base64(canonical JSON), signatures: [{ kid, alg, sig }] }`, its body
 * naming its `type`. One reader for all of them: the signatures first (core/signing.ts verifySignatures), then the
 * body as canonical JSON of the expected type and shape. Pure; nothing throws for a bad document.
 */

/** A signed document whose signatures met the trust and whose body is the expected type. */
export interface SignedDocument<T> {
  ok: true;
  content: T;
  /** Hex SHA-256 of the body bytes: the document's identity. */
  digest: string;
  signers: string[];
}

/**
 * Verify a signed document against `trust` and read its body with `schema`, whose `type` literal names what it
 * is: a document of another type is MALFORMED (a revocation list is never read as a root).
 */
export function readSignedDocument<S extends z.ZodType>(
  envelope: unknown,
  trust: Pick<Trust, 'threshold' | 'keys' | 'revoked'>,
  schema: S,
  what: string,
): SignedDocument<z.output<S>> | VerifyFailure {
  const signed = verifySignatures(envelope, trust);
  if (!signed.ok) return signed;
  return parsedDocument(signed.body, schema, what, signed.signers);
}

/** The body read with `schema` (no signature check: the caller made it). */
export function parsedDocument<S extends z.ZodType>(
  body: Uint8Array,
  schema: S,
  what: string,
  signers: string[],
): SignedDocument<z.output<S>> | VerifyFailure {
  const read = documentBody(body);
  if (!read.ok) return read;
  const parsed = schema.safeParse(read.content);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    return verifyFailure('MALFORMED', `${what}: ${issue.path.join('.') || '(root)'}: ${issue.message}`);
  }
  return { ok: true, content: parsed.data, digest: bytesToHex(sha256(body)), signers };
}

/** Sign a document's content (canonical JSON) with every key given, in order. */
export function signDocument(content: unknown, pairs: readonly KeyPair[]): Envelope {
  const body = utf8Encode(canonicalize(content));
  let envelope: Envelope = { body: toBase64(body), signatures: [] };
  for (const pair of pairs) envelope = cosignEnvelope(envelope, pair);
  return envelope;
}
