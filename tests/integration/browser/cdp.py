"""
A few DevTools-protocol calls to Debian's headless Chromium, enough to open a
page, run JavaScript in it and take a screenshot (the monitoring page's test,
tests/integration/browser/test_monitor_page.py, and scripts/monitor-screenshot.sh).

Chromium runs headless without a sandbox (tests run as root), with a new
empty profile, no network of its own (no component updates, no sync, no
QUIC) and the DevTools port on 127.0.0.1 chosen by Chromium itself.
Needs the Debian packages chromium and python3-websocket (scripts/deps.sh).
"""
import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request

import websocket

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--remote-debugging-address=127.0.0.1",
         "--remote-debugging-port=0"]


class Browser:
    """One headless Chromium with one page; close() ends it and removes its profile."""

    def __init__(self, width=1400, height=1250, timeout=30):
        self.profile = tempfile.mkdtemp(prefix="sable-chromium-")
        self.log = open(os.path.join(self.profile, "chromium.log"), "w+b")
        self.proc = subprocess.Popen([CHROMIUM] + FLAGS + ["--user-data-dir=" + self.profile,
                                      "--window-size=%d,%d" % (width, height), "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=self.log,
                                     stdin=subprocess.DEVNULL)
        self.ws = None
        self.next_id = 0
        try:
            port = self._devtools_port(timeout)
            targets = json.load(urllib.request.urlopen("http://127.0.0.1:%d/json/list" % port,
                                                       timeout=10))
            page = next(t for t in targets if t.get("type") == "page")
            self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=timeout,
                                                  suppress_origin=True)
            self.call("Page.enable")
            self.call("Runtime.enable")
            self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                      deviceScaleFactor=1, mobile=False)
        except BaseException:
            self.close()
            raise

    def _devtools_port(self, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            self.log.seek(0)
            m = re.search(rb"DevTools listening on ws://127\.0\.0\.1:(\d+)/", self.log.read())
            if m:
                return int(m.group(1))
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.log.seek(0)
        raise RuntimeError("chromium did not start: " + self.log.read()[-2000:].decode(errors="replace"))

    def call(self, method, **params):
        """Send one DevTools command and return its result (events in between are skipped)."""
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError("%s: %s" % (method, msg["error"]))
                return msg.get("result", {})

    def open(self, url):
        self.call("Page.navigate", url=url)

    def eval(self, expression):
        """The value of a JavaScript expression in the page (JSON-able), or None."""
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                      awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError("page script failed: %s" % r["exceptionDetails"])
        return r.get("result", {}).get("value")

    def wait_for(self, expression, timeout=30, interval=0.2):
        """Evaluate expression until it is truthy; returns its value."""
        deadline = time.time() + timeout
        while True:
            v = self.eval(expression)
            if v:
                return v
            if time.time() > deadline:
                raise TimeoutError("page never satisfied: " + expression)
            time.sleep(interval)

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=False)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path

    def close(self):
        try:
            if self.ws is not None:
                self.ws.close()
        finally:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            self.log.close()
            shutil.rmtree(self.profile, ignore_errors=True)
