import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { lintSource } from '@secretlint/core';
import { creator as recommended } from '@secretlint/secretlint-rule-preset-recommend';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml, parseAllDocuments } from 'yaml';
import { findCredentials, TOKEN_RULES } from '../../../core/credentials';
import { scrubCredentials } from '../../../core/health';
import { parseRevision } from '../../../core/revision';

/**
 * core/credentials.ts's provider-token rules follow secretlint's recommended preset
 * (@secretlint/secretlint-rule-preset-recommend, the exact version pinned in package.json): the preset's
 * own rules, run here through @secretlint/core, are the reference. Each sample below is a token of the
 * shape a rule of the preset reports; the test holds that the preset reports it (so the sample is real
 * for that rule) and that wavegate's detector refuses it and scrubs it. Samples are made of repeated
 * characters, not real credentials.
 */
const x = (n: number, c = 'a') => c.repeat(n);
/** A 1Password service account token's shape: base64 of a JSON object, so it ends in `fQ==`. */
const onePassword = (() => {
  let json = JSON.stringify({ signInAddress: 'my.1password.example', email: 'ops@example.com', deviceUuid: x(26) });
  while (json.length % 3 !== 1) json = json.replace('"a', '"aa');
  return `ops_${Buffer.from(json).toString('base64')}`;
})();
const SAMPLES: Array<{ rule: string; text: string; secret: string }> = [
  { rule: 'aws', secret: 'AKIAQWERTYUIOPASDFGH', text: 'aws_access_key_id = AKIAQWERTYUIOPASDFGH' },
  { rule: 'github', secret: `ghp_${x(36, 'A')}`, text: `git clone https://x:ghp_${x(36, 'A')}@github.com/o/r` },
  { rule: 'github', secret: `github_pat_${x(82, 'B')}`, text: `echo github_pat_${x(82, 'B')} > /etc/app/token` },
  { rule: 'gitlab', secret: `glpat-${x(20, 'C')}`, text: `echo glpat-${x(20, 'C')} > /etc/app/token` },
  {
    rule: 'slack',
    secret: 'xoxb-123456789012-1234567890123-abcdefghijklmnopqrstuvwx',
    text: 'echo xoxb-123456789012-1234567890123-abcdefghijklmnopqrstuvwx > /etc/app/slack',
  },
  {
    rule: 'slack',
    secret: 'T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX',
    text: 'curl -X POST https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX -d ok',
  },
  { rule: 'npm', secret: `npm_${x(36, 'D')}`, text: `echo npm_${x(36, 'D')} > ~/.npmrc` },
  {
    rule: 'sendgrid',
    secret: `SG.${x(22, 'e')}.${x(43, 'f')}`,
    text: `SENDGRID=SG.${x(22, 'e')}.${x(43, 'f')}`,
  },
  { rule: 'stripe', secret: `sk_live_${x(24, 'g')}`, text: `echo sk_live_${x(24, 'g')} > /etc/app/stripe` },
  { rule: 'shopify', secret: `shpat_${x(32, 'h')}`, text: `echo shpat_${x(32, 'h')} > /etc/app/shop` },
  {
    rule: 'openai',
    secret: `sk-proj-${x(74, 'i')}T3BlbkFJ${x(74, 'j')}`,
    text: `echo sk-proj-${x(74, 'i')}T3BlbkFJ${x(74, 'j')} > /etc/app/openai`,
  },
  {
    rule: 'anthropic',
    secret: `sk-ant-api03-${x(93, 'k')}AA`,
    text: `echo sk-ant-api03-${x(93, 'k')}AA > /etc/app/anthropic`,
  },
  { rule: 'groq', secret: `gsk_${x(52, 'l')}`, text: `echo gsk_${x(52, 'l')} > /etc/app/groq` },
  { rule: 'huggingface', secret: `hf_${x(34, 'm')}`, text: `echo hf_${x(34, 'm')} > /etc/app/hf` },
  { rule: 'linear', secret: `lin_api_${x(40, 'n')}`, text: `echo lin_api_${x(40, 'n')} > /etc/app/linear` },
  {
    rule: 'notion',
    secret: `ntn_${x(11, '1')}${x(35, 'o')}`,
    text: `echo ntn_${x(11, '1')}${x(35, 'o')} > /etc/app/notion`,
  },
  { rule: '1password', secret: onePassword, text: `OP_SERVICE_ACCOUNT=${onePassword} op read op://v/i` },
  { rule: 'grafana', secret: `glc_${x(32, 'p')}`, text: `echo glc_${x(32, 'p')} > /etc/app/grafana` },
  { rule: 'hashicorp-vault', secret: `hvs.${x(95, 'q')}`, text: `echo hvs.${x(95, 'q')} > /etc/app/vault` },
  { rule: 'vercel', secret: `vcp_${x(24, 'r')}`, text: `echo vcp_${x(24, 'r')} > /etc/app/vercel` },
  { rule: 'databricks', secret: `dapi${x(32, 'f')}`, text: `echo dapi${x(32, 'f')} > /etc/app/databricks` },
  { rule: 'docker', secret: `dckr_pat_${x(27, 's')}`, text: `echo dckr_pat_${x(27, 's')} > /etc/app/docker` },
  { rule: 'figma', secret: `figd_${x(40, 't')}`, text: `echo figd_${x(40, 't')} > /etc/app/figma` },
  {
    rule: 'cloudflare',
    secret: `cfut_${x(40, 'u')}${x(8, 'a')}`,
    text: `echo cfut_${x(40, 'u')}${x(8, 'a')} > /etc/app/cloudflare`,
  },
  {
    rule: 'tailscale',
    secret: `tskey-auth-${x(12, 'v')}-${x(30, 'w')}`,
    text: `echo tskey-auth-${x(12, 'v')}-${x(30, 'w')} > /etc/app/tailscale`,
  },
  {
    rule: 'privatekey',
    secret: x(120, 'M'),
    text: `cat > /etc/app/key.pem <<EOF\n-----BEGIN RSA PRIVATE KEY-----\nMI${x(118, 'M')}\n-----END RSA PRIVATE KEY-----\nEOF`,
  },
  { rule: 'basicauth', secret: 'S3cr3tXyz', text: 'curl https://ops:S3cr3tXyz@status.example.com/ok' },
  {
    rule: 'database-connection-string',
    secret: 'S3cr3tXyz',
    text: 'psql postgres://app:S3cr3tXyz@db.example.com:5432/app',
  },
];

