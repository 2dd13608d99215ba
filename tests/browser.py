"""Open a page in headless Chromium and report what a person would see go wrong: console
errors, uncaught exceptions, resources that failed to load; with the page's charts measured
and a screenshot taken. Driven over the DevTools protocol with a small WebSocket client from
the standard library, so the tests need nothing but the browser."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--remote-debugging-port=0")
TIMEOUT_S = 60.0


def find_browser() -> str | None:
    return next((path for path in map(shutil.which, BROWSERS) if path), None)


class WebSocket:
    """Just enough of RFC 6455 for the DevTools protocol: text frames, masked from us."""

    def __init__(self, url: str):
        parsed = urlparse(url)
        self._sock = socket.create_connection((parsed.hostname, parsed.port), TIMEOUT_S)
        key = base64.b64encode(os.urandom(16)).decode()
        self._sock.sendall((f"GET {parsed.path} HTTP/1.1\r\nHost: {parsed.netloc}\r\n"
                            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
                            ).encode())
        self._buffer = bytearray()
        while b"\r\n\r\n" not in self._buffer:
            self._fill()
        head, _, rest = bytes(self._buffer).partition(b"\r\n\r\n")
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise ConnectionError(f"no WebSocket upgrade: {head[:200]!r}")
        self._buffer = bytearray(rest)

    def _fill(self) -> None:
        chunk = self._sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("the browser closed the connection")
        self._buffer += chunk

    def _read(self, count: int) -> bytes:
        while len(self._buffer) < count:
            self._fill()
        data = bytes(self._buffer[:count])
        del self._buffer[:count]
        return data

    def _frame(self, opcode: int, payload: bytes) -> None:
        size = len(payload)
        if size < 126:
            header = bytes([0x80 | opcode, 0x80 | size])
        elif size < 1 << 16:
            header = bytes([0x80 | opcode, 0x80 | 126]) + size.to_bytes(2, "big")
        else:
            header = bytes([0x80 | opcode, 0x80 | 127]) + size.to_bytes(8, "big")
        mask = os.urandom(4)
        self._sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in
                                                 enumerate(payload)))

    def send(self, text: str) -> None:
        self._frame(0x1, text.encode())

    def recv(self) -> str:
        message = bytearray()
        while True:
            first, second = self._read(2)
            size = second & 0x7F
            if size == 126:
                size = int.from_bytes(self._read(2), "big")
            elif size == 127:
                size = int.from_bytes(self._read(8), "big")
            mask = self._read(4) if second & 0x80 else None
            data = self._read(size)
            if mask:
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
            opcode = first & 0x0F
            if opcode == 0x8:
                raise ConnectionError("the browser closed the WebSocket")
            if opcode == 0x9:  # ping
                self._frame(0xA, data)
                continue
            message += data
            if first & 0x80:
                return message.decode()

    def close(self) -> None:
        self._sock.close()


class DevTools:
    """Calls and events of one page target."""

    def __init__(self, socket_url: str):
        self._ws = WebSocket(socket_url)
        self._next = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._next += 1
        self._ws.send(json.dumps({"id": self._next, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv())
            if message.get("id") == self._next:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def wait_for(self, event: str) -> dict[str, Any]:
        while True:
            found = next((e for e in self.events if e.get("method") == event), None)
            if found is not None:
                return found
            self.events.append(json.loads(self._ws.recv()))

    def close(self) -> None:
        self._ws.close()


@dataclass
class PageCheck:
    problems: list[str] = field(default_factory=list)  # console errors, exceptions, failed loads
    charts: list[dict[str, Any]] = field(default_factory=list)  # id, width, height, marks
    title: str = ""
    text: str = ""
    screenshot: Path | None = None


def check_page(browser: str, page: Path, profile_dir: Path, screenshot: Path | None = None,
               width: int = 1100) -> PageCheck:
    """Load `page` in a fresh headless browser (its profile in `profile_dir`) and report."""
    process = subprocess.Popen([browser, *FLAGS, f"--user-data-dir={profile_dir}",
                                "about:blank"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        tools = DevTools(_page_socket(profile_dir, process))
        try:
            return _inspect(tools, page, screenshot, width)
        finally:
            tools.close()
    finally:
        process.kill()
        process.wait(30)


def _page_socket(profile_dir: Path, process: subprocess.Popen) -> str:
    port_file = profile_dir / "DevToolsActivePort"
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the browser exited with status {process.returncode}")
        if port_file.is_file() and port_file.read_text().strip():
            port = int(port_file.read_text().split()[0])
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list",
                                        timeout=TIMEOUT_S) as answer:
                targets = json.load(answer)
            pages = [t for t in targets if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
        time.sleep(0.1)
    raise TimeoutError("the browser did not open its DevTools port")


def _inspect(tools: DevTools, page: Path, screenshot: Path | None, width: int) -> PageCheck:
    for domain in ("Page", "Runtime", "Log"):
        tools.call(f"{domain}.enable")
    tools.call("Emulation.setDeviceMetricsOverride", width=width, height=1400,
               deviceScaleFactor=1, mobile=False)
    tools.call("Page.navigate", url=page.resolve().as_uri())
    tools.wait_for("Page.loadEventFired")
    tools.call("Runtime.evaluate", expression="new Promise(r => setTimeout(r, 300))",
               awaitPromise=True)
    check = PageCheck()
    charts = tools.call("Runtime.evaluate", returnByValue=True, expression="""
        [...document.querySelectorAll('svg.chart')].map(s => {
            const r = s.getBoundingClientRect();
            return {id: s.id, width: r.width, height: r.height,
                    marks: s.querySelectorAll('circle,rect,polygon,line').length,
                    titles: s.querySelectorAll('title').length};
        })""")
    check.charts = charts["result"]["value"]
    check.title = tools.call("Runtime.evaluate", expression="document.title",
                             returnByValue=True)["result"]["value"]
    check.text = tools.call("Runtime.evaluate", expression="document.body.innerText",
                            returnByValue=True)["result"]["value"]
    if screenshot is not None:
        shot = tools.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        screenshot.write_bytes(base64.b64decode(shot["data"]))
        check.screenshot = screenshot
    for event in tools.events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert",
                                                                           "warning"):
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in
                            params.get("args", []))
            check.problems.append(f"console.{params['type']}: {text}")
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            text = details.get("exception", {}).get("description") or details.get("text")
            check.problems.append(f"exception: {text}")
        elif method == "Log.entryAdded" and params["entry"].get("level") in ("error",
                                                                            "warning"):
            entry = params["entry"]
            check.problems.append(f"{entry.get('source')} {entry['level']}: "
                                  f"{entry.get('text')} {entry.get('url', '')}".rstrip())
    return check
