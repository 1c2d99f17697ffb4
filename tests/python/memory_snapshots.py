"""PyTorch's memory snapshots that mutwo writes (src/report/snapshot.h), for
the tests: loaded as PyTorch's viewer loads them, split into mutwo's steps,
replayed; and PyTorch's page for one (`python -m torch.cuda._memory_viz
trace_plot`) rendered in headless Chromium.

That page loads its viewer (MemoryViz.js) and d3 from two CDNs. Where they
cannot be reached (CI reaches package registries only), MUTWO_MEMORY_VIZ_DIR
names a folder holding MemoryViz.js (PyTorch's torch/utils/viz/MemoryViz.js,
which no package ships) and d3.v5.min.js (the mpld3 wheel ships it); the
page's imports are then mapped to those, d3 through a small module that
gives MemoryViz.js the named exports and the live `event` it reads from d3 v5.
As a command, it writes the screenshot in docs/:
  python tests/python/memory_snapshots.py SNAPSHOT OUT.png
"""
from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import pathlib
import pickle
import re
import shutil
import socket
import subprocess
import sys
import threading
from typing import Any, Iterator

PAGE_SCRIPT = "https://cdn.jsdelivr.net/gh/pytorch/pytorch@main/torch/utils/viz/MemoryViz.js"
D3_MODULES = [f"https://cdn.skypack.dev/{m}" for m in ("d3@5", "d3-axis@1", "d3-scale@1", "d3-zoom@1", "d3-brush@1")]


def load(path: pathlib.Path) -> dict[str, Any]:
    """A snapshot read as `python -m torch.cuda._memory_viz` reads one."""
    with open(path, "rb") as f:
        return pickle.load(f)