/** Preset rules wavegate covers otherwise, or not: what is left, said in SECURITY.md and docs/formats.md. */
const COVERED_ELSEWHERE: Record<string, string> = {
  basicauth: 'scanUrls: a user:password@ in any url',
  'database-connection-string': 'scanUrls: a user:password@ in any url',
  privatekey: 'scanTokens: PEM private-key headers',
  gcp: "a service account key's private_key is a PEM block and a secret-named value",
  'filter-comments': 'secretlint-disable comments: nothing to detect',
};

/**
 * The rules the preset reports on `text`. The AWS rule scans access key ids only with its
 * `enableIDScanRule` option (off in the preset: an id alone signs nothing); wavegate refuses them anyway,
 * as gitleaks' aws-access-token rule does, so the AWS rule runs here with that option on.
 */
async function presetReports(text: string): Promise<string[]> {
  const aws = recommended.rules.find((r) => r.meta.id === '@secretlint/secretlint-rule-aws')!;
  const result = await lintSource({
    source: { content: text, filePath: 'command.sh', contentType: 'text' },
    options: {
      config: {
        rules: [
          { id: '@secretlint/secretlint-rule-preset-recommend', rule: recommended },
          { id: `${aws.meta.id}-ids`, rule: aws, options: { enableIDScanRule: true } },
        ],
      },
    },
  });
  return result.messages.map((m) => m.ruleId.replace('@secretlint/secretlint-rule-', '').replace(/-ids$/, ''));
}

describe("provider tokens follow secretlint's recommended preset (core/credentials.ts TOKEN_RULES)", () => {
  it('every rule of the pinned preset is followed by a token rule or covered by another pass', () => {
    const presetRules = recommended.rules.map((r) => r.meta.id.replace('@secretlint/secretlint-rule-', ''));
    const followed = new Set(TOKEN_RULES.map((r) => r.rule));
    for (const rule of presetRules) expect(followed.has(rule) || rule in COVERED_ELSEWHERE, rule).toBe(true);
    // and nothing here claims a rule the preset does not have
    for (const rule of followed) expect(presetRules, rule).toContain(rule);
    // one sample per rule, at least
    const sampled = new Set(SAMPLES.map((s) => s.rule));
    for (const rule of presetRules.filter((r) => r !== 'gcp' && r !== 'filter-comments'))
      expect(sampled.has(rule), rule).toBe(true);
  });

  it.each(SAMPLES.map((s) => [`${s.rule}: ${s.text.slice(0, 40)}`, s] as const))(
    '%s: the preset reports it, and wavegate refuses and scrubs it',
    async (_name, sample) => {
      expect(await presetReports(sample.text)).toContain(sample.rule);
      const found = findCredentials(sample.text);
      expect(found.length, sample.text).toBeGreaterThan(0);
      const scrubbed = scrubCredentials(sample.text);
      expect(scrubbed).not.toContain(sample.secret);
    },
  );
});

describe("the project's own commands and the look-alikes sign (nothing found)", () => {
  it('test/corpus/credential-lookalikes.yaml: each signs as an apply command', () => {
    const lookalikes = parseYaml(readFileSync('test/corpus/credential-lookalikes.yaml', 'utf8')) as string[];
    expect(lookalikes.length).toBeGreaterThanOrEqual(40);
    for (const command of lookalikes) {
      expect(findCredentials(command), command).toEqual([]);
      expect(() =>
        parseRevision({ profile: 'corpus', revision: 2, apply: command, verify: 'true' }, 'x'),
      ).not.toThrow();
    }
  });

  it('every string of profiles/, examples/, bench/ and the corpus valid inputs holds no credential', () => {
    const strings: Array<{ file: string; text: string }> = [];
    const visit = (file: string, v: unknown): void => {
      if (typeof v === 'string') strings.push({ file, text: v });
      else if (Array.isArray(v)) for (const x of v) visit(file, x);
      else if (v && typeof v === 'object') for (const x of Object.values(v)) visit(file, x);
    };
    const walk = (dir: string): void => {
      for (const entry of readdirSync(dir, { withFileTypes: true })) {
        const path = join(dir, entry.name);
        if (entry.isDirectory()) walk(path);
        else if (/\.(ya?ml|json)$/.test(entry.name)) {
          const text = readFileSync(path, 'utf8');
          for (const doc of entry.name.endsWith('.json') ? [JSON.parse(text)] : parseAllDocuments(text))
            visit(path, 'toJS' in (doc as object) ? (doc as { toJS(): unknown }).toJS() : doc);
        }
      }
    };
    for (const dir of ['profiles', 'examples', 'bench', 'test/corpus/valid', 'test/corpus/profile-dirs']) walk(dir);
    expect(strings.length).toBeGreaterThan(250);
    const flagged = strings.filter((s) => findCredentials(s.text).length > 0);
    expect(flagged.map((s) => `${s.file}: ${s.text.slice(0, 80)}`)).toEqual([]);
  });
});
