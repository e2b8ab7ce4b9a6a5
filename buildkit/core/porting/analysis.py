"""What a hipified CUDA tree still needs before it runs on AMD GPUs.

Read from its text and from what the compilers said about it. Pure: text in, findings and verdicts out.

- The static report: CUDA identifiers and headers hipify left (it has no HIP mapping for them), inline
  PTX, warp intrinsics that HIP lacks or whose semantics differ, and CUDA-only libraries; each at the line
  of the user's own file (mapped back from the hipified one).
- The compile verdict: a compiler's output read as "compiled", "a defect of the code at file:line", "a
  header missing here (and how to get it)", "failed outside the user's code" or "beyond the toolchain".
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from buildkit.core.porting.cuda_constants import Definitions, block_threads, resolve
from buildkit.core.porting.preprocessor import ACTIVE, INACTIVE, Activity, Macros, code_lines, integer, physical_lines

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

# --- the static report -----------------------------------------------------------------------------------------

# What is CUDA-only once hipify has run: runtime/driver/library identifiers and CUDA-only headers.
_IDENTIFIER_RE = re.compile(
    r"\b(?:(?:cuda|cublas(?:Lt)?|cufft|curand|cusparse(?:Lt)?|cusolver(?:Dn|Sp)?|cudnn|nvrtc|nvtx|nccl)[A-Z]\w*"
    r"|cu[A-Z][a-z]\w*|CU(?:DA|BLAS)_[A-Z0-9_]+)\b"
)
# Every pattern below reads a bounded stretch from where it starts (a header name, a launch's kernel, a dotted PTX
# mnemonic): on a line of 150 KB, one that could run to the line's end from each of its starts took minutes.
_INCLUDE_RE = re.compile(r'#\s*include\s*[<"]([^>"\n]{1,1024})[>"]')
_CUDA_HEADER_RE = re.compile(r"(?:cuda|cub|thrust|cublas|cufft|curand|cusparse|cusolver|cudnn|nvtx)")
# CUDA-only libraries torch's hipify has no mapping for (torch/utils/hipify/cuda_to_hip_mappings.py names
# none of these headers), first match wins.
_CUDA_ONLY_LIBRARIES = (
    ("cutlass/", "CUTLASS (NVIDIA's GEMM templates, tensor-core PTX): no ROCm build; on AMD GPUs use composable_kernel, hipBLASLt or torch's own ops"),
    ("cute/", "CuTe (part of CUTLASS): no ROCm build; on AMD GPUs use composable_kernel"),
    ("mma.h", "WMMA (nvcuda::wmma tensor-core fragments): ROCm's rocWMMA has another header and API (rocwmma/rocwmma.hpp)"),
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
# defines it), and a static_assert requires a 64-bit mask ("The mask must be a 64-bit integer. Implicitly
# promoting a smaller integer is almost always an error."), because a wavefront has 64 lanes on gfx9 (CDNA);
# __syncwarp and __reduce_*_sync are not declared at all.
_SYNC_INTRINSIC_RE = re.compile(r"\b(__(?:shfl(?:_up|_down|_xor)?|ballot|any|all|match_any|match_all)_sync)\s*\(")
_MISSING_INTRINSIC_RE = re.compile(r"\b(__syncwarp|__reduce_(?:add|min|max|and|or|xor)_sync)\b")
# Lane arithmetic written for 32-thread warps: `lane = tid & 31`, `warp = threadIdx.x / 32`, `>> 5`.
_WARP_32_RE = re.compile(r"(?:%\s*32|&\s*(?:31|0x1[fF])|/\s*32|>>\s*5)\b")
_LANE_WORDS_RE = re.compile(r"lane|warp|threadIdx|tid", re.IGNORECASE)
# A warp size written down as 32: `#define WARP_SIZE 32`, `constexpr int kWarpSize = 32;`.
_WARP_SIZE_NAME_RE = re.compile(r"warp_?(?:size|threads|lanes)", re.IGNORECASE)
# A kernel launch as torch's hipify writes it: hipLaunchKernelGGL(( kernel), dim3(grid), dim3(block), shared, stream, args).
_LAUNCH_RE = re.compile(r"\bhipLaunchKernelGGL\s*\(\s*\(\s*[^)]{0,1024}\)\s*,")
_INLINE_ASM_RE = re.compile(r"\b(?:asm|__asm__)\s*(?:volatile\s*|__volatile__\s*)?\(")
# PTX in an asm string: typed mnemonics (mov.u32, ld.global.f32, shfl.sync.bfly.b32) or special registers.
_PTX_RE = re.compile(r"\b[a-z]{1,32}(?:\.[a-z0-9]{1,32}){0,8}\.(?:[usbf](?:8|16|32|64)|pred)\b|%(?:laneid|warpid|smid|tid|ntid|clock)")
DEVICE_SOURCES = (".cu", ".cuh", ".hip")
# CUB's macros and hipCUB's names for them (hipcub/config.hpp and hipcub/util_macro.hpp of hipCUB 6.4, read in
# Debian unstable's libhipcub-dev): hipify maps cub:: to hipcub:: but none of the CUB_* macros.
_CUB_MACROS = {
    "CUB_WARP_THREADS": "HIPCUB_WARP_THREADS (device code) or HIPCUB_HOST_WARP_THREADS (host code)",
    "CUB_PTX_WARP_THREADS": "HIPCUB_WARP_THREADS (device code) or HIPCUB_HOST_WARP_THREADS (host code)",
    "CUB_RUNTIME_FUNCTION": "HIPCUB_RUNTIME_FUNCTION",
    "CUB_NAMESPACE_BEGIN": "BEGIN_HIPCUB_NAMESPACE",
    "CUB_NAMESPACE_END": "END_HIPCUB_NAMESPACE",
    "CUB_PTX_ARCH": "HIPCUB_ARCH (always 1 with the rocPRIM backend)",
    "CUB_MAX": "HIPCUB_MAX",
    "CUB_MIN": "HIPCUB_MIN",
    "CUB_QUOTIENT_FLOOR": "HIPCUB_QUOTIENT_FLOOR",
    "CUB_QUOTIENT_CEILING": "HIPCUB_QUOTIENT_CEILING",
    "CUB_STDERR": "HIPCUB_STDERR",
}
_CUB_MACRO_RE = re.compile(r"\bCUB_[A-Z0-9_]+\b")
_HALF_WAVEFRONT = (1 << 32) - 1


# Macros that only NVIDIA's compiler and CUDA's headers define: nvcc 13.0's `-dM -E` of a .cu (read on this
# machine), nvcc's documented mode macros (__CUDACC_RDC__, _EWP__, _DEBUG__, _RELAXED_CONSTEXPR__,
# _EXTENDED_LAMBDA__) and HIP's NVIDIA platform. hipcc 6.4's `-dM -E` after hip/hip_runtime.h (host and device
# passes, Debian unstable's, read) defines none of them, so a ROCm build never does.
NVIDIA_ONLY_MACROS = frozenset(
    {
        "__CUDACC__",
        "__NVCC__",
        "__CUDA_ARCH__",
        "__CUDA_ARCH_LIST__",
        "__CUDACC_VER_MAJOR__",
        "__CUDACC_VER_MINOR__",
        "__CUDACC_VER_BUILD__",
        "__CUDA_API_VER_MAJOR__",
        "__CUDA_API_VER_MINOR__",
        "__NVCC_DIAG_PRAGMA_SUPPORT__",
        "__CUDACC_DEVICE_ATOMIC_BUILTINS__",
        "__CUDACC_RDC__",
        "__CUDACC_EWP__",
        "__CUDACC_DEBUG__",
        "__CUDACC_RELAXED_CONSTEXPR__",
        "__CUDACC_EXTENDED_LAMBDA__",
        "CUDART_VERSION",
        "CUDA_VERSION",
        "__HIP_PLATFORM_NVIDIA__",
        "__HIP_PLATFORM_NVCC__",
    }
)
# What HIP's clang defines itself for a HIP file, in both passes and in the device pass only (hipcc 6.4's
# `-dM -E`); a C++ compiler (g++ with hip/hip_runtime.h included) defines none of them.
_HIP_COMPILER_MACROS = {"__HIP__": "1", "__HIPCC__": "1", "__clang__": "1"}
_HIP_DEVICE_MACROS = {"__HIP_DEVICE_COMPILE__": "1"}


@dataclass(frozen=True)
class BuildMacros:
    """The macros of each compilation a ROCm extension build runs: hipcc's host and device passes for .cu/.hip
    files, the C++ compiler for .cpp files; a header is compiled by whichever includes it."""

    hipcc_host: Macros
    hipcc_device: Macros
    cxx: Macros
    origin: str  # where they came from, for the report

    @classmethod
    def assumed(cls, hipcc_defines: Mapping[str, str | None], cxx_defines: Mapping[str, str | None], origin: str) -> BuildMacros:
        """Without a compiler to ask: the build's -D flags, and what HIP's clang defines by itself."""
        cxx_undefined = NVIDIA_ONLY_MACROS | set(_HIP_COMPILER_MACROS) | set(_HIP_DEVICE_MACROS)
        return cls(
            Macros({**_HIP_COMPILER_MACROS, **hipcc_defines}, NVIDIA_ONLY_MACROS | set(_HIP_DEVICE_MACROS), "hipcc (host)"),
            Macros({**_HIP_COMPILER_MACROS, **_HIP_DEVICE_MACROS, **hipcc_defines}, NVIDIA_ONLY_MACROS, "hipcc (device)"),
            Macros(dict(cxx_defines), cxx_undefined - set(cxx_defines), "c++"),
            origin,
        )

    @classmethod
    def dumped(cls, host: Mapping[str, str | None], device: Mapping[str, str | None], cxx: Mapping[str, str | None], origin: str) -> BuildMacros:
        """From the compilers' own `-dM -E` (with the build's flags): every macro they define before the file's code."""
        return cls(
            Macros(host, NVIDIA_ONLY_MACROS - set(host), "hipcc (host)"),
            Macros(device, NVIDIA_ONLY_MACROS - set(device), "hipcc (device)"),
            Macros(cxx, (NVIDIA_ONLY_MACROS | set(_HIP_COMPILER_MACROS) | set(_HIP_DEVICE_MACROS)) - set(cxx), "c++"),
            origin,
        )

    def for_file(self, name: str) -> list[Macros]:
        if name.endswith(_HIPCC_FILES):
            return [self.hipcc_host, self.hipcc_device]
        if name.endswith(_CXX_FILES):
            return [self.cxx]
        return [self.hipcc_host, self.hipcc_device, self.cxx]  # a header: compiled by whatever includes it


