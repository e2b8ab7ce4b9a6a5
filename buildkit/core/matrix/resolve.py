"""The matrix resolved: layering (`extends`), validation against the schema, the frozen Matrix.

The schema is buildkit.core.matrix.fields'.

Input is what the file loader read, once, before any of this runs (MatrixSources): the layers, each the
parsed TOML of one file, base first (the loader follows `extends`), the matrix.lock and the templates.
Layers merge key by key: tables merge, arrays replace, except `[[torch]]` entries, which merge by their
`version` so a team can change one stack of the default matrix or add its own. Validation collects every
problem, each naming its file, key path and what was expected, before anything is built.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from buildkit.core import grammar
from buildkit.core.compat.amd_targets import amd_targets
from buildkit.core.compat.facts import Compat, TorchRelease, compat_from_data, merge_overrides
from buildkit.core.matrix import fields
from buildkit.core.matrix.fields import INVALID, REQUIRED, Checker, Rule
from buildkit.core.matrix.lock import Lock, read_lock
from buildkit.core.matrix.templates import FLAVOR_SUFFIX, UNREAD_FOLDER, TemplateSet
from buildkit.core.matrix.text import TextFile, line_of
from buildkit.core.vendors import AMD, BACKENDS, of_backend
from buildkit.errors import Problem, UserError, printable


@dataclass(frozen=True)
class Layer:
    """One matrix file, parsed. `template_dir` is already resolved against the file's folder."""

    path: str
    data: Mapping[str, Any]
    template_dir: str | None = None
    lines: Mapping[str, int] = field(default_factory=dict)  # key path -> line
    # a file without template_dir that has a templates/ folder of *.j2 files beside it: their names, which are
    # not read (a team that expected templates/ to be the default is told so)
    unread_templates: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class CommandLine:
    """What a command's options set of the matrix itself (publish's --registry and --channel, build's --compression):
    laid over the files' values before the matrix is validated, so each is checked once, by the rule of its key, and
    a problem names the option."""

    registry: str | None = None
    compression: str | None = None
    channel: str | None = None  # every stack's, its own included

    def values(self) -> Iterator[tuple[str, str, str]]:
        """(key, option, value) of each value set."""
        for key in ("registry", "compression", "channel"):
            value = getattr(self, key)
            if value is not None:
                yield key, f"--{key}", value


@dataclass(frozen=True)
class MatrixSources:
    """Everything a matrix is made of, as the file loader read it, and what the command line sets of it."""

    layers: tuple[Layer, ...]  # the `extends` chain, base first
    templates: TemplateSet = field(default_factory=lambda: TemplateSet(()))
    lock: TextFile | None = None  # matrix.lock, parsed; None when there is none (or it is not used)
    command_line: CommandLine = CommandLine()


@dataclass(frozen=True)
class User:
    name: str
    uid: int


@dataclass(frozen=True)
class Stack:
    """One [[torch]] entry with the top-level defaults applied."""

    torch: str
    backends: Mapping[str, tuple[str, ...]]
    python: tuple[str, ...]
    flavors: tuple[str, ...]
    companions: tuple[str, ...]
    packages: tuple[str, ...]
    os_packages: tuple[str, ...]
    archs: Mapping[str, tuple[str, ...]]  # team-narrowed arch lists; a backend absent here uses the official list
    pair: Mapping[str, str]  # backend -> the version whose image is the pair's twin
    channel: str
    compile: bool = True  # a C/C++ toolchain and the Python headers in runtime images (torch.compile)
    rocm_families: tuple[str, ...] = ()  # thin-wheel ROCm images, one per family; () builds one with every arch
    installer: str = "uv"  # what installs torch and the stack's packages: uv or pip
    max_layer_size: int = 10 * 10**9  # bytes; the largest layer an image may have
    origin: str = ""  # "file torch[i]" for messages


