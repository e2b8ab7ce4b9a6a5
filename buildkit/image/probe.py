"""The smoke-test probe. It runs INSIDE an image: standard library plus torch only, no buildkit.

Usage (buildkit passes this file's text to `python -c`):
    python probe.py [--kernels] [--check-timeout S] [--compile-timeout S]

Prints one JSON object on the last line of stdout: the torch build (version, local tag, torch.version.cuda
/ hip / rocm), compiled arch list, cuDNN/MIOpen and NCCL/RCCL, companion packages (and whether torchvision's
compiled ops load: torchvision.extension._has_ops()), the OS and installed
distributions (for parity), the C/C++ toolchain torch.compile would use, the visible devices with their
arch and whether torch was built for it, and the named checks.

Named checks are what a PyTorch user runs first, each reported as {"name", "passed", "seconds", "detail"}
or, failed, {"name", "passed": false, "seconds", "error"}, the error saying what the user would hit.
They follow PyTorch's own release smoke test (pytorch/pytorch .ci/pytorch/smoke_test/smoke_test.py:
OpenMP, numpy, conv2d, linalg, torch.compile, cuDNN and NCCL versions; and .ci/pytorch/check_binary.sh):
- always, on the CPU ("checks"): torch.compile through inductor, which needs a C++ compiler and the
  Python headers in the image; OpenMP; numpy interop (skipped, not failed, without numpy: torch does not
  depend on it, and PyTorch's smoke test skips it too); a linalg op;
- with --kernels, per visible GPU ("devices"[i]): matmul fp32/bf16, an elementwise op and a conv2d
  ("kernels", unchanged since probe version 1), and named checks ("checks"): torch.compile on the device,
  which runs Triton, and Triton builds a C launcher at run time with the system C compiler and Python.h;
  a linalg op; where torchvision is installed, its nms against the CPU's (its kernels are compiled per GPU arch
  too: on AMD's split wheels they come in a device package of their own); once per process ("gpu_checks"): the DNN library (cuDNN, or MIOpen on ROCm) and the
  collective library (NCCL, or RCCL on ROCm) load and run.
Every check and facet is guarded: a failure in one is recorded as its error, so the JSON always says as
much as could be learnt. Each check runs under an alarm; torch.compile has a longer one of its own.

The ROCm check is `torch.version.hip is not None`: `torch.backends.rocm` does not exist, and a ROCm torch
still calls its devices "cuda".
"""

import importlib
import json
import os
import platform
import random
import re
import shutil
import signal
import sys
import sysconfig
import tempfile
import time
import traceback

PROBE_VERSION = 2
# Relative Frobenius error against float64, per check. fp32 allows TF32 (on by default for cuDNN convs,
# and for matmuls where a user enables it); bf16 keeps 8 bits of mantissa. A compiled kernel may reorder
# a reduction or use the GPU's fast exp; a miscompiled one is off by far more than 1e-4.
THRESHOLDS = {
    "matmul_fp32": 2e-3, "matmul_bf16": 3e-2, "elementwise_fp32": 1e-5, "conv2d_fp32": 2e-3,
    "compile_fp32": 1e-4, "linalg_fp32": 1e-4,
}
CHECK_TIMEOUT = 60
# A first torch.compile traces, generates and compiles C++ (or Triton) code: 10-60 s on a slow machine,
# more when the machine is shared.
COMPILE_TIMEOUT = 240


class CheckTimeout(Exception):
    pass


class CheckFailed(Exception):
    """A check that ran and found the image wanting; the message is what the report says."""


def _alarm(seconds):
    def expire(signum, frame):
        raise CheckTimeout(f"did not finish within {seconds} s")

    if hasattr(signal, "SIGALRM"):
        signal.signal(signal.SIGALRM, expire)
        signal.alarm(seconds)


def _disarm():
    if hasattr(signal, "SIGALRM"):
        signal.alarm(0)


