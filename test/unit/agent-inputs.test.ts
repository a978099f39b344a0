import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { applyEntry, verifiedRevision, type EntryContext } from '../../agent/apply-entry';
import { enrollIdentity, loadIdentity } from '../../agent/identity';
import { gatewayUrl, prepareStateDir, readFlagFile } from '../../agent/inputs';
import { parseTrustFlags } from '../../agent/pins';
import { reportFile } from '../../agent/report-file';
import { localDeviceSession } from '../../device/transport/local';
import { isLoopbackHostname, stateDirProblem, trustFileProblem } from '../../core/agent-inputs';
import type { Revision } from '../../core/revision';
import { keyPairFromSeed, pinOf, signRevision } from '../../core/signing';
import { envelopeDigestOf, type DesiredEntry } from '../../core/twin';
import { scratchDir } from '../support/harness';
import { refusal } from '../support/refusal';

/**
 * `wavegate agent`'s own inputs (issue 22): each refusal is INVALID_INPUT naming the flag and the path
 * or value, from the functions the CLI calls before it syncs anything (test/corpus/cases-agent.yaml runs
 * the same through the real CLI). The trust files are held to StrictModes at start and at every read:
 * one made world-writable after the start refuses the apply (UNSAFE_TRUST) and runs nothing.
 */
const scratch = scratchDir('agent-inputs');
afterAll(() => scratch.cleanup());
let n = 0;
const fresh = (name: string) => {
  const dir = join(scratch.dir, `${++n}-${name}`);
  mkdirSync(dir, { recursive: true });
  return dir;
};

describe('--gateway: plain HTTP only to loopback without --insecure-http', () => {
  it('knows loopback by address, not by a look-alike name', () => {
    for (const h of ['127.0.0.1', '127.3.2.1', 'localhost', '[::1]', '::1', 'LOCALHOST'])
      expect(isLoopbackHostname(h), h).toBe(true);
    for (const h of [
      '10.0.0.5',
      '0.0.0.0',
      '127.0.0.1.example.com',
      'localhost.example',
      '128.0.0.1',
      '[::ffff:10.0.0.1]',
      '127.256.0.1',
      'gateway',
    ])
      expect(isLoopbackHostname(h), h).toBe(false);
  });

  it('refuses http:// off loopback naming --gateway and the value; --insecure-http, https:// and loopback are accepted', () => {
    const err = refusal(() => gatewayUrl('http://192.0.2.10:8080', false));
    expect(err.code).toBe('INVALID_INPUT');
    expect(err.message).toContain('--gateway "http://192.0.2.10:8080": plain HTTP only to a gateway on loopback');
    expect(err.message).toContain('--insecure-http');
    expect(refusal(() => gatewayUrl('http://user:secret@gw.example:80', false)).message).not.toContain('secret');
    expect(gatewayUrl('http://192.0.2.10:8080/', true)).toBe('http://192.0.2.10:8080');
    expect(gatewayUrl('https://gw.example:8443', false)).toBe('https://gw.example:8443');
    expect(gatewayUrl('http://127.0.0.1:9000', false)).toBe('http://127.0.0.1:9000');
    expect(gatewayUrl('http://[::1]:9000', false)).toBe('http://[::1]:9000');
  });
});

describe('--key and --gateway-ca: the bounded regular-file reader', () => {
  it('a FIFO as the key is refused at once (it used to block the read for ever), naming --key and the path', () => {
    const dir = fresh('fifo');
    const fifo = join(dir, 'identity.key');
    execFileSync('mkfifo', [fifo]);
    const err = refusal(() => loadIdentity(fifo));
    expect(err.message).toBe(`--key ${fifo}: is not a regular file (a FIFO, device or directory)`);
    expect(refusal(() => loadIdentity(dir)).message).toContain(`--key ${dir}: is not a regular file`);
    expect(refusal(() => loadIdentity('/dev/zero')).message).toContain('--key /dev/zero: is not a regular file');
  });

  it('a key others may read, or one far too big to be a key, is refused naming the mode or the size', () => {
    const dir = fresh('key');
    const { keyFile } = enrollIdentity(join(dir, 'state'));
    expect(loadIdentity(keyFile).publicKey).toHaveLength(32);
    chmodSync(keyFile, 0o640);
    expect(refusal(() => loadIdentity(keyFile)).message).toBe(
      `--key ${keyFile}: mode 0640 lets others read the identity key; chmod 600 it`,
    );
    const big = join(dir, 'big.key');
    writeFileSync(big, Buffer.alloc(70 * 1024, 0x20), { mode: 0o600 });
    expect(refusal(() => loadIdentity(big)).message).toMatch(
      /--key .*big\.key: is 71680 bytes; an identity key file is at most 65536/,
    );
  });

  it('--gateway-ca naming a FIFO or a device is refused naming the flag and the path', () => {
    const fifo = join(fresh('ca'), 'ca.pem');
    execFileSync('mkfifo', [fifo]);
    expect(refusal(() => readFlagFile('--gateway-ca', fifo)).message).toBe(
      `--gateway-ca ${fifo}: cannot read file (not a regular file)`,
    );
    expect(refusal(() => readFlagFile('--gateway-ca', '/dev/zero')).message).toContain(
      '--gateway-ca /dev/zero: cannot read file (not a regular file)',
    );
  });
});

