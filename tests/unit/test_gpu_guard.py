"""The GPU guard (buildkit/image/gpu_guard.py) on fixture host trees, and installed into a real venv.

The trees are testkit.hosts' (plain files where a host has device nodes); the guard reads them below a root,
as it reads / inside a container. Real containers with mapped device nodes: tests/integration/test_gpu_guard_containers.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from dataclasses import replace

import pytest

from buildkit.adapters.files.matrix import load_matrix
from buildkit.core.render.guard import guard_config
from buildkit.core.targets.plan import Twin, expand
from buildkit.image import gpu_guard
from testkit import hosts

PLAN = expand(load_matrix(None))
CUDA = next(t for t in PLAN.targets if t.id == "2.14.1-cuda13.0-py3.12-runtime")
FAMILIES = {t.family: t for t in PLAN.targets if t.pair == CUDA.pair and t.vendor == "amd"}  # one ROCm image per GPU family
ROCM = FAMILIES["mi300"]


def config(target):
    return json.loads(guard_config(target))


def test_the_config_is_the_compact_json_of_its_object_for_every_target():
    """Written out around its values, byte for byte what encoding the whole object gives (its text is in the
    Dockerfile, so in the fingerprint)."""
    for target in PLAN.targets:
        whole = {
            "vendor": target.vendor,
            "backend": target.backend_label,
            "reference": target.tags[0],
            "pair": target.pair or "",
            "twins": [
                {
                    "vendor": t.vendor,
                    "reference": t.reference,
                    **({"archs": list(t.archs)} if t.archs else {}),
                    **({"bundle": t.bundle, "family": t.bundle_family} if t.bundle else {}),
                }
                for t in target.twins
            ],
        }
        assert guard_config(target) == json.dumps(whole, sort_keys=True, separators=(",", ":")), target.id


def test_the_config_names_the_twins_from_the_plan():
    """The CUDA image pairs with every family image, each with its arch list and its bundle of AMD's hierarchy (with
    that bundle's family: the image cannot ask rocm-bootstrap); a family image with its CUDA twin."""
    assert config(CUDA) == {
        "vendor": "nvidia",
        "backend": "CUDA 13.0",
        "reference": CUDA.tags[0],
        "pair": "2.14.1-py3.12-runtime",
        "twins": [
            {
                "vendor": "amd",
                "reference": t.tags[0],
                "archs": list(t.archs),
                "bundle": t.bundle,
                "family": {"gfx90a": "gfx9", "gfx9_4": "gfx9", "gfx9_5": "gfx9", "gfx110x": "gfx11", "gfx12_0": "gfx12", "gfx1151": "gfx11"}[t.bundle],
            }
            for t in FAMILIES.values()
        ],
    }
    assert [t.bundle for t in FAMILIES.values()] == ["gfx90a", "gfx9_4", "gfx9_5", "gfx110x", "gfx12_0", "gfx1151"]
    assert sorted(FAMILIES) == ["mi200", "mi300", "mi350", "rdna3", "rdna4", "strix-halo"]
    assert config(ROCM)["twins"] == [{"vendor": "nvidia", "reference": CUDA.tags[0]}]


def test_cuda_image_on_amd_devices_names_the_rocm_twin(tmp_path):
    line = gpu_guard.verdict(config(CUDA), str(hosts.mi300x(tmp_path)))
    assert line == (  # the family image carrying the MI300X's gfx942
        f"buildkit: {CUDA.tags[0]} is a CUDA 13.0 image, but this container was given AMD GPU devices "
        "(/dev/kfd) and no NVIDIA one: torch will find no GPU it can use and run on the CPU; "
        f"run its ROCm twin instead: {ROCM.tags[0]} for this host's gfx942 (AMD bundle gfx9_4, family gfx9) "
        "(BUILDKIT_GPU_GUARD=off silences this, =strict stops here)"
    )


def test_an_rdna3_host_is_sent_to_the_rdna3_family_image(tmp_path):
    line = gpu_guard.verdict(config(CUDA), str(hosts.rx7900xtx(tmp_path)))
    assert line.split("run its ROCm twin instead: ")[1].startswith(FAMILIES["rdna3"].tags[0] + " for this host's gfx1100 (AMD bundle gfx110x, family gfx11) (")


def test_rocm_image_on_nvidia_devices_names_the_cuda_twin(tmp_path):
    line = gpu_guard.verdict(config(ROCM), str(hosts.h100(tmp_path)))
    assert "is a ROCm 7.14 image, but this container was given NVIDIA GPU devices (/dev/nvidia0, /dev/nvidiactl)" in line
    assert line.endswith(f"run its CUDA twin instead: {CUDA.tags[0]} (BUILDKIT_GPU_GUARD=off silences this, =strict stops here)")


@pytest.mark.parametrize(
    "builder,target", [(hosts.mi300x, ROCM), (hosts.h100, CUDA), (hosts.no_gpu, CUDA), (hosts.no_gpu, ROCM), (hosts.mixed, CUDA), (hosts.mixed, ROCM)]
)
def test_silent_with_the_right_vendor_and_without_gpus(tmp_path, builder, target):
    assert gpu_guard.verdict(config(target), str(builder(tmp_path))) is None


def test_a_container_given_no_devices_on_an_amd_host_is_told_by_the_host_hardware(tmp_path):
    root = hosts.mi300x(tmp_path)
    for node in [root / "dev/kfd", *root.glob("dev/dri/renderD*")]:
        node.unlink()
    line = gpu_guard.verdict(config(CUDA), str(root))
    assert "but this host has AMD GPUs (PCI 0000:0c:00.0, PCI 0000:22:00.0) and no NVIDIA one" in line


