// The runs page: the table, a filter, refreshed every second.
"use strict";
const body = document.querySelector("#runs tbody");
const filter = document.getElementById("filter");

function applyFilter() {
  const words = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
  for (const tr of body.rows) {
    const text = tr.textContent.toLowerCase();
    tr.classList.toggle("hidden", !words.every(w => text.includes(w)));
  }
}
filter.addEventListener("input", applyFilter);

poll(async () => {
  const data = await api("/api/runs");
  body.replaceChildren(...data.runs.map(r => el("tr", {"data-run": r.name},
    el("td", {}, el("a", {href: "/runs/" + encodeURIComponent(r.name), text: r.name})),
    el("td", {text: r.task}),
    el("td", {}, el("span", {class: "state " + r.state, text: r.state})),
    el("td", {text: r.engine}),
    el("td", {text: fmtTime(r.started || r.created)}),
    el("td", {text: fmtDur(r.duration)}))));
  applyFilter();
}, 1000);
