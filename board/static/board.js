// The board's page: plain JavaScript, no build step, no library. Every text from the server is put in the
// page as text (textContent), never as HTML, so nothing a device, a reason or an audit record says can run.

const state = {
  session: null,
  stream: null,
  route: null,
  query: { state: '', q: '', offset: 0, limit: 100 },
  list: { q: '', page: 0 },
};
const main = () => document.getElementById('main');

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// A notice may say where it came from (`from`): that source clears it once it works again, so a page
// left open does not keep saying "Temporal away" after Temporal is back.
function notice(text, kind, from) {
  const n = document.getElementById('notice');
  n.textContent = text || '';
  n.className = kind || '';
  n.hidden = !text;
  n.dataset.from = from || '';
}

function clearNotice(from) {
  if (document.getElementById('notice').dataset.from === from) notice('');
}

async function api(path, opts) {
  const res = await fetch(path, { credentials: 'same-origin', ...opts });
  const body = await res.json().catch(() => ({ code: 'INTERNAL', message: `HTTP ${res.status}` }));
  if (!res.ok) {
    const err = new Error(body.message || `HTTP ${res.status}`);
    err.status = res.status;
    err.code = body.code;
    throw err;
  }
  return body;
}

function post(path, body) {
  return api(path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-csrf-token': state.session ? state.session.csrf : '' },
    body: JSON.stringify(body),
  });
}

const OUTCOME_LABEL = {
  'completed-pending': 'completed, work pending',
  'rolled-back': 'rolled back',
};
const badge = (outcome) =>
  h('span', { class: `badge o-${outcome}`, 'data-outcome': outcome }, OUTCOME_LABEL[outcome] || outcome);
/**
 * Every time the board shows, in this browser's zone with the zone named (`2026-12-08 01:23:45 UTC`, `… CET`):
 * one formatter, the estimated ends' own, so no time on the page is read in the wrong zone.
 */
const ZONED = new Intl.DateTimeFormat('en-CA', {
  year: 'numeric',
  month: '2-digit',
  day: '2-digit',
  hour: '2-digit',
  minute: '2-digit',
  second: '2-digit',
  hourCycle: 'h23',
  timeZoneName: 'short',
});
// From its parts: a locale's own layout varies between ICU builds (`1:40:21` in one, `01:40:21` in another).
const zoned = (iso) => {
  const p = Object.fromEntries(ZONED.formatToParts(new Date(iso)).map((x) => [x.type, x.value]));
  return `${p.year}-${p.month}-${p.day} ${p.hour}:${p.minute}:${p.second} ${p.timeZoneName}`;
};
const when = (iso) => (iso ? zoned(iso) : '-');

function stopStream() {
  if (state.stream) state.stream.close();
  state.stream = null;
  clearTimeout(state.listTimer);
}

// ---------------------------------------------------------------------------------------------- login

function showLogin(message) {
  stopStream();
  const input = h('input', { type: 'password', id: 'token', autocomplete: 'current-password', required: true });
  const error = h('p', { class: 'error', hidden: !message }, message || '');
  const form = h(
    'form',
    {
      id: 'login',
      onsubmit: async (e) => {
        e.preventDefault();
        try {
          // The token file's whole line may be pasted ("<name> <token>"): the token is its last word.
          const token = input.value.trim().split(/\s+/).pop();
          state.session = await post('/api/login', { token });
          document.getElementById('who').textContent = whoText(state.session);
          route();
        } catch (err) {
          error.textContent = err.message;
          error.hidden = false;
        }
      },
    },
    h('h1', {}, 'Sign in'),
    h(
      'label',
      {},
      "Token: its line in the board's token file (`wavegate board` printed the file's path when it started)",
      input,
    ),
    error,
    h('button', { type: 'submit' }, 'Sign in'),
  );
  main().replaceChildren(form);
}

/** Who is signed in, with their role when it is not the default (the token file's: viewer, approver). */
function whoText(session) {
  return `signed in as ${session.operator}${session.role && session.role !== 'operator' ? ` (${session.role})` : ''}`;
}

/** A viewer reads and sends nothing (the server refuses it 403 either way): no control is offered. */
const isViewer = () => state.session?.role === 'viewer';

async function ensureSession() {
  if (state.session) return true;
  try {
    state.session = await api('/api/session');
    document.getElementById('who').textContent = whoText(state.session);
    return true;
  } catch (err) {
    if (err.status === 401) {
      showLogin();
      return false;
    }
    throw err;
  }
}

// ---------------------------------------------------------------------------------------------- rollouts

function phaseCell(phases) {
  if (!phases) return '-';
  return phases.map((p) =>
    h(
      'span',
      { class: `phase s-${p.stage}`, title: `${p.name}: ${p.stage}${p.gateOutcome ? `, gate ${p.gateOutcome}` : ''}` },
      `${p.name} ${p.done}/${p.planned}${p.failed ? ` ✗${p.failed}` : ''}`,
    ),
  );
}

/** The list's search (rollout id, profile, state or outcome contains…) and page: the server matches and pages. */
const LIST_LIMIT = 50;

function listQuery() {
  const l = state.list;
  const params = new URLSearchParams({ page: String(l.page), limit: String(LIST_LIMIT) });
  if (l.q) params.set('q', l.q);
  return params;
}

/** The list again, if it is still the page shown (a search typed just before leaving must not draw over another). */
function relist() {
  if (location.hash !== state.listHash || !document.getElementById('rollout-search')) return;
  listLive().catch((err) => notice(`${err.code || 'ERROR'}: ${err.message}`, 'error', 'list'));
}

