"""What a report says a failed build step printed: BuildKit's log, as `docker buildx build --progress plain` writes it."""

from __future__ import annotations

from buildkit.adapters.engine.buildx import failure_summary

# A step that exits at once: BuildKit's ruler block for it is empty, its line is only in the step's own output
QUICK_FAILURE = """#14 [image  4/30] RUN python /buildkit/install.py layer /plan/torch.json
#14 0.726 torch-2.15.0+rocm7.14-py3-none-any.whl is 14.0 MB, more than max_layer_size (5.0 MB): that one package
#14 ERROR: process "/bin/bash -o pipefail -c python /buildkit/install.py layer /plan/torch.json" did not complete successfully: exit code: 1
------
 > importing cache manifest from 127.0.0.1:56993/team/pytorch/buildcache:2.15.0-rocm7.14-py3.11-runtime:
------
------
 > [image  4/30] RUN python /buildkit/install.py layer /plan/torch.json:

------
ERROR: failed to solve: process "/bin/bash -o pipefail -c python /buildkit/install.py layer /plan/torch.json" did not complete successfully: exit code: 1
"""
# A step with a tail: BuildKit repeats it between rulers
WITH_TAIL = """#9 [image 2/5] RUN pip install nothing-here
#9 1.20 Looking in indexes: http://127.0.0.1/simple
#9 2.31 ERROR: No matching distribution found for nothing-here
#9 ERROR: process "/bin/sh -c pip install nothing-here" did not complete successfully: exit code: 1
------
 > [image 2/5] RUN pip install nothing-here:
1.20 Looking in indexes: http://127.0.0.1/simple
2.31 ERROR: No matching distribution found for nothing-here
------
ERROR: failed to solve: process "/bin/sh -c pip install nothing-here" did not complete successfully: exit code: 1
"""

# Layer stages running side by side: one fails, BuildKit cancels the others, each leaving an empty ruler block
SIDE_BY_SIDE = """------
 > [layer-device-gfx908 1/1] RUN python /buildkit/install.py layer /plan/device-gfx908.json /layers/device-gfx908:

------
------
 > [layer-device-gfx950 1/1] RUN python /buildkit/install.py layer /plan/device-gfx950.json /layers/device-gfx950:
6.995 rocm_sdk_device_gfx950-7.14.0-py3-none-any.whl is 8.0 MB, more than max_layer_size (5.0 MB)
------
------
 > [layer-torch 1/1] RUN python /buildkit/install.py layer /plan/torch.json /layers/torch:

------
ERROR: failed to solve: process "/bin/bash -o pipefail -c python /buildkit/install.py layer /plan/device-gfx950.json" did not complete
"""


def test_a_step_that_failed_at_once_is_summarised_by_its_own_last_line():
    assert failure_summary(QUICK_FAILURE.splitlines()) == (
        "torch-2.15.0+rocm7.14-py3-none-any.whl is 14.0 MB, more than max_layer_size (5.0 MB): that one package"
    )


def test_a_step_with_a_tail_is_summarised_by_its_last_line():
    assert failure_summary(WITH_TAIL.splitlines()) == "ERROR: No matching distribution found for nothing-here"


def test_without_step_output_the_solver_error_is_the_summary():
    lines = ["ERROR: failed to solve: failed to read dockerfile: open Dockerfile: no such file or directory"]
    assert failure_summary(lines) == lines[0]


def test_the_failed_step_is_found_among_cancelled_ones_whatever_the_log_starts_with():
    lines = SIDE_BY_SIDE.splitlines()
    expected = "rocm_sdk_device_gfx950-7.14.0-py3-none-any.whl is 8.0 MB, more than max_layer_size (5.0 MB)"
    for start in range(4):  # a window that opens inside a block must not pair the rulers the wrong way round
        assert failure_summary(lines[start:]) == expected