def _guard(result, key, function):
    try:
        result[key] = function()
    except Exception as error:  # a facet that fails is reported, never fatal
        result.setdefault("errors", {})[key] = f"{type(error).__name__}: {error}"


def _first_line(error):
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0][:300] if text else '(no message)'}"


def run_check(name, function, timeout, explain=_first_line):
    """One named check, never raising: {"name", "passed", "seconds", "detail"} or {..., "error"}.
    `function` returns the entry's other keys ("detail" at least) or raises CheckFailed with the message."""
    entry = {"name": name}
    started = time.perf_counter()
    try:
        _alarm(timeout)
        entry.update(function())
        entry["passed"] = True
    except CheckFailed as failure:
        entry.update(passed=False, error=str(failure))
    except Exception as error:
        entry.update(passed=False, error=explain(error))
    finally:
        _disarm()
    entry["seconds"] = round(time.perf_counter() - started, 3)
    return entry


def relative_error(torch, value, reference):
    reference = reference.to(torch.float64)
    return float((value.detach().to("cpu", torch.float64) - reference).norm() / reference.norm())


def _random(torch, generator):
    def randn(*shape):
        values = torch.randn(*shape, generator=generator, dtype=torch.float64)
        return values + 0.5 * torch.sign(values)  # keeps every element away from zero

    return randn


def _synchronize(torch, device):
    if str(device).startswith("cuda"):
        torch.cuda.synchronize(device)


def kernel_checks(torch, device, seed, timeout=CHECK_TIMEOUT):
    """The four kernel checks on one device, with fresh random inputs (never zeros) and float64 references."""
    randn = _random(torch, torch.Generator().manual_seed(seed))
    a, b = randn(256, 256), randn(256, 256)
    x = randn(4096)
    image, weight = randn(2, 3, 32, 32), randn(8, 3, 3, 3)
    checks = {
        "matmul_fp32": (lambda: a.float().to(device) @ b.float().to(device), lambda: a @ b),
        "matmul_bf16": (lambda: a.to(device, torch.bfloat16) @ b.to(device, torch.bfloat16), lambda: a @ b),
        "elementwise_fp32": (
            lambda: torch.exp(torch.sin(x.float().to(device))) * x.float().to(device),
            lambda: torch.exp(torch.sin(x)) * x,
        ),
        "conv2d_fp32": (
            lambda: torch.nn.functional.conv2d(image.float().to(device), weight.float().to(device), padding=1),
            lambda: torch.nn.functional.conv2d(image, weight, padding=1),
        ),
    }
    results = []
    for name, (run, reference) in checks.items():
        entry = {"name": name, "threshold": THRESHOLDS[name]}
        started = time.perf_counter()
        try:
            _alarm(timeout)
            value = run()
            _synchronize(torch, device)
            measured = relative_error(torch, value, reference())
            entry["error"], entry["passed"] = measured, measured <= THRESHOLDS[name]
        except Exception as error:
            entry["passed"] = False
            entry["failure"] = f"{type(error).__name__}: {error}"
        finally:
            _disarm()
        entry["seconds"] = round(time.perf_counter() - started, 4)
        results.append(entry)
    return results


# ---- the toolchain torch.compile needs, and what its absence looks like ----

def python_include_dir():
    # inductor: torch/_inductor/cpp_builder.py `_get_python_include_dirs` (sysconfig "include"); Triton:
    # triton/runtime/build.py `_build` (the same path, from the default scheme)
    return sysconfig.get_path("include")


