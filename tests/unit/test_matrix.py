"""Loading, layering and expanding matrices: the default one and team forks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from buildkit.adapters.files.matrix import load_matrix, locate
from buildkit.core.targets.plan import expand


def ids(path=None) -> set[str]:
    return {t.id for t in expand(load_matrix(path)).targets}


def test_default_matrix_has_every_recent_release_with_both_vendors():
    plan = expand(load_matrix(None))
    for torch in ("2.12.1", "2.13.0", "2.14.1", "2.15.0"):
        vendors = {t.vendor for t in plan.targets if t.torch == torch}
        assert vendors == {"nvidia", "amd"}, torch
    assert {t.flavor for t in plan.targets} == {"runtime", "devel"}


def test_every_pair_has_one_cuda_twin_and_one_rocm_twin_or_one_per_family():
    plan = expand(load_matrix(None))
    pairs: dict[str, list] = {}
    for target in plan.targets:
        if target.pair:
            pairs.setdefault(target.pair, []).append(target)
    assert pairs, "the default matrix must have pairs"
    for members in pairs.values():
        assert [t.backend for t in members].count("cuda") == 1
        rocm = [t for t in members if t.backend == "rocm"]
        families = [t.family for t in rocm]
        assert (len(rocm) == 1 and families == [""]) or (len(rocm) > 1 and "" not in families and len(set(families)) == len(rocm))
    assert any(len(members) == 7 for members in pairs.values())  # 2.14.1 and 2.15.0: six ROCm 7.14 families


def test_twins_carry_the_floating_tags():
    plan = expand(load_matrix(None))
    twin = next(t for t in plan.targets if t.id == "2.13.0-rocm7.2-py3.12-runtime")
    assert twin.pair == "2.13.0-py3.12-runtime"
    assert twin.tags == (
        "ghcr.io/buildkit-images/pytorch:2.13.0-rocm7.2-py3.12-runtime",
        "ghcr.io/buildkit-images/pytorch:2.13.0-rocm-py3.12-runtime",
    )
    family = next(t for t in plan.targets if t.id == "2.14.1-rocm7.14-mi300-py3.12-runtime")
    assert family.pair == "2.14.1-py3.12-runtime" and family.tags[1] == "ghcr.io/buildkit-images/pytorch:2.14.1-rocm-mi300-py3.12-runtime"
    for alone in ("2.14.1-cuda12.6-py3.12-runtime", "2.14.1-rocm7.2-py3.12-runtime"):  # 7.2 is built beside 7.14, unpaired
        other = next(t for t in plan.targets if t.id == alone)
        assert other.pair is None and len(other.tags) == 1


def test_index_urls_follow_the_pytorch_layout():
    plan = expand(load_matrix(None))
    by_id = {t.id: t for t in plan.targets}
    assert by_id["2.14.1-cuda13.0-py3.12-runtime"].index_url == "https://download.pytorch.org/whl/cu130/"
    assert by_id["2.14.1-rocm7.2-py3.12-runtime"].index_url == "https://download.pytorch.org/whl/rocm7.2/"
    assert by_id["2.14.1-rocm7.2-py3.12-runtime"].companions == ("torchvision==0.29.1+rocm7.2",)


def test_devel_targets_use_the_vendor_base_and_its_python(cli):
    plan = expand(load_matrix(None))
    devel = [t for t in plan.targets if t.flavor == "devel"]
    assert devel and {t.python for t in devel} == {"3.12"}
    rocm = next(t for t in devel if t.id == "2.14.1-rocm7.2-py3.12-devel")
    assert rocm.base_image == "rocm/dev-ubuntu-24.04:7.2.4-complete"
    result = cli("plan")
    assert "2.14.1 devel: Python 3.10, 3.11, 3.13 skipped" in result.err


def test_team_fork_adds_packages_and_narrows_rocm_archs(team_matrix, tmp_path):
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "_extra.j2").write_text("# the team's\n")
    path = team_matrix("""
        extends = "default"
        registry = "registry.example.com"
        repository = "vision/pytorch"
        template_dir = "templates"
        include = [{ torch = "2.14.1", python = "3.12", flavor = "runtime" }]

        [[torch]]
        version = "2.14.1"
        packages = ["einops==0.8.1", "timm>=1.0"]
        archs = { rocm = ["gfx942"] }
    """)
    matrix = load_matrix(path)
    plan = expand(matrix)
    assert {t.id for t in plan.targets} == {
        "2.14.1-cuda12.6-py3.12-runtime",
        "2.14.1-cuda13.0-py3.12-runtime",
        "2.14.1-cuda13.2-py3.12-runtime",
        "2.14.1-rocm7.2-py3.12-runtime",
        "2.14.1-rocm7.14-mi300-py3.12-runtime",  # the one default family with gfx942; the others are left out
    }
    assert any("left out" in str(note) and "rdna3" in str(note) for note in plan.notes)
    rocm = next(t for t in plan.targets if t.backend == "rocm")
    assert rocm.archs == ("gfx942",)
    assert rocm.packages == ("einops==0.8.1", "timm>=1.0")
    assert rocm.tags[0] == "registry.example.com/vision/pytorch:2.14.1-rocm7.2-py3.12-runtime"
    extra = matrix.templates.files["_extra.j2"]
    assert Path(extra.filename).parent == (tmp_path / "templates").resolve() and not extra.builtin
    assert matrix.templates.files["runtime.Dockerfile.j2"].builtin
    cuda = next(t for t in plan.targets if t.id == "2.14.1-cuda13.0-py3.12-runtime")
    assert cuda.archs == ("7.5", "8.0", "8.6", "9.0", "10.0", "12.0")  # untouched: only ROCm narrowed


def test_stack_entries_merge_by_version_and_new_ones_are_added(team_matrix):
    path = team_matrix("""
        extends = "default"
        [[torch]]
        version = "2.14.1"
        python = ["3.11"]
        [[torch]]
        version = "2.11.0"
        python = ["3.12"]
        flavors = ["runtime"]
    """)
    plan = expand(load_matrix(path))
    assert {t.python for t in plan.targets if t.torch == "2.14.1"} == {"3.11"}
    assert {t.torch for t in plan.targets} == {"2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0"}
    assert {t.backend_version for t in plan.targets if t.torch == "2.11.0"} == {"12.6", "12.8", "12.9", "13.0", "7.1", "7.2"}


def test_exclude_rule_removes_targets_and_an_unpaired_twin_is_reported(team_matrix, cli):
    path = team_matrix("""
        extends = "default"
        exclude = [{ backend = "rocm", python = "3.10" }]
    """)
    assert not any(t.startswith("2.14.1-rocm") and "py3.10" in t for t in ids(path))
    plan = expand(load_matrix(path))
    cuda_twin = next(t for t in plan.targets if t.id == "2.14.1-cuda13.0-py3.10-runtime")
    assert cuda_twin.pair is None
    assert any("unpaired: 2.14.1-cuda13.0-py3.10-runtime has no rocm twin" in str(n) for n in plan.notes)
    result = cli("plan", "--matrix", path, "--select", "python=3.10", "--select", "torch=2.14.1")
    assert "unpaired: 2.14.1-cuda13.0-py3.10-runtime has no rocm twin" in result.err


def test_notes_are_only_about_targets_the_rules_keep(team_matrix, cli):
    """The default matrix notes that its devel images skip Pythons; a team whose include keeps one runtime stack, or
    whose exclude removes devel, hears nothing about them (every command printed them, for stacks it never builds)."""
    devel_note = "devel: Python 3.10, 3.11, 3.13 skipped"
    assert any(devel_note in str(note) for note in expand(load_matrix(None)).notes)
    include = team_matrix(
        """
        extends = "default"
        include = [{ torch = "2.14.1", python = "3.12", flavor = "runtime" }]
    """,
        "include.toml",
    )
    exclude = team_matrix(
        """
        extends = "default"
        exclude = [{ flavor = "devel" }]
    """,
        "exclude.toml",
    )
    keeps_2_14_devel = team_matrix(
        """
        extends = "default"
        include = [{ torch = "2.14.1" }]
    """,
        "devel.toml",
    )
    for path in (include, exclude):
        assert not any("devel" in str(note) for note in expand(load_matrix(path)).notes), path
        assert "devel" not in cli("plan", "--matrix", path).err
    assert [str(note) for note in expand(load_matrix(keeps_2_14_devel)).notes if "devel:" in str(note)] == [
        "2.14.1 devel: Python 3.10, 3.11, 3.13 skipped: the vendors' devel base images ship Python 3.12 only"
    ]


def test_compat_override_describes_a_custom_stack(team_matrix):
    path = team_matrix("""
        extends = "default"
        [compat.torch."2.16"]
        python = ["3.12"]
        cuda = ["13.2"]
        rocm = ["7.14"]
        torchvision = "0.31"
        releases = ["2.16.0"]
        [[torch]]
        version = "2.16.0"
        python = ["3.12"]
        flavors = ["runtime"]
        rocm_families = []
    """)
    matrix = load_matrix(path)
    assert matrix.compat_overridden
    targets = [t for t in expand(matrix).targets if t.torch == "2.16.0"]
    assert {t.id for t in targets} == {"2.16.0-cuda13.2-py3.12-runtime", "2.16.0-rocm7.14-py3.12-runtime"}
    assert {t.companions for t in targets} == {("torchvision==0.31.0+cu132",), ("torchvision==0.31.0+rocm7.14",)}


def test_run_as_root_drops_the_user(team_matrix):
    path = team_matrix('extends = "default"\nrun_as_root = true\n')
    assert all(t.user is None for t in expand(load_matrix(path)).targets)


def test_locate_finds_lines_of_key_paths():
    text = 'a = 1\npython = ["3.12"]\n[[torch]]\nversion = "1"\n[[torch]]\nversion = "2"\nrocm = ["x", "y"]\n'
    assert locate(text, "python[0]") == 2
    assert locate(text, "torch[1].rocm[1]") == 7
    assert locate(text, "torch[0].version") == 4
    assert locate(text, "nowhere") is None


def test_plan_json_carries_the_contract_keys(cli):
    result = cli("plan", "--format", "json", "--vendor", "amd")
    assert result.code == 0
    targets = json.loads(result.out)
    assert targets and all(t["vendor"] == "amd" for t in targets)
    for key in ("id", "vendor", "backend", "backend_version", "torch", "python", "flavor", "tags", "pair", "fingerprint"):
        assert all(key in t for t in targets), key
    assert all(len(t["fingerprint"]) == 64 for t in targets)


def test_plan_github_format_is_an_actions_matrix(cli):
    result = cli("plan", "--format", "github", "--select", "torch=2.14.*", "--select", "python=3.12")
    document = json.loads(result.out)
    assert set(document) == {"include"}
    assert {job["id"] for job in document["include"]} >= {"2.14.1-cuda13.0-py3.12-runtime", "2.14.1-rocm7.2-py3.12-runtime"}
    assert all(job["python"] == "3.12" for job in document["include"])


def test_select_rejects_unknown_keys(cli):
    result = cli("plan", "--select", "pyhton=3.12")
    assert result.code == 2
    assert "--select: 'pyhton=3.12': expected KEY=GLOB" in result.err


def test_readme_matrix_reference_names_every_key_the_schema_reads():
    """The matrix reference's annotated block is the user's view of the field table: a key added to the schema and not
    documented there (or a documented key the schema dropped) fails here."""
    import re
    from pathlib import Path

    from buildkit.core.matrix.fields import STACK, TOP

    page = (Path(__file__).parents[2] / "docs" / "matrix-reference.md").read_text()
    block = page.split("## Every key, annotated", 1)[1].split("```toml", 1)[1].split("```", 1)[0]
    documented = set(re.findall(r"^(\w+) = ", block, re.M)) - {"releases", "torchvision"}  # [compat] override keys
    assert documented == set(TOP) | set(STACK)


@pytest.mark.parametrize(
    "options,expected",
    [
        (["--select", "python=3.9"], "error: --select: python=3.9 leaves no target of the matrix's 132; see `buildkit plan`"),
        (["--select", "torch=2.14.1", "--select", "flavor=nope"], "error: --select: flavor=nope leaves no target of the 50 that torch=2.14.1 selects"),
        (["--vendor", "amd", "--select", "backend=cuda"], "error: --vendor: amd: no amd target of the 53 that backend=cuda selects"),
    ],
)
def test_a_selection_that_leaves_no_target_says_which_choice_removed_the_last(cli, options, expected, tmp_path):
    for command in (["plan"], ["render", "--out", tmp_path / "dist"]):
        result = cli(*command, *options)
        assert result.code == 2 and result.out == "" and result.err.startswith(expected), result.err


def test_a_platform_no_selected_wheel_exists_for_is_an_error():
    from buildkit.app.targets import Choices, select_targets
    from buildkit.errors import UserError

    with pytest.raises(UserError, match=r"--platform: linux/arm64 leaves no target: the selected targets' wheels exist for"):
        select_targets(Choices(vendor="amd", platforms=("linux/arm64",)))
