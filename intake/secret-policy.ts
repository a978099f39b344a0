import type { Profile } from '../core/revision';
import { formatPath, invalidFields, type FieldProblem } from '../core/validation';
import {
  metricsPolicyFromEnv,
  secretFileRule,
  urlRefusal,
  webhookPolicyFromEnv,
  type SecretPolicy,
} from '../core/secret-policy';
import type { RolloutSpec } from '../core/spec';
import { resolveUnder } from './worker-files';

/**
 * Where a secret file really is, if the policy allows it: under the policy's secrets directory as text
 * (`..` resolved) and, when it exists here, once links are resolved (a link inside the directory to
 * /etc/shadow is outside). `mustExist` (the worker, at every delivery or query): the file and the
 * directory must exist, and the real path is what is read. Without it (`plan`/`start`, on a machine that
 * may not hold the file), a file absent here passes on the textual check and the worker checks it again.
 */
export function resolveSecretFile(
  path: string,
  policy: SecretPolicy,
  mustExist: boolean,
): { realPath: string } | { refused: 'outside' | 'unreadable' } {
  return resolveUnder(path, policy.secretsDir, mustExist);
}

/**
 * The webhook checks that need the machine (`plan` and `start`, with the CLI's own environment read as
 * the worker's configuration: WAVEGATE_WEBHOOK_SECRETS_DIR, WAVEGATE_WEBHOOK_ALLOW_PRIVATE,
 * WAVEGATE_WEBHOOK_ALLOW_HOSTS): a secret file outside the secrets directory, an address in a url that
 * the worker would refuse. INVALID_INPUT naming each field and its value; the worker decides again at
 * every delivery (activities/webhooks.ts), so a CLI configured more loosely gains nothing.
 */
export function checkWebhookPolicy(
  spec: Pick<RolloutSpec, 'webhooks'>,
  source: string,
  env: Readonly<Record<string, string | undefined>> = process.env,
): void {
  if (!spec.webhooks?.length) return;
  const policy = webhookPolicyFromEnv(env);
  const problems: FieldProblem[] = [];
  spec.webhooks.forEach((hook, i) => {
    const at = (field: string) => formatPath(['rollout', 'webhooks', i, field]);
    const refused = urlRefusal(hook.url, policy);
    if (refused) problems.push({ path: at('url'), value: hook.url, message: refused });
    if (hook.secretFile !== undefined && 'refused' in resolveSecretFile(hook.secretFile, policy, false)) {
      problems.push({ path: at('secretFile'), value: hook.secretFile, message: secretFileRule(policy) });
    }
  });
  if (problems.length) invalidFields(source, problems);
}

/**
 * The same for a profile's metrics token (`plan`, `start`, the nightly canary's schedule; the CLI's
 * environment read as the worker's: WAVEGATE_METRICS_TOKENS_DIR, WAVEGATE_METRICS_ALLOW_PRIVATE,
 * WAVEGATE_METRICS_ALLOW_HOSTS): a token file outside the tokens directory, and an address in the url the
 * token would be sent to that the worker would refuse. The variable's name is the schema's to check
 * (core/revision.ts). A source without a token is not bound here: it sends nothing of the worker's.
 */
export function checkMetricsPolicy(
  profile: Pick<Profile, 'metrics'>,
  source: string,
  env: Readonly<Record<string, string | undefined>> = process.env,
): void {
  const errorRate = profile.metrics?.errorRate;
  if (!errorRate || (errorRate.tokenEnv === undefined && errorRate.tokenFile === undefined)) return;
  const policy = metricsPolicyFromEnv(env);
  const problems: FieldProblem[] = [];
  const at = (...path: string[]) => formatPath(['metrics', 'errorRate', ...path]);
  const url = 'http' in errorRate ? errorRate.http : errorRate.prometheus.url;
  const refused = urlRefusal(url, policy);
  if (refused)
    problems.push({ path: 'http' in errorRate ? at('http') : at('prometheus', 'url'), value: url, message: refused });
  if (errorRate.tokenFile !== undefined && 'refused' in resolveSecretFile(errorRate.tokenFile, policy, false))
    problems.push({ path: at('tokenFile'), value: errorRate.tokenFile, message: secretFileRule(policy) });
  if (problems.length) invalidFields(source, problems);
}
