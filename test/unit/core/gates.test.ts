import { describe, expect, it } from 'vitest';
import { devicesInScope, osFamily, runRegistrationGates, type GateDevice, type GateInput } from '../../../core/gates';
import { classifyRevision, classifyStep } from '../../../core/provability';

describe('provability', () => {
  it.each([
    ['', 'EMPTY'],
    ['   ', 'EMPTY'],
    ['true', 'NO_OP'],
    [':', 'NO_OP'],
    ['exit 0', 'NO_OP'],
    ['/bin/true', 'NO_OP'],
    ['echo ok', 'NO_OP'],
    ['printf done', 'NO_OP'],
    ['python -c "pass"', 'NO_OP'],
    ["python3 -c 'pass'", 'NO_OP'],
    ['sh -c "true"', 'NO_OP'],
    ['true; echo done', 'NO_OP'],
    ['sleep 5 && exit 0', 'NO_OP'],
    ['the file should be in place now', 'PROSE'],
    ['Restart the service on every machine.', 'PROSE'],
    ['TODO', 'PROSE'],
    ['Prüfen, ob die Datei da ist', 'NON_ASCII'],
    ['grep -q "v=15" /etc/app.conf || true', 'ALWAYS_SUCCEEDS'],
    ['grep -q "v=15" /etc/app.conf; exit 0', 'ALWAYS_SUCCEEDS'],
    ['grep -q "v=15" /etc/app.conf | cat', 'ALWAYS_SUCCEEDS'],
  ])('%j is not provable (%s)', (text, reason) => {
    expect(classifyStep(text, 'verify')).toMatchObject({ provable: false, reason });
  });

  it.each([
    'systemctl --user is-active my-agent',
    'python -c "import cfg,sys; sys.exit(0 if cfg.TIMEOUT==30 else 1)"',
    'test -f /etc/app.conf && grep -q "version=15" /etc/app.conf',
    'fleetdeploy.py check-file "$FLEET_HOME/bin/w.py" --md5 4f2b',
    'sha256sum -c app.sha256',
    'echo "$WANT" | grep -qx "$(cat ~/.app/version)"',
  ])('%j is a machine command', (text) => {
    expect(classifyStep(text, 'verify')).toMatchObject({ provable: true });
  });

  it('a revision is provable only when both apply and verify are', () => {
    expect(
      classifyRevision({
        apply: 'install -m 644 "$WAVEGATE_STAGING/a.conf" /etc/a.conf',
        verify: 'cmp "$WAVEGATE_STAGING/a.conf" /etc/a.conf',
      }).provable,
    ).toBe(true);
    const r = classifyRevision({ apply: 'install -m 644 x /etc/x', verify: 'exit 0' });
    expect(r.provable).toBe(false);
    expect(r.reasons).toEqual([expect.stringMatching(/^verify: NO_OP/)]);
    // `cmd || true` in apply hides a failure but is still a command: it is verify that must read the fact.
    expect(classifyStep('cp a /etc/a || true', 'apply').provable).toBe(true);
  });
});

const linux = (
  id: string,
  os = 'ubuntu-22.04',
  user = 'ops',
  labels: Record<string, string> = { role: 'web' },
): GateDevice => ({ id, host: `${id}.example.net`, user, os, labels });
const DEVICES: GateDevice[] = [
  linux('web-01'),
  linux('web-02'),
  linux('web-03', 'rocky-9'),
  { id: 'pc-01', host: 'pc-01.example.net', user: 'ops', os: 'windows-11', labels: { role: 'desk' } },
];
const good = {
  apply: 'install -m 0644 "$WAVEGATE_STAGING/app.conf" /etc/app.conf',
  verify: 'grep -q "version=15" /etc/app.conf',
  previous: 14,
  payload: [{ name: 'app.conf', sha256: 'a'.repeat(64), size: 10, source: 'files/app.conf' }],
  risk: 'risky' as const,
};
const gates = (rev: Partial<GateInput['revision']>, extra: Partial<GateInput> = {}) =>
  runRegistrationGates({ revision: { ...good, ...rev }, scope: { role: 'web' }, devices: DEVICES, ...extra });

