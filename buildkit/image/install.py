"""torch's install inside an image build. It runs INSIDE the build: standard library, pip and uv only.

The rendered Dockerfile mounts this file from the build context (it never reaches a layer). The plan it
carries out is buildkit/core/install_plan.py's, written next to it as torch-install.json:

    python /buildkit/install.py resolve PLAN OUT
        resolves torch and its companions once, on the backend's wheel index only, from metadata (uv's
        resolver, which fetches metadata in parallel, when the installer is uv; else pip's), and writes
        OUT/<layer>.json: each layer's share of the resolution, exact versions. What the image's venv already
        holds (pip, uv) at the resolved version is left out: a layer never holds a second copy of it.
    python /buildkit/install.py layer OUT/<layer>.json ROOT
        downloads that layer's wheels from the same index, refuses any wheel or layer larger than
        max_layer_size (before anything is installed, let alone pushed), and installs them without resolving
        again under ROOT, as the venv's own prefix would hold them (ROOT/opt/venv/...): each layer is built in
        a stage of its own, all of them at once, and the image copies each ROOT in as one layer. torch's
        layer also narrows a thin wheel's requirement on device code, trims a fat wheel's unused archs and
        writes torch's exact build as the constraint of every later install.
        The layer is reproducible: the same wheels give the same files, byte for byte, on any day and any
        builder (every timestamp LAYER_EPOCH, bytecode compiled after it and recorded in RECORD, no record of
        the download folder). The venv keeps site-packages in a Python-neutral folder (lib/python3.X/
        site-packages is a link to it), and a layer of wheels built for any Python (`python_neutral`) gets no
        bytecode: its files are then the same under every Python, and so is its digest.
    python /buildkit/install.py check-backend cuda|rocm VERSION
        the backend check: the image runs it as soon as torch's layers are in place, before anything else is
        installed on them.
    python /buildkit/install.py packages uv|pip REQUIREMENT...
        the stack's own packages, from the build's package index (pip.conf's, which uv is given too), under
        torch's constraint.

The installer is uv (the image's own, pinned) or pip: a plan's `installer`. pip always downloads torch's
layers (uv has no download command, and a wheel's size must be known before it is installed); uv then
installs the files, compiling their bytecode in parallel.

Sizes are the wheels' own: a registry stores a layer compressed, about the size of the wheels it came
from, and that is what a registry's layer limit (GHCR: 10 GB) applies to.

Each command exits non-zero with one line saying what is wrong: the line `buildkit build` reports as the
failing step's reason.
"""

import base64
import compileall
import csv
import fnmatch
import hashlib
import importlib.metadata
import importlib.util
import io
import json
import os
import py_compile
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile

CONSTRAINT = "torch-constraint.txt"  # in the venv: /opt/venv/torch-constraint.txt
TORCH_LAYER = "torch"
DEPENDENCIES = "dependencies"
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
USAGE = ("usage: install.py resolve PLAN OUT | install.py layer LAYER.json ROOT | install.py packages uv|pip REQUIREMENT... | "
         "install.py check-backend cuda|rocm VERSION")
# uv's downloads and built wheels go in the build's pip cache mount: no layer holds them
UV_CACHE = "/root/.cache/pip/uv"
# Every file of a layer carries this time (1980-01-01, the earliest a wheel's zip can record): a layer rebuilt
# from the same wheels on another day is the same blob. Not SOURCE_DATE_EPOCH, which a nightly sets to its own
# day or commit: the layer of an unchanged wheel must not change with it.
LAYER_EPOCH = 315532800
# What installers write about the install itself rather than the package: the download folder (direct_url.json,
# as if installed from a file) and the wheel file's own timestamp (uv's). They would differ on every build.
INSTALL_RECORDS = ("direct_url.json", "uv_cache.json")
ANY_PYTHON_SUFFIX = "-any-python"  # core/install_plan.py's: the layer of a layer's files that no Python changes


def canonical(name):
    """PEP 503's normalized name: rocm_sdk_core and rocm-sdk-core are one distribution."""
    return re.sub(r"[-_.]+", "-", name).lower()


def size_text(size):
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def pip(arguments, what):
    """Run pip; on failure exit with its last error line and what we were doing."""
    return run([sys.executable, "-m", "pip", "--disable-pip-version-check", *arguments], what)


