import { namedHealthChecks } from '../../core/revision';
import { commandsOnDevices } from './signed-commands';
import type { CheckOf, CheckProvider, CheckRun, Verdict } from './types';

type Named = CheckOf<'named'>;

/** `check: <name>`: the signed check `<name>` (of `health.runtimes` or `health.checks`) exits 0 on every changed device. */
export const namedCheck: CheckProvider<Named> = {
  signedHealth: 'always',
  run: namedVerdict,
};

async function namedVerdict(run: CheckRun<Named>): Promise<Verdict> {
  const checks = namedHealthChecks(run.signed?.health);
  const named = checks.find((c) => c.name === run.check.name);
  if (!named) {
    const known = checks.map((c) => c.name);
    return {
      outcome: 'inconclusive',
      evidence: `r${run.signed?.revision}'s signed health section has no check "${run.check.name}" (it has: ${known.join(', ') || 'none'}); nothing was run`,
    };
  }
  return commandsOnDevices([named], run);
}
