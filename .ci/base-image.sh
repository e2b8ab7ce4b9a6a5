#!/usr/bin/env bash
# Builds the local stand-in for the default runtime base image (python:3.11-slim-bookworm) from Debian
# packages, because tests never pull from Docker Hub: one root filesystem per platform (linux/amd64, and
# linux/arm64 under qemu-user-static), joined into one multi-platform image with buildx. The mirror comes
# from this machine's apt sources, so nothing here names a package host.
# BASE_IMAGE_PULL=1 (a host that reaches Docker Hub and has no Debian mirror, such as a GitHub runner): pull
# the real image for each platform instead, before any test runs. BASE_SUITE=trixie: Debian 13's Python (3.13)
# instead of bookworm's (3.11), from the same mirror (bench.side_by_side's second Python).
set -euo pipefail
tag=${1:-python:3.11-slim-bookworm}
suite=${BASE_SUITE:-bookworm}
docker=${DOCKER:-docker}
platforms=${BASE_PLATFORMS:-linux/amd64 linux/arm64}
if [ -n "${BASE_IMAGE_PULL:-}" ]; then
  for platform in $platforms; do "$docker" pull --quiet --platform "$platform" "$tag" >/dev/null; done
  echo "pulled base image $tag for: $platforms"
  exit 0
fi
marker=dev.buildkit.base-platforms
present() {
  [ "$("$docker" image inspect --format "{{ index .Config.Labels \"$marker\" }}" "$tag" 2>/dev/null)" = "$platforms" ]
}
if present; then
  echo "base image $tag already present for: $platforms"
  exit 0
fi
sources=/etc/apt/sources.list.d/debian.sources
[ -f "$sources" ] || sources=/etc/apt/sources.list
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ "$suite" != bookworm ]; then
  # the machine's main archive for that suite (its security and updates suites are bookworm's)
  awk -v suite="$suite" '/^URIs:/ && !done { print "Types: deb"; print; print "Suites: " suite; print "Components: main"; done = 1 }
                         /^Signed-By:/ && !signed { print; signed = 1 }' "$sources" > "$work/$suite.sources"
  sources=$work/$suite.sources
fi
# one root file system per platform, all at once (arm64's runs under qemu: the slower half)
builds=()
for platform in $platforms; do
  arch=${platform#linux/}
  mmdebstrap --quiet --variant=minbase --architectures="$arch" \
    --include=python3,python3-venv,ca-certificates \
    --aptopt='Acquire::Check-Valid-Until "false"' \
    --customize-hook='chroot "$1" ln -sf /usr/bin/python3 /usr/local/bin/python' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    "$suite" "$work/rootfs-$arch.tar" "$sources" &
  builds+=($!)
done
for build in "${builds[@]}"; do wait "$build"; done
cat > "$work/Dockerfile" <<'EOF'
FROM scratch
ARG TARGETARCH
ADD rootfs-${TARGETARCH}.tar /
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
CMD ["python3"]
EOF
echo "LABEL $marker=\"$platforms\"" >> "$work/Dockerfile"
"$docker" buildx build --quiet --provenance=false --platform "$(echo $platforms | tr ' ' ,)" --load -t "$tag" "$work" >/dev/null
echo "built base image $tag for: $platforms"
