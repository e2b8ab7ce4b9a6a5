"""The matrix schema as data: every key, its kind and grammar, its default, and whether stacks inherit it.

Validation, defaults and docs/matrix-reference.md (generated from here) all follow these tables, so a key cannot be
checked one way and defaulted another. Each kind reads a parsed TOML value, records a problem (file, key
path, what was expected) when the value does not fit, and returns the value it stands for.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from buildkit.core import grammar
from buildkit.core.compat.facts import COMPANION_PACKAGES
from buildkit.errors import Problem, printable

SELECTOR_KEYS = ("torch", "python", "backend", "backend_version", "flavor", "vendor", "family", "id")
CHANNELS = ("release", "test", "nightly")
INSTALLERS = ("uv", "pip")
COMPRESSIONS = ("zstd", "gzip")
_GLOB_RE_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-*?[]!")
INVALID = object()  # what a kind returns for a value it refused (its problem is recorded)


class Checker:
    """Collects problems, each located by file and key path."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def fail(self, where: str, key: str, message: str) -> None:
        # a key path is one word in a message: a key that is (or holds) a space, legal quoted TOML, shows it escaped
        self.problems.append(Problem(where, message, key=printable(key).replace(" ", "\\x20")))


def describe(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list", dict: "a table"}
    shown = f" ({value!r})" if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) < 1e12 else ""
    return names.get(type(value), "a date or time") + shown


_GLOB_SPECIAL = frozenset("*?[")


def _is_literal(pattern: str) -> bool:
    return not _GLOB_SPECIAL & set(pattern)


@cache
def _glob_test(pattern: str) -> Callable[[str], bool]:
    """A glob as a test of one value, made once per distinct pattern for the run. fnmatch's own cache holds
    32,768 patterns: a matrix with more rules than that recompiled every pattern at every match, which made
    40,000 rules take minutes. A pattern without wildcards is a comparison, one with `*` only a sequence of
    substring searches (compiling a regular expression costs a hundred times more than either); `?` and
    `[...]` take fnmatch's regular expression."""
    if _is_literal(pattern):
        return pattern.__eq__
    if "?" in pattern or "[" in pattern:
        match = re.compile(fnmatch.translate(pattern)).match
        return lambda value: match(value) is not None
    head, *middle, tail = pattern.split("*")

    def test(value: str) -> bool:
        if len(value) < len(head) + len(tail) or not (value.startswith(head) and value.endswith(tail)):
            return False
        at, end = len(head), len(value) - len(tail)
        for part in middle:
            at = value.find(part, at, end)
            if at < 0:
                return False
            at += len(part)
        return True
    return test


@dataclass(frozen=True)
class Rule:
    """An include/exclude rule or a --select filter: every key's glob must match the target."""

    criteria: tuple[tuple[str, str], ...]

    def matches(self, facts: Mapping[str, str]) -> bool:
        return all(_glob_test(pattern)(facts[key]) for key, pattern in self.criteria)

    def could_match(self, partial: Mapping[str, str]) -> bool:
        """Whether something described only by `partial` facts may match (unknown keys do not rule it out)."""
        return all(_glob_test(pattern)(partial[key]) for key, pattern in self.criteria if key in partial)

    def matches_all(self, partial: Mapping[str, str]) -> bool:
        """Whether everything described by `partial` facts matches: the facts name every key of the rule."""
        return all(key in partial and _glob_test(pattern)(partial[key]) for key, pattern in self.criteria)

    def __str__(self) -> str:
        return ",".join(f"{key}={pattern}" for key, pattern in self.criteria)


def matched_by(rules: Sequence[Rule], facts: Sequence[Mapping[str, str]]) -> list[tuple[int, ...]]:
    """For each rule, the indices of the targets (given by their facts) that it matches, in time linear in
    the rules and the targets rather than their product (only the keys the rules name are indexed). Targets take
    few values per key (a torch per stack, a few Pythons, two backends; only ids are one per target), so each
    distinct glob is tried once against
    each distinct value of its key, turning a rule into the set of values it accepts per key. A rule then
    walks only the targets holding a value its most selective criterion accepts, and rules that accept the
    same values share one answer."""
    holders: dict[str, dict[str, list[int]]] = {key: {} for rule in rules for key, _ in rule.criteria}  # key -> value -> holders
    for index, target in enumerate(facts):
        for key, values in holders.items():
            values.setdefault(target[key], []).append(index)
    accepted: dict[tuple[str, str], frozenset[str]] = {}
    answers: dict[tuple[tuple[str, frozenset[str]], ...], tuple[int, ...]] = {}
    everything = tuple(range(len(facts)))
    results = []
    for rule in rules:
        for criterion in rule.criteria:
            if criterion not in accepted:
                key, pattern = criterion
                values = holders.get(key, {})
                if _is_literal(pattern):
                    accepted[criterion] = frozenset([pattern] if pattern in values else [])
                else:
                    test = _glob_test(pattern)
                    accepted[criterion] = frozenset(value for value in values if test(value))
        wanted = tuple(sorted({(key, accepted[(key, pattern)]) for key, pattern in rule.criteria}, key=lambda item: item[0]))
        if wanted not in answers:
            answers[wanted] = _holding(wanted, holders, facts) if wanted else everything
        results.append(answers[wanted])
    return results


