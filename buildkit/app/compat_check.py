"""`buildkit compat check`: compat.toml against what the indexes publish, and the change that agrees.

compat.toml (and the default matrix) against what the indexes publish, and the change that makes them agree.

Sources, each optional: PyTorch's wheel index (variant pages; a wheel's METADATA per new release and
variant), the index of each thin-ROCm layout that has its own (AMD's), and PyPI (torch, torchvision and
torchaudio: releases, upload dates, METADATA and torch/version.py, read by byte ranges). `deep` also reads
each newest release's GPU libraries for the archs their code objects carry.
"""

from __future__ import annotations

import re
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.version import Version

from buildkit.adapters.files.bundled import COMPAT_DATA, default_matrix_path, tomllib
from buildkit.adapters.files.inputs import read_input
from buildkit.adapters.files.outputs import write_atomic
from buildkit.adapters.index.package_index import IndexFile, PackageIndex
from buildkit.adapters.index.remote_wheel import extract_member, read_members
from buildkit.adapters.index.wheel_index import MAX_FOLDERS, WheelIndex, WheelIndexError, default_package_index
from buildkit.core.compat.facts import AMD64, ARM64, COMPANION_PACKAGES, Compat, compat_from_data
from buildkit.core.matrix import fields
from buildkit.core.upstream.arch_check import ARCH_FLAGS_SOURCE, ArchReading
from buildkit.core.upstream.arch_lists import ArchTableError, read_arch_flags, read_arch_table
from buildkit.core.upstream.check import (
    AmdDifference,
    CheckFacts,
    CodeFinding,
    Difference,
    IndexFacts,
    Pending,
    candidate_tags,
    compare,
    compare_amd,
    index_facts,
    pending_facts,
    propose,
    unified_diff,
)
from buildkit.core.upstream.code_objects import CodeObjectError, cuda_code, elf_sections, rocm_code
from buildkit.core.upstream.matrix_proposal import propose_matrix
from buildkit.core.upstream.pypi import PypiFacts, minor_of
from buildkit.core.upstream.releases import PublishedFile, Release, WheelMetadata, backend_pins, read_metadata, read_version_module, releases, variant_of
from buildkit.core.vendors import AMD, BACKENDS, Vendor, of_backend
from buildkit.errors import Problem, UserError, printable, redact_urls

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

SHIPPED_LABEL = "buildkit/data/compat.toml"  # how the diff names the shipped file, wherever it is installed
MATRIX_LABEL = "matrix.toml"
NONE = "none"  # an index option's value that leaves that index out
# The tables compatibility data is made of: each holds one table per torch minor, backend version, gfx
# target..., which buildkit.core.compat.facts reads by key. Anything else in their place is not compatibility data.
_TABLES_OF_TABLES = ("torch", *BACKENDS, "gfx")
_TABLES = ("wheel_index", "archs", "os_python", "parity", "gpus", "sources")
MAX_WHEELS_READ = 96  # METADATA reads per run (each a few range requests); the first run over the shipped data reads about 40
# Final releases of one project an index may list: torch has had about 60 on PyPI, a variant folder holds a few dozen.
# Pairing and proposing are per release: 100,000 releases once took minutes of CPU after their pages were read.
MAX_RELEASES = 500
DEEP_MINORS = 2  # --deep reads the GPU libraries of the newest release of this many newest minors
MAX_DATA_BYTES = 16 * 1024 * 1024  # the shipped data is tens of kilobytes
DEEP_DEADLINE = 3600.0  # seconds for --deep's downloads of whole GPU libraries (hundreds of MB each)
# The arch flags of each build of the newest minors are read from libtorch_python.so (10-13 MB of each wheel);
# a build whose entry the data holds from that release's flags is not read again.
ARCH_FLAGS_LIBRARY = "torch/lib/libtorch_python.so"
ARCH_MINORS = 4
MAX_FLAGS_READS = 48
MAX_FLAGS_LIBRARY_BYTES = 256 << 20  # torch 2.15.0's libtorch_python.so is 35 MB
FLAGS_WORKERS = 4  # each read holds its library in memory


