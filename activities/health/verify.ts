import { commandsOnDevices } from './signed-commands';
import type { CheckOf, CheckProvider, CheckRun, Verdict } from './types';

type Verify = CheckOf<'verify'>;

/** The name a re-verify's command has in evidence: `edge-02/verify exit 1: ...`. */
export const REVERIFY_NAME = 'verify';

/**
 * `verify`: the re-verify. The target revision's signed `verify` command (from the envelope this worker
 * verified, never the input's word) runs again on every changed device, exit 0 = it still holds what it
 * confirmed. The devices that fail it are named (`failedDevices`): the workflow flips them to `failed`.
 * An agent device answers from its report, which carries no such check: inconclusive, saying so.
 */
export const verifyCheck: CheckProvider<Verify> = {
  signedHealth: 'always',
  run: verifyVerdict,
};

async function verifyVerdict(run: CheckRun<Verify>): Promise<Verdict> {
  const verify = run.signed?.verify;
  if (!verify)
    return {
      outcome: 'inconclusive',
      evidence: `r${run.signed?.revision}'s signed envelope carries no verify command; nothing was run`,
    };
  return commandsOnDevices([{ name: REVERIFY_NAME, command: verify }], run);
}