def _holding(wanted: tuple[tuple[str, frozenset[str]], ...], holders: Mapping[str, Mapping[str, list[int]]],
             facts: Sequence[Mapping[str, str]]) -> tuple[int, ...]:
    """The targets whose value for every key is one of the wanted ones."""
    if any(not values for _, values in wanted):
        return ()
    narrowest = min(wanted, key=lambda item: sum(len(holders[item[0]][value]) for value in item[1]))
    rest = [item for item in wanted if item is not narrowest]
    key, values = narrowest
    return tuple(sorted(index for value in values for index in holders[key][value]
                        if all(facts[index][other] in allowed for other, allowed in rest)))


@dataclass(frozen=True)
class Filtered:
    """What a matrix's include and exclude rules leave of its targets."""

    kept: tuple[int, ...]  # indices of the targets kept, in order
    unmatched: tuple[int, ...]  # include rules that match no target
    emptied_by: int | None  # the exclude rule that removed the last targets, when none is left


def apply_rules(include: Sequence[Rule], exclude: Sequence[Rule], facts: Sequence[Mapping[str, str]]) -> Filtered:
    """Targets that match an include rule (every target, without any) and no exclude rule. When the excludes
    remove every target, the one to blame is the rule that removed the last of them (rules apply in order)."""
    included = matched_by(include, facts)
    candidates = sorted({index for found in included for index in found}) if include else range(len(facts))
    first_exclusion: dict[int, int] = {}
    for rule_index, found in enumerate(matched_by(exclude, [facts[index] for index in candidates])):
        for position in found:
            first_exclusion.setdefault(position, rule_index)
    kept = tuple(index for position, index in enumerate(candidates) if position not in first_exclusion)
    emptied = max(first_exclusion.values()) if candidates and not kept else None
    return Filtered(kept, tuple(index for index, found in enumerate(included) if not found), emptied)


def emptied_by(rule: Rule, facts: Sequence[Mapping[str, str]]) -> int | None:
    """The index of the criterion after which, applied in order, no target is left (None while some is)."""
    left = list(facts)
    for index, (key, pattern) in enumerate(rule.criteria):
        left = [target for target in left if _glob_test(pattern)(target[key])]
        if not left:
            return index
    return None


def unknown_key(name: str, known: Iterable[str], what: str = "key") -> str:
    """The message for a key the schema has not: what is known, and the nearest known one when a typo is likely."""
    known = sorted(known)
    return f"unknown {what}; expected one of: {', '.join(known)}{did_you_mean(name, known)}"


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """'; did you mean "python"?' for a close misspelling of a known name, else ""."""
    nearest = difflib.get_close_matches(name, list(known), n=1, cutoff=0.7)
    return f'; did you mean "{nearest[0]}"?' if nearest else ""


def glob(value: str) -> str | None:
    if not isinstance(value, str) or not value or len(value) > 200 or not set(value) <= _GLOB_RE_CHARS:
        return "a glob of letters, digits and . _ - * ? [ ] !"
    return None


# --- kinds ------------------------------------------------------------------------------------------------


class Kind:
    example = ""

    def read(self, check: Checker, value: Any, where: str, key: str) -> Any:  # pragma: no cover - interface
        raise NotImplementedError


@dataclass(frozen=True)
class Text(Kind):
    """A string every character of which the grammar accepts."""

    grammar: Callable[[str], str | None]

    def read(self, check, value, where, key):
        if not isinstance(value, str):
            check.fail(where, key, f"expected a string, got {describe(value)}")
            return INVALID
        expected = self.grammar(value)
        if expected:
            check.fail(where, key, f"expected {expected}, got {value[:200]!r}")
            return INVALID
        return value