@dataclass(frozen=True)
class CheckOutcome:
    data_path: Path
    facts: CheckFacts
    differences: tuple[Difference, ...]
    diff: str  # the proposed change to the data file and the default matrix, as a unified diff ('' when none)
    written: bool  # whether the change was applied
    read: tuple[str, ...] = ()  # the indexes read, for the report
    unpaired: Mapping[str, tuple[str, ...]] | None = None  # companion -> releases no torch release pairs with
    matrix_path: Path | None = None
    amd: tuple[AmdDifference, ...] = ()  # AMD's hierarchy (rocm-bootstrap) against the data's [gfx] table
    pending: tuple[Pending, ...] = ()  # facts of the (proposed) data that only an index not read here can settle

    @property
    def unwritable(self) -> tuple[Difference, ...]:
        return tuple(d for d in self.differences if not d.writable)

    @property
    def agrees(self) -> bool:
        """The data file, as it is now, matches the indexes and AMD's hierarchy (which --write never changes)."""
        return (not self.differences or (self.written and not self.unwritable)) and not self.amd


def _shape_problem(data: Mapping[str, Any]) -> str:
    """Why a parsed TOML document is not compatibility data ("" when its tables are where they belong)."""
    if isinstance(data.get("torch"), list):
        return "it has [[torch]] entries, so it is a matrix file"
    if not isinstance(data.get("torch"), dict) or not data["torch"]:
        return 'it has no [torch."X.Y"] tables'
    for name in (*_TABLES_OF_TABLES, *_TABLES):
        if name in data and not isinstance(data[name], dict):
            return f"its {name} is not a table"
    for name in _TABLES_OF_TABLES:
        for key, value in data.get(name, {}).items():
            if not isinstance(value, dict):
                return f'its {name}."{key}" is not a table'
    return ""


def _read_data(path: Path) -> tuple[str, Compat]:
    raw = read_input(path, "--data", MAX_DATA_BYTES, f"--data takes compatibility data, a file shaped like {SHIPPED_LABEL}")
    try:
        text = raw.decode("utf-8")
        data = tomllib.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:  # ValueError: TOMLDecodeError, 5,000-digit integers
        raise UserError(Problem("--data", f"cannot read {path} as compatibility data: {printable(str(error))}")) from None
    shape = _shape_problem(data)
    if shape:
        raise UserError(
            Problem(
                str(path),
                f"{shape}: --data takes compatibility data, a file shaped like {SHIPPED_LABEL} "
                "(to check a matrix, run `buildkit matrix validate --matrix FILE`)",
            )
        )
    return text, compat_from_data(data)


def check_compat(
    index_url: str | None = None,
    data_path: Path | None = None,
    write: bool = False,
    pypi_url: str | None = None,
    layout_indexes: Mapping[str, str] | None = None,
    deep: bool = False,
    matrix_path: Path | None = None,
) -> CheckOutcome:
    path = data_path or COMPAT_DATA
    text, compat = _read_data(path)
    layouts = _layouts_to_read(compat, layout_indexes or {})
    deadline = DEEP_DEADLINE if deep else None
    pytorch = None if index_url == NONE else WheelIndex(index_url or compat.wheel_index, option="--index URL (or none)", deadline=deadline)
    pypi = None if pypi_url == NONE else WheelIndex(pypi_url or default_package_index(), option="--pypi URL (or none)", deadline=deadline)
    read = [reader.shown for reader in (pytorch, pypi) if reader] + [redact_urls(url) for url in layouts.values()]
    if not read:
        raise UserError(Problem("--index", "every index is left out (none): name at least one of --index, --pypi, --layout-index"))
    index, files = _read_wheel_indexes(compat, pytorch, layouts) if pytorch or layouts else (None, {})
    variant_pins = _variant_pins(compat, pytorch, files) if pytorch else {}
    pypi_facts, pypi_files = _read_pypi(compat, pypi) if pypi else (None, {})
    code = _read_code(compat, pytorch, files, pypi, pypi_facts, pypi_files) if deep else ()
    flags = _read_flags(compat, pytorch, files, pypi, pypi_facts, pypi_files)
    facts = CheckFacts(index, pypi_facts, variant_pins, code, flags)
    differences = compare(compat, facts)
    proposed = propose(text, compat, facts) if any(d.writable for d in differences) else text
    # The shipped file's diff applies with `git apply` at the repository root; a --data file's names it as given.
    labels = (f"a/{SHIPPED_LABEL}", f"b/{SHIPPED_LABEL}") if data_path is None else (str(path), str(path))
    diff = unified_diff(text, proposed, *labels)
    matrix = matrix_path or (default_matrix_path() if data_path is None else None)
    matrix_text = (
        read_input(matrix, "--default-matrix", MAX_DATA_BYTES, "the default matrix kept in step with the data").decode("utf-8", "replace")
        if matrix and matrix.exists()
        else None
    )
    matrix_proposed = matrix_text
    after = compat_from_data(tomllib.loads(proposed)) if proposed != text else compat
    if matrix_text is not None and matrix is not None:
        matrix_proposed = propose_matrix(matrix_text, after, fields.TOP["python"].default, fields.TOP["companions"].default)
        shipped = matrix.resolve() == default_matrix_path().resolve()
        matrix_labels = (f"a/{MATRIX_LABEL}", f"b/{MATRIX_LABEL}") if shipped else (str(matrix), str(matrix))
        diff += unified_diff(matrix_text, matrix_proposed, *matrix_labels)
    if write and diff:
        write_atomic(path, proposed.encode("utf-8"), "--data")
        if matrix is not None and matrix_proposed is not None and matrix_proposed != matrix_text:
            write_atomic(matrix, matrix_proposed.encode("utf-8"), "--default-matrix")
    unpaired = {name: pairing.unpaired for name, pairing in pypi_facts.pairings().items()} if pypi_facts else {}
    return CheckOutcome(
        path,
        facts,
        differences,
        diff,
        written=write and bool(diff),
        read=tuple(read),
        unpaired=unpaired,
        matrix_path=matrix,
        amd=compare_amd(compat),
        pending=pending_facts(after, facts),
    )


