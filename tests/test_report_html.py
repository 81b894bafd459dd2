"""The HTML report, rendered from real run databases and opened in headless Chromium.

Chromium is driven over the DevTools protocol through ``--remote-debugging-pipe`` (fd 3/4,
NUL-separated JSON): no port, no websocket package. The harness records console.error calls,
uncaught exceptions, Log errors (CSP violations, failed loads) and JavaScript dialogs (alert),
and a self-test below proves it catches each of them.

Without /usr/bin/chromium these tests skip, unless KPERF_REQUIRE_CHROMIUM=1 (CI), where they fail.
With KPERF_SCREENSHOT_DIR set, the summary screenshot is also written there as
report-summary.png (how docs/img/report-summary.png is made: see test_summary_screenshot).
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from fixtures.sample import synthetic_runs

from kperf_ci import store
from kperf_ci.cli import main

CHROMIUM = "/usr/bin/chromium"
HOSTILE = "<script>alert(1)</script>"
DATA = Path(__file__).parent / "data"

needs_chromium = pytest.mark.skipif(
    not os.path.exists(CHROMIUM) and os.environ.get("KPERF_REQUIRE_CHROMIUM") != "1",
    reason=f"{CHROMIUM} not installed (apt-get install chromium)",
)


class Browser:
    """One headless Chromium page, driven over the DevTools pipe."""

    def __init__(self, width: int = 1280, height: int = 900, timeout: float = 30.0):
        self.timeout, self.width, self.height = timeout, width, height
        self._profile = tempfile.mkdtemp(prefix="kperf-chromium-")
        chrome_in, self._w = os.pipe()  # chromium reads commands on its fd 3
        self._r, chrome_out = os.pipe()  # and writes answers and events on its fd 4

        def child_fds() -> None:  # the pipe ends may already sit on fd 3/4: dup first
            a, b = os.dup(chrome_in), os.dup(chrome_out)
            os.dup2(a, 3)
            os.dup2(b, 4)
            os.set_inheritable(3, True)
            os.set_inheritable(4, True)

        self._proc = subprocess.Popen(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                "--mute-audio",
                f"--user-data-dir={self._profile}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            preexec_fn=child_fds,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=False,
        )
        os.close(chrome_in)
        os.close(chrome_out)
        self._buf = b""
        self._id = 0
        self._events: list[dict] = []
        self._session: str | None = None
        self.errors: list[str] = []  # console errors, exceptions, CSP/network errors
        self.dialogs: list[str] = []  # alert/confirm/prompt, dismissed
        self.requests: list[str] = []  # URLs the page asked for since the last open()
        try:
            targets = self._call("Target.getTargets")["targetInfos"]
            page = next(t for t in targets if t["type"] == "page")
            self._session = self._call("Target.attachToTarget", targetId=page["targetId"], flatten=True)[
                "sessionId"
            ]
            for domain in ("Page", "Runtime", "Log", "Network"):
                self.call(f"{domain}.enable")
            self.call(
                "Emulation.setDeviceMetricsOverride",
                width=width,
                height=height,
                deviceScaleFactor=1,
                mobile=False,
            )
        except BaseException:
            self.close()
            raise

    # -- protocol -------------------------------------------------------------------------
    def _send(self, method: str, params: dict, session: str | None) -> int:
        self._id += 1
        msg: dict = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        return self._id

    def _recv(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            ready, _, _ = select.select([self._r], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        msg = json.loads(raw)
        if "method" in msg:
            self._on_event(msg)
        return msg

    def _on_event(self, msg: dict) -> None:
        m, p = msg["method"], msg.get("params", {})
        if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            self.errors.append(f"console.{p['type']}: {args}")
        elif m == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            self.errors.append(f"exception: {d.get('exception', {}).get('description') or d.get('text', '')}")
        elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            e = p["entry"]
            self.errors.append(f"log.{e.get('source')}: {e.get('text')} {e.get('url', '')}".strip())
        elif m == "Page.javascriptDialogOpening":
            self.dialogs.append(f"{p.get('type')}: {p.get('message')}")
            self._send("Page.handleJavaScriptDialog", {"accept": False}, msg.get("sessionId"))
        elif m == "Network.requestWillBeSent":
            self.requests.append(p["request"]["url"])
        self._events.append(msg)

    def _call(self, method: str, session: str | None = None, **params) -> dict:
        i = self._send(method, params, session)
        deadline = time.monotonic() + self.timeout
        while True:
            msg = self._recv(deadline)
            if msg.get("id") == i:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def call(self, method: str, **params) -> dict:
        return self._call(method, self._session, **params)

    # -- API --------------------------------------------------------------------------------
    def open(self, path: str | Path, settle_s: float = 0.3) -> None:
        """Navigate, wait for the load event and let late console output arrive. ``errors`` and
        ``dialogs`` are the new page's only: the fixture is shared by a module's tests, and a
        test's deliberate errors must not fail the next one."""
        url = path if isinstance(path, str) and ":" in path[:12] else Path(path).resolve().as_uri()
        self._events.clear()
        self.errors.clear()
        self.dialogs.clear()
        self.requests = []
        res = self.call("Page.navigate", url=url)
        if res.get("errorText"):
            raise RuntimeError(f"navigation to {url} failed: {res['errorText']}")
        deadline = time.monotonic() + self.timeout
        while not any(e["method"] == "Page.loadEventFired" for e in self._events):
            self._recv(deadline)
        settle = time.monotonic() + settle_s
        try:
            while True:
                self._recv(settle)
        except TimeoutError:
            pass

    def eval(self, expression: str):
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"{expression!r} threw: {res['exceptionDetails']}")
        return res["result"].get("value")

    def screenshot(self, path: str | Path, full_page: bool = False) -> Path:
        params: dict = {"format": "png"}
        if full_page:
            h = min(int(self.eval("document.documentElement.scrollHeight")), 10000)
            params["clip"] = {"x": 0, "y": 0, "width": self.width, "height": h, "scale": 1}
            params["captureBeyondViewport"] = True
        Path(path).write_bytes(base64.b64decode(self.call("Page.captureScreenshot", **params)["data"]))
        return Path(path)

    def close(self) -> None:
        try:
            if self._proc.poll() is None:
                try:
                    self._send("Browser.close", {}, None)
                    self._proc.wait(timeout=5)
                except (OSError, subprocess.TimeoutExpired):
                    self._proc.kill()
                    self._proc.wait(timeout=5)
        finally:
            for fd in (self._w, self._r):
                try:
                    os.close(fd)
                except OSError:
                    pass
            shutil.rmtree(self._profile, ignore_errors=True)


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"KPERF_REQUIRE_CHROMIUM=1 but {CHROMIUM} is missing")
    b = Browser()
    yield b
    b.close()


