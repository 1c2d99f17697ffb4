"""PyTorch's memory viewer opens mutwo's timelines (issue 37): the snapshots
that profile and optimize write load with PyTorch's reader (pickle, as
`python -m torch.cuda._memory_viz` reads them) and its functions; their
allocations, replayed, give mutwo's peaks to the byte; `trace_plot` makes the
page; and headless Chromium renders that page with no script error.

PyTorch's page loads its viewer (MemoryViz.js) and d3 from two CDNs. Where
they cannot be reached (CI: package registries only), the render test takes
them from MUTWO_MEMORY_VIZ_DIR, a folder holding MemoryViz.js (PyTorch's
torch/utils/viz/MemoryViz.js, which no package ships) and d3.v5.min.js (the
mpld3 wheel ships it), and skips, saying so, when that is not set.
docs/profile.md says how the README's screenshot was made the same way.
"""
from __future__ import annotations

import base64
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

import pytest

from mutwo_cli import mutwo

PAGE_SCRIPT = "https://cdn.jsdelivr.net/gh/pytorch/pytorch@main/torch/utils/viz/MemoryViz.js"
D3_MODULES = [f"https://cdn.skypack.dev/{m}" for m in ("d3@5", "d3-axis@1", "d3-scale@1", "d3-zoom@1", "d3-brush@1")]
DROPPED, RECOMPUTED = "activation, dropped by the plan", "activation, recomputed"


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


def test_profile_writes_the_measured_and_predicted_step(mlp_report: pathlib.Path) -> None:
    snapshot = load(mlp_report / "memory_snapshot.pickle")
    by_label = steps(snapshot)
    assert list(by_label) == ["measured step", "unplanned step (predicted)"]
    profile = json.loads((mlp_report / "profile.json").read_text())
    plan = json.loads((mlp_report / "plan.json").read_text())
    assert replay(by_label["measured step"]) == profile["peak_bytes"]
    assert replay(by_label["unplanned step (predicted)"]) == plan["unplanned_peak_bytes"]
    # Each output allocated by the node that made it (the frame's line is its
    # rank), in schedule order.
    made = [e for e in by_label["measured step"] if e["action"] == "alloc" and e["category"] != "workspace"
            and e["frames"][0]["line"] >= 0]
    defined = {v["name"]: v["def"] for v in profile["values"]}
    assert len(made) > len(profile["nodes"]) // 2
    assert all(defined[value_name(e)] == e["frames"][0]["line"] for e in made)
    ranks = [e["frames"][0]["line"] for e in made]
    assert ranks == sorted(ranks), "not in schedule order"
    # PyTorch's own readers take it.
    from torch.cuda import _memory_viz
    assert "TOTAL MEM" in _memory_viz.trace(snapshot)
    assert "segments: 1" in _memory_viz.segsum(snapshot)


def test_optimize_writes_before_and_after(bert8_plan: pathlib.Path) -> None:
    """bert-tiny at 70%: the unplanned step then the plan's, each replaying to
    plan.json's peak, the plan's dropped activations in their own category
    before and its recomputed ones after."""
    by_label = steps(load(bert8_plan / "memory_before_after.pickle"))
    before, after = by_label["unplanned step (predicted)"], by_label["planned step (predicted, mutwo planner)"]
    plan = json.loads((bert8_plan / "plan.json").read_text())
    assert replay(before) == plan["unplanned_peak_bytes"]
    assert replay(after) == plan["predicted_peak_bytes"]
    assert plan["predicted_peak_bytes"] < plan["unplanned_peak_bytes"]
    dropped = [e for e in before if e["action"] == "alloc" and e["category"] == DROPPED]
    assert sum(e["size"] for e in dropped) == plan["dropped_bytes"] > 0
    decided = {a["name"] for a in plan["activations"] if a["decision"] == "recompute"}
    assert {value_name(e) for e in dropped} <= decided
    recomputed = [e for e in after if e["action"] == "alloc" and e["category"] == RECOMPUTED]
    assert len(recomputed) >= plan["dropped"] and not any(e["category"] == DROPPED for e in after if "category" in e)


