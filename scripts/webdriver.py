"""Debian's headless Chromium, driven through ``chromedriver`` over the W3C WebDriver protocol
(plain HTTP, urllib): no selenium, whose "Selenium Manager" may try to download a browser.
The viewer page's tests (``tests/serve/webdriver.py`` loads this file) and
``scripts/bench/webrtc/bench.py`` drive it.

::

    with Browser.start(tmp_path) as browser:
        browser.get("http://127.0.0.1:8080/")
        browser.script("return document.title")
        browser.screenshot(tmp_path / "page.png")
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from scripts.bench.proc import descendants

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
APT = "apt-get install -y chromium chromium-driver (scripts/test.sh installs them)"

FLAGS = [
    "--headless=new",
    "--no-sandbox",  # root in a container: Chromium's sandbox needs user namespaces
    "--disable-dev-shm-usage",  # a container's small /dev/shm
    "--allow-loopback-in-peer-connection",  # ICE candidates on 127.0.0.1
    "--disable-features=WebRtcHideLocalIpsWithMdns",  # real host candidates, not .local names
    "--autoplay-policy=no-user-gesture-required",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",  # nothing reaches the internet
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--window-size=1280,900",
]


def missing() -> str | None:
    """What is missing to drive Chromium here, with the install; None when nothing is."""
    absent = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    return f"{', '.join(absent)} missing: {APT}" if absent else None


class WebDriverError(RuntimeError):
    pass


class Browser:
    """One WebDriver session of headless Chromium (see the module docstring)."""

    def __init__(self, driver_url: str, session_id: str, driver_pid: int | None = None) -> None:
        self.driver_url = driver_url
        self.session_id = session_id
        self.driver_pid = driver_pid

    @classmethod
    @contextlib.contextmanager
    def start(cls, profile_dir: Path) -> Iterator[Browser]:
        """chromedriver on a free 127.0.0.1 port and a browser session; both end on exit."""
        port = _free_port()
        driver = subprocess.Popen(
            [str(CHROMEDRIVER), f"--port={port}", "--allowed-ips=127.0.0.1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_ready(url)
            caps = {
                "browserName": "chrome",
                "goog:chromeOptions": {
                    "binary": str(CHROMIUM),
                    "args": [*FLAGS, f"--user-data-dir={profile_dir}"],
                },
            }
            value = _call(url, "POST", "/session", {"capabilities": {"alwaysMatch": caps}})
            browser = cls(url, value["sessionId"], driver.pid)
            try:
                yield browser
            finally:
                with contextlib.suppress(OSError, WebDriverError):
                    _call(url, "DELETE", f"/session/{browser.session_id}")
        finally:
            driver.terminate()
            try:
                driver.wait(10)
            except subprocess.TimeoutExpired:
                driver.kill()
                driver.wait()

    def _session(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return _call(self.driver_url, method, f"/session/{self.session_id}{path}", body)

    def grant_media(self, origin: str) -> None:
        """Grant camera and microphone to ``origin`` (navigates there: give a URL that answers).
        Chromium gathers ICE candidates on every interface, loopback included, only for a page
        with media permission; without it, only on the default route's (not 127.0.0.1)."""
        self.get(origin)
        for name in ("camera", "microphone"):
            self._session("POST", "/permissions", {"descriptor": {"name": name}, "state": "granted"})

    def get(self, url: str) -> None:
        self._session("POST", "/url", {"url": url})

    def script(self, source: str, *args: Any) -> Any:
        """Run ``source`` (a function body: ``return ...``) in the page; its result."""
        return self._session("POST", "/execute/sync", {"script": source, "args": list(args)})

    def async_script(self, source: str, *args: Any) -> Any:
        """Run ``source`` as a function body whose last argument is the callback to finish with."""
        return self._session("POST", "/execute/async", {"script": source, "args": list(args)})

    def wait_for(self, source: str, timeout_s: float, *args: Any) -> Any:
        """Poll ``source`` until it returns something truthy (returned) or ``timeout_s`` passes
        (returns the last falsy value)."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.script(source, *args)
            if value or time.monotonic() > deadline:
                return value
            time.sleep(0.2)

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self._session("GET", "/screenshot")))

    def resize(self, width: int, height: int) -> None:
        """Make the page's viewport ``width`` x ``height`` CSS pixels (``innerWidth``,
        ``innerHeight``): the window is sized, then corrected by what its frame takes."""
        for _ in range(2):
            inner = self.script("return [window.innerWidth, window.innerHeight]")
            rect = self._session("GET", "/window/rect")
            if inner == [width, height]:
                return
            size = {"width": rect["width"] + width - inner[0], "height": rect["height"] + height - inner[1]}
            self._session("POST", "/window/rect", size)

    def new_tab(self) -> str:
        """Open a tab and switch to it (its handle)."""
        handle: str = self._session("POST", "/window/new", {"type": "tab"})["handle"]
        self._session("POST", "/window", {"handle": handle})
        return handle

    def kill(self) -> None:
        """End the browser as a crash or a power cut would: SIGKILL to every process its driver
        started, so that no page says goodbye to anything (a closed page's peer connection
        does). The session is gone; leaving :meth:`start`'s block ends the driver."""
        if self.driver_pid is None:
            raise WebDriverError("no driver process to find the browser by")
        found = descendants(self.driver_pid)
        for sig in (signal.SIGSTOP, signal.SIGKILL):  # stopped first: none sees another go
            for pid in found:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)


def _call(base: str, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body if body is not None else {}).encode() if method == "POST" else None
    request = urllib.request.Request(
        base + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            payload = json.load(response)
    except urllib.error.HTTPError as exc:
        try:
            detail = json.load(exc)["value"]
        except ValueError:
            detail = str(exc)
        raise WebDriverError(f"{method} {path}: {detail}") from None
    return payload["value"]


def _wait_ready(url: str) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            if _call(url, "GET", "/status")["ready"]:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise WebDriverError(f"chromedriver at {url} not ready after 20 s")
        time.sleep(0.1)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