function listFilters(answer) {
  const l = state.list;
  let typing;
  const search = h('input', {
    id: 'rollout-search',
    type: 'search',
    placeholder: 'rollout id, profile or state contains…',
    value: l.q,
    maxlength: 100,
    oninput: (e) => {
      clearTimeout(typing);
      typing = setTimeout(() => {
        l.q = e.target.value.trim();
        l.page = 0;
        relist();
      }, 300);
    },
  });
  const go = (page) => () => {
    l.page = page;
    relist();
  };
  const first = answer.matching ? answer.page * answer.limit + 1 : 0;
  const last = Math.min((answer.page + 1) * answer.limit, answer.matching);
  return h(
    'div',
    { class: 'filters', id: 'rollout-filters' },
    search,
    h(
      'span',
      { class: 'pager', id: 'rollout-pager', 'data-page': answer.page, 'data-matching': answer.matching },
      h('button', { id: 'rollouts-prev', disabled: answer.page === 0, onclick: go(answer.page - 1) }, '‹ prev'),
      ` ${first}-${last} of ${answer.matching}${answer.read >= answer.readLimit ? ` (of the newest ${answer.readLimit})` : ''} `,
      h(
        'button',
        { id: 'rollouts-next', disabled: answer.page + 1 >= answer.pages, onclick: go(answer.page + 1) },
        'next ›',
      ),
    ),
  );
}

async function showRollouts() {
  const shown = location.hash;
  const answer = await api(`/api/rollouts?${listQuery()}`);
  // Left for another page while the list was read: that page is drawn, not this.
  if (location.hash !== shown) return;
  const { rollouts } = answer;
  // A page past the end (rollouts gone, a narrower search) goes back to the last one.
  if (!rollouts.length && answer.page > 0 && answer.pages > 0) {
    state.list.page = answer.pages - 1;
    return showRollouts();
  }
  const focused = document.activeElement?.id;
  const rows = rollouts.map((r) =>
    h(
      'tr',
      { 'data-rollout': r.workflowId },
      h('td', {}, badge(r.outcome)),
      h('td', {}, h('a', { href: `#/rollout/${encodeURIComponent(r.workflowId)}` }, r.workflowId)),
      h('td', {}, r.profile || '-'),
      h(
        'td',
        {},
        r.fromRevision !== undefined ? `r${r.fromRevision} → r${r.toRevision}` : r.revision ? `→ r${r.revision}` : '-',
      ),
      h('td', {}, r.startedBy || '-'),
      h('td', { class: 'started' }, when(r.startTime)),
      h('td', { class: 'phases' }, phaseCell(r.phases)),
      h(
        'td',
        {},
        r.counts
          ? `${r.counts.applied + r.counts.claimed}/${r.counts.total}${r.counts.failed ? `, ${r.counts.failed} failed` : ''}`
          : '-',
      ),
    ),
  );
  main().replaceChildren(
    h('h1', {}, 'Rollouts'),
    h(
      'p',
      { class: 'hint' },
      'Failures first. The outcome is the rollout\'s own: a rollback or an abort is never "Completed".',
    ),
    listFilters(answer),
    h(
      'table',
      { id: 'rollouts' },
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          [
            'Outcome',
            'Rollout',
            'Profile',
            'Revisions',
            'Started by',
            'Started',
            'Phases (done/planned)',
            'Devices',
          ].map((t) => h('th', {}, t)),
        ),
      ),
      h(
        'tbody',
        {},
        rows.length
          ? rows
          : h(
              'tr',
              {},
              h('td', { colspan: 8 }, state.list.q ? `No rollout matches "${state.list.q}".` : 'No rollouts yet.'),
            ),
      ),
    ),
  );
  state.listHash = shown;
  // A redraw keeps the operator's place in the search box.
  if (focused === 'rollout-search') {
    const box = document.getElementById('rollout-search');
    box.focus();
    box.setSelectionRange(box.value.length, box.value.length);
  }
}

/** The list, read again every 5 s while it is the page shown (a new rollout, an outcome, appear by themselves). */
async function listLive() {
  await showRollouts();
  clearNotice('list');
  clearTimeout(state.listTimer);
  state.listTimer = setTimeout(() => {
    if ((location.hash || '#/') === '#/')
      listLive().catch((err) => notice(`${err.code || 'ERROR'}: ${err.message}`, 'error', 'list'));
  }, 5000);
}

// ---------------------------------------------------------------------------------------------- one rollout

const CONTROL_TEXT = {
  pause: 'No new device starts; devices in flight finish, then the rollout holds.',
  resume: 'The rollout goes on from where it holds.',
  approve: 'The manual gate is passed; the health gate of the phase runs next.',
  abort: 'No new device starts. With rollback, every device this rollout changed is put back.',
};

function askControl(id, name) {
  document.getElementById('confirm-title').textContent = `${name[0].toUpperCase()}${name.slice(1)} ${id}?`;
  const text = document.getElementById('confirm-text');
  text.textContent = CONTROL_TEXT[name];
  delete text.dataset.devices;
  const rollbackBox = document.getElementById('confirm-rollback');
  rollbackBox.checked = true;
  rollbackBox.onchange = null;
  // An abort says how many devices a rollback puts back (the view's count of what this rollout changed).
  const preview = name === 'abort' && state.view?.rolloutId === id ? state.view.abort : null;
  if (preview) {
    text.dataset.devices = String(preview.devices);
    const say = () => {
      text.textContent = `No new device starts. ${rollbackBox.checked ? preview.rollback : preview.keep}`;
    };
    rollbackBox.onchange = say;
    say();
  }
  const reason = document.getElementById('confirm-reason');
  reason.value = '';
  document.getElementById('confirm-rollback-row').hidden = name !== 'abort';
  document.getElementById('confirm-reason-row').hidden = false;
  document.getElementById('confirm-reason-label').textContent = 'Reason (recorded in the audit trail with your name)';
  reason.required = true;
  document.getElementById('confirm-devices').hidden = true;
  document.getElementById('confirm-fast-row').hidden = true;
  document.getElementById('confirm-rollback').checked = true;
  openConfirm(
    `Confirm ${name}`,
    () => {
      const body = { reason: reason.value };
      if (name === 'abort') body.rollback = document.getElementById('confirm-rollback').checked;
      return post(`/api/rollouts/${encodeURIComponent(id)}/${name}`, body);
    },
    (done) => notice(done.message, 'ok'),
  );
  reason.focus();
}