describe('registration gates', () => {
  it('a well-formed revision passes', () => {
    const report = gates({}, { scope: { role: 'web' }, devices: DEVICES.slice(0, 2) });
    expect(report).toMatchObject({ ok: true, blocked: [], escaped: [], warnings: [], targets: ['web-01', 'web-02'] });
  });

  it('unknown target: a scope that matches nothing, or names an unknown device', () => {
    expect(gates({}, { scope: { role: 'db' } }).blocked).toEqual([
      expect.objectContaining({ gate: 'unknown-target', reason: 'EMPTY_SCOPE', flag: '--allow-unknown-targets' }),
    ]);
    expect(gates({}, { scope: { id: 'web-99' } }).blocked[0]).toMatchObject({ reason: 'UNKNOWN_TARGET' });
    expect(gates({}, { scope: { tier: 'gold' } }).blocked[0]!.message).toMatch(/no device has label "tier"/);
  });

  it('unprovable: blocks unless --allow-unprovable, which leaves a loud line and an audit record', () => {
    const blocked = gates({ verify: 'exit 0' }, { devices: DEVICES.slice(0, 2) });
    expect(blocked.ok).toBe(false);
    expect(blocked.blocked).toEqual([
      expect.objectContaining({ gate: 'unprovable', reason: 'UNPROVABLE', flag: '--allow-unprovable' }),
    ]);
    const escaped = gates({ verify: 'exit 0' }, { devices: DEVICES.slice(0, 2), allow: ['--allow-unprovable'] });
    expect(escaped.ok).toBe(true);
    expect(escaped.escaped).toEqual([
      { gate: 'unprovable', flag: '--allow-unprovable', reason: expect.stringContaining('claimed') },
    ]);
    expect(escaped.warnings[0]).toMatch(/^WARNING: gate "unprovable" bypassed with --allow-unprovable: /);
  });

  it('node-local paths aimed at other machines', () => {
    const home = gates(
      {
        apply: 'install -m 0644 "$WAVEGATE_STAGING/app.conf" /home/alice/app.conf',
        verify: 'test -s /home/alice/app.conf && grep -q v=15 /home/alice/app.conf',
      },
      { devices: DEVICES.slice(0, 2) },
    );
    expect(home.blocked.map((b) => b.reason)).toContain('NODE_LOCAL_PATH');
    expect(home.blocked.find((b) => b.reason === 'NODE_LOCAL_PATH')!.flag).toBe('--allow-local-paths');
    // Every target logs in as alice: /home/alice is each one's own home.
    const own = gates(
      { apply: 'install -m 0644 "$WAVEGATE_STAGING/app.conf" /home/alice/app.conf' },
      { devices: [linux('a', 'debian', 'alice'), linux('b', 'debian', 'alice')] },
    );
    expect(own.blocked.map((b) => b.reason)).not.toContain('NODE_LOCAL_PATH');
    const win = gates(
      {
        apply: 'copy "%WAVEGATE_STAGING%\\app.conf" C:\\Users\\bob\\app.conf',
        verify: 'findstr v=15 C:\\Users\\bob\\app.conf',
      },
      { scope: {}, devices: [DEVICES[3]!, { ...DEVICES[3]!, id: 'pc-02' }] },
    );
    expect(win.blocked.map((b) => b.reason)).toContain('NODE_LOCAL_PATH');
    const hostSpecific = gates(
      { apply: 'install -m 0644 "$WAVEGATE_STAGING/app.conf" /srv/web-01/app.conf' },
      { devices: DEVICES.slice(0, 2) },
    );
    expect(hostSpecific.blocked.find((b) => b.reason === 'NODE_LOCAL_PATH')!.message).toMatch(/specific to web-01/);
  });

  it('portability follows the OS mix of the targets', () => {
    const apt = gates({
      apply: 'apt-get install -y app=15',
      verify: 'dpkg -s app | grep -q "Version: 15"',
      payload: [],
    });
    expect(apt.blocked.find((b) => b.reason === 'NONPORTABLE')!.message).toMatch(/web-03 \(rocky-9\)/);
    const ps1 = gates({
      apply: 'powershell -File "$WAVEGATE_STAGING/app.ps1"',
      payload: [{ ...good.payload[0]!, name: 'app.ps1' }],
    });
    expect(ps1.blocked.find((b) => b.gate === 'portability')).toMatchObject({ flag: '--allow-nonportable' });
    const chmodOnWindows = gates({ apply: 'chmod 0644 /etc/app.conf' }, { scope: {}, devices: DEVICES });
    expect(chmodOnWindows.blocked.find((b) => b.gate === 'portability')!.message).toMatch(/pc-01/);
    const generic = gates(
      { apply: 'apt-get install -y app=15', verify: 'dpkg -s app', payload: [] },
      { devices: [linux('x', 'linux'), linux('y', 'debian-12')] },
    );
    expect(generic.blocked.map((b) => b.gate)).not.toContain('portability');
    expect(generic.notes.join()).toMatch(/not known/);
    expect(osFamily('Ubuntu 24.04')).toBe('debian');
    expect(osFamily('windows-server-2022')).toBe('windows');
  });

  it('a risky revision needs a way back', () => {
    const { previous: _p, ...noPrevious } = good;
    const report = runRegistrationGates({ revision: noPrevious, scope: { role: 'web' }, devices: DEVICES.slice(0, 2) });
    expect(report.blocked).toEqual([
      expect.objectContaining({ gate: 'no-way-back', reason: 'NO_WAY_BACK', flag: '--allow-no-way-back' }),
    ]);
    expect(
      runRegistrationGates({
        revision: { ...noPrevious, rollback: 'apt-get install -y app=14' },
        scope: { role: 'web' },
        devices: DEVICES.slice(0, 2),
      }).ok,
    ).toBe(true);
    expect(
      runRegistrationGates({
        revision: { ...noPrevious, risk: 'safe' },
        scope: { role: 'web' },
        devices: DEVICES.slice(0, 2),
      }).ok,
    ).toBe(true);
  });

  it('promised delivery without a payload, and files the payload does not contain', () => {
    const devices = DEVICES.slice(0, 2);
    expect(gates({ payload: [] }, { devices }).blocked).toEqual([
      expect.objectContaining({ gate: 'promised-delivery', reason: 'PROMISED_DELIVERY', flag: '--allow-no-payload' }),
    ]);
    expect(gates({ payload: [], apply: 'cp app.conf /etc/app.conf' }, { devices }).blocked[0]).toMatchObject({
      reason: 'PROMISED_DELIVERY',
    });
    expect(
      gates({ payload: [], apply: 'the new config will arrive via sync' }, { devices }).blocked.map((b) => b.reason),
    ).toEqual(['UNPROVABLE', 'PROMISED_DELIVERY']);
    expect(gates({ payload: [], apply: 'apt-get install -y app=15' }, { devices }).blocked).toEqual([]);
    const missing = gates({ apply: 'install -m 0644 "$WAVEGATE_STAGING/other.conf" /etc/app.conf' }, { devices });
    expect(missing.blocked).toEqual([
      expect.objectContaining({
        gate: 'unresolvable-file',
        reason: 'UNRESOLVABLE_FILE',
        flag: '--allow-missing-files',
      }),
    ]);
  });

  it('several escapes at once each leave their own record', () => {
    const report = gates(
      { verify: 'true', payload: [], previous: undefined },
      { devices: DEVICES.slice(0, 2), allow: ['allow-unprovable', '--allow-no-payload', '--allow-no-way-back'] },
    );
    expect(report.ok).toBe(true);
    expect(report.escaped.map((e) => e.flag).sort()).toEqual([
      '--allow-no-payload',
      '--allow-no-way-back',
      '--allow-unprovable',
    ]);
    expect(report.warnings).toHaveLength(3);
  });

  it('scope selects by label, id, pool, class or os', () => {
    expect(devicesInScope({ role: 'web', os: 'rocky-9' }, DEVICES).map((d) => d.id)).toEqual(['web-03']);
    expect(devicesInScope({}, DEVICES)).toHaveLength(4);
  });
});
