"""The matrix: schema, layering (`extends`), validation and the resolved, frozen Matrix.

Input is a list of layers, each the parsed TOML of one file, base first (the loader follows `extends`).
Layers merge key by key: tables merge, arrays replace, except `[[torch]]` entries, which merge by their
`version` so a team can change one stack of the default matrix or add its own. Validation collects every
problem, each naming its file, key path and what was expected, before anything is built.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from buildkit.core import grammar
from buildkit.core.compat import BACKENDS, Compat, compat_from_data, merge_overrides
from buildkit.errors import Problem, UserError

SCHEMA_VERSION = 1
CHANNELS = ("release", "test", "nightly")
SELECTOR_KEYS = ("torch", "python", "backend", "backend_version", "flavor", "vendor", "id")
_GLOB_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-*?[]!")

STACK_KEYS = {
    "version", "cuda", "rocm", "python", "flavors", "companions", "packages", "os_packages", "archs", "pair",
    "channel",
}
# Keys a [[torch]] entry inherits from the top level when it does not set them.
INHERITED_KEYS = ("python", "flavors", "companions", "packages", "os_packages", "archs", "channel")
TOP_KEYS = {
    "schema", "extends", "registry", "repository", "tag_prefix", "source", "wheel_index", "runtime_base", "source_runtime_base",
    "template_dir", "user", "run_as_root", "include", "exclude", "compat", "torch",
    *INHERITED_KEYS,
}


@dataclass(frozen=True)
class Layer:
    """One matrix file, parsed. `template_dir` is already resolved against the file's folder."""

    path: str
    data: Mapping[str, Any]
    template_dir: str | None = None


@dataclass(frozen=True)
class Rule:
    """An include/exclude rule or a --select filter: every key's glob must match the target."""

    criteria: tuple[tuple[str, str], ...]

    def matches(self, facts: Mapping[str, str]) -> bool:
        return all(fnmatch.fnmatchcase(facts[key], pattern) for key, pattern in self.criteria)

    def could_match(self, partial: Mapping[str, str]) -> bool:
        """Whether something described only by `partial` facts may match (unknown keys do not rule it out)."""
        return all(fnmatch.fnmatchcase(partial[key], pattern) for key, pattern in self.criteria if key in partial)

    def __str__(self) -> str:
        return ",".join(f"{key}={pattern}" for key, pattern in self.criteria)


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
    origin: str  # "file torch[i]" for messages


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
    template_dirs: tuple[str, ...]  # searched in order, before the built-in templates
    user: User | None  # None: the image keeps running as root
    stacks: tuple[Stack, ...]
    include: tuple[Rule, ...]
    exclude: tuple[Rule, ...]
    compat: Compat
    compat_overridden: bool = False


# --- layering ---------------------------------------------------------------------------------------------


def _merge_stacks(
    base: list[dict[str, Any]], child: list[Any], origins: dict[int, str], path: str, duplicates: list[Problem]
) -> list[dict[str, Any]]:
    merged = [dict(entry) for entry in base]
    by_version = {entry.get("version"): index for index, entry in enumerate(merged)}
    in_this_file: set[Any] = set()
    for position, entry in enumerate(child):
        label = f"{path} torch[{position}]"
        if not isinstance(entry, Mapping):
            merged.append({"__invalid__": entry})
            origins[len(merged) - 1] = label
            continue
        version = entry.get("version")
        if isinstance(version, str) and version in in_this_file:
            duplicates.append(Problem(path, f"duplicate [[torch]] entry for {version} in this file; merge the two", key=f"torch[{position}].version"))
            continue
        in_this_file.add(version if isinstance(version, str) else None)
        index = by_version.get(version) if isinstance(version, str) else None
        if index is None:
            merged.append(dict(entry))
            by_version[version] = len(merged) - 1
            origins[len(merged) - 1] = label
        else:
            merged[index].update(entry)  # a team's entry for a release the parent has: its keys win
            origins[index] = label
    return merged