_HIPCC_FILES = (".cu", ".hip")
_CXX_FILES = (".cpp", ".cc", ".c")


@dataclass(frozen=True)
class Finding:
    """Something in the user's tree that will not port as it is, at the user's file and line."""

    file: str  # the user's file, relative to the tree
    line: int
    kind: str  # unmapped | inline-asm | warp | library | preprocessor (an #if without #endif...)
    subject: str  # the identifier, header or intrinsic
    detail: str  # why, and what to do on ROCm
    blocks: bool  # it cannot work as written (else: correct on NVIDIA, review it for AMD)
    hipified: str = ""  # where it is in the hipified output (file:line), when that file differs
    state: str = ACTIVE  # active | open (in a branch the ROCm build's known macros do not settle) | inactive (never compiled)
    condition: str = ""  # for open and inactive findings: the #if that decides
    compiled_by: tuple[str, ...] = ()  # translation units that include its file and compiled: it did not stop them


@dataclass(frozen=True)
class Found:
    """One thing `scan` found, at a line of the hipified file."""

    line: int
    kind: str
    subject: str
    detail: str
    blocks: bool


def scan(hipified_text: str, device_source: bool, names: Definitions | None = None) -> list[Found]:
    """Each thing in a hipified file that will not port as it is. `names`: what the tree defines (macros,
    constants, declared types), through which masks and block sizes are read; the file's own by default."""
    names = names or Definitions.of([hipified_text])
    found = []
    for number, code in code_lines(hipified_text):
        include = _INCLUDE_RE.search(code)
        if include:
            header = include.group(1)
            library = (
                libcuxx_advice(header)
                if header.startswith("cuda/")
                else next((about for prefix, about in _CUDA_ONLY_LIBRARIES if header.startswith(prefix)), None)
            )
            if library:
                found.append(Found(number, "library", f"#include <{header}>", library, True))
            elif _CUDA_HEADER_RE.match(header):
                found.append(Found(number, "unmapped", f"#include <{header}>", "a CUDA header hipify has no HIP mapping for", True))
            continue
        found += [Found(number, "unmapped", name, "a CUDA identifier hipify has no HIP mapping for", True) for name in _IDENTIFIER_RE.findall(code)]
        found += [
            Found(
                number,
                "unmapped",
                name,
                f"a CUB macro hipify does not map; hipCUB's: {_CUB_MACROS[name]}"
                if name in _CUB_MACROS
                else "a CUB macro hipify does not map, and hipCUB has none of that name",
                True,
            )
            for name in dict.fromkeys(_CUB_MACRO_RE.findall(code))
        ]
        for call in _SYNC_INTRINSIC_RE.finditer(code):
            found += _mask_finding(number, call.group(1), _arguments(code, call.end(), 1), names)
        found += [
            Found(number, "warp", name, f"{name} has no HIP counterpart (HIP 6.4 declares none): a wavefront runs in lockstep, rewrite without it", True)
            for name in _MISSING_INTRINSIC_RE.findall(code)
        ]
        if _WARP_32_RE.search(code) and _LANE_WORDS_RE.search(code):
            found.append(
                Found(
                    number,
                    "warp",
                    code.strip()[:60],
                    "lane arithmetic for 32-thread warps: a wavefront has 64 lanes on gfx9 (CDNA: MI100 to MI355X) and 32 on RDNA; use warpSize",
                    False,
                )
            )
        found += _warp_size_constant(number, code)
        for launch in _LAUNCH_RE.finditer(code):
            found += _launch_finding(number, _arguments(code, launch.end(), 2)[1:2], names)
        if _INLINE_ASM_RE.search(code) and (device_source or _PTX_RE.search(code)):
            found.append(
                Found(
                    number,
                    "inline-asm",
                    "asm(...)",
                    "inline assembly (PTX): AMD GPUs do not run PTX; rewrite it with HIP intrinsics or __builtin_amdgcn_* builtins",
                    True,
                )
            )
    return found


