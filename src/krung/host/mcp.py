"""The MCP server: krung's loop as tools a coding agent calls (`krung mcp`).

Serves the Model Context Protocol over stdio, or streamable HTTP on loopback, with the official
SDK (`pip install 'krung[mcp]'`). It uses only the public API, and it never imports a version
or a problem: `evaluate` starts a judge process, `describe_problem` a child process.

Graded by default (krung.host.grading; `krung mcp --ungraded` opts out): every evaluation is
graded, and a session sees only the runs it made itself, in history, show_run, get_artifact,
diff_runs and as a parent, so no agent reads another run's version; a version_path among the
store's copies of versions (runs/, versions/) is refused.

Every tool answers. A KrungError comes back as a tool error holding `Type: message` and the
`hint:` that says how to fix it, and anything else as an InternalError, so a bad call never
takes the server down. Runs come back as `Run.to_json()` in the structured content (the schema
is `krung schema`), after a short verdict as text (`krung.agent_summary`).
"""

import contextlib
import functools
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

import krung
from krung.host import options
from krung.protocol.settings import Settings

log = logging.getLogger("krung.host.mcp")
T = TypeVar("T")

FileKind = Literal[krung.FILE_KINDS]  # type: ignore[valid-type]
READ_ONLY = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
EVALUATES = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False,
                            openWorldHint=False)

INSTRUCTIONS = """\
krung checks GPU kernel versions against a slow reference and times them, recording every run.
A problem is what to compute (a reference, input sizes, a tolerance); a version is one .py file
defining `kernel(*inputs)` with the reference's signature, in any DSL (Triton, CUDA through
torch, plain torch...). The loop: list_problems -> describe_problem (signature, cases,
tolerance) -> write a version -> evaluate (it climbs the rungs static, compile, run,
correctness, determinism, benchmark, artifacts (PTX/SASS, registers, spills, occupancy),
profile (Nsight Compute, GPU only) and stops helping at the first failure: read its error,
location and hint) -> fix or optimise -> evaluate again; history, show_run, diff_runs (source,
figures, SASS) and get_artifact (worker.log holds the version's prints and crash stacks; sass,
ptx, ttgir per kernel) look back at runs; profile runs Nsight Compute alone. A version runs in
its own process, so a crash or a hang only fails its rung."""

GRADED = """
Every run is graded: the problem's files must be as pinned (never edit them), the seed is
krung's secret, and history, show_run, get_artifact and diff_runs see only this session's
runs."""

ProblemArg = Annotated[str, Field(description=(
    "A built-in problem's name (e.g. softmax; see list_problems), or the path of a problem: "
    "a folder holding problem.py, a KernelBench .py file, or a GPU MODE folder holding "
    "reference.py and task.yml; a relative path is relative to the server's working "
    "directory."))]
RunIdArg = Annotated[str, Field(description="A run id, or a unique prefix of one (from "
                                            "evaluate or history).")]
VersionPathArg = Annotated[str | None, Field(description=(
    "Path of the version file: a .py file defining `kernel(...)` with the reference's "
    "parameters. Give either this or `source`."))]
SourceArg = Annotated[str | None, Field(description=(
    "The version's whole Python source, instead of a path. krung saves it under the store's "
    "folder as versions/<name>-<sha>.py, the run's `solution`; error locations name lines in "
    "that file."))]
NameArg = Annotated[str | None, Field(description=(
    "A short label for a version sent as `source` (letters, digits, _ . -), e.g. "
    "triton_v2; it starts the saved file's name, which history shows."))]
