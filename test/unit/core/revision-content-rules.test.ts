import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decideRegistration } from '../../../core/registry';
import {
  MAX_PAYLOAD_FILE_BYTES,
  parseRevision,
  payloadSizeProblem,
  Revision,
  revisionSchemaFor,
  signedCommandProblem,
} from '../../../core/revision';
import { keyPairFromSeed, parseTrust, pinOf, signRevision, verifyEnvelope, type Envelope } from '../../../core/signing';
import { formatPath, type FieldProblem } from '../../../core/validation';
import { refusal } from '../../support/refusal';

/**
 * The two layers of a revision's rules (core/revision.ts, RevisionRules): the structure, and the signed
 * content rules (no inline credential in any signed command, no payload file above 64 MiB). Every reader
 * applies both; only the registry's update handler, which re-decides on replay, reads with
 * `contentRules: false`.
 */
/**
 * The test's oracle: the signed content rules listed field by field, over a revision whose structure is
 * valid, with the path and message the full parse gives (the full parse applies them in one pass).
 */
function signedContentProblems(revision: Revision): FieldProblem[] {
  const problems: FieldProblem[] = [];
  const add = (path: PropertyKey[], value: unknown, message: string | undefined) => {
    if (message) problems.push({ path: formatPath(path), value, message });
  };
  const command = (path: PropertyKey[], text: string | undefined) => {
    if (text !== undefined) add(path, text, signedCommandProblem(text));
  };
  command(['apply'], revision.apply);
  command(['verify'], revision.verify);
  command(['rollback'], revision.rollback);
  for (const [i, file] of revision.payload.entries())
    add(['payload', i, 'size'], file.size, payloadSizeProblem(file.size));
  for (const list of ['runtimes', 'checks'] as const) {
    for (const [i, check] of (revision.health?.[list] ?? []).entries())
      command(['health', list, i, 'command'], check.command);
  }
  command(['health', 'errorRate', 'command'], revision.health?.errorRate?.command);
  return problems;
}

const NOW = Date.parse('2026-01-01T00:00:00Z');
const alice = keyPairFromSeed(new Uint8Array(32).fill(7));
const trust = parseTrust({ threshold: 1, pins: [pinOf(alice)] }, 'trust.yaml');

const base = (extra: Partial<Revision> = {}): Revision => ({
  profile: 'production',
  revision: 15,
  apply: 'install -m 0644 "$WAVEGATE_STAGING/app.conf" /etc/app.conf',
  verify: 'grep -q "version=15" /etc/app.conf',
  payload: [{ name: 'app.conf', sha256: 'a'.repeat(64), size: 10, source: 'payload/app.conf' }],
  risk: 'risky',
  expiresAt: '2026-06-01T00:00:00.000Z',
  ...extra,
});
const signed = (revision: Revision): Envelope => signRevision(revision, alice, { now: NOW });

/** Each breaks one content rule only, at `path` (as a FieldProblem names it) / `zodPath` (as verifyEnvelope does). */
const CONTENT_CASES: Array<{ name: string; revision: Revision; path: string; zodPath: string }> = [
  {
    name: 'curl -u user:pw in apply',
    revision: base({ apply: 'curl -fsS -u deploy:hunter2 https://repo.example/app.tgz -o /tmp/app.tgz' }),
    path: 'apply',
    zodPath: 'apply',
  },
  {
    name: 'a bearer token in verify',
    revision: base({ verify: 'curl -fsS -H "Authorization: Bearer abc123" https://127.0.0.1/ok' }),
    path: 'verify',
    zodPath: 'verify',
  },
  {
    name: 'mysql -p in rollback',
    revision: base({ rollback: 'mysql -uroot -phunter2 app < /etc/app/undo.sql' }),
    path: 'rollback',
    zodPath: 'rollback',
  },
  {
    name: 'curl -u in a health runtime',
    revision: base({
      health: { runtimes: [{ name: 'app', command: 'curl -fsS -u probe:s3cret http://127.0.0.1:8080/healthz' }] },
    }),
    path: 'health.runtimes[0].command',
    zodPath: 'health.runtimes.0.command',
  },
  {
    name: 'sshpass -p in a named check',
    revision: base({ health: { checks: [{ name: 'peer', command: 'sshpass -p hunter2 ssh peer true' }] } }),
    path: 'health.checks[0].command',
    zodPath: 'health.checks.0.command',
  },
  {
    name: 'a token query parameter in the error-rate command',
    revision: base({ health: { errorRate: { command: 'curl -fsS "http://127.0.0.1/rate?access_token=abc123"' } } }),
    path: 'health.errorRate.command',
    zodPath: 'health.errorRate.command',
  },
  {
    name: 'a payload file above 64 MiB',
    revision: base({
      payload: [
        { name: 'app.conf', sha256: 'a'.repeat(64), size: MAX_PAYLOAD_FILE_BYTES + 1, source: 'payload/app.conf' },
      ],
    }),
    path: 'payload[0].size',
    zodPath: 'payload.0.size',
  },
];

/** The field problems `fn`'s refusal lists. */
const problemsOf = (fn: () => unknown) => refusal(fn).details.problems as FieldProblem[];

