"""Build of the fixture's native extension ``primus_turbo.pytorch._C``.

PT_FIXTURE_NATIVE: ``auto`` (default: the CUDA kernel when torch sees a CUDA device
and nvcc is found, else the C kernel, saying why), ``c`` (the C kernel, Python C API,
no torch headers) or ``cuda`` (torch CUDAExtension; fails without nvcc).
"""

import os
import shutil
import sys

from setuptools import Extension, find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))
GEMM = os.path.join("csrc", "kernels", "gemm")


def c_extension():
    return Extension(
        "primus_turbo.pytorch._C",
        sources=[os.path.join(GEMM, "gemm.c")],
        include_dirs=[os.path.join(HERE, GEMM)],
        extra_compile_args=["-O3", "-ffast-math"],  # a vectorised dot product
    )


def cuda_available():
    try:
        import torch
        from torch.utils.cpp_extension import CUDA_HOME
    except ImportError:
        return False, "torch is not importable"
    if not torch.cuda.is_available():
        return False, "torch sees no CUDA device"
    if CUDA_HOME is None or shutil.which("nvcc", path=os.path.join(CUDA_HOME, "bin")) is None:
        return False, "nvcc not found (set CUDA_HOME)"
    return True, ""


def extensions():
    wanted = os.environ.get("PT_FIXTURE_NATIVE", "auto")
    if wanted not in ("c", "cuda", "auto"):
        sys.exit(f"PT_FIXTURE_NATIVE={wanted!r}: use c, cuda or auto")
    if wanted == "c":
        return [c_extension()], {}
    ok, why = cuda_available()
    if not ok:
        if wanted == "cuda":
            sys.exit(f"fixture: PT_FIXTURE_NATIVE=cuda but {why}; use PT_FIXTURE_NATIVE=c")
        print(f"fixture: building the C kernel, not the CUDA one: {why}", flush=True)
        return [c_extension()], {}
    from torch.utils.cpp_extension import BuildExtension, CUDAExtension

    ext = CUDAExtension(
        "primus_turbo.pytorch._C",
        sources=[os.path.join(GEMM, "gemm_cuda.cu")],
        include_dirs=[os.path.join(HERE, GEMM)],
        extra_compile_args={"cxx": ["-O2"], "nvcc": ["-O2"]},
    )
    print("fixture: building the CUDA kernel (gemm_cuda.cu)", flush=True)
    return [ext], {"build_ext": BuildExtension}


ext_modules, cmdclass = extensions()
setup(
    name="primus_turbo",
    version="0.0.1",
    packages=find_packages(include=["primus_turbo*"]),
    ext_modules=ext_modules,
    cmdclass=cmdclass,
)
