"""matrix.lock: what is locked, how a lock reads back, and how it reaches Dockerfiles and fingerprints."""

from __future__ import annotations

import pytest

from buildkit.adapters.files.bundled import tomllib
from buildkit.app.targets import Choices, select_targets
from buildkit.core.matrix.lock import Lock, is_range, lock_text, newest_matching, read_lock
from buildkit.errors import UserError

DIGEST = "sha256:" + "a" * 64
OTHER = "sha256:" + "b" * 64


@pytest.mark.parametrize(
    "requirement,ranged",
    [
        ("einops==0.8.1", False),
        ("timm>=1.0", True),
        ("numpy", True),
        ("torchmetrics==1.*", True),
        ("x[extra]===1.0", False),
        ("pandas>=2,<3", True),
    ],
)
def test_what_counts_as_a_range(requirement, ranged):
    assert is_range(requirement) is ranged


def test_newest_matching_final_release():
    versions = ["0.9.0", "1.0.3", "1.0.15", "1.1.0rc1", "2.0.0.dev1", "not-a-version", "1.0.9"]
    assert newest_matching("timm>=1.0", versions) == "1.0.15"
    assert newest_matching("timm>=3", versions) is None


def test_a_lock_reads_back_what_it_wrote():
    lock = Lock({"python:3.12-slim-bookworm": DIGEST}, {"timm>=1.0": "1.0.15"})
    again = read_lock(tomllib.loads(lock_text(lock, "2026-11-30T00:00:00Z")), "matrix.lock")
    assert again == lock and again.constraint("timm>=1.0") == "timm==1.0.15" and again.constraint("einops==0.8.1") == ""


@pytest.mark.parametrize(
    "text,key",
    [
        ('[bases."python:3.12"]\ndigest = "sha256:short"\n', "bases.python:3.12"),
        ('[bases."python:3.12"]\ndigest = "sha256:' + "a" * 64 + '\\nRUN id"\n', "bases.python:3.12"),
        ('[bases."python 3.12"]\ndigest = "' + DIGEST + '"\n', "bases.python 3.12"),
        ('[packages]\n"timm>=1.0" = "1.0.15\\nRUN id"\n', "packages.timm>=1.0"),
        ("schema = 2\n", "schema"),
    ],
)
def test_a_hostile_lock_is_refused(text, key):
    with pytest.raises(UserError) as error:
        read_lock(tomllib.loads(text), "matrix.lock")
    assert error.value.problems[0].key == key


def test_a_locked_base_reaches_from_the_label_and_the_fingerprint(team_matrix, tmp_path):
    path = team_matrix('extends = "default"\ninclude = [{ id = "2.14.1-rocm7.2-py3.12-runtime" }]\n[[torch]]\nversion = "2.14.1"\npackages = ["timm>=1.0"]\n')
    (unlocked,) = select_targets(Choices(matrix=path)).render()
    (tmp_path / "matrix.lock").write_text(lock_text(Lock({"python:3.12-slim-bookworm": DIGEST}, {"timm>=1.0": "1.0.15"}), "now"))
    (locked,) = select_targets(Choices(matrix=path)).render()
    assert f"FROM python:3.12-slim-bookworm@{DIGEST} AS tools\n" in locked.dockerfile
    assert "install.py packages uv 'timm>=1.0' timm==1.0.15" in locked.dockerfile
    assert locked.labels["dev.buildkit.base-digest"] == DIGEST
    assert locked.fingerprint != unlocked.fingerprint
    (tmp_path / "matrix.lock").write_text(lock_text(Lock({"python:3.12-slim-bookworm": OTHER}, {"timm>=1.0": "1.0.15"}), "now"))
    (moved,) = select_targets(Choices(matrix=path)).render()
    assert moved.fingerprint not in (locked.fingerprint, unlocked.fingerprint)


@pytest.mark.slow
def test_finding_pips_default_index_leaves_setuptools_importable(tmp_path):
    """lock asks pip for its default index; importing pip in-process would switch off setuptools' distutils shim
    (Python < 3.12), and a later hipify --compile-check in the same process could not import cpp_extension."""
    import os
    import subprocess
    import sys

    script = (
        "import sys; from buildkit.adapters.index.wheel_index import default_package_index as find; index = find(); "
        "import setuptools; print(index, 'pip' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull}
    found = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    index, pip_imported = found.stdout.split()
    assert index.startswith("https://") and pip_imported == "False"
