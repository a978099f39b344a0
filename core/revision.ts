import type { z } from 'zod';
import {
  credentialsRefusal,
  HEALTH_CHECK_NAME,
  HEALTH_CHECK_NAME_RULE,
  inlineCredential,
  MAX_HEALTH_TEXT,
  signedCommandCredentialRefusal,
} from './health';
import { PROFILE_NAME, PROFILE_NAME_RULE } from './profile-name';
import { MAX_WAY_BACK_MS } from './floor';
import { boundedDuration } from './spec';
import { METRICS_TOKENS } from './secret-policy';
import { parseWith } from './validation';
import { lazySchema, zod } from './lazy-schema';

/**
 * A revision of a profile: immutable content that a rollout moves through the fleet (docs/formats.md).
 * Commands run on the device with a POSIX shell; `$WAVEGATE_STAGING` points at the directory the
 * payload files were uploaded to.
 */
/**
 * The largest payload file a revision may name: what an agent downloads in one answer from the gateway
 * (agent/gateway-client.ts) and what a worker holds in memory to send. Refused at sign and wherever a
 * revision is read (plan, start, the worker, the gateway, the agent), so no signed body names a file no
 * device would take.
 */
export const MAX_PAYLOAD_FILE_BYTES = 64 * 1024 * 1024;

/**
 * Two layers of rules make a valid revision (docs/architecture.md, "Signed revisions and the registry"):
 *
 * - its structure: the fields, their types and shapes, and the characters a signed command may hold;
 * - its signed content rules (`signedCommandProblem`, `payloadSizeProblem`): no inline credential in any signed device command
 *   (apply, verify, rollback, every health command) and no payload file above MAX_PAYLOAD_FILE_BYTES.
 *
 * Everything that reads a revision (sign, plan, start, the worker, the gateway, the agent, the registry's
 * update validator) applies both, in one parse, with the same field paths and messages. Only the registry's
 * update HANDLER re-decides with `{ contentRules: false }` (core/registry.ts): it runs again on every replay
 * of the registry's history, so it must reach what it reached when the history was written, also for an
 * envelope accepted before a content rule existed; new envelopes are held to the content rules by the
 * update validator, which never runs on replay. A rule added later on what a revision may SAY goes in the
 * content layer, never in the structure (that would change the handler's decision on old histories).
 */
export interface RevisionRules {
  /** Apply the signed content rules (default true). false only where a decision is re-made on replay. */
  contentRules?: boolean;
}

/** The content rule on a payload file's size: why a device would not take it, or undefined. */
export function payloadSizeProblem(size: number): string | undefined {
  return size > MAX_PAYLOAD_FILE_BYTES
    ? `is ${size} bytes, above the ${MAX_PAYLOAD_FILE_BYTES} bytes (64 MiB) a device takes in one payload file; split it, or ship it another way`
    : undefined;
}

/** The content rule on a signed device command: the inline credential it carries (core/credentials.ts), or undefined. */
export function signedCommandProblem(command: string): string | undefined {
  const secret = inlineCredential(command);
  return secret ? signedCommandCredentialRefusal(secret) : undefined;
}

function payloadFileSchema(contentRules: boolean) {
  const size = zod().number().int().nonnegative();
  return zod()
    .object({
      name: zod()
        .string()
        .regex(/^[A-Za-z0-9._-]+$/, 'must be a plain file name (letters, digits, ".", "_", "-")'),
      sha256: zod()
        .string()
        .regex(/^[0-9a-f]{64}$/, 'must be 64 lowercase hex characters'),
      size: contentRules
        ? size.superRefine((bytes, ctx) => {
            const problem = payloadSizeProblem(bytes);
            if (problem) ctx.addIssue({ code: 'custom', message: problem });
          })
        : size,
      source: zod().string().min(1),
    })
    .strict();
}

export const PayloadFile = lazySchema(() => payloadFileSchema(true));
export type PayloadFile = z.infer<typeof PayloadFile>;

/** Where every payload `source` lives, relative to the profile directory (intake/profile-dir.ts). */
export const PAYLOAD_DIR = 'payload';