def trace_plot(snapshot: pathlib.Path, page: pathlib.Path) -> str:
    """PyTorch's command line: the page for `snapshot`."""
    r = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "trace_plot", str(snapshot), "-o", str(page)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return page.read_text()


def test_trace_plot_makes_the_page(bert8_plan: pathlib.Path, tmp_path: pathlib.Path) -> None:
    snapshot = bert8_plan / "memory_before_after.pickle"
    html = trace_plot(snapshot, tmp_path / "page.html")
    assert PAGE_SCRIPT in html and "'Active Memory Timeline'" in html
    files = json.loads(re.search(r"const local_files = (\[.*\])", html).group(1))
    assert pickle.loads(base64.b64decode(files[0]["base64"]).rstrip(b"\0")) == load(snapshot)


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


@pytest.fixture
def served(tmp_path: pathlib.Path) -> Iterator[tuple[pathlib.Path, str]]:
    """A folder served over HTTP on the loopback address, and its URL."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield tmp_path, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def page_with_viewer(html: str, folder: pathlib.Path) -> str:
    """The page with the error hook, and its CDN scripts mapped to copies in
    `folder` when the CDNs cannot be reached (skips when there are none)."""
    html = html.replace("<head>", "<head>\n" + ERROR_HOOK, 1)
    if reachable("cdn.jsdelivr.net") and reachable("cdn.skypack.dev"):
        return html
    viz = os.environ.get("MUTWO_MEMORY_VIZ_DIR")
    if not viz:
        pytest.skip("PyTorch's page loads its viewer from cdn.jsdelivr.net and d3 from cdn.skypack.dev, which this "
                    "machine cannot reach: set MUTWO_MEMORY_VIZ_DIR to a folder holding MemoryViz.js and d3.v5.min.js "
                    "(tests/e2e/test_memory_snapshot.py's docstring says where they come from)")
    (folder / "viz").mkdir()
    shutil.copy(pathlib.Path(viz) / "MemoryViz.js", folder / "viz" / "MemoryViz.js")
    (folder / "viz" / "d3.js").write_text(D3_SHIM % (pathlib.Path(viz) / "d3.v5.min.js").read_text())
    imports = {PAGE_SCRIPT: "/viz/MemoryViz.js", **{m: "/viz/d3.js" for m in D3_MODULES}}
    return html.replace(ERROR_HOOK, ERROR_HOOK + f'\n<script type="importmap">{json.dumps({"imports": imports})}</script>')


def chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--window-size=1200,800", "--virtual-time-budget=20000", "--enable-logging=stderr", "--v=0",
                           *args], capture_output=True, text=True, timeout=300)


def test_viewer_renders_the_page(bert8_plan: pathlib.Path, served: tuple[pathlib.Path, str]) -> None:
    """The page of the before/after snapshot in headless Chromium: the
    timeline drawn (polygons, the legend's categories), no script error, and
    a screenshot that is not blank."""
    if not shutil.which("chromium"):
        pytest.skip("chromium is not installed (Debian: apt-get install chromium)")
    folder, url = served
    html = trace_plot(bert8_plan / "memory_before_after.pickle", folder / "plain.html")
    (folder / "page.html").write_text(page_with_viewer(html, folder))
    dom = chromium("--dump-dom", f"{url}/page.html")
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    errors = re.search(r'data-errors="([^"]*)"', dom.stdout)
    assert not errors and not any(re.search(r"Uncaught|Error|Failed", line) for line in console), \
        f"the page's script failed: {errors and errors.group(1)} {console}"
    assert dom.stdout.count("<polygon") > 10, "no timeline drawn"
    for category in (DROPPED, RECOMPUTED, "parameter", "unknown"):
        assert f">{category}</text>" in dom.stdout, f"the legend lacks {category}"
    shot = folder / "page.png"
    r = chromium(f"--screenshot={shot}", f"{url}/page.html")
    assert shot.exists(), r.stderr
    from PIL import Image
    image = Image.open(shot).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 16) or []
    assert len(colours) > 8, "the screenshot is blank"
    non_white = sum(n for n, c in colours if c != (255, 255, 255))
    assert non_white > image.width * image.height // 20, "the screenshot is almost blank"
