"""What an image holds, for its SBOM. It runs INSIDE an image: standard library only, no buildkit, no torch.

Usage (buildkit passes this file's text to `python -c`): python inventory.py

Prints one JSON object: the OS (/etc/os-release), dpkg's status database as text (the host parses it),
the Python version, and every installed distribution on sys.path with its name as its metadata spells
it and its version. Importing nothing but the standard library keeps it fast and safe on a host without
a GPU driver (an `import torch` can hang there).
"""

import json
import platform

DPKG_STATUS = "/var/lib/dpkg/status"


# Not platform.freedesktop_os_release(): it came in Python 3.10 and images of older torch run 3.9. The
# same reader is in probe.py: each file runs alone in an image (as `python -c` text), so they cannot share it.
def _os_release():
    values = {}
    try:
        with open("/etc/os-release") as handle:
            for line in handle:
                key, _, value = line.strip().partition("=")
                values[key] = value.strip('"')
    except OSError:
        pass
    return {"id": values.get("ID", ""), "version_id": values.get("VERSION_ID", ""), "pretty_name": values.get("PRETTY_NAME", "")}


def _dpkg_status():
    try:
        with open(DPKG_STATUS, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""  # not a dpkg-based image: the SBOM lists its Python distributions only


def _distributions():
    from importlib import metadata

    return [
        {"name": dist.metadata["Name"], "version": dist.version}
        for dist in metadata.distributions()
        if dist.metadata["Name"]
    ]


def inventory():
    return {"os": _os_release(), "dpkg_status": _dpkg_status(), "python": platform.python_version(), "distributions": _distributions()}


if __name__ == "__main__":
    print(json.dumps(inventory(), sort_keys=True))
