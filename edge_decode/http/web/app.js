// Baton's chat page (edge_decode/http/web_ui.h): talks to this agent's own HTTP
// API only. A conversation is an agent session ("baton": {"session"}): the
// agent keeps its KV, so a follow-up turn prefills only the new message. The
// page keeps the visible transcript per session in localStorage (the agent
// keeps tokens, not text), and the API key there too (sent as a bearer
// token). Each answer streams (fetch + ReadableStream over server-sent
// events); its last chunk carries the turn's figures under "baton", shown
// under the answer with a bar of where the time went.
'use strict';

const KEY_STORE = 'baton.apiKey';
const POLICY_STORE = 'baton.policy';
const TRANSCRIPT_STORE = 'baton.transcripts';  // {session id: [{role, content, stats?}]}

// The parts of one turn's time, in the order they happen (Stats in
// proto/baton.proto): the first four add up to the time to first token.
const TIME_PARTS = [
  ['cloud_prefill_ms', 'cloud prefill'],
  ['transfer_ms', 'transfer'],
  ['ingest_ms', 'ingest'],
  ['local_ms', 'local'],
  ['decode_ms', 'decode'],
];

const state = {
  sessionId: null,
  messages: [],       // what the page sent and got: [{role, content, stats?}]
  abort: null,        // AbortController of the running answer
};

const $ = (id) => document.getElementById(id);

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

// ---------------------------------------------------------------------------
// Formatting: binary units, one decimal; figures that were not measured say so.

function formatMs(ms) {
  if (ms >= 10000) return (ms / 1000).toFixed(1) + ' s';
  return ms.toFixed(1) + ' ms';
}

function formatBytes(bytes) {
  const units = ['B', 'KiB', 'MiB', 'GiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(1)} ${units[unit]}`;
}

// ---------------------------------------------------------------------------
// HTTP

function apiKey() { return localStorage.getItem(KEY_STORE) || ''; }

function requestHeaders(json) {
  const headers = {};
  if (json) headers['Content-Type'] = 'application/json';
  const key = apiKey();
  if (key) headers.Authorization = 'Bearer ' + key;
  return headers;
}

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// The error of a failed answer, in words; 401 says what to do.
async function apiError(response) {
  let message = `HTTP ${response.status}`;
  try {
    const body = await response.json();
    if (body && body.error && body.error.message) message = body.error.message;
  } catch (_) {
    // not JSON: keep the status line
  }
  if (response.status === 401) {
    message = apiKey()
      ? `The agent refused the API key (${message}). Enter one of the keys of its --api-key-file above and press Save key.`
      : `The agent needs an API key (${message}). Enter one of the keys of its --api-key-file above and press Save key.`;
  }
  return new ApiError(response.status, message);
}

async function getJson(path) {
  const response = await fetch(path, { headers: requestHeaders(false) });
  if (!response.ok) throw await apiError(response);
  return response.json();
}

// The data of each server-sent event of `response`, as it arrives.
async function* sseData(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = event.split('\n').filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5).replace(/^ /, '')).join('\n');
      if (data) yield data;
    }
  }
}

function showNotice(text, kind) {
  const notice = $('notice');
  notice.textContent = text || '';
  notice.className = 'notice' + (kind === 'info' ? ' info' : '');
  notice.hidden = !text;
}

// ---------------------------------------------------------------------------
// Transcripts (localStorage)

function loadTranscripts() {
  try {
    return JSON.parse(localStorage.getItem(TRANSCRIPT_STORE) || '{}') || {};
  } catch (_) {
    return {};
  }
}

function saveTranscript() {
  if (!state.sessionId) return;
  const all = loadTranscripts();
  all[state.sessionId] = state.messages;
  try {
    localStorage.setItem(TRANSCRIPT_STORE, JSON.stringify(all));
  } catch (_) {
    // storage full: the agent still holds the session
  }
}