def uv(command, arguments, what, environment=None):
    """Run the venv's uv (`uv pip COMMAND`) on this venv's Python."""
    argv = [os.path.join(os.path.dirname(sys.executable), "uv"), "pip", command, "--python", sys.executable, *arguments]
    return run(argv, what, {**os.environ, "UV_CACHE_DIR": UV_CACHE, "UV_LINK_MODE": "copy", "UV_COMPILE_BYTECODE": "1",
                            "UV_NO_PROGRESS": "1", **(environment or {})})


def run(command, what, environment=None):
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                            env=environment)
    if result.returncode != 0:
        lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith(("ERROR", "error:"))] or lines[-1:] or ["(no output)"]
        print(result.stdout, file=sys.stderr)
        sys.exit(f"{what} failed: {errors[-1]}")
    return result.stdout


def torch_index(index_url):
    # the backend's index only: a missing wheel fails instead of pip falling back to PyPI's other backend
    return os.environ.get("TORCH_INDEX_URL") or index_url


def index_arguments(index_url, pre):
    return ["--index-url", torch_index(index_url), *(["--pre"] if pre else [])]


def uv_index_arguments(config_path, cert):
    """pip's configuration as uv's options: uv reads no pip.conf, and a private index (its credentials in its
    URL) and a CA bundle arrive as the build's pip.conf secret. pip looks in every index at once; so does uv's
    unsafe-best-match strategy."""
    import configparser

    parser = configparser.RawConfigParser()
    if config_path:
        parser.read(config_path)
    value = {}  # type: dict[str, str]
    for section in ("global", "install"):
        if parser.has_section(section):
            value.update(parser.items(section))
    arguments = ["--index-strategy", "unsafe-best-match"]
    for url in value.get("index-url", "").split()[:1]:
        arguments += ["--index-url", url]
    for url in value.get("extra-index-url", "").split():
        arguments += ["--extra-index-url", url]
    for location in value.get("find-links", "").split():
        arguments += ["--find-links", location]
    for host in value.get("trusted-host", "").split():
        arguments += ["--allow-insecure-host", host]
    bundle = cert or value.get("cert", "")
    return arguments, ({"SSL_CERT_FILE": bundle} if bundle else {})


def site_packages(root=""):
    """The venv's site-packages folder as it lies under `root` ("": the venv itself)."""
    return root + sysconfig.get_path("purelib")


def layer_site(root):
    """Where a layer's site-packages lie under `root`: the folder the venv's site-packages link names (the
    same for every Python), or site-packages itself in a venv without the link."""
    return root + os.path.realpath(site_packages())


# --- resolve ----------------------------------------------------------------------------------------------


def venv_distributions():
    """What the image's venv holds before torch (pip, uv): canonical name -> version."""
    return {canonical(d.metadata["Name"]): d.version for d in importlib.metadata.distributions(path=[site_packages()])}


