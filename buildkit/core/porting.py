"""What a hipified CUDA tree still needs before it runs on AMD GPUs, read from its text and from what the
compilers said about it. Pure: text in, findings and verdicts out.

- The static report: CUDA identifiers and headers hipify left (it has no HIP mapping for them), inline
  PTX, warp intrinsics that HIP lacks or whose semantics differ, and CUDA-only libraries; each at the line
  of the user's own file (mapped back from the hipified one).
- The compile verdict: a compiler's output read as "compiled", "a defect of the code at file:line", "a
  header missing here (and how to get it)", "failed outside the user's code" or "beyond the toolchain".
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

# --- the static report -----------------------------------------------------------------------------------------

# What is CUDA-only once hipify has run: runtime/driver/library identifiers and CUDA-only headers.
_IDENTIFIER_RE = re.compile(r"\b(?:(?:cuda|cublas(?:Lt)?|cufft|curand|cusparse(?:Lt)?|cusolver(?:Dn|Sp)?|cudnn|nvrtc|nvtx|nccl)[A-Z]\w*"
                            r"|cu[A-Z][a-z]\w*|CU(?:DA|BLAS)_[A-Z0-9_]+)\b")
_INCLUDE_RE = re.compile(r'#\s*include\s*[<"]([^>"]+)[>"]')
_CUDA_HEADER_RE = re.compile(r"(?:cuda|cub|thrust|cublas|cufft|curand|cusparse|cusolver|cudnn|nvtx)")
# CUDA-only libraries torch's hipify has no mapping for (torch/utils/hipify/cuda_to_hip_mappings.py names
# none of these headers), first match wins.
_CUDA_ONLY_LIBRARIES = (
    ("cutlass/", "CUTLASS (NVIDIA's GEMM templates, tensor-core PTX): no ROCm build; on AMD GPUs use composable_kernel, hipBLASLt or torch's own ops"),
    ("cute/", "CuTe (part of CUTLASS): no ROCm build; on AMD GPUs use composable_kernel"),
    ("mma.h", "WMMA (nvcuda::wmma tensor-core fragments): ROCm's rocWMMA has another header and API (rocwmma/rocwmma.hpp)"),
    ("cuda/", "libcu++ (cuda::std, cuda::atomic, cuda::barrier, cuda::pipeline): no HIP counterpart in ROCm's headers; use std:: or HIP's own atomics"),
    ("cuda_pipeline", "asynchronous copies (cp.async, Ampere and newer): no HIP counterpart"),
    ("cuda_awbarrier", "asynchronous barriers (Ampere and newer): no HIP counterpart"),
    ("cuda_fp8.h", "CUDA's FP8 types: HIP has its own in hip/hip_fp8.h (ROCm 6.2+), and gfx942 uses the FNUZ encodings where gfx950 and NVIDIA use OCP's"),
    ("cudnn", "cuDNN: MIOpen's API differs (hipify maps a handful of identifiers); torch's own ops are the portable path"),
    ("cutensor", "cuTENSOR: ROCm's hipTensor has another API"),
    ("cudss", "cuDSS: no ROCm counterpart"),
    ("cufile", "cuFile (GPUDirect Storage): ROCm's hipFile is separate and not API-compatible"),
    ("nvshmem", "NVSHMEM: ROCm's rocSHMEM differs; hipify maps only the few calls PyTorch itself uses"),
)
# Warp intrinsics (checked against HIP 6.4's hip/amd_detail/amd_warp_sync_functions.h and amd_warp_functions.h):
# the *_sync variants exist only from ROCm 6.2, behind HIP_ENABLE_WARP_SYNC_BUILTINS (torch's extension build
# defines it), and a static_assert requires a 64-bit mask, because a wavefront has 64 lanes on gfx9 (CDNA);
# __syncwarp and __reduce_*_sync are not declared at all.
_SYNC_INTRINSIC_RE = re.compile(r"\b(__(?:shfl(?:_up|_down|_xor)?|ballot|any|all|match_any|match_all)_sync)\s*\(\s*([^,()]*)")
_MISSING_INTRINSIC_RE = re.compile(r"\b(__syncwarp|__reduce_(?:add|min|max|and|or|xor)_sync)\b")
_FULL_32_BIT_MASK_RE = re.compile(r"^(?:0x[fF]{8}[uU]?|~0[uU]?|4294967295[uU]?)$")
# Lane arithmetic written for 32-thread warps: `lane = tid & 31`, `warp = threadIdx.x / 32`, `>> 5`.
_WARP_32_RE = re.compile(r"(?:%\s*32|&\s*(?:31|0x1[fF])|/\s*32|>>\s*5)\b")
_LANE_WORDS_RE = re.compile(r"lane|warp|threadIdx|tid", re.IGNORECASE)
_INLINE_ASM_RE = re.compile(r"\b(?:asm|__asm__)\s*(?:volatile\s*|__volatile__\s*)?\(")
# PTX in an asm string: typed mnemonics (mov.u32, ld.global.f32, shfl.sync.bfly.b32) or special registers.
_PTX_RE = re.compile(r"\b[a-z]+(?:\.[a-z0-9]+)*\.(?:[usbf](?:8|16|32|64)|pred)\b|%(?:laneid|warpid|smid|tid|ntid|clock)")
DEVICE_SOURCES = (".cu", ".cuh", ".hip")


@dataclass(frozen=True)
class Finding:
    """Something in the user's tree that will not port as it is, at the user's file and line."""

    file: str  # the user's file, relative to the tree
    line: int
    kind: str  # unmapped | inline-asm | warp | library
    subject: str  # the identifier, header or intrinsic
    detail: str  # why, and what to do on ROCm
    blocks: bool  # it cannot work as written (else: correct on NVIDIA, review it for AMD)
    hipified: str = ""  # where it is in the hipified output (file:line), when that file differs


def code_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, code) with // and /* */ comments removed, so prose never counts as a use."""
    in_block = False
    for number, line in enumerate(text.splitlines(), start=1):
        code = ""
        rest = line
        while rest:
            if in_block:
                end = rest.find("*/")
                if end < 0:
                    break
                rest, in_block = rest[end + 2:], False
            else:
                start_block, start_line = rest.find("/*"), rest.find("//")
                if start_line >= 0 and (start_block < 0 or start_line < start_block):
                    code += rest[:start_line]
                    break
                if start_block >= 0:
                    code += rest[:start_block]
                    rest, in_block = rest[start_block + 2:], True
                else:
                    code += rest
                    break
        yield number, code