describe('signed content rules, a layer of their own', () => {
  it.each(CONTENT_CASES)(
    '$name: refused by the full parse, with the field and message signedContentProblems gives; the structure alone accepts it',
    ({ revision, path }) => {
      const full = problemsOf(() => parseRevision(revision, 'r.yaml'));
      expect(full.map((p) => p.path)).toEqual([path]);
      const structural = parseRevision(revision, 'r.yaml', { contentRules: false });
      expect(structural).toEqual(revision);
      expect(signedContentProblems(structural)).toEqual(full);
    },
  );

  it.each(CONTENT_CASES)(
    '$name: verifyEnvelope and decideRegistration refuse it (INVALID_REVISION naming the field) unless contentRules is false',
    ({ revision, path, zodPath }) => {
      const envelope = signed(revision);
      const [problem] = signedContentProblems(revision);
      const refused = verifyEnvelope(envelope, trust, { now: NOW });
      expect(refused).toMatchObject({
        ok: false,
        reason: 'INVALID_REVISION',
        message: `envelope body is not a valid revision: ${zodPath}: ${problem!.message}`,
      });
      expect(problem!.path).toBe(path);
      expect(verifyEnvelope(envelope, trust, { now: NOW, contentRules: false })).toMatchObject({ ok: true, revision });

      const input = { profile: 'production', registered: [], envelope, trust, now: NOW };
      expect(decideRegistration(input)).toMatchObject({ outcome: 'refused', reason: 'INVALID_REVISION' });
      expect(decideRegistration({ ...input, contentRules: true })).toMatchObject({
        outcome: 'refused',
        reason: 'INVALID_REVISION',
      });
      expect(decideRegistration({ ...input, contentRules: false })).toMatchObject({
        outcome: 'registered',
        revision: { revision: 15 },
      });
    },
  );

  it('lists every broken field in the order the full parse does, and nothing for a clean revision', () => {
    expect(signedContentProblems(base())).toEqual([]);
    const many = base({
      apply: 'curl -u a:b https://x.example/a',
      rollback: 'curl -u c:d https://x.example/b',
      payload: [
        { name: 'a', sha256: 'a'.repeat(64), size: 1, source: 'payload/a' },
        { name: 'b', sha256: 'b'.repeat(64), size: MAX_PAYLOAD_FILE_BYTES + 5, source: 'payload/b' },
      ],
      health: {
        runtimes: [{ name: 'r', command: 'true' }],
        checks: [{ name: 'c', command: 'curl -u e:f http://127.0.0.1/' }],
      },
    });
    const listed = signedContentProblems(many);
    expect(listed.map((p) => p.path)).toEqual(['apply', 'rollback', 'payload[1].size', 'health.checks[0].command']);
    expect(problemsOf(() => parseRevision(many, 'r.yaml'))).toEqual(listed);
  });

  it('the structure is still refused with contentRules false: control characters, a negative or fractional size, unknown fields, an empty health command', () => {
    const broken: Array<[unknown, string]> = [
      [{ ...base(), apply: 'echo \u001b[2J' }, 'apply'],
      [{ ...base(), verify: 'true\ntrue' }, 'verify'],
      [
        { ...base(), payload: [{ name: 'a', sha256: 'a'.repeat(64), size: -1, source: 'payload/a' }] },
        'payload[0].size',
      ],
      [
        { ...base(), payload: [{ name: 'a', sha256: 'a'.repeat(64), size: 1.5, source: 'payload/a' }] },
        'payload[0].size',
      ],
      [{ ...base(), extra: 1 }, 'extra'],
      [{ ...base(), health: { runtimes: [{ name: 'r', command: ' ' }] } }, 'health.runtimes[0].command'],
    ];
    for (const [data, path] of broken) {
      const structural = problemsOf(() => parseRevision(data, 'r.yaml', { contentRules: false }));
      expect(structural.map((p) => p.path)).toEqual([path]);
      expect(problemsOf(() => parseRevision(data, 'r.yaml'))).toEqual(structural);
    }
  });

  it('the full parse is exactly the structure and then the content rules (generated revisions)', () => {
    const command = fc.constantFrom(
      'true',
      'echo ok',
      'curl -u a:b https://x.example/',
      'printf "\u0007"',
      'cat "$(cat /etc/app/token)"',
      'mysql -pX app',
      'x'.repeat(70_000),
    );
    const size = fc.constantFrom(0, 10, MAX_PAYLOAD_FILE_BYTES, MAX_PAYLOAD_FILE_BYTES + 1, -1);
    fc.assert(
      fc.property(
        command,
        command,
        fc.option(command, { nil: undefined }),
        size,
        fc.option(command, { nil: undefined }),
        (apply, verify, rollback, bytes, check) => {
          const data = {
            ...base({ apply, verify, ...(rollback !== undefined ? { rollback } : {}) }),
            payload: [{ name: 'a', sha256: 'a'.repeat(64), size: bytes, source: 'payload/a' }],
            ...(check !== undefined ? { health: { checks: [{ name: 'c', command: check }] } } : {}),
          };
          const full = Revision.safeParse(data);
          const structural = revisionSchemaFor({ contentRules: false }).safeParse(data);
          if (!structural.success) {
            expect(full.success).toBe(false);
            return;
          }
          const content = signedContentProblems(structural.data);
          expect(full.success).toBe(content.length === 0);
          if (content.length) expect(problemsOf(() => parseRevision(data, 'r.yaml'))).toEqual(content);
        },
      ),
      { numRuns: 300 },
    );
  });
});