@dataclass(frozen=True)
class Matrix:
    files: tuple[str, ...]
    registry: str
    repository: str
    tag_prefix: str
    source: str
    wheel_index: str
    runtime_base: str
    source_runtime_base: str
    compression: str  # image layers: zstd, or gzip for engines older than Docker 23
    templates: TemplateSet  # the team's folders' templates (most specific file first), then the built-in ones
    user: User | None  # None: the image keeps running as root
    stacks: tuple[Stack, ...]
    include: tuple[Rule, ...]
    exclude: tuple[Rule, ...]
    compat: Compat
    compat_overridden: bool = False
    lock: Lock = Lock()  # matrix.lock beside the matrix: base digests and resolved package ranges
    lines: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # file -> key path -> line (from the loader)
    warnings: tuple[Problem, ...] = ()  # what a fork most likely did not mean, though it is valid (plan says it)

    def problem(self, where: str, message: str, key: str) -> Problem:
        """A problem found after validation (an include rule that matches nothing), located like validation's."""
        return Problem(where, message, key=key, line=line_of(self.lines.get(where, {}), key))


# --- layering ---------------------------------------------------------------------------------------------


@dataclass
class Merged:
    """The layers folded into one table, remembering which file set each key."""

    data: dict[str, Any] = field(default_factory=dict)
    key_origin: dict[str, str] = field(default_factory=dict)  # top-level key -> file
    stack_origin: dict[tuple[int, str], str] = field(default_factory=dict)  # (stack index, key) -> file
    stack_index: dict[int, int] = field(default_factory=dict)  # stack index -> its position in that file
    problems: list[Problem] = field(default_factory=list)

    def where(self, key: str, default: str) -> str:
        return self.key_origin.get(key, default)


def _merge_stacks(merged: Merged, child: list[Any], path: str) -> None:
    stacks: list[dict[str, Any]] = merged.data.setdefault("torch", [])
    # entries merge by their version; one whose version is not a string (refused by validation) merges with nothing
    by_version = {entry["version"]: index for index, entry in enumerate(stacks) if isinstance(entry, dict) and isinstance(entry.get("version"), str)}
    in_this_file: set[str] = set()
    for position, entry in enumerate(child):
        if not isinstance(entry, Mapping):
            entry = {"__invalid__": entry}
        version = entry.get("version")
        if isinstance(version, str) and version in in_this_file:
            merged.problems.append(
                Problem(path, f"duplicate [[torch]] entry for {printable(version)} in this file; merge the two", key=f"torch[{position}].version")
            )
            continue
        if isinstance(version, str):
            in_this_file.add(version)
        index = by_version.get(version) if isinstance(version, str) else None
        if index is None:
            stacks.append(dict(entry))
            index = len(stacks) - 1
            if isinstance(version, str):
                by_version[version] = index
        else:
            # A team's entry for a release the parent has: its keys win. A pair chosen for the parent's backend
            # versions does not survive a change of those versions (the default twin is chosen again).
            parent = stacks[index]
            changed = [backend for backend in BACKENDS if backend in entry]
            parent.update(entry)
            if "pair" not in entry and changed and isinstance(parent.get("pair"), Mapping):
                parent["pair"] = {backend: version for backend, version in parent["pair"].items() if backend not in changed}
        for key in entry:
            merged.stack_origin[(index, key)] = path
        merged.stack_origin[(index, "")] = path
        merged.stack_index[index] = position


def lay_command_line(merged: Merged, command_line: CommandLine) -> None:
    """The command line's values over the files': a top-level key's, and a channel over every stack's own too (the
    option names what it sets for the whole run). Each is located at its option."""
    for key, option, value in command_line.values():
        merged.data[key] = value
        merged.key_origin[key] = option
        if key in fields.STACK:  # a key a stack may set for itself (channel)
            for index, stack in enumerate(merged.data.get("torch", [])):
                if isinstance(stack, dict):
                    stack[key] = value
                    merged.stack_origin[(index, key)] = option


def merge_layers(layers: tuple[Layer, ...]) -> Merged:
    merged = Merged()
    for layer in layers:
        for key, value in layer.data.items():
            if key == "torch" and isinstance(value, list):
                _merge_stacks(merged, value, layer.path)
            elif key == "compat" and isinstance(value, Mapping) and isinstance(merged.data.get("compat"), Mapping):
                merged.data["compat"] = merge_overrides(merged.data["compat"], value)
            else:
                merged.data[key] = value
            merged.key_origin[key] = layer.path
    return merged


