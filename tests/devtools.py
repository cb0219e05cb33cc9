"""Drive the dashboard in a real headless Chromium, for the end-to-end test and the benchmark.

No Streamlit import and no new dependency: the Chrome DevTools Protocol spoken over
the ``websockets`` package that Streamlit already installs.

    with serve_app(port) as url, Browser() as browser:
        browser.goto(url)
        browser.wait_rendered()
        browser.screenshot("page.png")

Every process started here (the Streamlit server, Chromium and their children) runs
in its own process group and is ended, group and all, on exit; the server and the
browser also get SIGTERM if the process that started them dies (PR_SET_PDEATHSIG).
"""
from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # tests/ -> the repository
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-extensions", "--mute-audio",
         "--hide-scrollbars", "--window-size=1400,1000"]

# JavaScript: is the Streamlit page idle with every image loaded? (and how many images)
JS_IDLE = """(() => {
  const running = document.querySelector('[data-testid="stStatusWidget"]');
  const app = document.querySelector('[data-testid="stAppViewContainer"]');
  const imgs = [...document.querySelectorAll('[data-testid="stMain"] img')];
  const stale = document.querySelector('[data-stale="true"]');
  const loaded = imgs.length > 0 && imgs.every(i => i.complete && i.naturalWidth > 0);
  return {ready: !!app && !running && !stale && loaded, images: imgs.length,
          srcs: imgs.map(i => i.src.slice(-40))};
})()"""


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the process that started it dies (Linux),
    so a test runner killed without clean-up leaves no server or browser behind."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def group_alive(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group ``pgid``."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                fields = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(d))
    return out


