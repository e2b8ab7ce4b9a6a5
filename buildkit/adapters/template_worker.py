"""Team templates rendered under a budget of time, memory and output, in a worker process of their own.

Jinja's sandbox keeps a team template away from the interpreter and the host, not from the machine's
resources: exponent towers and products of large integers, nested loops, the width argument of `center`,
`indent`, `format` and friends, `lipsum(10**8)`, a macro that doubles a string forty times, a loop that
writes gigabytes. Each runs inside one operation that no sandbox hook sees, or in a loop of cheap ones; a
sandbox that bounds every operation is a list that is never complete. The kernel bounds all of them at
once, so a render that reaches a team template runs in a worker process:

- memory: its address space is capped at what it holds once started plus MEMORY_BUDGET (RLIMIT_AS): an
  allocation past it fails at once (MemoryError) instead of swapping the machine;
- time: each command may use TIME_BUDGET seconds of CPU (a profiling timer, set before each command: the kernel
  stops the worker past it, even inside one long C operation; RLIMIT_CPU behind it); the CLI waits for an answer
  as long as a hung worker deserves (ANSWER_SECONDS of wall time, which a busy machine's renders need), never as
  the budget;
- output: the Dockerfile is counted as the template writes it and stopped past OUTPUT_BUDGET characters (a text
  written from a shape in the CLI is measured before it is written).

Going over is a UserError naming the template and the target; the worker is then replaced for the next
render. The worker starts once per run (a Python of its own: about 0.3 s; the CLI starts it while it plans)
and renders for every team target of it; it imports nothing from the folder it runs in (-I, and buildkit's
own import path handed over). Most of what it renders are shapes (buildkit.core.render.shapes): one render of a
template with every value a hole stands for every target whose values meet its guards, and the CLI writes those
targets' texts itself; the marker that holes are printed with is drawn here, so neither the CLI nor a template
knows it. A template a shape cannot stand for is rendered per target: the CLI sends those planned images in
frames of BATCH from a thread of its own while it reads the answers, so the worker renders on another core
while the CLI plans and nothing waits on a round trip per target. A fault found while compiling a template or
rendering its first shape is the template's error at once. buildkit's built-in templates are its own code and
are rendered in the CLI's process (buildkit.core.render.renderer).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pickle
import resource
import secrets
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from typing import IO, TYPE_CHECKING, Any, cast

from buildkit.core.matrix.templates import TemplateSet
from buildkit.core.render.renderer import Meanwhile, Renderer
from buildkit.core.render.shapes import ShapeData
from buildkit.errors import Problem, UserError

if TYPE_CHECKING:
    from collections.abc import Sequence

    import jinja2

    from buildkit.core.render.planned import PlannedImage

TIME_BUDGET = 2.0  # seconds of CPU per render; a Dockerfile renders in milliseconds
MEMORY_BUDGET = 512 * 1024 * 1024  # bytes beyond what the worker holds when it is ready
OUTPUT_BUDGET = 4 * 1024 * 1024  # characters of Dockerfile; real ones are kilobytes
START_SECONDS = 60.0  # for the worker to start, on a loaded machine
# Seconds of wall time the CLI waits for one answer: a guard against a worker that hangs, not the time budget. The
# worker's CPU limits stop a render at TIME_BUDGET seconds of CPU, and on a busy machine a render's wall time is
# several times its CPU time (a wait of TIME_BUDGET plus a second refused renders that were within their budget).
ANSWER_SECONDS = 60.0
_FRAME = struct.Struct(">Q")
BATCH = 256  # planned images per frame: a few hundred KB


def _send(stream: IO[bytes], value: object) -> None:
    """One pickled frame (CLI -> worker only: the worker's answers are JSON, never unpickled by the CLI)."""
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_FRAME.pack(len(data)) + data)
    stream.flush()


def _receive_frame(stream: IO[bytes]) -> object | None:
    head = stream.read(_FRAME.size)
    if len(head) < _FRAME.size:
        return None  # the CLI is done
    frame: object = pickle.loads(stream.read(_FRAME.unpack(head)[0]))
    return frame


