"""`buildkit compat check` against a PyTorch-layout wheel index on 127.0.0.1: the shipped data agrees with
an index built from it; planted differences are reported, and --write makes the data agree again."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import tomlkit

from buildkit.adapters.files.bundled import compat_data
from buildkit.adapters.index.wheel_index import WheelIndex, WheelIndexError
from buildkit.core.compat.facts import compat_from_data
from buildkit.core.upstream.check import candidate_tags, read_wheel_name
from testkit.amd_targets import NEW_TARGET, with_new_amd_target
from testkit.pytorch_index import PyTorchIndex, torch_wheel_name, wheels_from_compat

SHIPPED = Path(__file__).resolve().parents[2] / "buildkit" / "data" / "compat.toml"
COMPAT = compat_from_data(compat_data())
PYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14")


def serve(folders: dict[str, list[str]], **options) -> PyTorchIndex:
    return PyTorchIndex(folders, **options).start()


@pytest.fixture
def index(request):
    """The shipped data as the index would show it, plus what the real pages carry that must be ignored."""
    folders = wheels_from_compat(COMPAT)
    folders["cu130"] += [
        torch_wheel_name("2.14.1", "cu130", "3.14", free_threaded=True),
        torch_wheel_name("2.14.1", "cu130", "3.12", platform="win_amd64"),
        "torch-2.15.0.dev20260801+cu130-cp312-cp312-manylinux_2_28_x86_64.whl",
        "torchvision-0.29.1+cu130-cp312-cp312-manylinux_2_28_x86_64.whl",
    ]
    server = serve(folders, root_files=["torch-2.14.1-cp312-cp312-manylinux_2_28_aarch64.whl", "torch-2.14.1+cpu-cp312-cp312-manylinux_2_28_x86_64.whl"])
    yield server
    server.stop()


def check(cli, *args):
    result = cli("compat", "check", "--json", "--pypi", "none", "--layout-index", "amd-whl-next=none", *args)
    return result.code, (json.loads(result.out) if result.out else None), result


def found(document) -> set[tuple[str, str, str]]:
    return {(d["torch"], d["subject"], d["on"]) for d in document["differences"]}


@pytest.mark.parametrize(
    "name, tag, expected",
    [
        ("torch-2.14.1+cu130-cp311-cp311-manylinux_2_28_x86_64.whl", "cu130", [("2.14.1", "cuda", "13.0", "3.11", "linux/amd64")]),
        ("torch-2.9.1+cu129-cp312-cp312-manylinux_2_28_aarch64.whl", "cu129", [("2.9.1", "cuda", "12.9", "3.12", "linux/arm64")]),
        ("torch-2.7.1+rocm6.2.4-cp39-cp39-manylinux_2_28_x86_64.whl", "rocm6.2.4", [("2.7.1", "rocm", "6.2.4", "3.9", "linux/amd64")]),
        ("torch-2.14.1+cu130-cp314-cp314t-manylinux_2_28_x86_64.whl", "cu130", []),  # free-threaded
        ("torch-2.14.1+cu130-cp312-cp312-win_amd64.whl", "cu130", []),
        ("torch-2.14.1+cpu-cp312-cp312-manylinux_2_28_x86_64.whl", "cu130", []),  # a root file on the cu130 page
        ("torch-2.14.1-cp312-cp312-manylinux_2_28_aarch64.whl", "cu130", []),  # no local version
        ("torch-2.15.0.dev20260801+cu130-cp312-cp312-manylinux_2_28_x86_64.whl", "cu130", []),
        ("torch-2.15.0rc1+cu130-cp312-cp312-manylinux_2_28_x86_64.whl", "cu130", []),
        ("torchvision-0.29.1+cu130-cp312-cp312-manylinux_2_28_x86_64.whl", "cu130", []),
        ("torch-2.14.1.tar.gz", "cu130", []),
    ],
)
def test_wheel_names_state_release_backend_python_and_platform(name, tag, expected):
    assert [(w.release, w.backend, w.version, w.python, w.platform) for w in read_wheel_name(name, tag)] == expected


def test_probes_every_known_variant_its_neighbours_and_what_the_root_lists():
    tags = candidate_tags(COMPAT, ["cu200", "torch", "rocm11.0"])
    assert {b.index_tag for b in COMPAT.backends.values()} <= set(tags)
    assert {"cu127", "cu138", "cu140", "rocm6.5", "rocm7.18", "rocm8.0", "rocm10.0", "cu200", "rocm11.0"} <= set(tags)
    assert not {"torch", "cu1310", "cu1210", "cu117", "rocm7.19"} & set(tags)


@pytest.mark.slow
def test_shipped_data_agrees_with_an_index_built_from_it(cli, index):
    code, document, _ = check(cli, "--index", index.url)
    assert code == 0 and document["differences"] == [] and document["diff"] == "" and document["agrees"]
    assert document["amd"] == []  # [gfx] describes every target of AMD's hierarchy, and none it lacks
    # every backend version a release lists; ROCm 10 and CUDA 13.5 are described for releases still to come
    assert set(document["found"]) == {COMPAT.backend(b, v).index_tag for r in COMPAT.torch.values() for b in r.backends for v in r.backends[b]}
    assert "/whl/cu130/torch/" in index.requests and "/whl/cu127/torch/" in index.requests  # probed, absent


@pytest.mark.slow
def test_a_target_a_newer_rocm_bootstrap_knows_is_reported_until_the_data_describes_it(cli, index, monkeypatch, tmp_path):
    """rocm-bootstrap's table changed (a new GFX12.5 target, as its next release would add): compat check names
    it with its sub-family and family, and says the data must describe it; --write does not invent products."""
    with_new_amd_target(monkeypatch)
    code, document, _ = check(cli, "--index", index.url, "--write", "--data", copy_of_shipped(tmp_path))
    assert code == 3 and document["differences"] == [] and not document["agrees"] and not document["written"]
    assert document["amd"] == [
        {
            "subject": f"gfx target {NEW_TARGET} (gfx12_5, gfx12)",
            "on": "rocm-bootstrap",
            "note": f"describe [gfx.{NEW_TARGET}] (family, products, sources) in the data",
        }
    ]
    text = cli("compat", "check", "--pypi", "none", "--layout-index", "amd-whl-next=none", "--index", index.url).out
    assert f"gfx target {NEW_TARGET} (gfx12_5, gfx12): rocm-bootstrap knows it, the data does not" in text
    # described (what a person adds), it agrees again
    data = copy_of_shipped(tmp_path)
    data.write_text(data.read_text() + f'\n[gfx.{NEW_TARGET}]\nfamily = "CDNA5"\nunconfirmed = ["products"]\nsources = ["rocm-bootstrap"]\n')
    code, document, _ = check(cli, "--index", index.url, "--data", data)
    assert code == 0 and document["amd"] == [] and document["agrees"]


@pytest.mark.slow
def test_a_target_the_data_describes_and_rocm_bootstrap_does_not_is_reported(cli, index, tmp_path):
    data = copy_of_shipped(tmp_path)
    data.write_text(data.read_text() + '\n[gfx.gfx1300]\nfamily = "RDNA5"\nsources = ["rocm-bootstrap"]\n')
    code, document, _ = check(cli, "--index", index.url, "--data", data)
    assert code == 3 and [(d["subject"], d["on"]) for d in document["amd"]] == [("gfx target gfx1300", "data")]


def copy_of_shipped(tmp_path: Path) -> Path:
    path = tmp_path / "shipped.toml"
    path.write_text(SHIPPED.read_text())
    return path


def planted(tmp_path: Path) -> Path:
    """The shipped data less torch 2.9's CUDA 12.9."""
    document = tomlkit.parse(SHIPPED.read_text())
    document["torch"]["2.9"]["cuda"] = ["12.6", "12.8", "13.0"]
    path = tmp_path / "compat.toml"
    path.write_text(tomlkit.dumps(document))
    return path


