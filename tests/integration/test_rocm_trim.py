"""An arch-trimmed ROCm runtime image on the real engine, from the ROCm torch TEST DOUBLE (whose torch/lib
is laid out like the real wheel's bundled ROCm libraries): built untrimmed and narrowed to gfx942, once."""

from __future__ import annotations

import json

import pytest

from buildkit.core import labels
from buildkit.core.trim import names_pattern
from testkit.builds import ROCM_7_2_ARCHS
from testkit.trim_pair import DECLARED, TrimPair, build_trim_pair
from testkit.wheels import rocm_library_layout

pytestmark = pytest.mark.engine

REMOVED = tuple(arch for arch in ROCM_7_2_ARCHS if arch != DECLARED)
BUNDLED = rocm_library_layout(list(ROCM_7_2_ARCHS), 1, 1)  # the double's library files (paths; sizes unused)
REMOVED_FILES = [path for path in BUNDLED if "gfx" in path and DECLARED not in path]
DECLARED_FILES = [path for path in BUNDLED if DECLARED in path]
# Every file path in the image, with the paths that name a removed arch and those that name the declared one
WALK = """
import json, os, re, sys
removed, declared = (re.compile(p) for p in json.loads(sys.argv[1]))
found = {"removed": [], "declared": []}
for top, folders, names in os.walk("/"):
    folders[:] = [f for f in folders if os.path.join(top, f) not in ("/proc", "/sys", "/dev")]
    for name in names:
        path = os.path.join(top, name)
        found["removed"] += [path] if removed.search(path) else []
        found["declared"] += [path] if declared.search(path) else []
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def pair(base_image, docker_env, cleanup_images, client, repository, tmp_path_factory) -> TrimPair:
    return build_trim_pair(tmp_path_factory.mktemp("trim"), f"{repository}-trim", docker_env, client)


def files_naming_archs(client, image_id: str) -> dict[str, list[str]]:
    patterns = json.dumps([names_pattern(REMOVED), names_pattern((DECLARED,))])
    output = client.containers.run(image_id, ["python", "-c", WALK, patterns], user="0", remove=True)
    return json.loads(output.decode().splitlines()[-1])


def test_both_images_build_and_pass_their_smoke_test(pair):
    for which, archs in ((pair.untrimmed, set(ROCM_7_2_ARCHS)), (pair.trimmed, {DECLARED})):
        target = pair.target(which)
        assert target["status"] == "built", (target["error"], target["log_tail"])
        assert target["smoke"]["passed"]
        # the double reports the archs whose kernels are left on disk: gfx942 is still served
        assert set(target["smoke"]["probe"]["compiled_archs"]) == archs
        (arch_check,) = [c for c in target["smoke"]["checks"] if c["name"] == "arch list"]
        assert arch_check["passed"], arch_check


def test_no_undeclared_arch_file_remains_anywhere_and_every_gfx942_file_does(pair, client):
    untrimmed = files_naming_archs(client, pair.target(pair.untrimmed)["image_id"])
    trimmed = files_naming_archs(client, pair.target(pair.trimmed)["image_id"])
    assert len(untrimmed["removed"]) == len(REMOVED_FILES)  # the walk finds them where they are
    assert trimmed["removed"] == []
    assert len(trimmed["declared"]) == len(untrimmed["declared"]) == len(DECLARED_FILES)


def test_label_lists_what_was_trimmed(pair, client):
    trimmed = client.images.get(pair.target(pair.trimmed)["image_id"]).labels
    untrimmed = client.images.get(pair.target(pair.untrimmed)["image_id"]).labels
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
    assert pair.torch_bytes["untrimmed"] - pair.torch_bytes["trimmed"] == removed


def test_trimmed_torch_is_a_third_of_the_untrimmed_at_most(pair):
    """The goal is for images whose torch dominates them, as real ROCm torch (gigabytes) does; next to the
    double, the image's fixed half gigabyte (base, g++, venv) dominates, so the figure asserted is the torch
    package's. docs/benchmarks.md records all three ratios and projects the image's for real wheels."""
    print(f"\ntorch {pair.torch_bytes['trimmed']} / {pair.torch_bytes['untrimmed']} = {pair.torch_ratio:.3f}; "
          f"image {pair.filesystem(pair.trimmed)} / {pair.filesystem(pair.untrimmed)} = {pair.image_ratio:.3f}; "
          f"above the base image {pair.above_base(pair.trimmed)} / {pair.above_base(pair.untrimmed)} = {pair.added_ratio:.3f}")
    assert pair.torch_ratio <= 1 / 3
