// The coordinator's dashboard: polls the JSON API (/api/...) and renders
// the members, the jobs, one job's curves, step times, tables, events and
// explanation, and a comparison of chosen jobs. Data goes into the page as
// text (textContent), never as HTML.
'use strict';

const POLL_MS = 2000;
// Points per series the page asks for (evenly spaced, first and last kept).
const MAX_POINTS = 1000;
const TERMINAL = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED']);
// The test metrics in the order that picks a job's metric (docs/metrics.md).
const METRICS = [
  {point: 'test_auc', name: 'auc', higher: true},
  {point: 'test_logloss', name: 'logloss', higher: false},
  {point: 'test_rmse', name: 'rmse', higher: false},
  {point: 'test_accuracy', name: 'accuracy', higher: true},
];
const STEP_PARTS = ['wait_ms', 'pull_ms', 'compute_ms', 'push_ms'];
const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd',
                '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const ui = {
  job: params.get('job') || '',
  compare: new Set((params.get('compare') || '').split(',').filter(Boolean)),
  jobs: [],
  // job id -> {metric, points} of jobs whose metric points were fetched;
  // a finished job's are not fetched again.
  jobMetrics: new Map(),
  charts: {},
  drawnFinal: '',  // the finished job whose view is drawn
};

async function api(path) {
  const r = await fetch(path, {credentials: 'same-origin', cache: 'no-store'});
  const text = await r.text();
  let body = null;
  try { body = JSON.parse(text); } catch (e) { body = null; }
  if (!r.ok) {
    const why = body && body.error ? body.error.message : text;
    throw new Error(`${path}: HTTP ${r.status}: ${why}`);
  }
  return body;
}

// proto3 JSON prints int64 as strings and NaN as "NaN".
const num = (v) => (v === undefined || v === null ? NaN : Number(v));
function fmt(v, digits = 4) {
  const x = num(v);
  if (!Number.isFinite(x)) return '-';
  if (Number.isInteger(x)) return x.toLocaleString('en-US');
  return x.toPrecision(digits);
}
function ago(ms) {
  const t = num(ms);
  if (!(t > 0)) return '-';
  const s = (Date.now() - t) / 1000;
  return s < 0.05 ? 'now' : `${s.toFixed(1)} s ago`;
}

function cell(tr, text, cls) {
  const td = document.createElement('td');
  td.textContent = text === undefined || text === null ? '' : String(text);
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}
function fill(tableId, rows, render) {
  const tbody = $(tableId).querySelector('tbody');
  const fresh = document.createElement('tbody');
  for (const row of rows) {
    const tr = document.createElement('tr');
    render(tr, row);
    fresh.appendChild(tr);
  }
  tbody.replaceWith(fresh);
}

function setStatus(text, bad) {
  $('status').textContent = text;
  $('status').className = bad ? 'bad' : 'muted';
}

function updateUrl() {
  const p = new URLSearchParams();
  if (ui.job) p.set('job', ui.job);
  if (ui.compare.size) p.set('compare', [...ui.compare].join(','));
  const q = p.toString();
  history.replaceState(null, '', q ? `?${q}` : location.pathname);
}

// ---- members ---------------------------------------------------------------

function health(m) {
  if (m.state !== 'ALIVE') return ['dead', 'bad'];
  const age = Date.now() - num(m.last_heartbeat_ms);
  if (age > 5000) return [`late (${(age / 1000).toFixed(0)} s)`, 'warn'];
  return ['ok', 'ok'];
}

function renderMembers(members) {
  fill('members', members, (tr, m) => {
    tr.dataset.role = m.role;
    tr.dataset.state = m.state;
    cell(tr, m.member_id, 'num');
    cell(tr, (m.role || '').toLowerCase());
    cell(tr, m.address || '-');
    cell(tr, m.hostname ? `${m.hostname}:${m.pid}` : `pid ${m.pid}`);
    cell(tr, m.device || '-');
    cell(tr, m.blas_core || '-');
    cell(tr, num(m.gemm_gflops) > 0 ? num(m.gemm_gflops).toFixed(1) : '-',
         'num');
    cell(tr, (m.state || '').toLowerCase(), m.state === 'ALIVE' ? 'ok' : 'bad');
    cell(tr, ago(m.last_heartbeat_ms));
    const [h, cls] = health(m);
    cell(tr, h, cls);
  });
}

// ---- jobs and their metric -------------------------------------------------

// The job's metric: its spec's target's, else the first one it reported.
function metricOf(job, names) {
  const spec = job.spec || {};
  let wanted = spec.target && spec.target.metric ? spec.target.metric : '';
  if (!wanted && num(spec.target_accuracy) > 0) wanted = 'accuracy';
  const known = METRICS.find((m) => m.name === wanted || m.point === wanted);
  if (known) return known;
  return METRICS.find((m) => names.has(m.point)) || METRICS[3];
}

