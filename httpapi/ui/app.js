// The status page: the table from the listings, kept fresh by the event
// stream (every event refreshes it) and by a poll (?poll=ms, default 2000),
// which also brings what makes no event (a request that starts to wait).
//
// When the server asks for a token (a 401), the page asks for one, keeps
// it in sessionStorage (gone when the tab closes) and sends it as an
// Authorization header. EventSource cannot send headers, so with a token
// the stream is read with fetch and parsed here.
"use strict";

const api = "api/v1/locks/";
const params = new URLSearchParams(location.search);
const pollMs = Number(params.get("poll")) || 2000;
const maxEvents = 200;
const tokenKey = "locking-center-token";
let token = sessionStorage.getItem(tokenKey) || "";

function authHeaders() {
  return token ? { Authorization: "Bearer " + token } : {};
}

// AuthError is a 401: the page has no token, or a wrong one.
class AuthError extends Error {}

function askToken(message) {
  if (stream) stream(); // it cannot go on without a token
  stream = null;
  const form = document.getElementById("login");
  form.hidden = false;
  document.getElementById("login-error").textContent = message || "";
  document.getElementById("logout").hidden = true;
  document.body.dataset.auth = "needed";
  setState("down", "token needed");
}

// parse reads JSON with fencing tokens as exact strings: they are 64-bit
// and above 2^53, past what a JavaScript number holds.
function parse(text) {
  return JSON.parse(text, (k, v, ctx) =>
    k === "fencing_token" && ctx && typeof ctx.source === "string" ? ctx.source : v);
}

function get(path) {
  return fetch(api + path, { cache: "no-store", headers: authHeaders() }).then((r) => {
    if (r.status === 401) throw new AuthError("the server asks for a token");
    if (!r.ok) throw new Error(path + ": HTTP " + r.status);
    return r.text();
  }).then(parse);
}

// span renders milliseconds as "1.2 s", "3 min" or "1.5 h". Durations
// come from the server, so the browser's clock does not matter.
function span(ms) {
  if (ms === undefined || ms === null) return "";
  if (ms < 0) ms = 0;
  if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
  if (ms < 3600000) return Math.floor(ms / 60000) + " min";
  return (ms / 3600000).toFixed(1) + " h";
}

function row(cells, cls) {
  const tr = document.createElement("tr");
  cells.forEach((c, i) => {
    const td = document.createElement("td");
    td.textContent = c === undefined || c === null ? "" : String(c);
    if (cls && cls[i]) td.className = cls[i];
    if (td.className === "note") td.title = td.textContent;
    tr.appendChild(td);
  });
  return tr;
}

function fill(id, rows) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren(...rows);
  document.getElementById(id + "-count").textContent = rows.length;
  document.getElementById(id + "-empty").hidden = rows.length > 0;
  document.getElementById(id).hidden = rows.length === 0;
}

const client = (x) => x.client_id || (x.anonymous ? "(anonymous)" : x.session ? "session " + x.session : "");

function renderKeys(keys) {
  const held = [], waiting = [];
  for (const k of keys) {
    for (const h of k.holders) {
      const tr = row([k.key, h.owner, client(h), h.front_end, h.fencing_token, h.mode,
        h.reentrancy_count, span(h.held_ms), span(h.expires_in_ms), h.note || ""],
        ["key", , , , , , , , , "note"]);
      tr.dataset.key = k.key;
      tr.dataset.token = String(h.fencing_token);
      held.push(tr);
    }
    for (const q of k.queue) {
      const tr = row([k.key, q.queue_position, q.owner, client(q), q.front_end, q.mode,
        q.priority, span(q.waiting_ms), q.note || ""],
        ["key", , , , , , , , "note"]);
      tr.dataset.key = k.key;
      waiting.push(tr);
    }
  }
  fill("held", held);
  fill("waiting", waiting);
}

function renderSessions(sessions) {
  fill("sessions", sessions.map((s) => {
    const name = s.anonymous ? "(anonymous)" : s.client_id || s.name;
    const tr = row([s.session, name, s.front_end, s.anonymous ? "never expires" : span(s.ttl_ms), span(s.idle_ms), s.held, s.waiting, s.remote_addr || ""]);
    tr.dataset.session = String(s.session);
    return tr;
  }));
}

// renderNode says which node of a cluster serves the page and whether it
// leads; a single node shows nothing. The listings and the stream are the
// leader's wherever the page is served (a follower forwards them).
async function renderNode() {
  const r = await fetch("node", { cache: "no-store" });
  if (!r.ok) return;
  const n = await r.json();
  const el = document.getElementById("node");
  el.hidden = !n.cluster;
  if (!n.cluster) return;
  el.textContent = n.leading ? "node " + n.id + ": leader"
    : "node " + n.id + ": follower, " + (n.leader_id ? "leader " + n.leader_id : "no leader known");
  el.dataset.leading = String(n.leading);
  document.body.dataset.node = n.id;
}