/**
 * The confirm dialog's one way to send, for every control it asks: its OK button (named `okText`) runs `send` (a
 * POST), closes the dialog and hands the answer to `done`; a refusal is shown in the dialog, and a lost session
 * asks for a login again.
 */
function openConfirm(okText, send, done) {
  const dialog = document.getElementById('confirm');
  const error = document.getElementById('confirm-error');
  error.hidden = true;
  const ok = document.getElementById('confirm-ok');
  ok.textContent = okText;
  document.getElementById('confirm-form').onsubmit = async (e) => {
    e.preventDefault();
    ok.disabled = true;
    try {
      const answer = await send();
      dialog.close();
      done(answer);
    } catch (err) {
      error.textContent = `${err.code || 'ERROR'}: ${err.message}`;
      error.hidden = false;
      if (err.status === 401) state.session = null;
    } finally {
      ok.disabled = false;
    }
  };
  document.getElementById('confirm-cancel').onclick = () => dialog.close();
  dialog.showModal();
}

/** A revert: what it will touch is asked first (the command's own checks), shown, then confirmed. */
async function askRevert(id) {
  let preview;
  try {
    preview = await api(`/api/rollouts/${encodeURIComponent(id)}/revert`);
  } catch (err) {
    return notice(`${err.code || 'ERROR'}: ${err.message}`, 'error');
  }
  if (!preview.applies) return notice(`No revert: ${preview.why}`, 'error');
  document.getElementById('confirm-title').textContent = `Revert ${id}?`;
  document.getElementById('confirm-text').textContent =
    `A new rollout of ${preview.profile} from r${preview.from} back to r${preview.to} over exactly the ${preview.devices.length} device(s) ${id} changed, with its ${preview.phases} phase(s), gates and health checks.` +
    (preview.windowClosesAt ? ` Its revert window closes at ${when(preview.windowClosesAt)}.` : '');
  const list = document.getElementById('confirm-devices');
  const shown = preview.devices.slice(0, 50).map((d) => h('li', { 'data-device': d }, d));
  if (preview.devices.length > 50) shown.push(h('li', {}, `and ${preview.devices.length - 50} more`));
  list.replaceChildren(...shown);
  list.hidden = false;
  document.getElementById('confirm-fast-row').hidden = false;
  document.getElementById('confirm-fast').checked = false;
  document.getElementById('confirm-reason-row').hidden = true;
  document.getElementById('confirm-reason').required = false;
  document.getElementById('confirm-rollback-row').hidden = true;
  openConfirm(
    `Revert ${preview.devices.length} device(s)`,
    () =>
      post(`/api/rollouts/${encodeURIComponent(id)}/revert`, {
        devices: preview.devices.length,
        digest: preview.digest,
        fast: document.getElementById('confirm-fast').checked,
      }),
    (done) => {
      // Said on the new rollout's page (a route change clears the notice line first).
      state.flash = done.message;
      location.hash = `#/rollout/${encodeURIComponent(done.rolloutId)}`;
    },
  );
}

function controlsOf(view) {
  if (isViewer())
    return h('p', { class: 'hint', id: 'controls' }, 'You are a viewer here: you read, and send no control.');
  const running = view.temporalStatus === 'RUNNING';
  const names = [];
  if (running && view.state === 'running') names.push('pause');
  if (running && view.state === 'paused') names.push('resume');
  if (running && view.awaitingApproval) names.push('approve');
  if (running) names.push('abort');
  if (!names.length) {
    if (view.outcome === 'completed' || view.outcome === 'completed-pending')
      return h(
        'div',
        { id: 'controls' },
        h('button', { 'data-control': 'revert', onclick: () => askRevert(view.rolloutId) }, 'revert…'),
        h('span', { class: 'hint' }, ' shows what it would touch first'),
      );
    return h('p', { class: 'hint', id: 'controls' }, 'The rollout has ended: no control applies.');
  }
  return h(
    'div',
    { id: 'controls' },
    names.map((n) =>
      h(
        'button',
        { 'data-control': n, class: n === 'abort' ? 'danger' : '', onclick: () => askControl(view.rolloutId, n) },
        n,
      ),
    ),
  );
}

function gateBlock(g) {
  const parts = [
    h(
      'h4',
      {},
      `${g.kind === 'health' ? 'Health gate' : g.kind === 'failure-gate' ? 'Failure gate' : 'Manual gate'}: `,
      h('span', { class: `badge g-${g.outcome}` }, g.outcome),
    ),
  ];
  parts.push(
    h('p', { class: 'hint' }, `${when(g.at)} by ${g.by}, audit record #${g.seq}${g.reason ? `; ${g.reason}` : ''}`),
  );
  if (g.tally)
    parts.push(
      h(
        'p',
        { class: 'tally' },
        `Failure ratio ${(g.tally.ratio * 100).toFixed(1)}% (${g.tally.failed} failed of a sample of ${g.tally.sample}; ${g.tally.succeeded} succeeded)`,
      ),
    );
  if (g.checks?.length)
    parts.push(
      h(
        'table',
        { class: 'checks' },
        h(
          'thead',
          {},
          h(
            'tr',
            {},
            ['Check', 'Result', 'Evidence', 'Devices that failed it', 'Took'].map((t) => h('th', {}, t)),
          ),
        ),
        h(
          'tbody',
          {},
          g.checks.map((c) =>
            h(
              'tr',
              { class: `c-${c.outcome}` },
              h('td', {}, h('code', {}, c.check)),
              h('td', {}, c.outcome),
              h('td', {}, c.evidence),
              h('td', {}, (c.failedDevices || []).join(', ') || '-'),
              h('td', {}, `${c.durationMs} ms`),
            ),
          ),
        ),
      ),
    );
  else if (g.kind === 'health') parts.push(h('p', { class: 'hint' }, 'No health checks: nothing to hold the gate.'));
  return h('div', { class: 'gate', 'data-gate': g.kind, 'data-gate-outcome': g.outcome }, parts);
}

