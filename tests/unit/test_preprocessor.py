"""The pure readers behind hipify's findings: #if branches in three values (core/porting/preprocessor.py), masks and
block sizes through the tree's definitions (core/porting/cuda_constants.py), and setup.py's extension flags read without
running it (core/porting/setup_py.py)."""

from __future__ import annotations

import pytest

from buildkit.core.porting.analysis import BuildMacros
from buildkit.core.porting.cuda_constants import Definitions, block_threads, resolve
from buildkit.core.porting.preprocessor import ACTIVE, INACTIVE, OPEN, Activity, Macros, parse_define, parse_dump
from buildkit.core.porting.setup_py import ProjectFlags, read_setup_py

ROCM = BuildMacros.assumed({"USE_ROCM": "1", "__HIP_PLATFORM_AMD__": "1"}, {"USE_ROCM": "1", "__HIP_PLATFORM_AMD__": "1"}, "test")


def states(text: str, macros: list[Macros]) -> list[str]:
    activity = Activity(text, macros)
    return [activity.at(n).state for n in range(1, len(text.splitlines()) + 1)]


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ("#ifndef USE_ROCM", INACTIVE),
        ("#ifdef USE_ROCM", ACTIVE),
        ("#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800", INACTIVE),
        ("#if !defined(USE_ROCM) || WITH_CUDA", OPEN),  # WITH_CUDA: nobody here knows
        ("#if defined(USE_ROCM) || WITH_CUDA", ACTIVE),
        ("#if __HIP_DEVICE_COMPILE__", ACTIVE),  # the device pass compiles it
        ("#if USE_ROCM + 1 == 2 && !(3 > 4) ? 1 : 0", ACTIVE),
        ("#if __has_include(<cuda/std/atomic>)", OPEN),
        ("#if defined(__CUDACC__)", INACTIVE),  # nvcc's own macro
    ],
)
def test_branch_states_under_the_rocm_build(condition, expected):
    text = f"{condition}\nbody();\n#endif\n"
    assert states(text, ROCM.for_file("k.hip"))[1] == expected


def test_elif_else_defines_and_continuations_are_followed():
    text = (
        "#if defined(WITH_CUDA)\ncuda();\n#elif defined(USE_ROCM)\nrocm();\n#else\ncpu();\n#endif\n"
        "#define PORTED 1\n#if PORTED && \\\n    defined(__HIP__)\nported();\n#endif\n#undef PORTED\n#if PORTED\nno();\n#endif\n"
    )
    got = states(text, ROCM.for_file("k.hip"))
    assert [got[1], got[3], got[5]] == [OPEN, OPEN, INACTIVE]  # rocm() unless WITH_CUDA; cpu() never
    assert got[10] == ACTIVE and got[14] == INACTIVE
    # a header is compiled by any of the build's compilations: __HIP__ only in hipcc's, so both branches are live
    header = "#ifdef __HIP__\nhip();\n#else\nhost();\n#endif\n"
    assert states(header, ROCM.for_file("k.h"))[1:4:2] == [ACTIVE, ACTIVE]
    assert states(header, ROCM.for_file("k.cpp"))[1:4:2] == [INACTIVE, ACTIVE]


def test_compiler_dumps_and_flags_read_as_macros():
    dumped = parse_dump("#define __HIP__ 1\n#define HIP_VERSION_MAJOR 6\n#define f(x) x\n")
    assert dumped == {"__HIP__": "1", "HIP_VERSION_MAJOR": "6", "f": None}
    assert [parse_define(d) for d in ("WITH_CUDA", "N=4", "F(x)=x")] == [("WITH_CUDA", "1"), ("N", "4"), ("F", None)]
    macros = BuildMacros.dumped(dumped, dumped, {}, "test")
    assert states("#if HIP_VERSION_MAJOR >= 6\nnew();\n#endif\n", macros.for_file("k.hip"))[1] == ACTIVE
    assert "__CUDA_ARCH__" in macros.hipcc_host.undefined and "__HIP__" in macros.cxx.undefined


