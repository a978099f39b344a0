import { existsSync } from 'node:fs';
import { join } from 'node:path';
import {
  APPROVERS_FILE,
  MAX_APPROVERS_BYTES,
  parseApprovers,
  verifyStatement,
  type StatementExpectation,
  type Verified,
} from '../core/approval';
import { readBytes, parseDocumentText, checkedDocument } from '../intake/files';
import { profileDir } from '../intake/profile-dir';

export interface VerifyStatementInput {
  profile: string;
  /** The signed statement as the control carried it (untrusted: anything at all). */
  signed: unknown;
  expect: StatementExpectation;
  /**
   * The time (epoch ms) the statement's age is judged at: a start statement at the rollout's start, so a
   * rollout a busy or restarted worker picks up late is not refused for it. Absent: now (an approval).
   */
  at?: number;
}

/**
 * The two-person rule's one read (core/approval.ts): the profile's approvers.yaml under this worker's own
 * profiles root (beside its trust.yaml, read nowhere else, at most 256 KiB), at every statement, so a key
 * removed from it counts no more from the next approval on. The answer is the identity or why none; what
 * it proves is decided by the workflow (core/approval.ts decideApproval).
 */
export function createApprovalActivities(deps: { profilesRoot: string }) {
  return {
    async verifyOperatorStatement(input: VerifyStatementInput): Promise<Verified> {
      const path = join(profileDir(deps.profilesRoot, input.profile).dir, APPROVERS_FILE);
      if (!existsSync(path))
        return {
          ok: false,
          why: `not authenticated: this worker pins no approver keys for profile ${input.profile} (no ${path})`,
        };
      let approvers: ReturnType<typeof parseApprovers>;
      try {
        const text = readBytes(path, MAX_APPROVERS_BYTES).toString('utf8');
        approvers = parseApprovers(checkedDocument(parseDocumentText(text, path, 'yaml'), path), path);
      } catch (err) {
        // The file's own problem, named (never its content): no approval counts until it is mended.
        return { ok: false, why: `not authenticated: ${(err as Error).message.split('\n')[0]}` };
      }
      return verifyStatement(input.signed, approvers, input.expect, input.at ?? Date.now());
    },
  };
}