def scan(hipified_text: str, device_source: bool) -> list[tuple[int, str, str, str, bool]]:
    """(line, kind, subject, detail, blocks) for each thing in a hipified file that will not port as it is."""
    found = []
    for number, code in code_lines(hipified_text):
        include = _INCLUDE_RE.search(code)
        if include:
            header = include.group(1)
            library = next((about for prefix, about in _CUDA_ONLY_LIBRARIES if header.startswith(prefix)), None)
            if library:
                found.append((number, "library", f"#include <{header}>", library, True))
            elif _CUDA_HEADER_RE.match(header):
                found.append((number, "unmapped", f"#include <{header}>", "a CUDA header hipify has no HIP mapping for", True))
            continue
        found += [(number, "unmapped", name, "a CUDA identifier hipify has no HIP mapping for", True) for name in _IDENTIFIER_RE.findall(code)]
        for name, mask in _SYNC_INTRINSIC_RE.findall(code):
            if _FULL_32_BIT_MASK_RE.match(mask.strip()):
                found.append((number, "warp", name, f"the mask {mask.strip()} is 32 bits: HIP's {name} requires a 64-bit mask (ROCm 6.2+) "
                              "and a wavefront has 64 lanes on gfx9 (CDNA), so it names half of one; pass a 64-bit mask "
                              "such as __activemask()", True))
            else:
                found.append((number, "warp", name, f"HIP has {name} from ROCm 6.2 only, with a 64-bit mask (64 lanes on gfx9, 32 on "
                              "RDNA): check that the mask is 64-bit and covers the whole wavefront", False))
        found += [(number, "warp", name, f"{name} has no HIP counterpart (HIP 6.4 declares none): a wavefront runs in lockstep, "
                   "rewrite without it", True) for name in _MISSING_INTRINSIC_RE.findall(code)]
        if _WARP_32_RE.search(code) and _LANE_WORDS_RE.search(code):
            found.append((number, "warp", code.strip()[:60], "lane arithmetic for 32-thread warps: a wavefront has 64 lanes on gfx9 "
                          "(CDNA: MI100 to MI355X) and 32 on RDNA; use warpSize", False))
        if _INLINE_ASM_RE.search(code) and (device_source or _PTX_RE.search(code)):
            found.append((number, "inline-asm", "asm(...)", "inline assembly (PTX): AMD GPUs do not run PTX; rewrite it with HIP "
                          "intrinsics or __builtin_amdgcn_* builtins", True))
    return found