def findings(produced: str, hipified_text: str, origin: str, original_text: str | None, names: Definitions, macros: BuildMacros) -> list[Finding]:
    """What will not port in one hipified file, at the lines of the user's file it was made from (`original_text`
    is None when hipify left the file as it was), each with its state under the ROCm build's macros."""
    lines = LineMap(original_text, hipified_text) if original_text is not None else None
    activity = Activity(hipified_text, macros.for_file(produced))
    found = [
        Finding(
            origin,
            lines.original(item.line) if lines else item.line,
            "preprocessor",
            item.directive[:60],
            item.problem,
            True,
            f"{produced}:{item.line}" if lines else "",
        )
        for item in activity.unbalanced
    ]
    for item in scan(hipified_text, origin.endswith(DEVICE_SOURCES), names):
        where = activity.at(item.line)
        found.append(
            Finding(
                origin,
                lines.original(item.line) if lines else item.line,
                item.kind,
                item.subject,
                item.detail,
                item.blocks and where.state != INACTIVE,
                f"{produced}:{item.line}" if lines else "",
                where.state,
                where.condition,
            )
        )
    return found


# How far a call's arguments are read: a warp mask or a block size is a short expression, and reading to the end of
# the line from each call made a 150 KB line of unclosed calls quadratic.
MAX_ARGUMENT_CHARS = 256
_ARGUMENT_SYNTAX_RE = re.compile(r"[()\[\]{},]")


