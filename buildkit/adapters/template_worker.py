"""Team templates rendered under a budget of time, memory and output, in a worker process of their own.

Jinja's sandbox keeps a team template away from the interpreter and the host, not from the machine's
resources: exponent towers and products of large integers, nested loops, the width argument of `center`,
`indent`, `format` and friends, `lipsum(10**8)`, a macro that doubles a string forty times, a loop that
writes gigabytes. Each runs inside one operation that no sandbox hook sees, or in a loop of cheap ones; a
sandbox that bounds every operation is a list that is never complete. The kernel bounds all of them at
once, so a render that reaches a team template runs in a worker process:

- memory: its address space is capped at what it holds once started plus MEMORY_BUDGET (RLIMIT_AS): an
  allocation past it fails at once (MemoryError) instead of swapping the machine;
- time: each render may use TIME_BUDGET seconds of CPU (RLIMIT_CPU, raised before each render: the kernel
  stops the worker past it) and the CLI waits at most that long, plus a margin, for the answer;
- output: the Dockerfile is counted as the template writes it and stopped past OUTPUT_BUDGET characters.

Going over is a UserError naming the template and the target; the worker is then replaced for the next
render. The worker starts once per run (a Python of its own: about 0.3 s) and renders every team target of
it; it imports nothing from the folder it runs in (-I, and buildkit's own import path handed over).
buildkit's built-in templates are its own code and are rendered in the CLI's process (buildkit.core.render).
"""

from __future__ import annotations

import json
import math
import os
import pickle
import resource
import select
import signal
import struct
import subprocess
import sys
import time
from typing import BinaryIO

import jinja2

from buildkit.core.render import PlannedImage, Renderer
from buildkit.core.templates import TemplateSet
from buildkit.errors import Problem, UserError

TIME_BUDGET = 2.0  # seconds of CPU per render; a Dockerfile renders in milliseconds
MEMORY_BUDGET = 512 * 1024 * 1024  # bytes beyond what the worker holds when it is ready
OUTPUT_BUDGET = 4 * 1024 * 1024  # characters of Dockerfile; real ones are kilobytes
START_SECONDS = 60.0  # for the worker to start, on a loaded machine
_MARGIN = 1.0  # seconds the CLI waits beyond TIME_BUDGET: the worker's own CPU limit comes first
_FRAME = struct.Struct(">Q")


def _send(stream: BinaryIO, value: object) -> None:
    """One pickled frame (CLI -> worker only: the worker's answers are JSON, never unpickled by the CLI)."""
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_FRAME.pack(len(data)) + data)
    stream.flush()


def _receive_frame(stream: BinaryIO) -> object | None:
    head = stream.read(_FRAME.size)
    if len(head) < _FRAME.size:
        return None  # the CLI is done
    return pickle.loads(stream.read(_FRAME.unpack(head)[0]))


def _answer(stream: BinaryIO, **reply: object) -> None:
    stream.write(json.dumps(reply).encode() + b"\n")
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
    """The worker: renders each planned image it is sent with the renderer it was set up with, one JSON answer
    per render on stdout."""
    commands, answers = sys.stdin.buffer, sys.stdout.buffer
    setup = _receive_frame(commands)
    if setup is None:
        return
    loader, source = setup  # type: ignore[misc]
    renderer = Renderer(loader, source)
    # A worker stopped by its CPU limit would otherwise dump core, into the team's folder it runs in.
    _lower(resource.RLIMIT_CORE, 0)
    if os.path.exists("/proc/self/statm"):  # elsewhere (macOS) time and output stay bounded
        _lower(resource.RLIMIT_AS, _address_space() + memory_budget)
    _answer(answers, ready=True)
    while (planned := _receive_frame(commands)) is not None:
        _lower(resource.RLIMIT_CPU, math.ceil(_cpu_seconds() + time_budget))
        try:
            text = renderer.text(planned, limit=output_budget)  # type: ignore[arg-type]
        except UserError as error:
            _answer(answers, problems=[[p.where, p.message, p.key, p.line] for p in error.problems])
        except MemoryError:
            _answer(answers, memory=True)
        else:
            _answer(answers, text=text)


