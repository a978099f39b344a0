import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parsedPerContent } from '../../intake/parsed-file';
import { scratchDir } from '../support/harness';

/** intake/parsed-file.ts: a file the worker reads on every activity, parsed once per content. */
describe('parsed once per content', () => {
  const scratch = scratchDir('parsed-file');
  afterAll(() => scratch.cleanup());

  it('parses again only when the bytes change', () => {
    const read = parsedPerContent<string>(4);
    const path = join(scratch.dir, 'trust.yaml');
    let parses = 0;
    const parse = () => `parsed ${++parses}`;
    writeFileSync(path, 'a: 1\n');
    expect(read(path, parse)).toBe('parsed 1');
    expect(read(path, parse)).toBe('parsed 1');
    writeFileSync(path, 'a: 2\n');
    expect(read(path, parse)).toBe('parsed 2');
  });

  it('a FIFO or a device is handed to parse every time, never read (reading would stall the worker)', () => {
    const read = parsedPerContent<string>(4);
    const fifo = join(scratch.dir, 'fifo');
    spawnSync('mkfifo', [fifo]);
    let parses = 0;
    for (const path of [fifo, fifo, '/dev/zero'])
      expect(read(path, () => `refused ${++parses}`)).toBe(`refused ${parses}`);
    expect(parses).toBe(3);
  });
});