def _arguments(code: str, start: int, count: int) -> list[str]:
    """The first `count` top-level, comma-separated arguments from `start` (just past a call's '(' or a comma) to
    the call's closing parenthesis or the end of the line; [] when they run past MAX_ARGUMENT_CHARS (not read)."""
    arguments: list[str] = []
    depth, begun = 0, start
    window = code[start : start + MAX_ARGUMENT_CHARS + 1]
    for found in _ARGUMENT_SYNTAX_RE.finditer(window):
        char = found.group()
        if char in "([{":
            depth += 1
        elif char in ")]}" and depth:
            depth -= 1
        elif depth == 0:  # a top-level comma, or the call's closing parenthesis
            argument = code[begun : start + found.start()].strip()
            if char != ",":
                return [*arguments, argument][:count] if argument else arguments[:count]
            arguments.append(argument)
            begun = start + found.end()
            if len(arguments) == count:
                return arguments
    if len(window) > MAX_ARGUMENT_CHARS:
        return []  # too long to be a mask or a block size: not read
    rest = code[begun:].strip()
    return [*arguments, rest][:count] if rest else arguments[:count]


def _mask_finding(number: int, name: str, mask: list[str], names: Definitions) -> list[Found]:
    shown = mask[0] if mask else ""
    resolved = resolve(shown, names) if shown else None
    via = f" ({resolved.via})" if resolved and resolved.via and resolved.via != shown else ""
    if resolved and resolved.bits == 32:
        return [
            Found(
                number,
                "warp",
                name,
                f"the mask {shown}{via} is 32 bits: HIP >= 6.2's {name} requires a 64-bit mask (a "
                "static_assert: 'The mask must be a 64-bit integer') and a wavefront has 64 lanes on gfx9 (CDNA), so it names "
                "half of one; pass a 64-bit mask such as __activemask() or ~0ull",
                True,
            )
        ]
    if resolved and resolved.bits == 64:
        if resolved.value == _HALF_WAVEFRONT:
            return [
                Found(
                    number,
                    "warp",
                    name,
                    f"the mask {shown}{via} is 64 bits but sets 32 lanes: a wavefront has 64 on gfx9 "
                    "(CDNA); use __activemask() or ~0ull for the whole wavefront",
                    False,
                )
            ]
        return []  # a 64-bit mask: what HIP asks for
    return [
        Found(
            number,
            "warp",
            name,
            f"HIP has {name} from ROCm 6.2 only, with a 64-bit mask (64 lanes on gfx9, 32 on RDNA), and "
            f"the width of {shown or 'its mask'} could not be read from the tree: check that the mask is 64-bit and covers "
            "the whole wavefront",
            False,
        )
    ]