def report(requirements, index, no_deps=False):
    """pip's resolution of `requirements` as [(name, version, requires_dist)], from metadata only."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "report.json")
        pip(["install", "--dry-run", "--ignore-installed", "--quiet", "--report", path, *index,
             *(["--no-deps"] if no_deps else []), *requirements], "resolving " + " ".join(requirements))
        with open(path, encoding="utf-8") as handle:
            installs = json.load(handle)["install"]
    return [(item["metadata"]["name"], item["metadata"]["version"], item["metadata"].get("requires_dist") or [])
            for item in installs]


_PIN_RE = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(\S+)")


def uv_compile(requirements, index_url, pre):
    """uv's resolution of `requirements` as [(name, version)]: the backend's index first, pip.conf's other
    sources after it as pip would look in them, metadata fetched in parallel."""
    sources, environment = uv_index_arguments(os.environ.get("PIP_CONFIG_FILE"), os.environ.get("PIP_CERT"))
    sources = [argument for pair in zip(sources[::2], sources[1::2]) if pair[0] != "--index-url" for argument in pair]
    with tempfile.TemporaryDirectory() as folder:
        listed, out = os.path.join(folder, "requirements.in"), os.path.join(folder, "requirements.txt")
        with open(listed, "w", encoding="utf-8") as handle:
            handle.write("\n".join(requirements) + "\n")
        uv("compile", [*sources, "--index-url", torch_index(index_url), *(["--prerelease", "allow"] if pre else []),
                       "--no-header", "--no-annotate", "--quiet", "--output-file", out, listed],
           "resolving " + " ".join(requirements), environment)
        with open(out, encoding="utf-8") as handle:
            pins = [_PIN_RE.match(line.strip()) for line in handle if line.strip() and not line.startswith(("#", " "))]
    if not all(pins):
        sys.exit("resolving: uv wrote a requirement that is not an exact pin")
    return [(found.group(1), found.group(2)) for found in pins if found]


def with_extras(requirement, name, drop, add):
    """`requirement` on `name` with the extra `drop` replaced by `add` (rocm[device-all,libraries]==7.14.* ->
    rocm[libraries,device-gfx942]==7.14.*); any other requirement unchanged."""
    found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*\[([^\]]*)\](.*)", requirement, re.DOTALL)
    if not found or canonical(found.group(1)) != canonical(name):
        return requirement
    extras = [extra.strip() for extra in found.group(2).split(",") if extra.strip() and extra.strip() != drop]
    extras += [extra for extra in add if extra not in extras]
    return f"{found.group(1)}[{','.join(extras)}]{found.group(3)}"


def resolution(plan):
    """Every distribution the install needs, exact. A narrowed thin torch is resolved without its own
    requirement on every device package: its companions and it are read with --no-deps, and what they
    require is resolved with that requirement's device-all extra replaced by the image's archs' extras."""
    index = index_arguments(plan["index_url"], plan["pre"])

    def closure(requirements):
        if plan["installer"] == "uv":
            return uv_compile(requirements, plan["index_url"], plan["pre"])
        return [(name, version) for name, version, _ in report(requirements, index)]

    narrowing = plan["narrowing"]
    if narrowing is None:
        return closure(plan["requirements"])
    direct = report(plan["requirements"], index, no_deps=True)
    names = {canonical(name) for name, _, _ in direct}
    wanted = []
    for _, _, requires in direct:
        for requirement in requires:
            found = _NAME_RE.match(requirement.strip())
            if found is None or canonical(found.group()) in names:  # torchvision's own requirement on torch
                continue
            wanted.append(with_extras(requirement, narrowing["requirement"], narrowing["drop"], narrowing["add"]))
    return [(name, version) for name, version, _ in direct] + (closure(wanted) if wanted else [])


def resolve(plan_path, out):
    with open(plan_path, encoding="utf-8") as handle:
        plan = json.load(handle)
    installed = venv_distributions()
    owner = {canonical(package): layer["name"] for layer in plan["layers"] for package in layer["packages"] if "*" not in package}
    patterns = [(package, layer["name"]) for layer in plan["layers"] for package in layer["packages"] if "*" in package]
    shares = {layer["name"]: [] for layer in plan["layers"]}  # type: dict[str, list[str]]
    for name, version in sorted(set(resolution(plan))):
        held = installed.get(canonical(name))
        if held == version:
            continue  # the venv has it already: a layer holding it again would put a second copy over it
        if held is not None:
            sys.exit(f"resolving: torch's install needs {name}=={version}, and the image's venv holds {name} {held}, which "
                     "its layers cannot replace (each is copied over the venv): pin the venv's tools to match")
        matched = next((layer for pattern, layer in patterns if fnmatch.fnmatchcase(canonical(name), pattern)), DEPENDENCIES)
        shares[owner.get(canonical(name), matched)].append(f"{name}=={version}")
    os.makedirs(out, exist_ok=True)
    planned = {layer["name"]: layer for layer in plan["layers"]}
    for name, pins in shares.items():
        layer = {"name": name, "packages": pins, "index_url": plan["index_url"], "pre": plan["pre"],
                 "max_layer_size": plan["max_layer_size"], "installer": plan["installer"],
                 "python_neutral": planned[name]["python_neutral"],
                 "any_python": name + ANY_PYTHON_SUFFIX if planned[name]["any_python"] else ""}
        if name == TORCH_LAYER:
            # what the torch layer does is the same for every family image of a stack (their device code comes
            # after it), so its share of the plan names no arch: the layer is built once and shared
            narrowing = plan["narrowing"] and {key: plan["narrowing"][key] for key in ("requirement", "drop")}
            layer |= {"narrowing": narrowing, "trim": plan["trim"]}
        with open(os.path.join(out, f"{name}.json"), "w", encoding="utf-8") as handle:
            json.dump(layer, handle, indent=1, sort_keys=True)
        print(f"resolve: {name}: {', '.join(pins) or 'nothing'}")


# --- one layer --------------------------------------------------------------------------------------------