def _layouts_to_read(compat: Compat, requested: Mapping[str, str]) -> dict[str, str]:
    """Layout -> index URL: each thin-ROCm layout with an index of its own that a backend version uses, or
    that --layout-index names; --layout-index LAYOUT=none leaves one out."""
    unknown = sorted(set(requested) - set(compat.rocm_layouts))
    if unknown:
        raise UserError(Problem("--layout-index", f"no ROCm layout {', '.join(unknown)}; known: {', '.join(compat.rocm_layouts)}"))
    used = {release.layout for release in compat.backends.values() if release.thin_wheels}
    chosen = {}
    for name, layout in compat.rocm_layouts.items():
        url = requested.get(name, layout.index if name in used else "")
        if url and url != NONE:
            chosen[name] = url
    return chosen


def _read_wheel_indexes(compat: Compat, pytorch: WheelIndex | None, layouts: Mapping[str, str]) -> tuple[IndexFacts, dict[str, list[IndexFile]]]:
    """PyTorch's variant pages and each layout index's torch page, as facts, with the files of each variant."""
    files: dict[str, list[IndexFile]] = {}
    folders: tuple[str, ...] = ()
    if pytorch is not None:
        folders = candidate_tags(compat, pytorch.root_folders())
        if len(folders) > MAX_FOLDERS:
            raise WheelIndexError(
                Problem(
                    pytorch.shown,
                    f"{len(folders)} variant folders to read, more than the {MAX_FOLDERS} a "
                    "wheel index can have (its root page lists them); is this a PyTorch "
                    "wheel index? Pass --index URL",
                )
            )
        with ThreadPoolExecutor(pytorch.workers) as pool:
            pages = dict(zip(folders, pool.map(lambda folder: PackageIndex(f"{pytorch.url}/{folder}", pytorch).files("torch"), folders)))
        files = {folder: found for folder, found in pages.items() if found is not None}
        if not files:
            raise WheelIndexError(
                Problem(
                    pytorch.shown,
                    f"none of {len(folders)} variant folders (cu126/torch/, rocm7.2/torch/, ...) has a torch page; is this a PyTorch wheel index?",
                )
            )
    layout_pages = {}
    for name, url in layouts.items():
        reader = WheelIndex(url, option=f"--layout-index {name}=URL (or {name}=none)")
        found = PackageIndex(url, reader).files("torch") or []  # a layout index without torch has no wheels of it
        layout_pages[name] = _layout_wheels(compat, name, found)
    names = {folder: [f.filename for f in found] for folder, found in files.items()}
    facts = index_facts(pytorch.shown if pytorch else redact_urls(next(iter(layouts.values()))), folders, names, layout_pages, read_pytorch=pytorch is not None)
    return facts, files


def _layout_wheels(compat: Compat, layout: str, files: Iterable[IndexFile]) -> list[tuple[str, str, str]]:
    """(file name, variant tag, local version) of a layout index's torch wheels: its local versions name the
    ROCm version the layout's way (rocm{version}.0 on AMD's: rocm7.14.0)."""
    pattern = re.escape(compat.rocm_layouts[layout].local or "rocm{version}").replace(re.escape("{version}"), r"(\d+\.\d+)")
    wheels = []
    for found in files:
        local = found.filename.split("-")[1].partition("+")[2] if found.filename.count("-") >= 4 else ""
        match = re.fullmatch(pattern, local)
        if match:
            wheels.append((found.filename, AMD.index_tag(match.group(1)), local))  # layout indexes are AMD's
    return wheels