@pytest.fixture
def planted_index():
    folders = wheels_from_compat(COMPAT)
    folders["cu130"] += [torch_wheel_name("2.13.0", "cu130", "3.15")]  # a Python the data lacks
    folders["cu126"] += [torch_wheel_name("2.12.2", "cu126", python) for python in PYTHONS]  # a new patch release
    folders["rocm7.1"] = [n for n in folders["rocm7.1"] if not n.startswith("torch-2.12.")]  # listed, not shipped
    folders["cu128"] += [torch_wheel_name("2.8.0", "cu128", "3.12", platform="linux/arm64")]  # data: amd64 only
    server = serve(folders)
    yield server
    server.stop()


@pytest.mark.slow
def test_planted_differences_are_reported_and_write_fixes_them(cli, tmp_path, planted_index):
    data = planted(tmp_path)
    before = data.read_text()
    code, document, _ = check(cli, "--index", planted_index.url, "--data", data)
    assert code == 3 and not document["written"]
    assert found(document) == {
        ("2.9", "cuda 12.9", "index"),
        ("2.13", "python 3.15", "index"),
        ("2.12", "release 2.12.2", "index"),
        ("2.12", "rocm 7.1", "data"),
        ("2.8", "cuda 12.8 on linux/arm64", "index"),
    }
    assert document["diff"].startswith(f"--- {data}\n+++ {data}\n") and data.read_text() == before

    code, document, _ = check(cli, "--index", planted_index.url, "--data", data, "--write")
    assert code == 0 and document["written"]
    written = compat_from_data(tomlkit.parse(data.read_text()).unwrap())
    assert written.torch["2.9"].backends["cuda"] == ("12.6", "12.8", "12.9", "13.0")
    assert written.torch["2.12"].backends["rocm"] == ("7.2",)
    assert written.torch["2.12"].newest_release == "2.12.2"
    assert "3.15" in written.torch["2.13"].python
    assert written.platforms("2.8", "cuda", "12.8") == ("linux/amd64", "linux/arm64")
    assert written.platforms("2.8", "cuda", "12.6") == ("linux/amd64",)
    torch = tomlkit.parse(data.read_text())["torch"]
    assert torch["2.9"]["from_index"] == ["cuda 12.9"] and "wheel-index" in torch["2.9"]["sources"]
    assert torch["2.12"]["from_index"] == ["release 2.12.2", "no rocm 7.1"]
    assert torch["2.8"]["from_index"] == ["cuda 12.8 on linux/arm64"]
    assert "# --- torch releases" in data.read_text()  # comments survive the rewrite

    code, document, _ = check(cli, "--index", planted_index.url, "--data", data)
    assert code == 0 and document["differences"] == []


