#!/usr/bin/env bash
# Builds the local stand-in for the default runtime base image (python:3.11-slim-bookworm) from Debian
# packages, because tests never pull from Docker Hub. The mirror comes from this machine's apt sources,
# so nothing here names a package host.
set -euo pipefail
tag=${1:-python:3.11-slim-bookworm}
docker=${DOCKER:-docker}
if "$docker" image inspect "$tag" >/dev/null 2>&1; then
  echo "base image $tag already present"
  exit 0
fi
sources=/etc/apt/sources.list.d/debian.sources
[ -f "$sources" ] || sources=/etc/apt/sources.list
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mmdebstrap --quiet --variant=minbase \
  --include=python3,python3-venv,ca-certificates \
  --aptopt='Acquire::Check-Valid-Until "false"' \
  --customize-hook='chroot "$1" ln -sf /usr/bin/python3 /usr/local/bin/python' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
  bookworm "$work/rootfs.tar" "$sources"
"$docker" import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["python3"]' \
  "$work/rootfs.tar" "$tag"
echo "built base image $tag"