def build_server(store: str | Path | None = None, graded: bool = True) -> MCPServer:
    """The krung MCP server over the store at `store` (default: KRUNG_STORE or
    .krung/krung.db under the working directory), graded unless `graded` is False."""
    db_path = Path(store or krung.Settings.from_env().store).resolve()
    server = MCPServer("krung", version=krung.__version__,
                       instructions=INSTRUCTIONS + GRADED * graded, log_level="WARNING")
    scope = _Scope(graded)

    def tool(annotations: ToolAnnotations) -> Callable[[Callable[..., Any]], Any]:
        """Register a tool; its docstring, on one line, is the description agents read."""
        def register(fn: Callable[..., Any]) -> Any:
            description = " ".join((fn.__doc__ or "").split())
            return server.tool(description=description, annotations=annotations)(fn)
        return register

    @tool(READ_ONLY)
    async def list_problems() -> CallToolResult:
        """List the problems krung can evaluate: the built-in ones, then every problem (a
        folder holding problem.py, a GPU MODE folder, a KernelBench file) up to three levels
        under the server's working directory. Each has name, path, description, builtin and
        format; pass the name (built-in) or the path to describe_problem and evaluate."""
        with _explained():
            found = await _in_thread(krung.list_problems, Path.cwd())
        return _answer({"root": str(Path.cwd()), "problems": found})

    @tool(READ_ONLY)
    async def describe_problem(problem: ProblemArg) -> CallToolResult:
        """What a problem asks for, to write a version from: the reference's signature and
        source; the entry point a version must define; the inputs' and outputs' dtypes,
        shapes and strides on the smallest test case; every test case and bench case (the
        CPU's bench cases too) with its flops, bytes_moved and flops_per_byte; and the
        tolerance per dtype (atol, rtol, min_psnr_db, min_cossim) with the rule that applies
        it. A broken problem comes back as an error listing each defect and its fix."""
        with _explained():
            described = await _in_thread(krung.describe_problem, problem)
        return _answer(described)

    @tool(EVALUATES)
    @options.tool_fields(*options.EVALUATE_TOOL)
    async def evaluate(
        problem: ProblemArg,
        ctx: Context,
        version_path: VersionPathArg = None,
        source: SourceArg = None,
        name: NameArg = None,
        **given: Any,
    ) -> CallToolResult:
        """Evaluate one version of a problem up the rung ladder and record the run. Give the
        version as `version_path` or as `source`. Blocks until done (seconds on a small
        problem, minutes for big ones under the CPU interpreter), sending a progress
        notification per step when the request carries a progressToken. Returns a short
        verdict as text (the first failing rung, its error and source line, the hint, the
        figures, what to look at next) and the run as JSON (`krung schema`): `ok`, and per
        rung `status` (ok, failed, skipped), `figures` (correctness: max_abs_err, ...;
        benchmark: geomean_us, speedup, per_case), `error`, `error_type`, `location`
        (file:line), `hint`, `details`. A failing version is a normal answer, not a tool
        error."""
        with _explained():
            krung.find_problem(problem)  # a wrong problem is reported before saving a source
            names = _rung_names(given["rungs"])
            settings = options.settings_of(given).replace(graded=graded)
            parent = scope.run_id(ctx, given["parent"]) if given["parent"] else None
            path = _version(scope.version(version_path, db_path), source, name, db_path)
            report = _ProgressReporter(ctx, len(names))
            run = await _in_thread(functools.partial(
                krung.evaluate, problem, path, rungs=names,
                device=given["device"], seed=given["seed"], store=db_path,
                on_result=report.rung_done, on_progress=report.step, parent=parent,
                settings=settings))
            scope.made(ctx, run)
        return _run_answer(run)

    @tool(READ_ONLY)
    async def history(
        problem: Annotated[str, Field(description=(
            "The problem's name (its directory's name), or the path of its directory."))],
        ctx: Context,
        limit: Annotated[int, Field(ge=1, le=1000, description="At most this many runs.")] = 20,
    ) -> CallToolResult:
        """The recorded runs of a problem, newest first: run_id, started_at, solution, ok,
        verdict (ok, failed, error), failed_rung, geomean_us and speedup (benchmark, when it
        ran and passed), timer, pct_of_roofline and roofline_verdict (GPU), parent (the run
        it builds on), device. Use a run_id with show_run, diff_runs or
        get_artifact. A graded session lists only the runs it made."""
        name = krung.history_name(problem)
        with _explained():
            runs = await _in_thread(_history, db_path, name, limit, scope.own(ctx))
        return _answer({"problem": name, "store": str(db_path), "runs": runs})

    @tool(READ_ONLY)
    async def show_run(
        run_id: RunIdArg,
        ctx: Context,
        with_source: Annotated[bool, Field(description="Include the version's source.")] =
        False,
    ) -> CallToolResult:
        """One recorded run: the short verdict as text, and the run as JSON (the same as
        evaluate returns; `krung schema`)."""
        with _explained():
            run = await _in_thread(_get_run, db_path, scope.run_id(ctx, run_id))
        return _run_answer(run, with_source)

    @tool(READ_ONLY)
    async def get_artifact(
        run_id: RunIdArg,
        ctx: Context,
        name: Annotated[str | None, Field(description=(
            "The file to read, as listed (a path inside the run's folder), e.g. worker.log."
        ))] = None,
        kind: Annotated[FileKind | None, Field(description=(
            "Read the one file of this kind (narrowed by `kernel` when there are several). "
            "Kinds come from the file's extension or name: .ptx ptx, .sass sass, .ttir ttir, .ttgir ttgir, .llir/.ll llir, .log "
            "log, .ncu-rep or a name with 'profile' profile, ..."))] = None,
        kernel: Annotated[str | None, Field(description=(
            "Only files whose name contains this (case-insensitive): a kernel's name."))
        ] = None,
        offset: Annotated[int, Field(description=(
            "Byte to start reading at; negative counts from the end (-8000: the last 8000 "
            "bytes, where a log's error is)."))] = 0,
        max_bytes: Annotated[int, Field(ge=1, le=1_000_000, description=(
            "Read at most this many bytes; `next_offset` says where the rest starts."))
        ] = 32_000,
    ) -> CallToolResult:
        """The files a run left in its folder (<store dir>/runs/<run_id>/): worker.log (the
        version's process: its prints, warnings, crash stacks), judge.log (krung's side), and
        where krung captured them, compiler outputs (PTX, SASS, Triton IR) and profiles,
        named after their kernel. With neither `name` nor `kind`, lists the files (name,
        kind, size). With `name`, or a `kind` that picks one file, returns its text from
        `offset`, at most `max_bytes`."""
        with _explained():
            run_id = scope.run_id(ctx, run_id)
            if name is None and kind is None:
                files = await _in_thread(functools.partial(
                    krung.run_files, run_id, kernel=kernel, store=db_path))
                return _answer({"run_id": run_id, "files": [f.to_json() for f in files]})
            read = await _in_thread(functools.partial(
                krung.read_run_file, run_id, name=name, kind=kind, kernel=kernel,
                offset=offset, max_bytes=max_bytes, store=db_path))
        return _file_answer(read)

    @tool(READ_ONLY)
    async def diff_runs(
        run_a: Annotated[str, Field(description="The first run (usually the older): id or "
                                                "prefix.")],
        run_b: Annotated[str, Field(description="The second run: id or prefix.")],
        ctx: Context,
        context_lines: Annotated[int, Field(ge=0, le=50, description=(
            "Lines of context around each change in the source diff."))] = 3,
        code: Annotated[list[Literal["sass", "ptx", "ttir", "ttgir", "llir"]], Field(
            description="Per kernel both runs captured (artifacts rung): the code to diff."
        )] = ["sass"],  # noqa: B006 (the schema's default; never mutated)
        kernel: Annotated[str | None, Field(description=(
            "Only kernels whose name contains this."))] = None,
    ) -> CallToolResult:
        """Compare two runs: a one-line summary (verdicts, how much faster or slower), the
        unified diff of the two versions' sources, and per rung the statuses and the deltas
        of every numeric figure (correctness max_abs_err..., benchmark geomean_us, speedup),
        plus per case (correctness max_abs_err; benchmark median_us, speedup) as {a, b,
        delta = b - a, ratio = b / a}; and per kernel captured by both runs' artifacts rung,
        the deltas of its registers, shared memory, spills, occupancy and instruction counts
        (HGMMA, FFMA, LDG.128...) and the unified diff of its SASS (or `code`), without
        addresses."""
        with _explained():
            run_a, run_b = scope.run_id(ctx, run_a), scope.run_id(ctx, run_b)
            diff = await _in_thread(functools.partial(
                krung.diff_runs, run_a, run_b, context=context_lines, store=db_path,
                kinds=tuple(code), kernel=kernel))
        return CallToolResult(content=[TextContent(type="text", text=_diff_text(diff)),
                                       _json_block(diff)], structured_content=diff)

    @tool(EVALUATES)
    @options.tool_fields(*options.PROFILE_TOOL)
    async def profile(
        problem: ProblemArg,
        ctx: Context,
        version_path: VersionPathArg = None,
        source: SourceArg = None,
        name: NameArg = None,
        **given: Any,
    ) -> CallToolResult:
        """Profile a version with Nsight Compute on the GPU: evaluate it with the rungs
        static, compile, run, correctness and profile, and return the run. The profile
        rung's figures hold per kernel: duration_ns, compute_pct and memory_pct (% of peak),
        dram_read_bytes and dram_write_bytes, achieved and theoretical occupancy, the top
        stall reasons and ncu's rule findings; the .ncu-rep is in the run's folder
        (get_artifact kind profile). Where there is no GPU or no ncu the rung is skipped and
        its `reason` says why."""
        with _explained():
            settings = krung.Settings.from_env().replace(graded=graded)
            path = _version(scope.version(version_path, db_path), source, name, db_path)
            rungs = ["static", "compile", "run", "correctness", "profile"]
            report = _ProgressReporter(ctx, len(rungs))
            run = await _in_thread(functools.partial(
                krung.evaluate, problem, path, rungs=rungs, device=given["device"],
                seed=given["seed"], store=db_path, on_result=report.rung_done,
                on_progress=report.step, settings=settings))
            scope.made(ctx, run)
        return _run_answer(run)

    return server