# --- mapping hipified lines back to the user's -----------------------------------------------------------------


class LineMap:
    """Which line of the user's file each line of its hipified version came from. hipify rewrites inside
    lines and adds a few (its breadcrumb comment, a hip_runtime.h include), so a line diff finds them."""

    def __init__(self, original: str, hipified: str):
        self._to_original: dict[int, int] = {}
        before, after = original.splitlines(), hipified.splitlines()
        matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            for j in range(j1, j2):
                if tag == "equal":
                    self._to_original[j + 1] = i1 + (j - j1) + 1
                elif tag == "replace":
                    self._to_original[j + 1] = i1 + min(j - j1, i2 - i1 - 1) + 1
                else:  # a line hipify added: blame the user's line it stands before
                    self._to_original[j + 1] = min(i1 + 1, max(len(before), 1))

    def original(self, hipified_line: int) -> int:
        return self._to_original.get(hipified_line, hipified_line)


# --- the compile verdict ---------------------------------------------------------------------------------------

COMPILED, DEFECT, MISSING, ELSEWHERE, TOOLCHAIN = "ok", "error", "missing", "environment", "toolchain"
_ROCM_TORCH = ("a ROCm build of torch: PyTorch's ROCm build writes it and no CUDA header of this torch becomes it; "
               "check with torch from PyTorch's ROCm wheel index")
# Where a header the compile check did not find comes from, first match wins. Debian's package names and
# suites as `apt-cache madison` lists them (Debian 12 bookworm, 13 trixie, unstable); ROCm's own packages
# where Debian has none.
_HEADER_SOURCES = (
    ("Python.h", "Python's C headers: apt-get install python3-dev (the -dev package of the Python that runs buildkit)"),
    ("pybind11/", "pybind11, which torch's wheel carries in torch/include: reinstall torch"),
    ("ATen/hip/", _ROCM_TORCH),
    ("c10/hip/", _ROCM_TORCH),
    ("torch/", "torch's C++ headers: pip install torch"),
    ("ATen/", "torch's C++ headers: pip install torch"),
    ("c10/", "torch's C++ headers: pip install torch"),
    ("hip/", "HIP's headers: apt-get install libamdhip64-dev, or ROCm's hip-dev"),
    ("hipblaslt/", "hipBLASLt's headers: libhipblaslt-dev (Debian unstable; Debian 12 and 13 have none), or ROCm's hipblaslt-dev"),
    ("hipblas/", "hipBLAS's headers: libhipblas-dev (Debian 13 and later), or ROCm's hipblas-dev"),
    ("hipsparselt/", "hipSPARSELt's headers: ROCm's hipsparselt-dev (Debian only in experimental)"),
    ("hipsparse/", "hipSPARSE's headers: libhipsparse-dev, or ROCm's hipsparse-dev"),
    ("hipsolver/", "hipSOLVER's headers: libhipsolver-dev (Debian 13 and later), or ROCm's hipsolver-dev"),
    ("hipcub/", "hipCUB's headers: libhipcub-dev (Debian 13 and later), or ROCm's hipcub-dev"),
    ("hiprand/", "hipRAND's headers: libhiprand-dev, or ROCm's hiprand-dev"),
    ("hipfft/", "hipFFT's headers: libhipfft-dev (Debian 13 and later), or ROCm's hipfft-dev"),
    ("thrust/", "rocThrust's headers: librocthrust-dev (Debian 13 and later), or ROCm's rocthrust-dev"),
    ("rocprim/", "rocPRIM's headers: librocprim-dev, or ROCm's rocprim-dev"),
    ("rocblas/", "rocBLAS's headers: librocblas-dev (Debian 13 and later), or ROCm's rocblas-dev"),
    ("rocsparse/", "rocSPARSE's headers: librocsparse-dev, or ROCm's rocsparse-dev"),
    ("rocsolver/", "rocSOLVER's headers: librocsolver-dev (Debian 13 and later), or ROCm's rocsolver-dev"),
    ("rocrand/", "rocRAND's headers: librocrand-dev, or ROCm's rocrand-dev"),
    ("rccl/", "RCCL's headers: librccl-dev (Debian 13 and later), or ROCm's rccl-dev"),
    ("miopen/", "MIOpen's headers: libmiopen-dev (Debian unstable), or ROCm's miopen-hip-dev"),
    ("roctracer/", "roctracer's headers: ROCm's roctracer-dev (not in Debian)"),
)


