"""`snapctl ui --web`: the timeline app served to a browser by textual-serve, behind a token.

Whoever can drive the page can roll the workspace back, so two things stand between the page
and everyone else: it is served on 127.0.0.1 unless `--host` asks for another address, and
every route sits under a random token in the URL's path (`/<token>/`, `/<token>/ws`,
`/<token>/static/...`). A request whose path does not start with the token, the websocket's
included, is refused with 403 before textual-serve sees it. The token lives in the path, not
the query, because the page builds every URL it loads (its static files, its websocket) from
the routes under it: no cookie, no script change. The page sends no Referer, so the token
never leaves in one.

textual-serve runs the app as a command, one process per browser connection, with this
process's environment: the app finds the same daemon (`SNAPD_HOME`) as the `snapctl` that
served it. Port 0 binds any free port; the URL printed names the one bound.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import shlex
import signal
from collections.abc import Awaitable, Callable, Sequence

import aiohttp_jinja2
import jinja2
from aiohttp import web
from textual_serve.server import Server

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
TITLE = "snapd timeline"
REFUSED = "403: this page needs the URL `snapctl ui --web` printed, token included\n"


def url_host(host: str) -> str:
    """``host`` as it goes in a URL: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host


class WebServer(Server):
    """textual-serve's server with every route under ``/<token>/`` and nothing outside it."""

    def __init__(self, argv: Sequence[str], *, host: str, port: int, token: str | None = None) -> None:
        super().__init__(shlex.join(argv), host=host, port=port, title=TITLE)
        self.token = token or secrets.token_urlsafe(24)
        self._stop = asyncio.Event()

    @property
    def prefix(self) -> str:
        return f"/{self.token}"

    def url(self, port: int) -> str:
        """The page's address once bound to ``port``."""
        return f"http://{url_host(self.host)}:{port}{self.prefix}/"

    async def _make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard])
        aiohttp_jinja2.setup(app, loader=jinja2.FileSystemLoader(self.templates_path))
        app.add_routes([
            web.get(f"{self.prefix}/", self.handle_index, name="index"),
            web.get(f"{self.prefix}/ws", self.handle_websocket, name="websocket"),
            web.static(f"{self.prefix}/static", self.statics_path, name="static"),
        ])
        app.on_response_prepare.append(self._no_referrer)
        return app

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        first = request.raw_path.split("?", 1)[0].split("/")[1]
        if not hmac.compare_digest(first.encode(), self.token.encode()):
            raise web.HTTPForbidden(text=REFUSED)
        return await handler(request)

    @staticmethod
    async def _no_referrer(request: web.Request, response: web.StreamResponse) -> None:
        response.headers["Referrer-Policy"] = "no-referrer"

    async def handle_index(self, request: web.Request) -> web.StreamResponse:
        """The page, with its static files and websocket under the token, at the address the
        browser used (so `--host 0.0.0.0` gives a page that works from another machine)."""
        router = request.app.router
        static = f"{router['static'].url_for(filename='/')}".rstrip("/") + "/"
        websocket = f"ws://{request.host}{router['websocket'].url_for()}"
        context = {
            "font_size": 16,
            "app_websocket_url": websocket,
            "config": {"static": {"url": static}},
            "application": {"name": self.title},
        }
        return aiohttp_jinja2.render_template("app_index.html", request, context)

    async def run(self, announce: Callable[[str], None]) -> None:
        """Serve until SIGINT or SIGTERM; ``announce`` gets the URL once the port is bound."""
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self._stop.set)
        runner = web.AppRunner(await self._make_app(), handle_signals=False, access_log=None,
                               shutdown_timeout=2.0)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self.port)
            await site.start()
            announce(self.url(runner.addresses[0][1]))
            await self._stop.wait()
        finally:
            await runner.cleanup()


def serve(argv: Sequence[str], *, host: str, port: int, announce: Callable[[str], None]) -> None:
    """Serve the app that ``argv`` runs until interrupted; ``announce`` gets the URL (token
    included) once it can be opened."""
    asyncio.run(WebServer(argv, host=host, port=port).run(announce))
