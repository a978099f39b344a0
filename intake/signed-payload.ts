import { WavegateError } from '../core/errors';
import type { Trust } from '../core/signing';
import type { SignedRevision } from './envelope';
import { readPayloadFacts } from './payload-digest';
import type { ProfileDir } from './profile-dir';

/**
 * The payload files of a revision, here, against what was signed: a file edited after signing is
 * refused now (every device would refuse it at apply), with the fix: sign and cosign the revision again,
 * or put the signed file back. Never a digest of the file found. A file that is not here is left to the
 * worker, which reads its own copy (`payloadNotHere` lists them for plan to say so).
 */
export function checkSignedPayload(
  layout: ProfileDir,
  trust: Trust | undefined,
  signed: SignedRevision,
  field: string,
): void {
  const { revision } = signed;
  const problems: string[] = [];
  for (const file of revision.payload) {
    const read = readPayloadFacts(layout.dir, file.source);
    if ('missing' in read) continue;
    const { size, sha256 } = read.facts;
    if (size !== file.size)
      problems.push(
        `payload "${file.name}" (${file.source}): has ${size} bytes, the signed r${revision.revision} says ${file.size}`,
      );
    else if (sha256 !== undefined && sha256 !== file.sha256)
      problems.push(`payload "${file.name}" (${file.source}): its sha256 is not the one r${revision.revision} signed`);
  }
  if (!problems.length) return;
  const n = revision.revision;
  const envelope = layout.envelopeFile(n);
  const fix = signed.envelope
    ? `If the change is meant, sign and cosign the revision again (leave the entry's sha256/size out of ${layout.revisionFile(n)} for sign to fill them, or update them), then give the worker the new envelope and payload:\n    wavegate sign ${layout.revisionFile(n)} --key <your key> --out ${envelope} --inventory <inventory> --profile ${layout.profileFile}${trust && trust.threshold > 1 ? `\n    wavegate cosign ${envelope} --key <another signer's key>   # up to the threshold of ${trust.threshold}` : ''}\n  Otherwise put back the file that was signed.`
    : `If the change is meant, update the entry's sha256 and size in ${layout.revisionFile(n)}; otherwise put back the file that was signed.`;
  throw new WavegateError(
    'INVALID_INPUT',
    `${field}: r${n} of profile "${layout.name}": a payload file in ${layout.payloadDir} is not the file that was signed; every device would refuse it.\n${problems.map((p) => `  ${p}`).join('\n')}\n  ${fix}`,
    { field, value: n, contentFree: true },
  );
}
