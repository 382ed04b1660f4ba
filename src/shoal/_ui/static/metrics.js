// The metrics page: a uPlot chart per metric, a line per rank (a band when ranks are many),
// x = step or time, smoothing, drag to zoom; refreshed every second.
"use strict";
const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                "#7f7f7f", "#bcbd22", "#17becf"];
const charts = {};  // key -> {plot, zoomed, count}
window.shoalCharts = {};  // what is drawn, for people poking in the console and for the tests
let lastVersion = null, lastX = null, lastSmooth = null, lastData = null;

const xMode = () => document.querySelector("input[name=x]:checked").value;
const smoothing = () => parseFloat(document.getElementById("smooth").value);

// Axis ticks in few characters: 1.5G, 350M, 12k, 0.003 (uPlot's default cuts long numbers).
function compact(v) {
  if (v === null) return "";
  const a = Math.abs(v);
  for (const [div, unit] of [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e4, "k"]]) {
    if (a >= div) return +(v / div).toPrecision(4) + unit;
  }
  return String(+v.toPrecision(4));
}

function smooth(ys, alpha) {
  if (!alpha) return ys;
  let acc = null;
  return ys.map(v => {
    if (v === null) return null;
    acc = acc === null ? v : alpha * acc + (1 - alpha) * v;
    return acc;
  });
}

function draw(chart, x, alpha) {
  const key = chart.source + "/" + chart.name;
  const data = uPlot.join(chart.lines.map(l => [l.x, smooth(l.y, alpha)]));
  const flagged = chart.lines.reduce((n, l) => n + l.non_finite, 0);
  window.shoalCharts[key] = {name: chart.name, source: chart.source, band: chart.band,
    lines: chart.lines.map(l => ({label: l.label, rank: l.rank,
                                  points: l.y.filter(v => v !== null).length}))};
  let entry = charts[key];
  if (entry && entry.count === chart.lines.length && entry.x === x) {
    entry.plot.setData(data, !entry.zoomed);
  } else {
    if (entry) entry.plot.destroy();
    const box = document.getElementById("charts-" + (chart.source === "system" ? "system" : "user"));
    let holder = document.querySelector(`[data-chart="${CSS.escape(key)}"]`);
    if (!holder) {
      for (const empty of box.querySelectorAll(".empty")) empty.remove();
      holder = el("div", {class: "chart", "data-chart": key});
      box.append(holder);
    }
    holder.replaceChildren(el("h3", {text: chart.name}), el("span", {class: "flag"}));
    const series = [{label: x}].concat(chart.lines.map((l, i) => ({
      label: l.label, stroke: chart.band ? (i === 1 ? "#1f77b4" : "#9bbbd9") : COLORS[i % COLORS.length],
      spanGaps: true, points: {show: false}})));
    const axes = [{}, {size: 60, values: (u, ticks) => ticks.map(compact)}];
    const opts = {width: 560, height: 260, series, axes,
      scales: {x: {time: x === "time"}}, cursor: {drag: {x: true, y: false}},
      hooks: {setSelect: [u => { if (u.select.width > 0) charts[key].zoomed = true; }]}};
    if (chart.band) opts.bands = [{series: [3, 1], fill: "rgba(31,119,180,0.15)"}];
    const plot = new uPlot(opts, data, holder);
    entry = charts[key] = {plot, zoomed: false, count: chart.lines.length, x};
    holder.addEventListener("dblclick", () => { entry.zoomed = false; });
  }
  const flag = document.querySelector(`[data-chart="${CSS.escape(key)}"] .flag`);
  flag.textContent = flagged ? ` ${flagged} NaN/inf points (not drawn)` : "";
  document.querySelector(`[data-chart="${CSS.escape(key)}"]`).dataset.lines =
    chart.lines.map(l => l.label).join(",");
}

function render(doc) {
  const alpha = smoothing();
  for (const chart of doc.charts) draw(chart, doc.x, alpha);
  document.getElementById("metrics-status").textContent =
    `${doc.points} points` + (doc.dropped ? `, ${doc.dropped} dropped by the writers` : "");
}

async function refresh() {
  const x = xMode(), alpha = smoothing();
  const doc = await api(`/api/runs/${encodeURIComponent(RUN)}/metrics?x=${x}`);
  if (doc.version === lastVersion && x === lastX && alpha === lastSmooth) return;
  lastVersion = doc.version; lastX = x; lastSmooth = alpha; lastData = doc;
  render(doc);
}

document.getElementById("smooth").addEventListener("input", e => {
  document.getElementById("smooth-value").textContent = e.target.value;
  if (lastData) { lastSmooth = smoothing(); render(lastData); }
});
for (const r of document.querySelectorAll("input[name=x]")) r.addEventListener("change", refresh);
poll(refresh, 1000);