def merge_layers(
    layers: list[Layer],
) -> tuple[dict[str, Any], dict[str, str], dict[int, str], list[str], list[Problem]]:
    """Fold the layers into one table; remember which file set each top-level key and each stack."""
    duplicates: list[Problem] = []
    merged: dict[str, Any] = {}
    key_origin: dict[str, str] = {}
    stack_origin: dict[int, str] = {}
    template_dirs: list[str] = []
    for layer in layers:
        for key, value in layer.data.items():
            if key == "extends":
                continue
            if key == "torch" and isinstance(value, list):
                merged["torch"] = _merge_stacks(merged.get("torch", []), value, stack_origin, layer.path, duplicates)
            elif key == "compat" and isinstance(value, Mapping) and isinstance(merged.get("compat"), Mapping):
                merged["compat"] = merge_overrides(merged["compat"], value)
            else:
                merged[key] = value
            key_origin[key] = layer.path
        if layer.template_dir:
            template_dirs.insert(0, layer.template_dir)  # the most specific file's templates win
    return merged, key_origin, stack_origin, template_dirs, duplicates


# --- validation -------------------------------------------------------------------------------------------


class _Checker:
    """Collects problems; each check returns the value when it is usable, else None."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def fail(self, where: str, key: str, message: str) -> None:
        self.problems.append(Problem(where, message, key=key))

    def string(self, value: Any, where: str, key: str, check: Callable[[str], str | None]) -> str | None:
        if not isinstance(value, str):
            self.fail(where, key, f"expected a string, got {_describe(value)}")
            return None
        expected = check(value)
        if expected:
            self.fail(where, key, f"expected {expected}, got {value!r}")
            return None
        return value

    def string_list(
        self, value: Any, where: str, key: str, check: Callable[[str], str | None], allow_empty: bool = True
    ) -> tuple[str, ...] | None:
        if not isinstance(value, list):
            self.fail(where, key, f"expected a list of strings, got {_describe(value)}")
            return None
        if not value and not allow_empty:
            self.fail(where, key, "expected at least one value, got an empty list")
            return None
        items = [self.string(item, where, f"{key}[{index}]", check) for index, item in enumerate(value)]
        seen: set[str] = set()
        for index, item in enumerate(value):
            if not isinstance(item, str):
                continue
            if item in seen:
                self.fail(where, f"{key}[{index}]", f"duplicate value {item!r}: each value may appear once")
            seen.add(item)
        if any(item is None for item in items):
            return None
        return tuple(items)  # type: ignore[arg-type]

    def unknown_keys(self, table: Mapping[str, Any], allowed: set[str], where: str, key_prefix: str) -> None:
        for key in table:
            if key not in allowed and key != "__invalid__":
                path = f"{key_prefix}.{key}" if key_prefix else key
                self.fail(where, path, f"unknown key; expected one of: {', '.join(sorted(allowed))}")


def _describe(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list", dict: "a table"}
    return names.get(type(value), type(value).__name__) + (f" ({value!r})" if isinstance(value, (int, float)) else "")


def _channel(value: str) -> str | None:
    return None if value in CHANNELS else f"one of {', '.join(CHANNELS)}"


def _runtime_base(value: str) -> str | None:
    return grammar.image_reference(value.replace("{python}", "3.12"))


def _check_rules(check: _Checker, value: Any, where: str, key: str) -> tuple[Rule, ...]:
    if not isinstance(value, list):
        check.fail(where, key, f"expected a list of tables such as {{ python = \"3.10\", backend = \"rocm\" }}, got {_describe(value)}")
        return ()
    rules = []
    for index, entry in enumerate(value):
        path = f"{key}[{index}]"
        if not isinstance(entry, Mapping) or not entry:
            check.fail(where, path, "expected a non-empty table of selector = glob, e.g. { torch = \"2.12.*\" }")
            continue
        criteria = []
        for selector, pattern in entry.items():
            if selector not in SELECTOR_KEYS:
                check.fail(where, f"{path}.{selector}", f"unknown selector; expected one of: {', '.join(SELECTOR_KEYS)}")
            elif not isinstance(pattern, str) or not pattern or not set(pattern) <= _GLOB_CHARS:
                check.fail(where, f"{path}.{selector}", f"expected a glob of letters, digits and . _ - * ? [ ], got {pattern!r}")
            else:
                criteria.append((selector, pattern))
        rules.append(Rule(tuple(criteria)))
    return tuple(rules)


def parse_selectors(values: list[str], where: str = "--select") -> Rule:
    """`--select torch=2.14.* --select python=3.12` as one rule (all must match)."""
    problems = []
    criteria = []
    for value in values:
        selector, sep, pattern = value.partition("=")
        if not sep or selector not in SELECTOR_KEYS or not pattern or not set(pattern) <= _GLOB_CHARS:
            problems.append(
                Problem(where, f"{value!r}: expected KEY=GLOB with KEY one of {', '.join(SELECTOR_KEYS)}, e.g. torch=2.14.*")
            )
        else:
            criteria.append((selector, pattern))
    if problems:
        raise UserError(problems)
    return Rule(tuple(criteria))


def _check_stack(
    check: _Checker,
    entry: Mapping[str, Any],
    defaults: Mapping[str, Any],
    compat: Compat,
    where: str,
    key: str,
    default_origin: Callable[[str], str],
) -> Stack | None:
    if "__invalid__" in entry:
        check.fail(where, key, "expected a table ([[torch]] with version = \"2.14.1\"), got a value")
        return None
    check.unknown_keys(entry, STACK_KEYS, where, key)
    if "version" not in entry:
        check.fail(where, key, 'missing "version": every [[torch]] entry names its torch release, e.g. version = "2.14.1"')
        return None
    before = len(check.problems)
    torch = check.string(entry["version"], where, f"{key}.version", grammar.release_version)
    if torch is None:
        return None
    release = compat.torch_release(torch)
    if release is None:
        known = ", ".join(sorted(compat.torch, key=lambda minor: tuple(int(p) for p in minor.split("."))))
        check.fail(
            where, f"{key}.version",
            f"torch {torch} is not in the compatibility data (known: {known}); "
            f"add [compat.torch.\"{'.'.join(torch.split('.')[:2])}\"] to your matrix to describe a custom stack",
        )
        return None

    def setting(name: str) -> tuple[Any, str, str]:
        """A stack's own value, or the top-level default it inherits (problems then point at that)."""
        if name in entry:
            return entry[name], where, f"{key}.{name}"
        return defaults[name], default_origin(name), name

    python_value, python_where, python_key = setting("python")
    pythons = check.string_list(python_value, python_where, python_key, grammar.python_version, allow_empty=False)
    for index, python in enumerate(pythons or ()):
        if python not in release.python:
            check.fail(
                python_where, f"{python_key}[{index}]",
                f"torch {release.minor} has no wheels for Python {python}; supported: {', '.join(release.python)}",
            )

    backends: dict[str, tuple[str, ...]] = {}
    for backend in BACKENDS:
        path = f"{key}.{backend}"
        versions = check.string_list(entry.get(backend, list(release.backends[backend])), where, path, grammar.release_version)
        for index, version in enumerate(versions or ()):
            if version not in release.backends[backend]:
                offered = ", ".join(release.backends[backend]) or "none"
                check.fail(
                    where, f"{path}[{index}]",
                    f"torch {release.minor} has no {backend.upper() if backend == 'cuda' else 'ROCm'} {version} wheels; "
                    f"supported: {offered}",
                )
            elif compat.backend(backend, version) is None:
                check.fail(where, f"{path}[{index}]", f"no {backend} {version} entry in the compatibility data; add [compat.{backend}.\"{version}\"]")
        backends[backend] = versions or ()

    flavors_value, flavors_where, flavors_key = setting("flavors")
    flavors = check.string_list(flavors_value, flavors_where, flavors_key, grammar.name, allow_empty=False)
    companions_value, companions_where, companions_key = setting("companions")
    companions = check.string_list(companions_value, companions_where, companions_key, grammar.name)
    for index, companion in enumerate(companions or ()):
        if release.companion_version(companion, torch) is None:
            check.fail(
                companions_where, f"{companions_key}[{index}]",
                f"no version of {companion!r} is known for torch {release.minor}; companions are built per backend "
                "(torchvision); put other packages in `packages`",
            )
    packages_value, packages_where, packages_key = setting("packages")
    packages = check.string_list(packages_value, packages_where, packages_key, grammar.requirement)
    for index, package in enumerate(packages or ()):
        if canonicalize_name(Requirement(package).name) == "torch":
            check.fail(packages_where, f"{packages_key}[{index}]", "torch is installed by buildkit from the backend's wheel index; remove it from `packages`")
    os_value, os_where, os_key = setting("os_packages")
    os_packages = check.string_list(os_value, os_where, os_key, grammar.debian_package)
    channel_value, channel_where, channel_key = setting("channel")
    channel = check.string(channel_value, channel_where, channel_key, _channel)

    archs_value, archs_where, archs_key = setting("archs")
    archs: dict[str, tuple[str, ...]] = {}
    if not isinstance(archs_value, Mapping):
        check.fail(archs_where, archs_key, f"expected a table such as {{ rocm = [\"gfx942\"] }}, got {_describe(archs_value)}")
    else:
        check.unknown_keys(archs_value, set(BACKENDS), archs_where, archs_key)
        for backend in BACKENDS:
            if backend not in archs_value:
                continue
            arch_grammar = grammar.CUDA_ARCH_RE if backend == "cuda" else grammar.ROCM_ARCH_RE
            names = check.string_list(
                archs_value[backend], archs_where, f"{archs_key}.{backend}",
                lambda value, rx=arch_grammar: None if rx.match(value) else f"a {backend} arch name",
                allow_empty=False,
            )
            if names is None:
                continue
            known = compat.known_archs[backend]
            for index, arch in enumerate(names):
                if arch.removesuffix("+PTX") not in known:
                    check.fail(
                        archs_where, f"{archs_key}.{backend}[{index}]",
                        f"unknown {backend} arch {arch!r}; known: {', '.join(known)}",
                    )
            # A wheel carries the arch list it was built with: a team can narrow it, never widen it.
            for version in backends.get(backend, ()):
                official = compat.backend(backend, version)
                if official is None:
                    continue
                extra = [arch for arch in names if arch not in official.archs and arch in known]
                if extra:
                    check.fail(
                        archs_where, f"{archs_key}.{backend}",
                        f"{', '.join(extra)} not in the {backend} {version} wheels' arch list ({', '.join(official.archs)}); "
                        "a wheel image can only narrow it",
                    )
            archs[backend] = names

    pair: dict[str, str] = {}
    pair_value = entry.get("pair", {})
    if not isinstance(pair_value, Mapping):
        check.fail(where, f"{key}.pair", f'expected a table such as {{ cuda = "13.0", rocm = "7.2" }}, got {_describe(pair_value)}')
    else:
        check.unknown_keys(pair_value, set(BACKENDS), where, f"{key}.pair")
        for backend in BACKENDS:
            chosen = pair_value.get(backend)
            if chosen is None:
                continue
            if chosen not in backends.get(backend, ()):
                check.fail(
                    where, f"{key}.pair.{backend}",
                    f"{chosen!r} is not one of this stack's {backend} versions ({', '.join(backends.get(backend, ())) or 'none'})",
                )
            else:
                pair[backend] = chosen

    if len(check.problems) > before:
        return None
    for backend in BACKENDS:
        if backend not in pair and backends[backend]:
            pair[backend] = _default_twin(compat, backend, backends[backend])
    return Stack(
        torch=torch,
        backends=backends,
        python=pythons or (),
        flavors=flavors or (),
        companions=companions or (),
        packages=packages or (),
        os_packages=os_packages or (),
        archs=archs,
        pair=pair,
        channel=channel or "release",
        origin=f"{where} {key}",
    )