def toolchain():
    """What inductor and Triton will look for, found the way they look for it:
    - inductor's C++ compiler: torch._inductor.config.cpp.cxx, (None, $CXX or "g++"); None only means
      "install g++ from conda" when TORCH_INDUCTOR_INSTALL_GXX is set (cpp_builder.py
      `get_cpp_compiler` / `cpp_compiler_search`, which raises InvalidCxxCompiler when none runs);
    - Triton's C compiler for its launcher and driver utils: $CC, else gcc, else clang
      (triton/runtime/build.py `_build`, called from `compile_module_from_src` by the CUDA and the ROCm
      driver alike: third_party/nvidia/backend/driver.py and third_party/amd/backend/driver.py);
    - both compile code that includes Python.h, from the Python headers."""
    include = python_include_dir()
    cc = os.environ.get("CC")
    return {
        "cxx": shutil.which(os.environ.get("CXX", "g++")),
        "cc": shutil.which(cc) if cc else shutil.which("gcc") or shutil.which("clang"),
        "python_include": include,
        "python_h": _has_python_h(include),
    }


def _has_python_h(include):
    return os.path.isfile(os.path.join(include, "Python.h"))


def _python_h_missing():
    include = python_include_dir()
    if _has_python_h(include):
        return f"Python.h missing: the compiler did not find the Python headers in {include}"
    return f"Python.h missing: the Python headers are not installed (no {include}/Python.h)"


def explain_compile_failure(error):
    """The cause a user of torch.compile would see, in one line, for the failures images really have."""
    text = f"{type(error).__name__}: {error}"
    timed_out = re.search(r"did not finish within \d+ s", text)  # CheckTimeout's words, wherever torch wrapped them
    if timed_out:
        return timed_out.group(0)
    if "InvalidCxxCompiler" in text:
        try:
            from torch._inductor import config

            candidates = config.cpp.cxx if isinstance(config.cpp.cxx, (list, tuple)) else (config.cpp.cxx,)
            names = ", ".join(str(c) for c in candidates if c)
        except Exception:
            names = os.environ.get("CXX", "g++")
        return f"InvalidCxxCompiler: no working C++ compiler ({names}) in the image"
    if re.search(r"Python\.h: No such file", text):
        return _python_h_missing()
    if "Failed to find C compiler" in text:
        return "Triton found no C compiler (CC, gcc or clang) in the image to build its launcher"
    if re.search(r"No module named '(pytorch_)?triton'|Cannot find a working triton installation", text):
        return "Triton is not installed: torch.compile on a GPU needs it (triton, or pytorch-triton-rocm)"
    header = re.search(r"fatal error: ([^\s:]+): No such file", text)
    if header:
        return f"{header.group(1)} missing: a header the compiler needs is not installed"
    library = re.search(r"cannot find -l(:?)([\w.+-]+)", text)
    if library:  # -lcuda means libcuda.so; -l:libcuda.so.1 (newer Triton) names the file
        name = library.group(2) if library.group(1) else f"lib{library.group(2)}.so"
        return f"the linker cannot find {name}"
    if "returned non-zero exit status" in text:
        # Triton's _build runs the compiler with check_call: its diagnostics went to stderr, not into the error
        if not _has_python_h(python_include_dir()):
            return _python_h_missing()
        return f"the compiler failed: {_first_line(error)} (its diagnostics are on the probe's stderr)"
    return _first_line(error)


# ---- the named checks ----

def _vector_isa(device):
    """The SIMD instruction set inductor picked on the CPU (PyTorch's smoke test prints it too); a note only."""
    if device != "cpu":
        return ""
    try:
        try:
            from torch._inductor.cpu_vec_isa import pick_vec_isa
        except ImportError:  # torch < 2.5
            from torch._inductor.codecache import pick_vec_isa  # type: ignore[attr-defined]  # where it lived before torch 2.5
        isa = pick_vec_isa()
    except Exception as error:
        return f", vector ISA unknown ({type(error).__name__})"
    return f", vector ISA {isa}" if isa else ", no vector ISA (scalar code)"