def end_group(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM the process group, SIGKILL what is left after ``grace_s``; reap the leader."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if proc.poll() is not None and not group_alive(proc.pid):
                return
            time.sleep(0.1)


def _get(url: str, timeout: float = 2.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 (127.0.0.1 only)
        return r.read()


@contextlib.contextmanager
def serve_app(port: int | None = None, env: dict | None = None, timeout_s: float = 60.0):
    """Run ``streamlit run app.py`` on 127.0.0.1; yields (url, seconds until healthy, process)."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.port", str(port),
           "--server.address", "127.0.0.1", "--server.headless", "true",
           "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"]
    log = tempfile.TemporaryFile()
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **(env or {})}, stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=_die_with_parent)
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"streamlit exited with {proc.returncode}: {log.read()[-2000:]!r}")
            with contextlib.suppress(OSError):
                if _get(url + "/_stcore/health") == b"ok":
                    break
            if time.monotonic() - t0 > timeout_s:
                raise TimeoutError(f"streamlit was not healthy within {timeout_s} s")
            time.sleep(0.05)
        yield url, time.monotonic() - t0, proc
    finally:
        end_group(proc)
        log.close()


class Browser:
    """A headless Chromium with one page, driven over the DevTools protocol."""

    def __init__(self, executable: str = CHROMIUM, timeout_s: float = 30.0):
        self.profile = tempfile.mkdtemp(prefix="ddpsim-chromium-")
        self.proc = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={self.profile}", "--remote-debugging-port=0",
             "--remote-debugging-address=127.0.0.1", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
            env={**os.environ, "TMPDIR": self.profile},  # its org.chromium.* folders go with the profile
            start_new_session=True, preexec_fn=_die_with_parent)
        self._ids = itertools.count(1)
        try:
            port = self._devtools_port(timeout_s)
            targets = json.loads(_get(f"http://127.0.0.1:{port}/json/list"))
            page = next(t for t in targets if t.get("type") == "page")
            # imported here: test_record_torchrun imports this module on a box without Streamlit
            from websockets.sync.client import connect

            self.ws = connect(page["webSocketDebuggerUrl"], max_size=64 * 2**20, open_timeout=timeout_s,
                              legacy=True)
            self.call("Page.enable")
            self.call("Runtime.enable")
            self.call("Emulation.setDeviceMetricsOverride",
                      {"width": 1400, "height": 1000, "deviceScaleFactor": 1, "mobile": False})
        except BaseException:
            self.close()
            raise

    def _devtools_port(self, timeout_s: float) -> int:
        path = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}")
            with contextlib.suppress(OSError, ValueError, IndexError):
                return int(path.read_text().split()[0])
            time.sleep(0.05)
        raise TimeoutError("chromium did not open its DevTools port")

    def call(self, method: str, params: dict | None = None, timeout_s: float = 30.0) -> dict:
        msg_id = next(self._ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params or {}}))
        deadline = time.monotonic() + timeout_s
        while True:
            reply = json.loads(self.ws.recv(timeout=max(0.01, deadline - time.monotonic())))
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def eval(self, expression: str):
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                           "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError(f"javascript failed: {r['exceptionDetails'].get('text')}")
        return r["result"].get("value")

    def goto(self, url: str) -> None:
        self.call("Page.navigate", {"url": url})

    def wait_for(self, expression: str, timeout_s: float = 30.0, poll_s: float = 0.02):
        """Poll ``expression`` until it is truthy; returns its value."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.eval(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout_s} s waiting for {expression[:80]}")
            time.sleep(poll_s)

    def state(self) -> dict:
        return self.eval(JS_IDLE)

    def wait_rendered(self, min_images: int = 1, changed_from: list | None = None,
                      timeout_s: float = 30.0, settle_s: float = 0.15) -> dict:
        """Wait until the app is idle, ``min_images`` images have loaded (different from
        ``changed_from`` if given), and it stays so for ``settle_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            s = self.state()
            if s["ready"] and s["images"] >= min_images and (changed_from is None or s["srcs"] != changed_from):
                time.sleep(settle_s)
                again = self.state()
                if again["ready"] and again["srcs"] == s["srcs"]:
                    return again
            if time.monotonic() > deadline:
                raise TimeoutError(f"the page did not finish rendering within {timeout_s} s: {s}")
            time.sleep(0.02)

    def click_label(self, label: str) -> None:
        """Click the checkbox, toggle or radio option whose label contains ``label``."""
        ok = self.eval(f"""(() => {{
          for (const l of document.querySelectorAll('label')) {{
            if (l.innerText.includes({json.dumps(label)})) {{
              const i = l.querySelector('input') || l; i.click(); return true; }}
          }}
          return false; }})()""")
        if not ok:
            raise LookupError(f"no checkbox, toggle or radio labelled {label!r} on the page")

    def click_js(self, element_js: str) -> None:
        """A real (trusted) mouse click at the centre of the element ``element_js`` evaluates to."""
        box = self.eval(f"""(() => {{ const e = ({element_js}); if (!e) return null;
          e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect();
          return {{x: r.left + r.width / 2, y: r.top + r.height / 2}}; }})()""")
        if not box:
            raise LookupError(f"no element for {element_js[:80]}")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", {"type": kind, "x": box["x"], "y": box["y"],
                                                   "button": "left", "clickCount": 1})

    def choose(self, label: str, option: str, timeout_s: float = 5.0, tries: int = 3) -> None:
        """Pick ``option`` in the selectbox whose label contains ``label`` (open it, click the option),
        and wait until the box holds it with its list closed: a click on a list still moving into place
        can miss, which leaves the list open and the old value (it is then clicked again)."""
        box_js = f"""[...document.querySelectorAll('[data-testid="stSelectbox"]')]
          .find(b => b.innerText.includes({json.dumps(label)}))"""
        option_js = f"""[...document.querySelectorAll('[role="option"]')]
          .find(o => o.innerText.trim() === {json.dumps(option)})"""
        chosen_js = f"""(() => {{ const b = ({box_js}); return !!b && !document.querySelector('[role="option"]')
          && b.querySelector('input')?.value === {json.dumps(option)}; }})()"""
        for attempt in range(tries):
            if not self.eval(f"!!({option_js})"):  # the list is closed: open it
                self.click_js(f"({box_js})?.querySelector('input, [role=\"combobox\"]')")
                self.wait_for(f"!!({option_js})", timeout_s=timeout_s)
            self.click_js(option_js)
            try:
                self.wait_for(chosen_js, timeout_s=timeout_s)
                return
            except TimeoutError:
                if attempt == tries - 1:
                    raise

    def press_key(self, selector: str, key: str = "ArrowRight", index: int = 0) -> None:
        """Focus the ``index``-th element matching ``selector`` and press ``key`` (trusted input)."""
        ok = self.eval(f"""(() => {{ const e = document.querySelectorAll({json.dumps(selector)})[{index}];
          if (!e) return false; if (document.activeElement) document.activeElement.blur();
          e.focus(); return true; }})()""")
        if not ok:
            raise LookupError(f"nothing matches {selector!r} on the page")
        codes = {"ArrowRight": 39, "ArrowLeft": 37, "ArrowUp": 38, "ArrowDown": 40}
        for kind in ("rawKeyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", {"type": kind, "key": key, "code": key,
                                                 "windowsVirtualKeyCode": codes.get(key, 0)})
            time.sleep(0.03)  # like a person: the slider commits its value on key release

    def screenshot(self, path: str | Path, height: int = 1000) -> Path:
        """Save a PNG of the page; a taller ``height`` (CSS px) shows more of a long page."""
        if height != 1000:
            self.call("Emulation.setDeviceMetricsOverride",
                      {"width": 1400, "height": height, "deviceScaleFactor": 1, "mobile": False})
            time.sleep(0.3)
            self.wait_rendered()
        data = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ws.close()
        end_group(self.proc, grace_s=3.0)
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
