"""The smoke-test probe. It runs INSIDE an image: standard library plus torch only, no buildkit.

Usage (buildkit passes this file's text to `python -c`): python probe.py [--kernels] [--check-timeout S]

Prints one JSON object on the last line of stdout: the torch build (version, local tag, torch.version.cuda
/ hip / rocm), compiled arch list, cuDNN/MIOpen and NCCL/RCCL, companion packages, the OS and installed
distributions (for parity), the visible devices with their arch and whether torch was built for it, and,
with --kernels, per device: matmul in fp32 and bf16 against a float64 CPU reference, an elementwise op
and a conv2d, each with its relative error, threshold and time. Every facet is guarded: a failure in one
is recorded as that facet's error, so the JSON always says as much as could be learnt.

The ROCm check is `torch.version.hip is not None`: `torch.backends.rocm` does not exist, and a ROCm torch
still calls its devices "cuda".
"""

import json
import platform
import random
import signal
import sys
import time
import traceback

PROBE_VERSION = 1
# Relative Frobenius error against float64, per check. fp32 allows TF32 (on by default for cuDNN convs,
# and for matmuls where a user enables it); bf16 keeps 8 bits of mantissa.
THRESHOLDS = {"matmul_fp32": 2e-3, "matmul_bf16": 3e-2, "elementwise_fp32": 1e-5, "conv2d_fp32": 2e-3}


class CheckTimeout(Exception):
    pass


def _alarm(seconds):
    def expire(signum, frame):
        raise CheckTimeout(f"took longer than {seconds} s")

    if hasattr(signal, "SIGALRM"):
        signal.signal(signal.SIGALRM, expire)
        signal.alarm(seconds)


def _guard(result, key, function):
    try:
        result[key] = function()
    except Exception as error:  # a facet that fails is reported, never fatal
        result.setdefault("errors", {})[key] = f"{type(error).__name__}: {error}"


def relative_error(torch, value, reference):
    reference = reference.to(torch.float64)
    return float((value.detach().to("cpu", torch.float64) - reference).norm() / reference.norm())


def kernel_checks(torch, device, seed, timeout=60):
    """The four kernel checks on one device, with fresh random inputs (never zeros) and float64 references."""
    generator = torch.Generator().manual_seed(seed)

    def randn(*shape):
        values = torch.randn(*shape, generator=generator, dtype=torch.float64)
        return values + 0.5 * torch.sign(values)  # keeps every element away from zero

    def synchronize():
        if str(device).startswith("cuda"):
            torch.cuda.synchronize(device)

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
            synchronize()
            entry["error"] = relative_error(torch, value, reference())
            entry["passed"] = entry["error"] <= THRESHOLDS[name]
        except Exception as error:
            entry["passed"] = False
            entry["failure"] = f"{type(error).__name__}: {error}"
        finally:
            if hasattr(signal, "SIGALRM"):
                signal.alarm(0)
        entry["seconds"] = round(time.perf_counter() - started, 4)
        results.append(entry)
    return results


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

    import re

    # PEP 503 normalised names, so twins compare equal however their wheels spell a name
    return {
        re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower(): dist.version
        for dist in metadata.distributions()
        if dist.metadata["Name"]
    }


def probe(run_kernels, check_timeout=60):
    result = {"probe_version": PROBE_VERSION, "python": platform.python_version()}
    _guard(result, "os", _os_release)
    _guard(result, "distributions", _distributions)
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
            found[name] = {"version": str(module.__version__), "local": _local_tag(str(module.__version__))}
        return found

    _guard(result, "companions", companions)
    _guard(result, "available", lambda: bool(torch.cuda.is_available()))
    devices = []
    if result.get("available"):
        compiled = result.get("compiled_archs") or []
        for index in range(torch.cuda.device_count()):
            entry = {"index": index}
            try:
                entry["name"], entry["arch"] = _device_arch(torch, index)
                entry["arch_in_build"] = _arch_in_build(entry["arch"], compiled)
                if run_kernels:
                    seed = random.SystemRandom().randrange(2**31)
                    entry["seed"] = seed
                    entry["kernels"] = kernel_checks(torch, f"cuda:{index}", seed, check_timeout)
            except Exception as error:
                entry["failure"] = f"{type(error).__name__}: {error}"
            devices.append(entry)
    result["devices"] = devices
    result["kernels_requested"] = bool(run_kernels)
    return result


def main(argv):
    run_kernels = "--kernels" in argv
    timeout = int(argv[argv.index("--check-timeout") + 1]) if "--check-timeout" in argv else 60
    print(json.dumps(probe(run_kernels, timeout), sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1:])
