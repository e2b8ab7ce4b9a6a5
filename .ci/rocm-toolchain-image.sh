#!/usr/bin/env bash
# Builds the local ROCm toolchain image from Debian packages: what `buildkit hipify --compile-check
# --toolchain-image` compiles in (gfx942 and newer, which the host's Debian 12 hipcc 5.2 cannot target), and
# the stand-in for the ROCm devel image in the source flavor's build test (tests/integration/test_source_build.py).
#
# Why Debian unstable: it is the only Debian suite with hipBLASLt (libhipblaslt-dev), whose header torch's
# ATen/hip/HIPContextLight.h includes unconditionally; Debian 13 (trixie) stops at HIP 5.7 and has none,
# so no torch extension that includes ATen/cuda/CUDAContext.h could compile there. Unstable has HIP 6.4 with
# clang 21 (gfx942, gfx950, gfx12), seen with `apt-cache madison` in 2026. It moves: the image is built once
# per machine (skipped while present and built by this same script), and its labels record what it holds.
#
# The ROCm math libraries (rocBLAS, rocSOLVER, rocSPARSE, hipBLASLt) carry GPU kernels for every arch, about
# 7 GB installed; a compile check never links them, so only their -dev packages' headers are unpacked
# (apt-get download + dpkg-deb), and the image stays near 1.3 GB. The mirror comes from this machine's apt
# sources, so nothing here names a package host.
set -euo pipefail
tag=${1:-buildkit-ci/rocm-toolchain:debian-sid}
docker=${DOCKER:-docker}
recipe=$(sha256sum "$0" | cut -c1-16)
marker=dev.buildkit.toolchain-recipe
if [ "$("$docker" image inspect --format "{{ index .Config.Labels \"$marker\" }}" "$tag" 2>/dev/null)" = "$recipe" ]; then
  echo "ROCm toolchain image $tag already present (recipe $recipe)"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# hipcc pulls clang, lld, the device libraries and the HIP runtime headers; g++ is the host compiler torch
# uses for .cpp files; the header-only libraries install whole. The rest is what the source flavor's builder
# stage installs (python3.X-venv/-dev, git, cmake, ninja-build, ccache, patchelf), so its apt step finds it.
include=hipcc,g++,binutils,python3,python3-venv,python3-dev,git,cmake,ninja-build,ccache,patchelf,ca-certificates
include+=,libhipblas-common-dev,librocthrust-dev,librocprim-dev,libhipcub-dev,libhiprand-dev,librocrand-dev
# What runs inside the new root once its packages are in, whichever way it was made: the math libraries'
# headers only, and the facts the labels record (/os-python, /hip-version, read back out and removed).
cat > "$work/setup.sh" <<'EOF'
set -eu
cd /tmp
apt-get download -q libhipblas-dev libhipblaslt-dev libhipsparse-dev libhipsolver-dev librocblas-dev librocsparse-dev \
  librocsolver-dev >/dev/null
for deb in ./*.deb; do dpkg-deb --fsys-tarfile "$deb" | tar -x -C / --wildcards './usr/include/*'; done
rm -f ./*.deb /tmp/setup.sh
python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' > /os-python
HIP_PLATFORM=amd hipcc --version 2>/dev/null | sed -n 's/^HIP version: \([0-9]*\.[0-9]*\).*/\1/p' > /hip-version
rm -rf /var/lib/apt/lists/* /var/cache/apt/*
EOF
if [ -n "${BASE_IMAGE_PULL:-}" ]; then
  # A runner that reaches Docker Hub and has no Debian mirror (GitHub's ubuntu-24.04: its archive has no
  # unstable suite): the same packages on Debian unstable's own image.
  cat > "$work/Dockerfile" <<EOF
FROM debian:sid
COPY setup.sh /tmp/setup.sh
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends ${include//,/ } >/dev/null \\
 && sh /tmp/setup.sh
EOF
  "$docker" build --quiet -t "$tag-unlabelled" "$work" >/dev/null
  for fact in os-python hip-version; do "$docker" run --rm "$tag-unlabelled" cat "/$fact" > "$work/$fact"; done
  printf 'FROM %s\nRUN rm /os-python /hip-version\nLABEL %s=%s dev.buildkit.os-python=%s dev.buildkit.hip-version=%s\n' \
    "$tag-unlabelled" "$marker" "$recipe" "$(cat "$work/os-python")" "$(cat "$work/hip-version")" \
    | "$docker" build --quiet -t "$tag" - >/dev/null
  "$docker" image rm "$tag-unlabelled" >/dev/null
else
  sources=/etc/apt/sources.list.d/debian.sources
  [ -f "$sources" ] || sources=/etc/apt/sources.list
  mirror=$(awk '/^URIs:/ { print $2; exit } /^deb / { print $2; exit }' "$sources")
  mmdebstrap --quiet --variant=minbase --include="$include" \
    --aptopt='Acquire::Check-Valid-Until "false"' --aptopt='APT::Install-Recommends "false"' \
    --customize-hook="copy-in $work/setup.sh /tmp" --customize-hook='chroot "$1" sh /tmp/setup.sh' \
    --customize-hook='copy-out /os-python /hip-version '"$work" \
    --customize-hook='rm -f "$1"/os-python "$1"/hip-version' \
    sid "$work/rootfs.tar" "deb $mirror sid main"
  # the root filesystem as the image's one layer (ADD unpacks a local tar), exported as zstd level 1: `docker
  # import` compresses its 1.5 GB with gzip on one core, a minute of a fresh machine's provisioning (33 s this way)
  cat > "$work/Dockerfile" <<EOF
FROM scratch
ADD rootfs.tar /
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
LABEL $marker=$recipe dev.buildkit.os-python=$(cat "$work/os-python") dev.buildkit.hip-version=$(cat "$work/hip-version")
EOF
  "$docker" buildx build --quiet --provenance=false \
    --output "type=docker,name=$tag,compression=zstd,compression-level=1,force-compression=true" "$work" >/dev/null
fi
echo "built ROCm toolchain image $tag: HIP $(cat "$work/hip-version"), Python $(cat "$work/os-python") (recipe $recipe)"
