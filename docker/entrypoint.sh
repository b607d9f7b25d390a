#!/bin/sh
# Container entry point: discover ROCm (when the image has it), wire ccache for hipcc,
# make the cache folders, then run the given command (default: a shell).
set -eu
here="$(dirname "$0")"
if [ -z "${ROCM_PATH:-}" ] && rocm="$("$here/find-rocm.sh" 2>/dev/null)"; then
  export ROCM_PATH="$rocm"
  export HIP_PATH="${HIP_PATH:-$rocm}"
fi
# hipcc compiles through $HIP_CLANG_PATH/clang++; /opt/ccache/llvm wraps it in ccache
# (made at image build by ccache-wrap.sh).  TURBO_CCACHE=0 switches that off.
if [ "${TURBO_CCACHE:-1}" != 0 ] && [ -z "${HIP_CLANG_PATH:-}" ] && [ -x /opt/ccache/llvm/clang++ ]; then
  export HIP_CLANG_PATH=/opt/ccache/llvm
fi
for dir in "${TRITON_CACHE_DIR:-}" "${CCACHE_DIR:-}"; do
  [ -n "$dir" ] && mkdir -p "$dir" 2>/dev/null || true
done
# A job's worktree copy has a .git file that points at a host path: give
# setuptools-scm (Primus-Turbo's version) a version so an editable rebuild works.
if [ -z "${SETUPTOOLS_SCM_PRETEND_VERSION:-}" ] && [ -e /workspace/target/setup.py ] \
  && ! git -C /workspace/target rev-parse HEAD >/dev/null 2>&1; then
  export SETUPTOOLS_SCM_PRETEND_VERSION=0.0.0+campaign
fi
[ "$#" -gt 0 ] || set -- /bin/bash
exec "$@"
