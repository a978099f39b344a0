import type { About, SignedCommand } from '../../device/channel';
import { beyondTimeout, list, NO_CHANGED_DEVICES, unreadBeyondTimeout } from './evidence';
import type { CheckRun, Unread, Verdict } from './types';

/**
 * The signed checks' common run (`all-runtimes-healthy`, `check: <name>`): the signed commands on each
 * device (or its agent's report of them); exit 0 = healthy. Names are what the evidence calls each command.
 */
export async function commandsOnDevices(
  commands: readonly SignedCommand[],
  { input, probe, tools }: CheckRun,
): Promise<Verdict> {
  if (input.devices.length === 0) return NO_CHANGED_DEVICES;
  const about: About = input;
  const answers = await tools.askEachDevice(input.devices, probe, (channel, device, q) =>
    channel.runChecks(device, commands, about, q),
  );
  const unhealthy = answers.filter((a): a is Extract<typeof a, { ok: true }> => a.ok && a.value.length > 0);
  const unread = answers.filter((a): a is Unread => !a.ok);
  if (unhealthy.length) {
    const what = unhealthy.flatMap((a) => a.value.map((v) => `${a.device}/${v}`));
    const also = unread.length ? `; ${unread.length} more could not be read` : '';
    return {
      outcome: 'fail',
      evidence: `unhealthy: ${list(what)}${also}`,
      failedDevices: unhealthy.map((a) => a.device),
    };
  }
  if (unread.length) {
    const timed = unread.filter((a) => !beyondTimeout(a));
    const parts = [
      ...(timed.length
        ? [
            `could not read ${timed.length} of ${answers.length} devices within ${input.timeoutMs} ms: ${list(timed.map((a) => `${a.device} (${a.reason})`))}`,
          ]
        : []),
      ...unreadBeyondTimeout(unread, answers.length),
    ];
    return { outcome: 'inconclusive', evidence: parts.join('; '), failedDevices: unread.map((a) => a.device) };
  }
  const n = commands.length * answers.length;
  return {
    outcome: 'pass',
    evidence: `${n} check${n === 1 ? '' : 's'} on ${answers.length} device${answers.length === 1 ? '' : 's'} exited 0`,
  };
}