def _warp_size_constant(number: int, code: str) -> list[Found]:
    defined = Definitions.of([code])
    return [
        Found(
            number,
            "warp",
            f"{name} = 32",
            "a warp size written as 32: a wavefront has 64 lanes on gfx9 (CDNA) and 32 on RDNA; "
            "use warpSize in device code, at::cuda::warp_size() on the host, or C10_WARP_SIZE_UPPER_BOUND (64) to size arrays",
            False,
        )
        for name, value in defined.values.items()
        if _WARP_SIZE_NAME_RE.search(name) and integer(value) == 32
    ]


def _launch_finding(number: int, block: list[str], names: Definitions) -> list[Found]:
    threads, via = block_threads(block[0], names) if block else (None, "")
    if threads != 32:
        return []
    shown = block[0][5:-1] if block[0].startswith("dim3(") and block[0].endswith(")") else block[0]
    return [
        Found(
            number,
            "warp",
            f"block {shown}",
            f"a launch with 32 threads along x{f' ({via})' if via and via != shown else ''}: one "
            "CUDA warp, but half a 64-lane wavefront on gfx9 (CDNA), so half its lanes idle and code that takes the block for "
            "one warp is wrong there; size it from warpSize (at::cuda::warp_size() on the host)",
            False,
        )
    ]


# --- mapping hipified lines back to the user's -----------------------------------------------------------------


