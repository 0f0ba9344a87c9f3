"""`snapctl ui --web` in a real headless Chromium (Debian's `chromium` and `chromium-driver`,
driven by Selenium from PyPI, pinned in pyproject's `ui` extra; CI's install tier installs
them), against a real daemon: the page opens with the token, a rollback keyed through lands on
disk; without the token every route is refused, the websocket's included.

The page draws the terminal on a canvas, so what the app shows is read from the websocket: a
script set before the page's own collects every frame the app sends, and the test looks for
text in it with the escape sequences taken out."""

from __future__ import annotations

import base64
import contextlib
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
from e2e_helpers import Daemon, cli_mark, unavailable, wait_for, write

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]

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

    def apps(self) -> list[int]:
        """The app processes it runs (its children: one per open page)."""
        tasks = Path(f"/proc/{self.proc.pid}/task")
        return [int(pid) for task in tasks.iterdir() for pid in (task / "children").read_text().split()]

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


@contextlib.contextmanager
def served(daemon: Daemon, ws: Path, *extra: str) -> Iterator[Served]:
    """`snapctl ui --web --port 0 -w WS EXTRA`, running until the block ends (then it must end
    on SIGTERM with 0)."""
    argv = [sys.executable, "-m", "snapd", "ui", "--web", "--port", "0", "-w", str(ws), *extra]
    server = Served(argv, daemon.env, ws)
    try:
        yield server
    finally:
        assert server.stop() == 0, server.out


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
                "--window-size=1000,440", f"--user-data-dir={tmp_path / 'chromium'}"):
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
    try:
        wait_for(lambda: text in shown(chrome), timeout)
    except AssertionError:
        raise AssertionError(f"no {text!r} on the page in {timeout}s: it shows\n{shown(chrome)}") from None


def screenshot(chrome: Any, path: Path) -> None:
    """The page as a PNG at ``path``, and at ``$SNAPD_UI_WEB_SCREENSHOT`` when set (how
    docs/ui-web.png, the README's, is made)."""
    assert chrome.save_screenshot(str(path)) and path.stat().st_size > 1000
    if os.environ.get("SNAPD_UI_WEB_SCREENSHOT"):
        shutil.copyfile(path, os.environ["SNAPD_UI_WEB_SCREENSHOT"])


def focus(chrome: Any) -> None:
    """A click on the terminal's top line (the heading: it selects nothing), as a person gives
    the page the focus: the app then takes keys (and draws its footer)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    screen = chrome.find_element(By.CSS_SELECTOR, ".xterm-screen")
    top_left = (-screen.size["width"] // 2 + 4, -screen.size["height"] // 2 + 4)
    ActionChains(chrome).move_to_element_with_offset(screen, *top_left).click().perform()


def press(chrome: Any, keys: str) -> None:
    """Keys typed into the page (which has the focus: :func:`focus`)."""
    from selenium.webdriver.common.action_chains import ActionChains

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


def test_only_the_token_opens_anything_and_only_on_127_0_0_1(daemon: Daemon, ws: Path) -> None:
    with served(daemon, ws) as web:
        token = urlsplit(web.url).path.strip("/")
        assert urlsplit(web.url).hostname == "127.0.0.1"
        assert listening(urlsplit(web.url).port or 0) == {"0100007F"}  # 127.0.0.1, nothing else
        assert status(web.url) == 200
        assert websocket_status(web.origin, f"/{token}/ws?width=80&height=24") == 101
        for path in ("/", "/ws", "/static/js/textual.js", f"/{token[:-1]}/", f"/{token}x/ws", f"/x/{token}/"):
            assert status(web.origin + path) == 403, path
            assert websocket_status(web.origin, path) == 403, path


def test_another_address_only_when_asked(daemon: Daemon, ws: Path) -> None:
    with served(daemon, ws, "--host", "127.0.0.2") as web:  # a loopback address of its own
        assert urlsplit(web.url).hostname == "127.0.0.2"
        assert listening(urlsplit(web.url).port or 0) == {"0200007F"}
        assert status(web.url) == 200
        assert status(web.origin + "/") == 403


def turn(daemon: Daemon, ws: Path, agent: str, session: str, message: str, files: dict[str, str]) -> None:
    """An agent's turn: turn-start, the files written, turn-end."""
    cli_mark(daemon, ws, "turn-start", "--agent", agent, "--session", session, "-m", message)
    for name, text in files.items():
        write(ws / name, text)
    cli_mark(daemon, ws, "turn-end", "--agent", agent, "--session", session, "-m", message)


def test_a_rollback_keyed_through_the_page_lands_on_disk(
    daemon: Daemon, ws: Path, tmp_path: Path, browser: Any
) -> None:
    from selenium.webdriver.common.keys import Keys

    turn(daemon, ws, "claude", "s-41", "write the notes", {"notes.txt": "first draft\n"})
    turn(daemon, ws, "codex", "s-42", "rework the notes",
         {"notes.txt": "second draft\n", "extra.txt": "made in the second turn\n"})
    with served(daemon, ws) as web:
        browser.get(web.url)
        wait_shown(browser, "codex")  # the turns' rows
        wait_shown(browser, "claude")
        focus(browser)
        wait_shown(browser, "quit")  # the footer: all drawn
        screenshot(browser, tmp_path / "ui-web.png")
        press(browser, Keys.ARROW_DOWN)  # from the newest turn (selected) to the first one
        press(browser, "r")
        wait_shown(browser, "extra.txt")  # the plan: extra.txt deleted
        assert (ws / "notes.txt").read_text() == "second draft\n"  # nothing applied before `y`
        press(browser, "y")

        def rolled_back() -> bool:
            return (ws / "notes.txt").read_text() == "first draft\n" and not (ws / "extra.txt").exists()

        wait_for(rolled_back, 20, what="the rollback on disk")
        assert len(web.apps()) == 1
        browser.quit()  # the page closed (the whole browser: no cache can keep its socket): its app ends
        wait_for(lambda: not web.apps(), 20, what="the app's end once its page is closed")
