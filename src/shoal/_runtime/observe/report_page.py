"""A task's report as data (tabs of HTML fragments) and its rendering as one HTML page.

The page is self-contained: inline CSS, no scripts, no fonts or images fetched from anywhere,
so it opens the same from the object store, a saved file or the web UI's sandboxed frame. Tabs
are radio buttons and labels switched by CSS alone. Logged content is HTML, inserted as given
(as in Flyte 2: the task writes markup); tab names and the facts around it are escaped.
"""

from __future__ import annotations

import html
import threading
from dataclasses import dataclass, field

from shoal.errors import SpecError

MAIN_TAB = "main"


def _check_content(where: str, content: object) -> str:
    if not isinstance(content, str):
        raise SpecError(where, content, "must be an HTML string (a fragment, not a document)",
                        "pass markup such as f'<p>{html.escape(str(value))}</p>'")
    return content


@dataclass
class Tab:
    """One tab of a report: HTML fragments shown one after the other."""

    name: str
    content: list[str] = field(default_factory=list, init=False)

    def log(self, content: str) -> None:
        """Append an HTML fragment to this tab."""
        self.content.append(_check_content(f"report tab {self.name!r}: log", content))

    def replace(self, content: str) -> None:
        """Make ``content`` the whole of this tab."""
        self.content = [_check_content(f"report tab {self.name!r}: replace", content)]

    def get_html(self) -> str:
        return "\n".join(self.content)


@dataclass
class Report:
    """The tabs of one report; the ``main`` tab always exists (``shoal.report.log`` writes it)."""

    name: str
    tabs: dict[str, Tab] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.tabs.setdefault(MAIN_TAB, Tab(MAIN_TAB))
        # A task may log from threads (asyncio.to_thread, a data loader) while a flush renders.
        self.lock = threading.RLock()

    def has_content(self) -> bool:
        return any(tab.content for tab in self.tabs.values())

    def get_tab(self, name: str, create_if_missing: bool = True) -> Tab:
        if not isinstance(name, str) or not name.strip():
            raise SpecError("report tab name", name, "must be a non-empty string",
                            'e.g. shoal.report.get_tab("Metrics")')
        with self.lock:
            if name not in self.tabs:
                if not create_if_missing:
                    raise SpecError("report tab", name, "does not exist in this report",
                                    f"use one of {sorted(self.tabs)} or create_if_missing=True")
                self.tabs[name] = Tab(name)
            return self.tabs[name]

    def get_final_report(self) -> str:
        """The page without run facts (what Flyte 2's method of this name returns)."""
        return render_page(self, title=self.name, facts=[], note="")


def _shown_tabs(report: Report) -> list[Tab]:
    # "main" always exists; it gets a tab only when something was logged there, or when
    # nothing was logged anywhere (then it carries the "empty" message).
    tabs = [t for t in report.tabs.values() if t.content or t.name != MAIN_TAB]
    return tabs or [report.tabs[MAIN_TAB]]


def render_page(report: Report, *, title: str, facts: list[tuple[str, str]], note: str) -> str:
    """One HTML document: a header with ``facts`` (label, value) and ``note``, then the tabs."""
    with report.lock:
        tabs = [(t.name, t.get_html()) for t in _shown_tabs(report)]
    radios, panels, rules = [], [], []
    for i, (name, body) in enumerate(tabs):
        checked = " checked" if i == 0 else ""
        radios.append(f'<input type="radio" name="shoal-tab" id="shoal-t{i}"{checked}>'
                      f'<label for="shoal-t{i}">{html.escape(name)}</label>')
        panels.append(f'<section id="shoal-p{i}">{body or _EMPTY}</section>')
        rules.append(f"#shoal-t{i}:checked~.panels #shoal-p{i}{{display:block}}")
    shown = " · ".join(f"<b>{html.escape(k)}</b> {html.escape(v)}" for k, v in facts)
    note_html = f'<p class="note">{html.escape(note)}</p>' if note else ""
    return _PAGE.format(title=html.escape(title), facts=shown, note=note_html,
                        rules="\n".join(rules), radios="".join(radios),
                        panels="".join(panels))


_EMPTY = '<p class="empty">Nothing was logged to this report.</p>'

# Braces of the CSS are doubled for str.format.
_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
body {{ margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif;
       color: #1d2430; background: #fff; }}
header {{ padding: 12px 20px; border-bottom: 1px solid #dde2ea; background: #f6f8fb; }}
header h1 {{ margin: 0 0 4px; font-size: 17px; }}
header p {{ margin: 2px 0; color: #4a5566; font-size: 12px; }}
header .note {{ color: #7a4b00; }}
.tabs > input {{ position: absolute; opacity: 0; pointer-events: none; }}
.tabs > label {{ display: inline-block; padding: 8px 14px; cursor: pointer; font-weight: 600;
                color: #5b6676; border-bottom: 3px solid transparent; }}
.tabs > input:checked + label {{ color: #1d2430; border-bottom-color: #2f6fde; }}
.tabs > input:focus-visible + label {{ outline: 2px solid #2f6fde; }}
.tabs {{ padding: 0 12px; }}
.panels {{ border-top: 1px solid #dde2ea; }}
.panels > section {{ display: none; padding: 16px 8px; overflow-x: auto; }}
.empty {{ color: #7b8594; }}
{rules}
</style>
</head>
<body>
<header><h1>{title}</h1><p>{facts}</p>{note}</header>
<div class="tabs">{radios}<div class="panels">{panels}</div></div>
</body>
</html>
"""