def _answer(stream: IO[bytes], text: str | None = None, **reply: object) -> None:
    """One answer: a JSON line, then for a rendered text (or a shape's JSON) its UTF-8 bytes (their count in the
    line): encoding a Dockerfile as a JSON string cost a tenth of a render."""
    data = text.encode("utf-8", "surrogatepass") if text is not None else b""
    stream.write(json.dumps({**reply, "bytes": len(data)} if text is not None else reply).encode() + b"\n" + data)
    stream.flush()


# --- the worker's side ---------------------------------------------------------------------------------------


def _address_space() -> int:
    """Bytes of address space this process holds now (Linux: /proc/self/statm's first field, in pages)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _lower(limit: int, value: int) -> None:
    """Set a soft limit, never above the hard one the worker inherited (a `ulimit` of the user's)."""
    hard = resource.getrlimit(limit)[1]
    resource.setrlimit(limit, (value if hard == resource.RLIM_INFINITY else min(value, hard), hard))


def serve(time_budget: float, memory_budget: int, output_budget: int) -> None:
    """The worker: answers each command it is sent with the renderer it was set up with, one JSON answer per
    render on stdout: ("shape", planned image) for the shape of its render, ("render", planned images) for
    their texts."""
    commands, answers = sys.stdin.buffer, sys.stdout.buffer
    setup = _receive_frame(commands)
    if setup is None:
        return
    loader, source = cast("tuple[jinja2.BaseLoader, str]", setup)
    # renders planned images only (their install plans come with them); the marker is drawn here, so the CLI's
    # side never sees it and no template can know it
    renderer = Renderer(loader, source, {}, None, marker="\ue000" + secrets.token_hex(16))
    signal.signal(signal.SIGPROF, signal.SIG_DFL)  # the CPU budget's timer ends the worker (see below)
    # A worker stopped by its CPU limit would otherwise dump core, into the team's folder it runs in.
    _lower(resource.RLIMIT_CORE, 0)
    if os.path.exists("/proc/self/statm"):  # elsewhere (macOS) time and output stay bounded
        _lower(resource.RLIMIT_AS, _address_space() + memory_budget)
    _answer(answers, ready=True)
    while (command := _receive_frame(commands)) is not None:
        kind, payload = cast("tuple[str, object]", command)
        # what TemplateWorker sends: ("shape", a planned image) or ("render", a list of them)
        batch = (cast("PlannedImage", payload),) if kind == "shape" else cast("list[PlannedImage]", payload)
        for planned in batch:
            # the budget is per command: a shape render, its retries and the render of the target on its own
            # that tells why it has no shape share one. The profiling timer stops the worker (SIGPROF's default
            # action) once the command has used the budget's CPU time, to the millisecond, even inside one long C
            # operation; RLIMIT_CPU, whole seconds, stays as the kernel's backstop.
            _lower(resource.RLIMIT_CPU, math.ceil(_cpu_seconds() + time_budget) + 1)
            signal.setitimer(signal.ITIMER_PROF, time_budget)
            try:
                if kind == "shape":
                    shape = renderer.shape_data(planned, limit=output_budget)
                    if shape is None:
                        renderer.text(planned, limit=output_budget)  # raises what fails; else it is rendered per target
                        _answer(answers, per_target=True)
                    else:
                        _answer(answers, json.dumps(shape.to_json(), ensure_ascii=False), shape=True)
                else:
                    _answer(answers, renderer.text(planned, limit=output_budget))
            except UserError as error:
                _answer(answers, problems=[[p.where, p.message, p.key, p.line] for p in error.problems])
            except MemoryError:
                _answer(answers, memory=True)
            finally:
                signal.setitimer(signal.ITIMER_PROF, 0)


# --- the CLI's side ------------------------------------------------------------------------------------------


class TemplateWorker:
    """The bounded runner buildkit.core.render.renderer hands team renders to (see the module docstring)."""

    def __init__(self, time_budget: float = TIME_BUDGET, memory_budget: int = MEMORY_BUDGET, output_budget: int = OUTPUT_BUDGET) -> None:
        self.time_budget, self.memory_budget, self.output_budget = time_budget, memory_budget, output_budget
        self.process: subprocess.Popen[bytes] | None = None
        self.serving: tuple[jinja2.BaseLoader, str] | None = None
        self.buffer = b""
        self.ready = False  # whether the worker has said it is ready

    def render_all(self, loader: jinja2.BaseLoader, source: str, planned: Sequence[PlannedImage]) -> list[str]:
        process = self._worker(loader, source, planned[0])
        sender = threading.Thread(target=self._send_batches, args=(process, planned), daemon=True)
        sender.start()
        texts = []
        try:
            for item in planned:
                texts.append(self._text(loader, item))
        finally:
            if len(texts) < len(planned):  # a render failed: the worker's other answers are not wanted
                self.close()
            sender.join()
        return texts

    def shape(self, loader: jinja2.BaseLoader, source: str, planned: PlannedImage, meanwhile: Meanwhile | None = None) -> ShapeData | None:
        """The shape of the target's render (buildkit.core.render.shapes), None where its template is rendered target by
        target; a template error or going over budget is a UserError, as for a render. `meanwhile`: the caller's
        work, done a step at a time while the worker starts and renders."""
        process = self._worker(loader, source, planned, meanwhile)
        assert process.stdin is not None
        with contextlib.suppress(BrokenPipeError, OSError):  # the worker is gone: the reader says why
            _send(process.stdin, ("shape", planned))
        deadline = time.monotonic() + max(ANSWER_SECONDS, self.time_budget)
        reply = self._reply(deadline, meanwhile)
        if reply is not None and reply.get("per_target") is True:
            return None
        if reply is not None and reply.get("shape") is True:
            data = self._answer_bytes(reply, deadline)
            if data is not None:
                try:
                    return ShapeData.from_json(json.loads(data))
                except (ValueError, TypeError, KeyError, IndexError):
                    pass  # not a shape: a worker that answers so is stopped, as one that answers nothing
            reply = None
        raise self._failure(loader, planned, reply)

    def _send_batches(self, process: subprocess.Popen[bytes], planned: Sequence[PlannedImage]) -> None:
        assert process.stdin is not None
        try:
            for start in range(0, len(planned), BATCH):
                _send(process.stdin, ("render", list(planned[start : start + BATCH])))
        except (BrokenPipeError, OSError, ValueError):
            pass  # the worker is gone (over budget, or closed after an error): the reader says why

    def _answer_bytes(self, reply: dict[str, Any], deadline: float) -> bytes | None:
        """The bytes that follow an answer line: a text of at most the output budget (4 bytes a character in
        UTF-8), or a shape's JSON (its text, escaped, and the paths of its holes and guards)."""
        size = reply.get("bytes")
        if isinstance(size, int) and 0 <= size <= 8 * self.output_budget + 2**20:
            return self._read(size, deadline)
        return None

    def _text(self, loader: jinja2.BaseLoader, planned: PlannedImage) -> str:
        deadline = time.monotonic() + max(ANSWER_SECONDS, self.time_budget)
        reply = self._reply(deadline)
        if reply is not None and "bytes" in reply:
            data = self._answer_bytes(reply, deadline)
            if data is not None and len(data) <= 4 * self.output_budget:
                return data.decode("utf-8", "surrogatepass")
            reply = None
        raise self._failure(loader, planned, reply)

    def _failure(self, loader: jinja2.BaseLoader, planned: PlannedImage, reply: dict[str, Any] | None) -> UserError:
        """Why an answer is not a text or a shape: the template's problems, or the budget it went over."""
        if reply is not None and "problems" in reply:
            return UserError([Problem(str(where), str(message), key=str(key), line=line) for where, message, key, line in reply["problems"]])
        stopped = self.close()
        if (reply is not None and reply.get("memory")) or stopped == -signal.SIGKILL:  # SIGKILL: the kernel's OOM killer
            return self._over(loader, planned, f"needs more than the {self.memory_budget // 2**20} MiB of memory")
        if stopped in (None, -signal.SIGPROF, -signal.SIGXCPU):  # still running at the deadline, or stopped by its CPU limits
            return self._over(loader, planned, f"runs longer than the {self.time_budget:g} s")
        return self._over(loader, planned, f"stopped the worker (exit status {stopped}) instead of finishing in the time and memory")

    def _over(self, loader: jinja2.BaseLoader, planned: PlannedImage, what: str) -> UserError:
        files = loader.files if isinstance(loader, TemplateSet) else {}
        where = files[planned.template].filename if planned.template in files else planned.template
        return UserError(
            Problem(
                where,
                f"over budget: the render {what} one render may take; a Dockerfile renders in "
                "milliseconds: look for loops, repeated strings or large numbers in this template "
                f"and the templates it uses (target {planned.target.id})",
            )
        )

    def start(self, loader: jinja2.BaseLoader, source: str) -> None:
        """Start the worker for these templates without waiting for it: it gets ready while the CLI plans."""
        if not (self.process is not None and self.serving is not None and self.serving[0] is loader and self.serving[1] == source):
            self.close()
            paths = [path for path in sys.path if path]  # "" would be the working folder: a team's repository
            boot = (
                f"import sys; sys.path[:0] = {paths!r}; from buildkit.adapters.template_worker import serve; "
                f"serve({self.time_budget!r}, {self.memory_budget!r}, {self.output_budget!r})"
            )
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-c", boot], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True
            )
            self.serving, self.buffer, self.ready = (loader, source), b"", False
            assert self.process.stdin is not None
            with contextlib.suppress(BrokenPipeError, OSError):  # it did not start: _worker says so
                _send(self.process.stdin, (loader, source))

    def _worker(self, loader: jinja2.BaseLoader, source: str, planned: PlannedImage, meanwhile: Meanwhile | None = None) -> subprocess.Popen[bytes]:
        self.start(loader, source)
        assert self.process is not None
        if not self.ready:
            ready = self._reply(time.monotonic() + START_SECONDS, meanwhile)
            if not (ready and ready.get("ready")):
                self.close()
                raise UserError(Problem(planned.template, f"the worker that renders team templates did not start; check that {sys.executable} runs"))
            self.ready = True
        return self.process

    def _reply(self, deadline: float, meanwhile: Meanwhile | None = None) -> dict[str, Any] | None:
        """The worker's next answer line, or None when it does not come by the deadline or the worker ends."""
        while b"\n" not in self.buffer:
            if len(self.buffer) > 65536 or not self._fill(deadline, meanwhile):
                return None
        line, _, self.buffer = self.buffer.partition(b"\n")
        try:
            reply = json.loads(line)
        except ValueError:
            return None
        return reply if isinstance(reply, dict) else None

    def _read(self, size: int, deadline: float) -> bytes | None:
        while len(self.buffer) < size:
            if not self._fill(deadline):
                return None
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def _fill(self, deadline: float, meanwhile: Meanwhile | None = None) -> bool:
        """More of the worker's output into the buffer; False at the deadline or when the worker ended. Until the
        output comes, `meanwhile` is called, a step at a time, while it has work left."""
        assert self.process is not None and self.process.stdout is not None
        stream = self.process.stdout.fileno()
        left = deadline - time.monotonic()
        while meanwhile is not None and left > 0 and not select.select([stream], [], [], 0)[0]:
            if not meanwhile():
                meanwhile = None
            left = deadline - time.monotonic()
        if left <= 0 or not select.select([stream], [], [], left)[0]:
            return False
        chunk = os.read(stream, 1 << 20)
        self.buffer += chunk
        return bool(chunk)

    def close(self) -> int | None:
        """Stop the worker; its exit status (None when it had to be killed while still running)."""
        process, self.process, self.serving = self.process, None, None
        if process is None:
            return None
        status = process.poll()
        if status is None:
            process.kill()
            process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
        return status

    def forsake(self) -> None:
        """In a forked child (buildkit.adapters.forked): the running worker is the parent's, so this process lets
        go of it without stopping it (closing only its own copies of the pipes) and starts its own when it needs
        one."""
        process, self.process, self.serving, self.buffer, self.ready = self.process, None, None, b"", False
        if process is not None:
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    stream.close()

    def __del__(self) -> None:
        self.close()