@dataclass(frozen=True)
class Texts(Kind):
    """A list of distinct strings of one grammar."""

    grammar: Callable[[str], str | None]
    allow_empty: bool = True

    def read(self, check, value, where, key):
        if not isinstance(value, list):
            check.fail(where, key, f"expected a list of strings, got {describe(value)}")
            return INVALID
        if not value and not self.allow_empty:
            check.fail(where, key, "expected at least one value, got an empty list")
            return INVALID
        items = [Text(self.grammar).read(check, item, where, f"{key}[{index}]") for index, item in enumerate(value)]
        seen: set[str] = set()
        for index, item in enumerate(items):
            if item is INVALID:
                continue
            if item in seen:
                check.fail(where, f"{key}[{index}]", f"duplicate value {item!r}: each value may appear once")
            seen.add(item)
        return INVALID if INVALID in items else tuple(items)


@dataclass(frozen=True)
class Flag(Kind):
    def read(self, check, value, where, key):
        if not isinstance(value, bool):
            check.fail(where, key, f"expected true or false, got {describe(value)}")
            return INVALID
        return value


@dataclass(frozen=True)
class Whole(Kind):
    """An integer in a range (TOML's booleans and floats are not integers here)."""

    low: int
    high: int
    expected: str

    def read(self, check, value, where, key):
        if isinstance(value, bool) or not isinstance(value, int) or not self.low <= value <= self.high:
            check.fail(where, key, f"expected {self.expected}, got {describe(value)}")
            return INVALID
        return value


@dataclass(frozen=True)
class Table(Kind):
    """A table of known keys (each of its own kind), or of any keys that fit `names` with values of `each`."""

    fields: Mapping[str, Kind] = field(default_factory=dict)
    names: Callable[[str], str | None] | None = None
    each: Kind | None = None
    example: str = ""

    def read(self, check, value, where, key):
        if not isinstance(value, Mapping):
            shown = f" such as {self.example}" if self.example else ""
            check.fail(where, key, f"expected a table{shown}, got {describe(value)}")
            return INVALID
        result: dict[str, Any] = {}
        for name, item in value.items():
            path = f"{key}.{name}" if key else name
            if name in self.fields:
                result[name] = self.fields[name].read(check, item, where, path)
            elif self.each is not None and self.names is not None and not self.names(name):
                result[name] = self.each.read(check, item, where, path)
            elif self.each is not None and self.names is not None:
                check.fail(where, path, f"expected a key that is {self.names(name)}, got {name[:100]!r}")
                result[name] = INVALID
            else:
                check.fail(where, path, unknown_key(name, self.fields))
                result[name] = INVALID
        return INVALID if INVALID in result.values() else result


@dataclass(frozen=True)
class Rules(Kind):
    def read(self, check, value, where, key):
        if not isinstance(value, list):
            check.fail(where, key, f'expected a list of tables such as {{ python = "3.10", backend = "rocm" }}, got {describe(value)}')
            return INVALID
        rules = []
        for index, entry in enumerate(value):
            path = f"{key}[{index}]"
            if not isinstance(entry, Mapping) or not entry:
                check.fail(where, path, 'expected a non-empty table of selector = glob, e.g. { torch = "2.12.*" }')
                continue
            criteria = []
            for selector, pattern in entry.items():
                if selector not in SELECTOR_KEYS:
                    check.fail(where, f"{path}.{selector}", unknown_key(selector, SELECTOR_KEYS, "selector"))
                elif glob(pattern):
                    shown = repr(pattern[:200]) if isinstance(pattern, str) else describe(pattern)
                    check.fail(where, f"{path}.{selector}", f"expected {glob(pattern)}, got {shown}")
                else:
                    criteria.append((selector, pattern))
            rules.append(Rule(tuple(criteria)))
        return tuple(rules)


def _channel(value: str) -> str | None:
    return None if value in CHANNELS else f"one of {', '.join(CHANNELS)}"


def _base_template(value: str) -> str | None:
    """An image reference where {python} stands for the target's Python version."""
    return grammar.image_reference(value.replace("{python}", "3.12"))


def _minor(value: str) -> str | None:
    expected = grammar.release_version(value)
    if expected or value.count(".") != 1:
        return 'a torch minor release such as "2.15"'
    return None


# --- the schema -------------------------------------------------------------------------------------------

REQUIRED = object()  # no default: a matrix (or a file it extends) must set it


@dataclass(frozen=True)
class Field:
    kind: Kind
    default: Any = REQUIRED
    inherited: bool = False  # a [[torch]] entry may set it for itself; the top-level value is its default
    doc: str = ""


ARCHS = Table({"cuda": Texts(grammar.cuda_arch, allow_empty=False), "rocm": Texts(grammar.rocm_arch, allow_empty=False)},
              example='{ rocm = ["gfx942"] }')