def serve(store: str | Path | None = None, http_port: int | None = None,
          graded: bool = True) -> None:
    """Serve until the client goes away: stdio by default, else HTTP on 127.0.0.1. The
    store's warm evaluation service runs as long (krung.host.service)."""
    from krung.host.service import serving

    server = build_server(store, graded)
    settings = Settings.from_env()
    with serving(settings.replace(store=store) if store else settings):
        if http_port is None:
            server.run("stdio")
        else:
            server.run("streamable-http", host="127.0.0.1", port=http_port)


# What every tool shares.


@contextlib.contextmanager
def _explained() -> Iterator[None]:
    """Errors as tool errors the agent can act on: the fact, then the fix."""
    try:
        yield
    except ToolError:
        raise
    except krung.KrungError as exc:
        text = f"{type(exc).__name__}: {exc.message}"
        if exc.hint:
            text += f"\nhint: {exc.hint}"
        raise ToolError(text) from exc
    except Exception as exc:
        log.exception("krung tool failed")
        raise ToolError(f"InternalError: {type(exc).__name__}: {exc}\nhint: this is a krung "
                        "bug, not a fault of the version; the server's stderr has the "
                        "traceback") from exc


async def _in_thread(fn: Callable[..., T], *args: Any) -> T:
    """Run blocking work (SQLite, subprocesses, an evaluation) off the event loop."""
    return await anyio.to_thread.run_sync(functools.partial(fn, *args))