class LineMap:
    """Which line of the user's file each line of its hipified version came from. hipify rewrites inside lines and
    adds a few (its breadcrumb comment, a hip_runtime.h include), so the lines are aligned as a diff would, in time
    linear in the file: lines that occur once in each file and agree anchor the alignment (their longest increasing
    run, as patience diff takes them), and between anchors equal lines are paired in order, each run of differing
    lines ending at the nearest pair of equal lines within WINDOW lines of each side (difflib's matcher, used before,
    took 68 s over a header of 1,000 repeated lines). `comparisons` counts the line look-ups it made."""

    WINDOW = 32

    def __init__(self, original: str, hipified: str) -> None:
        self._to_original: dict[int, int] = {}
        self.comparisons = 0
        before, after = physical_lines(original), physical_lines(hipified)
        self._last = max(len(before), 1)
        i = j = 0
        for anchor_i, anchor_j in [*_anchors(before, after), (len(before), len(after))]:
            self._align(before, after, i, anchor_i, j, anchor_j)
            self._to_original[anchor_j + 1] = anchor_i + 1
            i, j = anchor_i + 1, anchor_j + 1
        self._to_original.pop(len(after) + 1, None)  # the sentinel's

    def _align(self, before: list[str], after: list[str], i: int, i_end: int, j: int, j_end: int) -> None:
        while j < j_end:
            self.comparisons += 1
            if i < i_end and before[i] == after[j]:
                self._to_original[j + 1] = i + 1
                i, j = i + 1, j + 1
                continue
            first: dict[str, int] = {}  # each line of the next WINDOW hipified lines -> where it first is
            for m in range(j, min(j + self.WINDOW, j_end)):
                first.setdefault(after[m], m - j)
            best: tuple[int, int] | None = None
            for k in range(min(self.WINDOW, i_end - i)):
                at = first.get(before[i + k])
                if at is not None and (best is None or k + at < sum(best)):
                    best = (k, at)
            self.comparisons += len(first) + min(self.WINDOW, i_end - i)
            removed, added = best if best is not None else (i_end - i, j_end - j)  # none near: the rest pair in order
            for offset in range(added):  # a line hipify rewrote, or added (blamed on the user's line it stands before)
                self._to_original[j + offset + 1] = i + min(offset, removed - 1) + 1 if removed else min(i + 1, self._last)
            i, j = i + removed, j + added

    def original(self, hipified_line: int) -> int:
        return self._to_original.get(hipified_line, hipified_line)


def _anchors(before: list[str], after: list[str]) -> list[tuple[int, int]]:
    """(line in before, line in after) of the lines that occur exactly once in each and agree, keeping the longest
    run in which both positions increase (patience sorting, n log n)."""
    once_before = _once(before)
    pairs = sorted((once_before[line], index) for line, index in _once(after).items() if line in once_before)
    tails: list[int] = []  # tails[n]: the smallest `after` position that ends an increasing run of n + 1 pairs
    ends: list[int] = []  # the index in `pairs` of that run's last pair
    previous = [-1] * len(pairs)
    for index, (_, position) in enumerate(pairs):
        length = bisect.bisect_left(tails, position)
        previous[index] = ends[length - 1] if length else -1
        if length == len(tails):
            tails.append(position)
            ends.append(index)
        else:
            tails[length], ends[length] = position, index
    run = []
    index = ends[-1] if ends else -1
    while index >= 0:
        run.append(pairs[index])
        index = previous[index]
    return run[::-1]


def _once(lines: list[str]) -> dict[str, int]:
    """Each line that occurs exactly once, with where."""
    seen: dict[str, int] = {}
    repeated: set[str] = set()
    for index, line in enumerate(lines):
        if line in seen:
            repeated.add(line)
        seen[line] = index
    return {line: index for line, index in seen.items() if line not in repeated}


# --- the compile verdict ---------------------------------------------------------------------------------------

COMPILED, DEFECT, MISSING, ELSEWHERE, TOOLCHAIN = "ok", "error", "missing", "environment", "toolchain"
_ROCM_TORCH = (
    "a ROCm build of torch: PyTorch's ROCm build writes it and no CUDA header of this torch becomes it; check with torch from PyTorch's ROCm wheel index"
)
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