def check_sizes(layer, files):
    """Exit before installing anything when a wheel, or the layer, is larger than max_layer_size."""
    limit = layer["max_layer_size"]
    sizes = sorted(((os.path.getsize(path), os.path.basename(path)) for path in files), reverse=True)
    for size, name in sizes:
        if size > limit:
            sys.exit(f"{name} is {size_text(size)}, more than max_layer_size ({size_text(limit)}): that one package would be a "
                     "layer the registry refuses; raise max_layer_size where the registry takes larger layers, or leave "
                     "out what needs the package (a gfx target's device code: narrow the image's archs or families)")
    total = sum(size for size, _ in sizes)
    if total > limit:
        largest = ", ".join(f"{name} {size_text(size)}" for size, name in sizes[:3])
        sys.exit(f"layer {layer['name']} would hold {size_text(total)} of wheels, more than max_layer_size ({size_text(limit)}); "
                 f"largest: {largest}: give the largest a layer of its own (the backend version's `layers` in [compat])")
    return total


def installed_torch(root):
    """The torch distribution installed under `root`."""
    found = list(importlib.metadata.distributions(name="torch", path=[layer_site(root)]))
    if not found:
        sys.exit(f"torch's layer holds no torch under {layer_site(root)}")
    return found[0]


def narrow_metadata(narrowing, torch):
    """Drop the device-all extra from the installed torch's requirement on the device code: pip and uv walk
    an installed package's requirements whenever they resolve against it, and would otherwise install
    every gfx target's device package at the next `pip install`."""
    metadata = next(str(f.locate()) for f in torch.files or () if f.name == "METADATA" and f.parent.name.endswith(".dist-info"))
    with open(metadata, encoding="utf-8") as handle:
        lines = handle.read().split("\n")
    changed = [with_extras(line[len("Requires-Dist: "):], narrowing["requirement"], narrowing["drop"], ())
               if line.startswith("Requires-Dist: ") else None for line in lines]
    edited = [f"Requires-Dist: {new}" if new is not None else old for old, new in zip(lines, changed)]
    if edited == lines:
        sys.exit(f"torch's metadata has no requirement on {narrowing['requirement']}[{narrowing['drop']}] to narrow: "
                 "the index is not laid out as its layout says (compat.toml [rocm_layouts])")
    with open(metadata, "w", encoding="utf-8") as handle:
        handle.write("\n".join(edited))
    print(f"torch: its requirement on {narrowing['requirement']} no longer names {narrowing['drop']}: "
          "the image carries the device code of its own archs only")


def trim_archs(trim, root):
    """A fat ROCm wheel bundles its libraries' GPU code for every arch: delete the files below torch's package
    folder `root` naming an arch the image does not declare (the rule and its sources: buildkit/core/trim.py),
    and fail if none matched (a wheel laid out otherwise would make the image's trimmed-archs label lie)."""
    removed, kept = re.compile(trim["removed"]), re.compile(trim["kept"])
    files = [os.path.join(top, name) for folder in trim["library_dirs"] for top, _, names in os.walk(os.path.join(root, folder))
             for name in names]
    gone = [path for path in files if removed.search(os.path.relpath(path, root)) and not kept.search(os.path.relpath(path, root))]
    if not gone:
        sys.exit(f"arch trim: no file of the ROCm libraries bundled with torch names {' '.join(trim['removed_archs'])}; "
                 "the wheel is not laid out as buildkit/core/trim.py expects")
    size = sum(os.lstat(path).st_size for path in gone)
    for path in gone:
        os.remove(path)
    print(f"arch trim: removed {len(gone)} files, {size} bytes of GPU code for {' '.join(trim['removed_archs'])} "
          f"(kept {' '.join(trim['kept_archs'])})")


def install_files(layer, files, root):
    """Install downloaded wheels (and sdists) under `root` as the venv's prefix holds them, without resolving
    again: --no-deps, the resolution is exact. uv takes the wheels (unpacked once, hard-linked into place); an
    sdist (the rocm meta package on a real index) is pip's, which builds it with a build backend from the index.
    No bytecode yet: it is compiled once the files have their final timestamps (reproducible). The files go to
    the venv's Python-neutral site-packages folder where it has one."""
    prefix = root + sys.prefix
    wheels = [path for path in files if path.endswith(".whl")]
    if layer["installer"] == "uv" and wheels:
        # no cache: the files are hard-linked from uv's scratch copy on this filesystem, not copied out of a cache mount
        uv("install", ["--no-deps", "--no-index", "--no-cache", "--prefix", prefix, *wheels], f"installing {layer['name']}",
           {"UV_LINK_MODE": "hardlink", "UV_COMPILE_BYTECODE": "0"})
        files = [path for path in files if path not in wheels]
    if files:
        pip(["install", "--no-deps", "--ignore-installed", "--no-compile", "--quiet", "--prefix", prefix,
             *index_arguments(layer["index_url"], layer["pre"]), *files], f"installing {layer['name']}")
    lock = os.path.join(prefix, ".lock")  # uv's lock on the environment it installed into, not part of it
    if os.path.exists(lock):
        os.remove(lock)
    installed, site = site_packages(root), layer_site(root)
    if installed != site and os.path.isdir(installed):
        os.makedirs(os.path.dirname(site), exist_ok=True)
        os.rename(installed, site)
        if not os.listdir(os.path.dirname(installed)):
            os.rmdir(os.path.dirname(installed))  # lib/python3.X: in the image, the venv's own link stands there


