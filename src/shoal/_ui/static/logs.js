// The logs page: pick a source, see it live (server-sent events), search, download.
"use strict";
const select = document.getElementById("source");
const pre = document.getElementById("log");
const search = document.getElementById("search");
const follow = document.getElementById("follow");
const status = document.getElementById("log-status");
const MAX_LINES = 20000;  // lines kept in the page; the download has them all
let lines = [];
let stream = null;

function show() {
  const q = search.value.toLowerCase();
  const picked = q ? lines.filter(l => l.toLowerCase().includes(q)) : lines;
  pre.textContent = picked.join("\n");
  status.textContent = q ? `${picked.length} of ${lines.length} lines match` : `${lines.length} lines`;
  if (follow.checked && !q) pre.scrollTop = pre.scrollHeight;
}
search.addEventListener("input", show);

function open(key) {
  if (stream) stream.close();
  lines = [];
  show();
  const base = `/api/runs/${encodeURIComponent(RUN)}/logs/${encodeURIComponent(key)}`;
  document.getElementById("download").href = base + "/download";
  stream = new EventSource(base + "/stream");
  stream.addEventListener("lines", ev => {
    lines.push(...JSON.parse(ev.data));
    if (lines.length > MAX_LINES) lines = lines.slice(-MAX_LINES);
    show();
  });
  stream.addEventListener("skipped", ev => { lines.push(`[the first ${ev.data} bytes are not shown: download the whole file]`); });
  const url = new URL(location.href);
  url.searchParams.set("source", key);
  history.replaceState(null, "", url);
}
select.addEventListener("change", () => { select.dataset.open = select.value; open(select.value); });

let known = "";
poll(async () => {
  const data = await api(`/api/runs/${encodeURIComponent(RUN)}/logs`);
  const keys = data.sources.map(s => s.key).join(",");
  if (keys === known) return;
  known = keys;
  const current = select.value || new URL(location.href).searchParams.get("source");
  select.replaceChildren(...data.sources.map(s => el("option", {value: s.key, text: s.title})));
  const pick = data.sources.find(s => s.key === current) || data.sources[0];
  if (!pick) return;
  select.value = pick.key;
  if (select.dataset.open !== pick.key) { select.dataset.open = pick.key; open(pick.key); }
}, 2000);
