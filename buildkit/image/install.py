"""torch's install inside an image build. It runs INSIDE the build: standard library and pip only.

The rendered Dockerfile mounts this file from the build context (it never reaches a layer). The plan it
carries out is buildkit/core/install_plan.py's, written next to it as torch-install.json:

    python /buildkit/install.py resolve PLAN OUT
        resolves torch and its companions once, on the backend's wheel index only (pip's resolver, metadata
        only), and writes OUT/<layer>.json: each layer's share of the resolution, exact versions.
    python /buildkit/install.py layer OUT/<layer>.json
        downloads that layer's wheels from the same index, refuses any wheel or layer larger than
        max_layer_size (before anything is installed, let alone pushed), installs them without
        resolving again, and, for torch's layer, proves the backend, trims a fat wheel's unused archs and
        freezes torch as the constraint of every later install.
    python /buildkit/install.py check-backend cuda|rocm VERSION
        the backend check on its own.

Sizes are the wheels' own: a registry stores a layer compressed, about the size of the wheels it came
from, and that is what a registry's layer limit (GHCR: 10 GB) applies to.

Each command exits non-zero with one line saying what is wrong: the line `buildkit build` reports as the
failing step's reason.
"""

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

CONSTRAINT = os.path.join(sys.prefix, "torch-constraint.txt")  # the venv: /opt/venv/torch-constraint.txt
TORCH_LAYER = "torch"
DEPENDENCIES = "dependencies"
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
USAGE = ("usage: install.py resolve PLAN OUT | install.py layer LAYER.json | "
         "install.py check-backend cuda|rocm VERSION")


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
    result = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *arguments],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    if result.returncode != 0:
        lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("ERROR")] or lines[-1:] or ["(no output)"]
        print(result.stdout, file=sys.stderr)
        sys.exit(f"{what} failed: {errors[-1]}")
    return result.stdout


def index_arguments(index_url, pre):
    # the backend's index only: a missing wheel fails instead of pip falling back to PyPI's other backend
    return ["--index-url", os.environ.get("TORCH_INDEX_URL") or index_url, *(["--pre"] if pre else [])]


# --- resolve ----------------------------------------------------------------------------------------------


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


def with_extras(requirement, name, drop, add):
    """`requirement` on `name` with the extra `drop` replaced by `add` (rocm[device-all,libraries]==7.14.* ->
    rocm[libraries,device-gfx942]==7.14.*); any other requirement unchanged."""
    found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*\[([^\]]*)\](.*)", requirement, re.DOTALL)
    if not found or canonical(found.group(1)) != canonical(name):
        return requirement
    extras = [extra.strip() for extra in found.group(2).split(",") if extra.strip() and extra.strip() != drop]
    extras += [extra for extra in add if extra not in extras]
    return f"{found.group(1)}[{','.join(extras)}]{found.group(3)}"


def resolution(plan, index):
    """Every distribution the install needs, exact. A narrowed thin torch is resolved without its own
    requirement on every device package: its companions and it are read with --no-deps, and what they
    require is resolved with that requirement's device-all extra replaced by the image's archs' extras."""
    narrowing = plan["narrowing"]
    if narrowing is None:
        return [(name, version) for name, version, _ in report(plan["requirements"], index)]
    direct = report(plan["requirements"], index, no_deps=True)
    names = {canonical(name) for name, _, _ in direct}
    wanted = []
    for _, _, requires in direct:
        for requirement in requires:
            found = _NAME_RE.match(requirement.strip())
            if found is None or canonical(found.group()) in names:  # torchvision's own requirement on torch
                continue
            wanted.append(with_extras(requirement, narrowing["requirement"], narrowing["drop"], narrowing["add"]))
    closure = report(wanted, index) if wanted else []
    return [(name, version) for name, version, _ in direct] + [(name, version) for name, version, _ in closure]


def resolve(plan_path, out):
    with open(plan_path, encoding="utf-8") as handle:
        plan = json.load(handle)
    index = index_arguments(plan["index_url"], plan["pre"])
    owner = {canonical(package): layer["name"] for layer in plan["layers"] for package in layer["packages"]}
    shares = {layer["name"]: [] for layer in plan["layers"]}
    for name, version in sorted(set(resolution(plan, index))):
        shares[owner.get(canonical(name), DEPENDENCIES)].append(f"{name}=={version}")
    os.makedirs(out, exist_ok=True)
    for name, pins in shares.items():
        layer = {"name": name, "packages": pins, "index_url": plan["index_url"], "pre": plan["pre"],
                 "max_layer_size": plan["max_layer_size"]}
        if name == TORCH_LAYER:
            layer |= {"backend": plan["backend"], "backend_version": plan["backend_version"],
                      "narrowing": plan["narrowing"], "trim": plan["trim"]}
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


def narrow_metadata(narrowing):
    """Drop the device-all extra from the installed torch's requirement on the device code: pip and uv walk
    an installed package's requirements whenever they resolve against it, and would otherwise install
    every gfx target's device package at the next `pip install`."""
    distribution = importlib.metadata.distribution("torch")
    metadata = next(str(f.locate()) for f in distribution.files or () if f.name == "METADATA" and f.parent.name.endswith(".dist-info"))
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
    print(f"torch: its requirement on {narrowing['requirement']} no longer names {narrowing['drop']} "
          f"(this image carries {', '.join(narrowing['add'])})")


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


def freeze_torch():
    with open(CONSTRAINT, "w", encoding="utf-8") as handle:
        handle.write(f"torch=={importlib.metadata.version('torch')}\n")


def install_layer(path):
    with open(path, encoding="utf-8") as handle:
        layer = json.load(handle)
    if not layer["packages"]:
        print(f"layer {layer['name']}: nothing to install")
        return
    index = index_arguments(layer["index_url"], layer["pre"])
    folder = tempfile.mkdtemp(prefix="buildkit-wheels-")
    try:
        pip(["download", "--no-deps", "--quiet", "--dest", folder, *index, *layer["packages"]], f"downloading {layer['name']}")
        files = sorted(os.path.join(folder, name) for name in os.listdir(folder))
        total = check_sizes(layer, files)
        # --no-deps: the resolution is already exact; the index stays for building an sdist's build backend
        pip(["install", "--no-deps", "--quiet", *index, *files], f"installing {layer['name']}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"layer {layer['name']}: {', '.join(layer['packages'])} ({size_text(total)} of wheels)")
    if layer["name"] == TORCH_LAYER:
        if layer["narrowing"]:
            narrow_metadata(layer["narrowing"])
        check_backend(layer["backend"], layer["backend_version"])
        if layer["trim"]:
            trim_archs(layer["trim"], os.path.dirname(importlib.util.find_spec("torch").origin))
        freeze_torch()


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
    elif len(argv) == 2 and argv[0] == "layer":
        install_layer(argv[1])
    elif len(argv) == 3 and argv[0] == "check-backend" and argv[1] in ("cuda", "rocm"):
        check_backend(argv[1], argv[2])
    else:
        sys.exit(USAGE)


if __name__ == "__main__":
    main(sys.argv[1:])
