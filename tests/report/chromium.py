"""Open a page in real headless Chromium (Debian's /usr/bin/chromium) and talk to it over the
DevTools protocol on a pipe (--remote-debugging-pipe: NUL-terminated JSON on fds 3 and 4), so
no websocket client or browser download is needed."""

import base64
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


class PageErrors(AssertionError):
    pass


def _above_four(fd: int) -> int:
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


class Chromium:
    def __init__(self, width: int = 1400, height: int = 1000) -> None:
        self._profile = tempfile.mkdtemp(prefix="rigbench-chromium-")
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        # Chromium reads commands on fd 3 and writes replies on fd 4: bash moves the
        # pipe's ends there (no preexec_fn: a fork hook, which JAX, once imported, warns of),
        # from numbers above 4 so that neither move overwrites the other's source.
        to_chrome_r, from_chrome_w = (_above_four(fd) for fd in (to_chrome_r, from_chrome_w))
        self.proc = subprocess.Popen(
            [
                "bash", "-c", f'exec "$0" "$@" 3<&{to_chrome_r} 4>&{from_chrome_w}',
                CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", "--remote-debugging-pipe",
                f"--user-data-dir={self._profile}", f"--window-size={width},{height}",
                "about:blank",
            ],
            pass_fds=(to_chrome_r, from_chrome_w),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.session = self._attach()

    # -- protocol ----------------------------------------------------------------------------

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("Chromium sent nothing in time")
            chunk = os.read(self._from_chrome, 1 << 16)
            if not chunk:
                raise RuntimeError(f"Chromium closed the pipe (exit code {self.proc.poll()})")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return dict(json.loads(message))

    def send(
        self, method: str, params: dict[str, Any] | None = None, *, session: bool = True,
        timeout: float = 60.0,
    ) -> dict[str, Any]:  # fmt: skip
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return dict(reply.get("result", {}))
            self.events.append(reply)

    def wait_event(self, method: str, since: int = 0, timeout: float = 60.0) -> dict[str, Any]:
        """The first `method` event at or after index `since` of `events`, waiting for it."""
        for event in self.events[since:]:
            if event.get("method") == method:
                return event
        deadline = time.monotonic() + timeout
        while True:
            event = self._read_message(deadline)
            self.events.append(event)
            if event.get("method") == method:
                return event

    def _attach(self) -> str:
        self.session = ""
        targets = self.send("Target.getTargets", session=False)["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        attached = self.send(
            "Target.attachToTarget", {"targetId": page["targetId"], "flatten": True},
            session=False,
        )  # fmt: skip
        return str(attached["sessionId"])

    # -- what tests use ----------------------------------------------------------------------

    def open(self, path: Path, timeout: float = 120.0) -> None:
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        since = len(self.events)
        self.send("Page.navigate", {"url": path.resolve().as_uri()})
        self.wait_event("Page.loadEventFired", since=since, timeout=timeout)

    def evaluate(self, expression: str) -> Any:
        result = self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries seen so far."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                found.append(f"exception: {details.get('exception', {}).get('description')}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(f"console.{params['type']}: {params.get('args')}")
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                found.append(f"log: {params['entry'].get('text')} {params['entry'].get('url')}")
        return found

    def screenshot(self, out: Path, width: int = 1400) -> Path:
        height = int(self.evaluate("document.documentElement.scrollHeight"))
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        time.sleep(1.0)  # let plotly's responsive layout settle at the new size
        shot = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
        out.write_bytes(base64.b64decode(shot["data"]))
        return out

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            self.send("Browser.close", session=False, timeout=10)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=15)
        for fd in (self._to_chrome, self._from_chrome):
            with contextlib.suppress(OSError):
                os.close(fd)
        shutil.rmtree(self._profile, ignore_errors=True)
