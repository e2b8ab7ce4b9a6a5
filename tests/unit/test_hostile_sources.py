"""hipify's readers against sources someone else wrote (core/porting/preprocessor.py, core/porting/analysis.py, core/porting/cuda_constants.py,
adapters/hipify/convert.py): each bound is proven by the event or the counter that shows it held (the nesting an #if
reached, the macros it expanded, the line look-ups of the line map, an argument or a value left unread past its
window), never by the clock; each outcome is clean: findings or one message, no traceback, nothing outside --out
written and nothing outside the tree read.

A fifth private corpus found these: #if expressions evaluated by recursion (400 nested parentheses, 5,000 `!`, a
chain of 2,000 macros), macros that double at each level (minutes), a 64 KB declaration line and a 150 KB line of
unclosed intrinsic calls scanned quadratically, the line map built with difflib over 1,000 repeated lines (68 s),
and an include of a header outside the tree that made the report raise ValueError."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from buildkit.core.porting import analysis as porting
from buildkit.core.porting import cuda_constants as constants
from buildkit.core.porting import preprocessor
from buildkit.core.porting.analysis import BuildMacros, LineMap, findings, scan
from buildkit.core.porting.cuda_constants import Definitions
from buildkit.core.porting.preprocessor import ACTIVE, OPEN, Activity, _Expression, physical_lines
from buildkit.ui.hipify import hipify_lines
from testkit.trees import assert_refused, snapshot

ROCM = BuildMacros.assumed({"USE_ROCM": "1"}, {"USE_ROCM": "1"}, "test")
HOST = ROCM.for_file("k.hip")


def state_of_body(condition: str, defines: str = "") -> str:
    """The state of the line an #if guards, under the ROCm build's macros."""
    text = f"{defines}#if {condition}\nbody();\n#endif\n"
    return Activity(text, HOST).at(defines.count("\n") + 2).state


def expression(text: str, defined: dict[str, str | None] | None = None) -> _Expression:
    return _Expression(text, defined or {}, set())