def compile_check(torch, device, seed):
    """torch.compile (inductor, default mode) of a small fused function, against eager float64."""
    import torch._dynamo

    randn = _random(torch, torch.Generator().manual_seed(seed))
    x, y = randn(64, 128), randn(64, 128)

    def function(x, y):
        return torch.softmax(torch.sin(x) * y + torch.cos(y), dim=-1) * x.sum(dim=-1, keepdim=True)

    reference = function(x, y)
    torch._dynamo.reset()  # a new compile per device, never a cache-size fallback to eager
    suppress = torch._dynamo.config.suppress_errors
    torch._dynamo.config.suppress_errors = False  # an image setting it would hide failures behind eager
    # One kernel, compiled once: inductor would first build a precompiled header of its C++ prelude for later
    # compiles (about a quarter of this check's time), which none will use. The same compiler still compiles
    # the same code against the same headers.
    try:
        import torch._inductor.config as inductor
    except ImportError:  # a torch without inductor fails in torch.compile below, with its own error
        precompile = None
    else:
        precompile = getattr(inductor, "cpp_cache_precompile_headers", None)
    if precompile is not None:
        inductor.cpp_cache_precompile_headers = False
    try:
        value = torch.compile(function, fullgraph=True)(x.float().to(device), y.float().to(device))
        _synchronize(torch, device)
    finally:
        torch._dynamo.config.suppress_errors = suppress
        if precompile is not None:
            inductor.cpp_cache_precompile_headers = precompile
    error = relative_error(torch, value, reference)
    threshold = THRESHOLDS["compile_fp32"]
    if not error <= threshold:
        raise CheckFailed(f"the compiled function differs from eager: relative error {error:.2e} > {threshold:.0e}")
    backend = "inductor, C++" if device == "cpu" else "inductor, Triton"
    return {
        "detail": f"{backend}: relative error {error:.2e} <= {threshold:.0e} against eager float64{_vector_isa(device)}",
        "relative_error": error, "threshold": threshold,
    }


def openmp_check(torch):
    if not torch.backends.openmp.is_available():
        raise CheckFailed("torch was built without OpenMP: CPU operators run on one thread")
    return {"detail": f"available, {torch.get_num_threads()} threads"}


def numpy_check(torch, seed):
    from importlib import util

    if util.find_spec("numpy") is None:
        return {"skipped": True, "detail": "skipped (numpy not installed): torch does not require it"}
    import numpy

    try:
        array = numpy.random.default_rng(seed).standard_normal((16, 16)) + 0.5
        tensor = torch.from_numpy(array)
        tensor[0, 0] = 7.0  # from_numpy shares the array's memory
        shared = array[0, 0] == 7.0
        back = (tensor * 3).numpy()
        same = bool(numpy.allclose(back, array * 3)) and torch.tensor(numpy.arange(5)).tolist() == [0, 1, 2, 3, 4]
    except Exception as error:  # e.g. "Numpy is not available": torch built against another NumPy ABI
        raise CheckFailed(f"numpy {numpy.__version__}: {_first_line(error)}") from error
    if not (shared and same):
        raise CheckFailed(f"numpy {numpy.__version__}: from_numpy / .numpy() did not round-trip")
    return {"detail": f"numpy {numpy.__version__}: from_numpy / .numpy() round trip"}


def linalg_check(torch, device, seed):
    """torch.linalg.svd in float32 (LAPACK; cuSOLVER, hipSOLVER or MAGMA on a GPU), rebuilt in float64."""
    randn = _random(torch, torch.Generator().manual_seed(seed))
    matrix = randn(48, 32)
    u, s, vh = torch.linalg.svd(matrix.float().to(device), full_matrices=False)
    _synchronize(torch, device)
    rebuilt = u.cpu().double() @ torch.diag(s.cpu().double()) @ vh.cpu().double()
    error = relative_error(torch, rebuilt, matrix)
    threshold = THRESHOLDS["linalg_fp32"]
    if not error <= threshold:
        raise CheckFailed(f"torch.linalg.svd is wrong: relative error {error:.2e} > {threshold:.0e}")
    return {"detail": f"svd: relative error {error:.2e} <= {threshold:.0e}", "relative_error": error, "threshold": threshold}


