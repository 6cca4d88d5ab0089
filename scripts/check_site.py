"""Check the built documentation site in headless Chromium: pages render, with no console errors
and no missing images, and save a screenshot of each.

Usage (after ``make docs``; Chromium from Debian's ``chromium`` package, ``apt-get install chromium``)::

    python scripts/check_site.py                      # docs/_build/html, screenshots in site-check/
    python scripts/check_site.py --site DIR --out DIR --chromium /usr/bin/chromium

It opens four pages, each through the Chrome DevTools protocol (a WebSocket client from tornado,
already a dependency through dask.distributed): the index, one API page, one gallery page and one
results page. A page fails when the browser reports a console error or an uncaught exception, a
resource fails to load (a script, a stylesheet, MathJax, an image), an ``<img>`` is not decoded
(``naturalWidth == 0``), or the page's math was not typeset by MathJax. The screenshots
(full page, 1280 px wide) are written as ``<out>/<name>.png``. Exit code 0 when every page
passes, 1 when one fails, 2 on bad usage (no site, no Chromium).
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: (name, page relative to the site, what must be on it: CSS selector -> minimum count)
PAGES = [
    ("index", "index.html", {"img, table": 1}),
    ("api", "api/generated/rieszflow.engine.simulate.mala.html",
     {"mjx-container": 1, "dl.py.function": 1}),
    ("gallery", "auto_examples/log_gas_mala_semicircle.html",
     {"img.sphx-glr-single-img, img.sphx-glr-multi-img": 1, "div.highlight-Python, div.highlight-python": 1,
      "mjx-container": 1}),
    ("results", "results/mean_field_quick.html", {"h1": 1, "div.highlight pre, table": 1}),
]


def _start_chromium(chromium: str, profile: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--no-default-browser-check", "--allow-file-access-from-files", "--remote-debugging-port=0",
         f"--user-data-dir={profile}", "--window-size=1280,900", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    port_file = Path(profile) / "DevToolsActivePort"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if port_file.exists() and len(port_file.read_text().split()) >= 2:
            port, path = port_file.read_text().split()[:2]
            return proc, f"ws://127.0.0.1:{port}{path}"
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited with code {proc.returncode} before it listened")
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("chromium did not open its DevTools port within 60 s")


class _CDP:
    """A minimal Chrome DevTools protocol session over one browser WebSocket (flat sessions)."""

    def __init__(self, ws):
        self.ws, self.next_id, self.pending, self.events = ws, 0, {}, []

    @classmethod
    async def connect(cls, url):
        from tornado.websocket import websocket_connect

        self = cls(await websocket_connect(url, max_message_size=512 * 1024 * 1024))
        asyncio.ensure_future(self._reader())
        return self

    async def _reader(self):
        while True:
            msg = await self.ws.read_message()
            if msg is None:
                return
            data = json.loads(msg)
            if "id" in data and data["id"] in self.pending:
                self.pending.pop(data["id"]).set_result(data)
            else:
                self.events.append(data)

    async def send(self, method, params=None, session=None, timeout=60):
        self.next_id += 1
        fut = asyncio.get_running_loop().create_future()
        self.pending[self.next_id] = fut
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        await self.ws.write_message(json.dumps(msg))
        data = await asyncio.wait_for(fut, timeout)
        if "error" in data:
            raise RuntimeError(f"{method}: {data['error']}")
        return data.get("result", {})


_PAGE_STATE = """(() => {
  const imgs = Array.from(document.images);
  return JSON.stringify({
    title: document.title,
    broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src')),
    images: imgs.length,
    mathjax: typeof window.MathJax !== 'undefined' && !!window.MathJax.startup,
    unrendered_math: document.querySelectorAll('.math:not(:has(mjx-container))').length,
    counts: Object.fromEntries(SELECTORS.map(s => [s, document.querySelectorAll(s).length])),
    height: Math.max(document.body.scrollHeight, document.documentElement.scrollHeight),
  });
})()"""


async def _check_page(cdp, site: Path, out: Path, name: str, rel: str, need: dict) -> list[str]:
    target = await cdp.send("Target.createTarget", {"url": "about:blank"})
    session = (await cdp.send("Target.attachToTarget", {"targetId": target["targetId"],
                                                        "flatten": True}))["sessionId"]
    for domain in ("Page", "Runtime", "Log", "Network"):
        await cdp.send(f"{domain}.enable", session=session)
    await cdp.send("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": 900,
                                                          "deviceScaleFactor": 1, "mobile": False},
                   session=session)
    start = len(cdp.events)
    url = (site / rel).resolve().as_uri()
    await cdp.send("Page.navigate", {"url": url}, session=session)
    problems: list[str] = []
    deadline = time.monotonic() + 60
    while not any(e.get("method") == "Page.loadEventFired" and e.get("sessionId") == session
                  for e in cdp.events[start:]):
        if time.monotonic() > deadline:
            return [f"{name}: the page did not finish loading within 60 s"]
        await asyncio.sleep(0.1)
    expr = _PAGE_STATE.replace("SELECTORS", json.dumps(list(need)))
    for _ in range(100):                          # MathJax typesets after the load event
        state = json.loads((await cdp.send("Runtime.evaluate", {"expression": expr, "returnByValue": True},
                                           session=session))["result"]["value"])
        if state["unrendered_math"] == 0 and not state["broken"]:
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)                        # late console messages
    urls = {e["params"]["requestId"]: e["params"]["request"]["url"] for e in cdp.events[start:]
            if e.get("method") == "Network.requestWillBeSent" and e.get("sessionId") == session}
    for e in cdp.events[start:]:
        if e.get("sessionId") != session:
            continue
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            problems.append("console error: " + " ".join(str(a.get("value", a.get("description", "")))
                                                         for a in p.get("args", [])))
        elif m == "Runtime.exceptionThrown":
            problems.append("uncaught exception: " + p["exceptionDetails"].get("text", "")
                            + " " + str(p["exceptionDetails"].get("exception", {}).get("description", "")))
        elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
            problems.append(f"browser log error: {p['entry'].get('text')} {p['entry'].get('url', '')}")
        elif m == "Network.loadingFailed" and not p.get("canceled"):
            problems.append(f"failed to load: {urls.get(p.get('requestId'), '?')} ({p.get('errorText')})")
    if not Path(url.removeprefix("file://")).exists():
        problems.append(f"no such page: {rel}")
    problems += [f"image not loaded: {src}" for src in state["broken"]]
    if state["unrendered_math"]:
        problems.append(f"{state['unrendered_math']} math element(s) not typeset by MathJax")
    for selector, minimum in need.items():
        if state["counts"][selector] < minimum:
            problems.append(f"expected at least {minimum} of {selector!r}, found {state['counts'][selector]}")
    height = min(int(state["height"]), 8000)
    await cdp.send("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": height,
                                                          "deviceScaleFactor": 1, "mobile": False},
                   session=session)
    shot = await cdp.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True},
                          session=session)
    (out / f"{name}.png").write_bytes(base64.b64decode(shot["data"]))
    print(f"{name:8s} {rel}: {state['images']} images, "
          f"{sum(state['counts'].values())} required elements, title {state['title']!r} -> "
          f"{'ok' if not problems else 'FAILED'}; screenshot {out / (name + '.png')}")
    await cdp.send("Target.closeTarget", {"targetId": target["targetId"]})
    return [f"{name}: {p}" for p in problems]


async def _run(ws_url, site, out, pages):
    cdp = await _CDP.connect(ws_url)
    problems = []
    for name, rel, need in pages:
        problems += await _check_page(cdp, site, out, name, rel, need)
    cdp.ws.close()
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--site", type=Path, default=ROOT / "docs" / "_build" / "html",
                    help="the built site (default: docs/_build/html, from make docs)")
    ap.add_argument("--out", type=Path, default=ROOT / "site-check",
                    help="folder for the screenshots (default: site-check/)")
    ap.add_argument("--chromium", default=None, help="the browser (default: chromium on PATH)")
    args = ap.parse_args(argv)
    chromium = args.chromium or shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("error: --chromium: no chromium on PATH; install Debian's chromium package "
              "(apt-get install chromium) or pass --chromium PATH", file=sys.stderr)
        return 2
    if not (args.site / "index.html").is_file():
        print(f"error: --site: {args.site} has no index.html; build the site first (make docs)",
              file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rf-chromium-") as profile:
        proc, ws_url = _start_chromium(chromium, profile)
        try:
            problems = asyncio.run(_run(ws_url, args.site.resolve(), args.out, PAGES))
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    for p in problems:
        print(p, file=sys.stderr)
    print(f"{len(PAGES)} pages checked: {'all passed' if not problems else f'{len(problems)} problem(s)'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
