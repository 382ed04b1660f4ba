"""The headers on every answer of `shoal ui`, refusals (401, 403) and errors included.

ASGI middleware outside the token guard, so nothing leaves the server without them:

- ``Content-Security-Policy``: the pages run only their own scripts and styles from
  ``/static`` (no inline script or style, no ``eval``; the scripts set styles through the
  CSSOM, which a policy does not govern), talk only to this server, and may not be framed.
  A page that escaped its data wrongly still could not run what it shows.
- ``X-Frame-Options: DENY`` (``frame-ancestors`` for browsers that predate it): no other site
  can frame the Cancel button under a decoy (clickjacking).
- ``X-Content-Type-Options: nosniff``: a log download or a JSON answer is never run as a page.
- ``Referrer-Policy: no-referrer``: the first URL carries ``?token=``; no link or fetch sends it.
- ``Cache-Control: no-store`` on everything but ``/static``: run data (inputs, logs, errors)
  stays out of the browser's and any proxy's disk cache.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP = "; ".join((
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    "connect-src 'self'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
))
HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
)
_REPLACED = {name for name, _ in HEADERS} | {b"cache-control"}


class SecurityHeaders:
    """Adds `HEADERS` (and ``Cache-Control: no-store`` outside ``/static``) to each answer,
    replacing any the routes set."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = str(scope.get("path", "")).startswith("/static/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [(k, v) for k, v in message.get("headers", [])
                        if k.lower() not in _REPLACED or (static and k.lower() == b"cache-control")]
                kept += HEADERS
                if not static:
                    kept.append((b"cache-control", b"no-store"))
                message = {**message, "headers": kept}
            await send(message)

        await self.app(scope, receive, send_with_headers)
