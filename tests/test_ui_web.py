"""`snapctl ui --web` in a real headless Chromium (Debian's `chromium` and `chromium-driver`,
driven by Selenium from PyPI, pinned in pyproject's `ui` extra; CI's install tier installs
them), against a real daemon: the page opens with the token, a rollback keyed through lands on
disk; without the token every route is refused, the websocket's included.

The page draws the terminal on a canvas, so what the app shows is read from the websocket: a
script set before the page's own collects every frame the app sends, and the test looks for
text in it with the escape sequences taken out."""

from __future__ import annotations

import base64
import http.client
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from e2e_helpers import base_env, unavailable, wait_for

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]

TINY_APP = '''
from pathlib import Path
from textual.app import App
from textual.widgets import Static

class Tiny(App[None]):
    BINDINGS = [("r", "roll", "roll")]
    def compose(self):
        yield Static("tiny timeline", id="s")
    def action_roll(self):
        Path(__file__).with_name("rolled").write_text("yes")
        self.query_one("#s", Static).update("rolled back")

Tiny().run()
'''

# Set before the page's scripts run: every frame the app sends, as text.
SEEN = """
window.snapdSeen = [];
const Native = window.WebSocket;
window.WebSocket = function (url, protocols) {
  const socket = new Native(url, protocols);
  const text = new TextDecoder();
  socket.addEventListener("message", (e) => {
    window.snapdSeen.push(typeof e.data === "string" ? e.data : text.decode(e.data));
  });
  return socket;
};
window.WebSocket.prototype = Native.prototype;
"""
ESCAPES = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[()][0-9A-Za-z]|[=>78])")


# -- the server ----------------------------------------------------------------------------------


class Served:
    """A `--web` server process; ``url`` is the one it printed (token included)."""

    def __init__(self, argv: Sequence[str], env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.out = b""
        self.url = self._printed_url()

    def _printed_url(self, timeout: float = 30.0) -> str:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()

        def url() -> str | None:
            found = re.search(rb"http://\S+/", self.out)
            if found:
                return found.group().decode()
            if select.select([fd], [], [], 0.1)[0]:
                chunk = os.read(fd, 4096)
                assert chunk or self.proc.poll() is None, f"the server ended: {self.out!r}"
                self.out += chunk
            return None

        return str(wait_for(url, timeout, what=f"the server's URL: {self.out!r}"))

    @property
    def origin(self) -> str:
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}"

    def stop(self) -> int:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            raise AssertionError(f"the server did not end on SIGTERM: {self.out!r}") from None


@pytest.fixture
def tiny(tmp_path: Path) -> Iterator[Served]:
    """The serving of web.py around a tiny app of the test's own."""
    app = tmp_path / "tiny.py"
    app.write_text(TINY_APP)
    serve = ("import sys; from snapd.ui import web; "
             "web.serve(sys.argv[1:], host='127.0.0.1', port=0, announce=lambda u: print(u, flush=True))")
    env = base_env(tmp_path / "snapd-home")
    served = Served([sys.executable, "-c", serve, sys.executable, str(app)], env, tmp_path)
    try:
        yield served
    finally:
        assert served.stop() == 0, served.out


# -- the browser ---------------------------------------------------------------------------------


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """Headless Chromium through chromedriver, its profile in the test's tmp."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        unavailable("chromium or chromedriver missing (Debian's chromium, chromium-driver: CI installs them)")
    try:
        from selenium import webdriver
        from selenium.common.exceptions import WebDriverException
    except ImportError:
        unavailable("selenium is not installed (`pip install -e .[ui]`; CI's install tier does)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,800", f"--user-data-dir={tmp_path / 'chromium'}"):
        options.add_argument(arg)
    try:
        chrome = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver))
    except WebDriverException as e:
        unavailable(f"chromium does not start: {e.msg}")
    try:
        chrome.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": SEEN})
        yield chrome
    finally:
        chrome.quit()


def shown(chrome: Any) -> str:
    """Everything the app has sent to the page so far, as text without escape sequences."""
    return ESCAPES.sub("", "".join(chrome.execute_script("return window.snapdSeen || []")))


def wait_shown(chrome: Any, text: str, timeout: float = 30.0) -> None:
    wait_for(lambda: text in shown(chrome), timeout, what=f"{text!r} on the page")


def press(chrome: Any, keys: str) -> None:
    """Keys typed into the terminal (its hidden textarea has the focus, as after a click)."""
    from selenium.webdriver.common.action_chains import ActionChains

    chrome.execute_script("document.querySelector('.xterm-helper-textarea').focus()")
    ActionChains(chrome).send_keys(keys).perform()


# -- without the token ---------------------------------------------------------------------------


def status(url: str, headers: dict[str, str] | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return e.code


def websocket_status(origin: str, path: str) -> int:
    """The answer to a websocket handshake on ``path``: 101 when it is taken."""
    parts = urlsplit(origin)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        conn.request("GET", path, headers={
            "Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
        })
        return conn.getresponse().status
    finally:
        conn.close()


def listening(port: int) -> set[str]:
    """The local addresses listening on ``port`` (/proc/net/tcp and tcp6, hex as the kernel
    writes them)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, _, state = line.split()[1:4]
            address, hexport = local.split(":")
            if state == "0A" and int(hexport, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


def test_only_the_token_opens_anything_and_only_on_127_0_0_1(tiny: Served) -> None:
    token = urlsplit(tiny.url).path.strip("/")
    assert urlsplit(tiny.url).hostname == "127.0.0.1"
    assert listening(urlsplit(tiny.url).port or 0) == {"0100007F"}  # 127.0.0.1, nothing else
    assert status(tiny.url) == 200
    assert websocket_status(tiny.origin, f"/{token}/ws?width=80&height=24") == 101
    for path in ("/", "/ws", "/static/js/textual.js", f"/{token[:-1]}/", f"/{token}x/ws", f"/x/{token}/"):
        assert status(tiny.origin + path) == 403, path
        assert websocket_status(tiny.origin, path) == 403, path


def test_the_page_opens_with_the_token_and_takes_keys(tiny: Served, browser: Any, tmp_path: Path) -> None:
    browser.get(tiny.url)
    wait_shown(browser, "tiny timeline")
    shot = tmp_path / "ui-web.png"
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 1000
    press(browser, "r")
    wait_for(lambda: (tmp_path / "rolled").exists(), 20, what="the key reached the app")
    wait_shown(browser, "rolled back")
