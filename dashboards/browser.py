"""A small headless-Chromium driver: open a page, inspect its Plotly plots, take a screenshot.

Talks the Chrome DevTools Protocol over ``--remote-debugging-pipe`` (JSON messages ended
by NUL on file descriptors 3 and 4), so it needs nothing but the Python standard library
and Debian's ``chromium``. Used by the dashboard tests and to refresh the screenshots in
``docs/img/``:

    python -m dashboards.browser out/index.html docs/img/report-index.png
"""

from __future__ import annotations

import base64
import json
import os
import queue
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--disable-extensions",
    "--hide-scrollbars",
    "--mute-audio",
    # WebGL through the CPU rasteriser: Plotly's parallel coordinates draw with WebGL
    "--enable-unsafe-swiftshader",
    "--use-angle=swiftshader",
    "--remote-debugging-pipe",
]

#: what a page's plots look like from inside: one entry per Plotly div
PLOTS_JS = """
(() => {
  const plots = [...document.querySelectorAll('.js-plotly-plot')];
  return plots.map(p => {
    const data = p._fullData || [];
    let points = 0;
    for (const t of data) {
      const arr = t.x || t.y || t.values || t.cells || (t.dimensions && t.dimensions[0] && t.dimensions[0].values) || [];
      points += (arr.length || 0);
    }
    return {
      id: p.id,
      traces: data.length,
      points: points,
      main_svg: p.querySelectorAll('.main-svg').length,
      marks: p.querySelectorAll('.point, .bars path, .boxlayer path, .trace path, .scatterlayer path, canvas, .parcoords-line-layers').length,
      webgl_error: !!p.querySelector('.no-webgl') || /WebGL is not supported/i.test(p.textContent),
      height: p.getBoundingClientRect().height,
    };
  });
})()
"""


class BrowserError(RuntimeError):
    pass


def find_chromium() -> str:
    for cand in (os.environ.get("CHROMIUM"), *CHROMIUM_CANDIDATES, shutil.which("chromium")):
        if cand and os.path.exists(cand):
            return cand
    raise BrowserError("Chromium not found: run .ci/install-browser.sh (Debian package 'chromium')")