let refreshing = false, again = false;
async function refresh() {
  if (refreshing) { again = true; return; }
  refreshing = true;
  try {
    const [keys, sessions] = await Promise.all([get("observability"), get("sessions"), renderNode()]);
    renderKeys(keys);
    renderSessions(sessions);
    document.body.dataset.updated = String(Date.now());
  } catch (e) {
    if (e instanceof AuthError) askToken(token ? "That token was refused." : "");
    else setState("down", "error: " + e.message);
  } finally {
    refreshing = false;
    if (again) { again = false; refresh(); }
  }
}

function setState(cls, text) {
  const el = document.getElementById("stream-state");
  el.className = "state " + cls;
  el.textContent = text;
  document.body.dataset.stream = cls;
}

function addEvent(e) {
  const li = document.createElement("li");
  const action = document.createElement("span");
  action.className = "action " + e.action;
  action.textContent = e.action;
  const when = new Date(e.time).toLocaleTimeString();
  const parts = [when, " ", action, " ", e.key, " by ", e.owner];
  if (e.client_id) parts.push(" (" + e.client_id + ")");
  if (e.fencing_token) parts.push(" token " + e.fencing_token);
  if (e.reason) parts.push(" — " + e.reason.replaceAll("_", " "));
  if (e.note) parts.push(": " + e.note);
  li.append(...parts);
  li.dataset.id = String(e.id);
  const list = document.getElementById("events");
  list.prepend(li);
  while (list.children.length > maxEvents) list.lastChild.remove();
}

// The stream starts with what the server's ring holds (last_event_id=0);
// on a reconnect it resumes after the last event it saw.
let stream = null; // what closes the current stream
let lastId = "0";

function onEvent(data) {
  try { addEvent(parse(data)); } catch (e) { /* not an event of ours */ }
  refresh();
}

function openStream() {
  if (stream) stream();
  if (token) { fetchStream(); return; }
  // Without a token the browser's EventSource does it all, reconnects
  // and Last-Event-ID included.
  const es = new EventSource(api + "subscribe?last_event_id=0");
  document.body.dataset.transport = "eventsource";
  es.onopen = () => { setState("live", "live"); refresh(); };
  es.onerror = () => setState("down", "reconnecting");
  es.onmessage = (m) => onEvent(m.data);
  stream = () => es.close();
}

// fetchStream reads the event stream with fetch, so that it can carry the
// token, and parses its Server-Sent Events; it reconnects after a second
// when the stream ends.
function fetchStream() {
  const ctl = new AbortController();
  let retry = null;
  stream = () => { ctl.abort(); clearTimeout(retry); };
  document.body.dataset.transport = "fetch";
  const again = () => {
    if (ctl.signal.aborted) return;
    setState("down", "reconnecting");
    retry = setTimeout(fetchStream, 1000);
  };
  fetch(api + "subscribe?last_event_id=" + encodeURIComponent(lastId), {
    headers: authHeaders(), cache: "no-store", signal: ctl.signal,
  }).then(async (r) => {
    if (r.status === 401) { askToken("That token was refused."); return; }
    if (r.status === 403) { setState("down", "events: not allowed for this token"); return; }
    if (!r.ok || !r.body) { again(); return; }
    setState("live", "live");
    refresh();
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "", data = [], id = null;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += value;
      let nl;
      while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
        if (buf[nl] === "\r" && nl === buf.length - 1) break; // a \n may follow
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + (buf.startsWith("\r\n", nl) ? 2 : 1));
        if (line === "") { // the end of a message
          if (id !== null) lastId = id;
          if (data.length) onEvent(data.join("\n"));
          data = []; id = null;
          continue;
        }
        if (line.startsWith(":")) continue; // a comment
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let v = colon < 0 ? "" : line.slice(colon + 1);
        if (v.startsWith(" ")) v = v.slice(1);
        if (field === "data") data.push(v);
        else if (field === "id") id = v;
      }
    }
    again();
  }).catch(again);
}

document.getElementById("login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const input = document.getElementById("token");
  token = input.value.trim();
  input.value = "";
  if (!token) return;
  sessionStorage.setItem(tokenKey, token);
  document.getElementById("login").hidden = true;
  document.getElementById("logout").hidden = false;
  document.body.dataset.auth = "token";
  openStream();
  refresh();
});

document.getElementById("logout").addEventListener("click", () => {
  sessionStorage.removeItem(tokenKey);
  token = "";
  if (stream) stream();
  stream = null;
  askToken("");
});

document.getElementById("logout").hidden = !token;
openStream();
refresh();
setInterval(refresh, pollMs);