def _default_twin(compat: Compat, backend: str, versions: tuple[str, ...]) -> str:
    """The newest version whose facts are confirmed, else the newest: the one the floating tags follow."""
    ordered = sorted(versions, key=Version)
    confirmed = [v for v in ordered if not compat.backend(backend, v).unconfirmed]  # type: ignore[union-attr]
    return (confirmed or ordered)[-1]


def _check_compat_overrides(check: _Checker, value: Any, where: str) -> None:
    if not isinstance(value, Mapping):
        check.fail(where, "compat", f"expected a table, got {_describe(value)}")
        return
    check.unknown_keys(value, {"torch", "cuda", "rocm", "wheel_index"}, where, "compat")
    for minor, entry in (value.get("torch") or {}).items():
        path = f"compat.torch.{minor}"
        if not isinstance(entry, Mapping):
            check.fail(where, path, "expected a table with python, cuda, rocm, torchvision")
            continue
        check.unknown_keys(entry, {"python", "cuda", "rocm", "torchvision", "unconfirmed", "sources"}, where, path)
        for list_key, rule in (("python", grammar.python_version), ("cuda", grammar.release_version), ("rocm", grammar.release_version)):
            if list_key in entry:
                check.string_list(entry[list_key], where, f"{path}.{list_key}", rule)
        if "torchvision" in entry:
            check.string(entry["torchvision"], where, f"{path}.torchvision", grammar.release_version)
    for backend in BACKENDS:
        for version, entry in (value.get(backend) or {}).items():
            path = f"compat.{backend}.{version}"
            if grammar.release_version(version) or not isinstance(entry, Mapping):
                check.fail(where, path, "expected a version-named table with archs and devel_base")
                continue
            check.unknown_keys(
                entry, {"archs", "devel_base", "driver_min", "driver_toolkit", "thin_wheels", "unconfirmed", "sources"}, where, path,
            )
            if "devel_base" in entry:
                check.string(entry["devel_base"], where, f"{path}.devel_base", grammar.image_reference)
            if "archs" in entry:
                arch_grammar = grammar.CUDA_ARCH_RE if backend == "cuda" else grammar.ROCM_ARCH_RE
                check.string_list(
                    entry["archs"], where, f"{path}.archs",
                    lambda v, rx=arch_grammar: None if rx.match(v) else f"a {backend} arch name",
                )
    if "wheel_index" in value:
        index = value["wheel_index"]
        if isinstance(index, Mapping) and "url" in index:
            check.string(index["url"], where, "compat.wheel_index.url", grammar.http_url)


