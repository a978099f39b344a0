import { WavegateError } from '../core/errors';
import { WAVEGATE_SEARCH_ATTRIBUTES } from '../contracts/search-attributes';
import {
  checkSearchAttributes,
  classifyProbeAnswer,
  describeSearchAttributeProblem,
  indexedValueTypeOf,
  probeQuery,
  searchAttributeNamedIn,
  searchAttributesOk,
  type NeededAttribute,
  type SearchAttributeCheck,
} from '../core/search-attribute-check';
import { connectionOptions, type ConnectionSettings } from './connection';

/**
 * The search attributes wavegate needs, on the namespace it runs in: checked by every worker at start
 * (and registered where the operator API lets it), and explained by every client command whose query or
 * start the server refused for one of them. The decisions are core/search-attribute-check.ts's.
 */

/** The two services this needs; the client's Connection and the worker's NativeConnection both have them. */
export interface TemporalServices {
  operatorService: {
    listSearchAttributes(req: { namespace: string }): Promise<{ customAttributes?: { [name: string]: number } | null }>;
    addSearchAttributes(req: { namespace: string; searchAttributes: { [name: string]: number } }): Promise<unknown>;
  };
  workflowService: {
    countWorkflowExecutions(req: { namespace: string; query: string }): Promise<unknown>;
  };
}

type Target = { namespace: string; address: string };

const needed = (): NeededAttribute[] => WAVEGATE_SEARCH_ATTRIBUTES.map((k) => ({ name: k.name, type: k.type }));

/** gRPC status codes of an error and its causes (the client wraps them in ServiceError). */
function grpcCode(err: unknown): number | undefined {
  for (
    let e: unknown = err, depth = 0;
    e && typeof e === 'object' && depth < 5;
    e = (e as { cause?: unknown }).cause, depth++
  ) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'number') return code;
  }
  return undefined;
}

/** Everything the server said: the messages and gRPC details of an error and its causes. */
export function errorText(err: unknown): string {
  const parts: string[] = [];
  for (
    let e: unknown = err, depth = 0;
    e && typeof e === 'object' && depth < 5;
    e = (e as { cause?: unknown }).cause, depth++
  ) {
    for (const part of [(e as { message?: unknown }).message, (e as { details?: unknown }).details]) {
      if (typeof part === 'string' && part && !parts.some((p) => p.includes(part))) parts.push(part);
    }
  }
  return parts.join(': ');
}

/** UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED: the server was not reached, which is not a refusal. */
const UNREACHED = new Set([1, 4, 14]);
const NOT_FOUND = 5;
const ALREADY_EXISTS = 6;
const GRPC_NAMES: Record<number, string> = {
  3: 'INVALID_ARGUMENT',
  5: 'NOT_FOUND',
  7: 'PERMISSION_DENIED',
  8: 'RESOURCE_EXHAUSTED',
  9: 'FAILED_PRECONDITION',
  12: 'UNIMPLEMENTED',
  13: 'INTERNAL',
  16: 'UNAUTHENTICATED',
};

function refusalText(err: unknown): string {
  const code = grpcCode(err);
  return `${code !== undefined ? `${GRPC_NAMES[code] ?? `gRPC code ${code}`}: ` : ''}${errorText(err) || String(err)}`;
}

function unreached(err: unknown, target: Target, what: string): WavegateError {
  return new WavegateError('UNAVAILABLE', `${what} on ${target.address}: ${errorText(err)}`);
}

/**
 * What the namespace has: through the operator API (names and types), else, where that is refused
 * (Temporal Cloud), one visibility query per attribute (read access is enough; see probeQuery).
 */
async function inspect(
  services: TemporalServices,
  target: Target,
): Promise<{ check: SearchAttributeCheck; via: 'operator API' | 'queries'; listRefusal?: string }> {
  try {
    const listed = await services.operatorService.listSearchAttributes({ namespace: target.namespace });
    return { check: checkSearchAttributes(needed(), listed.customAttributes ?? {}), via: 'operator API' };
  } catch (err) {
    const code = grpcCode(err);
    if (code !== undefined && UNREACHED.has(code)) throw unreached(err, target, 'could not list search attributes');
    if (code === NOT_FOUND && /namespace/i.test(errorText(err))) {
      throw new WavegateError(
        'INVALID_INPUT',
        `--namespace: namespace "${target.namespace}" does not exist on ${target.address} (${errorText(err)})`,
        { field: '--namespace', value: target.namespace },
      );
    }
    const check: SearchAttributeCheck = { missing: [], mismatched: [] };
    for (const attr of needed()) {
      let answer: string | undefined;
      try {
        await services.workflowService.countWorkflowExecutions({
          namespace: target.namespace,
          query: probeQuery(attr),
        });
      } catch (probeErr) {
        const probeCode = grpcCode(probeErr);
        if (probeCode !== undefined && UNREACHED.has(probeCode))
          throw unreached(probeErr, target, `could not query ${attr.name}`);
        answer = errorText(probeErr) || String(probeErr);
      }
      const seen = classifyProbeAnswer(attr, answer);
      if (seen.kind === 'missing') check.missing.push(attr);
      else if (seen.kind === 'mismatched')
        check.mismatched.push({ name: attr.name, needed: attr.type, registered: seen.registered });
      else if (seen.kind === 'unknown') {
        throw new WavegateError(
          'INVALID_STATE',
          `cannot tell whether namespace "${target.namespace}" on ${target.address} has search attribute ${attr.name}: listing them was refused (${refusalText(err)}) and a query for it too (${answer})`,
        );
      }
    }
    return { check, via: 'queries', listRefusal: refusalText(err) };
  }
}