def test_an_intel_render_node_is_no_amd_gpu(tmp_path):
    root = hosts.no_gpu(tmp_path)
    (root / "dev/dri").mkdir(parents=True)
    (root / "dev/dri/renderD128").write_text("")
    (root / "sys/class/drm/renderD128/device").mkdir(parents=True)
    (root / "sys/class/drm/renderD128/device/vendor").write_text("0x8086\n")
    assert gpu_guard.verdict(config(CUDA), str(root)) is None
    (root / "sys/class/drm/renderD128/device/vendor").write_text("0x1002\n")
    assert "was given AMD GPU devices (/dev/dri/renderD128)" in gpu_guard.verdict(config(CUDA), str(root))


def test_with_several_rocm_family_twins_the_one_carrying_the_hosts_gfx_target_is_named(tmp_path):
    families = (Twin("amd", "registry/pytorch:rocm-mi200", ("gfx90a",)), Twin("amd", "registry/pytorch:rocm-mi300", ("gfx942",)))
    target = replace(CUDA, twins=families)
    assert [twin["archs"] for twin in config(target)["twins"]] == [["gfx90a"], ["gfx942"]]
    line = gpu_guard.verdict(config(target), str(hosts.mi300x(tmp_path / "mi300x")))
    assert line.split("run its ROCm twin instead: ")[1].startswith("registry/pytorch:rocm-mi300 (")
    # a host whose gfx target no family carries: every family is named
    line = gpu_guard.verdict(config(target), str(hosts.rx7900xtx(tmp_path / "rdna3")))
    assert "instead: registry/pytorch:rocm-mi200 or registry/pytorch:rocm-mi300 (" in line


def test_an_unpaired_image_points_at_detect(tmp_path):
    line = gpu_guard.verdict(config(replace(CUDA, pair=None, twins=())), str(hosts.mi300x(tmp_path)))
    assert "run a ROCm image of this stack instead (`buildkit detect` names it)" in line


@pytest.fixture(scope="module")
def guarded_python(tmp_path_factory):
    """A real venv with the guard installed the way the image build installs it."""
    folder = tmp_path_factory.mktemp("venv")
    venv.create(folder, with_pip=False)
    python = str(folder / "bin" / "python")
    install = subprocess.run([python, gpu_guard.__file__, "install", guard_config(CUDA)], capture_output=True, text=True)
    assert install.returncode == 0, install.stderr
    return python


def start(python, code, mode=None):
    env = {key: value for key, value in os.environ.items() if key != gpu_guard.ENV}
    if mode:
        env[gpu_guard.ENV] = mode
    return subprocess.run([python, "-c", code], capture_output=True, text=True, env=env, timeout=60)


def test_the_installed_guard_runs_at_every_start_and_is_silent_here(guarded_python):
    """This machine has no GPU: the .pth line runs (the module is imported) and says nothing."""
    result = start(guarded_python, "import sys; print('buildkit_gpu_guard' in sys.modules)")
    assert (result.returncode, result.stdout, result.stderr) == (0, "True\n", "")


@pytest.mark.parametrize(
    "mode,code,printed",
    [(None, 0, True), ("warn", 0, True), ("WARN ", 0, True), ("bogus", 0, True), ("strict", gpu_guard.EXIT_WRONG_GPU, True), ("off", 0, False)],
)
def test_modes_on_a_host_with_the_other_vendors_devices(guarded_python, tmp_path, mode, code, printed):
    root = hosts.mi300x(tmp_path)
    # the .pth line already checked this machine (silently) at start; check once more, on the AMD tree
    program = f"import buildkit_gpu_guard as g; g._checked.clear(); g.check({str(root)!r}); print('user code ran')"
    result = start(guarded_python, program, mode)
    assert result.returncode == code
    assert ("user code ran" in result.stdout) is (code == 0)
    assert (f"run its ROCm twin instead: {ROCM.tags[0]}" in result.stderr) is printed
    assert result.stderr.count("\n") == (1 if printed else 0)


def test_a_broken_config_never_breaks_python(guarded_python):
    site = subprocess.run([guarded_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True).stdout.strip()
    path = os.path.join(site, gpu_guard.CONFIG + ".py")
    with open(path) as handle:
        saved = handle.read()
    try:
        for broken in ("CONFIG = {not python", "CONFIG = 3\n", ""):
            with open(path, "w") as handle:
                handle.write(broken)
            result = start(guarded_python, "print('user code ran')", "strict")
            assert (result.returncode, result.stdout, result.stderr) == (0, "user code ran\n", ""), broken
    finally:
        with open(path, "w") as handle:
            handle.write(saved)


def test_the_guard_costs_python_little_at_start(guarded_python, tmp_path):
    """It imports nothing but os and sys (json and re would be most of its cost) and runs from compiled bytecode."""
    result = start(guarded_python, "import sys; print(sorted(m for m in ('json', 're', 'buildkit_gpu_guard') if m in sys.modules))")
    assert result.stdout == "['buildkit_gpu_guard']\n"
    site = subprocess.run([guarded_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True).stdout.strip()
    assert sorted(name.split(".")[0] for name in os.listdir(os.path.join(site, "__pycache__"))) == ["buildkit_gpu_guard", "buildkit_gpu_guard_config"]


def test_install_refuses_a_config_without_a_vendor(tmp_path):
    result = subprocess.run([sys.executable, gpu_guard.__file__, "install", '{"vendor": "intel"}'], capture_output=True, text=True)
    assert result.returncode == 1 and "the config names no vendor (nvidia or amd)" in result.stderr