def steps(snapshot: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Each step's events, by label."""
    trace = snapshot["device_traces"][0]
    return {s["label"]: trace[s["first_event"]:s["first_event"] + s["events"]] for s in snapshot["mutwo"]["steps"]}


def replay(events: list[dict[str, Any]]) -> int:
    """The most bytes allocated at once. Each free_requested and
    free_completed names a live block by address and size, live blocks never
    overlap, and the step ends with none live."""
    live: dict[int, int] = {}
    requested: set[int] = set()
    now = peak = 0
    for e in events:
        addr, size = e["addr"], e["size"]
        if e["action"] == "alloc":
            assert addr not in live and size > 0, e
            assert all(addr + size <= a or a + s <= addr for a, s in live.items()), f"{e} overlaps a live block"
            assert e["frames"] and e["frames"][0]["name"] and e["category"], e
            live[addr] = size
            now += size
            peak = max(peak, now)
        elif e["action"] == "free_requested":
            assert live.get(addr) == size and addr not in requested, e
            requested.add(addr)
        elif e["action"] == "free_completed":
            assert addr in requested, e
            requested.discard(addr)
            now -= live.pop(addr)
    assert not live and now == 0, f"{len(live)} blocks live at the end of the step"
    return peak


def value_name(event: dict[str, Any]) -> str:
    """The value an alloc's frame names: "op -> %name (phase)"."""
    m = re.search(r" -> %(\S+) \(", event["frames"][0]["name"])
    assert m, event["frames"][0]
    return m.group(1)


def trace_plot(snapshot: pathlib.Path, page: pathlib.Path) -> str:
    """PyTorch's command line: the page for `snapshot`."""
    r = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "trace_plot", str(snapshot), "-o", str(page)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return page.read_text()


def reachable(host: str) -> bool:
    try:
        socket.create_connection((host, 443), timeout=3).close()
        return True
    except OSError:
        return False


D3_SHIM = """const g = {};
(function () {
%s
}).call(g);
const d3 = g.d3;
// MemoryViz.js reads d3.event, a live binding of d3 v5's module: kept here
// from d3's own while each listener runs.
export let event = null;
function track(listener) {
  return function (...args) { event = d3.event; return listener.apply(this, args); };
}
const on = d3.selection.prototype.on;
d3.selection.prototype.on = function (type, listener, capture) {
  return typeof listener === 'function' ? on.call(this, type, track(listener), capture) : on.apply(this, arguments);
};
function tracked(behavior) {
  const on = behavior.on;
  behavior.on = function (type, listener) {
    return arguments.length < 2 ? on.apply(behavior, arguments) : on.call(behavior, type, listener && track(listener));
  };
  return behavior;
}
export const select = d3.select, format = d3.format, axisLeft = d3.axisLeft, scaleLinear = d3.scaleLinear,
  zoomIdentity = d3.zoomIdentity;
export function zoom() { return tracked(d3.zoom()); }
export function brushX() { return tracked(d3.brushX()); }
"""

# Set on the page before its module runs: the errors its scripts raise, kept on <html>.
ERROR_HOOK = """<script>
for (const kind of ['error', 'unhandledrejection'])
  addEventListener(kind, e => {
    const html = document.documentElement;
    html.dataset.errors = (html.dataset.errors || '') + (e.message || e.reason) + ';';
  }, true);
</script>"""


@contextlib.contextmanager
def served(folder: pathlib.Path) -> Iterator[str]:
    """`folder` served over HTTP on the loopback address: its URL."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def cdns_reachable() -> bool:
    return reachable("cdn.jsdelivr.net") and reachable("cdn.skypack.dev")


def render_missing() -> str:
    """Why a page cannot be rendered here; empty when it can."""
    if not shutil.which("chromium"):
        return "chromium is not installed (Debian: apt-get install chromium)"
    if not os.environ.get("MUTWO_MEMORY_VIZ_DIR") and not cdns_reachable():
        return ("PyTorch's page loads its viewer from cdn.jsdelivr.net and d3 from cdn.skypack.dev, which this machine "
                "cannot reach: set MUTWO_MEMORY_VIZ_DIR to a folder holding MemoryViz.js and d3.v5.min.js "
                "(tests/python/memory_snapshots.py says where they come from)")
    return ""


def page_with_viewer(html: str, folder: pathlib.Path) -> str:
    """The page with the error hook, and its CDN scripts mapped to the copies
    in MUTWO_MEMORY_VIZ_DIR (served from `folder`) when that is set."""
    html = html.replace("<head>", "<head>\n" + ERROR_HOOK, 1)
    viz = os.environ.get("MUTWO_MEMORY_VIZ_DIR")
    if not viz:
        return html
    (folder / "viz").mkdir()
    shutil.copy(pathlib.Path(viz) / "MemoryViz.js", folder / "viz" / "MemoryViz.js")
    (folder / "viz" / "d3.js").write_text(D3_SHIM % (pathlib.Path(viz) / "d3.v5.min.js").read_text())
    imports = {PAGE_SCRIPT: "/viz/MemoryViz.js", **{m: "/viz/d3.js" for m in D3_MODULES}}
    importmap = f'<script type="importmap">{json.dumps({"imports": imports})}</script>'
    return html.replace(ERROR_HOOK, ERROR_HOOK + "\n" + importmap)


def chromium(*args: str, size: str = "1200,800") -> subprocess.CompletedProcess:
    return subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           f"--window-size={size}", "--virtual-time-budget=20000", "--enable-logging=stderr", "--v=0",
                           *args], capture_output=True, text=True, timeout=300)


def render(snapshot: pathlib.Path, folder: pathlib.Path, png: pathlib.Path,
           size: str = "1200,800") -> tuple[str, list[str]]:
    """PyTorch's page for `snapshot` (trace_plot's, in `folder`) in headless
    Chromium: its DOM once the script ran, the console's lines, and a
    screenshot at `png`."""
    html = trace_plot(snapshot, folder / "plain.html")
    (folder / "page.html").write_text(page_with_viewer(html, folder))
    with served(folder) as url:
        dom = chromium("--dump-dom", f"{url}/page.html", size=size)
        shot = chromium(f"--screenshot={png}", f"{url}/page.html", size=size)
    console = [line for r in (dom, shot) for line in r.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    return dom.stdout, console


if __name__ == "__main__":  # the screenshot in docs/: python tests/python/memory_snapshots.py SNAPSHOT OUT.png
    import tempfile

    from PIL import Image
    if missing := render_missing():
        sys.exit(missing)
    out = pathlib.Path(sys.argv[2]).resolve()
    with tempfile.TemporaryDirectory() as d:
        _, lines = render(pathlib.Path(sys.argv[1]), pathlib.Path(d), out, "1100,1000")
    print("\n".join(line for line in lines if "Uncaught" in line or "Error" in line))
    # The timeline and its overview, without the empty details pane below, in 64 colours.
    image = Image.open(out).convert("RGB")
    image.crop((0, 0, image.width, 630)).quantize(64).save(out, optimize=True)