def dnn_check(torch, device):
    """cuDNN, or MIOpen on ROCm: torch.backends.cudnn is MIOpen there (torch/csrc/Module.cpp sets
    `_has_cudnn` for USE_ROCM; torch/csrc/cuda/shared/cudnn.cpp binds miopenGetVersion and `is_cuda`)."""
    hip = torch.version.hip is not None
    expected = "MIOpen" if hip else "cuDNN"
    if not torch.backends.cudnn.is_available():
        raise CheckFailed(f"torch was built without {expected}")
    version = torch.backends.cudnn.version()  # loads the library; raises on a runtime/compile mismatch
    if version is None:
        raise CheckFailed(f"{expected} could not be loaded")
    binding = torch._C._cudnn
    library = "cuDNN" if getattr(binding, "is_cuda", not hip) else "MIOpen"
    runtime = getattr(binding, "getRuntimeVersion", None)
    text = ".".join(str(part) for part in runtime()) if runtime else str(version)
    # cuDNN 9 and MIOpen load their kernels on first use: run one convolution through the library
    with torch.backends.cudnn.flags(enabled=True):
        torch.nn.functional.conv2d(torch.ones(1, 3, 8, 8, device=device), torch.ones(4, 3, 3, 3, device=device))
        _synchronize(torch, device)
    return {"library": library, "version": text, "detail": f"{library} {text}: loaded, a conv2d ran through it"}


def collective_check(torch, device):
    """NCCL, or RCCL on ROCm: torch's ROCm build hipifies <nccl.h> to <rccl/rccl.h>
    (torch/utils/hipify/cuda_to_hip_mappings.py), so torch.cuda.nccl and the "nccl" backend are RCCL there."""
    import torch.cuda.nccl

    library = "RCCL" if torch.version.hip is not None else "NCCL"
    if not (torch.distributed.is_available() and torch.distributed.is_nccl_available()):
        raise CheckFailed(f"torch.distributed has no {library} backend (is_nccl_available() is False)")
    version = ".".join(str(part) for part in torch.cuda.nccl.version())  # ncclGetVersion loads the library
    # the collective kernels are per GPU arch and load only when a collective runs: one all-reduce on one GPU
    tensor = torch.full((1024,), 3.0, device=device)
    torch.cuda.nccl.all_reduce([tensor])
    _synchronize(torch, device)
    if not bool((tensor == 3.0).all()):
        raise CheckFailed(f"{library} {version}: an all-reduce over one GPU changed the values")
    return {"library": library, "version": version, "detail": f"{library} {version}: loaded, an all-reduce ran on {device}"}


CPU_CHECKS = ("torch.compile (CPU)", "OpenMP", "numpy interop", "linalg (CPU)")


def cpu_checks(torch, seed, check_timeout=CHECK_TIMEOUT, compile_timeout=COMPILE_TIMEOUT):
    if getattr(torch, "BUILDKIT_TEST_DOUBLE", False):
        # buildkit's own tests install tiny stand-ins for ROCm and CUDA torch (no ROCm wheel can be had
        # there); they can import and report their build, not compile. Said so, never counted as run.
        return [{"name": name, "passed": True, "skipped": True, "seconds": 0.0, "detail": "skipped (torch test double)"}
                for name in CPU_CHECKS]
    return [
        run_check("torch.compile (CPU)", lambda: compile_check(torch, "cpu", seed), compile_timeout, explain_compile_failure),
        run_check("OpenMP", lambda: openmp_check(torch), check_timeout),
        run_check("numpy interop", lambda: numpy_check(torch, seed), check_timeout),
        run_check("linalg (CPU)", lambda: linalg_check(torch, "cpu", seed), check_timeout),
    ]


