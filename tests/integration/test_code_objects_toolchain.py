"""The gfx list of a HIP library whose offload bundles are compressed (clang's CCOB wrapper, zstd), as ROCm
6.2+ toolchains write them with --offload-compress: built by the ROCm toolchain image's hipcc (HIP 6.4),
which this machine's Debian 12 hipcc 5.2 cannot do, and read back by compat check's reader."""

from __future__ import annotations

import pytest

from buildkit.core.upstream.code_objects import COMPRESSED_MAGIC, rocm_code

pytestmark = pytest.mark.engine
KERNEL = '#include <hip/hip_runtime.h>\n__global__ void add(float* a) { a[threadIdx.x] += 1.0f; }\nextern "C" void launch(float* a) { add<<<1, 64>>>(a); }\n'


def test_compressed_offload_bundles_name_their_gfx_targets(client, rocm_toolchain, tmp_path):
    (tmp_path / "k.hip").write_text(KERNEL)
    client.containers.run(
        rocm_toolchain,
        ["hipcc", "-fPIC", "-shared", "--offload-compress", "--offload-arch=gfx942", "--offload-arch=gfx1100", "k.hip", "-o", "k.so"],
        volumes={str(tmp_path): {"bind": "/w", "mode": "rw"}},
        working_dir="/w",
        remove=True,
    )
    library = (tmp_path / "k.so").read_bytes()
    assert COMPRESSED_MAGIC in library  # the bundles are compressed: the reader had to unwrap them
    assert rocm_code(library).archs() == ("gfx942", "gfx1100")
