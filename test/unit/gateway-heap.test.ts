import { describe, expect, it } from 'vitest';
import { heapLine } from '../../cli/commands/gateway';

describe("the gateway's heap line at start", () => {
  it("says the limit, and under Node's default (2 GiB or more) how to set one", () => {
    const big = heapLine(10_000, 4144 * 1048576);
    expect(big).toMatch(/^heap limit 4144 MiB for 10000 pinned devices; Node's default/);
    expect(big).toContain('--max-old-space-size');
    expect(heapLine(10_000, 1072 * 1048576)).toBe('heap limit 1072 MiB for 10000 pinned devices');
  });

  it('reads the running process when given no limit', () => {
    expect(heapLine(3)).toMatch(/^heap limit \d+ MiB for 3 pinned devices/);
  });
});
