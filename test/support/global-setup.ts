import { ensureTools } from '../../workers/toolchain';

/** Install the pinned Temporal binaries once, before any suite needs a server. */
export default function setup(): void {
  ensureTools((line) => process.stderr.write(`[global-setup] ${line}\n`));
}
