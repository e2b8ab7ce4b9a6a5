"""The GPU guard: at every start of the image's Python it checks, in a few milliseconds and without torch,
whether this container sees only the other vendor's GPUs (a CUDA image given AMD devices, a ROCm image on
NVIDIA ones). There torch finds no GPU it can use and the job runs on the CPU without a word; the guard
says so in one line on stderr and names the image's twin. It runs INSIDE images: standard library only,
nothing from buildkit, no torch.

The image build installs it into the venv:

    python /buildkit/gpu_guard.py install CONFIG_JSON
        copies this file into the venv's site-packages as buildkit_gpu_guard.py, writes CONFIG_JSON beside it
        as a Python module (what the image is and its twins, rendered by buildkit.core.guard from the image's
        target), compiles both (the image's user cannot write bytecode there, and compiling at every start
        would cost more than the check) and writes a .pth file whose line runs check() whenever that Python
        starts, before the user's code. Nothing heavier than os and sys is imported at start (json alone would
        triple the guard's cost).

BUILDKIT_GPU_GUARD=warn (the default) prints the line and lets the program run; strict prints it and exits
with EXIT_WRONG_GPU before any user code; off checks nothing. The guard is silent on a host without GPUs
(CI runners) and wherever the image's own vendor's GPU is present.

What counts as a vendor's GPU, cheapest first:
 1. the device nodes the container was given: /dev/nvidia0.. and /dev/nvidiactl (NVIDIA); /dev/kfd, and
    /dev/dri/renderD* whose /sys/class/drm/renderD*/device/vendor is AMD's (a render node alone may be an
    Intel GPU's);
 2. only when it was given none: the host's hardware, GPU-class PCI functions under /sys/bus/pci/devices
    (containers see the host's sysfs) and /proc/driver/nvidia/gpus: a container started without GPU flags.
"""

import os
import sys

ENV = "BUILDKIT_GPU_GUARD"
MODES = ("warn", "strict", "off")
EXIT_WRONG_GPU = 78  # EX_CONFIG: the container was started with the wrong image for its GPUs
MODULE = "buildkit_gpu_guard"
CONFIG = MODULE + "_config"
PTH = "buildkit-gpu-guard.pth"
PCI_VENDORS = {"0x10de": "nvidia", "0x1002": "amd"}
GPU_CLASSES = ("0x03", "0x12")  # display controllers, processing accelerators (an HDMI audio function is 0x04)
NAMES = {"nvidia": ("NVIDIA", "CUDA"), "amd": ("AMD", "ROCm")}
MAX_READ = 4096


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read(MAX_READ).decode("ascii", "replace").strip()
    except (OSError, ValueError):
        return ""