describe('--state-dir', () => {
  it('a file is refused naming the flag and the path (it crashed with a stack trace), for the agent and for enroll', () => {
    const dir = fresh('state-file');
    const file = join(dir, 'state');
    writeFileSync(file, 'x');
    expect(refusal(() => prepareStateDir('--state-dir', file, () => {})).message).toBe(
      `--state-dir ${file}: is not a directory`,
    );
    expect(refusal(() => enrollIdentity(file)).message).toBe(`--state-dir ${file}: is not a directory`);
    expect(refusal(() => prepareStateDir('--state-dir', join(file, 'sub'), () => {})).message).toBe(
      `--state-dir ${join(file, 'sub')}: a parent of it is not a directory`,
    );
  });

  it('one others may write is refused naming the mode; one they may only read is set to 0700 and said; a missing one is made 0700', () => {
    const dir = fresh('state-modes');
    const open = join(dir, 'open');
    mkdirSync(open);
    chmodSync(open, 0o777);
    expect(refusal(() => prepareStateDir('--state-dir', open, () => {})).message).toContain(
      `--state-dir ${open}: is world-writable (mode 0777)`,
    );
    chmodSync(open, 0o770);
    expect(refusal(() => prepareStateDir('--state-dir', open, () => {})).message).toContain(
      'is group-writable (mode 0770)',
    );
    expect(statSync(open).mode & 0o777).toBe(0o770); // refused, not changed
    const readable = join(dir, 'readable');
    mkdirSync(readable);
    chmodSync(readable, 0o755);
    const said: string[] = [];
    prepareStateDir('--state-dir', readable, (l) => said.push(l));
    expect(statSync(readable).mode & 0o777).toBe(0o700);
    expect(said).toEqual([`--state-dir ${readable}: mode 0755 was looser than 0700; set to 0700`]);
    const missing = join(dir, 'a', 'b');
    expect(prepareStateDir('--state-dir', missing, () => {})).toBe(missing);
    expect(statSync(missing).mode & 0o777).toBe(0o700);
  });

  it("another user's directory is refused (the rule; the tests run as one user)", () => {
    expect(stateDirProblem({ kind: 'directory', mode: 0o700, uid: 1001 }, 1000)).toBe(
      'is owned by uid 1001, not by this user (uid 1000)',
    );
    expect(stateDirProblem({ kind: 'directory', mode: 0o700, uid: 1000 }, 1000)).toBeUndefined();
  });

  it('a report.json that is a FIFO is refused at start, not read', () => {
    const dir = fresh('report-fifo');
    execFileSync('mkfifo', [join(dir, 'report.json')]);
    expect(refusal(() => reportFile(dir)).message).toBe(
      `--state-dir ${dir}: ${join(dir, 'report.json')} is not a regular file; move it away`,
    );
  });
});