@pytest.mark.parametrize(
    ("expression", "bits", "value"),
    [
        ("FULL_MASK", 32, 0xFFFFFFFF),
        ("0xffffffffu", 32, 0xFFFFFFFF),
        ("uint32_t(-1)", 32, 0xFFFFFFFF),
        ("static_cast<unsigned>(-1)", 32, 0xFFFFFFFF),
        ("(unsigned)-1", 32, 0xFFFFFFFF),
        ("kMask", 32, 0xFFFFFFFF),
        ("lanes", 32, None),
        ("~0ull", 64, (1 << 64) - 1),
        ("FULL64", 64, (1 << 64) - 1),
        ("active", 64, None),
        ("__activemask()", 64, None),
        ("(1ull << 32) - 1", 64, 0xFFFFFFFF),
        ("unknown_mask", None, None),
        ("TWICE", None, None),
    ],
)
def test_mask_widths_through_the_trees_definitions(expression, bits, value):
    names = Definitions.of(
        [
            "#define FULL_MASK 0xffffffff\n#define FULL64 0xffffffffffffffffull\nconstexpr unsigned kMask = ~0u;\n"
            "__device__ void f(unsigned lanes);\nunsigned long long active = __activemask();\n#define TWICE 1\n",
            "#define TWICE 2\n",
        ]
    )  # defined twice, two ways: not guessed
    resolved = resolve(expression, names)
    assert (resolved.bits, resolved.value) == (bits, value)


def test_block_sizes_through_dim3_and_constants():
    names = Definitions.of(["#define THREADS 32\nstatic constexpr int kBlock = 256;\ndim3 block(THREADS, 4);\n"])
    assert [block_threads(e, names)[0] for e in ("dim3(32)", "dim3(dim3(32, 4))", "dim3(block)", "dim3(THREADS)", "dim3(kBlock)", "dim3(n)")] == [
        32,
        32,
        32,
        32,
        256,
        None,
    ]


def test_setup_py_literal_arguments_are_read_and_computed_ones_named():
    text = """
from torch.utils import cpp_extension
macros = [("WITH_CUDA", None), ("N", 4)]
flags = []
flags += ["-O3"]
setup(ext_modules=[
    cpp_extension.CUDAExtension("pkg._C", ["a.cu", "./b.cpp"], define_macros=macros, include_dirs=["inc"],
                                extra_compile_args={"cxx": ["-g"], "nvcc": flags}),
    CppExtension(name="pkg._cpu", sources=sources_from_glob(), extra_compile_args=["-O1"]),
])
"""
    setup = read_setup_py(text)
    first, second = setup.extensions
    assert (first.name, first.sources, first.defines, first.include_dirs, first.cxx_flags, first.nvcc_flags) == (
        "pkg._C",
        ("a.cu", "./b.cpp"),
        ("-DWITH_CUDA", "-DN=4"),
        ("inc",),
        ("-g",),
        (),
    )
    assert first.unread == ('extra_compile_args["nvcc"] (setup.py:8)',)  # flags is changed by +=: not a literal
    assert (second.sources, second.cxx_flags, second.nvcc_flags, second.unread) == ((), ("-O1",), ("-O1",), ("sources (setup.py:9)",))
    project = ProjectFlags(setup.extensions, ("-DEXTRA",), ("-O2",), ())
    assert project.for_unit("b.cpp").defines == ("-DWITH_CUDA", "-DN=4", "-DEXTRA")  # b.cpp is pkg._C's
    assert project.for_unit("elsewhere.cu").cxx == ("-g", "-O1")  # listed by none: every extension's flags
    assert 'not literal, not read: extra_compile_args["nvcc"] (setup.py:8); pass them with -D, --hipcc-flags or --cxx-flags' in project.described()[0]
    assert read_setup_py("print 'python 2'\n").problem.startswith("setup.py:1: not Python that buildkit can parse")


