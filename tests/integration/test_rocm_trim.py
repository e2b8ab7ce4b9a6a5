"""An arch-trimmed ROCm runtime image on the real engine, from the ROCm torch TEST DOUBLE (whose torch/lib
is laid out like the real wheel's bundled ROCm libraries): built untrimmed and narrowed to gfx942, once."""

from __future__ import annotations

import pytest

from buildkit.core import labels
from testkit.builds import ROCM_7_2_ARCHS
from testkit.trim_pair import DECLARED, REMOVED, TrimPair, build_trim_pair
from testkit.wheels import rocm_library_layout

pytestmark = pytest.mark.engine

BUNDLED = rocm_library_layout(list(ROCM_7_2_ARCHS), 1, 1)  # the double's library files (paths; sizes unused)
REMOVED_FILES = [path for path in BUNDLED if "gfx" in path and DECLARED not in path]
DECLARED_FILES = [path for path in BUNDLED if DECLARED in path]


@pytest.fixture(scope="module")
def pair(base_image, docker_env, cleanup_images, client, repository, tmp_path_factory) -> TrimPair:
    return build_trim_pair(tmp_path_factory.mktemp("trim"), f"{repository}-trim", docker_env, client)


def test_both_images_build_and_pass_their_smoke_test(pair):
    for which, archs in ((pair.untrimmed, set(ROCM_7_2_ARCHS)), (pair.trimmed, {DECLARED})):
        target = pair.target(which)
        assert target["status"] == "built", (target["error"], target["log_tail"])
        assert target["smoke"]["passed"]
        # the double reports the archs whose kernels are left on disk: gfx942 is still served
        assert set(target["smoke"]["probe"]["compiled_archs"]) == archs
        (arch_check,) = [c for c in target["smoke"]["checks"] if c["name"] == "arch list"]
        assert arch_check["passed"], arch_check


def test_no_undeclared_arch_file_remains_anywhere_and_every_gfx942_file_does(pair):
    untrimmed, trimmed = pair.read["untrimmed"], pair.read["trimmed"]
    assert len(untrimmed.naming_removed) == len(REMOVED_FILES)  # the walk finds them where they are
    assert trimmed.naming_removed == []
    assert len(trimmed.naming_declared) == len(untrimmed.naming_declared) == len(DECLARED_FILES)


def test_label_lists_what_was_trimmed(pair):
    trimmed, untrimmed = pair.read["trimmed"].labels, pair.read["untrimmed"].labels
    assert trimmed[labels.TRIMMED_ARCHS] == ";".join(REMOVED)
    assert trimmed[labels.GPU_ARCHS] == DECLARED
    assert labels.TRIMMED_ARCHS not in untrimmed


def test_no_layer_holds_the_removed_files(pair):
    files, removed = pair.logged_removal()
    assert files == len(REMOVED_FILES)
    # exactly the logged bytes are gone, from the filesystem and from the layers: deleted in the RUN that
    # installed them, not hidden by a later layer
    assert pair.filesystem(pair.untrimmed) - pair.filesystem(pair.trimmed) == removed
    assert pair.target(pair.untrimmed)["layer_bytes"] - pair.target(pair.trimmed)["layer_bytes"] == removed
    assert pair.read["untrimmed"].torch_bytes - pair.read["trimmed"].torch_bytes == removed


def test_trimmed_torch_is_a_third_of_the_untrimmed_at_most(pair):
    """The goal is for images whose torch dominates them, as real ROCm torch (gigabytes) does; next to the
    double, the image's fixed half gigabyte (base, g++, venv) dominates, so the figure asserted is the torch
    package's. docs/benchmarks.md records all three ratios and projects the image's for real wheels."""
    print(
        f"\ntorch {pair.read['trimmed'].torch_bytes} / {pair.read['untrimmed'].torch_bytes} = {pair.torch_ratio:.3f}; "
        f"image {pair.filesystem(pair.trimmed)} / {pair.filesystem(pair.untrimmed)} = {pair.image_ratio:.3f}; "
        f"above the base image {pair.above_base(pair.trimmed)} / {pair.above_base(pair.untrimmed)} = {pair.added_ratio:.3f}"
    )
    assert pair.torch_ratio <= 1 / 3