const span = (ms) => {
  const s = Math.max(0, Math.round(ms / 1000));
  const hours = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  return hours ? `${hours}h ${m}m` : m ? `${m}m ${s % 60}s` : `${s % 60}s`;
};
/** An estimated end (core/eta.ts): a time, so long after an approval or a resume, or unknown; '' once done. */
function etaText(eta) {
  if (!eta || eta.kind === 'done') return '';
  if (eta.kind === 'at') return `~${zoned(eta.at)} (in ${span(eta.inMs)})`;
  if (eta.kind === 'after') {
    const cond = eta.condition === 'approval' ? 'after approval' : 'after resume (paused)';
    return eta.inMs === undefined ? `unknown, ${cond}` : `${span(eta.inMs)} ${cond}`;
  }
  return `unknown (${eta.reason})`;
}

function phasesBlock(view) {
  return h(
    'section',
    { id: 'phases' },
    h('h2', {}, 'Phases'),
    view.phases.map((p) => {
      const gates = view.gates.filter((g) => g.phase === p.name);
      return h(
        'div',
        { class: `phase-card s-${p.stage}`, 'data-phase': p.name },
        h(
          'h3',
          {},
          `${p.index + 1}. ${p.name} `,
          h('span', { class: 'stage' }, p.stage),
          p.gateOutcome ? ` · gate ${p.gateOutcome}` : '',
        ),
        h(
          'p',
          {},
          `plan ${p.planned} devices · applied ${p.done} · failed ${p.failed} · in flight ${p.inFlight}${p.notForMe ? ` · not-for-me ${p.notForMe}` : ''} · gate ${p.gate === 'manual' ? 'manual' : `${p.gate / 1000}s`}`,
        ),
        etaText(view.eta?.phases[p.index]?.eta)
          ? h('p', { class: 'eta' }, `estimated end: ${etaText(view.eta.phases[p.index].eta)}`)
          : null,
        p.evidence?.length && !gates.length
          ? h(
              'ul',
              { class: 'evidence' },
              p.evidence.map((e) => h('li', {}, e)),
            )
          : null,
        gates.map(gateBlock),
      );
    }),
  );
}

const SVG = 'http://www.w3.org/2000/svg';
function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

/** One check's readings as a small line chart: each gate's or watch check's value, the threshold dashed. */
function metricChart(series) {
  const W = 260;
  const H = 70;
  const pad = 6;
  const values = series.points.map((p) => p.value).concat(series.threshold);
  const lo = Math.min(0, ...values);
  const hi = Math.max(...values) || 1;
  const x = (i) =>
    pad + (series.points.length === 1 ? (W - 2 * pad) / 2 : (i * (W - 2 * pad)) / (series.points.length - 1));
  const y = (v) => H - pad - ((v - lo) / (hi - lo || 1)) * (H - 2 * pad);
  const line = series.points.map((p, i) => `${x(i).toFixed(1)},${y(p.value).toFixed(1)}`).join(' ');
  return h(
    'figure',
    { class: 'metric', 'data-check': series.check, 'data-points': series.points.length },
    svg(
      'svg',
      { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: 'img' },
      svg(
        'title',
        {},
        `${series.check}: ${series.points.length} reading(s), threshold ${series.op} ${series.threshold}`,
      ),
      svg('line', { x1: pad, x2: W - pad, y1: y(series.threshold), y2: y(series.threshold), class: 'threshold' }),
      svg('polyline', { points: line, class: 'reading' }),
      ...series.points.map((p, i) =>
        svg(
          'circle',
          { cx: x(i), cy: y(p.value), r: 3, class: `g-${p.outcome}` },
          svg('title', {}, `${p.value} at ${when(p.at)} (${p.phase || 'watch'}, ${p.outcome}, record #${p.seq})`),
        ),
      ),
    ),
    h(
      'figcaption',
      {},
      h('code', {}, series.check),
      ` last ${series.points.at(-1).value}, threshold ${series.op} ${series.threshold}`,
    ),
  );
}

/** Phases, gates and controls in order (who and when), with the values the threshold checks read drawn. */
function timelineBlock(view) {
  const t = view.timeline;
  if (!t) return null;
  return h(
    'section',
    { id: 'timeline' },
    h('h2', {}, 'Timeline'),
    t.series.length ? h('div', { class: 'metrics' }, t.series.map(metricChart)) : null,
    t.omitted ? h('p', { class: 'hint' }, `${t.omitted} older entries not shown (the audit trail holds them).`) : null,
    h(
      'ol',
      { class: 'timeline' },
      t.entries.map((e) =>
        h(
          'li',
          { 'data-kind': e.kind, 'data-outcome': e.outcome || '', class: `t-${e.kind}` },
          h('time', { datetime: e.at }, when(e.at)),
          ' ',
          h('span', { class: 'what' }, e.text),
          e.by ? ` by ${e.by}` : '',
          e.reason ? ` (${e.reason})` : '',
          e.seq ? h('span', { class: 'hint' }, ` #${e.seq}`) : '',
        ),
      ),
    ),
  );
}