# --- the CLI's side ------------------------------------------------------------------------------------------


class TemplateWorker:
    """The bounded runner buildkit.core.render hands team renders to (see the module docstring)."""

    def __init__(self, time_budget: float = TIME_BUDGET, memory_budget: int = MEMORY_BUDGET, output_budget: int = OUTPUT_BUDGET):
        self.time_budget, self.memory_budget, self.output_budget = time_budget, memory_budget, output_budget
        self.process: subprocess.Popen | None = None
        self.serving: tuple[jinja2.BaseLoader, str] | None = None
        self.buffer = b""

    def render(self, loader: jinja2.BaseLoader, source: str, planned: PlannedImage) -> str:
        process = self._worker(loader, source, planned)
        assert process.stdin is not None
        try:
            _send(process.stdin, planned)
        except (BrokenPipeError, OSError):
            pass  # it died: the answer below says how
        reply = self._reply(self.time_budget + _MARGIN)
        if reply is not None and "text" in reply:
            return str(reply["text"])
        if reply is not None and "problems" in reply:
            raise UserError([Problem(str(where), str(message), key=str(key), line=line) for where, message, key, line in reply["problems"]])
        stopped = self.close()
        if reply is not None and reply.get("memory") or stopped == -signal.SIGKILL:  # SIGKILL: the kernel's OOM killer
            raise self._over(loader, planned, f"needs more than the {self.memory_budget // 2**20} MiB of memory")
        if stopped in (None, -signal.SIGXCPU):  # still running at the deadline, or stopped by its CPU limit
            raise self._over(loader, planned, f"runs longer than the {self.time_budget:g} s")
        raise self._over(loader, planned, f"stopped the worker (exit status {stopped}) instead of finishing in the time and memory")

    def _over(self, loader: jinja2.BaseLoader, planned: PlannedImage, what: str) -> UserError:
        files = loader.files if isinstance(loader, TemplateSet) else {}
        where = files[planned.template].filename if planned.template in files else planned.template
        return UserError(Problem(where, f"over budget: the render {what} one render may take (target {planned.target.id}); "
                                        "a Dockerfile renders in milliseconds: look for loops, repeated strings or large "
                                        "numbers in this template and the templates it uses"))

    def _worker(self, loader: jinja2.BaseLoader, source: str, planned: PlannedImage) -> subprocess.Popen:
        if self.process is not None and self.serving is not None and self.serving[0] is loader and self.serving[1] == source:
            return self.process
        self.close()
        paths = [path for path in sys.path if path]  # "" would be the working folder: a team's repository
        boot = (f"import sys; sys.path[:0] = {paths!r}; from buildkit.adapters.template_worker import serve; "
                f"serve({self.time_budget!r}, {self.memory_budget!r}, {self.output_budget!r})")
        self.process = subprocess.Popen([sys.executable, "-I", "-c", boot], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, close_fds=True)
        self.serving, self.buffer = (loader, source), b""
        assert self.process.stdin is not None
        _send(self.process.stdin, (loader, source))
        ready = self._reply(START_SECONDS)
        if not (ready and ready.get("ready")):
            self.close()
            raise UserError(Problem(planned.template, "the worker that renders team templates did not start; "
                                                      f"check that {sys.executable} runs"))
        return self.process

    def _reply(self, seconds: float) -> dict | None:
        """The worker's next answer line, or None when it does not come within `seconds` or the worker ends."""
        assert self.process is not None and self.process.stdout is not None
        stream, deadline = self.process.stdout.fileno(), time.monotonic() + seconds
        bound = 6 * self.output_budget + 65536  # the text, JSON-escaped at worst
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or len(self.buffer) > bound or not select.select([stream], [], [], left)[0]:
                return None
            chunk = os.read(stream, 1 << 20)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        try:
            reply = json.loads(line)
        except ValueError:
            return None
        return reply if isinstance(reply, dict) else None

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

    def __del__(self) -> None:
        self.close()