# --- validation -------------------------------------------------------------------------------------------


def parse_selectors(values: list[str], where: str = "--select") -> Rule:
    """`--select torch=2.14.* --select python=3.12` as one rule (all must match)."""
    problems = []
    criteria = []
    for value in values:
        selector, sep, pattern = value.partition("=")
        if not sep or selector not in fields.SELECTOR_KEYS or fields.glob(pattern):
            problems.append(
                Problem(
                    where,
                    f"{value!r}: expected KEY=GLOB with KEY one of {', '.join(fields.SELECTOR_KEYS)}, e.g. torch=2.14.*"
                    f"{fields.did_you_mean(selector, fields.SELECTOR_KEYS) if sep else ''}",
                )
            )
        else:
            criteria.append((selector, pattern))
    if problems:
        raise UserError(problems)
    return Rule(tuple(criteria))


class _StackReader:
    """Reads one [[torch]] entry: its own keys, or the top-level values it inherits, each located in the
    file that set it; then checks it against the compatibility data."""

    def __init__(
        self,
        check: Checker,
        merged: Merged,
        index: int,
        entry: Mapping[str, Any],
        top: Mapping[str, Any],
        compat: Compat,
        facts_changed_by: str | None = None,
        flavors: frozenset[str] | None = None,
        layers: tuple[Layer, ...] = (),
    ) -> None:
        self.check, self.merged, self.index, self.entry, self.top, self.compat = check, merged, index, entry, top, compat
        self.facts_changed_by = facts_changed_by  # the file whose [compat] overrides changed the shipped facts
        self.flavors = flavors  # the flavors that have a template (None: not known here)
        self.layers = layers  # the extends chain, for where a missing template should go
        self.file = merged.stack_origin.get((index, ""), "matrix")
        self.key = f"torch[{merged.stack_index.get(index, index)}]"

    def located(self, name: str) -> tuple[str, str]:
        """(file, key path) where a stack's value for `name` comes from; a value no file sets (the field's
        default) is located at the stack itself."""
        if name in self.entry:
            return self.merged.stack_origin.get((self.index, name), self.file), f"{self.key}.{name}"
        if name not in self.merged.data:
            return self.file, f"{self.key}.{name}"
        return self.merged.where(name, self.file), name

    def is_default(self, name: str) -> bool:
        return name not in self.entry and name not in self.merged.data

    def fail(self, where: str, key: str, message: str) -> None:
        """A problem with a stack's value. When a file's [compat] overrides changed the facts that a stack of
        another file (the default matrix) was written for, say so: the fix is in the overriding file."""
        if self.facts_changed_by and where != self.facts_changed_by:
            message += (
                f" ({where} is extended by {self.facts_changed_by}, whose [compat] changed the facts this entry was "
                f"written for: give torch {self.entry.get('version')} a [[torch]] entry there that sets it)"
            )
        self.check.fail(where, key, message)

    def value(self, name: str) -> Any:
        if name in self.entry:
            where, key = self.located(name)
            return fields.STACK[name].kind.read(self.check, self.entry[name], where, key)
        return self.top[name]

    def read(self) -> Stack | None:
        if "__invalid__" in self.entry:
            self.check.fail(self.file, self.key, 'expected a table ([[torch]] with version = "2.14.1"), got a value')
            return None
        for name in self.entry:
            if name not in fields.STACK:
                where, key = self.located(name)
                self.check.fail(where, key, fields.unknown_key(name, fields.STACK))
        if "version" not in self.entry:
            self.check.fail(self.file, self.key, 'missing "version": every [[torch]] entry names its torch release, e.g. version = "2.14.1"')
            return None
        before = len(self.check.problems)
        torch = self.value("version")
        if torch is INVALID:
            return None
        release = self._release(torch)
        if release is None:
            return None
        values = {name: self.value(name) for name in fields.INHERITED}
        backends = self._backends(release)
        if any(value is INVALID for value in values.values()) or backends is None:
            return None
        self._pythons(release, values["python"])
        self._companions(release, torch, values["companions"])
        self._packages(values["packages"])
        self._flavors(values["flavors"])
        self._archs(release.minor, values["archs"], backends)
        self._families(release.minor, values["rocm_families"], values["archs"], backends)
        if len(self.check.problems) > before:
            return None
        pair = self._pair(backends)
        if len(self.check.problems) > before or pair is None:
            return None
        return Stack(
            torch=torch,
            backends=backends,
            python=values["python"],
            flavors=values["flavors"],
            companions=values["companions"],
            packages=values["packages"],
            os_packages=values["os_packages"],
            archs=values["archs"],
            pair=pair,
            channel=values["channel"],
            compile=values["compile"],
            rocm_families=values["rocm_families"],
            installer=values["installer"],
            max_layer_size=grammar.size_bytes(values["max_layer_size"]),
            origin=f"{self.file} {self.key}",
        )

    def _release(self, torch: str) -> TorchRelease | None:
        where, key = self.located("version")
        release = self.compat.torch_release(torch)
        if release is None:
            known = ", ".join(sorted(self.compat.torch, key=Version))
            minor = ".".join(torch.split(".")[:2])
            self.check.fail(
                where,
                key,
                f'torch {torch} is not in the compatibility data (known: {known}); add [compat.torch."{minor}"] to your matrix to describe a custom stack',
            )
            return None
        if release.releases and torch not in release.releases:
            self.fail(
                where,
                key,
                f"torch {torch} is not a release of {release.minor} (known: {', '.join(release.releases)}); "
                f'add it to [compat.torch."{release.minor}"].releases if it is new',
            )
            return None
        return release

    def _backends(self, release: TorchRelease) -> dict[str, tuple[str, ...]] | None:
        backends: dict[str, tuple[str, ...]] = {}
        for backend in BACKENDS:
            versions = self.value(backend) if backend in self.entry else release.backends[backend]
            if versions is INVALID:
                return None
            where, key = self.located(backend)
            for index, version in enumerate(versions):
                if version not in release.backends[backend]:
                    offered = ", ".join(release.backends[backend]) or "none"
                    self.fail(
                        where, f"{key}[{index}]", f"torch {release.minor} has no {of_backend(backend).backend_label(version)} wheels; supported: {offered}"
                    )
                elif self.compat.backend(backend, version) is None:
                    self.fail(where, f"{key}[{index}]", f'no {backend} {version} entry in the compatibility data; add [compat.{backend}."{version}"]')
            backends[backend] = versions
        return backends

    def _pythons(self, release: TorchRelease, pythons: tuple[str, ...]) -> None:
        where, key = self.located("python")
        supported = ", ".join(release.python) or "none"
        if self.is_default("python"):
            missing = [python for python in pythons if python not in release.python]
            if missing:
                self.fail(
                    where,
                    key,
                    f"torch {release.minor} has no wheels for Python {', '.join(missing)} of the default python "
                    f"list ({', '.join(pythons)}); supported: {supported}; set python in this [[torch]] entry",
                )
            return
        for index, python in enumerate(pythons):
            if python not in release.python:
                self.fail(where, f"{key}[{index}]", f"torch {release.minor} has no wheels for Python {python}; supported: {supported}")

    def _companions(self, release: TorchRelease, torch: str, companions: tuple[str, ...]) -> None:
        where, key = self.located("companions")
        for index, companion in enumerate(companions):
            if release.companion_version(companion, torch) is None:
                fix = (
                    f'set torchvision in [compat.torch."{release.minor}"], or companions = [] in this [[torch]] entry'
                    if self.is_default("companions")
                    else "companions are built per backend (torchvision); put other packages in `packages`"
                )
                self.fail(
                    where, key if self.is_default("companions") else f"{key}[{index}]", f"no version of {companion!r} is known for torch {release.minor}; {fix}"
                )

    def _packages(self, packages: tuple[str, ...]) -> None:
        where, key = self.located("packages")
        for index, package in enumerate(packages):
            if canonicalize_name(Requirement(package).name) == "torch":
                self.check.fail(where, f"{key}[{index}]", "torch is installed by buildkit from the backend's wheel index; remove it from `packages`")

    def _flavors(self, flavors: tuple[str, ...]) -> None:
        """A flavor is a template: one without its template would pass validation and fail at `plan`."""
        if self.flavors is None:
            return
        where, key = self.located("flavors")
        for index, flavor in enumerate(flavors):
            if flavor not in self.flavors:
                self.fail(
                    where,
                    f"{key}[{index}]",
                    f"no template {flavor}{FLAVOR_SUFFIX} for flavor {flavor!r} in the template "
                    f"folders; {_template_fix(self.layers, where, flavor + FLAVOR_SUFFIX)}, or use one of: "
                    f"{', '.join(sorted(self.flavors))}",
                )

    def _archs(self, minor: str, archs: Mapping[str, tuple[str, ...]], backends: Mapping[str, tuple[str, ...]]) -> None:
        where, key = self.located("archs")
        for backend, names in archs.items():
            known = self.compat.known_archs[backend]
            for index, arch in enumerate(names):
                if arch.removesuffix("+PTX") not in known:
                    self.fail(where, f"{key}.{backend}[{index}]", f"unknown {backend} arch {arch!r}; known: {', '.join(known)}")
            # A wheel carries the arch list it was built with: a team can narrow it, never widen it.
            for version in backends.get(backend, ()):
                if self.compat.backend(backend, version) is None:
                    continue  # its own problem is reported with the stack's versions
                official = self.compat.wheel_archs(minor, backend, version).archs  # this torch release's build
                extra = [arch for arch in names if arch not in official and arch.removesuffix("+PTX") in known]
                if extra:
                    self.fail(
                        where,
                        f"{key}.{backend}",
                        f"{', '.join(extra)} not in the {backend} {version} wheels' arch list of "
                        f"torch {minor} ({', '.join(official)}); a wheel image can only narrow it",
                    )

    def _families(self, minor: str, families: tuple[str, ...], archs: Mapping[str, tuple[str, ...]], backends: Mapping[str, tuple[str, ...]]) -> None:
        """Each family is a product family of the data or a bundle of AMD's hierarchy, and at every thin-wheel
        ROCm version of the stack it keeps a gfx target the wheels carry; every gfx target an image declares
        has a device package on its index."""
        where, key = self.located("rocm_families")
        groups = {name: self.compat.image_group(name) for name in families}
        for index, name in enumerate(families):
            if groups[name] is None:
                self.fail(
                    where,
                    f"{key}[{index}]",
                    f"unknown ROCm family {name!r}; known: {', '.join(self.compat.known_groups())} "
                    "(the compatibility data's families, then the sub-families and families of AMD's "
                    "hierarchy, from rocm-bootstrap; or describe a family in [compat.families])",
                )
        # families are AMD's (its thin wheels' gfx targets by product line), as the rocm_families key says
        releases = [self.compat.backend(AMD.backend, v) for v in backends.get(AMD.backend, ())]
        thin = [release for release in releases if release is not None and release.thin_wheels]
        if families and not thin and "rocm_families" in self.entry:  # set for this stack, not inherited
            self.fail(
                where,
                key,
                "rocm_families builds thin-wheel ROCm images per family, and this stack has no thin-wheel "
                f"ROCm version ({', '.join(backends.get(AMD.backend, ())) or 'none'})",
            )
        for release in thin:
            wheel_archs = archs.get(AMD.backend, self.compat.wheel_archs(minor, AMD.backend, release.version).archs)
            declared = [
                (f"{key}[{i}]", name, [g for g in groups[name] or () if g in wheel_archs]) for i, name in enumerate(families) if groups[name] is not None
            ]
            for path, name, kept in declared:
                # an inherited family that the stack's own arch list leaves empty is left out (plan notes it)
                if (not kept and "rocm_families" in self.entry) or (not kept and self.is_default("archs")):
                    self.fail(
                        where,
                        path,
                        f"family {name} ({', '.join(groups[name] or ())}) has no gfx target "
                        f"in the ROCm {release.version} wheels' arch list ({', '.join(wheel_archs)})",
                    )
            carried = {gfx for _, _, kept in declared for gfx in kept} if declared else set(wheel_archs)
            layout = self.compat.layout_of(release)
            missing = sorted(gfx for gfx in carried if gfx not in self.compat.device_archs(release.version))
            if layout is not None and missing:
                shown = layout.index or f"the ROCm {release.version} wheel index"
                names = [name for code in layout.device_code(self.compat.amd, (missing[0],)) for name in code.packages]
                self.fail(
                    where,
                    key if declared else self.located("archs")[1],
                    f"{', '.join(missing)}: no device package ({', '.join(names)}) on "
                    f"{shown} ({layout.name} layout); its device packages cover: {', '.join(self.compat.device_archs(release.version))}",
                )

    def _pair(self, backends: Mapping[str, tuple[str, ...]]) -> dict[str, str] | None:
        chosen = self.value("pair") if "pair" in self.entry else {}
        if chosen is INVALID:
            return None
        where, key = self.located("pair")
        pair: dict[str, str] = {}
        for backend in BACKENDS:
            version = chosen.get(backend)
            if version is not None and version not in backends[backend]:
                self.fail(where, f"{key}.{backend}", f"{version!r} is not one of this stack's {backend} versions ({', '.join(backends[backend]) or 'none'})")
            elif version is not None:
                pair[backend] = version
            elif backends[backend]:
                pair[backend] = _default_twin(self.compat, backend, backends[backend])
        return pair


