"""The host's variables that change which gfx target AMD's software sees, reported for what they do.

- ROCM_BOOTSTRAP_FORCE_GFX_ARCH (a comma-separated target list) makes rocm-bootstrap's detection report those
  targets instead of the host's GPUs: its WheelNext variant plugin then tells a variant-aware installer (uv, pip)
  to pick their device wheels. A name rocm-bootstrap does not know makes its detection fail ("Unknown GFX target").
- ROCM_BOOTSTRAP_DISABLE_DETECTION=1 makes it report no GPU at all (and wins over the forced list).
  (rocm_bootstrap.detect.detect_gpus, 0.3.0.)
- HSA_OVERRIDE_GFX_VERSION=<major>.<minor>.<stepping> makes the ROCm runtime treat every AMD GPU as that target
  (11.0.0: gfx1100), so a GPU runs another target's code: supported by nobody, and a value meant for one part
  (10.3.0 for RDNA2) breaks RDNA3 and RDNA4 cards. `buildkit run` does not pass the host's environment into
  containers, so none of these reach an image it starts; they act on programs started on the host itself.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from buildkit.core.host.fit import Finding

if TYPE_CHECKING:
    from buildkit.core.compat.facts import Compat
    from buildkit.core.host.facts import HostFacts

FORCE = "ROCM_BOOTSTRAP_FORCE_GFX_ARCH"
DISABLE = "ROCM_BOOTSTRAP_DISABLE_DETECTION"
OVERRIDE = "HSA_OVERRIDE_GFX_VERSION"
VARIABLES = (FORCE, DISABLE, OVERRIDE)
_OVERRIDE_RE = re.compile(r"([0-9]{1,2})\.([0-9]{1,2})\.([0-9]{1,2})")
_NOT_IN_CONTAINERS = "`buildkit run` does not pass it into containers"


def override_target(value: str) -> str | None:
    """The gfx target HSA_OVERRIDE_GFX_VERSION names: 11.0.0 -> gfx1100, 9.0.10 -> gfx90a; None for another value."""
    found = _OVERRIDE_RE.fullmatch(value.strip())
    if not found:
        return None
    major, minor, stepping = (int(part) for part in found.groups())
    return f"gfx{major}{minor:x}{stepping:x}" if minor < 16 and stepping < 16 else None


def environment_findings(host: HostFacts, compat: Compat) -> list[Finding]:
    """What each of these variables set on an AMD host does there (nothing is said on a host without AMD GPUs)."""
    gpus = host.gpus_of("amd")
    values = dict(host.environment)
    if not gpus or not values:
        return []
    amd = compat.amd
    archs = list(dict.fromkeys(gpu.arch for gpu in gpus if gpu.arch))
    shown = ", ".join(amd.describe(arch) for arch in archs) or "unknown"
    findings = []
    if values.get(DISABLE) == "1":
        ignored = f" (and {FORCE} is ignored)" if values.get(FORCE) else ""
        findings.append(
            Finding(
                False,
                "amd-detection-disabled",
                f"{DISABLE}=1: rocm-bootstrap's detection reports no AMD GPU here"
                f"{ignored}, so a variant-aware install (uv or pip with AMD's variant plugin) picks no device wheel for "
                f"this host's {shown}",
                f"unset {DISABLE} unless you name device packages yourself",
            )
        )
    elif values.get(FORCE):
        findings += _forced(values[FORCE], archs, shown, compat)
    if values.get(OVERRIDE):
        findings += _override(values[OVERRIDE], archs, compat)
    return findings


def _forced(value: str, archs: list[str], shown: str, compat: Compat) -> list[Finding]:
    amd = compat.amd
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in amd.chains]
    if unknown:
        return [
            Finding(
                False,
                "amd-forced-arch-unknown",
                f"{FORCE}={value} names {', '.join(unknown)}, which rocm-bootstrap does not "
                "know: its detection, and so every variant-aware install on this host, fails (Unknown GFX target)",
                f"name targets it knows ({', '.join(amd.targets)}) or unset it",
            )
        ]
    forced = ", ".join(amd.describe(name) for name in dict.fromkeys(names))
    missing = [arch for arch in archs if arch not in names]
    if not missing:
        return [
            Finding(
                False,
                "amd-forced-arch",
                f"{FORCE}={value} names this host's own targets ({shown}): it changes nothing rocm-bootstrap would detect here",
                f"unset it to let rocm-bootstrap detect the GPUs; {_NOT_IN_CONTAINERS}",
            )
        ]
    return [
        Finding(
            False,
            "amd-forced-arch",
            f"{FORCE}={value}: rocm-bootstrap reports {forced} instead of this host's {shown}, so a "
            f"variant-aware install here picks their device wheels, which carry no code for {', '.join(missing)}",
            f"unset it (or set it to {','.join(archs)}) on this host; {_NOT_IN_CONTAINERS}",
        )
    ]


def _override(value: str, archs: list[str], compat: Compat) -> list[Finding]:
    amd = compat.amd
    runs_as = override_target(value)
    if runs_as is None:
        return [
            Finding(
                False,
                "hsa-override-invalid",
                f"{OVERRIDE}={value} is not a gfx version such as 11.0.0 (gfx1100): the ROCm runtime cannot use it",
                f"unset {OVERRIDE}; {_NOT_IN_CONTAINERS}",
            )
        ]
    findings = []
    for arch in archs:
        if arch == runs_as:
            continue
        borrow = compat.hsa_override.get(arch)
        if borrow and borrow[1] == runs_as:
            findings.append(
                Finding(
                    False,
                    "hsa-override",
                    f"{OVERRIDE}={value} makes the ROCm runtime run this host's {amd.describe(arch)} "
                    f"as {amd.describe(runs_as)}: the close neighbour's code it can borrow, at your own risk "
                    "(unsupported by AMD; wrong results or hangs are possible)",
                    f"prefer an image that carries {arch} (see `buildkit detect`); {_NOT_IN_CONTAINERS}",
                )
            )
            continue
        carriers = compat.gfx_targets[arch].rocm_versions if arch in compat.gfx_targets else ()
        fix = f"use a ROCm {' or '.join(carriers)} image, which carries {arch}" if carriers else f"build for {arch} from source"
        findings.append(
            Finding(
                False,
                "hsa-override",
                f"{OVERRIDE}={value} makes the ROCm runtime run this host's {amd.describe(arch)} as "
                f"{amd.describe(runs_as)}, another ISA's code: programs started here with it get wrong results, "
                "hangs or invalid device functions",
                f"unset {OVERRIDE} for this GPU and {fix}; {_NOT_IN_CONTAINERS}",
            )
        )
    if not findings:
        findings.append(
            Finding(
                False,
                "hsa-override",
                f"{OVERRIDE}={value} names this host's own target ({amd.describe(runs_as)}): it changes nothing",
                f"unset it; {_NOT_IN_CONTAINERS}",
            )
        )
    return findings