def _newest_wheel(files: Iterable[IndexFile], project: str, version: str, local: str = "") -> IndexFile | None:
    """The linux x86_64 wheel of the newest CPython of one release."""
    published = releases(project, [PublishedFile(f.filename) for f in files], local=local or None).get(version)
    return next((f for f in files if published and f.filename == published.wheel), None)


def _variant_pins(compat: Compat, pytorch: WheelIndex, files: Mapping[str, list[IndexFile]]) -> dict[tuple[str, str], tuple[str, ...]]:
    """(release, "rocm 7.14") -> the backend libraries that variant's wheel of the minor's newest release pins,
    for the releases whose pins the data does not hold yet."""
    wanted = []
    for folder, found in files.items():
        by_version = _releases("torch", found, pytorch, local=folder)
        newest: dict[str, str] = {}
        for version in by_version:
            newest[minor_of(version)] = version
        backend_version = of_backend_variant(folder)
        for minor, version in newest.items():
            release = compat.torch.get(minor)
            held = release.published.get(version) if release else None
            if held and backend_version in held.pins:
                continue
            wheel = _newest_wheel(found, "torch", version, folder)
            if wheel is not None:
                wanted.append(((version, backend_version), wheel))
    wanted = sorted(wanted, key=lambda item: Version(item[0][0]), reverse=True)[:MAX_WHEELS_READ]

    def pins_of(item: tuple[tuple[str, str], IndexFile]) -> tuple[tuple[str, str], tuple[str, ...]]:
        metadata = _metadata(pytorch, item[1].url)
        return item[0], backend_pins(metadata.requires_dist) if metadata else ()

    with ThreadPoolExecutor(pytorch.workers) as pool:
        return {key: pins for key, pins in pool.map(pins_of, wanted) if pins}


def of_backend_variant(folder: str) -> str:
    """'rocm 7.14' for the folder rocm7.14."""
    variant = variant_of(folder)
    return f"{variant[0]} {variant[1]}" if variant else folder


def _metadata(reader: WheelIndex, url: str) -> WheelMetadata | None:
    members = read_members(reader, url, lambda name: name.endswith(".dist-info/METADATA") and name.count("/") == 1)
    return read_metadata(next(iter(members.values())).decode("utf-8", "replace")) if members else None


def _read_pypi(compat: Compat, reader: WheelIndex) -> tuple[PypiFacts, dict[str, IndexFile]]:
    """torch's releases in scope with their wheels' METADATA and version module, and the companions' releases
    of the same days with their METADATA (their requirement on torch decides the pairing)."""
    index = PackageIndex(reader.url, reader)
    oldest = min((Version(m) for m in compat.torch), default=Version("0"))
    listed = {project: index.files(project) or [] for project in ("torch", *COMPANION_PACKAGES)}
    torch = {v: r for v, r in _releases("torch", listed["torch"], reader).items() if Version(minor_of(v)) >= oldest}
    days = {release.date for release in torch.values()}
    since = min(days, default="")
    companions = {name: {v: r for v, r in _releases(name, listed[name], reader).items() if r.date >= since} for name in COMPANION_PACKAGES}
    # a companion's requirement on torch matters on a day torch was published; other days it pairs with none
    wanted = [*torch.values(), *(r for found in companions.values() for r in found.values() if r.date in days)]
    by_name = {f.filename: f for found in listed.values() for f in found}

    def contents(release: Release) -> Release:
        members = read_members(
            reader,
            by_name[release.wheel].url,
            lambda name: _is_metadata(name) or _is_version_module(name, release.project) or (release.project == "torch" and name == ARCH_TABLE_MODULE),
        )
        metadata = next((read_metadata(data.decode("utf-8", "replace")) for name, data in members.items() if _is_metadata(name)), None)
        module = next((read_version_module(data.decode("utf-8", "replace")) for name, data in members.items() if _is_version_module(name, release.project)), {})
        table = None
        if ARCH_TABLE_MODULE in members:
            try:
                table = read_arch_table(members[ARCH_TABLE_MODULE].decode("utf-8", "replace"))
            except ArchTableError as error:
                raise WheelIndexError(Problem(reader.shown, f"{release.wheel}: {ARCH_TABLE_MODULE}: {error}")) from None
        return release.with_contents(metadata, module, table)

    with ThreadPoolExecutor(reader.workers) as pool:
        read = {(r.project, r.version): r for r in pool.map(contents, wanted[:MAX_WHEELS_READ])}
    torch = {v: read.get(("torch", v), r) for v, r in torch.items()}
    companions = {name: {v: read.get((name, v), r) for v, r in found.items()} for name, found in companions.items()}
    return PypiFacts(reader.shown, torch, companions), by_name