def device_checks(torch, device, seed, check_timeout=CHECK_TIMEOUT, compile_timeout=COMPILE_TIMEOUT):
    checks = [
        run_check("torch.compile (Triton)", lambda: compile_check(torch, device, seed), compile_timeout, explain_compile_failure),
        run_check("linalg", lambda: linalg_check(torch, device, seed), check_timeout),
    ]
    if companion_ops("torchvision") is not None:  # installed: its GPU kernels must run on this device's arch too
        checks.append(run_check("torchvision ops", lambda: torchvision_ops_check(torch, device, seed), check_timeout))
    return checks


def companion_ops(name):
    """Whether a companion's compiled ops load (torchvision's extension library, whose GPU kernels a ROCm image's
    companion device package carries): torchvision.extension._has_ops(); None when it is not installed or has no
    such extension to ask."""
    try:
        extension = importlib.import_module(name + ".extension")
    except ImportError:
        return None
    has_ops = getattr(extension, "_has_ops", None)
    return bool(has_ops()) if has_ops is not None else None


def torchvision_ops_check(torch, device, seed):
    """torchvision.ops.nms on the device against the CPU's: its kernel is torchvision's own, compiled per GPU arch
    (on AMD's split wheels, in amd-torchvision-device-<gfx>), so a missing arch fails here, not in a user's job."""
    import torchvision

    generator = torch.Generator().manual_seed(seed)
    corners = torch.rand(128, 2, generator=generator) * 100
    boxes = torch.cat([corners, corners + 1 + torch.rand(128, 2, generator=generator) * 50], dim=1)
    scores = torch.rand(128, generator=generator)
    expected = torchvision.ops.nms(boxes, scores, 0.5)
    found = torchvision.ops.nms(boxes.to(device), scores.to(device), 0.5)
    _synchronize(torch, device)
    if not torch.equal(found.cpu(), expected):
        raise CheckFailed(f"torchvision.ops.nms on {device} kept other boxes than on the CPU")
    return {"detail": f"nms on {device}: the {len(expected)} boxes the CPU keeps"}


def library_checks(torch, device, check_timeout=CHECK_TIMEOUT):
    return [
        run_check("DNN library", lambda: dnn_check(torch, device), check_timeout),
        run_check("collective library", lambda: collective_check(torch, device), check_timeout),
    ]


# ---- the build facts ----

def _local_tag(version):
    return version.split("+", 1)[1] if "+" in version else ""


def _compiled_archs(torch):
    flags = getattr(torch._C, "_cuda_getArchFlags", None) if hasattr(torch, "_C") else None
    text = flags() if flags else None
    if text:
        return sorted(set(text.split()))
    return list(torch.cuda.get_arch_list())


def _device_arch(torch, index):
    properties = torch.cuda.get_device_properties(index)
    gcn = getattr(properties, "gcnArchName", None)
    if gcn:
        return properties.name, gcn.split(":")[0]  # "gfx90a:sramecc+:xnack-" -> gfx90a
    major, minor = torch.cuda.get_device_capability(index)
    return properties.name, f"sm_{major}{minor}"


def _arch_in_build(arch, compiled):
    if arch.startswith("gfx"):
        return arch in compiled
    number = arch[3:]
    # a device runs sm_XY cubins, or PTX of an older arch that the driver compiles for it
    return arch in compiled or any(c.startswith("compute_") and int(c[8:]) <= int(number) for c in compiled)


# Not platform.freedesktop_os_release(): it came in Python 3.10 and images of older torch run 3.9. The
# same reader is in inventory.py: each file runs alone in an image (as `python -c` text), so they cannot share it.
def _os_release():
    values = {}
    try:
        with open("/etc/os-release") as handle:
            for line in handle:
                key, _, value = line.strip().partition("=")
                values[key] = value.strip('"')
    except OSError:
        pass
    return {"id": values.get("ID", ""), "version_id": values.get("VERSION_ID", "")}


def _distributions():
    from importlib import metadata

    # PEP 503 normalised names, so twins compare equal however their wheels spell a name
    return {
        re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower(): dist.version
        for dist in metadata.distributions()
        if dist.metadata["Name"]
    }