describe("--trust: the device's trust anchor under StrictModes", () => {
  const signer = keyPairFromSeed(randomBytes(32));
  const trustText = JSON.stringify({ threshold: 1, pins: [pinOf(signer)] });

  it('refuses at start a trust file others may write, or in a directory others may write (unless sticky), naming the path and the mode', () => {
    const root = fresh('trust');
    const profiles = join(root, 'profiles');
    mkdirSync(join(profiles, 'web'), { recursive: true });
    const file = join(profiles, 'web', 'trust.yaml');
    writeFileSync(file, trustText);
    expect(parseTrustFlags([profiles]).of('web')?.threshold).toBe(1);
    chmodSync(file, 0o666);
    expect(refusal(() => parseTrustFlags([profiles])).message).toMatch(
      new RegExp(`^--trust ${profiles}: ${file}: refused: is world-writable \\(mode 0666\\); .*SECURITY\\.md`),
    );
    chmodSync(file, 0o664);
    expect(refusal(() => parseTrustFlags([`web=${file}`])).message).toContain(
      `--trust web=${file}: ${file}: refused: is group-writable (mode 0664)`,
    );
    chmodSync(file, 0o644);
    chmodSync(join(profiles, 'web'), 0o777);
    expect(refusal(() => parseTrustFlags([`web=${file}`])).message).toContain(
      `its directory ${join(profiles, 'web')} is world-writable (mode 0777) and not sticky`,
    );
    chmodSync(join(profiles, 'web'), 0o1777); // sticky: others cannot replace a file they do not own
    expect(parseTrustFlags([`web=${file}`]).of('web')?.threshold).toBe(1);
    chmodSync(join(profiles, 'web'), 0o755);
    chmodSync(profiles, 0o775);
    expect(refusal(() => parseTrustFlags([profiles])).message).toContain(
      `the profiles directory ${profiles} is group-writable (mode 0775) and not sticky`,
    );
  });

  it('a trust file owned by another user (not root) is refused (the rule)', () => {
    const dir = { kind: 'directory' as const, mode: 0o755, uid: 0 };
    expect(trustFileProblem({ kind: 'file', mode: 0o644, uid: 1001 }, dir, 1000, '/etc/wavegate')).toBe(
      'is owned by uid 1001, not by this user (uid 1000) or root',
    );
    expect(trustFileProblem({ kind: 'file', mode: 0o644, uid: 0 }, dir, 1000, '/etc/wavegate')).toBeUndefined();
    expect(trustFileProblem({ kind: 'file', mode: 0o644, uid: 0 }, { ...dir, uid: 1001 }, 1000, '/etc/wavegate')).toBe(
      'its directory /etc/wavegate is owned by uid 1001, not by this user (uid 1000) or root',
    );
  });

  it('a trust file made world-writable after the start: the next apply is refused UNSAFE_TRUST and runs nothing', async () => {
    const root = fresh('trust-later');
    const profiles = join(root, 'profiles');
    mkdirSync(join(profiles, 'web'), { recursive: true });
    const file = join(profiles, 'web', 'trust.yaml');
    writeFileSync(file, trustText);
    const trust = parseTrustFlags([profiles]);
    const home = join(root, 'home');
    mkdirSync(home);
    const revision = {
      profile: 'web',
      revision: 2,
      apply: 'echo ran > "$HOME/ran"',
      verify: 'grep -qx ran "$HOME/ran"',
      payload: [],
      risk: 'risky',
    } as Revision;
    const envelope = signRevision(revision, signer, { now: Date.now() });
    const entry: DesiredEntry = {
      requestId: 'rollout:web:run-1:1',
      profile: 'web',
      revision: 2,
      steps: { profile: 'web', revision: 2, apply: '(signed)', verify: '(signed)', payload: [], envelope },
      envelopeDigest: envelopeDigestOf(envelope),
      holder: { rollout: 'rollout:web', run: 'run-1', activity: '1', attempt: 1 },
      rollout: 'rollout:web',
      fromRevision: null,
      setAt: new Date().toISOString(),
    };
    expect(verifiedRevision(entry, trust, Date.now()).revision).toBe(2);
    chmodSync(file, 0o646);
    const reason = (refusal(() => verifiedRevision(entry, trust, Date.now()), Error) as { reason?: string }).reason;
    expect(reason).toBe('UNSAFE_TRUST');
    const ctx: EntryContext = {
      deviceId: 'dev-1',
      stateDir: join(root, 'state'),
      trust,
      connect: async () => localDeviceSession('dev-1', home),
      download: async () => Buffer.alloc(0),
      commandTimeoutMs: 10_000,
      log: () => {},
    };
    const answer = await applyEntry(ctx, entry);
    expect(answer).toMatchObject({ state: 'refused', reason: 'UNSAFE_TRUST' });
    expect(answer.detail).toContain(`${file}: refused: is world-writable (mode 0646)`);
    expect(existsSync(join(home, 'ran'))).toBe(false);
    chmodSync(file, 0o644);
    // Safe again: the same entry applies (claimed: this tiny revision's verify is not one core/provability.ts counts as proof).
    expect(await applyEntry(ctx, { ...entry, requestId: 'rollout:web:run-1:2' })).toMatchObject({
      state: 'claimed',
      revision: 2,
    });
    expect(existsSync(join(home, 'ran'))).toBe(true);
  });
});