ARCH_TABLE_MODULE = "torch/cuda/__init__.py"


def _releases(project: str, files: list[IndexFile], reader: WheelIndex, local: str | None = None) -> dict[str, Release]:
    """A project's final releases on one page (a variant folder's: of its local version), at most MAX_RELEASES."""
    found = releases(project, [PublishedFile(f.filename, f.uploaded, f.requires_python) for f in files], local=local)
    if len(found) > MAX_RELEASES:
        where = f" in {local}/" if local else ""
        raise WheelIndexError(
            Problem(
                reader.shown,
                f"its {project} page{where} lists {len(found):,} releases, more than the {MAX_RELEASES} a project has had; is this a package index?",
            )
        )
    return found


def _is_metadata(name: str) -> bool:
    return name.endswith(".dist-info/METADATA") and name.count("/") == 1


def _is_version_module(name: str, project: str) -> bool:
    return name == f"{project}/version.py"


def _read_code(
    compat: Compat,
    pytorch: WheelIndex | None,
    files: Mapping[str, list[IndexFile]],
    pypi: WheelIndex | None,
    pypi_facts: PypiFacts | None,
    pypi_files: Mapping[str, IndexFile],
) -> tuple[CodeFinding, ...]:
    """The archs of the GPU code in the newest releases' wheels: each variant's on PyTorch's index, and PyPI's build."""
    minors = sorted(compat.torch, key=Version)[-DEEP_MINORS:]
    wanted: list[tuple[WheelIndex, str, str, str, IndexFile]] = []  # reader, release, backend, version, wheel
    for folder, found in files.items() if pytorch else ():
        by_version = [v for v in releases("torch", [PublishedFile(f.filename) for f in found], local=folder) if minor_of(v) in minors]
        wheel = _newest_wheel(found, "torch", by_version[-1], folder) if by_version else None
        if pytorch and wheel:
            backend, version = of_backend_variant(folder).split()
            wanted.append((pytorch, by_version[-1], backend, version, wheel))
    if pypi and pypi_facts:
        newest = [v for v in pypi_facts.torch if minor_of(v) in minors]
        build = pypi_facts.published(newest[-1]).pypi.split() if newest else []
        if build and not any((b, v) == tuple(build) for _, _, b, v, _ in wanted) and pypi_facts.torch[newest[-1]].wheel in pypi_files:
            wanted.append((pypi, newest[-1], build[0], build[1], pypi_files[pypi_facts.torch[newest[-1]].wheel]))
    with tempfile.TemporaryDirectory(prefix="buildkit-deep-") as scratch:
        findings = [_code_of(reader, release, backend, version, wheel, Path(scratch)) for reader, release, backend, version, wheel in wanted]
    return tuple(f for f in findings if f is not None)


def _code_of(reader: WheelIndex, release: str, backend: str, version: str, wheel: IndexFile, scratch: Path) -> CodeFinding | None:
    vendor = of_backend(backend)
    library = extract_member(reader, wheel.url, vendor.gpu_library, scratch)
    if library is None:
        return None
    try:
        archs, partial = _CODE_READERS[vendor.gpu_code_format](library.read_bytes(), vendor)
        if not archs:  # never proposed: an empty list would remove every arch the data has for this version
            raise CodeObjectError(f"its {vendor.gpu_code_format} sections name no GPU arch")
    except CodeObjectError as error:
        raise WheelIndexError(Problem(reader.shown, f"{wheel.filename}: {vendor.gpu_library}: {error}")) from None
    finally:
        library.unlink()
    return CodeFinding(release, backend, version, wheel.filename, archs, partial)