function devicesBlock(view, id) {
  const page = view.devices;
  const q = state.query;
  const restart = () => openRollout(id);
  const stateSelect = h(
    'select',
    {
      id: 'filter-state',
      onchange: (e) => {
        q.state = e.target.value;
        q.offset = 0;
        restart();
      },
    },
    h('option', { value: '' }, 'every state'),
    [
      'failed',
      'rollback-failed',
      'waiting',
      'applying',
      'rolling-back',
      'pending',
      'not-started',
      'skipped',
      'rolled-back',
      'not-for-me',
      'claimed',
      'applied',
    ].map((s) =>
      h('option', { value: s, selected: q.state === s }, `${s}${view.counts[s] ? ` (${view.counts[s]})` : ''}`),
    ),
  );
  let typing;
  const search = h('input', {
    id: 'filter-id',
    type: 'search',
    placeholder: 'device id contains…',
    value: q.q,
    maxlength: 200,
    oninput: (e) => {
      clearTimeout(typing);
      typing = setTimeout(() => {
        q.q = e.target.value;
        q.offset = 0;
        restart();
      }, 300);
    },
  });
  const pager = h(
    'span',
    { class: 'pager' },
    h(
      'button',
      {
        disabled: q.offset === 0,
        onclick: () => {
          q.offset = Math.max(0, q.offset - q.limit);
          restart();
        },
      },
      '‹ prev',
    ),
    ` ${page.matching ? page.offset + 1 : 0}-${Math.min(page.offset + page.limit, page.matching)} of ${page.matching} (${page.total} in all) `,
    h(
      'button',
      {
        disabled: page.offset + page.limit >= page.matching,
        onclick: () => {
          q.offset += q.limit;
          restart();
        },
      },
      'next ›',
    ),
  );
  return h(
    'section',
    { id: 'devices' },
    h('h2', {}, 'Devices, worst first'),
    h('div', { class: 'filters' }, stateSelect, search, pager),
    h(
      'table',
      { id: 'device-table' },
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          ['Device', 'State', 'Proof', 'Phase', 'Since', 'Attempts', 'Transport', 'Reason / last error'].map((t) =>
            h('th', {}, t),
          ),
        ),
      ),
      h(
        'tbody',
        {},
        page.devices.map((d) =>
          h(
            'tr',
            { 'data-device': d.id, 'data-state': d.state, class: `d-${d.state}` },
            h('td', {}, deviceLink(d.id)),
            h('td', { class: 'state' }, d.state),
            h('td', { class: 'proof', title: d.proof === 'proven' ? 'its own receipt, verified' : '' }, d.proof || ''),
            h('td', {}, view.phases[d.phase] ? view.phases[d.phase].name : '-'),
            h('td', {}, when(d.since)),
            h('td', {}, d.attempts),
            h('td', {}, d.transport || '-'),
            h('td', {}, d.reason || d.lastError || ''),
          ),
        ),
      ),
    ),
  );
}

function renderRollout(view, id) {
  state.view = view;
  const b = view.banner;
  main().replaceChildren(
    h(
      'p',
      {},
      h('a', { href: '#/' }, '‹ all rollouts'),
      ' · ',
      h('a', { href: `#/rollout/${encodeURIComponent(id)}/audit` }, 'audit trail'),
    ),
    h(
      'section',
      { id: 'banner', class: `banner o-${view.outcome}`, 'data-state': view.state, 'data-outcome': view.outcome },
      h('h1', {}, badge(view.outcome), ' ', view.rolloutId),
      h(
        'p',
        {},
        `${view.profile} r${view.fromRevision} → r${view.toRevision} · started ${when(view.startTime)} by ${view.startedBy || '-'}${view.closeTime ? ` · ended ${when(view.closeTime)}` : ''}`,
      ),
      h('p', { class: 'headline' }, b.headline),
      h(
        'ul',
        { id: 'why' },
        b.why.map((w) => h('li', {}, w)),
      ),
      h('p', { class: 'hint' }, view.outcomeSummary),
      etaText(view.eta?.rollout)
        ? h('p', { id: 'eta', 'data-eta': view.eta.rollout.kind }, `estimated completion: ${etaText(view.eta.rollout)}`)
        : null,
      view.proof
        ? h(
            'p',
            { id: 'proof', 'data-proven': view.proof.proven, 'data-applied': view.proof.applied },
            `proof: ${view.proof.proven} of ${view.proof.applied} applied proven by their own receipts`,
          )
        : null,
      view.trail.missing ? h('p', { class: 'error' }, `audit trail not readable here: ${view.trail.missing}`) : null,
    ),
    controlsOf(view),
    phasesBlock(view),
    timelineBlock(view),
    devicesBlock(view, id),
  );
}

function openRollout(id) {
  stopStream();
  const q = state.query;
  const params = new URLSearchParams({ offset: String(q.offset), limit: String(q.limit) });
  if (q.state) params.set('state', q.state);
  if (q.q) params.set('q', q.q);
  const es = new EventSource(`/api/rollouts/${encodeURIComponent(id)}/events?${params}`);
  state.stream = es;
  es.addEventListener('view', (e) => {
    clearNotice('stream');
    const focused = document.activeElement?.id;
    renderRollout(JSON.parse(e.data), id);
    // A redraw keeps the operator's place in the filter box.
    if (focused === 'filter-id') {
      const box = document.getElementById('filter-id');
      box.focus();
      box.setSelectionRange(box.value.length, box.value.length);
    }
    document.body.dataset.live = es.readyState === 1 ? 'open' : 'closed';
  });
  es.addEventListener('problem', (e) =>
    notice(`Temporal: ${JSON.parse(e.data).message}; still trying`, 'error', 'stream'),
  );
  es.addEventListener('end', () => {
    es.close();
    document.body.dataset.live = 'ended';
  });
  es.onerror = async () => {
    if (es.readyState !== 2) return; // the browser reconnects by itself
    // Closed by a refusal: ask the same URL as JSON for the reason.
    try {
      renderRollout(await api(`/api/rollouts/${encodeURIComponent(id)}?${params}`), id);
    } catch (err) {
      if (err.status === 401) return showLogin('Your session has ended: sign in again.');
      main().replaceChildren(h('p', { class: 'error', id: 'load-error' }, `${err.code}: ${err.message}`));
    }
  };
}