def _fresh_compile_caches():
    """A user's first compile: empty inductor and Triton caches for this process, so the C++ compiler and
    Triton's launcher build really run (a warm cache in the image would hide a missing compiler).
    Returns the folder to remove and the variables to restore."""
    folder = tempfile.mkdtemp(prefix="buildkit-probe-")
    saved = {name: os.environ.get(name) for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(folder, "inductor")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(folder, "triton")
    return folder, saved


def _restore(folder, saved):
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    shutil.rmtree(folder, ignore_errors=True)


def probe(run_kernels, check_timeout=CHECK_TIMEOUT, compile_timeout=COMPILE_TIMEOUT):
    folder, saved = _fresh_compile_caches()
    try:
        return _probe(run_kernels, check_timeout, compile_timeout)
    finally:
        _restore(folder, saved)


def _probe(run_kernels, check_timeout, compile_timeout):
    result = {"probe_version": PROBE_VERSION, "python": platform.python_version(), "machine": platform.machine()}
    _guard(result, "os", _os_release)
    _guard(result, "distributions", _distributions)
    _guard(result, "toolchain", toolchain)
    started = time.perf_counter()
    try:
        import torch
    except Exception:
        result["import_error"] = traceback.format_exc(limit=3).strip().splitlines()[-1]
        return result
    result["import_seconds"] = round(time.perf_counter() - started, 3)
    version = str(torch.__version__)
    result["torch"] = {
        "version": version,
        "local": _local_tag(version),
        "cuda": getattr(torch.version, "cuda", None),
        "hip": getattr(torch.version, "hip", None),
        "rocm": getattr(torch.version, "rocm", None),
    }
    _guard(result, "compiled_archs", lambda: _compiled_archs(torch))
    _guard(result, "dnn", lambda: torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None)
    _guard(result, "nccl", lambda: torch.distributed.is_available() and torch.distributed.is_nccl_available())

    def companions():
        found = {}
        for name in ("torchvision", "torchaudio"):
            try:
                module = __import__(name)
            except ImportError:
                continue
            found[name] = {"version": str(module.__version__), "local": _local_tag(str(module.__version__)), "ops": companion_ops(name)}
        return found

    _guard(result, "companions", companions)
    seed = random.SystemRandom().randrange(2**31)
    result["checks_seed"] = seed
    result["checks"] = cpu_checks(torch, seed, check_timeout, compile_timeout)
    _guard(result, "available", lambda: bool(torch.cuda.is_available()))
    devices = []
    if result.get("available"):
        compiled = result.get("compiled_archs") or []
        for index in range(torch.cuda.device_count()):
            entry: dict = {"index": index}  # of the JSON report: ints, names, flags, lists of checks
            try:
                entry["name"], entry["arch"] = _device_arch(torch, index)
                entry["arch_in_build"] = _arch_in_build(entry["arch"], compiled)
                if run_kernels:
                    device_seed = random.SystemRandom().randrange(2**31)
                    entry["seed"] = device_seed
                    entry["kernels"] = kernel_checks(torch, f"cuda:{index}", device_seed, check_timeout)
                    entry["checks"] = device_checks(torch, f"cuda:{index}", device_seed, check_timeout, compile_timeout)
            except Exception as error:
                entry["failure"] = f"{type(error).__name__}: {error}"
            devices.append(entry)
    if run_kernels and devices:
        result["gpu_checks"] = library_checks(torch, "cuda:0", check_timeout)
    result["devices"] = devices
    result["kernels_requested"] = bool(run_kernels)
    return result


def _option(argv, name, default):
    return int(argv[argv.index(name) + 1]) if name in argv else default


def main(argv):
    report = probe(
        "--kernels" in argv,
        _option(argv, "--check-timeout", CHECK_TIMEOUT),
        _option(argv, "--compile-timeout", COMPILE_TIMEOUT),
    )
    print(json.dumps(report, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1:])
