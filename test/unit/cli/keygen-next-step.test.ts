import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { runCli } from '../../support/cli';
import { scratchDir } from '../../support/harness';

/**
 * keygen's output points at the next documented step (README "Your own fleet", step 2): `wavegate trust`
 * writes the trust file from the .pub.yaml files. It used to say "add this pin to the trust file", a
 * file that step then overwrote (issue 23).
 */
describe('wavegate keygen: the next step it prints', () => {
  const scratch = scratchDir('keygen-next');
  afterAll(() => scratch.cleanup());

  it('names `wavegate trust` with the .pub.yaml it wrote, never a hand edit of the trust file; that command, filled in, writes the pin', async () => {
    const keygen = await runCli(['keygen', '--out', 'alice.key', '--name', 'alice'], { cwd: scratch.dir });
    expect(keygen.code, keygen.stderr).toBe(0);
    expect(keygen.stdout).not.toMatch(/add this pin to the trust file/i);
    const line = keygen.stdout.split('\n').find((l) => l.trim().startsWith('wavegate trust '));
    expect(line).toBe(
      '  wavegate trust alice.key.pub.yaml [<other signers>.pub.yaml ...] --threshold <n> --out <profiles>/<profile>/trust.yaml',
    );

    mkdirSync(join(scratch.dir, 'profiles', 'motd'), { recursive: true });
    const args = line!
      .trim()
      .replace(' [<other signers>.pub.yaml ...]', '')
      .replace('<n>', '1')
      .replace('<profiles>/<profile>', 'profiles/motd')
      .split(' ')
      .slice(1);
    const trust = await runCli(args, { cwd: scratch.dir });
    expect(trust.code, trust.stderr).toBe(0);
    const written = parseYaml(readFileSync(join(scratch.dir, 'profiles', 'motd', 'trust.yaml'), 'utf8')) as {
      pins: Array<{ kid: string; name: string }>;
    };
    expect(written.pins).toEqual([
      expect.objectContaining({ name: 'alice', kid: /kid: (\S+)/.exec(keygen.stdout)![1] }),
    ]);
  });
});
