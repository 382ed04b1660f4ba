// The run page: call tree, timeline, gang panels, the selected action, events; live.
"use strict";
let selected = null;
let last = null;
const TERMINAL = ["succeeded", "failed", "cancelled", "crashed"];

function treeRow(a, depth) {
  const group = a.group.length ? el("span", {class: "group", text: a.group.join(" / ") + " › "}) : "";
  const kind = a.kind === "trace" ? " (trace)" : a.clustered ? " (gang)" : "";
  const tries = a.attempts.length > 1 ? ` · ${a.attempts.length} attempts` : "";
  return el("div", {class: "tree-row", "data-action": a.id, style: `padding-left:${depth * 18}px`,
                    onclick: () => { selected = a.id; render(last); }},
    a.id + " ", group, el("b", {text: a.task}), kind + " ",
    el("span", {class: "state " + a.state, text: a.state}), " " + fmtDur(a.duration) + tries);
}

function renderTree(data) {
  const depth = {};
  const rows = data.actions.map(a => {
    depth[a.id] = a.parent && a.parent in depth ? depth[a.parent] + 1 : 0;
    return treeRow(a, depth[a.id]);
  });
  document.getElementById("tree").replaceChildren(...rows);
}

function renderTimeline(data) {
  const starts = data.actions.map(a => a.created).filter(Boolean);
  const t0 = Math.min(...starts, data.run.started || data.now);
  const t1 = Math.max(data.run.ended || data.now, ...data.actions.map(a => a.ended || 0));
  const span = Math.max(t1 - t0, 0.001);
  const box = document.getElementById("timeline");
  const left = 210, width = Math.max(box.clientWidth - left - 10, 200);
  const px = t => left + ((t - t0) / span) * width;
  const rows = data.actions.map(a => {
    const row = el("div", {class: "tl-row", "data-action": a.id},
                   el("span", {class: "tl-label", text: a.id + " " + a.task}));
    if (!a.attempts.length && (a.state === "cached" || a.state === "replayed")) {
      const x = px(a.created);
      row.append(el("div", {class: "tl-bar " + a.state, style: `left:${x}px;width:6px`,
                            title: `${a.task}: ${a.state}`}));
    }
    for (const att of a.attempts) {
      const x = px(att.started), w = Math.max(px(att.ended || data.now) - x, 2);
      row.append(el("div", {class: "tl-bar " + att.state, style: `left:${x}px;width:${w}px`,
        "data-attempt": att.attempt,
        title: `${a.task} attempt ${att.attempt}: ${att.state} ${fmtDur((att.ended || data.now) - att.started)}`},
        "#" + att.attempt));
    }
    for (const m of data.marks.filter(m => m.action === a.id)) {
      row.append(el("div", {class: "tl-mark", style: `left:${px(m.at)}px`, title: m.message}));
    }
    return row;
  });
  box.replaceChildren(...rows,
    el("div", {class: "tl-row"}, el("span", {class: "tl-label", text: fmtDur(span) + " in all"})));
}

function renderDetail(data) {
  const a = data.actions.find(x => x.id === selected) || data.actions[0];
  const box = document.getElementById("detail");
  if (!a) { box.textContent = "no actions yet"; return; }
  const cut = p => p && p.cut ? ` … (${p.cut} more characters)` : "";
  box.replaceChildren(
    el("p", {}, el("b", {text: `${a.id} ${a.task}`}), ` env ${a.env}, `,
       el("span", {class: "state " + a.state, text: a.state}),
       a.cache_hit ? " (cache hit)" : ""),
    el("div", {}, "inputs:", el("pre", {text: a.inputs.text + cut(a.inputs)})),
    el("div", {}, "outputs:", el("pre", {text: a.outputs ? a.outputs.text + cut(a.outputs) : "(none yet)"})),
    a.error ? el("pre", {class: "error", text: a.error}) : "",
    el("ul", {}, ...a.attempts.map(t => el("li", {},
      `attempt ${t.attempt}: ${t.state}` + (t.exit_code !== null ? ` exit ${t.exit_code}` : "") +
      (t.signal ? ` ${t.signal}` : "") + ` ${fmtDur((t.ended || data.now) - t.started)}`))));
}

let gangDocs = [];  // [action, its gang JSON, now] as last fetched: a page turn redraws them

async function renderGangs(data) {
  const gangs = data.actions.filter(a => a.clustered);
  const docs = [];
  for (const a of gangs) {
    docs.push([a, await api(`/api/runs/${encodeURIComponent(RUN)}/gangs/${encodeURIComponent(a.id)}`),
               data.now]);
  }
  gangDocs = docs;
  drawGangs();
}