def built_for_any_python(path):
    """Whether a downloaded file is a wheel whose ABI tags are all `none` (nvidia_cublas-…-py3-none-manylinux…):
    no extension module, no file that depends on the Python it is installed for."""
    name = os.path.basename(path)
    return name.endswith(".whl") and all(abi == "none" for abi in name[:-4].split("-")[-2].split("."))


def _records(site):
    if not os.path.isdir(site):  # a layer of scripts or data alone
        return []
    return sorted(os.path.join(site, name, "RECORD") for name in os.listdir(site) if name.endswith(".dist-info"))


def _read_record(path):
    with open(path, encoding="utf-8", newline="") as handle:
        return [row for row in csv.reader(handle) if row]


def _write_record(path, rows):
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows(rows)
    with open(path, "w", encoding="utf-8", newline="") as handle:
        handle.write(text.getvalue())


def forget_install_records(site):
    """Remove what the installer wrote about this install (INSTALL_RECORDS) from each dist-info and its RECORD:
    the package reads as installed from its index, which it was."""
    for record in _records(site):
        folder = os.path.dirname(record)
        gone = {f"{os.path.basename(folder)}/{name}" for name in INSTALL_RECORDS if os.path.exists(os.path.join(folder, name))}
        for path in gone:
            os.remove(os.path.join(site, path))
        if gone:
            _write_record(record, [row for row in _read_record(record) if row[0] not in gone])


def compile_bytecode(root, site):
    """Bytecode for every module of the layer, as pip and uv compile it (timestamp pycs), naming each source by
    its path in the image rather than under `root`; then each pyc in its distribution's RECORD, as installers
    list them, so an uninstall removes it too. The same sources at the same timestamps give the same pycs."""
    if os.path.isdir(site):
        compileall.compile_dir(site, quiet=2, workers=0, stripdir=root,
                               invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    for record in _records(site):
        rows = _read_record(record)
        listed = {row[0] for row in rows}
        for source in sorted(path for path in listed if path.endswith(".py")):
            compiled = importlib.util.cache_from_source(os.path.join(site, source))
            relative = os.path.relpath(compiled, site)
            if relative not in listed and os.path.isfile(compiled):
                with open(compiled, "rb") as handle:
                    data = handle.read()
                rows.append([relative, f"sha256={record_digest(data)}", str(len(data))])
        _write_record(record, rows)


def record_digest(data):
    """A RECORD's hash: sha256, urlsafe base64 without padding (PEP 376, PEP 427)."""
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def fix_timestamps(root):
    """Every file and folder below `root` at LAYER_EPOCH (links themselves, not what they name)."""
    for top, folders, files in os.walk(root, topdown=False):
        for name in files + folders:
            os.utime(os.path.join(top, name), (LAYER_EPOCH, LAYER_EPOCH), follow_symlinks=False)


def install_layer(path, root):
    with open(path, encoding="utf-8") as handle:
        layer = json.load(handle)
    share = os.path.join(os.path.dirname(root.rstrip("/")), layer["any_python"]) if layer.get("any_python") else ""
    for folder in filter(None, (root, share)):
        os.makedirs(folder, exist_ok=True)  # the image copies each in: an empty one is an empty layer
    if not layer["packages"]:
        print(f"layer {layer['name']}: nothing to install")
        return
    folder = tempfile.mkdtemp(prefix="buildkit-wheels-")
    try:
        # no pip cache: the layer's stage is built once and BuildKit keeps it, so a cache would only copy the wheels
        pip(["download", "--no-deps", "--no-cache-dir", "--quiet", "--dest", folder, *index_arguments(layer["index_url"], layer["pre"]),
             *layer["packages"]],
            f"downloading {layer['name']}")
        files = sorted(os.path.join(folder, name) for name in os.listdir(folder))
        total = check_sizes(layer, files)
        install_files(layer, files, root)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"layer {layer['name']}: {', '.join(layer['packages'])} ({size_text(total)} of wheels)")
    site = layer_site(root)
    if layer["name"] == TORCH_LAYER:
        torch = installed_torch(root)
        if layer["narrowing"]:
            narrow_metadata(layer["narrowing"], torch)
        if layer["trim"]:
            trim_archs(layer["trim"], os.path.join(site, "torch"))
        with open(root + os.path.join(sys.prefix, CONSTRAINT), "w", encoding="utf-8") as handle:
            handle.write(f"torch=={torch.version}\n")
    forget_install_records(site)
    fix_timestamps(root)  # before the bytecode, which records its sources' timestamps
    per_python = [os.path.basename(path) for path in files if not built_for_any_python(path)]
    if layer["python_neutral"] and not per_python:
        print(f"layer {layer['name']}: wheels built for any Python, installed without bytecode: the same files under every Python")
    else:
        if layer["python_neutral"]:
            print(f"layer {layer['name']}: {', '.join(per_python)} built for one Python: the layer is this Python's own")
        compile_bytecode(root, site)
    if share:
        moved = move_any_python_files(site, layer_site(share))
        print(f"layer {layer['name']}: {moved} files no Python build changes moved to layer {layer['any_python']}")
        fix_timestamps(share)
    fix_timestamps(root)  # what the bytecode and the moves changed