@pytest.mark.slow
def test_people_get_a_table_and_the_proposed_diff(cli, tmp_path, planted_index):
    result = cli("compat", "check", "--pypi", "none", "--layout-index", "amd-whl-next=none", "--index", planted_index.url, "--data", planted(tmp_path))
    assert result.code == 3 and result.err == ""
    assert "| 2.9 | cuda 12.9 | - |" in result.out and "| 2.12 | release 2.12.2 | rocm 7.1 |" in result.out
    assert "```diff\n" in result.out and '+cuda = ["12.6", "12.8", "12.9", "13.0"]' in result.out
    assert "--write" in result.out


@pytest.mark.slow
def test_the_shipped_files_diff_applies_at_the_repository_root(cli, planted_index):
    before = SHIPPED.read_text()
    code, document, _ = check(cli, "--index", planted_index.url)  # no --write: the shipped file is only read
    assert code == 3 and document["diff"].startswith("--- a/buildkit/data/compat.toml\n+++ b/buildkit/data/compat.toml\n")
    assert SHIPPED.read_text() == before


@pytest.mark.slow
def test_a_backend_version_the_data_does_not_describe_is_reported_not_written(cli, tmp_path):
    folders = wheels_from_compat(COMPAT)
    folders["cu136"] = [torch_wheel_name("2.14.1", "cu136", python) for python in PYTHONS]
    server = serve(folders)
    try:
        data = tmp_path / "compat.toml"
        data.write_text(SHIPPED.read_text())
        code, document, _result = check(cli, "--index", server.url, "--data", data, "--write")
    finally:
        server.stop()
    assert code == 3 and document["diff"] == "" and not document["written"]
    [difference] = document["differences"]
    assert difference["subject"] == "cuda 13.6" and not difference["writable"] and '[cuda."13.6"]' in difference["note"]


@pytest.mark.slow
def test_a_new_torch_minor_is_added_with_its_facts(cli, tmp_path):
    folders = wheels_from_compat(COMPAT)
    folders["cu132"] += [torch_wheel_name("2.16.0", "cu132", python, platform) for python in PYTHONS for platform in ("linux/amd64", "linux/arm64")]
    folders["rocm7.14"] += [torch_wheel_name("2.16.0", "rocm7.14", python) for python in PYTHONS]
    server = serve(folders)
    data = tmp_path / "compat.toml"
    data.write_text(SHIPPED.read_text())
    try:
        code, document, _ = check(cli, "--index", server.url, "--data", data, "--write")
        assert code == 0 and ("2.16", "cuda 13.2", "index") in found(document)
        release = compat_from_data(tomlkit.parse(data.read_text()).unwrap()).torch["2.16"]
        assert release.backends == {"cuda": ("13.2",), "rocm": ("7.14",)} and release.python == PYTHONS
        assert release.releases == ("2.16.0",) and release.unconfirmed == ("torchvision",)
        assert check(cli, "--index", server.url, "--data", data)[0] == 0
    finally:
        server.stop()