function drawGangs() {
  document.getElementById("gangs").replaceChildren(...gangDocs.map(d => gangPanel(...d)));
}

// One attempt's starts: how big each world was, why it began, and the resize that led to it.
function startsTable(att) {
  const nodes = s => s.nnodes === null ? "?" :
    s.nnodes + (s.nproc_per_node === null ? "" : ` × ${s.nproc_per_node}`);
  const resized = s => !s.resize ? "" :
    `${s.resize.from ?? "?"} → ${s.resize.to ?? "?"}` + (s.resize.reason ? `: ${s.resize.reason}` : "");
  return el("table", {class: "starts", "data-attempt": att.attempt},
    el("caption", {text: `attempt ${att.attempt}: starts` + (att.elastic ? " (elastic)" : "")}),
    el("tr", {}, ...["restart", "started at", "nodes", "world size", "cause", "resized"]
      .map(h => el("th", {text: h}))),
    ...att.starts.map(s => el("tr", {"data-restart": s.restart},
      el("td", {text: "r" + s.restart}), el("td", {text: fmtTime(s.started_at)}),
      el("td", {class: "nodes", text: nodes(s)}),
      el("td", {class: "world", text: s.world_size === null ? "?" : String(s.world_size)}),
      el("td", {class: "cause", text: s.cause_text || ""}),
      el("td", {class: "resized", text: resized(s)}))));
}

// The world size over one attempt's time, as steps (an SVG of its own: no chart library for
// a handful of points). Drawn where the size can change: an elastic gang, or one whose starts
// differ in size (a fixed gang's flat line would say nothing the table does not).
function worldChart(att, now) {
  const pts = att.starts.filter(s => s.started_at !== null && s.world_size !== null);
  if (!pts.length || (!att.elastic && new Set(pts.map(s => s.world_size)).size < 2)) return "";
  const ns = "http://www.w3.org/2000/svg";
  const svg = (tag, attrs, text) => {
    const node = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  };
  const W = 420, H = 100, L = 34, R = 8, T = 16, B = 18;
  const t0 = pts[0].started_at, t1 = Math.max(att.ended || now || t0, pts[pts.length - 1].started_at);
  const span = Math.max(t1 - t0, 0.001);
  const top = Math.max(...pts.map(s => s.world_size),
                       ...pts.map(s => (s.max_nnodes || 0) * (s.nproc_per_node || 0)), 1);
  const x = t => L + ((t - t0) / span) * (W - L - R);
  const y = w => T + (1 - w / top) * (H - T - B);
  let d = `M ${x(t0)} ${y(pts[0].world_size)}`;
  pts.forEach((s, i) => {
    if (i) d += ` V ${y(s.world_size)}`;
    d += ` H ${x(i + 1 < pts.length ? pts[i + 1].started_at : t1)}`;
  });
  const chart = svg("svg", {class: "world-chart", width: W, height: H, viewBox: `0 0 ${W} ${H}`,
                            "data-attempt": att.attempt, role: "img",
                            "aria-label": "world size over time: " + pts.map(s => s.world_size).join(" → ")});
  chart.append(
    svg("line", {x1: L, y1: y(0), x2: W - R, y2: y(0), stroke: "#99a"}),
    svg("line", {x1: L, y1: T, x2: L, y2: y(0), stroke: "#99a"}),
    svg("text", {x: L - 4, y: y(top) + 4, "text-anchor": "end", "font-size": 10}, String(top)),
    svg("text", {x: L - 4, y: y(0), "text-anchor": "end", "font-size": 10}, "0"),
    svg("text", {x: W - R, y: H - 4, "text-anchor": "end", "font-size": 10}, fmtDur(span)),
    svg("text", {x: L + 2, y: H - 4, "font-size": 10}, "world size over time"),
    svg("path", {d, fill: "none", stroke: "#4a90e2", "stroke-width": 2, class: "world-line"}),
    // each step's label above its line, to the left of it near the right edge
    ...pts.map((s, i) => {
      const at = x(s.started_at), right = at > L + 0.6 * (W - L - R);
      return svg("text", {x: right ? at - 3 : at + 3, y: y(s.world_size) - 3, "font-size": 10,
                          "text-anchor": right ? "end" : "start", "data-restart": s.restart},
                 `${s.world_size}` + (i ? ` (${s.cause_text || ""})` : ""));
    }));
  return chart;
}