def _template_fix(layers: tuple[Layer, ...], where: str, template: str) -> str:
    """Where a missing team template goes: the template_dir a file names; else, template_dir being unset, the
    templates/ folder that holds it unread, or how to set one up."""
    if any(layer.template_dir for layer in layers):
        return "add it to your template_dir"
    unread = next((layer for layer in reversed(layers) if template in layer.unread_templates), None)
    if unread is not None:
        return f'template_dir is unset, so {UNREAD_FOLDER}/{template} beside {unread.path} is not read: add template_dir = "{UNREAD_FOLDER}" to {unread.path}'
    return (
        f"template_dir is unset, so only buildkit's own templates are searched: put {template} in a folder beside "
        f'{where} and name it there, e.g. template_dir = "{UNREAD_FOLDER}"'
    )


def _warnings(merged: Merged, layers: tuple[Layer, ...], lines: Mapping[str, Mapping[str, int]]) -> tuple[Problem, ...]:
    """What a fork most likely did not mean: a templates/ folder it does not read, and the parent's source label
    on images it publishes to a registry or repository of its own."""
    found: list[Problem] = []
    for layer in layers:
        if layer.unread_templates and not layer.template_dir:
            names = layer.unread_templates
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            they, are, them = ("they", "are", "them") if len(names) > 1 else ("it", "is", "it")
            found.append(
                Problem(
                    layer.path,
                    f"{UNREAD_FOLDER}/ beside this file holds {shown}, but template_dir is unset, so {they} "
                    f'{are} not read: add template_dir = "{UNREAD_FOLDER}" to use {them}',
                )
            )
    order = [layer.path for layer in layers]
    source_from = merged.key_origin.get("source")
    if source_from in order:
        changed = [key for key in PUBLISHED_AT if order.index(merged.key_origin.get(key, source_from)) > order.index(source_from)]
        if changed:
            file = merged.key_origin[changed[0]]
            found.append(
                Problem(
                    file,
                    f"{' and '.join(changed)} changed here, but source ({printable(str(merged.data['source']))}) is "
                    f"inherited from {source_from}: the images would carry its org.opencontainers.image.source "
                    "label, naming another project as theirs; set source to your own repository's URL",
                    key=changed[0],
                    line=line_of(lines.get(file, {}), changed[0]),
                )
            )
    return tuple(found)