/**
 * Why a payload `source` is not a path inside the profile's `payload/` directory, by its text alone
 * (`sign` then resolves it on disk, symbolic links included: intake/profile-dir.ts), or undefined. The
 * worker, the gateway and the agent refuse such a source at apply; `sign` refuses to sign one at all.
 */
export function payloadSourceProblem(source: string): string | undefined {
  const where = `a payload source is a path relative to the profile directory, inside ${PAYLOAD_DIR}/ (e.g. ${PAYLOAD_DIR}/app.conf)`;
  if (source.startsWith('/') || /^[A-Za-z]:/.test(source)) return `is an absolute path; ${where}`;
  if (source.includes('\\')) return `contains a backslash; ${where}, with "/" between its parts`;
  const parts = source.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.includes('..')) return `climbs out with ".."; ${where}`;
  if (parts[0] !== PAYLOAD_DIR || parts.length < 2) return `is not inside ${PAYLOAD_DIR}/; ${where}`;
  return undefined;
}

/**
 * A device-side health command, inside the signed revision: the only place a command a health gate
 * runs on a device may come from. No inline credentials (the envelope is public and kept in history):
 * a content rule, checked last.
 */
function healthCommandSchema(contentRules: boolean) {
  return zod()
    .string()
    .superRefine((command, ctx) => {
      if (command.trim() === '') return ctx.addIssue({ code: 'custom', message: 'must be a shell command' });
      if (command.length > MAX_HEALTH_TEXT)
        return ctx.addIssue({
          code: 'custom',
          message: `is ${command.length} characters long, above the limit of ${MAX_HEALTH_TEXT}`,
        });
      // eslint-disable-next-line no-control-regex
      if (/[\u0000-\u0008\u000b-\u001f\u007f]/.test(command))
        return ctx.addIssue({
          code: 'custom',
          message: 'must not contain control characters (NUL, escape, carriage return, ...)',
        });
      const problem = contentRules ? signedCommandProblem(command) : undefined;
      if (problem) ctx.addIssue({ code: 'custom', message: problem });
    });
}

/**
 * The revision's health checks (docs/formats.md, "Revision health"): what `all-runtimes-healthy`,
 * `check: <name>` and `error-rate` run on the changed devices. Names are unique across runtimes and checks.
 */
function revisionHealthSchema(contentRules: boolean) {
  const command = healthCommandSchema(contentRules);
  const NamedHealthCheck = zod()
    .object({ name: zod().string().regex(HEALTH_CHECK_NAME, HEALTH_CHECK_NAME_RULE), command })
    .strict();
  return zod()
    .object({
      /** Every one runs for `all-runtimes-healthy`; exit 0 = healthy. */
      runtimes: zod().array(NamedHealthCheck).max(64, 'at most 64 runtimes').optional(),
      /** Named checks a spec selects with `check: <name>`; exit 0 = healthy. */
      checks: zod().array(NamedHealthCheck).max(64, 'at most 64 checks').optional(),
      /** Prints the device's error rate (a number or `{"value": n}`); `error-rate < x` judges the max over devices. */
      errorRate: zod().object({ command }).strict().optional(),
    })
    .strict()
    .superRefine((health, ctx) => {
      const seen = new Map<string, string>();
      for (const list of ['runtimes', 'checks'] as const) {
        (health[list] ?? []).forEach((check, i) => {
          const first = seen.get(check.name);
          if (first)
            ctx.addIssue({
              code: 'custom',
              path: [list, i, 'name'],
              message: `"${check.name}" is already the name of ${first}; names select checks, so each must be unique`,
            });
          else seen.set(check.name, `${list}[${i}]`);
        });
      }
    });
}

export const RevisionHealth = lazySchema(() => revisionHealthSchema(true));
export type RevisionHealth = z.infer<typeof RevisionHealth>;

/** The signed device-side checks `check: <name>` can select, by name. */
export function namedHealthChecks(health: RevisionHealth | undefined): { name: string; command: string }[] {
  return [...(health?.runtimes ?? []), ...(health?.checks ?? [])];
}