def _entries(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def gfx_name(target_version):
    """kfd's gfx_target_version (90402) as an LLVM target (gfx942); 90010 -> gfx90a, 110000 -> gfx1100.
    None for a number that is no gfx target (the minor and stepping are single hex digits)."""
    major, minor, step = target_version // 10000, (target_version // 100) % 100, target_version % 100
    if not 1 <= major <= 99 or minor > 15 or step > 15:
        return None
    return "gfx%d%x%x" % (major, minor, step)


def device_evidence(root="/"):
    """vendor -> the device nodes of its GPUs this container was given."""
    found = {}
    dev = os.path.join(root, "dev")
    nvidia = [name for name in _entries(dev) if name == "nvidiactl" or (name.startswith("nvidia") and name[6:].isdigit())]
    if nvidia:
        found["nvidia"] = ["/dev/" + name for name in nvidia]
    amd = ["/dev/kfd"] if os.path.exists(os.path.join(dev, "kfd")) else []
    for name in _entries(os.path.join(dev, "dri")):
        vendor = _read(os.path.join(root, "sys/class/drm", name, "device/vendor")).lower()
        if name.startswith("renderD") and PCI_VENDORS.get(vendor) == "amd":
            amd.append("/dev/dri/" + name)
    if amd:
        found["amd"] = amd
    return found


def hardware_evidence(root="/"):
    """vendor -> the host's GPUs of that vendor (PCI addresses, or NVIDIA driver entries)."""
    found: dict[str, list[str]] = {}  # a local annotation: never evaluated, so Python 3.9 images read it too
    pci = os.path.join(root, "sys/bus/pci/devices")
    for address in _entries(pci):
        if not _read(os.path.join(pci, address, "class")).lower().startswith(GPU_CLASSES):
            continue
        vendor = PCI_VENDORS.get(_read(os.path.join(pci, address, "vendor")).lower())
        if vendor:
            found.setdefault(vendor, []).append("PCI " + address)
    if "nvidia" not in found:
        gpus = _entries(os.path.join(root, "proc/driver/nvidia/gpus"))
        if gpus:
            found["nvidia"] = ["PCI " + address for address in gpus]
    return found


def host_gfx_targets(root="/"):
    """The gfx targets of the host's AMD GPUs, from the kfd topology (CPU nodes report 0)."""
    targets = []
    nodes = os.path.join(root, "sys/class/kfd/kfd/topology/nodes")
    for node in _entries(nodes):
        for line in _read(os.path.join(nodes, node, "properties")).splitlines():
            key, _, value = line.partition(" ")
            if key == "gfx_target_version" and value.strip().isdigit() and int(value) > 0:
                name = gfx_name(int(value))
                if name and name not in targets:
                    targets.append(name)
    return targets


def _twins_for(config, vendor, root):
    """The twins of `vendor` to name, and what to say of them: for AMD, those whose arch list covers this host's
    gfx targets, each said with the host's targets, the image's bundle of AMD's hierarchy and its family."""
    twins = [twin for twin in config.get("twins", ()) if twin.get("vendor") == vendor]
    if vendor == "amd" and len(twins) > 1:
        wanted = host_gfx_targets(root)
        fitting = [twin for twin in twins if wanted and all(arch in twin.get("archs", ()) for arch in wanted)]
        if fitting:
            return [(twin, "for this host's %s (%s)" % (", ".join(wanted), _bundle_words(twin)) if twin.get("bundle") else "")
                    for twin in fitting]
    return [(twin, "") for twin in twins]


def _bundle_words(twin):
    return "AMD bundle %s, family %s" % (twin["bundle"], twin.get("family") or "?")


def verdict(config, root="/"):
    """The line to print when this container sees only the other vendor's GPUs; None when it may run."""
    own = config.get("vendor")
    if own not in NAMES:
        return None
    devices = device_evidence(root)
    seen = devices or hardware_evidence(root)
    if not seen or own in seen:
        return None
    other = sorted(seen)[0]
    evidence = ", ".join(seen[other][:3]) + (" and more" if len(seen[other]) > 3 else "")
    where = ("this container was given %s GPU devices (%s) and no %s one"
             if devices else "this host has %s GPUs (%s) and no %s one")
    twins = _twins_for(config, other, root)
    if twins:
        advice = "run its %s twin instead: %s" % (NAMES[other][1], " or ".join(
            twin["reference"] + (" " + said if said else "") for twin, said in twins))
    else:
        advice = "run a %s image of this stack instead (`buildkit detect` names it)" % NAMES[other][1]
    return ("buildkit: %s is a %s image, but %s: torch will find no GPU it can use and run on the CPU; %s "
            "(%s=off silences this, =strict stops here)") % (
        config.get("reference") or "this image", config.get("backend") or NAMES[own][1],
        where % (NAMES[other][0], evidence, NAMES[own][0]), advice, ENV)


def _mode():
    mode = os.environ.get(ENV, "warn").strip().lower()
    return mode if mode in MODES else "warn"  # a misspelt mode must not turn the guard off


_checked = []  # type: list[bool]  # some site.py builds (Debian's) process a venv's .pth files twice: say it once a process


def check(root="/"):
    """What the .pth line runs: never raises (a broken guard must not break Python), prints at most one line."""
    mode = _mode()
    if mode == "off" or _checked:
        return
    _checked.append(root)
    try:
        line = verdict(__import__(CONFIG).CONFIG, root)
    except Exception:  # whatever went wrong, the user's program runs as it would without the guard
        return
    if line is None:
        return
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):  # stderr closed or absent
        pass
    if mode == "strict":
        # os._exit: a SystemExit raised while site.py processes .pth files aborts the interpreter with a
        # fatal error and a traceback instead of exiting cleanly
        os._exit(EXIT_WRONG_GPU)


def install(config_json):
    """Copy the guard into this Python's site-packages with its config and the .pth line that runs it."""
    import json
    import py_compile
    import sysconfig

    config = json.loads(config_json)  # fails the build on a malformed config, not every later start
    if config.get("vendor") not in NAMES:
        sys.exit("gpu_guard: the config names no vendor (nvidia or amd): %r" % config_json[:200])
    site = sysconfig.get_paths()["purelib"]
    with open(os.path.abspath(__file__), "rb") as source:
        code = source.read()
    # the config as a Python literal (JSON's strings, numbers, lists and objects all are one)
    for name, text in ((MODULE, code), (CONFIG, ("CONFIG = %r\n" % (config,)).encode())):
        path = os.path.join(site, name + ".py")
        with open(path, "wb") as handle:
            handle.write(text)
        py_compile.compile(path, doraise=True)
    with open(os.path.join(site, PTH), "w", encoding="utf-8") as handle:
        handle.write("import %s; %s.check()\n" % (MODULE, MODULE))
    print("gpu guard: installed in %s for a %s image" % (site, NAMES[config["vendor"]][1]))


def main(argv):
    if len(argv) == 2 and argv[0] == "install":
        install(argv[1])
        return
    sys.exit("usage: gpu_guard.py install CONFIG_JSON")


if __name__ == "__main__":
    main(sys.argv[1:])
