// Helpers shared by the pages (plain JavaScript, no build step).
"use strict";
const RUN = document.body ? document.body.dataset.run : "";

async function api(path, options) {
  const res = await fetch(path, Object.assign({credentials: "same-origin"}, options || {}));
  if (!res.ok) throw new Error(res.status + " " + (await res.text()));
  return res.json();
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    // Through the CSSOM: the Content-Security-Policy (style-src 'self') refuses style attributes.
    else if (k === "style") node.style.cssText = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined) node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function fmtTime(t) { return t ? new Date(t * 1000).toLocaleString() : ""; }

function fmtDur(s) {
  if (s === null || s === undefined) return "";
  if (s < 60) return s.toFixed(1) + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.round((s % 3600) / 60) + " min";
}

// Runs fn now and every ms milliseconds, never two at once.
function poll(fn, ms) {
  let busy = false;
  const tick = async () => {
    if (busy) return;
    busy = true;
    try { await fn(); } catch (e) { console.error(e); } finally { busy = false; }
  };
  tick();
  return setInterval(tick, ms);
}