def _fatbin_archs(data: bytes, vendor: Vendor) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(archs with SASS, +PTX where PTX is there too; archs only some kernels have SASS for), as labels write them."""
    code = cuda_code(data)
    ptx = set(code.ptx_archs())
    archs = tuple(vendor.label_arch(a) + ("+PTX" if a in ptx else "") for a in code.sass_archs())
    return archs, tuple(vendor.label_arch(a) for a in code.partial_sass_archs())


def _offload_bundle_archs(data: bytes, _vendor: Vendor) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(every gfx target a bundle carries code for, no partial list: only fat binaries are counted per kernel)."""
    return rocm_code(data).archs(), ()


_CODE_READERS = {"fatbin": _fatbin_archs, "offload-bundle": _offload_bundle_archs}  # by Vendor.gpu_code_format


def _read_flags(
    compat: Compat,
    pytorch: WheelIndex | None,
    files: Mapping[str, list[IndexFile]],
    pypi: WheelIndex | None,
    pypi_facts: PypiFacts | None,
    pypi_files: Mapping[str, IndexFile],
) -> tuple[ArchReading, ...]:
    """The arch flags of each build of the newest minors' newest releases: PyPI's build and each variant on
    PyTorch's index, on linux/amd64 and linux/arm64, newest minors first, at most MAX_FLAGS_READS libraries."""
    seen = {minor_of(v) for v in (pypi_facts.torch if pypi_facts else ())}
    for folder, found in files.items():
        seen.update(minor_of(v) for v in releases("torch", [PublishedFile(f.filename) for f in found], local=folder))
    minors = sorted(set(compat.torch) | seen, key=Version)[-ARCH_MINORS:]
    wanted: dict[tuple[str, str, str], tuple[WheelIndex, IndexFile]] = {}  # (release, build, platform) -> the wheel

    def want(reader: WheelIndex, release: Release, build: str, by_name: Mapping[str, IndexFile]) -> None:
        minor = minor_of(release.version)
        held = compat.torch[minor].arch_lists.get(build) if minor in compat.torch else None
        if held is not None and held.release == release.version and ARCH_FLAGS_SOURCE in held.sources:
            return  # read from this release's flags before
        for platform, wheel in ((AMD64, release.wheel), (ARM64, release.arm64_wheel)):
            if wheel in by_name:
                wanted.setdefault((release.version, build, platform), (reader, by_name[wheel]))

    if pypi is not None and pypi_facts is not None:
        for minor in reversed(minors):
            newest = [v for v in pypi_facts.torch if minor_of(v) == minor]
            build = pypi_facts.published(newest[-1]).pypi if newest else ""
            if build:
                want(pypi, pypi_facts.torch[newest[-1]], build, pypi_files)
    for folder, found in files.items() if pytorch is not None else ():
        by_version = releases("torch", [PublishedFile(f.filename) for f in found], local=folder)
        by_name = {f.filename: f for f in found}
        for minor in reversed(minors):
            newest = [v for v in by_version if minor_of(v) == minor]
            if newest and pytorch is not None:
                want(pytorch, by_version[newest[-1]], of_backend_variant(folder), by_name)
    chosen = sorted(wanted.items(), key=lambda item: Version(item[0][0]), reverse=True)[:MAX_FLAGS_READS]
    with tempfile.TemporaryDirectory(prefix="buildkit-flags-") as scratch, ThreadPoolExecutor(FLAGS_WORKERS) as pool:
        readings = pool.map(lambda item: _flags_of(item[1][0], item[1][1], item[0], Path(scratch)), chosen)
        return tuple(reading for reading in readings if reading is not None)


def _flags_of(reader: WheelIndex, wheel: IndexFile, what: tuple[str, str, str], scratch: Path) -> ArchReading | None:
    """One build's arch flags (`what`: release, build, platform) from its wheel's libtorch_python.so; None when the
    wheel has no such library (or the library no flags: a CPU build)."""
    release, build, platform = what
    backend, version = build.split()
    library = extract_member(reader, wheel.url, ARCH_FLAGS_LIBRARY, scratch, max_size=MAX_FLAGS_LIBRARY_BYTES)
    if library is None:
        return None
    try:
        data = library.read_bytes()
        offset, size = elf_sections(data).get(".rodata", (0, 0))
        if offset + size > len(data):
            raise CodeObjectError("its .rodata runs past the end of the file")
        archs = read_arch_flags(data[offset : offset + size], backend)
    except (CodeObjectError, ArchTableError) as error:
        raise WheelIndexError(Problem(reader.shown, f"{wheel.filename}: {ARCH_FLAGS_LIBRARY}: {error}")) from None
    finally:
        library.unlink()
    return ArchReading(release, backend, version, platform, archs, ARCH_FLAGS_SOURCE, wheel.filename) if archs else None