// ---------------------------------------------------------------------------------------------- audit

async function showAudit(id) {
  const a = await api(`/api/rollouts/${encodeURIComponent(id)}/audit`);
  main().replaceChildren(
    h('p', {}, h('a', { href: `#/rollout/${encodeURIComponent(id)}` }, `‹ ${id}`)),
    h('h1', {}, `Audit trail of ${id}`),
    h(
      'section',
      { id: 'verdict', class: a.ok ? 'ok' : 'bad', 'data-ok': String(a.ok) },
      h('h2', {}, a.ok ? 'Chain verified' : 'Chain NOT intact'),
      h(
        'ul',
        {},
        a.report.map((line) => h('li', {}, line)),
      ),
      h('p', { class: 'hint' }, `Read from ${a.location || '-'}; the same checks as wavegate audit --verify.`),
    ),
    h(
      'table',
      { id: 'audit-records' },
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          ['#', 'At', 'Event', 'Phase', 'By', 'Reason', 'Record'].map((t) => h('th', {}, t)),
        ),
      ),
      h(
        'tbody',
        {},
        a.records.map((r) =>
          h(
            'tr',
            { 'data-seq': r.seq, 'data-event': r.event },
            h('td', {}, r.seq),
            h('td', {}, when(r.at)),
            h('td', {}, r.event),
            h('td', {}, r.phase || '-'),
            h('td', {}, r.by),
            h('td', {}, r.reason || ''),
            h(
              'td',
              {},
              h(
                'details',
                {},
                h('summary', {}, `hash ${String(r.hash).slice(0, 12)}…`),
                h('pre', {}, JSON.stringify(r, null, 2)),
              ),
            ),
          ),
        ),
      ),
    ),
  );
}

// ---------------------------------------------------------------------------------------------- a device

const deviceLink = (id) =>
  h('a', { href: `#/device/${encodeURIComponent(id)}`, title: 'its history across rollouts' }, id);

/** A device's history across rollouts: what each (newest first) did to it, between which revisions, when. */
async function showDeviceHistory(id) {
  main().replaceChildren(
    h('h1', {}, `Device ${id}`),
    h('p', { class: 'hint' }, 'Reading the rollouts that touched it…'),
  );
  const d = await api(`/api/devices/${encodeURIComponent(id)}/history`);
  const looked = `Looked in the newest ${d.read} rollout(s)${d.notRead ? ` (${d.notRead} older not read)` : ''}${d.unread ? `; ${d.unread} could not be read now` : ''}.`;
  main().replaceChildren(
    h('p', {}, h('a', { href: '#/' }, '‹ all rollouts')),
    h('h1', {}, `Device ${d.device}: its rollouts`),
    h('p', { class: 'hint', id: 'device-looked' }, looked),
    h(
      'table',
      { id: 'device-history' },
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          ['Rollout', 'Outcome', 'Profile', 'Revisions', 'Its state there', 'Phase', 'Why', 'Started', 'Ended'].map(
            (t) => h('th', {}, t),
          ),
        ),
      ),
      h(
        'tbody',
        {},
        d.rollouts.length
          ? d.rollouts.map((r) =>
              h(
                'tr',
                { 'data-rollout': r.rolloutId, 'data-state': r.state },
                h('td', {}, h('a', { href: `#/rollout/${encodeURIComponent(r.rolloutId)}` }, r.rolloutId)),
                h('td', {}, badge(r.outcome)),
                h('td', {}, r.profile),
                h('td', {}, `r${r.fromRevision} → r${r.toRevision}`),
                h('td', { class: 'state' }, r.state),
                h('td', {}, r.phase || '-'),
                h('td', {}, r.reason || ''),
                h('td', {}, when(r.startTime)),
                h('td', {}, when(r.closeTime)),
              ),
            )
          : h('tr', {}, h('td', { colspan: 9 }, 'No rollout read names this device.')),
      ),
    ),
  );
}

// ---------------------------------------------------------------------------------------------- fleet

async function showFleetProfiles() {
  const f = await api('/api/fleet');
  main().replaceChildren(
    h('h1', {}, 'Fleet'),
    h(
      'p',
      { class: 'hint' },
      `Inventory ${f.inventory}; profiles in ${f.profilesRoot}. Each profile's devices are verified now when opened (as wavegate fleet status and drift).`,
    ),
    h(
      'ul',
      { id: 'fleet-profiles' },
      f.profiles.map((p) => h('li', {}, h('a', { href: `#/fleet/${encodeURIComponent(p)}` }, p))),
    ),
  );
}

/** Devices whose marker names a revoked revision ("revoked: r2 (reason)"), and the command that rolls them forward. */
function revokedBlock(f) {
  if (!f.revoked?.length) return h('div', { id: 'fleet-revoked', hidden: true });
  return h(
    'section',
    { id: 'fleet-revoked', class: 'banner', 'data-devices': f.revoked.length },
    h('h2', {}, `${f.revoked.length} device(s) on a revoked revision`),
    h(
      'ul',
      {},
      f.revoked.map((d) => h('li', { 'data-device': d.id }, `${d.id}: revoked: r${d.revision} (${d.reason})`)),
    ),
    h('p', {}, 'Roll them forward to a revision its signers stand behind, from a shell:'),
    h('pre', {}, f.rollForward),
  );
}