# The first ROCm/HIP release whose include/hip holds each public header added since HIP 5.0 (ROCm/HIP's git
# history, read at its rocm-* tags): a header missing from an older HIP is that HIP's age, not a missing package.
HIP_HEADERS_SINCE = {
    "hip/hip_math_constants.h": "5.3",
    "hip/hip_bf16.h": "5.6",
    "hip/hip_deprecated.h": "6.0",
    "hip/hip_fp8.h": "6.2",
}
# libcu++ (CUDA's C++ standard library, cuda/std/* and cuda/*): no ROCm library provides it, so a missing one is
# code to change. Where rocPRIM 6.4 (Debian unstable's librocprim-dev, read) or HIP has a device-side counterpart
# it is named; the rest of cuda/std/X is the C++ standard header X, whose constexpr parts HIP's clang compiles
# for the device as well.
_LIBCUXX_COUNTERPARTS = {
    "cuda/std/limits": "<limits> (std::numeric_limits), or rocprim::numeric_limits in <rocprim/type_traits.hpp>",
    "cuda/std/tuple": "<tuple> on the host, rocprim::tuple in <rocprim/types/tuple.hpp> in device code",
    "cuda/std/functional": "<functional>, or rocprim::plus / minimum / maximum in <rocprim/functional.hpp> in device code",
    "cuda/std/atomic": "<atomic> on the host; in device code HIP's atomicAdd/atomicCAS/__hip_atomic_* (hip/hip_runtime.h)",
    "cuda/atomic": "<atomic> on the host; in device code HIP's atomicAdd/atomicCAS/__hip_atomic_* (hip/hip_runtime.h)",
    "cuda/std/complex": "thrust::complex in <thrust/complex.h> (rocThrust), or hip/hip_complex.h",
    "cuda/barrier": "none (asynchronous barriers have no HIP counterpart): rewrite with __syncthreads()",
    "cuda/pipeline": "none (cp.async pipelines have no HIP counterpart): load through registers or shared memory",
    "cuda/annotated_ptr": "none: drop the access-property annotations",
}


def libcuxx_advice(header: str) -> str:
    counterpart = _LIBCUXX_COUNTERPARTS.get(header)
    if counterpart is None and header.startswith("cuda/std/"):
        counterpart = f"<{header.removeprefix('cuda/std/')}> from the C++ standard library"
    return (
        f"{header} is libcu++ (CUDA's C++ standard library), which no ROCm library provides: the code must change; "
        f"on ROCm use {counterpart or 'the C++ standard library, or rewrite it'} (guard the CUDA include with #ifndef USE_ROCM)"
    )


def header_advice(header: str, hip_version: str = "") -> str:
    """How to get a header the compiler did not find; `hip_version` is the HIP that looked (major.minor)."""
    since = HIP_HEADERS_SINCE.get(header)
    if since and hip_version and _version(hip_version) < _version(since):
        major, minor = _version(since)
        return (
            f"this HIP ({hip_version}) is too old for {header}; HIP >= {since} has it: check with a newer ROCm, or guard "
            f"the include with #if HIP_VERSION >= {major * 10000000 + minor * 100000} if older ones must build"
        )
    return next(
        (advice for prefix, advice in _HEADER_SOURCES if header.startswith(prefix)),
        "it is in none of this tree, torch's, Python's or the toolchain's include folders: add its folder "
        "with --include-dir, or install the library that provides it",
    )


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:2])


_DIAGNOSTIC_RE = re.compile(
    r"^(?P<path>[^\s:][^:]*):(?P<line>\d+):(?:(?P<column>\d+):)?\s+"
    r"(?P<kind>fatal error|error|warning|note|required from)\b:?\s*(?P<message>.*)$"
)
_INCLUDED_FROM_RE = re.compile(r"^(?:In file included|\s*) from (?P<path>[^\s:][^:]*):(?P<line>\d+)[:,]")
_MISSING_RE = re.compile(r"^'?(?P<header>[^':]+?)'?(?: file not found|: No such file or directory)$")
# HIP's hip/amd_detail/host_defines.h defines __noinline__ as nothing for any compiler but clang, so that
# libstdc++'s [[__gnu__::__noinline__]] (<format>, <stacktrace>; GCC 16 here) reads [[__gnu__::]] after it:
# GCC says "expected an identifier for the attribute name".
_NOINLINE_RE = re.compile(r"__gnu__::__noinline__|expected an identifier for the attribute name")


@dataclass(frozen=True)
class Location:
    file: str  # the user's file, relative to the tree
    line: int
    hipified: str = ""  # file:line in the hipified output, when the compiled file is not the user's own

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" + (f" ({self.hipified})" if self.hipified else "")


@dataclass(frozen=True)
class CodeError:
    """One error the compiler reported in (or through) the user's code."""

    location: str  # the user's file:line (and the hipified file:line)
    message: str


@dataclass(frozen=True)
class Verdict:
    status: str  # COMPILED | DEFECT | MISSING | ELSEWHERE
    summary: str  # one line: where the code is wrong, what is missing and how to get it, or where it failed
    location: Location | None = None
    missing: str = ""  # the header not found
    errors: tuple[CodeError, ...] = ()  # every error in the user's code, one per user line


