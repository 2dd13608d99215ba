"""`krung report`: the self-contained HTML page and the PNG charts, from recorded GPU-like runs
and from real CPU runs; the page is opened in headless Chromium, which must render it, with
its charts, and report no console error."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

import krung
from krung.host import charts
from krung.host.store import Store
from krung.protocol.results import Run
from tests.browser import check_page, find_browser
from tests.conftest import GOOD, TAIL_BUG
from tests.recorded import H200, matmul_history, record_run

BROWSER = find_browser()
needs_browser = pytest.mark.skipif(BROWSER is None, reason="needs headless Chromium "
                                                           "(apt-get install chromium)")
# Anything that would make the page reach outside itself.
EXTERNAL = re.compile(r"(?i)(?:https?|ftp)://|<script|<link|<img|<iframe|\ssrc=|url\(")


class Anchors(HTMLParser):
    """The ids and the links of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.add(found["id"])  # type: ignore[arg-type]
        if tag == "a" and found.get("href"):
            self.links.append(found["href"])  # type: ignore[arg-type]


class Tags(HTMLParser):
    """Every element and attribute name of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()
        self.attributes: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.names.add(tag)
        self.attributes.update(name for name, _ in attrs)


def anchors(page: str) -> Anchors:
    parser = Anchors()
    parser.feed(page)
    return parser


@pytest.fixture
def recorded(tmp_path):
    """Six recorded matmul versions, each with a log and the v5 one with a profile file."""
    store = Store(tmp_path / "store" / "krung.db")
    runs = matmul_history(store)
    for run in runs.values():
        (store.artifacts_dir(run.run_id) / "worker.log").write_text(f"log of {run.run_id}\n")
    (store.artifacts_dir(runs["v5"].run_id) / "matmul_kernel.ncu-rep").write_bytes(b"\x01ncu")
    yield store, runs
    store.close()


def test_the_page_holds_every_version_and_links_only_within_itself(recorded, tmp_path):
    store, runs = recorded
    files = krung.write_report("matmul", tmp_path / "out" / "report.html", store=store)
    assert files.runs == 6 and files.pngs == []
    page = files.html.read_text()
    assert EXTERNAL.search(page) is None
    found = anchors(page)
    assert {"roofline", "timeline", "versions", "roofline-chart", "timeline-chart"} <= \
        found.ids
    assert {f"run-{r.run_id}" for r in runs.values()} <= found.ids
    for link in found.links:
        if link.startswith("#"):
            assert link[1:] in found.ids, link  # every parent link lands on its run
        else:  # artifact links are relative to the page and reach the run's files
            assert not link.startswith("/") and (files.html.parent / link).exists(), link
    v5 = runs["v5"].run_id
    assert f"../store/runs/{v5}/matmul_kernel.ncu-rep" in found.links
    assert "profile: matmul_kernel.ncu-rep" in page
    # the summary: the best version by the stated rule, and whether to go on
    assert ("<b>Best</b> (lowest geomean of bench-case medians among passing runs on "
            "NVIDIA H200, of 4)") in page
    assert f'href="#run-{v5}">{v5}</a> v5.py' in page
    assert "stop: every bench case is at the roofline" in page
    # the roofline: a point per placed bench case of each of the five timed versions
    chart = page[page.index('<svg id="roofline-chart"'):]
    chart = chart[:chart.index("</svg>")]
    assert chart.count("% of the roofline (") == 15
    assert chart.count("-bound, suspect)") == 1 and "suspect: faster than the ceilings allow" in chart
    assert "DRAM 4.3 TB/s" in chart and "bf16 (dtype, assumed) 790 TFLOP/s" in chart
    # the timeline: six versions, the failed one marked, parent links drawn
    timeline = page[page.index('<svg id="timeline-chart"'):]
    assert timeline.count(">v2.py (") >= 1 and "failed at correctness" in timeline
    # each version's rungs, error figures, failure with its hint, and roofline cases
    assert "SuspectTime: faster than the roofline allows" in page
    assert "<b>hint</b>: compare the failing and the passing sizes" in page
    assert "<b>error figures</b> (correctness)" in page
    assert "roofline per bench case" in page and "at 92% of the bf16 peak" in page


@needs_browser
def test_the_page_renders_in_chromium_with_its_charts(recorded, tmp_path):
    store, _ = recorded
    files = krung.write_report("matmul", tmp_path / "report.html", store=store)
    check = check_page(BROWSER, files.html, tmp_path / "profile", tmp_path / "page.png")
    assert check.problems == []
    assert check.title == "krung report: matmul"
    charts = {c["id"]: c for c in check.charts}
    assert set(charts) == {"roofline-chart", "timeline-chart"}
    assert charts["roofline-chart"]["width"] > 600 and charts["roofline-chart"]["height"] > 300
    assert charts["roofline-chart"]["titles"] >= 16  # the chart's and one per point
    assert charts["timeline-chart"]["marks"] > 20
    assert "Each version" in check.text and "keep optimising" not in check.text
    _assert_a_real_picture(check.screenshot, min_width=1000, min_height=2000)


@needs_browser
def test_the_browser_check_sees_what_goes_wrong(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><head><title>bad</title></head><body>'
                   '<svg class="chart" id="c" width="10" height="10"></svg>'
                   '<img src="missing.png"><script>console.error("deliberate");'
                   "not_defined();</script></body></html>")
    check = check_page(BROWSER, bad, tmp_path / "profile")
    assert any("deliberate" in p for p in check.problems)
    assert any("not_defined is not defined" in p for p in check.problems)
    assert any("missing.png" in p for p in check.problems)
    assert check.charts == [{"id": "c", "width": 10, "height": 10, "marks": 0, "titles": 0}]


def test_the_charts_as_png(recorded, tmp_path):
    pytest.importorskip("matplotlib", reason="--png needs krung[report] (matplotlib)")
    store, _ = recorded
    files = krung.write_report("matmul", tmp_path / "report.html", png_dir=tmp_path / "png",
                               store=store)
    assert [p.name for p in files.pngs] == ["roofline.png", "timeline.png"]
    roofline = _assert_a_real_picture(files.pngs[0], min_width=900, min_height=450)
    timeline = _assert_a_real_picture(files.pngs[1], min_width=900, min_height=650)
    # the versions' colours (the first of the palette is the oldest version) are drawn
    assert _has_colour(roofline, (0x4E, 0x79, 0xA7)) and _has_colour(roofline, (0x59, 0xA1,
                                                                                 0x4F))
    assert _has_colour(timeline, (0x4E, 0x79, 0xA7))


def test_a_report_of_real_cpu_runs(krung, scale_problem, version, tmp_path):
    good = version("good", GOOD)
    for source in (good, good, version("tail", TAIL_BUG)):
        krung("run", scale_problem, source, "--json")
    made = krung("report", "scale", "-o", "out/scale.html", "--png", "pngs", "--json")
    assert made.code == 0, made.stderr
    data = made.json()
    assert data["runs"] == 3 and data["html"] == "out/scale.html"
    assert data["pngs"] == (["pngs/timeline.png"] if _has_matplotlib() else [])
    page = (tmp_path / "out" / "scale.html").read_text()
    assert EXTERNAL.search(page) is None
    assert "No run has roofline figures: the roofline rung needs a GPU" in page
    assert 'id="timeline-chart"' in page and 'id="roofline-chart"' not in page
    assert "no GPU: the roofline needs the GPU" in page  # the rung's skip reason
    assert "no roofline for this run" in page  # the advice, for the best CPU run
    found = anchors(page)
    logs = [link for link in found.links if link.endswith("worker.log")]
    assert len(logs) == 3 and all((tmp_path / "out" / link).is_file() for link in logs)
    text = krung("report", "scale", "-o", "again.html")
    assert text.stdout.strip() == "wrote again.html (3 run(s))"
    if BROWSER is not None:
        check = check_page(BROWSER, tmp_path / "out" / "scale.html", tmp_path / "profile")
        assert check.problems == [] and [c["id"] for c in check.charts] == ["timeline-chart"]


def test_a_report_needs_runs(krung):
    missing = krung("report", "nothing")
    assert missing.code == 2
    assert "UsageError: no runs of nothing in" in missing.stderr
    assert "hint: evaluate a version first: krung run nothing VERSION.py" in missing.stderr


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _assert_a_real_picture(path: Path | None, min_width: int, min_height: int):
    """A PNG of at least this size, with more than a blank page's colours in it where
    Pillow (which comes with matplotlib) can count them."""
    assert path is not None
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width >= min_width and height >= min_height, (width, height)
    try:
        from PIL import Image
    except ImportError:
        return None
    image = Image.open(path).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50
    return image


def _has_colour(image, rgb: tuple[int, int, int], tolerance: int = 8) -> bool:
    import numpy

    pixels = numpy.asarray(image, dtype=numpy.int16)
    return bool((numpy.abs(pixels - numpy.array(rgb)) <= tolerance).all(axis=-1).any())


def test_a_long_history_keeps_its_version_labels_apart(tmp_path):
    from tests.recorded import record_run

    store = Store(tmp_path / "store" / "krung.db")
    parent = None
    for i in range(90):
        scale = 1 + 0.02 * ((i * 37) % 11)
        parent = record_run(store, f"/ws/versions/v{i + 1}.py",
                            [400.0 * scale, 3000.0 * scale, 700.0 * scale], parent=parent,
                            started_at=f"2026-12-01T{10 + i // 60:02d}:{i % 60:02d}:00+00:00"
                            ).run_id
    page = krung.write_report("matmul", tmp_path / "report.html", store=store).html.read_text()
    timeline = page[page.index('<svg id="timeline-chart"'):]
    timeline = timeline[:timeline.index("</svg>")]
    labels = re.findall(r'rotate\(-40 [^"]+\)">(v\d+\.py)</text>', timeline)
    assert 30 <= len(labels) <= 41 and labels[0] == "v1.py" and labels[-1] == "v90.py"
    assert page.count('<details class="run"') == 90
    assert page.count(" open>") == 3  # the newest versions' sections start open


def test_a_run_in_flight_leaves_the_timeline_on_the_known_device(recorded):
    store, runs = recorded
    store.begin(Run(run_id="", problem="matmul", problem_path="/problems/matmul",
                    solution="/ws/versions/v7.py", source_sha256="c1" * 32,
                    started_at="2026-12-01T11:00:00+00:00"), ["static", "correctness"])
    entries = krung.history("matmul", store=store)
    assert entries[0].run.device == "unknown"  # the newest run has no device yet
    shown = charts.timeline(entries)
    assert shown is not None and shown.device == H200
    assert len(shown.points) == len(runs) and shown.left_out == 1


def test_a_report_of_a_problem_without_flops_says_why_there_is_no_chart(tmp_path):
    store = Store(tmp_path / "store" / "krung.db")
    try:
        run = record_run(store, "/ws/versions/v1.py", [900.0, 6800.0, 1500.0],
                         started_at="2026-12-01T10:00:00+00:00")
        rung = run.rung("roofline")
        assert rung is not None
        # as a KernelBench problem records them: no flops, placed against bandwidth alone
        for row in rung.figures["per_case"]:
            row.update(flops=0.0, intensity=0.0, tflops=0.0)
        store.add_rung(run.run_id, len(run.rungs) - 1, rung)
        files = krung.write_report("matmul", tmp_path / "r.html", store=store)
    finally:
        store.close()
    page = files.html.read_text()
    assert "the roofline rung needs a GPU" not in page
    assert "the problem declares no flops" in page


def test_a_report_by_the_path_of_a_kernelbench_file(krung, version):
    from tests.conftest import KERNELBENCH

    problem = KERNELBENCH / "1_ReLU.py"
    ran = krung("run", problem, KERNELBENCH / "solutions" / "1_ReLU.py", "--rungs",
                "static,compile", "--json")
    assert ran.code == 0, ran.stderr
    made = krung("report", problem, "-o", "relu.html", "--json")
    assert made.code == 0, made.stderr
    assert made.json()["runs"] == 1


def test_text_a_version_wrote_is_shown_never_run_as_markup(tmp_path):
    """Error text, hints, details and file names come from untrusted versions: the template
    escapes all of it, whatever it holds."""
    store = Store(tmp_path / "store" / "krung.db")
    hostile = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    run = record_run(store, 'v<b>1</b>".py', None, started_at="2026-12-01T10:00:00+00:00")
    failed = run.rungs[1]
    failed.error, failed.hint, failed.details = hostile, hostile, f"  12 | {hostile}"
    store.add_rung(run.run_id, 1, failed)
    page = krung.write_report("matmul", tmp_path / "report.html", store=store).html.read_text()
    store.close()
    tags = Tags()
    tags.feed(page)
    assert not {"script", "img"} & tags.names  # no element smuggled in
    assert not any(name.startswith("on") for name in tags.attributes)
    assert page.count("&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;") >= 3
    assert "v&lt;b&gt;1&lt;/b&gt;&#34;.py" in page
