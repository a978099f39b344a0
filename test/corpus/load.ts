import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';

/** One malformed input and what refusing it must say (test/corpus/cases*.yaml). */
export interface CorpusCase {
  file: string;
  kind: 'spec' | 'inventory' | 'revision' | 'profile' | 'command' | 'signed-command';
  code: string;
  path: string;
  why?: string;
  /** Text the message must contain: the value as given, or the rule. */
  shows?: string;
  /**
   * A profiles directory under test/corpus (specs only): the spec is then also checked against its
   * profile's target revision, as `plan` and `start` check it (default: no profile, parsing only).
   */
  profiles?: string;
  /**
   * kind `signed-command` (test/corpus/cases-credentials.yaml): this text as a revision's `apply`, refused
   * by the revision schema; `file` is then the case's name, not a file. `secret` is the literal that
   * neither the refusal nor the scrubbed text may show.
   */
  command?: string;
  secret?: string;
  /** Expensive to refuse naively (huge expansion, deep nesting): also run under a 200 MB heap. */
  heavy?: boolean;
  /**
   * kind `command` (test/e2e/bad-input-commands.test.ts): the real `wavegate` run with these arguments in a
   * fresh temp dir. `file` is then the case's name, not a file. In `args`, `env`, `path` and `shows`, `{dir}` is the
   * temp dir and `{corpus}` the absolute test/corpus dir. The command must exit `exit` (default 2) with
   * `path` (the field or flag) and `shows` on stderr, no stack trace, within `timeoutMs` (default 60 s).
   */
  args?: string[];
  env?: Record<string, string>;
  /** Files written into the temp dir first: name -> content. */
  files?: Record<string, string>;
  /** chmod after writing: name -> octal mode as a string ("0666"). */
  modes?: Record<string, string>;
  /** FIFOs made in the temp dir (mkfifo): names. */
  fifos?: string[];
  /** Directories made in the temp dir: names. */
  dirs?: string[];
  exit?: number;
  timeoutMs?: number;
}

export const CORPUS_ROOT = 'test/corpus';

/** Every case: cases.yaml, then each cases-<topic>.yaml (one file per topic, so authors do not collide). */
export function corpusCases(): CorpusCase[] {
  const files = readdirSync(CORPUS_ROOT)
    .filter((f) => /^cases(-[a-z0-9-]+)?\.yaml$/.test(f))
    .sort((a, b) => (a === 'cases.yaml' ? -1 : b === 'cases.yaml' ? 1 : a < b ? -1 : 1));
  return files.flatMap((f) => parseYaml(readFileSync(join(CORPUS_ROOT, f), 'utf8')) as CorpusCase[]);
}