class _ProgressReporter:
    """Forwards an evaluation's progress from its worker thread to the client. Progress
    counts finished rungs, with steps inside a rung as fractions, so it always increases."""

    def __init__(self, ctx: Context, total: int):
        self.ctx = ctx
        self.total = total
        self.done = 0
        self.steps = 0

    def step(self, rung: str, message: str) -> None:
        self.steps += 1
        self._send(self.done + 1 - 0.5 ** self.steps, f"{rung}: {message}")

    def rung_done(self, result: krung.RungResult) -> None:
        self.done += 1
        self.steps = 0
        self._send(self.done, result.line())

    def _send(self, progress: float, message: str) -> None:
        try:
            anyio.from_thread.run(self.ctx.report_progress, progress, self.total, message)
        except Exception:  # progress is a courtesy: a client gone away must not fail the run
            log.debug("progress notification not sent", exc_info=True)


def _rung_names(rungs: list[str] | str | None) -> list[str]:
    """The rungs to climb, in ladder order, from a list or the command line's `a,b` (or
    `+profile`, added to the default ladder); an unknown name is refused before anything is
    saved or run (UsageError naming the known ones)."""
    return krung.select_rungs(rungs)


def _version(path: str | None, source: str | None, name: str | None, db_path: Path) -> Path:
    if (path is None) == (source is None):
        raise krung.UsageError("give the version either as version_path or as source, "
                               "exactly one of them",
                               hint="version_path: a .py file's path; source: its text")
    if source is not None:
        return krung.save_version(source, name=name, store=db_path)
    return Path(path)  # type: ignore[arg-type]


def _history(db_path: Path, problem: str, limit: int,
             only: set[str] | None) -> list[dict[str, Any]]:
    """The problem's runs, newest first; only those in `only` where it is given (a graded
    session's own)."""
    store = krung.Store(db_path)
    try:
        runs = store.history(problem, limit, only)
    finally:
        store.close()
    return [{"run_id": r.run_id, "started_at": r.started_at, "solution": r.solution,
             "ok": r.ok, **krung.summary_of(r), "device": r.device} for r in runs]


