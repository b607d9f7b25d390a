#!/bin/sh
# Make /opt/ccache/llvm: a mirror of ROCm's LLVM bin folder in which clang and clang++
# run through ccache.  hipcc finds its compiler through HIP_CLANG_PATH, so pointing
# HIP_CLANG_PATH here (entrypoint.sh does) caches every hipcc compile, including
# torch's, which calls hipcc by absolute path.
set -eu
rocm="${ROCM_PATH:-$(/usr/local/bin/find-rocm.sh)}"
llvm="$rocm/lib/llvm/bin"
[ -x "$llvm/clang++" ] || { echo "ccache-wrap: $llvm/clang++ not found; ccache not wired" >&2; exit 0; }
command -v ccache >/dev/null || { echo "ccache-wrap: ccache not installed" >&2; exit 1; }
mkdir -p /opt/ccache/llvm
for tool in "$llvm"/*; do ln -sf "$tool" "/opt/ccache/llvm/$(basename "$tool")"; done
for cc in clang clang++; do
  rm -f "/opt/ccache/llvm/$cc"
  printf '#!/bin/sh\nexec ccache %s "$@"\n' "$llvm/$cc" >"/opt/ccache/llvm/$cc"
  chmod +x "/opt/ccache/llvm/$cc"
done
echo "ccache-wrap: hipcc -> ccache -> $llvm/clang++"