@dataclass(frozen=True)
class _Diagnostic:
    path: str
    line: int
    kind: str
    message: str
    included_from: tuple[tuple[str, int], ...] = ()  # the include chain printed above it, innermost first


def _diagnostics(output: str) -> list[_Diagnostic]:
    found = []
    chain: list[tuple[str, int]] = []
    for raw in output.splitlines():
        included = _INCLUDED_FROM_RE.match(raw)
        if included:
            chain.append((included["path"], int(included["line"])))
            continue
        match = _DIAGNOSTIC_RE.match(raw.strip())
        if match:
            found.append(_Diagnostic(match["path"], int(match["line"]), match["kind"], match["message"].strip(), tuple(chain)))
            chain = []
    return found


def judge_compile(output: str, returncode: int, users: Callable[[str, int], Location | None], compiler: str = "the compiler", hip_version: str = "") -> Verdict:
    """A compiler's result for one file. `users(path, line)` is the user's location for a path in the user's
    tree (None elsewhere: torch's, ROCm's or the system's headers). An error in someone else's header is the
    user's when the compiler's notes lead back into the user's code (a template instantiated there); every
    such error is listed once per user line. `compiler` names who failed; `hip_version` is the HIP that compiled."""
    if returncode == 0:
        return Verdict(COMPILED, "compiles")
    diagnostics = _diagnostics(output)
    errors = [d for d in diagnostics if d.kind in ("error", "fatal error")]
    if not errors:
        tail = (output.strip().splitlines() or [f"exit status {returncode}"])[-1]
        return Verdict(ELSEWHERE, f"{compiler} failed without a diagnostic: {tail}")
    first = errors[0]
    missing = _MISSING_RE.match(first.message) if first.kind == "fatal error" else None
    if missing:
        header = missing["header"]
        where = users(first.path, first.line)
        included = f" (included at {where})" if where else f" (included by {first.path}:{first.line})"
        if header.startswith("cuda/"):  # libcu++: the code must change, wherever the include sits
            return Verdict(
                DEFECT,
                f"{where or f'{first.path}:{first.line}'}: error: {libcuxx_advice(header)}",
                where,
                header,
                (CodeError(str(where), f"'{header}' file not found"),) if where else (),
            )
        return Verdict(MISSING, f"{header} is not installed here{included}: {header_advice(header, hip_version)}", where, header)
    found: dict[tuple[str, int], tuple[Location, str]] = {}
    for error in errors:
        location = _users_location(diagnostics, error, users)
        if location and (location.file, location.line) not in found:
            found[(location.file, location.line)] = (location, error.message)
    if found:
        listed = tuple(CodeError(str(location), message) for location, message in found.values())
        location, message = next(iter(found.values()))
        more = f" (and {len(listed) - 1} more error{'s' if len(listed) > 2 else ''} in your code)" if len(listed) > 1 else ""
        return Verdict(DEFECT, f"{location}: error: {message}{more}", location, errors=listed)
    if _NOINLINE_RE.search(output):
        user = next((users(path, line) for path, line in first.included_from if users(path, line)), None)
        order = f" (the standard header included at {user} comes after <hip/hip_runtime.h>)" if user else ""
        return Verdict(
            ELSEWHERE,
            f"{compiler} failed in {first.path}:{first.line}: HIP's __noinline__ macro (hip/amd_detail/"
            "host_defines.h defines it empty for compilers other than clang) turns libstdc++'s [[__gnu__::__noinline__]] "
            f"into [[__gnu__::]]{order}: include the C++ standard and torch headers before <hip/hip_runtime.h>, or "
            "compile the file with hipcc (a .cu or .hip file)",
            user,
        )
    return Verdict(ELSEWHERE, f"{compiler} failed in {first.path}:{first.line}, outside your code: {first.message}")


def _users_location(diagnostics: list[_Diagnostic], error: _Diagnostic, users: Callable[[str, int], Location | None]) -> Location | None:
    """Where an error is the user's: its own place, or a note after it (before the next error) in the user's code."""
    for diagnostic in diagnostics[diagnostics.index(error) :]:
        if diagnostic.kind in ("error", "fatal error") and diagnostic is not error:
            return None  # only the notes that explain this error
        location = users(diagnostic.path, diagnostic.line)
        if location:
            return location
    return None