def finishes(work, seconds: float = 120):
    """Run `work` in a thread; a generous hang guard only (the bounds are proven by counters, not by this)."""
    box: dict = {}
    worker = threading.Thread(target=lambda: box.setdefault("value", work()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), "hung"
    return box["value"]


# --- #if expressions: nesting, macro chains, doubling --------------------------------------------------------------


def test_four_hundred_nested_parentheses_are_open_at_the_nesting_bound():
    deep = expression("(" * 400 + "1" + ")" * 400)
    assert deep.value() is None and deep.deepest == preprocessor.MAX_NESTING + 1
    assert state_of_body("(" * 400 + "1" + ")" * 400) == OPEN
    # what C requires compilers to take (63 levels) is read
    assert state_of_body("(" * 63 + "USE_ROCM" + ")" * 63) == ACTIVE


def test_five_thousand_negations_are_read_without_recursion():
    assert state_of_body("!" * 5000 + "USE_ROCM") == ACTIVE  # an even count: the value itself
    assert state_of_body("!" * 4999 + "USE_ROCM") != ACTIVE
    assert expression("-" * 5000 + "1").deepest <= 1


def test_a_chain_of_two_thousand_macros_is_open_at_the_expansion_depth():
    defines = "".join(f"#define M{i} M{i + 1}\n" for i in range(2000)) + "#define M2000 1\n"
    assert state_of_body("M0", defines) == OPEN
    chain = expression("M0", {f"M{i}": f"M{i + 1}" for i in range(2000)} | {"M2000": "1"})
    assert chain.tokens is None and chain.expansions == preprocessor.MAX_EXPANSION_DEPTH + 1
    short = {f"M{i}": f"M{i + 1}" for i in range(100)} | {"M100": "1"}
    assert expression("M0", short).value() == 1


def test_macros_that_double_at_each_level_stop_at_the_token_bound():
    doubling = {"A0": "1", **{f"A{i}": f"A{i - 1}+A{i - 1}" for i in range(1, 60)}}
    found = expression("A59", doubling)
    assert found.tokens is None and found.expansions <= preprocessor.MAX_EXPANDED_TOKENS + preprocessor.MAX_EXPANSION_DEPTH  # not 2^60
    assert expression("A10", doubling).value() == 1024
    defines = "#define A0 1\n" + "".join(f"#define A{i} A{i - 1}+A{i - 1}\n" for i in range(1, 60))
    assert state_of_body("A59", defines) == OPEN


@pytest.mark.parametrize(
    "condition",
    [
        "1 ? " * 2000 + "1" + " : 0" * 2000,  # ?: nested 2,000 deep
        "1 || (" * 1000 + "1" + ")" * 1000,
        "'" + "\\" * 10_000 + " x",  # an unclosed character literal of backslashes (the token pattern once backtracked on it)
        "9" * 5000,  # past Python's 4,300 digits
        " * ".join(["0x7fffffffffffffff"] * 5000),  # a product past any C integer
    ],
)
def test_pathological_conditions_are_open_not_errors(condition):
    assert state_of_body(condition) == OPEN


def test_conditionals_nested_five_thousand_deep_are_followed():
    text = "#if USE_ROCM\n" * 5000 + "body();\n" + "#endif\n" * 5000
    assert Activity(text, HOST).at(5001).state == ACTIVE and Activity(text, HOST).unbalanced == ()


# --- conditionals that do not balance, and lines as compilers count them -----------------------------------------


def test_an_unterminated_conditional_is_named_at_its_line():
    text = "int a;\n#ifdef WITH_CUDA\ncudaFree(p);\n#if X\n#endif\n"
    found = findings("k.hip", text, "k.cu", None, Definitions.of([text]), ROCM)
    unbalanced = [f for f in found if f.kind == "preprocessor"]
    assert [(f.line, f.subject, f.blocks) for f in unbalanced] == [(2, "#ifdef WITH_CUDA", True)]
    assert "no #endif before the end of the file" in unbalanced[0].detail
    stray = Activity("#endif\nint a;\n#else\n", HOST).unbalanced
    assert [(item.line, item.problem) for item in stray] == [
        (1, "#endif without #if: the compiler stops here"),
        (3, "#else without #if: the compiler stops here"),
    ]


def test_lines_are_counted_at_line_feeds_only():
    """A form feed, a vertical tab, U+2028 or CRLF is no line break to a compiler: findings after one keep their line."""
    text = "int a;\f\v\u2028\u0085\r\ncudaFooBar(x);\r\n\x00\u202e\n#if WITH_CUDA\ncudaBarBaz(y);\n#endif\n"
    assert len(physical_lines(text)) == 6
    found = scan(text, True)
    assert [(f.line, f.subject) for f in found] == [(2, "cudaFooBar"), (5, "cudaBarBaz")]
    assert Activity(text, HOST).at(5).state == OPEN


def test_a_finding_on_a_line_with_control_characters_is_printed_escaped(tmp_path):
    from buildkit.core.porting.report import HipifyReport

    text = "\x1b]52;c;eA==\x07 int lane = threadIdx.x % 32; // \u202egnp.\n"
    report = HipifyReport("src", "out", findings=findings("k.hip", text, "k\x1b[31m.cu", None, Definitions.of([text]), ROCM))
    lines = hipify_lines(report)
    assert any("lane arithmetic" in line for line in lines)
    assert all(line.isprintable() for line in lines), lines


# --- long lines: every scan reads a bounded stretch from where it starts -------------------------------------------


def test_a_call_whose_arguments_run_past_their_window_is_not_read():
    code = "__shfl_sync(" + "(" * porting.MAX_ARGUMENT_CHARS + ", x, 1)"
    assert porting._arguments(code, len("__shfl_sync("), 1) == []
    assert porting._arguments("__shfl_sync(0xffffffffu, x, 1)", len("__shfl_sync("), 1) == ["0xffffffffu"]
    found = scan(code + "\n", True)
    assert len(found) == 1 and "the width of its mask could not be read from the tree" in found[0].detail


def test_a_value_past_its_window_is_not_read():
    long = "1|" * constants.MAX_VALUE_CHARS + "1"
    names = Definitions.of([f"constexpr unsigned kLong = {long};\n#define LONG_MASK {long}\nconstexpr unsigned kShort = 0xffffffffu;\n"])
    assert "kLong" not in names.values and "LONG_MASK" not in names.values and names.values["kShort"] == "0xffffffffu"
    assert constants.resolve(long, names).bits is None
    assert constants.resolve("(" * constants.MAX_VALUE_CHARS + "1" + ")" * constants.MAX_VALUE_CHARS, names).bits is None


LONG_LINES = {  # each once took seconds to minutes per 64-150 KB line
    "declarations": "int a = b " * 6_600,
    "casts": "int a = (unsigned)" * 3_900,
    "dim3": "dim3 a(b " * 7_300,
    "unclosed_calls": " __shfl_sync(0xffffffff, (x" * 6_000,
    "unclosed_launches": " hipLaunchKernelGGL((k), (" * 6_000,
    "includes": "#include <" * 6_600,
    "dotted": "asm(" + "a." * 32_000,
    "comments": "/* */ x // y" * 10_000 + "/*" + "a" * 65_536,
}


@pytest.mark.slow
@pytest.mark.parametrize("name", LONG_LINES)
def test_a_long_hostile_line_is_scanned(name):
    text = LONG_LINES[name] + "\n"
    for origin in ("k.cu", "k.cpp"):  # PTX is looked for in host files only
        finishes(lambda origin=origin: findings("k.hip", text, origin, text.replace("hip", "cuda"), Definitions.of([text]), ROCM))


def test_the_line_map_of_a_thousand_repeated_lines_makes_a_linear_number_of_look_ups():
    """difflib's matcher took 68 s over a header of 1,000 repeated lines; the map makes at most WINDOW look-ups per line."""
    for original, hipified in [
        ("a;\nb;\n" * 1000, "// hipified\n" + "a;\nc;\n" * 1000),
        ("cudaFree(p);\n}\n" * 1000, "// hipified\n#include <hip/hip_runtime.h>\n" + "hipFree(p);\n}\n" * 1000),
    ]:
        lines = LineMap(original, hipified)
        assert lines.comparisons <= 3 * LineMap.WINDOW * len(physical_lines(hipified)), lines.comparisons
        assert lines.original(1) == 1 and lines.original(len(physical_lines(hipified))) == len(physical_lines(original))


def test_the_line_map_follows_a_long_insertion_through_unique_lines():
    original = "".join(f"line {i};\n" for i in range(300))
    hipified = "".join(f"line {i};\n" for i in range(100)) + "added;\n" * 100 + "".join(f"line {i};\n" for i in range(100, 300))
    lines = LineMap(original, hipified)
    assert [lines.original(n) for n in (1, 100, 201, 400)] == [1, 100, 101, 300]


# --- the tree: includes leading out of it, include chains, cycles ----------------------------------------------------


@pytest.fixture
def tree(tmp_path) -> Path:
    pytest.importorskip("torch.utils.hipify")
    (tmp_path / "src" / "sub").mkdir(parents=True)
    return tmp_path / "src"


def test_an_include_leading_out_of_the_tree_is_never_followed(cli, tree, tmp_path):
    """torch's hipify follows `#include "X"` to any X whose name ends like one of the tree's files: the header
    outside was recorded among its results (relative_to raised ValueError) and the include rewritten to lead from the
    scratch copy. It is now left as written, never read, and nothing is written beside it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "k.h").write_text('#define SECRET "outside-the-tree"\ncudaMalloc(p);\n')
    (tree / "k.h").write_text("int k;\n")
    source = f'#include "../../outside/k.h"\n#include "{outside / "k.h"}"\n#include "../k.h"\n__global__ void f(float* x) {{}}\n'
    (tree / "sub" / "k.cu").write_text(source)
    before = snapshot(outside)
    result = cli("hipify", tree, "--out", tmp_path / "out", "--json", tmp_path / "report.json")
    assert result.code == 0 and "Traceback" not in result.err and "internal error" not in result.err, result.err
    hipified = (tmp_path / "out" / "sub" / "k.hip").read_text()
    assert f'#include "../../outside/k.h"\n#include "{outside / "k.h"}"\n' in hipified  # as the user wrote them
    assert "outside-the-tree" not in result.out + (tmp_path / "report.json").read_text()
    assert snapshot(outside) == before


def test_self_includes_and_cycles_are_hipified(cli, tree, tmp_path):
    (tree / "self.h").write_text('#pragma once\n#include "self.h"\nint s;\n')
    (tree / "b.h").write_text('#pragma once\n#include "c.h"\nint b;\n')
    (tree / "c.h").write_text('#pragma once\n#include "b.h"\nint c;\n')
    (tree / "k.cu").write_text('#include "self.h"\n#include "b.h"\n__global__ void f() {}\n')
    result = cli("hipify", tree, "--out", tmp_path / "out")
    assert result.code == 0 and "Traceback" not in result.err, result.err


def test_an_include_chain_deeper_than_compilers_read_is_one_message(cli, tree, tmp_path):
    from buildkit.adapters.hipify.convert import MAX_INCLUDE_DEPTH

    length = 600  # once a RecursionError inside torch's hipify
    for index in range(length):
        (tree / f"h{index}.h").write_text(f'#include "h{index + 1}.h"\nint v{index};\n')
    (tree / f"h{length}.h").write_text("int last;\n")
    (tree / "k.cu").write_text('#include "h0.h"\n__global__ void f() {}\n')
    before = snapshot(tmp_path)
    result = cli("hipify", tree, "--out", tmp_path / "out")
    assert_refused(result, f"begins a chain of more than {MAX_INCLUDE_DEPTH} nested #includes", "break the chain")
    assert snapshot(tmp_path) == before


def test_sources_with_nul_bytes_bidi_controls_and_crlf_are_hipified(cli, tree, tmp_path):
    (tree / "k.cu").write_bytes(b"// \xe2\x80\xae reversed\r\n__global__ void f(float* x) {\x00\r\n  cudaFooBar(x);\r\n}\r\n")
    result = cli("hipify", tree, "--out", tmp_path / "out")
    assert result.code == 1 and "Traceback" not in result.err, result.err  # the unmapped identifier blocks
    assert "k.cu:3 (k.hip:5): cudaFooBar" in result.out and all(line.isprintable() for line in result.out.splitlines()), result.out
    assert os.path.exists(tmp_path / "out" / "k.hip")


# --- setup.py: read as data, never run, within its bounds ------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, note",
    [
        ("fifo", "setup.py: is a FIFO (named pipe), not a regular file; its build flags were not read"),
        ("huge", "setup.py: is larger than 1 MB"),
        ("link_out", "setup.py: is a link leading out of the source tree, which hipify reads alone; its build flags were not read"),
        ("deep", "setup.py: not Python that buildkit can parse (an expression is nested deeper than Python's parser goes)"),
        ("runs_code", ""),
    ],
)
def test_a_hostile_setup_py_is_a_note_and_never_runs(cli, tree, tmp_path, kind, note):
    (tree / "k.cu").write_text("__global__ void f(float* x) {}\n")
    setup = tree / "setup.py"
    witness = tmp_path / "ran"
    outside = tmp_path / "elsewhere.py"
    outside.write_text(f"open({str(witness)!r}, 'w')\nCUDAExtension('x', ['k.cu'], define_macros=[('LEAKED', None)])\n")
    if kind == "fifo":
        os.mkfifo(setup)
    elif kind == "huge":
        with setup.open("wb") as handle:
            handle.truncate(50 << 20)  # 50 MB, never read
    elif kind == "link_out":
        setup.symlink_to(outside)
    elif kind == "deep":
        setup.write_text("x = " + "-" * 5000 + "1\n")
    else:
        setup.write_text(
            f"open({str(witness)!r}, 'w')\n__import__('os').system('touch {witness}')\nCUDAExtension('pkg._C', ['k.cu'], define_macros=[('READ', None)])\n"
        )
    result = finishes(lambda: cli("hipify", tree, "--out", tmp_path / "out"))
    assert result.code == 0 and "Traceback" not in result.err and "internal error" not in result.err, result.err
    assert note in result.out and "LEAKED" not in result.out, result.out
    assert not witness.exists()  # nothing in it ran
    if kind == "runs_code":
        assert "-DREAD" in result.out