# --- setup.py as someone else wrote it: read as data, within bounds -------------------------------------------------


def test_a_setup_py_with_a_byte_order_mark_is_read_as_python_reads_it():
    """Python runs a setup.py that starts with a UTF-8 byte-order mark: its extensions were once dropped unread."""
    setup = read_setup_py(b'\xef\xbb\xbfCUDAExtension("pkg._C", ["a.cu"], define_macros=[("WITH_CUDA", None)])\n')
    assert setup.problem == "" and setup.extensions[0].defines == ("-DWITH_CUDA",)
    assert read_setup_py('\ufeffCUDAExtension("pkg._C", ["a.cu"])\n').extensions[0].sources == ("a.cu",)


@pytest.mark.parametrize("expression", ["-" * 5000 + "1", "not " * 5000 + "x", "+".join(["1"] * 100_000), "f" + "()" * 20_000])
def test_a_5000_deep_expression_is_a_note_not_a_recursion_error(expression):
    setup = read_setup_py(f"x = {expression}\nCUDAExtension('pkg._C', ['a.cu'])\n".encode())
    assert setup.extensions == () and setup.problem == (
        "setup.py: not Python that buildkit can parse (an expression is nested deeper than Python's parser goes); its build flags were not read"
    )


def test_a_literal_nested_past_its_bound_is_not_evaluated():
    from buildkit.core.porting.setup_py import MAX_LITERAL_DEPTH

    deep = "[" * (MAX_LITERAL_DEPTH + 1) + '"-O2"' + "]" * (MAX_LITERAL_DEPTH + 1)
    setup = read_setup_py(f"flags = {deep}\nCUDAExtension('pkg._C', ['a.cu'], extra_compile_args=flags, include_dirs={deep})\n")
    assert setup.extensions[0].unread == ("include_dirs (setup.py:2)", "extra_compile_args (setup.py:2)")


def test_a_setup_py_past_its_size_bound_is_not_parsed():
    from buildkit.core.porting.setup_py import MAX_SETUP_BYTES

    setup = read_setup_py(b'x = "' + b"a" * MAX_SETUP_BYTES + b'"\n')
    assert setup.problem == "setup.py: larger than 1 MB, so not read as a setup.py; its build flags were not read"


def test_paths_leading_out_of_the_tree_are_not_used_and_named():
    setup = read_setup_py(
        'CUDAExtension("p._C", ["a.cu", "../../x.cu", "/abs.cu"], include_dirs=["inc", "/usr/local/cuda/include", '
        '"inc/../.."], extra_compile_args={"cxx": ["-I/opt/x", "-O2", "-include", "../secret.h", "-Iinc"], '
        '"nvcc": ["-I", "/usr/include", "-lineinfo"]})\n'
    )
    extension = setup.extensions[0]
    assert (extension.sources, extension.include_dirs, extension.cxx_flags, extension.nvcc_flags) == (("a.cu",), ("inc",), ("-O2", "-Iinc"), ("-lineinfo",))
    assert extension.outside == (
        "sources '../../x.cu' (setup.py:1)",
        "sources '/abs.cu' (setup.py:1)",
        "include_dirs '/usr/local/cuda/include' (setup.py:1)",
        "include_dirs 'inc/../..' (setup.py:1)",
        "flag '-I/opt/x' (setup.py:1)",
        "flag '-include ../secret.h' (setup.py:1)",
        "flag '-I /usr/include' (setup.py:1)",
    )
    assert "(outside the source tree, not used: sources '../../x.cu' (setup.py:1)" in ProjectFlags(setup.extensions).described()[0]


@pytest.mark.parametrize("source", [b"x = 1\0\n", b"\xff\xfe invalid utf-8\n", "x = '\u202e'\nCUDAExtension(\n".encode()])
def test_unparsable_setup_py_is_a_note(source):
    setup = read_setup_py(source)
    assert setup.extensions == () and setup.problem.startswith("setup.py") and "its build flags were not read" in setup.problem