async function fetchJobMetric(job) {
  const cached = ui.jobMetrics.get(job.job_id);
  if (cached && cached.final) return cached;
  const names = METRICS.map((m) => m.point).join(',');
  // Every evaluation (the core bounds each series): `best` is over all.
  const r = await api(`api/jobs/${encodeURIComponent(job.job_id)}/metrics` +
                      `?names=${names}`);
  const points = r.points || [];
  const metric = metricOf(job, new Set(points.map((p) => p.name)));
  const mine = points.filter((p) => p.name === metric.point)
                   .filter((p) => Number.isFinite(num(p.value)));
  const entry = {
    metric, points: mine,
    last: mine.length ? num(mine[mine.length - 1].value) : NaN,
    best: mine.reduce((b, p) => {
      const v = num(p.value);
      if (!Number.isFinite(b)) return v;
      return metric.higher ? Math.max(b, v) : Math.min(b, v);
    }, NaN),
    final: TERMINAL.has(job.state),
  };
  ui.jobMetrics.set(job.job_id, entry);
  return entry;
}

function renderJobs(jobs) {
  fill('jobs', jobs, (tr, j) => {
    tr.dataset.job = j.job_id;
    tr.dataset.state = j.state;
    if (j.job_id === ui.job) tr.className = 'selected';
    const box = document.createElement('input');
    box.type = 'checkbox';
    box.checked = ui.compare.has(j.job_id);
    box.addEventListener('change', () => {
      if (box.checked) ui.compare.add(j.job_id); else ui.compare.delete(j.job_id);
      updateUrl();
      renderCompare();
    });
    cell(tr, '').appendChild(box);
    const link = document.createElement('a');
    link.className = 'job';
    link.textContent = j.job_id;
    link.addEventListener('click', () => selectJob(j.job_id));
    cell(tr, '').appendChild(link);
    cell(tr, (j.spec && j.spec.name) || '');
    const st = cell(tr, (j.state || '').toLowerCase(),
                    j.state === 'FAILED' ? 'bad'
                        : j.state === 'SUCCEEDED' ? 'ok' : '');
    if (j.reason) st.title = j.reason;
    const total = num(j.total_steps), step = num(j.global_step);
    cell(tr, total > 0 ? `${fmt(step)}/${fmt(total)} ` +
                         `(${(100 * step / total).toFixed(0)}%)`
                       : fmt(step), 'num');
    const m = ui.jobMetrics.get(j.job_id);
    cell(tr, m && Number.isFinite(m.last) ? `${m.metric.name} ${fmt(m.last)}`
                                          : '-', 'num metric');
    cell(tr, m && Number.isFinite(m.best) ? fmt(m.best) : '-', 'num');
    cell(tr, fmt(num(j.examples_per_sec).toFixed(0)), 'num');
    cell(tr, fmt(j.mean_staleness, 3), 'num');
    cell(tr, fmt(j.dropped_pushes), 'num');
    cell(tr, fmt(j.rejected_pushes), 'num');
    cell(tr, (j.workers || []).length, 'num');
  });
}

// ---- charts ----------------------------------------------------------------

function chart(id, xLabel, yLabel, type = 'line') {
  if (ui.charts[id]) return ui.charts[id];
  if (typeof Chart === 'undefined') return null;
  const stacked = type === 'bar';
  ui.charts[id] = new Chart($(id), {
    type,
    data: {datasets: [], labels: []},
    options: {
      animation: false,
      maintainAspectRatio: false,
      parsing: stacked ? undefined : false,
      indexAxis: stacked ? 'y' : 'x',
      plugins: {title: {display: true, text: `${yLabel} vs ${xLabel}`}},
      scales: stacked
          ? {x: {stacked: true, title: {display: true, text: 'ms'}},
             y: {stacked: true}}
          : {x: {type: 'linear', title: {display: true, text: xLabel}},
             y: {title: {display: true, text: yLabel}}},
      elements: {point: {radius: 2}, line: {borderWidth: 1.5}},
    },
  });
  return ui.charts[id];
}

// One dataset per key: points -> {x, y}.
function setLines(id, xLabel, yLabel, groups) {
  const c = chart(id, xLabel, yLabel);
  if (!c) return;
  c.data.datasets = groups.map((g, i) => ({
    label: g.label, data: g.data, showLine: true,
    pointRadius: g.data.length > 150 ? 0 : 2,
    borderColor: COLORS[i % COLORS.length],
    backgroundColor: COLORS[i % COLORS.length],
  }));
  c.options.plugins.title.text = `${yLabel} vs ${xLabel}`;
  c.options.scales.y.title.text = yLabel;
  c.update('none');
}

