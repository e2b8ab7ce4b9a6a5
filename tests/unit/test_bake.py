"""`buildkit bake`'s file builds from any working directory: buildx resolves a relative context against the
folder it runs in, so contexts sit under ${BUILDKIT_BAKE_DIR}, whose default is the export's own folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

TARGET = "2.14.1-cuda13.0-py3.12-runtime"


@pytest.fixture
def exported(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cli("bake", "--out", "bake", "--select", f"id={TARGET}")
    assert result.code == 0, result.err
    return tmp_path / "bake"


def test_contexts_are_under_the_export_folder_variable(exported):
    document = json.loads((exported / "docker-bake.json").read_text())
    (entry,) = document["target"].values()
    assert entry["context"] == f"${{BUILDKIT_BAKE_DIR}}/contexts/{TARGET}"
    assert document["variable"]["BUILDKIT_BAKE_DIR"] == {"default": str(exported.resolve())}
    assert (exported / "contexts" / TARGET / "Dockerfile").is_file()


@pytest.mark.skipif(shutil.which("docker") is None, reason="needs the docker CLI with buildx")
def test_buildx_resolves_the_contexts_from_another_folder_and_from_a_moved_copy(exported, tmp_path):
    """What buildx itself makes of the file (`bake --print` reads it without building), run from /."""

    def printed(bake_file: Path, **environment) -> str:
        result = subprocess.run(
            ["docker", "buildx", "bake", "-f", str(bake_file), "--print"],
            cwd="/",
            capture_output=True,
            text=True,
            env={**os.environ, **environment},
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        (entry,) = json.loads(result.stdout)["target"].values()
        return entry["context"]

    assert printed(exported / "docker-bake.json") == str(exported.resolve() / "contexts" / TARGET)
    moved = tmp_path / "elsewhere"
    shutil.copytree(exported, moved)
    assert printed(moved / "docker-bake.json", BUILDKIT_BAKE_DIR=str(moved)) == str(moved / "contexts" / TARGET)


def test_the_bake_file_s_registry_cache_is_compressed_as_build_s_images_are(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cli("bake", "--out", "bake", "--select", f"id={TARGET}", "--registry-cache")
    assert result.code == 0, result.err
    (entry,) = json.loads((tmp_path / "bake" / "docker-bake.json").read_text())["target"].values()
    (cache_to,) = entry["cache-to"]
    options = dict(part.split("=", 1) for part in cache_to.split(","))
    assert options["compression"] == "zstd" and options["force-compression"] == "true" and options["mode"] == "max"


def test_the_bake_file_pushes_the_compression_its_labels_name(exported):
    """`--push` keeps a target's output options, so bake pushes zstd layers as build does."""
    (entry,) = json.loads((exported / "docker-bake.json").read_text())["target"].values()
    (output,) = entry["output"]
    options = dict(part.split("=", 1) for part in output.split(","))
    assert options["type"] == "image" and "push" not in options
    assert options["compression"] == entry["labels"]["dev.buildkit.compression"] == "zstd"
    assert options["force-compression"] == "true" and options["oci-mediatypes"] == "true"


@pytest.mark.skipif(shutil.which("docker") is None, reason="needs the docker CLI with buildx")
def test_out_and_secret_paths_holding_bake_syntax_are_read_by_buildx_as_written(cli, tmp_path):
    """bake reads every string as an HCL template: an --out of a${IFS}b named a variable bake does not have
    (and %{ a directive). The export escapes them; buildx's own reading gives the paths back unchanged."""
    out = tmp_path / "a${IFS}b %{ if true }x%{ endif }"
    pip_conf = tmp_path / "pip ${HOME}.conf"
    pip_conf.write_text("[global]\n")
    result = cli("bake", "--out", out, "--select", f"id={TARGET}", "--pip-conf", pip_conf)
    assert result.code == 0, result.err
    printed = subprocess.run(["docker", "buildx", "bake", "-f", str(out / "docker-bake.json"), "--print"], cwd="/", capture_output=True, text=True, timeout=60)
    assert printed.returncode == 0, printed.stderr
    (entry,) = json.loads(printed.stdout)["target"].values()
    assert entry["context"] == str(out / "contexts" / TARGET)
    assert entry["secret"] == [f"id=pip_conf,src={pip_conf}"]