// A stored record's URL: linked only when it is a plain http(s) one (the server checks it
// too), opened in a new tab that gets no handle on this page.
function safeHttpUrl(url) {
  if (typeof url !== "string") return null;
  try {
    const u = new URL(url);
    return u.protocol === "http:" || u.protocol === "https:" ? u.href : null;
  } catch (e) { return null; }
}

// One start's Ray cluster: the dashboard link, the addresses clients dial, each node's group.
function rayCluster(att, s) {
  const r = s.ray;
  const url = safeHttpUrl(r.dashboard_url);
  const link = url ? el("a", {class: "ray-dashboard", href: url, target: "_blank",
                              rel: "noopener noreferrer", text: "Ray dashboard"})
                   : el("span", {class: "ray-dashboard-none", text: "Ray dashboard: none reported"});
  return el("div", {class: "ray-cluster", "data-attempt": att.attempt, "data-restart": s.restart},
    el("p", {}, link, url ? el("span", {class: "hint", text: " " + url}) : "",
       ` · address ${r.address || "?"} · clients ${r.client_address || "?"}`),
    el("table", {class: "ray-nodes"},
      el("caption", {text: `attempt ${att.attempt} restart ${s.restart}: Ray nodes`}),
      el("tr", {}, ...["node", "group", "address"].map(h => el("th", {text: h}))),
      ...r.nodes.map(n => el("tr", {"data-node": n.node}, el("td", {text: String(n.node)}),
        el("td", {class: "group", text: n.group}), el("td", {text: n.address})))));
}

// A big gang's grid is drawn a page of nodes at a time, with each state's count over all of
// its ranks: 1,024 nodes x 8 ranks drawn whole, and redrawn every second while the run goes,
// would make the page sluggish.
const GRID_PAGE = 64;  // node rows per page
const gridPages = {};  // "action/attempt/restart" -> the page shown, kept across redraws

function gangGrid(a, att, s) {
  const key = `${a.id}/${att.attempt}/${s.restart}`;
  const pages = Math.ceil(s.nodes.length / GRID_PAGE);
  const page = Math.min(gridPages[key] || 0, Math.max(pages - 1, 0));
  const shown = s.nodes.slice(page * GRID_PAGE, (page + 1) * GRID_PAGE);
  const grid = el("table", {class: "grid", "data-restart": s.restart},
    el("caption", {text: `attempt ${att.attempt} restart ${s.restart}: ${s.ended}`}),
    ...shown.map(n => el("tr", {}, el("th", {text: "node " + n.node + (n.group ? ` (${n.group})` : "")}),
      ...n.ranks.map(r => el("td", {class: "cell " + r.state, "data-rank": r.rank},
                             `rank ${r.rank}`, el("br"), r.state)))));
  if (pages <= 1) return [grid];
  const counts = {};
  for (const n of s.nodes) for (const r of n.ranks) counts[r.state] = (counts[r.state] || 0) + 1;
  const go = p => () => { gridPages[key] = p; drawGangs(); };
  const span = p => `nodes ${p * GRID_PAGE}–${Math.min((p + 1) * GRID_PAGE, s.nodes.length) - 1}`;
  const select = el("select", {class: "grid-page", onchange: e => go(+e.target.value)()},
    ...Array.from({length: pages}, (_, p) => el("option", p === page ? {value: p, selected: ""}
                                                                     : {value: p}, span(p))));
  const pager = el("div", {class: "grid-pager", "data-restart": s.restart},
    `${s.nodes.length} nodes, ` + Object.entries(counts).map(([k, v]) => `${v} ${k}`).join(", ") + ": ",
    el("button", {type: "button", class: "grid-prev", onclick: go(page - 1),
                  ...(page === 0 ? {disabled: ""} : {})}, "‹"), " ", select, " ",
    el("button", {type: "button", class: "grid-next", onclick: go(page + 1),
                  ...(page === pages - 1 ? {disabled: ""} : {})}, "›"),
    ` page ${page + 1} of ${pages}`);
  return [pager, grid];
}