function convergeBlock(f) {
  const c = f.converge;
  if (!c && f.active?.length)
    return h(
      'p',
      { class: 'hint', id: 'converge' },
      'Converge: a rollout of this profile is running; a converge waits until it ends.',
    );
  if (!c && f.revokedTarget)
    return h(
      'p',
      { class: 'hint', id: 'converge' },
      `Converge: r${f.revokedTarget.revision}, where the last rollout completed, is revoked (${f.revokedTarget.reason}); no converge goes there. Roll its devices forward to a newer revision: ${f.rollForward}`,
    );
  if (!c)
    return h('p', { class: 'hint', id: 'converge' }, 'Converge: no completed rollout of this profile to converge to.');
  if (!c.devices.length)
    return h(
      'p',
      { class: 'hint', id: 'converge' },
      `Converge: nothing behind r${c.revision}, where ${c.lastCompleted} completed.`,
    );
  return h(
    'section',
    { id: 'converge', 'data-devices': c.devices.length },
    h('h2', {}, `Converge: ${c.devices.length} device(s) behind r${c.revision}`),
    h(
      'p',
      {},
      `${c.lastCompleted} completed at r${c.revision}; these devices are behind it now (their verify fails): ${c.devices.join(', ')}.`,
    ),
    h(
      'p',
      {},
      'A converge touches exactly them. ',
      h('button', { 'data-control': 'converge', onclick: () => askConverge(f.profile, c) }, 'converge…'),
      ' with what the completed rollout ran, or from a shell with its spec file:',
    ),
    h('pre', {}, c.command),
  );
}

/** A converge: the devices it will touch (the fleet view's, checked again by the server before it starts), a reason, a confirmation. */
function askConverge(profile, c) {
  document.getElementById('confirm-title').textContent = `Converge ${profile} to r${c.revision}?`;
  document.getElementById('confirm-text').textContent =
    `A new rollout over exactly the ${c.devices.length} device(s) behind r${c.revision}, with the spec, signed steps and profile ${c.lastCompleted} ran (its phases, gates and health checks; the workers verify the signed content against their pins again). Refused if the devices behind are no longer these.`;
  const list = document.getElementById('confirm-devices');
  const shown = c.devices.slice(0, 50).map((d) => h('li', { 'data-device': d }, d));
  if (c.devices.length > 50) shown.push(h('li', {}, `and ${c.devices.length - 50} more`));
  list.replaceChildren(...shown);
  list.hidden = false;
  const reason = document.getElementById('confirm-reason');
  reason.value = '';
  reason.required = true;
  document.getElementById('confirm-reason-row').hidden = false;
  document.getElementById('confirm-reason-label').textContent =
    "Reason (written to the board's log with your name; the converge's audit trail records you as who started it)";
  document.getElementById('confirm-fast-row').hidden = true;
  document.getElementById('confirm-rollback-row').hidden = true;
  openConfirm(
    `Converge ${c.devices.length} device(s)`,
    () =>
      post(`/api/fleet/${encodeURIComponent(profile)}/converge`, {
        devices: c.devices.length,
        digest: c.digest,
        reason: reason.value,
      }),
    (done) => {
      state.flash = done.message;
      location.hash = `#/rollout/${encodeURIComponent(done.rolloutId)}`;
    },
  );
  reason.focus();
}

/** The rollouts of the profile running now, each with its target: devices they brought there are ahead, not behind. */
function activeBlock(f) {
  if (!f.active?.length) return h('div', { id: 'fleet-active', hidden: true });
  return h(
    'section',
    { id: 'fleet-active' },
    f.active.map((r) =>
      h(
        'p',
        { 'data-rollout': r.rolloutId },
        'Rollout ',
        h('a', { href: `#/rollout/${encodeURIComponent(r.rolloutId)}` }, r.rolloutId),
        ` is ${r.state}${r.phase ? ` (${r.phase})` : ''}${r.toRevision !== undefined ? ` to r${r.toRevision}` : ''}`,
        r.toRevision !== undefined && r.toRevision > f.revision
          ? `: devices it already brought to r${r.toRevision} show as ahead of r${f.revision}, not behind.`
          : '.',
      ),
    ),
  );
}

/** Which revision the view checks: the default (the last completed rollout's) or any revision of the profile. */
function revisionPicker(f, profile, asked) {
  const options = [h('option', { value: '' }, 'the default')].concat(
    (f.revisions || []).map((n) => h('option', { value: String(n) }, `r${n}`)),
  );
  const select = h('select', { id: 'fleet-revision' }, options);
  select.value = asked === undefined ? '' : String(asked);
  select.onchange = () => {
    location.hash = `#/fleet/${encodeURIComponent(profile)}${select.value ? `/r${select.value}` : ''}`;
  };
  return h('label', {}, 'Check revision: ', select);
}

