// Bundled in place of '@temporalio/workflow' for test/support/patch-probe.ts only: the SDK as it is, with
// `patched` reporting each answer it gives on replay (true: the history carries the marker; false: it reached
// the patch point without it).
import { patched as sdkPatched, proxySinks, type Sinks } from '@temporalio/workflow/lib/index';

export * from '@temporalio/workflow/lib/index';

export interface PatchProbeSinks extends Sinks {
  patchProbe: { asked(patchId: string, taken: boolean): void };
}

const { patchProbe } = proxySinks<PatchProbeSinks>();

export function patched(patchId: string): boolean {
  const taken = sdkPatched(patchId);
  patchProbe.asked(patchId, taken);
  return taken;
}