SCHEMA_VERSION = 1  # of matrix files

# Top-level keys. `extends` and `template_dir` are read by the file loader; `compat` and `torch` have their
# own tables below. Defaults are the shipped ones: the default matrix sets only what has no default.
TOP: dict[str, Field] = {
    "schema": Field(Whole(SCHEMA_VERSION, SCHEMA_VERSION, f"{SCHEMA_VERSION} (the schema this buildkit reads)"), SCHEMA_VERSION,
                    doc="matrix schema version"),
    "extends": Field(Text(lambda v: None), None, doc='"default" (the shipped matrix) or a path to another matrix'),
    "template_dir": Field(Text(lambda v: None), None, doc="a folder of team templates, searched before the built-in ones"),
    "registry": Field(Text(grammar.registry), doc="image registry host"),
    "repository": Field(Text(grammar.repository), doc="repository path in that registry"),
    "tag_prefix": Field(Text(grammar.tag_prefix), "", doc="prepended to every tag and pair key"),
    "source": Field(Text(grammar.http_url), doc="org.opencontainers.image.source"),
    "wheel_index": Field(Text(grammar.http_url), None, doc="torch wheel index (default: the compatibility data's)"),
    "runtime_base": Field(Text(_base_template), "python:{python}-slim-bookworm", doc="base of the runtime flavor"),
    # A wheel compiled on the ROCm devel image (Ubuntu 24.04, glibc 2.39) needs a runtime OS at least as new.
    "source_runtime_base": Field(Text(_base_template), "python:{python}-slim-trixie", doc="runtime base of the source flavor"),
    "user": Field(Table({"name": Text(grammar.user_name), "uid": Whole(1, 65534, "a non-root UID from 1 to 65534")},
                        example='{ name = "buildkit", uid = 1000 }'),
                  {"name": "buildkit", "uid": 1000}, doc="the non-root user images run as"),
    "run_as_root": Field(Flag(), False, doc="keep root as the images' user"),
    "include": Field(Rules(), [], doc="keep only targets matching one rule"),
    "exclude": Field(Rules(), [], doc="drop targets matching any rule"),
    "python": Field(Texts(grammar.python_version, allow_empty=False), ["3.10", "3.11", "3.12", "3.13"], inherited=True,
                    doc="CPython versions (each must be one the torch release has wheels for)"),
    "flavors": Field(Texts(grammar.name, allow_empty=False), ["runtime", "devel"], inherited=True,
                     doc="image flavors, one template each (templates/<flavor>.Dockerfile.j2)"),
    "companions": Field(Texts(grammar.name), ["torchvision"], inherited=True,
                        doc="torchvision, torchaudio: built per backend, the release published with torch"),
    "packages": Field(Texts(grammar.requirement), [], inherited=True, doc="pip requirements: name, extras, version"),
    "os_packages": Field(Texts(grammar.debian_package), ["libnuma1"], inherited=True, doc="Debian/Ubuntu packages"),
    "archs": Field(ARCHS, {}, inherited=True, doc="narrow a backend's arch list (never widen a wheel's)"),
    "channel": Field(Text(_channel), "release", inherited=True, doc="release | test | nightly"),
    "compile": Field(Flag(), True, inherited=True,
                     doc="a C/C++ toolchain and the Python headers in runtime images, so torch.compile works"),
    "installer": Field(Text(lambda value: None if value in INSTALLERS else f"one of {', '.join(INSTALLERS)}"), "uv",
                       inherited=True, doc="what installs torch and the stack's packages in the image: uv or pip"),
    "compression": Field(Text(lambda value: None if value in COMPRESSIONS else f"one of {', '.join(COMPRESSIONS)}"), "zstd",
                         doc="how image layers are compressed: zstd, or gzip for engines older than Docker 23"),
    "rocm_families": Field(Texts(grammar.rocm_family), [], inherited=True,
                           doc="thin-wheel ROCm images per GPU family: a [families] name of the compatibility data (mi300) or a "
                               "bundle of AMD's hierarchy (gfx9_4, gfx115x, gfx12); [] builds one with every arch"),
    "max_layer_size": Field(Text(grammar.size), "10GB", inherited=True,
                            doc="the largest layer an image may have (GHCR refuses layers above 10 GB)"),
}
INHERITED = tuple(key for key, spec in TOP.items() if spec.inherited)