async function showFleet(profile, fresh, revision) {
  main().replaceChildren(h('h1', {}, `Fleet: ${profile}`), h('p', { class: 'hint' }, 'Verifying every device now…'));
  const params = new URLSearchParams();
  if (fresh) params.set('fresh', '1');
  if (revision !== undefined) params.set('revision', String(revision));
  const query = params.toString();
  const f = await api(`/api/fleet/${encodeURIComponent(profile)}${query ? `?${query}` : ''}`);
  const c = f.counts;
  main().replaceChildren(
    h('p', {}, h('a', { href: '#/fleet' }, '‹ all profiles')),
    h('h1', {}, `Fleet: ${f.profile} at r${f.revision}`),
    h(
      'section',
      { id: 'fleet-summary', class: 'banner' },
      h(
        'p',
        { class: 'headline' },
        `${c.applied} applied · ${c.claimed} claimed · ${c.pending} pending · ${c.ahead || 0} ahead · ${c.notForMe} not-for-me · ${f.drifted} drifted${f.revoked?.length ? ` · ${f.revoked.length} on a revoked revision` : ''}, of ${c.total}`,
      ),
      h(
        'p',
        { id: 'fleet-proof' },
        `${f.devices.filter((d) => d.proof === 'proven').length} of ${c.applied + c.claimed} proven by their own receipts`,
      ),
      h('p', {}, `Checking ${f.revisionWhy}${f.provable ? '' : ' (NOT provable: devices can only reach claimed)'}`),
      h(
        'p',
        { class: 'hint' },
        `Verified ${when(f.checkedAt)}. `,
        h('button', { id: 'fleet-again', onclick: () => showFleet(profile, true, revision) }, 'Check again'),
        ' ',
        revisionPicker(f, profile, revision),
      ),
    ),
    activeBlock(f),
    revokedBlock(f),
    convergeBlock(f),
    h(
      'table',
      { id: 'fleet-table' },
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          [
            'Device',
            'State',
            'Proof',
            'Marker',
            'Drift',
            'Node-down verdict',
            'Last seen (agents)',
            'Transport',
            'Pool / class',
            'Why',
          ].map((t) => h('th', {}, t)),
        ),
      ),
      h(
        'tbody',
        {},
        f.devices.map((d) =>
          h(
            'tr',
            {
              'data-device': d.id,
              'data-state': d.state,
              'data-drift': d.drift || '',
              'data-revoked': d.revoked ? `r${d.revoked.revision}` : '',
              class: `f-${d.state} f-drift-${d.drift || 'none'}`,
            },
            h('td', {}, d.id),
            h('td', { class: 'state' }, d.state),
            h('td', { class: 'proof' }, d.proof || ''),
            h('td', {}, d.marker === undefined || d.marker === null ? '-' : `r${d.marker}`),
            h('td', { title: d.driftDetail || '' }, d.drift || '-'),
            h(
              'td',
              { class: 'verdict' },
              d.verdict
                ? `${d.verdict.standing}: ${d.verdict.reason} (by ${d.verdict.by}, expires ${when(d.verdict.expiresAt)})`
                : '-',
            ),
            h('td', {}, d.transport === 'agent' ? when(d.lastSeen) : 'n/a'),
            h('td', {}, d.transport || 'ssh'),
            h('td', {}, `${d.pool} / ${d.class}`),
            h('td', {}, d.reason || d.driftDetail || ''),
          ),
        ),
      ),
    ),
  );
}

// ---------------------------------------------------------------------------------------------- routing

// ---------------------------------------------------------------------------------------------- freezes

/** The banner of every freeze in force (reason, scope, until) with a button to lift it; scheduled ones are listed. */
async function showFreezes() {
  const banner = document.getElementById('freeze-banner');
  const { freezes } = await api('/api/freezes');
  const active = freezes.filter((f) => f.active);
  banner.replaceChildren(
    ...active.map((f) =>
      h(
        'div',
        { class: 'freeze', 'data-freeze': f.id },
        h('strong', {}, `Frozen (${f.id}): `),
        h('span', { class: 'freeze-reason' }, f.reason),
        h(
          'span',
          { class: 'hint' },
          ` — ${f.scopeText}, ${f.until ? `until ${when(f.until)}` : 'until lifted'}, by ${f.by}; holds ${f.paused.length} rollout(s). New starts, converges, reverts and nightly canaries in scope are refused.`,
        ),
        h('button', { type: 'button', class: 'lift', onclick: () => askLift(f) }, `Lift ${f.id}`),
      ),
    ),
  );
  banner.hidden = active.length === 0;
}

function askLift(f) {
  document.getElementById('confirm-title').textContent = `Lift ${f.id}?`;
  document.getElementById('confirm-text').textContent =
    `"${f.reason}" (${f.scopeText}) ends now: the rollouts it paused that are still paused by it resume; one an operator paused stays paused.`;
  const reason = document.getElementById('confirm-reason');
  reason.value = '';
  reason.required = true;
  document.getElementById('confirm-reason-row').hidden = false;
  document.getElementById('confirm-reason-label').textContent =
    'Reason (recorded in each rollout it resumes, with your name)';
  for (const row of ['confirm-rollback-row', 'confirm-fast-row', 'confirm-devices'])
    document.getElementById(row).hidden = true;
  openConfirm(
    `Lift ${f.id}`,
    () => post(`/api/freezes/${encodeURIComponent(f.id)}/lift`, { reason: reason.value }),
    (done) => {
      state.flash = done.message;
      route();
    },
  );
  reason.focus();
}

async function route() {
  stopStream();
  notice(state.flash || '', 'ok');
  state.flash = null;
  try {
    if (!(await ensureSession())) return;
    // The banner is a side read: a freeze that cannot be read leaves the page as it is.
    showFreezes().catch(() => {});
    const hash = location.hash || '#/';
    if (hash === '#/fleet') return await showFleetProfiles();
    const fleet = /^#\/fleet\/([^/]+)(?:\/r([1-9][0-9]{0,8}))?$/.exec(hash);
    if (fleet) return await showFleet(decodeURIComponent(fleet[1]), false, fleet[2] ? Number(fleet[2]) : undefined);
    const device = /^#\/device\/([^/]+)$/.exec(hash);
    if (device) return await showDeviceHistory(decodeURIComponent(device[1]));
    const m = /^#\/rollout\/([^/]+)(\/audit)?$/.exec(hash);
    if (!m) return await listLive();
    const id = decodeURIComponent(m[1]);
    if (m[2]) return await showAudit(id);
    if (state.route !== id) state.query = { state: '', q: '', offset: 0, limit: 100 };
    state.route = id;
    openRollout(id);
  } catch (err) {
    if (err.status === 401) {
      state.session = null;
      return showLogin('Your session has ended: sign in again.');
    }
    main().replaceChildren(h('p', { class: 'error', id: 'load-error' }, `${err.code || 'ERROR'}: ${err.message}`));
  }
}

window.addEventListener('hashchange', route);
route();
