"""The probe, run here on the CPU with real torch (2.13.0+cpu), real g++ and the real Python headers: the
same functions the image runs, and the same failures an image without a compiler or headers has."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest
import torch  # the test extra installs it: the probe needs a real torch

from buildkit.image import probe
from testkit.probe_process import run_probe


def test_kernels_pass_on_the_cpu_against_float64():
    results = probe.kernel_checks(torch, "cpu", seed=1234)
    assert [r["name"] for r in results] == ["matmul_fp32", "matmul_bf16", "elementwise_fp32", "conv2d_fp32"]
    for result in results:
        assert result["passed"], result
        assert 0 < result["error"] <= result["threshold"]  # never exactly 0: the inputs are fresh and non-zero
        assert result["seconds"] >= 0


def test_bf16_error_is_larger_than_fp32_error():
    by_name = {r["name"]: r["error"] for r in probe.kernel_checks(torch, "cpu", seed=7)}
    assert by_name["matmul_bf16"] > 100 * by_name["matmul_fp32"]


def test_relative_error_detects_a_wrong_result():
    reference = torch.randn(64, 64, dtype=torch.float64)
    wrong = reference.float() * 1.01
    assert probe.relative_error(torch, wrong, reference) == pytest.approx(0.01, rel=1e-3)
    assert probe.relative_error(torch, reference.float(), reference) < 1e-6


def test_inputs_are_fresh_per_seed():
    first = probe.kernel_checks(torch, "cpu", seed=1)[0]["error"]
    second = probe.kernel_checks(torch, "cpu", seed=2)[0]["error"]
    assert first != second


@pytest.fixture(scope="module")
def fresh_report():
    """One run as in an image: a fresh process, a first compile with no warm cache."""
    return run_probe()


@pytest.mark.slow
def test_probe_prints_one_json_report_with_the_build_facts(fresh_report):
    report = fresh_report
    assert report["probe_version"] == probe.PROBE_VERSION == 2
    assert report["torch"]["version"] == torch.__version__
    assert report["torch"]["cuda"] == torch.version.cuda and report["torch"]["hip"] == torch.version.hip
    assert report["devices"] == [] and report["available"] is False  # no GPU on this machine
    assert "gpu_checks" not in report  # GPU checks need --kernels and a device
    assert report["distributions"]["torch"] == torch.__version__
    assert report["os"]["id"]
    assert report["toolchain"]["cxx"] == shutil.which("g++") and report["toolchain"]["python_h"] is True
    assert [(c["name"], c["passed"]) for c in report["checks"]] == [
        ("torch.compile (CPU)", True),
        ("OpenMP", True),
        ("numpy interop", True),
        ("linalg (CPU)", True),
    ]
    assert all(c["seconds"] >= 0 for c in report["checks"])


# ---- the named CPU checks, from a fresh probe process ----


@pytest.fixture(scope="module")
def cpu_checks(fresh_report):
    return {check["name"]: check for check in fresh_report["checks"]}


@pytest.mark.slow
def test_torch_compile_on_the_cpu_passes_and_agrees_with_eager(cpu_checks):
    check = cpu_checks["torch.compile (CPU)"]
    assert check["passed"], check
    # fresh non-zero inputs: a compiled float32 result is never bit-identical to the float64 eager one
    assert 0 < check["relative_error"] <= check["threshold"] == probe.THRESHOLDS["compile_fp32"]
    assert check["detail"].startswith("inductor, C++: relative error") and "vector ISA" in check["detail"]


@pytest.mark.slow
def test_openmp_numpy_and_linalg_pass(cpu_checks):
    import numpy

    assert cpu_checks["OpenMP"]["passed"] and cpu_checks["OpenMP"]["detail"] == f"available, {torch.get_num_threads()} threads"
    assert cpu_checks["numpy interop"] == {
        **cpu_checks["numpy interop"],
        "passed": True,
        "detail": f"numpy {numpy.__version__}: from_numpy / .numpy() round trip",
    }
    assert "skipped" not in cpu_checks["numpy interop"]
    linalg = cpu_checks["linalg (CPU)"]
    assert linalg["passed"] and 0 < linalg["relative_error"] <= linalg["threshold"]


def test_numpy_not_installed_is_a_skipped_note(monkeypatch):
    monkeypatch.setitem(sys.modules, "numpy", None)  # how Python spells "no such module" for find_spec
    check = probe.run_check("numpy interop", lambda: probe.numpy_check(torch, 1), 10)
    assert check["passed"] and check["skipped"]
    assert check["detail"] == "skipped (numpy not installed): torch does not require it"


@pytest.mark.slow
def test_a_compiled_result_that_differs_from_eager_fails(monkeypatch):
    # TEST DOUBLE of a miscompiling torch.compile: the real one cannot be made wrong on purpose
    monkeypatch.setattr(torch, "compile", lambda function, **options: lambda x, y: function(x, y) * 1.01)
    check = probe.run_check("torch.compile (CPU)", lambda: probe.compile_check(torch, "cpu", 3), 60, probe.explain_compile_failure)
    assert not check["passed"]
    assert check["error"].startswith("the compiled function differs from eager: relative error 1.00e-02 > 1e-04")


@pytest.mark.slow
def test_a_check_past_its_time_limit_fails_and_the_next_one_runs():
    """The alarm is the event: a check that would sleep for a minute ends as CheckTimeout (the probe's alarm is a
    signal, so this runs in the main thread, unguarded: a broken alarm costs this test the minute, then fails it)."""
    slow = probe.run_check("slow", lambda: time.sleep(60), 1)
    assert slow == {**slow, "passed": False, "error": "CheckTimeout: did not finish within 1 s"}
    assert probe.run_check("next", lambda: {"detail": "ran"}, 1)["passed"]


def test_the_gpu_libraries_of_a_cpu_torch_are_reported_missing():
    # the GPU library checks run only with a device; on this CPU torch they fail where a GPU image's would pass
    checks = {check["name"]: check for check in probe.library_checks(torch, "cpu")}
    assert checks["DNN library"]["error"] == "torch was built without cuDNN"
    assert checks["collective library"]["error"] == "torch.distributed has no NCCL backend (is_nccl_available() is False)"


# ---- an image without a compiler or without the Python headers, for real ----


def environment(**changes):
    env = {key: value for key, value in os.environ.items() if key not in ("CXX", "CC")}
    env.update(changes)
    return env


@pytest.mark.parametrize(
    "changes,compiler",
    [
        ({"PATH": "EMPTY"}, "g++"),  # no g++ anywhere on PATH, CXX unset: inductor's default search
        ({"CXX": "/opt/no-such-toolchain/bin/c++"}, "/opt/no-such-toolchain/bin/c++"),  # CXX names a compiler that is not there
    ],
)
@pytest.mark.slow
def test_no_cxx_compiler_fails_torch_compile_naming_the_compiler(tmp_path, changes, compiler):
    if changes.get("PATH") == "EMPTY":
        changes = {"PATH": str(tmp_path)}  # an empty folder: python itself is started by its full path
    report = run_probe(environment(**changes))
    checks = {check["name"]: check for check in report["checks"]}
    assert checks["torch.compile (CPU)"]["passed"] is False
    assert checks["torch.compile (CPU)"]["error"] == f"InvalidCxxCompiler: no working C++ compiler ({compiler}) in the image"
    # one failing check never takes the others down
    assert all(checks[name]["passed"] for name in ("OpenMP", "numpy interop", "linalg (CPU)"))


@pytest.mark.slow
def test_missing_python_headers_fail_torch_compile_naming_python_h(tmp_path):
    include = probe.python_include_dir()
    # TEST DOUBLE of an image without the Python headers (no python3-dev): the real g++, run by a wrapper
    # that drops the -I of the Python include folder, since this machine's headers cannot be uninstalled
    wrapper = tmp_path / "g++"
    wrapper.write_text(f'#!/bin/sh\nfor a; do shift; [ "$a" = "-I{include}" ] || set -- "$@" "$a"; done\nexec {shutil.which("g++")} "$@"\n')
    wrapper.chmod(0o755)
    report = run_probe(environment(CXX=str(wrapper)))
    check = report["checks"][0]
    assert check["name"] == "torch.compile (CPU)" and check["passed"] is False
    assert check["error"] == f"Python.h missing: the compiler did not find the Python headers in {include}"


# ---- what a GPU compile's failures look like (Triton cannot run here: its errors, verbatim) ----


@pytest.mark.parametrize(
    "error,explained",
    [
        # triton/runtime/build.py `_build`, when neither $CC nor gcc nor clang is found
        (
            RuntimeError("Failed to find C compiler. Please specify via CC environment variable or set triton.knobs.build.impl."),
            "Triton found no C compiler (CC, gcc or clang) in the image to build its launcher",
        ),
        # torch/_inductor/exc.py TritonMissing
        (
            RuntimeError("Cannot find a working triton installation. Either the package is not installed or it is too old."),
            "Triton is not installed: torch.compile on a GPU needs it (triton, or pytorch-triton-rocm)",
        ),
        (RuntimeError("/tmp/x/main.c:1:10: fatal error: cuda.h: No such file or directory"), "cuda.h missing: a header the compiler needs is not installed"),
        (RuntimeError("/usr/bin/ld: cannot find -lcuda: No such file or directory"), "the linker cannot find libcuda.so"),
        (RuntimeError("/usr/bin/ld: cannot find -l:libcuda.so.1: No such file or directory"), "the linker cannot find libcuda.so.1"),
        (RuntimeError("InductorError: CheckTimeout: did not finish within 240 s"), "did not finish within 240 s"),
        # the same words from someone else, without a time in seconds: explained as any other error, never a crash
        (RuntimeError("a compile worker did not finish within its time limit"), "RuntimeError: a compile worker did not finish within its time limit"),
        (ValueError("something new\nwith detail"), "ValueError: something new"),
    ],
)
def test_compile_failures_are_explained(error, explained):
    assert probe.explain_compile_failure(error) == explained


def test_a_triton_launcher_build_failure_without_python_h_is_named(monkeypatch):
    # Triton's _build runs the compiler with check_call, so only the exit status reaches the exception
    monkeypatch.setattr(probe, "python_include_dir", lambda: "/nonexistent/include/python3.12")
    error = subprocess.CalledProcessError(1, ["gcc", "/tmp/x/main.c"])
    assert probe.explain_compile_failure(error) == "Python.h missing: the Python headers are not installed (no /nonexistent/include/python3.12/Python.h)"


def test_arch_in_build_understands_ptx():
    assert probe._arch_in_build("sm_90", ["sm_80", "sm_90"])
    assert probe._arch_in_build("sm_121", ["sm_120", "compute_120"])  # PTX JIT-compiles forward
    assert not probe._arch_in_build("sm_70", ["sm_75", "compute_120"])
    assert not probe._arch_in_build("gfx1100", ["gfx90a", "gfx942"])


@pytest.mark.parametrize(
    "name, extension, expected",
    [
        ("loadedvision", "def _has_ops():\n    return True\n", True),  # torchvision's own: its C++/HIP ops library loaded
        ("brokenvision", "def _has_ops():\n    return False\n", False),
        ("plainvision", None, None),  # a package without an extension module: nothing to ask
    ],
)
def test_a_companion_s_compiled_ops_are_reported(tmp_path, monkeypatch, name, extension, expected):
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text('__version__ = "0.29.0+rocm10.1.0"\n')
    if extension is not None:
        (package / "extension.py").write_text(extension)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert probe.companion_ops(name) is expected
    assert probe.companion_ops("no_such_companion") is None
