import { list, NO_CHANGED_DEVICES, unreadBeyondTimeout } from './evidence';
import type { CheckOf, CheckProvider, CheckRun, Unread, Verdict } from './types';

/** `devices-online`: every changed device answers through its channel (the worker's own `echo online`, or its agent's report). */
export const devicesOnline: CheckProvider<CheckOf<'devices-online'>> = {
  signedHealth: 'never',
  run: onlineVerdict,
};

async function onlineVerdict({ input, probe, tools }: CheckRun<CheckOf<'devices-online'>>): Promise<Verdict> {
  if (input.devices.length === 0) return NO_CHANGED_DEVICES;
  const answers = await tools.askEachDevice(input.devices, probe, (channel, device, q) => channel.online(device, q));
  // A device that did not answer within the check's time is not online: only devices we never got
  // to (the deadline passed while they queued) are unknown, and agents whose last report is too old to say.
  const offline = answers.filter((a) => (a.ok ? a.value !== null : a.kind === 'unreachable' || a.kind === 'timeout'));
  if (offline.length) {
    const why = offline.map((a) => `${a.device} (${a.ok ? a.value : a.reason})`);
    return {
      outcome: 'fail',
      evidence: `${offline.length} of ${answers.length} devices not online: ${list(why)}`,
      failedDevices: offline.map((a) => a.device),
    };
  }
  const unread = answers.filter((a): a is Unread => !a.ok);
  if (unread.length) {
    const notReached = unread.filter((a) => a.kind === 'not-reached');
    const parts = [
      ...(notReached.length
        ? [
            `${notReached.length} of ${answers.length} devices not reached within ${input.timeoutMs} ms: ${list(notReached.map((a) => a.device))}`,
          ]
        : []),
      ...unreadBeyondTimeout(unread, answers.length),
    ];
    return { outcome: 'inconclusive', evidence: parts.join('; '), failedDevices: unread.map((a) => a.device) };
  }
  return { outcome: 'pass', evidence: `${answers.length}/${answers.length} devices online` };
}