def _make_site(root: Path, hostile: str | None) -> Path:
    """A report made the way users make it: runs saved with store.save_run, then `kperf report`."""
    bases, cur = synthetic_runs(40, hostile_name=hostile, history=9)
    for b in bases:
        store.save_run(root / "baseline.db", b.info, b.results)
    store.save_run(root / "run.db", cur.info, cur.results)
    out = root / "site"
    r = CliRunner().invoke(
        main,
        ["report", "--db", str(root / "run.db"), "--baseline", str(root / "baseline.db"), "-o", str(out)],
        catch_exceptions=False,
    )
    assert r.exit_code == 0, r.output
    return out


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return _make_site(tmp_path_factory.mktemp("report"), HOSTILE)


def _page_with(site: Path, text: str) -> Path:
    for p in sorted((site / "k").glob("*.html")):
        if text in p.read_text(encoding="utf-8"):
            return p
    raise AssertionError(f"no kernel page contains {text!r}")


# ------------------------------------------------------------------------------- harness


@needs_chromium
def test_harness_catches_console_errors_alerts_and_network(browser, tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text(
        "<!doctype html><title>t</title><p id=x>hi</p>"
        "<script>console.error('deliberate error'); alert('boom');</script>"
        "<script>noSuchFunction();</script>"
        "<img src='https://example.invalid/x.png'>",
        encoding="utf-8",
    )
    browser.errors.clear()
    browser.dialogs.clear()
    browser.open(bad)
    assert any("deliberate error" in e for e in browser.errors), browser.errors
    assert any("noSuchFunction" in e for e in browser.errors), browser.errors
    assert browser.dialogs == ["alert: boom"]
    assert any(u.startswith("https://example.invalid") for u in browser.requests)
    assert browser.eval("document.getElementById('x').textContent") == "hi"


# ------------------------------------------------------------------------------- summary


@needs_chromium
def test_index_renders_without_errors(browser, site, tmp_path):
    browser.errors.clear()
    browser.dialogs.clear()
    browser.open(site / "index.html")
    assert browser.errors == []
    assert browser.dialogs == []
    # Nothing but the page itself is loaded: no CDN, fonts or images from anywhere.
    assert [u for u in browser.requests if not u.startswith("file://")] == []
    verdict = browser.eval("document.querySelector('#verdict h1').textContent").strip()
    assert verdict.endswith("3 regressed kernels")
    regs = browser.eval("[...document.querySelectorAll('#regressions li a')].map(a => a.textContent)")
    assert regs[0] == "softmax_kernel"  # the clear slowdown is named first
    counts = browser.eval(
        "Object.fromEntries([...document.querySelectorAll('#counts .count')]"
        ".map(c => [c.dataset.verdict, +c.querySelector('b').textContent]))"
    )
    assert counts["slower"] == 1 and counts["faster"] == 1 and counts["new"] == 1 and counts["not-run"] == 1
    assert browser.eval("document.getElementById('fp-warning').textContent").count("driver") == 1
    assert browser.eval("document.querySelectorAll('#variants tbody tr').length") == 41
    browser.screenshot(tmp_path / "index.png")
    assert (tmp_path / "index.png").stat().st_size > 10_000


@needs_chromium
def test_index_filter_and_sort(browser, site):
    browser.open(site / "index.html")
    visible = "[...document.querySelectorAll('#variants tbody tr')].filter(r => !r.hidden)"

    def set_value(el: str, value: str) -> None:
        browser.eval(
            f"(() => {{ const e = document.getElementById('{el}'); e.value = {json.dumps(value)};"
            " e.dispatchEvent(new Event('input')); })()"
        )

    set_value("f-verdict", "slower")
    assert browser.eval(f"{visible}.length") == 1
    assert browser.eval("document.getElementById('f-shown').textContent") == "1"
    set_value("f-verdict", "")
    set_value("f-tag", "compute-bound")
    tags = browser.eval(f"{visible}.map(r => JSON.parse(r.dataset.tags))")
    assert tags and all("compute-bound" in t for t in tags)
    set_value("f-tag", "")
    set_value("f-text", "grouped_gemm")
    names = browser.eval(f"{visible}.map(r => r.cells[0].querySelector('a').textContent)")
    assert names and set(names) == {"grouped_gemm"}
    set_value("f-text", "")
    # Sort by the change column, twice: ascending then descending.
    col = browser.eval(
        "[...document.querySelectorAll('#variants th')].findIndex(th => th.textContent === 'change')"
    )
    key = f"{visible}.map(r => parseFloat(r.cells[{col}].dataset.sort)).filter(x => !isNaN(x))"
    browser.eval(f"document.querySelectorAll('#variants th')[{col}].click()")
    asc = browser.eval(key)
    assert asc == sorted(asc)
    browser.eval(f"document.querySelectorAll('#variants th')[{col}].click()")
    desc = browser.eval(key)
    assert desc == sorted(desc, reverse=True)
    # A verdict in the URL hash filters too: the count badges link there (hashchange) ...
    browser.eval("document.querySelector('#counts .count.faster').click()")
    browser.eval("new Promise(r => setTimeout(r, 50))")
    assert browser.eval(f"{visible}.length") == 1
    assert browser.eval("document.getElementById('f-verdict').value") == "faster"
    # ... and a link from elsewhere (load).
    browser.open("about:blank")
    browser.open((site / "index.html").resolve().as_uri() + "#verdict=new")
    assert browser.eval(f"{visible}.map(r => r.dataset.verdict)") == ["new"]
    assert browser.errors == []


@needs_chromium
def test_hostile_kernel_name_is_text_never_code(browser, site):
    for page in (site / "index.html", _page_with(site, "&lt;script&gt;alert(1)&lt;/script&gt;")):
        browser.errors.clear()
        browser.dialogs.clear()
        browser.open(page)
        assert browser.dialogs == [], page
        assert browser.errors == [], page
        # Exactly the page's own script (index) or none (kernel pages); the name is plain text.
        n_scripts = browser.eval("document.scripts.length")
        assert n_scripts == (1 if page.name == "index.html" else 0)
        assert browser.eval(f"document.body.textContent.includes({json.dumps(HOSTILE)})")
        injected = browser.eval(
            "[...document.querySelectorAll('script')].some(s => s.textContent.includes('alert(1)'))"
        )
        assert not injected
    # Defence in depth: even markup that got in could not run, the CSP allows only the page's own script.
    ran = browser.eval(
        "(() => { const s = document.createElement('script'); s.textContent = 'window.pwned = 1';"
        " document.body.appendChild(s); return window.pwned === 1; })()"
    )
    assert ran is False
    browser.eval("new Promise(r => setTimeout(r, 50))")
    assert any("Content Security Policy" in e for e in browser.errors), browser.errors


# ------------------------------------------------------------------------------- kernel pages


@needs_chromium
def test_kernel_page_sections(browser, site, tmp_path):
    page = _page_with(site, "time slower")  # the planted slowdown (with regions and history)
    browser.errors.clear()
    browser.open(page)
    assert browser.errors == []
    assert browser.eval("document.getElementById('kernel-name').textContent") == "softmax_kernel"
    for sel in (
        "#reasons",
        "#dist-plot svg",
        "#region-plot svg",
        "#mix-plot svg",
        "svg.history",
        "table.metrics",
    ):
        assert browser.eval(f"!!document.querySelector({json.dumps(sel)})"), sel
    # History: 10 baseline runs + this one; the median moved, so the line has 11 points.
    assert browser.eval("document.querySelector('svg.history').querySelectorAll('circle').length") == 11
    row = browser.eval(
        "[...document.querySelectorAll('table.metrics tr')].find(r => r.cells[0]"
        " && r.cells[0].textContent.startsWith('time.median')).textContent"
    )
    assert "+1" in row and "%" in row and "[" in row  # change and its confidence interval
    browser.screenshot(tmp_path / "kernel.png", full_page=True)
    assert (tmp_path / "kernel.png").stat().st_size > 10_000


@needs_chromium
def test_kernel_page_asm_diff_and_timeline(browser, site):
    spills = _page_with(site, "spills +64")
    browser.errors.clear()
    browser.open(spills)
    assert browser.errors == []
    assert browser.eval("document.querySelectorAll('#asm-diff ~ details pre.diff span.add').length") > 0
    timeline = _page_with(site, "<h3>CTAs per SM")  # the gantt heading (suggestions say "CTAs per SM" too)
    browser.open(timeline)
    assert browser.errors == []
    assert browser.eval("document.querySelectorAll('svg.gantt').length") == 2
    bars = browser.eval("document.querySelectorAll('svg.gantt')[1].querySelectorAll('rect.seg').length")
    assert bars == 264


@needs_chromium
@pytest.mark.parametrize("db", sorted(DATA.rglob("*.db")), ids=lambda p: p.name)
def test_committed_databases_render(browser, db, tmp_path):
    """Databases committed under tests/data (e.g. a GPU-mode run from the device machine):
    the latest run against the one before it (or alone)."""
    out = tmp_path / "site"
    r = CliRunner().invoke(main, ["report", "--db", str(db), "-o", str(out)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    pages = [out / "index.html", *sorted((out / "k").glob("*.html"))[:5]]
    for p in pages:
        browser.errors.clear()
        browser.open(p)
        assert browser.errors == [], p


@needs_chromium
def test_summary_screenshot(browser, tmp_path):
    """The README picture: KPERF_SCREENSHOT_DIR=docs/img pytest tests/test_report_html.py -k screenshot."""
    site = _make_site(tmp_path, None)
    browser.open(site / "index.html")
    assert browser.errors == []
    shot = browser.screenshot(tmp_path / "report-summary.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    target = os.environ.get("KPERF_SCREENSHOT_DIR")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, Path(target) / "report-summary.png")


def test_large_run_gets_kernel_pages_not_a_file_per_variant(tmp_path, monkeypatch):
    """Above MAX_VARIANT_PAGES variants: pages for the worst ones only, and per-kernel pages
    (KERNEL_PAGE_ROWS to a page) that list every variant, linking those with a page."""
    from kperf_ci.report import html

    monkeypatch.setattr(html, "MAX_VARIANT_PAGES", 10)
    monkeypatch.setattr(html, "KERNEL_PAGE_ROWS", 4)
    bases, cur = synthetic_runs(40, hostile_name=HOSTILE, history=1)
    for b in bases:
        store.save_run(tmp_path / "baseline.db", b.info, b.results)
    store.save_run(tmp_path / "run.db", cur.info, cur.results)
    out = tmp_path / "site"
    args = ["report", "--db", str(tmp_path / "run.db"), "--baseline", str(tmp_path / "baseline.db")]
    r = CliRunner().invoke(main, [*args, "-o", str(out)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    detail = {p.stem for p in (out / "k").glob("*.html")}
    assert 10 <= len(detail) < 40
    index = (out / "index.html").read_text(encoding="utf-8")
    assert 'id="variants-capped"' in index and 'id="kernel-list"' in index
    assert index.count("<tr data-verdict=") == len(detail)
    listed = "".join(p.read_text(encoding="utf-8") for p in (out / "kernels").glob("*.html"))
    ids = {v.key.id for v in cur.results}
    assert all(f'id="v-{i}"' in listed for i in ids)  # every variant is reachable
    assert all(f'href="../k/{i}.html"' in listed for i in detail)
    assert HOSTILE not in listed and "&lt;script&gt;" in listed  # names are text
    pages = list((out / "kernels").glob("*-2.html"))  # some kernel has more than 4 variants
    assert pages and all(str(p.name) in index for p in pages)
