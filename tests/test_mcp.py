"""The MCP server end to end: `python -m krung mcp` in a subprocess, driven by the official
SDK's client over stdio (and once over streamable HTTP), on a small torch-only problem."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

pytest.importorskip("mcp.server.mcpserver", reason="the MCP server needs `krung[mcp]`")

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

import krung
from tests.conftest import KERNELBENCH, TAIL_BUG, write

TOOLS = {"list_problems", "describe_problem", "evaluate", "history", "show_run",
         "get_artifact", "diff_runs", "profile"}
# Prints at import, so the worker's log has something to fetch.
GOOD = """
print("hello from the good version")

def kernel(x):
    return x * 2 + 1
"""


def environment(store: Path) -> dict[str, str]:
    """The server imports the krung these tests do: with their environment, PYTHONPATH as
    it is (a path added would also start every judge cold: krung.judge.forks)."""
    return {**os.environ, "KRUNG_STORE": str(store), "KRUNG_DEVICE": "cpu"}


@asynccontextmanager
async def connect(store: Path, cwd: Path, *flags: str):
    """A client session with a fresh `python -m krung mcp` over stdio (one session per
    server: graded, unless `flags` say --ungraded)."""
    server = StdioServerParameters(command=sys.executable, args=["-m", "krung", "mcp", *flags],
                                   env=environment(store), cwd=str(cwd))
    with open(cwd / "server-stderr.log", "w") as errlog:
        async with stdio_client(server, errlog=errlog) as (read, write_stream), \
                ClientSession(read, write_stream) as session:
            await session.initialize()
            yield session


def text_of(result) -> str:
    return "\n".join(block.text for block in result.content)


@pytest.mark.newest
def test_tools_are_listed_with_precise_schemas(store, tmp_path):
    async def body():
        async with connect(store, tmp_path) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) == TOOLS
        for tool in tools.values():
            assert len(tool.description) > 80, tool.name
        evaluate = tools["evaluate"].input_schema
        assert evaluate["required"] == ["problem"]
        assert set(evaluate["properties"]) == {"problem", "version_path", "source", "name",
                                               "rungs", "seed", "device", "scale", "parent",
                                               "vs_compiled", "forbid", "forbid_ops",
                                               "require_own_kernel"}
        rungs = evaluate["properties"]["rungs"]["anyOf"]
        assert rungs[0]["items"]["enum"] == list(krung.RUNGS)
        assert rungs[1]["type"] == "string"  # or comma-separated, as on the command line
        assert "description" in evaluate["properties"]["source"]
        kinds = tools["get_artifact"].input_schema["properties"]["kind"]["anyOf"][0]["enum"]
        assert {"ptx", "sass", "ttir", "ttgir", "llir", "log", "profile"} <= set(kinds)
        assert tools["history"].annotations.read_only_hint is True

    anyio.run(body)


def test_evaluate_good_and_wrong_versions_then_look_back(store, tmp_path, scale_problem):
    good = write(tmp_path / "versions" / "good.py", GOOD)
    krung.pin_problem(scale_problem, store=store)  # the server grades: a pinned problem
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value, total, message):
        progress.append((value, total, message))

    async def body():
        async with connect(store, tmp_path) as session:
            passed = await session.call_tool(
                "evaluate", {"problem": str(scale_problem), "version_path": str(good),
                             "vs_compiled": True},
                progress_callback=on_progress)
            good_id = passed.structured_content["run_id"]
            failed = await session.call_tool(
                "evaluate", {"problem": "scale", "source": TAIL_BUG, "name": "tail bug",
                             "parent": good_id[:6]})
            history = await session.call_tool("history", {"problem": "scale"})
            shown = await session.call_tool("show_run", {"run_id": good_id[:5],
                                                         "with_source": True})
            listed = await session.call_tool("get_artifact", {"run_id": good_id})
            log = await session.call_tool("get_artifact", {"run_id": good_id,
                                                           "name": "worker.log"})
            log_tail = await session.call_tool("get_artifact", {
                "run_id": good_id, "kind": "log", "kernel": "worker", "offset": -20})
            diff = await session.call_tool("diff_runs", {
                "run_a": good_id, "run_b": failed.structured_content["run_id"]})
        return passed, failed, history, shown, listed, log, log_tail, diff

    passed, failed, history, shown, listed, log, log_tail, diff = anyio.run(body)

    # A passing version: the run's JSON, a short verdict, and progress on the way.
    assert not passed.is_error, text_of(passed)
    run = passed.structured_content
    assert run["ok"] is True
    assert [r["name"] for r in run["rungs"]] == list(krung.DEFAULT_LADDER)
    bench = next(r for r in run["rungs"] if r["name"] == "benchmark")["figures"]
    assert bench["speedup_vs_compiled"] > 0  # asked for: torch.compile(reference) timed too
    assert "vs torch.compile(reference)" in passed.content[0].text
    assert passed.content[0].text.startswith("OK (every rung that could run passed; "
                                             "roofline skipped)")
    assert len(progress) >= len(krung.DEFAULT_LADDER)
    values = [value for value, _, _ in progress]
    assert values == sorted(values) and len(set(values)) == len(values)
    assert values[-1] == len(krung.DEFAULT_LADDER)
    assert all(total == len(krung.DEFAULT_LADDER) for _, total, _ in progress)
    assert any(message and message.startswith("correctness: case") for *_, message in progress)

    # A wrong version sent as source: saved under the store, failing correctness with a hint.
    assert not failed.is_error, text_of(failed)
    bad = failed.structured_content
    assert bad["ok"] is False
    saved = Path(bad["solution"])
    assert saved.parent == store.parent / "versions"
    assert saved.name.startswith("tail_bug-") and saved.read_text() == TAIL_BUG
    rungs = {r["name"]: r for r in bad["rungs"]}
    assert rungs["correctness"]["status"] == "failed"
    assert rungs["correctness"]["error_type"] == "Mismatch"
    summary = failed.content[0].text
    assert summary.startswith("FAILED at correctness")
    assert "hint: " in summary and "next: " in summary

    runs = history.structured_content["runs"]
    assert [r["run_id"] for r in runs] == [bad["run_id"], run["run_id"]]
    assert runs[1]["verdict"] == "ok" and runs[1]["geomean_us"] > 0
    assert runs[0]["failed_rung"] == "correctness"
    assert bad["parent"] == runs[0]["parent"] == run["run_id"] and run["parent"] is None

    assert shown.structured_content["run_id"] == run["run_id"]
    assert shown.structured_content["source"] == good.read_text()

    names = {f["name"]: f["kind"] for f in listed.structured_content["files"]}
    assert names["worker.log"] == "log" and names["judge.log"] == "log"
    assert "hello from the good version" in log.structured_content["text"]
    assert "hello from the good version" in text_of(log)
    assert log_tail.structured_content["name"] == "worker.log"
    assert len(log_tail.structured_content["text"]) <= 20

    changes = diff.structured_content
    assert "+    if x.numel() > 1000:" in changes["source_diff"]
    assert "-print(\"hello from the good version\")" in changes["source_diff"]
    by_rung = {r["name"]: r for r in changes["rungs"]}
    assert by_rung["correctness"]["a"] == "ok" and by_rung["correctness"]["b"] == "failed"
    error = by_rung["correctness"]["figures"]["max_abs_err"]
    assert error["b"] > error["a"] and error["delta"] == error["b"] - error["a"]
    assert by_rung["benchmark"]["b"] == "skipped"
    assert "passes" in changes["summary"] and "fails" in changes["summary"]


@pytest.mark.newest
def test_errors_are_tool_errors_with_the_fix_and_the_server_lives_on(store, tmp_path,
                                                                     scale_problem):
    good = write(tmp_path / "good.py", GOOD)
    krung.pin_problem(scale_problem, store=store)

    async def body():
        async with connect(store, tmp_path) as session:
            answers = {
                "no problem": await session.call_tool("evaluate", {
                    "problem": "no_such_problem", "version_path": str(good)}),
                "both versions": await session.call_tool("evaluate", {
                    "problem": str(scale_problem), "version_path": str(good), "source": GOOD}),
                "no version": await session.call_tool("evaluate", {
                    "problem": str(scale_problem), "version_path": str(tmp_path / "nope.py")}),
                "bad rung": await session.call_tool("evaluate", {
                    "problem": str(scale_problem), "version_path": str(good),
                    "rungs": ["correctnes"]}),
                "no run": await session.call_tool("show_run", {"run_id": "ffffffff"}),
            }
            profiled = await session.call_tool("profile", {
                "problem": str(scale_problem), "version_path": str(good)})
            after = await session.call_tool("list_problems", {})
        return answers, after, profiled

    answers, after, profiled = anyio.run(body)
    for what, answer in answers.items():
        assert answer.is_error, what
    text = {what: text_of(answer) for what, answer in answers.items()}
    assert "UsageError: no problem at 'no_such_problem'" in text["no problem"]
    assert "hint: give a problem directory, or one of the built-in problems:" in \
        text["no problem"]
    assert "exactly one of them" in text["both versions"] and "hint:" in text["both versions"]
    assert "no version file at" in text["no version"]
    assert "correctnes" in text["bad rung"]  # rejected by the tool's schema
    assert "no run 'ffffffff'" in text["no run"] and "hint:" in text["no run"]
    # Without a GPU the profile tool still answers: the run, its profile rung skipped with why.
    assert not profiled.is_error, text_of(profiled)
    rungs = {r["name"]: r for r in profiled.structured_content["rungs"]}
    assert list(rungs) == ["static", "compile", "run", "correctness", "profile"]
    assert rungs["profile"]["status"] == "skipped" and "GPU" in rungs["profile"]["reason"]
    assert "profile skipped" in profiled.content[0].text
    assert not after.is_error
    assert not (store.parent / "versions").exists()  # nothing saved for refused calls


def test_list_and_describe_problems(store, tmp_path, scale_problem):
    write(tmp_path / "broken" / "problem.py", "def reference(x):\n    return x\n")
    write(tmp_path / ".hidden" / "secret" / "problem.py", "description = 'hidden'\n")

    async def body():
        async with connect(store, tmp_path) as session:
            listed = await session.call_tool("list_problems", {})
            described = await session.call_tool("describe_problem",
                                                {"problem": str(scale_problem)})
            builtin = await session.call_tool("describe_problem", {"problem": "matmul"})
            broken = await session.call_tool("describe_problem",
                                             {"problem": str(tmp_path / "broken")})
        return listed, described, builtin, broken

    listed, described, builtin, broken = anyio.run(body)
    problems = {p["name"]: p for p in listed.structured_content["problems"]}
    assert {name for name, _ in krung.builtin_problems()} <= set(problems)
    assert problems["softmax"]["builtin"] is True
    assert problems["scale"] == {"name": "scale", "path": str(scale_problem),
                                 "description": "y = 2x + 1", "builtin": False,
                                 "format": "native"}
    assert "broken" in problems and "secret" not in problems

    about = described.structured_content
    assert about["reference"]["signature"] == "reference(x)"
    assert "return x * 2 + 1" in about["reference"]["source"]
    assert "def kernel(x)" in about["entry_point"]
    assert about["example"]["inputs"] == [{"name": "x", "dtype": "float32", "shape": [1],
                                           "stride": [1]}]
    assert about["example"]["outputs"][0]["dtype"] == "float32"
    assert [c["label"] for c in about["test_cases"]] == [
        "n=1,dtype=float32", "n=1000,dtype=float32", "n=4099,dtype=bfloat16"]
    bench = about["bench_cases"][0]
    assert (bench["flops"], bench["bytes_moved"]) == (2 << 20, 8 << 20)
    assert bench["flops_per_byte"] == 0.25
    assert about["cpu_bench_cases"][0]["case"] == {"n": 4096, "dtype": "float32"}
    tolerances = about["tolerance"]["by_dtype"]
    assert tolerances["float32"]["atol"] == 1e-4 and tolerances["float32"]["rtol"] == 1e-4
    assert tolerances["bfloat16"]["min_psnr_db"] is not None
    assert "atol + rtol * |ref|" in about["tolerance"]["rule"]

    assert [i["name"] for i in builtin.structured_content["example"]["inputs"]] == ["a", "b"]

    assert broken.is_error
    assert "ProblemError" in text_of(broken) and "`make_inputs` is missing" in text_of(broken)
    assert "hint: define `def make_inputs" in text_of(broken)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_streamable_http_on_loopback(store, tmp_path, scale_problem):
    """Over HTTP too; each HTTP session of a graded server sees only its own runs."""
    krung.pin_problem(scale_problem, store=store)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "krung", "mcp", "--http", str(port)],
                              env=environment(store), cwd=tmp_path, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    @asynccontextmanager
    async def connected():
        async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as streams, \
                ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            yield session

    async def body():
        async with connected() as session, connected() as other:
            tools = await session.list_tools()
            problems = await session.call_tool("list_problems", {})
            made = await session.call_tool("evaluate", {
                "problem": str(scale_problem), "source": GOOD,
                "rungs": "static,compile,run,correctness"})
            own = await session.call_tool("history", {"problem": "scale"})
            others = await other.call_tool("history", {"problem": "scale"})
        return {t.name for t in tools.tools}, problems, made, own, others

    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None, server.stderr.read().decode()
                assert time.monotonic() < deadline, "the HTTP server did not start in 60 s"
                time.sleep(0.2)
        names, problems, made, own, others = anyio.run(body)
    finally:
        server.terminate()
        server.wait(timeout=30)
        server.stderr.close()
    assert names == TOOLS
    assert not problems.is_error
    assert made.structured_content["ok"] is True, text_of(made)
    assert [r["run_id"] for r in own.structured_content["runs"]] == \
        [made.structured_content["run_id"]]
    assert others.structured_content["runs"] == []


@pytest.mark.newest
def test_evaluate_takes_rungs_as_a_list_or_comma_separated(store, tmp_path, scale_problem):
    good = write(tmp_path / "good.py", GOOD)
    totals: list[float | None] = []

    async def on_progress(value, total, message):
        totals.append(total)

    async def body():  # ungraded: a graded run climbs correctness
        async with connect(store, tmp_path, "--ungraded") as session:
            def evaluate(rungs, **kwargs):
                return session.call_tool("evaluate", {
                    "problem": str(scale_problem), "version_path": str(good), "rungs": rungs},
                    **kwargs)
            return [await evaluate("run, static,compile", progress_callback=on_progress),
                    await evaluate(["run", "static", "compile"]),
                    await evaluate("static,correctnes")]

    as_text, as_list, unknown = anyio.run(body)
    for answer in (as_text, as_list):
        assert not answer.is_error, text_of(answer)
        assert [r["name"] for r in answer.structured_content["rungs"]] == \
            ["static", "compile", "run"]
        assert answer.structured_content["ok"] is True
    assert totals and set(totals) == {3}
    assert unknown.is_error
    assert "UsageError: unknown rung(s): correctnes" in text_of(unknown)
    assert "hint: choose from: static," in text_of(unknown)


@pytest.mark.newest
def test_the_mcp_json_krung_init_writes_starts_the_server(krung, store, tmp_path):
    """`.mcp.json` names the Python krung runs under (a venv's bin is seldom on PATH, so a
    bare `krung` would not start): an MCP client that starts exactly that command gets the
    tools, with no krung on PATH."""
    assert krung("init", "ws", "--problem", "vector_add").code == 0
    config = json.loads((tmp_path / "ws" / ".mcp.json").read_text())["mcpServers"]["krung"]
    assert Path(config["command"]).is_absolute() and config["args"][-1] == "mcp"
    env = environment(store)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not (Path(p) / "krung").exists())
    server = StdioServerParameters(command=config["command"], args=config["args"], env=env,
                                   cwd=str(tmp_path / "ws"))

    async def body():
        with open(tmp_path / "server-stderr.log", "w") as errlog:
            async with stdio_client(server, errlog=errlog) as (read, write_stream), \
                    ClientSession(read, write_stream) as session:
                await session.initialize()
                return {t.name for t in (await session.list_tools()).tools}

    assert anyio.run(body) == TOOLS


def test_a_graded_session_sees_only_its_own_runs(store, tmp_path, scale_problem):
    """Cross-run contamination: an agent reads no other session's runs (history, show_run,
    get_artifact, diff_runs, a parent, the store's copy of a version), chooses no seed, and
    evaluates only the pinned problem; a server started --ungraded sees every run."""
    good = write(tmp_path / "good.py", GOOD)
    checked = ["static", "compile", "run", "correctness"]
    krung.pin_problem(scale_problem, store=store)

    async def body():
        async with connect(store, tmp_path) as first:
            made = await first.call_tool("evaluate", {
                "problem": str(scale_problem), "version_path": str(good), "rungs": checked})
            own = await first.call_tool("history", {"problem": "scale"})
            shown = await first.call_tool("show_run", {"run_id": made.structured_content[
                "run_id"][:4]})
        run_id = made.structured_content["run_id"]
        copy = store.parent / "runs" / run_id  # the store's copy of the version
        async with connect(store, tmp_path) as second:
            other = {
                "history": await second.call_tool("history", {"problem": "scale"}),
                "show_run": await second.call_tool("show_run", {"run_id": run_id}),
                "get_artifact": await second.call_tool("get_artifact", {"run_id": run_id}),
                "diff_runs": await second.call_tool("diff_runs", {"run_a": run_id,
                                                                  "run_b": run_id}),
                "parent": await second.call_tool("evaluate", {
                    "problem": str(scale_problem), "source": GOOD, "parent": run_id}),
                "copy": await second.call_tool("evaluate", {
                    "problem": str(scale_problem),
                    "version_path": str(next((copy / "version").iterdir()))}),
                "seed": await second.call_tool("evaluate", {
                    "problem": str(scale_problem), "version_path": str(good), "seed": 7}),
            }
            (scale_problem / "problem.py").write_text(
                (scale_problem / "problem.py").read_text().replace("* 2 + 1", "* 2 + 1.0"))
            edited = await second.call_tool("evaluate", {
                "problem": str(scale_problem), "version_path": str(good)})
        async with connect(store, tmp_path, "--ungraded") as ungraded:
            everything = await ungraded.call_tool("history", {"problem": "scale"})
            seeded = await ungraded.call_tool("show_run", {"run_id": run_id})
        return made, own, shown, other, edited, everything, seeded

    made, own, shown, other, edited, everything, seeded = anyio.run(body)
    assert not made.is_error, text_of(made)
    run = made.structured_content
    assert run["ok"] is True and run["env"]["graded"] is True
    assert run["env"]["seed_secret"] is True and "(not graded)" not in made.content[0].text
    assert [r["run_id"] for r in own.structured_content["runs"]] == [run["run_id"]]
    assert shown.structured_content["run_id"] == run["run_id"]

    assert other["history"].structured_content["runs"] == []
    for tool in ("show_run", "get_artifact", "diff_runs", "parent"):
        assert other[tool].is_error, tool
        assert f"no run {run['run_id']!r} among this session's 0 run(s)" in \
            text_of(other[tool]), tool
        assert "hint: use a run_id that evaluate returned in this session" in \
            text_of(other[tool])
    assert other["copy"].is_error and "one of the store's copies" in text_of(other["copy"])
    assert other["seed"].is_error and "takes no seed" in text_of(other["seed"])
    assert edited.is_error and "problem.py (changed)" in text_of(edited)

    assert [r["run_id"] for r in everything.structured_content["runs"]] == [run["run_id"]]
    assert not seeded.is_error and seeded.structured_content["seed"] == run["seed"]


def test_evaluate_takes_a_scale_as_the_command_line_does(store, tmp_path):
    """An agent on a CPU runs a KernelBench problem at a fraction of its sizes through MCP
    too (a problem too big for the machine's memory is refused, naming this field)."""
    problem = write(tmp_path / "kb" / "5_CrossEntropy.py",
                    (KERNELBENCH / "5_CrossEntropy.py").read_text())
    honest = problem.read_text() + "\n\nModelNew = Model\n"
    krung.pin_problem(problem, store=store)  # graded, as the server is by default

    async def body():
        async with connect(store, tmp_path) as session:
            done = await session.call_tool("evaluate", {
                "problem": str(problem), "source": honest, "scale": 0.25,
                "rungs": "static,compile,run,correctness"})
            assert done.structured_content is not None, done.content
            return done.structured_content

    run = anyio.run(body)
    assert run["ok"], run
    assert run["problem"] == "5_CrossEntropy@scale0.25" and run["env"]["scale"] == 0.25