function xy(points, x) {
  return points.filter((p) => Number.isFinite(num(p.value)))
      .map((p) => ({x: x === 'time' ? num(p.time_ms) / 1000 : num(p.epoch),
                    y: num(p.value)}))
      .sort((a, b) => a.x - b.x);
}

function byMember(points) {
  const groups = new Map();
  for (const p of points) {
    const k = num(p.member_id);
    if (!groups.has(k)) groups.set(k, []);
    groups.get(k).push(p);
  }
  return [...groups.entries()].sort((a, b) => a[0] - b[0]);
}

// ---- one job ---------------------------------------------------------------

function summary(j) {
  const rows = [
    ['state', `${(j.state || '').toLowerCase()}${j.reason ? ` (${j.reason})` : ''}`],
    ['progress', `step ${fmt(j.global_step)} of ${fmt(j.total_steps)}, ` +
                 `epoch ${fmt(j.epoch, 3)}`],
    ['examples', `${fmt(j.examples_trained)} of ${fmt(j.examples_total)} ` +
                 `trained, ${fmt(j.examples_skipped)} skipped`],
    ['workers', (j.workers || []).join(', ') || '-'],
    ['servers', (j.servers || []).join(', ') || '-'],
    ['pushes', `${fmt(j.dropped_pushes)} dropped, ${fmt(j.rejected_pushes)} ` +
               `rejected, mean staleness ${fmt(j.mean_staleness, 3)}`],
  ];
  const table = document.createElement('table');
  const tbody = document.createElement('tbody');
  for (const [k, v] of rows) {
    const tr = document.createElement('tr');
    cell(tr, k);
    cell(tr, v);
    tbody.appendChild(tr);
  }
  table.appendChild(tbody);
  $('job-summary').replaceChildren(table);
}

async function renderJob() {
  if (!ui.job) { $('job-view').hidden = true; return; }
  const id = encodeURIComponent(ui.job);
  const listed = ui.jobs.find((j) => j.job_id === ui.job);
  // A finished job's view, once drawn, does not change.
  if (listed && TERMINAL.has(listed.state) && ui.drawnFinal === ui.job) return;
  const series = [...METRICS.map((m) => m.point), 'train_loss', ...STEP_PARTS];
  const [job, metrics, events, explain] = await Promise.all([
    api(`api/jobs/${id}`), api(`api/jobs/${id}/metrics?names=${series}&max_points=${MAX_POINTS}`),
    api(`api/jobs/${id}/events`),
    api(`api/jobs/${id}/explain`).catch((e) => ({text: String(e)})),
  ]);
  $('job-view').hidden = false;
  $('job-view').dataset.state = job.state;
  $('job-title').textContent = `${job.job_id} ${(job.spec && job.spec.name) || ''}`;
  summary(job);

  const points = metrics.points || [];
  const names = new Set(points.map((p) => p.name));
  const metric = metricOf(job, names);
  const test = points.filter((p) => p.name === metric.point);
  const loss = points.filter((p) => p.name === 'train_loss');
  for (const x of ['time', 'epoch']) {
    const xl = x === 'time' ? 'wall time (s)' : 'epoch';
    setLines(`chart-metric-${x}`, xl, `test ${metric.name}`,
             [{label: `test ${metric.name}`, data: xy(test, x)}]);
    setLines(`chart-loss-${x}`, xl, 'training loss',
             byMember(loss).map(([m, ps]) => ({label: `worker ${m}`,
                                               data: xy(ps, x)})));
  }
  const info = $('curve-info');
  info.dataset.metricPoints = String(test.length);
  info.dataset.lossPoints = String(loss.length);
  info.textContent = `${test.length} points of test ${metric.name}, ` +
      `${loss.length} of training loss` +
      (typeof Chart === 'undefined' ? ' (chart.js did not load)' : '');

  // Step time split: each worker's mean of its last 5 reports of each part.
  const steps = byMember(points.filter((p) => STEP_PARTS.includes(p.name)));
  const split = steps.map(([m, ps]) => {
    const row = {member: m};
    for (const part of STEP_PARTS) {
      const vs = ps.filter((p) => p.name === part).slice(-5)
                   .map((p) => num(p.value)).filter(Number.isFinite);
      row[part] = vs.length ? vs.reduce((a, b) => a + b, 0) / vs.length : NaN;
    }
    return row;
  });
  fill('step-times', split, (tr, r) => {
    cell(tr, `worker ${r.member}`);
    for (const part of STEP_PARTS) cell(tr, fmt(r[part], 3), 'num');
  });
  const bars = chart('chart-steps', 'worker', 'step time', 'bar');
  if (bars) {
    bars.data.labels = split.map((r) => `worker ${r.member}`);
    bars.data.datasets = STEP_PARTS.map((part, i) => ({
      label: part.replace('_ms', ''), data: split.map((r) => r[part] || 0),
      backgroundColor: COLORS[i],
    }));
    bars.update('none');
  }

  // Rows per table, summed over the shards that answered.
  const tables = new Map();
  for (const shard of explain.shards || []) {
    for (const t of shard.sparse_tables || []) {
      const s = tables.get(t.name) || {name: t.name, rows: 0, bytes: 0,
                                       capacity: 0, evictions: 0, dropped: 0};
      s.rows += num(t.rows); s.bytes += num(t.bytes);
      s.capacity += num(t.capacity); s.evictions += num(t.evictions);
      s.dropped += num(t.dropped_gradients);
      tables.set(t.name, s);
    }
  }
  const rows = [...tables.values()];
  if (!rows.length) {
    rows.push({name: (explain.shards || []).length
                   ? 'none: every parameter is dense'
                   : 'no shard answered (the job is not running)'});
  }
  fill('tables', rows, (tr, t) => {
    cell(tr, t.name);
    if (t.rows === undefined) return;
    cell(tr, fmt(t.rows), 'num');
    cell(tr, fmt(t.bytes), 'num');
    cell(tr, t.capacity > 0 ? fmt(t.capacity) : 'unbounded', 'num');
    cell(tr, fmt(t.evictions), 'num');
    cell(tr, fmt(t.dropped), 'num');
  });

  const start = num(job.start_time_ms);
  fill('events', (events.events || []).slice(-200), (tr, e) => {
    tr.dataset.kind = e.kind;
    const t = num(e.time_ms);
    cell(tr, start > 0 && t >= start ? `+${((t - start) / 1000).toFixed(1)} s`
                                     : new Date(t).toISOString());
    cell(tr, e.kind);
    cell(tr, num(e.member_id) > 0 ? e.member_id : '-', 'num');
    cell(tr, e.message);
  });
  $('explain').textContent = explain.text || '';
  ui.drawnFinal = TERMINAL.has(job.state) ? job.job_id : '';
}

