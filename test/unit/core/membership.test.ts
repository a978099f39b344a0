import { describe, expect, it } from 'vitest';
import { parseInventory } from '../../../core/inventory';
import {
  MAX_MEMBERSHIP_PAGES,
  MAX_MEMBERSHIP_VOLUMES,
  MAX_VOLUME_PAGES,
  MEMBERSHIP_PAGE_DEVICES,
  membershipDigest,
  membershipMismatch,
  membershipPages,
  membershipVolumes,
  membershipWorkflowId,
  volumesProblem,
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

describe('membership volumes', () => {
  it('one volume when the whole fits; else consecutive volumes, each re-indexed from 0 with a digest over its own pages', () => {
    const { pages, digest } = membershipPages(inventoryOf(4_500));
    const one = membershipVolumes(pages);
    expect(one).toHaveLength(1);
    expect(one[0]!.digest).toBe(digest);
    const cut = membershipVolumes(pages, { pages: 2, bytes: 8_000_000 });
    expect(cut.map((v) => [v.pages.length, v.devices])).toEqual([
      [2, 2_000],
      [2, 2_000],
      [1, 500],
    ]);
    expect(cut.map((v) => v.pages.map((p) => p.index))).toEqual([[0, 1], [0, 1], [0]]);
    expect(cut[1]!.pages[0]!.devices[0]!.id).toBe('d-2000');
    for (const v of cut) expect(v.digest).toBe(membershipDigest(v.pages.map((p) => p.digest)));
    // The pages in order, across the volumes, are the whole and hash to its digest.
    expect(membershipDigest(cut.flatMap((v) => v.pages.map((p) => p.digest)))).toBe(digest);
  });

  it('cuts by bytes too (a page of large records), never leaving a volume empty', () => {
    const { pages } = membershipPages(inventoryOf(3_000));
    const pageBytes = JSON.stringify(pages[0]!.devices).length;
    const byBytes = membershipVolumes(pages, { pages: MAX_VOLUME_PAGES, bytes: pageBytes + 10 });
    expect(byBytes.map((v) => v.pages.length)).toEqual([1, 1, 1]);
    // A single page above the byte bound still makes a volume of its own (the entity bounds a page itself).
    expect(membershipVolumes(pages, { pages: MAX_VOLUME_PAGES, bytes: 10 }).map((v) => v.pages.length)).toEqual([
      1, 1, 1,
    ]);
  });

  it(`refuses more than ${MAX_MEMBERSHIP_VOLUMES} volumes with INVALID_INPUT naming the device count`, () => {
    const { pages } = membershipPages(inventoryOf(MAX_MEMBERSHIP_VOLUMES + 1), new Map(), 1);
    expect(() => membershipVolumes(pages, { pages: 1, bytes: 8_000_000 })).toThrow(
      expect.objectContaining({
        code: 'INVALID_INPUT',
        message: expect.stringMatching(/^inventory: 17 devices need 17 membership volumes/),
      }),
    );
  });

  it('volumesProblem: the volumes add up to the ref (pages, devices, first entity)', () => {
    const ref = {
      workflowId: 'membership:a',
      digest: 'a'.repeat(64),
      devices: 3,
      pages: 2,
      source: 't',
      volumes: [
        { workflowId: 'membership:a', digest: 'b'.repeat(64), devices: 2, pages: 1 },
        { workflowId: 'membership:c', digest: 'c'.repeat(64), devices: 1, pages: 1 },
      ],
    };
    expect(volumesProblem(ref)).toBeNull();
    expect(volumesProblem({ ...ref, volumes: undefined })).toBeNull();
    expect(volumesProblem({ ...ref, pages: 3 })).toBe('volumes: 2 pages in all, the membership names 3');
    expect(volumesProblem({ ...ref, devices: 4 })).toBe('volumes: 3 devices in all, the membership names 4');
    expect(volumesProblem({ ...ref, workflowId: 'membership:z' })).toBe(
      'volumes: the first is membership:a, the membership names membership:z',
    );
    expect(volumesProblem({ ...ref, volumes: [] })).toMatch(/^volumes: 1-16 expected \(got 0\)/);
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

  it('a sealed page reads back as the devices stored (kept as its canonical text), its digest unchanged', () => {
    const { pages, state } = stateFor(1_500);
    for (const page of pages) state.addPage(page);
    state.seal();
    for (const page of pages) {
      const read = state.page(page.index)!;
      expect(read).toEqual(page);
      expect(pageDigest(read.devices)).toBe(page.digest);
    }
    // Each read is its own copy: a reader that changes it cannot change what the next one gets.
    state.page(0)!.devices[0]!.user = 'root';
    expect(state.page(0)).toEqual(pages[0]);
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
