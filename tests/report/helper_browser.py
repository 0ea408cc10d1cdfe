"""Open a local HTML file in headless Chromium and report what a reader would see.

Drives Debian's ``chromium`` over the DevTools protocol (a websocket on a
loopback port chosen by Chromium itself): navigate, wait for ``load``, collect
console errors, uncaught exceptions and failed loads, read every ``<img>``'s
natural size, and save a full-page screenshot.  Every process started here is
stopped before returning.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class PageReport:
    console_errors: list[str] = field(default_factory=list)
    images: list[dict[str, Any]] = field(default_factory=list)
    title: str = ""
    #: the page's scroll width: wider than the window means a reader scrolls sideways
    page_width: int = 0
    #: tables (their first header cell) reaching past the right edge of the text column
    wide_tables: list[str] = field(default_factory=list)


class _Cdp:
    def __init__(self, ws: ClientConnection) -> None:
        self._ws = ws
        self._id = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, timeout_s: float = 30.0, **params: Any) -> dict[str, Any]:
        self._id += 1
        my_id = self._id
        self._ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout_s
        while True:
            msg = json.loads(self._ws.recv(timeout=max(0.01, deadline - time.monotonic())))
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"CDP {method}: {msg['error']}")
                result: dict[str, Any] = msg.get("result", {})
                return result
            self.events.append(msg)

    def wait_event(self, method: str, timeout_s: float = 30.0) -> dict[str, Any]:
        for ev in self.events:
            if ev.get("method") == method:
                return ev
        deadline = time.monotonic() + timeout_s
        while True:
            msg = json.loads(self._ws.recv(timeout=max(0.01, deadline - time.monotonic())))
            self.events.append(msg)
            if msg.get("method") == method:
                return msg


def _devtools_port(profile: Path, proc: subprocess.Popen[bytes], timeout_s: float) -> int:
    """Chromium writes the port it bound to ``DevToolsActivePort`` in the profile folder."""
    marker = profile / "DevToolsActivePort"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited early with status {proc.returncode}")
        if marker.exists():
            first = marker.read_text().splitlines()[:1]
            if first and first[0].strip().isdigit():
                return int(first[0])
        time.sleep(0.05)  # polling a file Chromium writes; there is nothing to await
    raise RuntimeError(f"chromium: no DevToolsActivePort after {timeout_s} s")


def _page_ws_url(port: int) -> str:
    from urllib.request import urlopen

    with urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as resp:
        targets = json.loads(resp.read())
    for t in targets:
        if t.get("type") == "page":
            return str(t["webSocketDebuggerUrl"])
    raise RuntimeError("chromium: no page target")


def inspect_page(
    html_path: Path, screenshot: Path, *, chromium: str, timeout_s: float = 60.0
) -> PageReport:
    """Load ``html_path``, save a full-page PNG to ``screenshot`` and return what was seen."""
    profile = Path(tempfile.mkdtemp(prefix="lb-chromium-"))
    try:
        # Its own process group: the browser's helpers (zygote, renderers, crash handler)
        # outlive the main process by a moment and write into the profile meanwhile.
        proc = subprocess.Popen(
            [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            port = _devtools_port(profile, proc, timeout_s)
            with connect(_page_ws_url(port), max_size=None, open_timeout=10) as ws:
                return _inspect(_Cdp(ws), html_path, screenshot, timeout_s)
        finally:
            _stop_group(proc)
    finally:
        _remove(profile)


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop the browser and every process of its group; return once none is left."""
    for sig, grace_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return  # the group is empty
            time.sleep(0.05)


def _remove(folder: Path) -> None:
    """Remove ``folder``; a file a departing helper wrote meanwhile gets another try."""
    for _ in range(50):
        try:
            shutil.rmtree(folder)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)
    shutil.rmtree(folder)


def _inspect(cdp: _Cdp, html_path: Path, screenshot: Path, timeout_s: float) -> PageReport:
    for domain in ("Page", "Runtime", "Log", "Network"):
        cdp.call(f"{domain}.enable")
    cdp.call(
        "Emulation.setDeviceMetricsOverride",
        width=1280,
        height=900,
        deviceScaleFactor=1,
        mobile=False,
    )
    cdp.events.clear()
    cdp.call("Page.navigate", url=html_path.resolve().as_uri())
    cdp.wait_event("Page.loadEventFired", timeout_s)
    report = PageReport()
    report.title = cdp.call("Runtime.evaluate", expression="document.title", returnByValue=True)[
        "result"
    ]["value"]
    imgs = cdp.call(
        "Runtime.evaluate",
        expression="Array.from(document.images).map(i => ({alt: i.alt, complete: i.complete, "
        "naturalWidth: i.naturalWidth, naturalHeight: i.naturalHeight}))",
        returnByValue=True,
    )
    report.images = imgs["result"]["value"]
    layout = cdp.call(
        "Runtime.evaluate",
        expression="(() => { const b = document.body, s = getComputedStyle(b);"
        " const edge = b.getBoundingClientRect().right - parseFloat(s.paddingRight);"
        " return {page: document.documentElement.scrollWidth, wide: Array.from("
        "document.querySelectorAll('table')).filter(t => t.getBoundingClientRect().right > edge"
        " + 1).map(t => t.rows[0].cells[0].textContent)}; })()",
        returnByValue=True,
    )["result"]["value"]
    report.page_width, report.wide_tables = layout["page"], layout["wide"]
    metrics = cdp.call("Page.getLayoutMetrics")
    size = metrics.get("cssContentSize") or metrics["contentSize"]
    shot = cdp.call(
        "Page.captureScreenshot",
        format="png",
        captureBeyondViewport=True,
        clip={
            "x": 0,
            "y": 0,
            "width": 1280,
            "height": min(float(size["height"]), 16000.0),
            "scale": 1,
        },
    )
    screenshot.write_bytes(base64.b64decode(shot["data"]))
    for ev in cdp.events:
        method = ev.get("method")
        params = ev.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            report.console_errors.append(
                "console: "
                + " ".join(
                    str(a.get("value", a.get("description"))) for a in params.get("args", [])
                )
            )
        elif method == "Runtime.exceptionThrown":
            report.console_errors.append("exception: " + str(params.get("exceptionDetails")))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            report.console_errors.append(f"log: {entry.get('text')} {entry.get('url', '')}")
        elif method == "Network.loadingFailed":
            report.console_errors.append(f"network: {params.get('errorText')}")
    return report