# Where images are published: a fork that changes these publishes images of its own, and must then say where they
# come from itself (source, the only provenance the matrix writes into a label, org.opencontainers.image.source).
PUBLISHED_AT = ("registry", "repository")


# What a compat entry must say once a team's overrides are merged over the shipped facts (the shipped
# entries have all of it; a team's new CUDA or ROCm version or torch minor may not).
_REQUIRED_FACTS = {
    "torch": {"python": 'the Python versions it has wheels for, e.g. python = ["3.12", "3.13"]'},
    **{
        backend: {
            "archs": 'the GPU archs its wheels carry, e.g. archs = ["9.0"] or ["gfx942"]',
            "devel_base": 'its devel image, e.g. devel_base = "nvidia/cuda:13.0.3-cudnn-devel-ubuntu24.04"',
        }
        for backend in BACKENDS
    },
}


def _check_overridden_facts(check: Checker, overrides: Mapping[str, Any], facts: Mapping[str, Any], where: str, bundles: tuple[str, ...]) -> None:
    """The entries a team's [compat] touched, merged: complete, and every backend version a torch release
    lists has its own entry (else the stacks that use it fail far from the cause)."""
    for table, required in _REQUIRED_FACTS.items():
        for name in overrides.get(table, {}):
            entry = facts[table][name]
            for key, example in required.items():
                if key not in entry:
                    check.fail(where, f"compat.{table}.{name}", f'missing "{key}": a {table} entry of your own needs {example}')
    # a family groups bundles of AMD's hierarchy: a name rocm-bootstrap does not know is a mistake, not a new GPU
    for name, entry in overrides.get("families", {}).items():
        for index, bundle in enumerate(entry.get("bundles", ())):
            if bundle not in bundles:
                check.fail(
                    where,
                    f"compat.families.{name}.bundles[{index}]",
                    f"unknown bundle {bundle!r}; AMD's hierarchy (rocm-bootstrap) knows: {', '.join(bundles)}",
                )
    for minor in overrides.get("torch", {}):
        for backend in BACKENDS:
            for index, version in enumerate(facts["torch"][minor].get(backend, ())):
                if version not in facts.get(backend, {}):
                    check.fail(
                        where,
                        f"compat.torch.{minor}.{backend}[{index}]",
                        f'no [compat.{backend}."{version}"] entry describes {backend} {version}: add one (archs, devel_base)',
                    )


