import { statSync } from 'node:fs';
import { METRICS_TOKENS, secretEnvAllowed, type SecretPolicy } from '../../core/secret-policy';
import { readText } from '../../intake/files';
import { resolveSecretFile } from '../../intake/secret-policy';
import type { ReadToken, TokenRef } from './types';

/** A bearer token file larger than this is not a token. */
const TOKEN_FILE_LIMIT = 16 * 1024;

type TokenRead = ReturnType<ReadToken>;

/**
 * The source's bearer token, read on this worker from the variable or file the profile names, within
 * the worker's metrics policy: checked here at every query, whatever `plan` said (a profile may have
 * reached the worker from an older CLI, or a hand-written workflow input). The token never reaches
 * the evidence; a refused file's content is never read.
 */
export function tokenReader(metricsPolicy: SecretPolicy): ReadToken {
  return (source: TokenRef): TokenRead => {
    if (source.tokenEnv !== undefined) return tokenFromEnv(source.tokenEnv);
    if (source.tokenFile !== undefined) return tokenFromFile(source.tokenFile, metricsPolicy);
    return { ok: true };
  };
}

function tokenFromEnv(name: string): TokenRead {
  if (!secretEnvAllowed(METRICS_TOKENS, name))
    return {
      ok: false,
      evidence: `refused: the metrics token variable ${name} is not one this worker sends (only ${METRICS_TOKENS.envPrefix}<NAME>)`,
    };
  const token = process.env[name]?.trim();
  if (!token) return { ok: false, evidence: `the metrics token variable ${name} is not set on this worker` };
  return { ok: true, token };
}

function tokenFromFile(path: string, metricsPolicy: SecretPolicy): TokenRead {
  const where = resolveSecretFile(path, metricsPolicy, true);
  if ('refused' in where)
    return {
      ok: false,
      evidence:
        where.refused === 'outside'
          ? `refused: the metrics token file ${JSON.stringify(path)} is outside this worker's metrics tokens directory (${METRICS_TOKENS.dirEnv}; links and ".." resolved)`
          : `the metrics token file ${path} cannot be read on this worker (missing, or a link that does not resolve)`,
    };
  try {
    const stat = statSync(where.realPath);
    if (!stat.isFile()) return { ok: false, evidence: `the metrics token file ${path} is not a regular file` };
    if (stat.size > TOKEN_FILE_LIMIT)
      return { ok: false, evidence: `the metrics token file ${path} is larger than ${TOKEN_FILE_LIMIT} bytes` };
    // Read through an fstat of the opened file: a FIFO swapped in after the stat above is refused, not waited on.
    const token = readText(where.realPath).trim();
    if (!token || /[\r\n]/.test(token))
      return { ok: false, evidence: `the metrics token file ${path} does not hold one token line` };
    return { ok: true, token };
  } catch (err) {
    return {
      ok: false,
      evidence: `the metrics token file ${path} cannot be read on this worker (${(err as NodeJS.ErrnoException).code ?? 'error'})`,
    };
  }
}
