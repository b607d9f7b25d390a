#!/bin/sh
# Print the ROCm installation root; exit 1 when there is none.
# Order: TheRock venv wheels (`rocm-sdk path --root`, ROCm lives inside the venv),
# then `hipconfig --rocmpath`, then /opt/rocm.  Never assume /opt/rocm first: in
# TheRock-based images it may be absent or stale.
set -u
if command -v rocm-sdk >/dev/null 2>&1; then
  root="$(rocm-sdk path --root 2>/dev/null)" && [ -n "$root" ] && [ -d "$root" ] && {
    echo "$root"
    exit 0
  }
fi
if command -v hipconfig >/dev/null 2>&1; then
  root="$(hipconfig --rocmpath 2>/dev/null)" && [ -n "$root" ] && [ -d "$root" ] && {
    echo "$root"
    exit 0
  }
fi
if [ -d /opt/rocm ]; then
  echo /opt/rocm
  exit 0
fi
echo "find-rocm: no ROCm found (tried 'rocm-sdk path --root', 'hipconfig --rocmpath'," \
  "/opt/rocm); use a ROCm base image or set ROCM_PATH" >&2
exit 1