/** The longest command a revision may carry (a script, not a payload: files go in `payload`). */
export const MAX_COMMAND_LENGTH = 64 * 1024;

/**
 * A signed device command. What is signed is what runs, so no character may hide or change what a
 * reader sees: no NUL or other control characters (a script keeps newlines and tabs; a one-line
 * command not even a newline), no bidi overrides or zero-width characters. And, a content rule, no
 * inline credential (core/credentials.ts): the envelope goes to every device and stays in the history
 * and the audit.
 */
function signedCommand(oneLine: boolean, contentRules: boolean) {
  // eslint-disable-next-line no-control-regex
  const hidden = oneLine
    ? /[\u0000-\u0008\u000a-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff]/
    : /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff]/;
  const rule = oneLine
    ? 'must be one line without control characters (NUL, newline, carriage return, escape...) or invisible characters'
    : 'must not contain control characters other than newline and tab (NUL, carriage return, escape...) or invisible characters';
  const structure = zod()
    .string()
    .max(MAX_COMMAND_LENGTH, `must be at most ${MAX_COMMAND_LENGTH} characters`)
    .refine((command) => !hidden.test(command), rule);
  if (!contentRules) return structure;
  return structure.superRefine((command, ctx) => {
    // The detector is linear (core/credentials.ts): a 64 KB script costs what a short one does per byte.
    if (command.length > MAX_COMMAND_LENGTH) return;
    const problem = signedCommandProblem(command);
    if (problem) ctx.addIssue({ code: 'custom', message: problem });
  });
}

function revisionSchema(contentRules: boolean) {
  return zod()
    .object({
      profile: zod().string().regex(PROFILE_NAME, PROFILE_NAME_RULE),
      revision: zod().number().int().positive('must be a positive whole number'),
      apply: signedCommand(false, contentRules),
      /** A check, one line: its exit status is the answer. */
      verify: signedCommand(true, contentRules),
      rollback: signedCommand(false, contentRules).optional(),
      /** The revision a risky change goes back to when no explicit rollback command is given. */
      previous: zod().number().int().positive().optional(),
      /**
       * How long after a device confirms this revision the rollout that brought it may still take it
       * back (its compensation, or a revert inside the spec's window), counted on the device's own clock
       * (core/floor.ts). Absent: the device maximum (DEVICE_WAY_BACK_MS); 0: never.
       */
      wayBack: boundedDuration(0, MAX_WAY_BACK_MS).optional(),
      payload: zod().array(payloadFileSchema(contentRules)).default([]),
      risk: zod().enum(['risky', 'safe']).default('risky'),
      /** Device-side health checks: signed with the rest, run only from a verified envelope. */
      health: revisionHealthSchema(contentRules).optional(),
      expiresAt: zod().iso.datetime({ offset: true }).optional(),
      /** When it was signed (set by `sign`; envelopes signed before it existed have none). */
      issuedAt: zod().iso.datetime({ offset: true }).optional(),
      description: zod().string().max(4096, 'must be at most 4096 characters').optional(),
      /**
       * Registration gates the author escaped when signing (`wavegate sign --allow-...`): inside the signed
       * body, so the escape stays on the record wherever the revision goes.
       */
      escapes: zod()
        .array(
          zod()
            .object({ gate: zod().string().max(128), flag: zod().string().max(128), reason: zod().string().max(1024) })
            .strict(),
        )
        .max(32)
        .optional(),
    })
    .strict();
}

/** A revision under both layers of rules: what every reader of a revision applies. */
export const Revision = lazySchema(() => revisionSchema(true));
/** The structure alone (see RevisionRules): only for a decision re-made on replay. */
const RevisionStructure = lazySchema(() => revisionSchema(false));
export type Revision = z.infer<typeof Revision>;

/** The revision schema under these rules (both layers unless `contentRules: false`). */
export function revisionSchemaFor(rules: RevisionRules = {}): typeof Revision {
  return rules.contentRules === false ? RevisionStructure : Revision;
}