def resolve_matrix(layers: list[Layer], compat_data: Mapping[str, Any]) -> Matrix:
    """Merge, validate and freeze. Raises UserError listing every problem found."""
    merged, key_origin, stack_origin, template_dirs, duplicates = merge_layers(layers)
    check = _Checker()
    check.problems.extend(duplicates)
    last = layers[-1].path if layers else "matrix"

    def where(key: str) -> str:
        return key_origin.get(key, last)

    for key in merged:
        if key not in TOP_KEYS:
            check.fail(where(key), key, f"unknown key; expected one of: {', '.join(sorted(TOP_KEYS))}")
    if merged.get("schema", SCHEMA_VERSION) != SCHEMA_VERSION:
        check.fail(where("schema"), "schema", f"this buildkit reads matrix schema {SCHEMA_VERSION}, got {merged['schema']!r}")

    overridden = "compat" in merged
    if overridden:
        _check_compat_overrides(check, merged["compat"], where("compat"))
        if isinstance(merged["compat"], Mapping):
            compat_data = merge_overrides(compat_data, merged["compat"])
    compat = compat_from_data(compat_data)

    def top_string(key: str, rule: Callable[[str], str | None], default: str | None = None) -> str:
        if key not in merged:
            if default is None:
                check.fail(last, key, 'missing; set it, or start the file with extends = "default" to inherit it')
            return default or ""
        return check.string(merged[key], where(key), key, rule) or ""

    registry = top_string("registry", grammar.registry)
    repository = top_string("repository", grammar.repository)
    tag_prefix = top_string("tag_prefix", grammar.tag_prefix, default="")
    source = top_string("source", grammar.http_url)
    wheel_index = top_string("wheel_index", grammar.http_url, default=compat.wheel_index)
    runtime_base = top_string("runtime_base", _runtime_base)
    # A wheel compiled on the ROCm devel image (Ubuntu 24.04, glibc 2.39) needs a runtime OS at least as new
    source_runtime_base = top_string("source_runtime_base", _runtime_base, default="python:{python}-slim-trixie")

    run_as_root = merged.get("run_as_root", False)
    if not isinstance(run_as_root, bool):
        check.fail(where("run_as_root"), "run_as_root", f"expected true or false, got {_describe(run_as_root)}")
    user: User | None = None
    user_value = merged.get("user", {"name": "buildkit", "uid": 1000})
    if not isinstance(user_value, Mapping):
        check.fail(where("user"), "user", f'expected a table such as {{ name = "buildkit", uid = 1000 }}, got {_describe(user_value)}')
    else:
        check.unknown_keys(user_value, {"name", "uid"}, where("user"), "user")
        user_name = check.string(user_value.get("name", ""), where("user"), "user.name", grammar.user_name)
        uid = user_value.get("uid")
        if isinstance(uid, bool) or not isinstance(uid, int) or not 1 <= uid <= 65534:
            check.fail(where("user"), "user.uid", f"expected a non-root UID from 1 to 65534, got {uid!r}")
        elif user_name and run_as_root is False:
            user = User(user_name, uid)

    defaults = {
        "python": merged.get("python", []),
        "flavors": merged.get("flavors", ["runtime"]),
        "companions": merged.get("companions", []),
        "packages": merged.get("packages", []),
        "os_packages": merged.get("os_packages", []),
        "archs": merged.get("archs", {}),
        "channel": merged.get("channel", "release"),
    }
    include = _check_rules(check, merged.get("include", []), where("include"), "include")
    exclude = _check_rules(check, merged.get("exclude", []), where("exclude"), "exclude")

    stacks: list[Stack] = []
    entries = merged.get("torch", [])
    if not isinstance(entries, list) or not entries:
        check.fail(where("torch"), "torch", 'expected at least one [[torch]] entry with version = "2.14.1"')
        entries = []
    for index, entry in enumerate(entries):
        origin = stack_origin.get(index, f"{where('torch')} torch[{index}]")
        file, _, key = origin.rpartition(" ")
        stack = _check_stack(check, entry, defaults, compat, file, key, where)
        if stack is not None:
            stacks.append(stack)

    if check.problems:
        # Stacks that inherit the same bad default would repeat its problem once each.
        raise UserError(list(dict.fromkeys(check.problems)))
    return Matrix(
        files=tuple(layer.path for layer in layers),
        registry=registry,
        repository=repository,
        tag_prefix=tag_prefix,
        source=source,
        wheel_index=wheel_index,
        runtime_base=runtime_base,
        source_runtime_base=source_runtime_base,
        template_dirs=tuple(template_dirs),
        user=user,
        stacks=tuple(stacks),
        include=include,
        exclude=exclude,
        compat=compat,
        compat_overridden=overridden,
    )
