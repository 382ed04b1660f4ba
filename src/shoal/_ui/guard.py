"""Who may talk to `shoal ui`, checked before any route: Jupyter's model.

- The token: ``?token=`` (once: the answer sets an HttpOnly SameSite=Strict cookie and, for a
  page, redirects to the same URL without it, so it leaves the address bar), the cookie, or an
  ``X-Shoal-Token`` header (scripts). None: 401; a wrong one: 403. That redirect names a path
  of this server only (`local_location`): never ``//other.host``, however it is spelled.
- The Host header must name the address the server was started for (127.0.0.1, localhost,
  [::1], or the --host given) with its port: a page of another site that rebinds its DNS name to
  127.0.0.1 sends its own name, and is refused (403).
- A request that changes something (POST) must also come from a page of this server: its
  Origin names this server, or, without an Origin (a script), it carries the token header.
"""

from __future__ import annotations

import secrets
from urllib.parse import quote, urlencode, urlsplit

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
TOKEN_HEADER = "x-shoal-token"
_SAFE_METHODS = ("GET", "HEAD")


def allowed_hosts(host: str, port: int) -> frozenset[str]:
    """Host headers this server answers: the loopback names, and ``host`` when it is another."""
    names = set(LOOPBACK)
    if host not in ("127.0.0.1", "::1", "0.0.0.0", "::"):
        names.add(f"[{host}]" if ":" in host else host)
    return frozenset(f"{name}:{port}" for name in names)


def cookie_name(port: int) -> str:
    # One per port: two `shoal ui`s on one machine do not overwrite each other's token.
    return f"shoal_ui_token_{port}"


class Guard:
    """ASGI middleware in front of every route."""

    def __init__(self, app: ASGIApp, *, token: str, hosts: frozenset[str], port: int,
                 scheme: str = "http") -> None:
        self.app = app
        self.token = token
        self.hosts = hosts
        self.cookie = cookie_name(port)
        self.scheme = scheme  # "https" with --certfile: the Origin pages send, the cookie Secure

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)  # lifespan
            return
        request = Request(scope)
        refused = self._refusal(request)
        if refused is not None:
            await refused(scope, receive, send)
            return
        given = request.query_params.get("token")
        if given is None:
            await self.app(scope, receive, send)
            return
        # The token came in the URL: keep it in a cookie from now on.
        response: Response | None = None
        if request.method == "GET" and not request.url.path.startswith(("/api/", "/static/")):
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            response = RedirectResponse(local_location(scope) + ("?" + urlencode(rest) if rest
                                                                 else ""), status_code=303)
            self._set_cookie(response)
            await response(scope, receive, send)
            return

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((b"set-cookie", self._cookie_header().encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_cookie)

    def _refusal(self, request: Request) -> Response | None:
        host = request.headers.get("host", "")
        if host not in self.hosts:
            return PlainTextResponse(
                f"403: Host {host!r} is not this server's address; open the URL `shoal ui` "
                "printed (requests naming another host are refused: DNS rebinding)",
                status_code=403)
        candidates = [request.query_params.get("token"), request.cookies.get(self.cookie),
                      request.headers.get(TOKEN_HEADER)]
        given = [c for c in candidates if c]
        if not given:
            return PlainTextResponse("401: no token; open the URL `shoal ui` printed "
                                     "(it ends in ?token=...)", status_code=401)
        if not any(secrets.compare_digest(c.encode(), self.token.encode()) for c in given):
            return PlainTextResponse("403: wrong token; open the URL `shoal ui` printed",
                                     status_code=403)
        if request.method not in _SAFE_METHODS and not self._same_origin(request):
            return PlainTextResponse("403: a change must come from a page of this server "
                                     "(its Origin) or carry the X-Shoal-Token header",
                                     status_code=403)
        return None

    def _same_origin(self, request: Request) -> bool:
        origin = request.headers.get("origin")
        if origin is None or origin == "null":
            header = request.headers.get(TOKEN_HEADER, "")
            return bool(header) and secrets.compare_digest(header.encode(), self.token.encode())
        parts = urlsplit(origin)
        return parts.scheme == self.scheme and parts.netloc in self.hosts

    def _cookie_header(self) -> str:
        secure = "; Secure" if self.scheme == "https" else ""
        return f"{self.cookie}={self.token}; Path=/; HttpOnly; SameSite=Strict{secure}"

    def _set_cookie(self, response: Response) -> None:
        response.set_cookie(self.cookie, self.token, path="/", httponly=True, samesite="strict",
                            secure=self.scheme == "https")


# What may stay as it is in a path put into Location; the rest (backslash, tab, space, quote...)
# is percent-encoded, "%" included only as the start of an escape the client already sent.
_PATH_SAFE = "/%:@!$&'()*+,;=-._~"


def local_location(scope: Scope) -> str:
    """The request's path as a Location that stays on this server: a relative path that
    starts with exactly one "/".

    Browsers read ``//evil.com``, ``///evil.com`` and ``/\\evil.com`` (backslashes count as
    slashes, tabs and newlines are dropped) as another host; the path is taken as the client
    sent it (``raw_path``, so ``/%2F%2Fevil.com`` stays encoded, one segment of this server),
    everything outside `_PATH_SAFE` percent-encoded, and the leading slashes made one.
    """
    raw: bytes = scope.get("raw_path") or quote(str(scope.get("path", "/"))).encode()
    return "/" + quote(raw.split(b"?", 1)[0], safe=_PATH_SAFE).lstrip("/")