def header_advice(header: str) -> str:
    """How to get a header the compiler did not find."""
    return next((advice for prefix, advice in _HEADER_SOURCES if header.startswith(prefix)),
                "it is in none of this tree, torch's, Python's or the toolchain's include folders: add its folder "
                "with --include-dir, or install the library that provides it")
_DIAGNOSTIC_RE = re.compile(r"^(?P<path>[^\s:][^:]*):(?P<line>\d+):(?:(?P<column>\d+):)?\s+"
                            r"(?P<kind>fatal error|error|warning|note|required from)\b:?\s*(?P<message>.*)$")
_MISSING_RE = re.compile(r"^'?(?P<header>[^':]+?)'?(?: file not found|: No such file or directory)$")


@dataclass(frozen=True)
class Location:
    file: str  # the user's file, relative to the tree
    line: int
    hipified: str = ""  # file:line in the hipified output, when the compiled file is not the user's own

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" + (f" ({self.hipified})" if self.hipified else "")


@dataclass(frozen=True)
class Verdict:
    status: str  # COMPILED | DEFECT | MISSING | ELSEWHERE
    summary: str  # one line: where the code is wrong, what is missing and how to get it, or where it failed
    location: Location | None = None
    missing: str = ""  # the header not found


@dataclass(frozen=True)
class _Diagnostic:
    path: str
    line: int
    kind: str
    message: str


def _diagnostics(output: str) -> list[_Diagnostic]:
    found = []
    for raw in output.splitlines():
        match = _DIAGNOSTIC_RE.match(raw.strip())
        if match:
            found.append(_Diagnostic(match["path"], int(match["line"]), match["kind"], match["message"].strip()))
    return found


def judge_compile(output: str, returncode: int, users: Callable[[str, int], Location | None]) -> Verdict:
    """A compiler's result for one file. `users(path, line)` is the user's location for a path in the user's
    tree (None elsewhere: torch's, ROCm's or the system's headers). An error in someone else's header is the user's when the compiler's notes
    lead back into the user's code (a template instantiated there); otherwise it is not blamed on them."""
    if returncode == 0:
        return Verdict(COMPILED, "compiles")
    diagnostics = _diagnostics(output)
    errors = [d for d in diagnostics if d.kind in ("error", "fatal error")]
    if not errors:
        tail = (output.strip().splitlines() or [f"exit status {returncode}"])[-1]
        return Verdict(ELSEWHERE, f"the compiler failed without a diagnostic: {tail}")
    first = errors[0]
    missing = _MISSING_RE.match(first.message) if first.kind == "fatal error" else None
    if missing:
        header = missing["header"]
        where = users(first.path, first.line)
        included = f" (included at {where})" if where else f" (included by {first.path}:{first.line})"
        return Verdict(MISSING, f"{header} is not installed here{included}: {header_advice(header)}", where, header)
    after_first = diagnostics[diagnostics.index(first):]
    for diagnostic in after_first:
        if diagnostic.kind in ("error", "fatal error") and diagnostic is not first:
            break  # only the notes that explain the first error
        location = users(diagnostic.path, diagnostic.line)
        if location:
            return Verdict(DEFECT, f"{location}: error: {first.message}", location)
    return Verdict(ELSEWHERE, f"failed in {first.path}:{first.line}, outside your code: {first.message}")