@pytest.mark.slow
def test_a_root_page_that_lists_variant_folders_widens_the_probe(cli, tmp_path):
    folders = wheels_from_compat(COMPAT)
    folders["rocm11.0"] = [torch_wheel_name("2.14.1", "rocm11.0", "3.12")]
    server = serve(folders, root_lists_variants=True)
    try:
        code, document, _ = check(cli, "--index", server.url)
    finally:
        server.stop()
    assert code == 3 and "rocm11.0" in document["found"]
    assert found(document) == {("2.14", "rocm 11.0", "index")}


def test_an_unreachable_index_is_one_message_and_exit_1(cli):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = cli("compat", "check", "--pypi", "none", "--layout-index", "amd-whl-next=none", "--index", f"http://127.0.0.1:{port}/whl")
    assert result.code == 1 and result.out == ""
    assert result.err.count("error:") == 1 and "cannot connect: the connection was refused" in result.err and "Traceback" not in result.err


@pytest.mark.slow
def test_a_site_that_is_no_wheel_index_is_one_message_and_exit_1(cli):
    server = serve({})
    try:
        result = cli("compat", "check", "--pypi", "none", "--layout-index", "amd-whl-next=none", "--index", server.url)
    finally:
        server.stop()
    assert result.code == 1 and "is this a PyTorch wheel index?" in result.err and result.err.count("error:") == 1


@pytest.mark.slow
def test_pages_over_the_size_cap_are_refused():
    server = serve(wheels_from_compat(COMPAT))
    try:
        with pytest.raises(WheelIndexError, match="larger than 1000 bytes"):
            WheelIndex(server.url, max_bytes=1000).torch_pages(("cu130",))
    finally:
        server.stop()


@pytest.mark.slow
def test_unreadable_data_is_a_user_error(cli, tmp_path, index):
    bad = tmp_path / "compat.toml"
    bad.write_text("[torch\n")
    result = cli("compat", "check", "--pypi", "none", "--layout-index", "amd-whl-next=none", "--index", index.url, "--data", bad)
    assert result.code == 2 and "--data: cannot read" in result.err


def test_nightly_runs_the_check_and_shows_its_diff_as_the_job_summary():
    from ruamel.yaml import YAML  # installed with check-jsonschema

    workflow = YAML(typ="safe").load((Path(__file__).resolve().parents[2] / ".github" / "workflows" / "nightly.yml").read_text())
    job = workflow["jobs"]["compat"]
    script = "\n".join(step.get("run", "") for step in job["steps"])
    assert "buildkit compat check --write" in script and '"$GITHUB_STEP_SUMMARY"' in script and "gh pr create" in script
    assert "exit 1" in script and "exit 3" in script  # an unreachable index and facts a person must settle fail the job
    assert "${{" not in script  # values reach scripts through env:, never by template expansion


@pytest.mark.slow
def test_differences_and_an_unreachable_index_end_in_different_codes(cli, tmp_path, planted_index):
    """The nightly tells stale data (3: the change is proposed) from an index it cannot read (1: try again)."""
    differs = cli("compat", "check", "--pypi", "none", "--layout-index", "amd-whl-next=none", "--index", planted_index.url, "--data", planted(tmp_path))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    offline = cli("compat", "check", "--pypi", "none", "--layout-index", "amd-whl-next=none", "--index", f"http://127.0.0.1:{port}/whl")
    assert (differs.code, offline.code) == (3, 1)


@pytest.mark.parametrize(
    "text, why",
    [
        ((Path(__file__).resolve().parents[2] / "matrix.toml").read_text(), "it has [[torch]] entries, so it is a matrix file"),
        ('title = "not compat data"\n', 'it has no [torch."X.Y"] tables'),
        ('[torch]\n"2.14" = 3\n', 'its torch."2.14" is not a table'),
        ('wheel_index = "https://example.org"\n[torch."2.14"]\n', "its wheel_index is not a table"),
    ],
    ids=["a matrix", "no torch tables", "a torch minor that is a number", "a wheel_index string"],
)
@pytest.mark.slow
def test_data_that_is_not_compatibility_data_is_one_user_error(cli, tmp_path, index, text, why):
    """`compat check --data matrix.toml` used to end in AttributeError; now it says what the file is and what
    --data takes, before the index is asked."""
    data = tmp_path / "data.toml"
    data.write_text(text)
    result = cli("compat", "check", "--pypi", "none", "--layout-index", "amd-whl-next=none", "--index", index.url, "--data", data)
    assert result.code == 2 and result.out == "" and "internal error" not in result.err
    assert result.err.count("error:") == 1 and why in result.err and "--data takes compatibility data" in result.err