function newSessionId() {
  const bytes = new Uint8Array(6);
  crypto.getRandomValues(bytes);
  return 'web-' + Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

// ---------------------------------------------------------------------------
// Rendering

function renderMessage(role, text) {
  const root = el('div', 'msg ' + role);
  root.append(el('div', 'role', role === 'user' ? 'you' : 'baton'));
  const body = el('div', 'text', text);
  root.append(body);
  const stats = el('div', 'stats');
  stats.hidden = true;
  root.append(stats);
  $('messages').append(root);
  root.scrollIntoView({ block: 'end' });
  return { root, body, stats };
}

// A stacked bar of the turn's time parts (inline SVG: drawn here, no library).
function timeChart(parts, totalMs) {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('class', 'chart');
  svg.setAttribute('viewBox', '0 0 560 22');
  svg.setAttribute('preserveAspectRatio', 'none');
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', 'where the time went');
  let x = 0;
  for (const [field, label, ms] of parts) {
    const width = totalMs > 0 ? (ms / totalMs) * 560 : 0;
    if (width <= 0) continue;
    const rect = document.createElementNS(ns, 'rect');
    rect.setAttribute('class', 'seg-' + field);
    rect.setAttribute('x', x.toFixed(2));
    rect.setAttribute('y', '0');
    rect.setAttribute('width', Math.max(width, 1).toFixed(2));
    rect.setAttribute('height', '22');
    const title = document.createElementNS(ns, 'title');
    title.textContent = `${label}: ${formatMs(ms)}`;
    rect.append(title);
    svg.append(rect);
    x += width;
  }
  return svg;
}

// A figure as a span the tests (and a reader of the DOM) can find by name.
function figure(field, text, value) {
  const span = el('span', 'figure', text);
  span.dataset.field = field;
  if (value !== undefined) span.dataset.value = String(value);
  return span;
}

function addRow(list, label, ...parts) {
  list.append(el('dt', null, label));
  const dd = el('dd');
  dd.append(...parts);
  list.append(dd);
}

// The figures of one turn: `stats` is the answer's "baton" object, `policy`
// what the page asked for.
function renderStats(container, stats, policy, usage) {
  container.replaceChildren();
  container.hidden = false;
  const cloudRan = stats.prefill === 'cloud' || stats.cloud_prefill_ms > 0 || stats.kv_wire_bytes > 0;
  const decodeMs = Math.max(0, (stats.total_ms || 0) - (stats.ttft_ms || 0));
  // Cloud parts only when the cloud took part: a local turn has none.
  const parts = TIME_PARTS
    .filter(([field]) => cloudRan || !['cloud_prefill_ms', 'transfer_ms', 'ingest_ms'].includes(field))
    .map(([field, label]) => [field, label, field === 'decode_ms' ? decodeMs : (stats[field] || 0)]);
  const chartTotal = parts.reduce((sum, part) => sum + part[2], 0);
  container.append(timeChart(parts, chartTotal));
  const legend = el('div', 'legend');
  for (const [field, label, ms] of parts) {
    const item = el('span');
    item.append(el('i', 'sw-' + field), `${label} ${formatMs(ms)}`);
    legend.append(item);
  }
  container.append(legend);

  const list = el('dl');
  const split = [];
  for (const [field, label, ms] of parts) {
    if (field === 'decode_ms') continue;
    if (split.length) split.push(' + ');
    split.push(figure(field, `${label} ${formatMs(ms)}`, ms));
  }
  addRow(list, 'time to first token', figure('ttft_ms', formatMs(stats.ttft_ms), stats.ttft_ms), ' = ', ...split);
  if (stats.kv_wire_bytes > 0 || stats.kv_raw_bytes > 0) {
    addRow(list, 'KV raw / quantized / wire', figure('kv_bytes',
      `${formatBytes(stats.kv_raw_bytes)} / ${formatBytes(stats.kv_quantized_bytes)} / ${formatBytes(stats.kv_wire_bytes)}`,
      stats.kv_wire_bytes));
  } else {
    addRow(list, 'KV transferred', figure('kv_bytes', 'none (prefilled here)', 0));
  }
  addRow(list, 'policy → prefill', figure('policy', `${policy} → ${stats.prefill}`, stats.prefill));
  addRow(list, 'plan', figure('plan_reason', stats.plan_reason || '(no reason given)'));
  if (stats.fallback_reason) addRow(list, 'fell back', figure('fallback_reason', stats.fallback_reason));
  const tokens = usage ? `prompt ${usage.prompt_tokens}, generated ${usage.completion_tokens}, ` : '';
  addRow(list, 'tokens', figure('tokens', `${tokens}context ${stats.context_tokens}`, stats.context_tokens),
    ' · decode ', figure('decode_tokens_per_s',
      stats.decode_tokens_per_s > 0 ? `${stats.decode_tokens_per_s.toFixed(1)} tok/s` : 'not measured (one token)',
      stats.decode_tokens_per_s),
    ' · total ', figure('total_ms', formatMs(stats.total_ms), stats.total_ms));
  if (stats.save_error) addRow(list, 'not saved', figure('save_error', stats.save_error));
  container.append(list);
}

function renderTranscript() {
  $('messages').replaceChildren();
  for (const message of state.messages) {
    const view = renderMessage(message.role, message.content);
    if (message.stats) renderStats(view.stats, message.stats, message.policy || '?', message.usage);
  }
  $('session-title').dataset.sessionId = state.sessionId || '';
  $('session-title').textContent = state.sessionId
    ? `session ${state.sessionId}` + (state.messages.length ? '' : ' (held by the agent; its text is not on this page)')
    : 'new conversation: the first message starts a session';
}

// ---------------------------------------------------------------------------
// Sessions

async function refreshSessions() {
  const list = $('sessions');
  const note = $('sessions-note');
  try {
    const answer = await getJson('/v1/baton/sessions');
    list.replaceChildren();
    for (const session of answer.data) {
      const item = el('li');
      item.dataset.sessionId = session.id;
      if (session.id === state.sessionId) item.classList.add('current');
      const text = el('div', 'session-text');
      text.append(el('div', 'session-id', session.id),
        el('div', 'session-meta', `${session.token_count} tokens · ${formatBytes(session.kv_bytes)} KV · ${session.codec}`));
      const remove = el('button', 'plain', '\u00d7');
      remove.type = 'button';
      remove.title = 'delete this session on the agent';
      remove.addEventListener('click', (event) => {
        event.stopPropagation();
        deleteSession(session.id);
      });
      item.append(text, remove);
      item.addEventListener('click', () => openSession(session.id));
      list.append(item);
    }
    note.textContent = answer.data.length ? '' : 'No sessions yet.';
  } catch (error) {
    list.replaceChildren();
    note.textContent = error.status === 401 ? 'An API key is needed to list sessions.' : error.message;
  }
}

function openSession(id) {
  if (state.abort) return;
  state.sessionId = id;
  state.messages = loadTranscripts()[id] || [];
  renderTranscript();
  refreshSessions();
}

function newChat() {
  if (state.abort) return;
  state.sessionId = null;
  state.messages = [];
  renderTranscript();
  refreshSessions();
  $('prompt').focus();
}

async function deleteSession(id) {
  const response = await fetch('/v1/baton/sessions/' + encodeURIComponent(id),
    { method: 'DELETE', headers: requestHeaders(false) });
  if (!response.ok) {
    showNotice((await apiError(response)).message);
    return;
  }
  const all = loadTranscripts();
  delete all[id];
  localStorage.setItem(TRANSCRIPT_STORE, JSON.stringify(all));
  if (id === state.sessionId) newChat();
  else refreshSessions();
}

// ---------------------------------------------------------------------------
// A turn

function setBusy(busy) {
  $('send').disabled = busy;
  $('stop').disabled = !busy;
}

function requestBody(policy) {
  const body = {
    // The whole history, as OpenAI clients send it: the agent renders only
    // what follows the last assistant message when it holds the session.
    messages: state.messages.map(({ role, content }) => ({ role, content })),
    stream: true,
    stream_options: { include_usage: true },
    baton: { session: state.sessionId, policy },
  };
  const maxTokens = parseInt($('max-tokens').value, 10);
  if (maxTokens > 0) body.max_tokens = maxTokens;
  const temperature = parseFloat($('temperature').value);
  if (!Number.isNaN(temperature)) body.temperature = temperature;
  return body;
}

// Streams the answer into `view`; returns {text, stats, usage}.
async function streamAnswer(body, view) {
  const result = { text: '', stats: null, usage: null };
  const response = await fetch('/v1/chat/completions', {
    method: 'POST', headers: requestHeaders(true), body: JSON.stringify(body), signal: state.abort.signal,
  });
  if (!response.ok) throw await apiError(response);
  for await (const data of sseData(response)) {
    if (data === '[DONE]') break;
    const chunk = JSON.parse(data);
    if (chunk.error) throw new ApiError(500, chunk.error.message);
    const choice = chunk.choices && chunk.choices[0];
    if (choice && choice.delta && choice.delta.content) {
      result.text += choice.delta.content;
      view.body.textContent = result.text;
      view.root.scrollIntoView({ block: 'end' });
    }
    if (chunk.baton) result.stats = chunk.baton;
    if (chunk.usage) result.usage = chunk.usage;
  }
  return result;
}

async function send(text) {
  if (state.abort) return;
  showNotice('');
  if (!state.sessionId) state.sessionId = newSessionId();
  const policy = $('policy').value;
  state.messages.push({ role: 'user', content: text });
  renderTranscript();
  const view = renderMessage('assistant', '');
  view.root.classList.add('streaming');
  state.abort = new AbortController();
  setBusy(true);
  let result = { text: '', stats: null, usage: null };
  try {
    result = await streamAnswer(requestBody(policy), view);
    view.root.dataset.done = 'true';
  } catch (error) {
    if (error.name === 'AbortError') {
      view.root.dataset.done = 'stopped';
    } else {
      // The turn did not happen: take the message back, say why.
      state.messages.pop();
      view.root.classList.add('failed');
      view.body.textContent = error.message;
      view.root.dataset.done = 'failed';
      showNotice(error.message);
      $('prompt').value = text;
    }
  } finally {
    view.root.classList.remove('streaming');
    state.abort = null;
    setBusy(false);
  }
  if (view.root.dataset.done !== 'failed') {
    const message = { role: 'assistant', content: result.text, policy };
    if (result.stats) {
      message.stats = result.stats;
      message.usage = result.usage;
      renderStats(view.stats, result.stats, policy, result.usage);
    }
    state.messages.push(message);
    saveTranscript();
  }
  refreshSessions();
}

// ---------------------------------------------------------------------------
// The agent: health and model

async function refreshAgent() {
  const badge = $('health');
  try {
    const response = await fetch('/health');
    const body = await response.json();
    badge.textContent = body.status || `HTTP ${response.status}`;
    badge.className = 'badge ' + (response.ok ? 'ok' : 'bad');
    if (!response.ok) setTimeout(refreshAgent, 2000);  // loading or warming up
  } catch (error) {
    badge.textContent = 'unreachable';
    badge.className = 'badge bad';
  }
  try {
    const models = await getJson('/v1/models');
    $('model').textContent = models.data.length ? models.data[0].id : '';
  } catch (error) {
    $('model').textContent = '';
    if (error.status === 401) showNotice(error.message);
  }
}

function start() {
  $('api-key').value = apiKey();
  $('policy').value = localStorage.getItem(POLICY_STORE) || 'auto';
  $('policy').addEventListener('change', () => localStorage.setItem(POLICY_STORE, $('policy').value));
  $('key-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const key = $('api-key').value.trim();
    if (key) localStorage.setItem(KEY_STORE, key);
    else localStorage.removeItem(KEY_STORE);
    showNotice(key ? 'API key saved in this browser.' : 'API key removed.', 'info');
    refreshAgent();
    refreshSessions();
  });
  $('composer').addEventListener('submit', (event) => {
    event.preventDefault();
    const text = $('prompt').value.trim();
    if (!text) return;
    $('prompt').value = '';
    send(text);
  });
  $('prompt').addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.shiftKey) {
      event.preventDefault();
      $('composer').requestSubmit();
    }
  });
  $('stop').addEventListener('click', () => state.abort && state.abort.abort());
  $('new-chat').addEventListener('click', newChat);
  renderTranscript();
  refreshAgent();
  refreshSessions();
}

start();
