import { describe, expect, it } from 'vitest';
import { parseInventory } from '../../../core/inventory';
import {
  MAX_MEMBERSHIP_PAGES,
  MEMBERSHIP_PAGE_DEVICES,
  membershipMismatch,
  membershipPages,
  membershipWorkflowId,
  MembershipState,
  pageDigest,
  planProblem,
} from '../../../core/membership';

function inventoryOf(n: number) {
  return parseInventory(
    {
      defaults: {
        user: 'ops',
        port: 22,
        pool: 'p',
        class: 'edge',
        os: 'linux',
        ssh: { key: '/etc/wavegate/keys/id_ed25519' },
      },
      devices: Array.from({ length: n }, (_, i) => ({ id: `d-${i}`, host: `10.0.${Math.floor(i / 250)}.${i % 250}` })),
    },
    'test',
  );
}

function stateFor(n: number) {
  const { pages, digest } = membershipPages(inventoryOf(n));
  return { pages, digest, state: new MembershipState({ digest, devices: n, pages: pages.length, source: 'test' }) };
}

describe('membership pages', () => {
  it('cuts an inventory into pages of 1,000 records with a digest that changes with any device', () => {
    const inv = inventoryOf(2_500);
    const { pages, digest } = membershipPages(inv);
    expect(pages.map((p) => p.devices.length)).toEqual([1_000, 1_000, 500]);
    expect(pages[1]!.devices[0]!.id).toBe('d-1000');
    // Key references only: the record names the key file, never key material.
    expect(pages[0]!.devices[0]!.ssh).toEqual({ key: '/etc/wavegate/keys/id_ed25519' });
    expect(membershipPages(inv).digest).toBe(digest);
    const changed = { ...inv, devices: inv.devices.map((d, i) => (i === 2_499 ? { ...d, port: 2222 } : d)) };
    expect(membershipPages(changed).digest).not.toBe(digest);
    expect(membershipWorkflowId(digest)).toBe(`membership:${digest.slice(0, 32)}`);
  });

  it('carries the node-down standing the CLI judged with the device', () => {
    const { pages } = membershipPages(inventoryOf(3), new Map([['d-1', { holds: true, text: 'node-down since ...' }]]));
    expect(pages[0]!.devices.map((d) => d.nodeDown)).toEqual([
      undefined,
      { holds: true, text: 'node-down since ...' },
      undefined,
    ]);
  });

  it("membershipMismatch names a page whose content is not its digest, and a whole that is not the rollout's", () => {
    const { pages, digest } = membershipPages(inventoryOf(1_500));
    expect(membershipMismatch({ digest, devices: 1_500 }, pages)).toBeNull();
    const tampered = pages.map((p, i) =>
      i === 1 ? { ...p, devices: p.devices.map((d, j) => (j === 0 ? { ...d, host: '192.0.2.1' } : d)) } : p,
    );
    expect(membershipMismatch({ digest, devices: 1_500 }, tampered)).toMatch(/^page 1: content digest/);
    expect(membershipMismatch({ digest: 'f'.repeat(64), devices: 1_500 }, pages)).toMatch(
      /^digest .* is not the rollout's/,
    );
    expect(membershipMismatch({ digest, devices: 1_499 }, pages)).toBe('1500 devices, the rollout names 1499');
  });
});

describe('MembershipState', () => {
  it('stores pages in order, seals only when the whole matches, and then never changes', () => {
    const { pages, state } = stateFor(2_001);
    expect(state.page(0)).toBeNull();
    expect(state.pageProblem(pages[1]!)).toBe('index: expected page 0 next (got 1)');
    expect(state.addPage(pages[0]!)).toMatchObject({ pagesStored: 1, devicesStored: 1_000, sealed: false });
    expect(state.sealProblem()).toBe('pages: 1 of 3 stored');
    state.addPage(pages[1]!);
    state.addPage(pages[2]!);
    expect(state.page(0)).toBeNull(); // not sealed: never read half
    expect(state.seal()).toMatchObject({ pagesStored: 3, devicesStored: 2_001, sealed: true });
    expect(state.page(2)!.devices).toHaveLength(1);
    expect(state.page(3)).toBeNull();
    expect(state.pageProblem(pages[0]!)).toMatch(/^sealed/);
  });

  it('refuses a page whose content is not its digest, or that would exceed the plan', () => {
    const { pages, state } = stateFor(1_000);
    const forged = { ...pages[0]!, devices: pages[0]!.devices.map((d, i) => (i === 5 ? { ...d, user: 'root' } : d)) };
    expect(state.pageProblem(forged)).toMatch(/^digest: page 0's content hashes to [0-9a-f]{64}, not "/);
    const tooMany = { index: 0, devices: [...pages[0]!.devices, pages[0]!.devices[0]!], digest: '' };
    expect(state.pageProblem({ ...tooMany, digest: pageDigest(tooMany.devices) })).toBe(
      `devices: a page holds 1-${MEMBERSHIP_PAGE_DEVICES} devices (got 1001)`,
    );
    expect(state.pageProblem({ index: 0, devices: 'x' } as never)).toBe('expected { index, digest, devices: [...] }');
  });

  it('a page set that hashes to another digest than planned never seals', () => {
    const { pages } = membershipPages(inventoryOf(10));
    const state = new MembershipState({ digest: 'a'.repeat(64), devices: 10, pages: 1, source: 'test' });
    state.addPage(pages[0]!);
    expect(state.sealProblem()).toMatch(/^digest .* is not the rollout's aaaaaaaaaaaa/);
    expect(() => state.seal()).toThrow(/is not the rollout's/);
    expect(state.isSealed()).toBe(false);
  });

  it('planProblem bounds the plan', () => {
    const digest = 'b'.repeat(64);
    expect(planProblem({ digest, devices: 10, pages: 1, source: 's' })).toBeNull();
    expect(planProblem({ digest: 'xyz', devices: 10, pages: 1, source: 's' })).toMatch(/^digest: must be 64 hex/);
    expect(planProblem({ digest, devices: 10, pages: MAX_MEMBERSHIP_PAGES + 1, source: 's' })).toMatch(
      /^pages: must be 1-100/,
    );
    expect(planProblem({ digest, devices: 2_001, pages: 2, source: 's' })).toMatch(/cannot fill 2 pages/);
  });
});
