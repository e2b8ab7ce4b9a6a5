"""`buildkit compat check` reads each torch release's builds and their arch lists from the release's own wheels on
PyPI (doubles on 127.0.0.1 built by testkit.wheels, whose tables are copies of the published ones): the builds
its own table lists join the data unconfirmed (2.13's CUDA 12.9 would have been found so), each build's lists
are recorded with their release and source, what only PyTorch's index can settle is named, and hostile tables
and libraries are one message each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tomlkit

from buildkit.adapters.files.bundled import compat_data
from buildkit.core.compat.facts import compat_from_data
from testkit.artifacts import TABLE_2_13, PublishedFile, PypiDouble
from testkit.pytorch_index import PyTorchIndex, wheels_from_compat
from testkit.wheels import published_torch

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "buildkit" / "data" / "compat.toml"
COMPAT = compat_from_data(compat_data())
FLAGS = {"x86_64": "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120", "aarch64": "sm_80 sm_90 sm_100 sm_110 sm_120"}


def _pypi(tmp_path: Path, table: str = TABLE_2_13, flags: dict[str, str] | None = None) -> PypiDouble:
    """torch 2.13.0 on PyPI as published (its CUDA 13.0 build, cp312 for both machines), with `table` and `flags`."""
    files = []
    for machine in ("x86_64", "aarch64"):
        wheel = published_torch(
            tmp_path / "pypi",
            "2.13.0",
            "",
            "cu130",
            "3.12",
            machine,
            requires_python=">=3.10",
            requires=['cuda-bindings<14,>=13.0.3; platform_system == "Linux" and python_version < "3.15"'],
            table=table,
            flags=(flags or FLAGS)[machine],
        )
        files.append(PublishedFile(wheel.name, "2026-07-08T16:00:00Z", ">=3.10", wheel.read_bytes()))
    return PypiDouble({"torch": files, "torchvision": [], "torchaudio": []}).start()


def _data_before_2_13s_table_was_read(tmp_path: Path) -> Path:
    document = tomlkit.parse(SHIPPED.read_text())
    entry = document["torch"]["2.13"]
    entry["cuda"] = ["12.6", "13.0", "13.2"]
    for key in ("unconfirmed", "from_index", "arch_lists"):
        entry.pop(key, None)
    path = tmp_path / "compat.toml"
    path.write_text(tomlkit.dumps(document))
    return path


def check(cli, pypi: PypiDouble, data: Path, *more: str):
    result = cli("compat", "check", "--json", "--index", "none", "--pypi", pypi.url, "--layout-index", "amd-whl-next=none", "--data", str(data), *more)
    return result.code, (json.loads(result.out) if result.out else None), result


@pytest.mark.slow
def test_the_builds_a_releases_own_table_lists_join_the_data_unconfirmed(cli, tmp_path):
    pypi = _pypi(tmp_path)
    try:
        data = _data_before_2_13s_table_was_read(tmp_path)
        code, report, _ = check(cli, pypi, data)
        assert code == 3
        differences = {(d["torch"], d["subject"]): d for d in report["differences"]}
        assert differences[("2.13", "cuda 12.9")]["note"] == "torch 2.13.0's own table lists it; unconfirmed until PyTorch's index serves it"
        assert differences[("2.13", "cuda 12.9 archs")]["note"] == "torch 2.13.0's own table: 7.5 8.0 8.6 9.0 10.0 12.0, arm64 8.0 9.0 10.0 12.0"
        assert differences[("2.13", "cuda 13.0 archs")]["note"].startswith("torch 2.13.0's arch flags: 7.5 8.0")  # PyPI's build

        first = len(pypi.ranges)
        assert check(cli, pypi, data, "--write")[0] == 0
        written = compat_from_data(tomlkit.parse(data.read_text()).unwrap())
        release = written.torch["2.13"]
        assert release.backends["cuda"] == ("12.6", "12.9", "13.0", "13.2") and "cuda 12.9" in release.unconfirmed
        cu129 = written.wheel_archs("2.13", "cuda", "12.9")
        assert cu129.arm64_archs == ("8.0", "9.0", "10.0", "12.0") and (cu129.release, cu129.sources) == ("2.13.0", ("wheel-arch-table",))
        assert written.wheel_archs("2.13", "cuda", "13.0").sources == ("wheel-arch-flags", "wheel-arch-table")  # both say the same

        before = len(pypi.ranges)
        code, report, _ = check(cli, pypi, data)
        assert code == 0 and not [d for d in report["differences"] if d["torch"] == "2.13"]
        assert {"torch": "2.13", "subject": "cuda 12.9", "why": "torch 2.13.0's own table lists it; unconfirmed until PyTorch's index serves it"} in report[
            "pending"
        ]
        # the flags of a release are read once: the written entry names them, so no library is read again
        assert len(pypi.ranges) - before < (before - first) / 2
    finally:
        pypi.stop()


@pytest.mark.slow
def test_a_build_its_sources_say_was_not_shipped_is_named_not_proposed(cli, tmp_path):
    table = TABLE_2_13.replace('"13.2": {', '"13.4": {"x86_64": {75}, "aarch64": {80}},\n    "13.2": {')
    pypi = _pypi(tmp_path, table)
    try:
        data = tmp_path / "compat.toml"
        document = tomlkit.parse(SHIPPED.read_text())
        document["torch"]["2.13"]["not_built"] = {"cuda 13.4": "pytorch-cuda126-end"}
        data.write_text(tomlkit.dumps(document))
        _, report, _ = check(cli, pypi, data)
        assert ("2.13", "cuda 13.4") not in {(d["torch"], d["subject"]) for d in report["differences"]}
        pending = next(p for p in report["pending"] if (p["torch"], p["subject"]) == ("2.13", "cuda 13.4"))
        assert "pytorch-cuda126-end says it was not built" in pending["why"]
        people = cli("compat", "check", "--index", "none", "--pypi", pypi.url, "--layout-index", "amd-whl-next=none", "--data", str(data))
        assert "Only an index this check did not read can settle:" in people.out and "- torch 2.13, cuda 13.4: " in people.out
    finally:
        pypi.stop()


@pytest.mark.slow
def test_pytorchs_index_decides_the_builds_when_it_is_read(cli, tmp_path):
    """Read with PyTorch's index (which has no 2.13 CUDA 12.9 folder here), the table's 12.9 is not proposed."""
    pypi = _pypi(tmp_path)
    document = tomlkit.parse(_data_before_2_13s_table_was_read(tmp_path).read_text())
    index = PyTorchIndex(wheels_from_compat(compat_from_data(document.unwrap()))).start()
    try:
        result = cli(
            "compat",
            "check",
            "--json",
            "--index",
            index.url,
            "--pypi",
            pypi.url,
            "--layout-index",
            "amd-whl-next=none",
            "--data",
            str(tmp_path / "compat.toml"),
        )
        report = json.loads(result.out)
        assert ("2.13", "cuda 12.9") not in {(d["torch"], d["subject"]) for d in report["differences"]}
        assert not [p for p in report["pending"] if p["torch"] == "2.13"]
    finally:
        index.stop()
        pypi.stop()


@pytest.mark.slow
@pytest.mark.parametrize(
    "table, flags, why",
    [
        ("PYTORCH_RELEASES_CODE_CC = " + "{" * 5000 + "}" * 5000 + "\n", None, "torch/cuda/__init__.py: PYTORCH_RELEASES_CODE_CC is nested deeper"),
        ("PYTORCH_RELEASES_CODE_CC = __import__('os').getcwd()\n", None, "PYTORCH_RELEASES_CODE_CC is not a literal table"),
        (TABLE_2_13, {"x86_64": "sm_80 sm_90", "aarch64": "sm_80 sm_90\x00sm_75 sm_86"}, "libtorch_python.so: its .rodata holds 2 different"),
    ],
    ids=["a 5000-deep table", "a call", "two flag strings"],
)
def test_a_hostile_artifact_is_one_message_and_exit_1(cli, tmp_path, table, flags, why):
    pypi = _pypi(tmp_path, table, flags)
    try:
        result = cli(
            "compat",
            "check",
            "--index",
            "none",
            "--pypi",
            pypi.url,
            "--layout-index",
            "amd-whl-next=none",
            "--data",
            str(_data_before_2_13s_table_was_read(tmp_path)),
        )
        assert result.code == 1 and result.out == "" and result.err.count("error:") == 1
        assert why in result.err and "torch-2.13.0-cp312-cp312-manylinux_2_28_" in result.err and "Traceback" not in result.err
    finally:
        pypi.stop()
