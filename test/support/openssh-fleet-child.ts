/**
 * A process that starts a real OpenSSH fleet (sim/openssh.ts) and then waits to be killed, for
 * test/e2e/sigkill-cleanup.test.ts: `node --import tsx openssh-fleet-child.ts <dir> <devices> [crash]`. It
 * prints one JSON line { pids, ports } once every sshd accepts; it never stops the fleet itself. With
 * `crash` it dies 2 s later of an uncaught exception (a fatal error: no stop, no handler of its own).
 */
import { startOpenSshFleet } from '../../sim/openssh';

const [dir, count, crash] = process.argv.slice(2);
void startOpenSshFleet({
  dir: dir!,
  ids: Array.from({ length: Number(count ?? 2) }, (_, i) => `d${i}`),
  logLevel: 'ERROR',
}).then((fleet) => {
  process.stdout.write(
    `${JSON.stringify({ pids: fleet.devices.map((d) => d.pid), ports: fleet.devices.map((d) => d.port) })}\n`,
  );
  if (crash === 'crash')
    setTimeout(() => {
      throw new Error('a fatal error of the fleet owner');
    }, 2_000);
  setInterval(() => {}, 60_000); // until killed
});