VERSIONS = Texts(grammar.release_version)
STACK: dict[str, Field] = {
    "version": Field(Text(grammar.release_version), doc='the torch release, e.g. "2.14.1"'),
    "cuda": Field(VERSIONS, None, doc="CUDA versions (default: every one the release ships)"),
    "rocm": Field(VERSIONS, None, doc="ROCm versions (default: every one the release ships)"),
    "pair": Field(Table({"cuda": Text(grammar.release_version), "rocm": Text(grammar.release_version)},
                        example='{ cuda = "13.0", rocm = "7.2" }'), {}, doc="the twins' backend versions"),
    **{key: TOP[key] for key in INHERITED},
}

# What a team's [compat] table may override, with the grammar of each value (they reach Dockerfiles,
# tags and URLs exactly as the shipped facts do).
_NOTES = Texts(grammar.note)
# every backend's facts but its arch list, whose grammar is the backend's (below)
_BACKEND_FACTS: dict[str, Kind] = {
    "devel_base": Text(grammar.image_reference),
    "driver_min": Text(grammar.driver_version),
    "driver_toolkit": Text(grammar.driver_version),
    "thin_wheels": Flag(),
    "layers": Texts(grammar.name),
    "platforms": Texts(grammar.platform, allow_empty=False),
    "unconfirmed": _NOTES,
    "sources": _NOTES,
    "from_index": _NOTES,
}
COMPAT = Table({
    "torch": Table(names=_minor, each=Table({
        "python": Texts(grammar.python_version, allow_empty=False),
        "cuda": VERSIONS,
        "rocm": VERSIONS,
        "torchvision": Text(grammar.release_version),
        "releases": VERSIONS,
        # what each release's artifacts say (compat check writes it from the indexes)
        "published": Table(names=grammar.release_version, each=Table({
            "date": Text(grammar.note), "requires_python": Text(grammar.note), "pypi": Text(grammar.note),
            **{package: Text(grammar.release_version) for package in COMPANION_PACKAGES},
            "pins": Table(names=grammar.note, each=Texts(grammar.pin)),
            "wheel": Text(grammar.note),
            "sources": _NOTES,
        })),
        "amd64_only": _NOTES,
        # per build ("cuda 12.9"), the archs this release's wheels carry (compat check reads them from the wheels)
        "arch_lists": Table(names=grammar.note, each=Table({
            "archs": Texts(grammar.gpu_arch), "arm64_archs": Texts(grammar.cuda_arch),
            "release": Text(grammar.release_version), "sources": _NOTES,
        })),
        "not_built": Table(names=grammar.note, each=Text(grammar.note)),  # build -> the source that says so
        "unconfirmed": _NOTES,
        "sources": _NOTES,
        "from_index": _NOTES,
    })),
    "cuda": Table(names=grammar.release_version, each=Table({
        **_BACKEND_FACTS, "archs": Texts(grammar.cuda_arch, allow_empty=False), "arm64_archs": Texts(grammar.cuda_arch)})),
    "rocm": Table(names=grammar.release_version, each=Table({
        **_BACKEND_FACTS, "archs": Texts(grammar.rocm_arch, allow_empty=False), "layout": Text(grammar.name)})),
    "rocm_layouts": Table(names=grammar.name, each=Table({
        "device": Texts(grammar.distribution_template, allow_empty=False),
        "extras_of": Text(lambda value: None if value in ("rocm", "torch") else 'rocm or torch'),
        "all_extra": Text(grammar.name),
        "arch_extra": Text(grammar.distribution_template),
        "companion_device": Table(names=grammar.name, each=Texts(grammar.distribution_template, allow_empty=False)),
        "index": Text(grammar.http_url),
        "local": Text(grammar.local_template),
        "unconfirmed": _NOTES,
        "sources": _NOTES,
    })),
    "installers": Table({"uv": Text(grammar.package_version), "sources": _NOTES}),
    "families": Table(names=grammar.name, each=Table({
        "bundles": Texts(grammar.bundle, allow_empty=False), "products": _NOTES, "therock": Text(grammar.note), "sources": _NOTES})),
    "wheel_index": Table({
        "url": Text(grammar.http_url),
        "channels": Table({channel: Text(grammar.channel_path) for channel in CHANNELS}),
        "source": Text(grammar.note),
    }),
    "archs": Table({"cuda": Texts(grammar.cuda_arch, allow_empty=False), "sources": _NOTES}),
    # A gfx target the shipped table lacks (a new GPU a team's own source build targets).
    "gfx": Table(names=grammar.rocm_arch, each=Table({
        "family": Text(grammar.note), "products": _NOTES, "sdk_rocm": VERSIONS, "amdgpu_family": Text(grammar.note),
        "unconfirmed": _NOTES, "sources": _NOTES})),
    "os_python": Table(names=grammar.os_name, each=Text(grammar.python_version)),
})
