#!/usr/bin/env bash
# Make this machine ready for the docker tests, from nothing, idempotently:
#   1. docker.io + debootstrap (apt) when missing
#   2. dockerd started when `docker info` fails, and waited for
#   3. the base image (docker/build-base.sh: debootstrap + docker import, no registry)
#   4. the wheelhouse (.whl/: torch CPU 2.13.0, numpy, pyyaml, pytest for cp311) when missing
#   5. the CPU test image turbo-campaign/cpu:py311 (docker/Dockerfile.cpu; cached layers)
# Env: CPU_IMAGE, BASE_IMAGE, PYTHON, DOCKERD_LOG.  Called by .ci/run and by
# `make image-cpu`.  About 3 minutes from nothing on 2 cores; seconds when all is there.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CPU_IMAGE="${CPU_IMAGE:-turbo-campaign/cpu:py311}"
export BASE_IMAGE="${BASE_IMAGE:-turbo-campaign/base:bookworm}"
WHEELHOUSE="$repo/.whl"  # inside the build context (.dockerignore lets only it in)
PYTHON="${PYTHON:-python3}"
DOCKERD_LOG="${DOCKERD_LOG:-/var/log/dockerd.log}"
WHEEL_REQS=(torch==2.13.0 numpy pyyaml pytest "setuptools>=68" wheel)

say() { echo "ci-setup: $*"; }

install_packages() {
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  [[ ${#missing[@]} -eq 0 ]] && return
  say "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

start_daemon() {
  docker info >/dev/null 2>&1 && return
  say "starting dockerd (log: $DOCKERD_LOG)"
  setsid dockerd >"$DOCKERD_LOG" 2>&1 </dev/null &
  for _ in $(seq 60); do
    docker info >/dev/null 2>&1 && { say "dockerd is up"; return; }
    sleep 1
  done
  tail -20 "$DOCKERD_LOG" >&2
  say "dockerd did not come up in 60 s; see $DOCKERD_LOG" >&2
  exit 1
}

fill_wheelhouse() {
  local stamp="$WHEELHOUSE/.complete"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "${WHEEL_REQS[*]}" ]]; then return; fi
  say "filling the wheelhouse $WHEELHOUSE (cp311, manylinux x86_64)"
  mkdir -p "$WHEELHOUSE"
  local log="${TMPDIR:-/tmp}/turbo-campaign-wheelhouse.log"
  "$PYTHON" -m pip download -q -d "$WHEELHOUSE" --only-binary=:all: \
    --python-version 3.11 --implementation cp --abi cp311 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 "${WHEEL_REQS[@]}" >"$log" 2>&1 || {
    tail -30 "$log" >&2
    say "pip download failed (is PyPI reachable?); full log: $log" >&2
    exit 1
  }
  echo "${WHEEL_REQS[*]}" >"$stamp"
}

build_cpu_image() {
  say "building $CPU_IMAGE"
  # Without buildx the client falls back to the classic builder (enough for this file).
  docker buildx version >/dev/null 2>&1 || export DOCKER_BUILDKIT=0
  local log="${TMPDIR:-/tmp}/turbo-campaign-cpu-build.log"
  docker build -f "$repo/docker/Dockerfile.cpu" --build-arg "BASE_IMAGE=$BASE_IMAGE" \
    -t "$CPU_IMAGE" "$repo" >"$log" 2>&1 || {
    tail -30 "$log" >&2
    say "building $CPU_IMAGE failed; full log: $log" >&2
    exit 1
  }
  say "$CPU_IMAGE is $(docker image inspect -f '{{.Id}}' "$CPU_IMAGE")"
}

install_packages
start_daemon
bash "$repo/docker/build-base.sh"
fill_wheelhouse
build_cpu_image