MAX_PROBLEMS = 50  # a generated or pasted matrix can hold millions of wrong values; the first ones say what is wrong


def first_problems(problems: list[Problem], where: str) -> list[Problem]:
    if len(problems) <= MAX_PROBLEMS:
        return problems
    rest = len(problems) - MAX_PROBLEMS
    return [*problems[:MAX_PROBLEMS], Problem(where, f"and {rest} more problems not shown: fix these and validate again")]


# How many [[torch]] entries a matrix (with the files it extends) may hold, and how many targets they may describe
# before include/exclude: the expansion holds every target, so its cost is bounded before it starts (a generated
# matrix of 100,000 targets validates in seconds; bench/plan_render.py).
MAX_STACKS = fields.MAX_ENTRIES
MAX_TARGETS = 200_000


def _most_targets(stack: Stack) -> int:
    """The targets a stack describes at most: every backend version x Python x flavor (x ROCm family)."""
    families = max(len(stack.rocm_families), 1)
    versions = sum(len(versions) * (families if backend == AMD.backend else 1) for backend, versions in stack.backends.items())
    return versions * len(stack.python) * len(stack.flavors)


def _default_twin(compat: Compat, backend: str, versions: tuple[str, ...]) -> str:
    """The newest version whose facts are confirmed, else the newest: the one the floating tags follow."""
    ordered = sorted(versions, key=Version)
    # called once _backends found each version in the compatibility data (a stack with problems stops before)
    confirmed = [v for v in ordered if not compat.backend(backend, v).unconfirmed]  # type: ignore[union-attr]
    return (confirmed or ordered)[-1]