function gangPanel(a, g, now) {
  const panel = el("div", {class: "gang", "data-action": a.id},
                   el("h2", {text: `Gang ${a.id} ${a.task}`}));
  for (const att of g.attempts) {
    panel.append(el("div", {class: "gang-starts"}, startsTable(att), worldChart(att, now)));
    for (const s of att.starts) {
      if (s.ray) panel.append(rayCluster(att, s));
      panel.append(...gangGrid(a, att, s));
      if (s.first_failure) {
        const f = s.first_failure;
        panel.append(el("div", {class: "first-failure"},
          el("p", {class: "error", text: `restart ${s.restart}: rank ${f.rank} (node ${f.node}) failed first: ${f.message}` +
                   (f.signal ? ` (${f.signal})` : f.exit_code !== null ? ` (exit ${f.exit_code})` : "")}),
          f.traceback ? el("pre", {class: "error", text: f.traceback}) : "",
          el("pre", {class: "log-tail", text: f.log_tail || "(no log)"})));
      }
    }
  }
  panel.append(el("h3", {text: "Restarts, resizes and preemptions"}),
    el("ol", {class: "gang-events"}, ...g.events.map(e => el("li", {"data-kind": e.kind},
      `${fmtTime(e.at)} ${e.kind}: ${e.message}`))));
  const cps = g.checkpoints;
  panel.append(el("h3", {text: "Checkpoints"}), cps.length ? el("table", {class: "checkpoints"},
    el("tr", {}, ...["version", "step", "size", "time", "written by"].map(h => el("th", {text: h}))),
    ...cps.map(c => el("tr", {}, el("td", {text: c.version}), el("td", {text: c.step}),
      el("td", {text: (c.size / 1024).toFixed(1) + " KiB"}), el("td", {text: fmtTime(c.at)}),
      el("td", {text: writtenBy(c)}))))
    : el("p", {text: "none written"}));
  return panel;
}

function writtenBy(c) {
  const w = c.written_by;
  if (!w) return "?";
  // A resumed run shares the checkpoint of the run it continues: name the other run.
  const run = w.run && w.run !== RUN ? `run ${w.run}, ` : "";
  const text = `${run}attempt ${w.attempt}` + (w.restart == null ? "" : ` restart ${w.restart}`);
  return c.inferred ? `${text} (inferred)` : text;
}

function render(data) {
  if (!data) return;
  document.getElementById("run-state").textContent = data.run.state;
  document.getElementById("run-state").className = "state " + data.run.state;
  document.getElementById("run-summary").textContent =
    `task ${data.run.task} · engine ${data.run.engine} · started ${fmtTime(data.run.started)} · ${fmtDur(data.run.duration)}`;
  renderTree(data);
  renderTimeline(data);
  renderDetail(data);
  document.getElementById("events").replaceChildren(...data.events.map(e =>
    el("li", {}, `${fmtTime(e.at)} ${e.action || ""} ${e.kind}: ${e.message}`)));
}

async function control(what) {
  const out = document.getElementById("control-result");
  try {
    const res = await api(`/api/runs/${encodeURIComponent(RUN)}/${what}`, {method: "POST"});
    out.textContent = res.message;
  } catch (e) { out.textContent = String(e); }
}
document.getElementById("cancel").addEventListener("click", () => control("cancel"));
document.getElementById("preempt").addEventListener("click", () => control("preempt"));

async function renderProfiles() {
  const data = await api(`/api/runs/${encodeURIComponent(RUN)}/profiles`);
  const box = document.getElementById("profiles");
  box.hidden = data.windows.length === 0;
  document.getElementById("profile-windows").replaceChildren(...data.windows.map(w => {
    const panel = el("div", {class: "profile", "data-window": w.window},
      el("h3", {text: `${w.action} attempt ${w.attempt} restart ${w.restart}, ${w.window}`}));
    const s = w.summary;
    if (s && s.error) panel.append(el("p", {class: "error", text: s.error}));
    else if (s) {
      panel.append(el("p", {class: "verdict", text: s.verdict}));
      const st = s.stragglers;
      panel.append(el("table", {class: "profile-ranks"},
        el("tr", {}, ...["rank", "step ms", "waits in collectives ms", "compute ms", "data ms",
                         "idle ms"].map(h => el("th", {text: h}))),
        ...st.table.map(t => el("tr", {class: t.rank === st.straggler ? "straggler" : ""},
          ...[t.rank, t.step_ms, t.wait_ms, t.compute_ms, t.data_ms, t.idle_ms].map(
            (v, i) => el("td", {text: i === 0 ? String(v) : v.toFixed(1)}))))));
      panel.append(el("p", {text: st.text}));
    }
    if (w.files.length) panel.append(el("p", {text: "also kept: " + w.files.join(", ")}));
    panel.append(el("p", {class: "hint", text: `traces: ${w.folder} (Perfetto, HTA)`}));
    return panel;
  }));
}

let ended = 0;
poll(async () => {
  if (ended > 2) return;  // a finished run changes no more: stop asking
  const data = await api(`/api/runs/${encodeURIComponent(RUN)}`);
  last = data;
  render(data);
  await renderGangs(data);
  await renderProfiles();
  if (TERMINAL.includes(data.run.state)) ended += 1;
}, 1000);