def _get_run(db_path: Path, run_id: str) -> krung.Run:
    store = krung.Store(db_path)
    try:
        return store.get(run_id)
    finally:
        store.close()


class _Scope:
    """What a session may see: in graded mode only the runs it made; else everything. A
    session is the server over stdio (one client), and over HTTP the transport's session
    (its Mcp-Session-Id header; a stateless client shares the server's)."""

    def __init__(self, graded: bool):
        self.graded = graded
        self.runs: dict[str | None, set[str]] = {}

    def own(self, ctx: Context) -> set[str] | None:
        """The session's run ids; None when every run is visible."""
        return set(self.runs.get(_session(ctx), ())) if self.graded else None

    def made(self, ctx: Context, run: krung.Run) -> None:
        self.runs.setdefault(_session(ctx), set()).add(run.run_id)

    def run_id(self, ctx: Context, given: str) -> str:
        """The run `given` names (an id or a prefix): in graded mode, one of the session's
        own runs, else UsageError."""
        own = self.own(ctx)
        if own is None:
            return given
        matches = sorted(r for r in own if r.startswith(given))
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise krung.UsageError(f"run id {given!r} is ambiguous: {', '.join(matches)}",
                                   hint="give more characters of the id")
        raise krung.UsageError(
            f"no run {given!r} among this session's {len(own)} run(s): a graded session "
            "sees only the runs it made", hint="use a run_id that evaluate returned in this "
            "session (history lists them)")

    def version(self, path: str | None, db_path: Path) -> str | None:
        """The version_path given; in graded mode none of the store's copies of versions
        (runs/, versions/ beside the database), whose source show_run would read back."""
        copies = [db_path.parent / "runs", db_path.parent / "versions"]
        if self.graded and path is not None and \
                any(Path(path).resolve().is_relative_to(c) for c in copies):
            raise krung.UsageError(f"{path} is one of the store's copies of versions, other "
                                   "runs' too; a graded session evaluates its own",
                                   hint="write the version elsewhere, or send it as `source`")
        return path


def _session(ctx: Context) -> str | None:
    return (ctx.headers or {}).get("mcp-session-id")


def _json_block(data: Any) -> TextContent:
    return TextContent(type="text", text=json.dumps(data, allow_nan=False))


def _answer(data: dict[str, Any]) -> CallToolResult:
    return CallToolResult(content=[_json_block(data)], structured_content=data)


def _run_answer(run: krung.Run, with_source: bool = False) -> CallToolResult:
    data = run.to_json(with_source=with_source)
    return CallToolResult(content=[TextContent(type="text", text=krung.agent_summary(run)),
                                   _json_block(data)], structured_content=data)


def _file_answer(read: dict[str, Any]) -> CallToolResult:
    start, text = read["offset"], read.get("text")
    end = start + len(text.encode()) if text is not None else start
    header = f"{read['name']} ({read['kind']}, {read['size']} bytes): bytes {start}..{end}"
    if read.get("next_offset") is not None:
        header += f"; more from offset {read['next_offset']}"
    if text is None:
        header += f"; {read.get('note')}"
    blocks = [TextContent(type="text", text=header)]
    if text:
        blocks.append(TextContent(type="text", text=text))
    return CallToolResult(content=blocks, structured_content=read)


def _diff_text(diff: dict[str, Any]) -> str:
    lines = [diff["summary"]]
    for rung in diff["rungs"]:
        figures = ", ".join(f"{key} {_num(p['a'])} -> {_num(p['b'])}"
                            for key, p in rung["figures"].items()
                            if key in ("max_abs_err", "max_rel_err", "geomean_us", "speedup"))
        lines.append(f"{rung['name']}: {rung['a']} -> {rung['b']}"
                     + (f"; {figures}" if figures else ""))
    if diff["same_source"]:
        lines.append("same source")
    else:
        lines += ["", diff["source_diff"].rstrip("\n")]
    for entry in diff.get("kernels", []):
        if entry.get("only_in"):
            lines.append(f"kernel {entry['kernel']}: only in run {entry['only_in']}")
            continue
        changed = ", ".join(f"{key} {_num(p['a'])} -> {_num(p['b'])}"
                            for key, p in entry["figures"].items() if p["delta"])
        lines.append(f"kernel {entry['kernel']} ({entry.get('function')}): "
                     + (changed or "same figures"))
    return "\n".join(lines)


def _num(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