export function parseRevision(data: unknown, source: string, rules: RevisionRules = {}): Revision {
  return parseWith(revisionSchemaFor(rules), data, source);
}

/**
 * A payload entry as its author writes it in revisions/<n>.yaml: `sha256` and `size` may be left out,
 * and `wavegate sign` fills them from the payload file into the signed content. Only `sign` fills:
 * every other reader takes them from a signed envelope (or, for a profile without pins, requires them).
 */
export const PayloadFileSource = lazySchema(() => PayloadFile.partial({ sha256: true, size: true }));
export type PayloadFileSource = z.infer<typeof PayloadFileSource>;

/** A revision as written in revisions/<n>.yaml: a revision whose payload entries may leave sha256/size to `sign`. */
export const RevisionSource = lazySchema(() =>
  Revision.extend({ payload: zod().array(PayloadFileSource).default([]) }),
);
export type RevisionSource = z.infer<typeof RevisionSource>;

export function parseRevisionSource(data: unknown, source: string): RevisionSource {
  return parseWith(RevisionSource, data, source);
}

/** What a payload file on disk holds, as `sign` read it (undefined `sha256`: too large to hash, over the cap). */
export interface PayloadFileFacts {
  sha256?: string;
  size: number;
}

/**
 * `sign`'s decision on a revision source's payload digests, given what each payload file holds
 * (`facts(i)`: undefined when the file could not be found, with `missing(i)` saying why). An omitted
 * `sha256`/`size` is filled from the file; a given one must be the file's, else a problem naming the
 * entry, the field, the value written and the value the file has. Pure: the reading is the caller's.
 */
export function fillPayloadDigests(
  source: RevisionSource,
  facts: (i: number) => PayloadFileFacts | undefined,
  missing: (i: number) => string,
): {
  revision: Record<string, unknown>;
  filled: string[];
  problems: { path: string; value: unknown; message: string }[];
} {
  const problems: { path: string; value: unknown; message: string }[] = [];
  const filled: string[] = [];
  const payload = source.payload.map((entry, i) => {
    const omitted = (['sha256', 'size'] as const).filter((field) => entry[field] === undefined);
    const file = facts(i);
    if (!file) {
      for (const field of omitted)
        problems.push({
          path: `payload[${i}].${field}`,
          value: undefined,
          message: `payload "${entry.name}": left for sign to fill, but ${missing(i)}`,
        });
      return entry;
    }
    // A file over the cap is not hashed: no device would take it, whatever the entry says.
    if (file.sha256 === undefined) {
      problems.push({
        path: `payload[${i}].source`,
        value: entry.source,
        message: `payload "${entry.name}": ${payloadSizeProblem(file.size) ?? `is ${file.size} bytes`}`,
      });
      return entry;
    }
    const out = { ...entry };
    for (const field of ['size', 'sha256'] as const) {
      const actual = file[field];
      if (entry[field] === undefined) {
        (out as Record<string, unknown>)[field] = actual;
        filled.push(`payload[${i}].${field}`);
      } else if (entry[field] !== actual) {
        problems.push({
          path: `payload[${i}].${field}`,
          value: entry[field],
          message: `payload "${entry.name}": the file ${entry.source} has ${field} ${actual}, not the value written here; write ${actual}, or remove sha256 and size from the entry and sign fills both from the file`,
        });
      }
    }
    return out;
  });
  return { revision: { ...source, payload }, filled, problems };
}

/** A url the worker reads metrics from: no credentials in it (the profile travels in the workflow history). */
const MetricsUrl = lazySchema(() =>
  zod()
    .url()
    .superRefine((url, ctx) => {
      const secret = inlineCredential(url);
      if (secret) ctx.addIssue({ code: 'custom', message: credentialsRefusal(secret) });
    }),
);