function selectJob(id) {
  ui.job = id;
  updateUrl();
  for (const tr of $('jobs').querySelectorAll('tbody tr')) {
    tr.className = tr.dataset.job === id ? 'selected' : '';
  }
  renderJob().catch((e) => setStatus(String(e), true));
}

// ---- comparison ------------------------------------------------------------

function renderCompare() {
  const chosen = ui.jobs.filter((j) => ui.compare.has(j.job_id));
  $('compare-info').textContent = chosen.length
      ? `${chosen.length} job(s): ${chosen.map((j) => j.job_id).join(', ')}`
      : 'Tick jobs in the table to plot their metric on one chart.';
  const metricName = chosen.length
      ? (ui.jobMetrics.get(chosen[0].job_id) || {metric: METRICS[3]}).metric.name
      : 'metric';
  for (const x of ['time', 'epoch']) {
    setLines(`chart-compare-${x}`, x === 'time' ? 'wall time (s)' : 'epoch',
             `test ${metricName}`,
             chosen.map((j) => {
               const m = ui.jobMetrics.get(j.job_id);
               return {label: `${j.job_id} ${(j.spec && j.spec.name) || ''}`,
                       data: m ? xy(m.points, x) : []};
             }));
  }
}

// ---- polling ---------------------------------------------------------------

async function refresh() {
  const [members, jobs] = await Promise.all([api('api/members'),
                                             api('api/jobs')]);
  renderMembers(members.members || []);
  ui.jobs = jobs.jobs || [];
  // The newest 20 jobs, and any chosen, get their metric.
  const want = ui.jobs.filter((j, i) => i >= ui.jobs.length - 20 ||
                                        ui.compare.has(j.job_id));
  await Promise.all(want.map((j) => fetchJobMetric(j).catch(() => null)));
  // With no job chosen, the newest one is shown.
  if (!ui.job && ui.jobs.length) ui.job = ui.jobs[ui.jobs.length - 1].job_id;
  renderJobs(ui.jobs);
  renderCompare();
  const selected = ui.jobs.find((j) => j.job_id === ui.job);
  if (ui.job && !selected) {
    setStatus(`no job ${ui.job}`, true);
  } else if (selected) {
    await renderJob();
  }
  const alive = (members.members || []).filter((m) => m.state === 'ALIVE');
  setStatus(`${alive.length} of ${(members.members || []).length} members ` +
            `alive, ${ui.jobs.length} jobs; updated ` +
            `${new Date().toLocaleTimeString()}`, false);
}

async function loop() {
  try {
    await refresh();
  } catch (e) {
    setStatus(String(e.message || e), true);
  }
  setTimeout(loop, POLL_MS);
}

if (typeof Chart !== 'undefined') {
  Chart.defaults.font.size = 11;
}
loop();
