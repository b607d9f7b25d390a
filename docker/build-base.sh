#!/usr/bin/env bash
# Build the local Debian base image without any container registry:
# debootstrap a minimal bookworm root file system, then `docker import` it.
#
#   docker/build-base.sh [--force]
#
# Env: BASE_IMAGE (default turbo-campaign/base:bookworm), DEBIAN_SUITE (bookworm),
#      DEBIAN_MIRROR (http://deb.debian.org/debian).
# Idempotent: does nothing when the image already exists (unless --force).
set -euo pipefail

BASE_IMAGE="${BASE_IMAGE:-turbo-campaign/base:bookworm}"
DEBIAN_SUITE="${DEBIAN_SUITE:-bookworm}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if [[ "${1:-}" != "--force" ]] && docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  echo "build-base: $BASE_IMAGE exists; pass --force to rebuild"
  exit 0
fi
command -v debootstrap >/dev/null || {
  echo "build-base: debootstrap not found; run: apt-get install -y debootstrap" >&2
  exit 2
}

rootfs="$(mktemp -d /var/tmp/turbo-base.XXXXXX)"
trap 'rm -rf "$rootfs"' EXIT
echo "build-base: debootstrap $DEBIAN_SUITE into $rootfs (about 30 s)"
debootstrap --variant=minbase "$DEBIAN_SUITE" "$rootfs" "$DEBIAN_MIRROR" >"$rootfs.log" 2>&1 || {
  tail -20 "$rootfs.log" >&2
  echo "build-base: debootstrap failed; see $rootfs.log (is $DEBIAN_MIRROR reachable?)" >&2
  exit 1
}
rm -f "$rootfs.log"
# Keep the image small: apt lists and caches are refetched by `apt-get update`.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
tar -C "$rootfs" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  --message "debootstrap --variant=minbase $DEBIAN_SUITE $DEBIAN_MIRROR" \
  - "$BASE_IMAGE" >/dev/null
echo "build-base: built $BASE_IMAGE ($(docker image inspect -f '{{.Id}}' "$BASE_IMAGE"))"