class Chromium:
    """One headless Chromium process and one page, driven over the DevTools pipe."""

    def __init__(self, width: int = 1400, height: int = 900, timeout: float = 60.0) -> None:
        self.width, self.height, self.timeout = width, height, timeout
        self.exe = find_chromium()
        self.profile = tempfile.mkdtemp(prefix="tuner-chromium-")
        self.log_path = os.path.join(self.profile, "chromium.log")
        self._events: list[dict] = []
        self._replies: dict[int, dict] = {}
        self._queue: queue.Queue = queue.Queue()
        self._next_id = 0
        self._lock = threading.Lock()
        self._start()

    # -- process and pipe ------------------------------------------------------------
    def _start(self) -> None:
        to_chrome_r, to_chrome_w = os.pipe()
        from_chrome_r, from_chrome_w = os.pipe()
        # keep our ends above the descriptors the child gets (3, 4) so the dup2s can't collide
        hi = [os.dup2(fd, 100 + i, inheritable=False) for i, fd in
              enumerate((to_chrome_r, to_chrome_w, from_chrome_r, from_chrome_w))]
        for fd in (to_chrome_r, to_chrome_w, from_chrome_r, from_chrome_w):
            os.close(fd)
        to_chrome_r, self._wfd, self._rfd, from_chrome_w = hi
        log_fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null_fd = os.open(os.devnull, os.O_RDONLY)
        args = [self.exe, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}",
                f"--window-size={self.width},{self.height}", "about:blank"]
        actions = [
            (os.POSIX_SPAWN_DUP2, null_fd, 0),
            (os.POSIX_SPAWN_DUP2, log_fd, 1),
            (os.POSIX_SPAWN_DUP2, log_fd, 2),
            (os.POSIX_SPAWN_DUP2, to_chrome_r, 3),
            (os.POSIX_SPAWN_DUP2, from_chrome_w, 4),
        ]
        try:
            self.pid = os.posix_spawn(self.exe, args, os.environ.copy(), file_actions=actions)
        finally:
            for fd in (to_chrome_r, from_chrome_w, log_fd, null_fd):
                os.close(fd)
        self._reader = threading.Thread(target=self._read_loop, daemon=True)
        self._reader.start()
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for method in ("Page.enable", "Runtime.enable", "Log.enable"):
            self.call(method, session=self.session)
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False},
                  session=self.session)

    def _read_loop(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._rfd, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                self._queue.put(None)
                return
            buf += chunk
            while b"\0" in buf:
                msg, buf = buf.split(b"\0", 1)
                self._queue.put(json.loads(msg))

    def _pump(self, deadline: float) -> bool:
        try:
            msg = self._queue.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            return False
        if msg is None:
            raise BrowserError(f"Chromium exited; its log:\n{self.log_tail()}")
        if "id" in msg:
            self._replies[msg["id"]] = msg
        else:
            self._events.append(msg)
        return True

    def call(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float | None = None) -> dict:
        with self._lock:
            self._next_id += 1
            mid = self._next_id
        msg: dict[str, Any] = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._wfd, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + (timeout or self.timeout)
        while mid not in self._replies:
            if time.monotonic() > deadline:
                raise BrowserError(f"no reply to {method} within {timeout or self.timeout} s")
            self._pump(deadline)
        reply = self._replies.pop(mid)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_event(self, method: str, timeout: float | None = None) -> dict:
        deadline = time.monotonic() + (timeout or self.timeout)
        seen = 0
        while True:
            for ev in self._events[seen:]:
                if ev.get("method") == method:
                    self._events.remove(ev)
                    return ev
            seen = len(self._events)
            if time.monotonic() > deadline:
                raise BrowserError(f"no {method} within {timeout or self.timeout} s")
            self._pump(deadline)

    # -- page --------------------------------------------------------------------------
    def open(self, url_or_path: str | Path, settle_s: float = 1.0) -> None:
        url = str(url_or_path)
        if "://" not in url:
            url = Path(url).resolve().as_uri()
        self._events.clear()
        self.call("Page.navigate", {"url": url}, session=self.session)
        self.wait_event("Page.loadEventFired")
        self.wait_for_plots(settle_s)

    def evaluate(self, expression: str) -> Any:
        res = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                             "awaitPromise": True}, session=self.session)
        if "exceptionDetails" in res:
            raise BrowserError(f"evaluate failed: {res['exceptionDetails']}")
        return res["result"].get("value")

    def wait_for_plots(self, settle_s: float = 1.0) -> list[dict]:
        """Wait until every Plotly div has drawn (stable counts), return what :data:`PLOTS_JS` sees."""
        deadline = time.monotonic() + self.timeout
        last = None
        stable_since = time.monotonic()
        while time.monotonic() < deadline:
            plots = self.evaluate(PLOTS_JS)
            if plots != last:
                last, stable_since = plots, time.monotonic()
            else:
                # a plot that never draws (a broken page) is reported after a longer quiet spell
                need = settle_s if all(p["main_svg"] for p in plots) else max(settle_s, 3.0)
                if time.monotonic() - stable_since >= need:
                    return plots
            self._drain(0.2)
        return last or []

    def _drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if not self._pump(deadline):
                break

    def plots(self) -> list[dict]:
        return self.evaluate(PLOTS_JS)

    def errors(self) -> list[str]:
        """JavaScript exceptions and console errors the page produced since it was opened."""
        self._drain(0.1)
        out = []
        for ev in self._events:
            m, p = ev.get("method"), ev.get("params", {})
            if m == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append("exception: " + str(d.get("exception", {}).get("description") or d.get("text")))
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console.error: " + " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append("log: " + p["entry"].get("text", ""))
        return out

    def screenshot(self, path: str | Path, max_height: int = 2600) -> Path:
        """A PNG of the page from the top, as tall as its content (up to ``max_height``)."""
        metrics = self.call("Page.getLayoutMetrics", session=self.session)
        size = metrics.get("cssContentSize") or metrics.get("contentSize")
        height = int(min(max_height, max(self.height, size["height"])))
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": self.width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                  session=self.session)
        self._drain(0.8)  # let responsive plots re-layout to the new viewport
        shot = self.call("Page.captureScreenshot", {"format": "png", "clip": {
            "x": 0, "y": 0, "width": self.width, "height": height, "scale": 1}}, session=self.session)
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False},
                  session=self.session)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(Path(self.log_path).read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5)
        except Exception:
            pass
        for _ in range(50):
            pid, _status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                break
            time.sleep(0.1)
        else:
            os.kill(self.pid, 9)
            os.waitpid(self.pid, 0)
        for fd in (self._wfd, self._rfd):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m dashboards.browser PAGE.html OUT.png", file=sys.stderr)
        return 2
    with Chromium() as browser:
        browser.open(argv[0])
        plots = browser.plots()
        browser.screenshot(argv[1])
        errors = browser.errors()
    print(f"{len(plots)} plots, {sum(p['points'] for p in plots)} points; errors: {errors or 'none'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