def is_python_specific(relative):
    """Whether a file of a wheel built for one Python may differ in that wheel's build for another Python: its
    shared objects (extension modules and the libraries built with them), its bytecode and its distribution's
    metadata. Every other file (sources, headers, tools) is the same in each build."""
    parts = relative.split(os.sep)
    name = parts[-1]
    return (parts[0].endswith(".dist-info") or "__pycache__" in parts or name.endswith((".so", ".pyc"))
            or ".so." in name)


def move_any_python_files(site, share):
    """Move the files of `site` no Python build changes to the same paths under `share` (their bytecode stays:
    it names its Python); returns how many moved. Timestamps go with them."""
    moved = 0
    for top, _folders, files in os.walk(site):
        for name in sorted(files):
            path = os.path.join(top, name)
            relative = os.path.relpath(path, site)
            if os.path.islink(path) or is_python_specific(relative):
                continue
            target = os.path.join(share, relative)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.rename(path, target)
            moved += 1
    return moved


# --- the stack's packages -------------------------------------------------------------------------------


def install_packages(installer, requirements):
    """The stack's packages from the default index, under torch's constraint (PIP_CONSTRAINT, UV_CONSTRAINT)."""
    if installer == "uv":
        arguments, environment = uv_index_arguments(os.environ.get("PIP_CONFIG_FILE"), os.environ.get("PIP_CERT"))
        uv("install", [*arguments, *requirements], "installing " + " ".join(requirements), environment)
    else:
        pip(["install", "--quiet", *requirements], "installing " + " ".join(requirements))
    print(f"packages: {' '.join(requirements)} ({installer})")


# --- the backend ------------------------------------------------------------------------------------------


def check_backend(backend, version):
    """Exit with a message unless the installed torch is the `backend` `version` build (major.minor)."""
    try:
        import torch
    except Exception as error:  # a broken wheel or a missing library: say so, not a traceback
        sys.exit(f"torch does not import after its install: {type(error).__name__}: {error}")
    built = torch.version.cuda if backend == "cuda" else torch.version.hip
    other = torch.version.hip if backend == "cuda" else torch.version.cuda
    label = {"cuda": "CUDA", "rocm": "ROCm"}[backend]
    if other is None and ".".join((built or "").split(".")[:2]) == version:
        return
    sys.exit(f"torch {torch.__version__} is not a {label} {version} build "
             f"(torch.version.cuda={torch.version.cuda}, hip={torch.version.hip})")


def main(argv):
    if len(argv) == 3 and argv[0] == "resolve":
        resolve(argv[1], argv[2])
    elif len(argv) == 3 and argv[0] == "layer":
        install_layer(argv[1], argv[2])
    elif len(argv) >= 3 and argv[0] == "packages" and argv[1] in ("uv", "pip"):
        install_packages(argv[1], argv[2:])
    elif len(argv) == 3 and argv[0] == "check-backend" and argv[1] in ("cuda", "rocm"):
        check_backend(argv[1], argv[2])
    else:
        sys.exit(USAGE)


if __name__ == "__main__":
    main(sys.argv[1:])