/**
 * The worker's start-up check: every attribute contracts/search-attributes.ts lists is on the namespace with
 * its type. Missing ones are added through the operator API when `register` (a self-hosted server lets a
 * client with the operator role do it); a refusal (Temporal Cloud, no permission) or `register` false is
 * INVALID_STATE (exit 2) naming each one and the command that adds it, and so is a wrong type, which no
 * one can change in place. Resolves with the line the worker prints.
 */
export async function ensureSearchAttributes(
  services: TemporalServices,
  target: Target,
  opts: { register: boolean },
): Promise<string> {
  const first = await inspect(services, target);
  const { check } = first;
  if (searchAttributesOk(check))
    return `search attributes: all ${needed().length} present on namespace ${target.namespace} (checked through ${first.via})`;
  if (check.mismatched.length > 0)
    throw new WavegateError(
      'INVALID_STATE',
      describeSearchAttributeProblem(check, target, { preface: 'worker not started' }),
      { missing: check.missing.map((a) => a.name), mismatched: check.mismatched.map((m) => m.name) },
    );
  if (!opts.register)
    throw new WavegateError(
      'INVALID_STATE',
      describeSearchAttributeProblem(check, target, {
        preface: 'worker not started',
        reason: '--no-register-search-attributes: this worker adds none itself',
      }),
      { missing: check.missing.map((a) => a.name) },
    );
  if (first.via === 'queries') {
    // The operator API already refused to list them: it will not add them either.
    throw new WavegateError(
      'INVALID_STATE',
      describeSearchAttributeProblem(check, target, {
        preface: 'worker not started',
        reason: `the server refused the operator API: ${first.listRefusal}`,
      }),
      { missing: check.missing.map((a) => a.name) },
    );
  }
  try {
    await services.operatorService.addSearchAttributes({
      namespace: target.namespace,
      searchAttributes: Object.fromEntries(check.missing.map((a) => [a.name, indexedValueTypeOf(a.type)])),
    });
  } catch (err) {
    const code = grpcCode(err);
    if (code !== undefined && UNREACHED.has(code)) throw unreached(err, target, 'could not add search attributes');
    // Another worker starting at the same time added them first: look again below.
    if (code !== ALREADY_EXISTS) {
      throw new WavegateError(
        'INVALID_STATE',
        describeSearchAttributeProblem(check, target, {
          preface: 'worker not started',
          reason: `adding them was refused: ${refusalText(err)}`,
        }),
        { missing: check.missing.map((a) => a.name) },
      );
    }
  }
  // An Elasticsearch-backed server adds them in a system workflow: give it a few seconds to show them.
  const deadline = Date.now() + 15_000;
  for (;;) {
    const after = await inspect(services, target);
    if (searchAttributesOk(after.check))
      return `search attributes: added ${check.missing.map((a) => a.name).join(', ')} to namespace ${target.namespace}`;
    if (after.check.mismatched.length > 0 || Date.now() > deadline) {
      throw new WavegateError(
        'INVALID_STATE',
        describeSearchAttributeProblem(after.check, target, {
          preface: 'worker not started',
          reason: 'the server accepted adding them but does not list them',
        }),
        { missing: after.check.missing.map((a) => a.name) },
      );
    }
    await new Promise((r) => setTimeout(r, 500));
  }
}

/**
 * The client commands' side (cli/run.ts calls it for an error no command caught): when the server
 * refused a query or a start over a search attribute wavegate needs, the same explanation the worker
 * gives, from a fresh look at the namespace; undefined for any other error.
 */
export async function searchAttributeFailure(
  err: unknown,
  settings: ConnectionSettings | undefined,
): Promise<WavegateError | undefined> {
  const text = errorText(err);
  const named = searchAttributeNamedIn(
    text,
    needed().map((a) => a.name),
  );
  if (!named) return undefined;
  const target: Target = {
    namespace: settings?.namespace ?? 'default',
    address: settings?.address ?? '127.0.0.1:7233',
  };
  const preface = `the server refused this for search attribute ${named} (${text.replace(/\s+/g, ' ').slice(0, 300)})`;
  let check: SearchAttributeCheck | undefined;
  if (settings) {
    try {
      const { Connection } = require('@temporalio/client') as typeof import('@temporalio/client');
      const connection = await Connection.connect({ ...connectionOptions(settings), connectTimeout: 5_000 });
      try {
        check = (await inspect(connection, target)).check;
      } finally {
        await connection.close().catch(() => {});
      }
    } catch {
      check = undefined; // the refusal itself still says which one: name it alone
    }
  }
  if (!check || searchAttributesOk(check)) {
    // No fresh look (or it raced a worker adding them): what the refusal itself says about the one it names.
    const attr = needed().find((a) => a.name === named)!;
    const said = classifyProbeAnswer(attr, text);
    check =
      said.kind === 'mismatched'
        ? { missing: [], mismatched: [{ name: attr.name, needed: attr.type, registered: said.registered }] }
        : { missing: [attr], mismatched: [] };
  }
  const message = `${describeSearchAttributeProblem(check, target, { preface })}\nA \`wavegate worker\` started against this namespace adds them itself where the server lets it.`;
  return new WavegateError('INVALID_STATE', message, {
    missing: check.missing.map((a) => a.name),
    mismatched: check.mismatched.map((m) => m.name),
  });
}
