import { describe, expect, it } from 'vitest';
import { WAVEGATE_SEARCH_ATTRIBUTES } from '../../contracts/search-attributes';
import { ensureSearchAttributes, type TemporalServices } from '../../workers/search-attributes';
import { rejection } from '../support/refusal';

/**
 * The refusals a dev server cannot produce (test/e2e/any-temporal.test.ts covers the rest on a real one):
 * a server whose operator API answers PERMISSION_DENIED to adding (no operator role), and Temporal
 * Cloud, which refuses the operator API altogether and is read through visibility queries. The fake
 * answers with the texts and gRPC codes a real server gives (see the e2e test and the SDK's notes).
 */
const NAMES = WAVEGATE_SEARCH_ATTRIBUTES.map((k) => k.name);
const grpcError = (code: number, details: string) => Object.assign(new Error(`${code} ${details}`), { code, details });

function fakeServer(opts: { registered: Record<string, number>; list?: 'refuse'; add?: 'refuse' }) {
  const calls = { add: 0, queries: [] as string[] };
  const services: TemporalServices = {
    operatorService: {
      async listSearchAttributes() {
        if (opts.list === 'refuse') throw grpcError(7, 'Request unauthorized.');
        return { customAttributes: { ...opts.registered } };
      },
      async addSearchAttributes(req) {
        calls.add++;
        if (opts.add === 'refuse') throw grpcError(7, 'Request unauthorized.');
        Object.assign(opts.registered, req.searchAttributes);
        return {};
      },
    },
    workflowService: {
      async countWorkflowExecutions(req) {
        calls.queries.push(req.query);
        const name = req.query.split(' ')[0]!;
        if (!(name in opts.registered)) throw grpcError(3, `invalid query: invalid search attribute: ${name}`);
        if (opts.registered[name] === 2 && /= \d/.test(req.query))
          throw grpcError(
            3,
            `invalid query: invalid expression: invalid value type for search attribute ${name} of type Keyword: 0 (type: int64)`,
          );
        return { count: 0 };
      },
    },
  };
  return { services, calls };
}

describe('the worker start-up check where registration is refused', () => {
  it('PERMISSION_DENIED on adding: INVALID_STATE (exit 2) naming every missing attribute, the refusal and each create command', async () => {
    const { services, calls } = fakeServer({ registered: {}, add: 'refuse' });
    const err = await rejection(
      ensureSearchAttributes(services, { namespace: 'prod', address: 'temporal.internal:7233' }, { register: true }),
    );
    expect(err.code).toBe('INVALID_STATE');
    expect(calls.add).toBe(1);
    expect(err.message).toContain('adding them was refused: PERMISSION_DENIED: ');
    for (const name of NAMES)
      expect(err.message).toMatch(
        new RegExp(
          `temporal operator search-attribute create --address temporal\\.internal:7233 --namespace prod --name ${name} --type \\w+`,
        ),
      );
  });

  it('Temporal Cloud (operator API refused): reads the namespace through queries, adds nothing, and prints the tcld command for the missing ones', async () => {
    const { services, calls } = fakeServer({ registered: { WavegateProfile: 2 }, list: 'refuse' });
    const err = await rejection(
      ensureSearchAttributes(
        services,
        { namespace: 'wg.a1b2c', address: 'wg.a1b2c.tmprl.cloud:7233' },
        { register: true },
      ),
    );
    expect(err.code).toBe('INVALID_STATE');
    expect(calls.add).toBe(0);
    expect(calls.queries).toContain("WavegateProfile = ''");
    const rest = NAMES.filter((n) => n !== 'WavegateProfile');
    expect(err.message).toContain('tcld namespace search-attributes add --namespace wg.a1b2c --search-attribute ');
    for (const name of rest) expect(err.message).toMatch(new RegExp(`--search-attribute ${name}=\\w+`));
    expect(err.message).not.toMatch(/--search-attribute WavegateProfile=/);
  });

  it('Temporal Cloud with every attribute present: starts, having checked each by a query (a wrong type found the same way)', async () => {
    const all = Object.fromEntries(WAVEGATE_SEARCH_ATTRIBUTES.map((k) => [k.name, k.type === 'INT' ? 3 : 2]));
    const ok = fakeServer({ registered: { ...all }, list: 'refuse' });
    expect(
      await ensureSearchAttributes(
        ok.services,
        { namespace: 'wg.a1b2c', address: 'wg.a1b2c.tmprl.cloud:7233' },
        { register: true },
      ),
    ).toContain(`all ${NAMES.length} present`);
    const wrong = fakeServer({ registered: { ...all, WavegateRevision: 2 }, list: 'refuse' });
    const err = await rejection(
      ensureSearchAttributes(
        wrong.services,
        { namespace: 'wg.a1b2c', address: 'wg.a1b2c.tmprl.cloud:7233' },
        { register: true },
      ),
    );
    expect(err.message).toContain('wrong type: WavegateRevision is registered as Keyword, wavegate needs Int');
    expect(err.message).toContain(
      'tcld namespace search-attributes rename --namespace wg.a1b2c --existing-name WavegateRevision',
    );
  });

  it('a self-hosted server that lets it: adds exactly the missing ones, with their types', async () => {
    const { services } = fakeServer({ registered: { WavegateProfile: 2 } });
    const line = await ensureSearchAttributes(
      services,
      { namespace: 'default', address: '127.0.0.1:7233' },
      { register: true },
    );
    expect(line).toBe(
      `search attributes: added ${NAMES.filter((n) => n !== 'WavegateProfile').join(', ')} to namespace default`,
    );
  });
});
