// The status page: the table from the listings, kept fresh by the event
// stream (every event refreshes it) and by a poll (?poll=ms, default 2000),
// which also brings what makes no event (a request that starts to wait).
"use strict";

const api = "api/v1/locks/";
const params = new URLSearchParams(location.search);
const pollMs = Number(params.get("poll")) || 2000;
const maxEvents = 200;

// parse reads JSON with fencing tokens as exact strings: they are 64-bit
// and above 2^53, past what a JavaScript number holds.
function parse(text) {
  return JSON.parse(text, (k, v, ctx) =>
    k === "fencing_token" && ctx && typeof ctx.source === "string" ? ctx.source : v);
}

function get(path) {
  return fetch(api + path, { cache: "no-store" }).then((r) => {
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
        h.reentrancy_count, span(h.held_ms), span(h.expires_in_ms)], ["key"]);
      tr.dataset.key = k.key;
      tr.dataset.token = String(h.fencing_token);
      held.push(tr);
    }
    for (const q of k.queue) {
      const tr = row([k.key, q.queue_position, q.owner, client(q), q.front_end, q.mode,
        q.priority, span(q.waiting_ms)], ["key"]);
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
    const tr = row([s.session, name, s.front_end, span(s.ttl_ms), span(s.idle_ms), s.held, s.waiting, s.remote_addr || ""]);
    tr.dataset.session = String(s.session);
    return tr;
  }));
}

let refreshing = false, again = false;
async function refresh() {
  if (refreshing) { again = true; return; }
  refreshing = true;
  try {
    const [keys, sessions] = await Promise.all([get("observability"), get("sessions")]);
    renderKeys(keys);
    renderSessions(sessions);
    document.body.dataset.updated = String(Date.now());
  } catch (e) {
    setState("down", "error: " + e.message);
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
  li.append(...parts);
  li.dataset.id = String(e.id);
  const list = document.getElementById("events");
  list.prepend(li);
  while (list.children.length > maxEvents) list.lastChild.remove();
}

// The stream starts with what the server's ring holds (last_event_id=0);
// on a reconnect the browser's Last-Event-ID takes over.
const stream = new EventSource(api + "subscribe?last_event_id=0");
stream.onopen = () => { setState("live", "live"); refresh(); };
stream.onerror = () => setState("down", "reconnecting");
stream.onmessage = (m) => {
  try { addEvent(parse(m.data)); } catch (e) { /* not an event of ours */ }
  refresh();
};
refresh();
setInterval(refresh, pollMs);
