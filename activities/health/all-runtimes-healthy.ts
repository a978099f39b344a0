import { commandsOnDevices } from './signed-commands';
import type { CheckOf, CheckProvider, CheckRun, Verdict } from './types';

/** `all-runtimes-healthy`: every signed `health.runtimes` command exits 0 on every changed device. */
export const allRuntimesHealthy: CheckProvider<CheckOf<'all-runtimes-healthy'>> = {
  signedHealth: 'always',
  run: runtimesVerdict,
};

async function runtimesVerdict(run: CheckRun<CheckOf<'all-runtimes-healthy'>>): Promise<Verdict> {
  const runtimes = run.signed?.health?.runtimes ?? [];
  if (runtimes.length === 0)
    return {
      outcome: 'inconclusive',
      evidence: `r${run.signed?.revision}'s signed health section declares no runtimes, so none can be checked`,
    };
  return commandsOnDevices(runtimes, run);
}