def _top_values(check: Checker, merged: Merged, last: str, compat: Compat) -> dict[str, Any]:
    """Every top-level key's value: the matrix's own (checked), else the field's default."""
    values: dict[str, Any] = {}
    for name, spec in fields.TOP.items():
        if name in merged.data:
            values[name] = spec.kind.read(check, merged.data[name], merged.where(name, last), name)
        elif spec.default is REQUIRED:
            check.fail(last, name, 'missing; set it, or start the file with extends = "default" to inherit it')
            values[name] = INVALID
        else:
            values[name] = spec.default
    values["wheel_index"] = values["wheel_index"] or compat.wheel_index
    for name in ("python", "flavors", "companions", "packages", "os_packages"):
        if isinstance(values[name], list):
            values[name] = tuple(values[name])
    return values


def resolve_matrix(sources: MatrixSources, compat_data: Mapping[str, Any]) -> Matrix:
    """Merge, validate and freeze. Raises UserError listing every problem found, each located at its line."""
    layers = sources.layers
    lines = {layer.path: layer.lines for layer in layers}
    try:
        return _resolve(sources, compat_data, lines)
    except UserError as error:
        raise UserError(
            [
                Problem(p.where, p.message, key=p.key, line=p.line or (line_of(lines[p.where], p.key) if p.where in lines and p.key else None))
                for p in error.problems
            ]
        ) from None


