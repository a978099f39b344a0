import { describe, expect, it } from 'vitest';
import { parseInventory } from '../../../core/inventory';
import { WavegateError } from '../../../core/errors';
import { targetOf } from '../../../device/fleet';
import { refusal } from '../../support/refusal';

/** An SSH device's receipt key in the inventory (`receipts`): where it may stand, what it must be, where it goes. */
const KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl';
const OTHER = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBL9AFIyiVr4fxUMKKCNu7z9bBTRLl8MKeRBW4UnpHaf';

const inventory = (...devices: object[]) => ({ defaults: { user: 'ops', pool: 'lab' }, devices });
const refused = (doc: unknown) => refusal(() => parseInventory(doc, 'fleet.yaml'), WavegateError);

describe('inventory receipts', () => {
  it('an SSH device enrols its receipt key (and a signing command), and its target carries both to the apply', () => {
    const inv = parseInventory(
      inventory(
        { id: 'a', host: 'a.lab', receipts: { key: KEY } },
        {
          id: 'b',
          host: 'b.lab',
          receipts: { key: OTHER, command: 'sudo -n /opt/wg/wavegate-sign-receipt /var/lib/wg' },
        },
        { id: 'c', host: 'c.lab' },
      ),
      'fleet.yaml',
    );
    expect(inv.devices.map((d) => d.receipts)).toEqual([
      { key: KEY },
      { key: OTHER, command: 'sudo -n /opt/wg/wavegate-sign-receipt /var/lib/wg' },
      undefined,
    ]);
    expect(targetOf(inv.devices[1]!).receipts).toEqual({
      key: OTHER,
      command: 'sudo -n /opt/wg/wavegate-sign-receipt /var/lib/wg',
    });
    expect('receipts' in targetOf(inv.devices[2]!)).toBe(false);
  });

  it('refuses a key that is not an ssh-ed25519 line, naming the field and the value (exit 2)', () => {
    for (const key of [
      'ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ',
      KEY.slice(0, -1),
      `${KEY} comment`,
      // The right length, but the wire form says 31 bytes, not 32; or 32 + 2 bits.
      KEY.replace('AAAAI', 'AAAAH'),
      KEY.replace('AAAAIO', 'AAAAIQ'),
    ]) {
      const err = refused(inventory({ id: 'a', host: 'a.lab', receipts: { key } }));
      expect(err.code).toBe('INVALID_INPUT');
      expect(err.message).toContain('devices[0].receipts.key: must be');
      expect(err.message).toContain(JSON.stringify(key).slice(0, 40));
      expect(err.message.split('\n')).toHaveLength(2);
    }
    expect(refused(inventory({ id: 'a', host: 'a.lab', receipts: { command: 'x' } })).message).toContain(
      'devices[0].receipts.key',
    );
    expect(refused(inventory({ id: 'a', host: 'a.lab', receipts: { key: KEY, command: 'a\nb' } })).message).toContain(
      'devices[0].receipts.command',
    );
    // An inventory is no signed content: it may name which signer runs, never another command.
    for (const command of ['rm -rf "$HOME/.wavegate"', '/sbin/reboot', 'sudo -n /opt/wg/wavegate-sign-receipt; id'])
      expect(refused(inventory({ id: 'a', host: 'a.lab', receipts: { key: KEY, command } })).message).toContain(
        'devices[0].receipts.command',
      );
    expect(refused(inventory({ id: 'a', host: 'a.lab', receipts: { key: KEY, extra: 1 } })).message).toContain(
      'devices[0].receipts',
    );
  });

  it('refuses receipts on an agent device (it signs with its agentKey) and one key on two devices', () => {
    const agentKey = `ed25519:${'A'.repeat(43)}=`;
    expect(refused(inventory({ id: 'g', transport: 'agent', agentKey, receipts: { key: KEY } })).message).toMatch(
      /devices\[0\]\.receipts: only for transport: ssh devices \(this one is agent.*\(got "ssh-ed25519 /,
    );
    const twice = refused(
      inventory({ id: 'a', host: 'a.lab', receipts: { key: KEY } }, { id: 'b', host: 'b.lab', receipts: { key: KEY } }),
    );
    expect(twice.message).toContain('devices[1].receipts.key: the same key as devices[0]');
    // A key in `defaults` would be every device's: the same refusal.
    expect(
      refused({
        ...inventory({ id: 'a', host: 'a.lab' }, { id: 'b', host: 'b.lab' }),
        defaults: { user: 'ops', pool: 'lab', receipts: { key: KEY } },
      }).message,
    ).toContain('devices[1].receipts.key: the same key as devices[0]');
  });
});