/**
 * A bearer token by reference, resolved on the worker only: an environment variable of the worker among
 * those its operator set for metrics tokens (`WAVEGATE_METRICS_TOKEN_<NAME>`, core/secret-policy.ts),
 * never any variable of the worker (its database password, its API keys); or an absolute path of a file,
 * which must be in the worker's metrics tokens directory (checked by `plan`/`start`,
 * intake/secret-policy.ts, and at every query). The reference is recorded; the token never is.
 */
const TokenEnv = lazySchema(() => zod().string().regex(METRICS_TOKENS.envPattern, METRICS_TOKENS.envRule));
const TokenFile = lazySchema(() =>
  zod()
    .string()
    .regex(/^\/[^\0\n\r]{1,1023}$/, 'must be an absolute path of a file on the worker'),
);

const MOVED_TO_REVISION = {
  runtimes:
    "device-side health commands must be signed: move each runtime into the revisions' health.runtimes as { name, command } and sign them again; the profile keeps scope and worker-side metrics only",
  command:
    "an error-rate command runs on devices, so it must be signed: move it into the revisions' health.errorRate.command and sign them again; metrics.errorRate keeps worker-side sources only (http, prometheus)",
};

/** Where the error rate is read from on the worker: one http or prometheus source, with an optional token reference. */
const ErrorRateSource = lazySchema(() =>
  zod()
    .object({
      http: MetricsUrl.optional(),
      prometheus: zod()
        .object({ url: MetricsUrl, query: zod().string().min(1).max(MAX_HEALTH_TEXT) })
        .strict()
        .optional(),
      /** Sent as `Authorization: Bearer <token>`, only to this source's url. */
      tokenEnv: TokenEnv.optional(),
      tokenFile: TokenFile.optional(),
      /** Refused (see superRefine): kept in the shape so the refusal names the field and says where it went. */
      command: zod().unknown().optional(),
    })
    .strict()
    .superRefine((source, ctx) => {
      if (source.command !== undefined)
        ctx.addIssue({ code: 'custom', path: ['command'], message: MOVED_TO_REVISION.command });
      else if ((source.http === undefined) === (source.prometheus === undefined))
        ctx.addIssue({ code: 'custom', message: 'give exactly one of "http" or "prometheus"' });
      if (source.tokenEnv !== undefined && source.tokenFile !== undefined)
        ctx.addIssue({
          code: 'custom',
          path: ['tokenFile'],
          message: 'give either "tokenEnv" or "tokenFile", not both',
        });
    })
    .transform(({ command: _refused, ...source }) => source as ErrorRateSourceOut),
);

type TokenRef = { tokenEnv?: string; tokenFile?: string };
type ErrorRateSourceOut = ({ http: string } & TokenRef) | ({ prometheus: { url: string; query: string } } & TokenRef);

/** The profile: what a rollout targets, and the worker-side metrics source (docs/formats.md). */
export const Profile = lazySchema(() =>
  zod()
    .object({
      name: zod().string().regex(PROFILE_NAME, PROFILE_NAME_RULE),
      description: zod().string().optional(),
      /** Label selector over the inventory: every listed label must match. Empty selects every device. */
      scope: zod().record(zod().string(), zod().string()).default({}),
      /** Refused (see superRefine): runtimes and their health commands live in the signed revisions now. */
      runtimes: zod().unknown().optional(),
      metrics: zod().object({ errorRate: ErrorRateSource }).strict().optional(),
    })
    .strict()
    .superRefine((profile, ctx) => {
      if (profile.runtimes !== undefined)
        ctx.addIssue({ code: 'custom', path: ['runtimes'], message: MOVED_TO_REVISION.runtimes });
    })
    .transform(({ runtimes: _refused, ...profile }) => profile),
);
export type Profile = z.output<typeof Profile>;

export function parseProfile(data: unknown, source: string): Profile {
  return parseWith(Profile, data, source);
}

/** Where on a device the floor of a profile is kept (core/floor.ts), beside the marker. */
export function floorPath(profile: string): string {
  return `.wavegate/profiles/${profile}/floor`;
}

/** Where on a device its current revision of a profile is recorded (relative to the login's $HOME). */
export function markerPath(profile: string): string {
  return `.wavegate/profiles/${profile}/revision`;
}