def _resolve(sources: MatrixSources, compat_data: Mapping[str, Any], lines: Mapping[str, Mapping[str, int]]) -> Matrix:
    layers = sources.layers
    lock = read_lock(sources.lock.data, sources.lock.shown) if sources.lock is not None else Lock()
    flavors = sources.templates.flavors()
    merged = merge_layers(layers)
    warnings = _warnings(merged, layers, lines)  # about the files: what the command line sets is meant
    lay_command_line(merged, sources.command_line)
    check = Checker()
    check.problems.extend(merged.problems)
    last = layers[-1].path if layers else "matrix"
    for key in merged.data:
        if key not in fields.TOP and key not in ("compat", "torch"):
            check.fail(merged.where(key, last), key, fields.unknown_key(key, [*fields.TOP, "compat", "torch"]))

    overrides = merged.data.get("compat")
    broken_facts = False
    if overrides is not None:
        before = len(check.problems)
        fields.COMPAT.read(check, overrides, merged.where("compat", last), "compat")
        # Facts that do not parse would make every stack's check misleading: stacks are then not checked.
        broken_facts = len(check.problems) > before
        if not broken_facts:
            compat_data = merge_overrides(compat_data, overrides)
            _check_overridden_facts(check, overrides, compat_data, merged.where("compat", last), tuple(amd_targets().bundles))
            broken_facts = len(check.problems) > before
    compat = compat_from_data(compat_data)

    top = _top_values(check, merged, last, compat)
    user = None
    if isinstance(top["user"], dict) and top["run_as_root"] is False:
        user = User(top["user"].get("name", "buildkit"), top["user"].get("uid", 1000))

    stacks: list[Stack] = []
    entries = merged.data.get("torch", [])
    if not isinstance(entries, list) or not entries:
        check.fail(merged.where("torch", last), "torch", 'expected at least one [[torch]] entry with version = "2.14.1"')
        entries = []
    elif len(entries) > MAX_STACKS:
        check.fail(merged.where("torch", last), "torch", fields.too_many(len(entries), MAX_STACKS, "[[torch]] entries"))
        entries = []
    if not broken_facts and all(value is not INVALID for name, value in top.items() if fields.TOP[name].inherited):
        for index, entry in enumerate(entries):
            stack = _StackReader(check, merged, index, entry, top, compat, merged.where("compat", last) if overrides else None, flavors, layers).read()
            if stack is not None:
                stacks.append(stack)

    described = sum(map(_most_targets, stacks))
    if described > MAX_TARGETS and not check.problems:
        check.fail(
            merged.where("torch", last),
            "torch",
            f"the [[torch]] entries describe up to {described:,} targets (each backend "
            f"version x Python x flavor x ROCm family), more than the {MAX_TARGETS:,} "
            "buildkit expands at once; split the matrix or narrow its lists",
        )
    if check.problems:
        # Stacks that inherit the same bad default would repeat its problem once each.
        raise UserError(first_problems(list(dict.fromkeys(check.problems)), last))
    return Matrix(
        files=tuple(layer.path for layer in layers),
        registry=top["registry"],
        repository=top["repository"],
        tag_prefix=top["tag_prefix"],
        source=top["source"],
        wheel_index=top["wheel_index"],
        runtime_base=top["runtime_base"],
        source_runtime_base=top["source_runtime_base"],
        compression=top["compression"],
        templates=sources.templates,
        user=user,
        stacks=tuple(stacks),
        include=top["include"],
        exclude=top["exclude"],
        compat=compat,
        compat_overridden=overrides is not None,
        lock=lock,
        lines=lines,
        warnings=warnings,
    )
