"""``gemm_fp8``: out = a @ b.T and its gradients, every product in the native kernel."""

import torch

import primus_turbo.pytorch._C as native
from primus_turbo.pytorch.core.low_precision import Float8QuantConfig

# A cross-check left on: each forward is computed twice and compared.
VERIFY_FORWARD = True


def matmul_nt(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a (m, k) @ b (n, k).T in float32 through ``_C.matmul_nt``."""
    a32 = a.detach().to(torch.float32).contiguous()
    b32 = b.detach().to(torch.float32).contiguous()
    m, k = a32.shape
    n = b32.shape[0]
    if a32.is_cuda != bool(native.HAS_CUDA):  # the kernel reads its own device's memory
        where = "cuda" if native.HAS_CUDA else "cpu"
        return matmul_nt(a32.to(where), b32.to(where)).to(a.device)
    out = torch.empty(m, n, dtype=torch.float32, device=a32.device)
    native.matmul_nt(a32.data_ptr(), b32.data_ptr(), out.data_ptr(), m, n, k)
    return out


class _GemmFp8(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):  # type: ignore[no-untyped-def]
        ctx.save_for_backward(a, b)
        out = matmul_nt(a, b)
        if VERIFY_FORWARD and not torch.equal(out, matmul_nt(a, b)):
            raise RuntimeError("gemm_fp8: two native calls disagree")
        return out.to(a.dtype)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[no-untyped-def]
        a, b = ctx.saved_tensors
        grad_a = matmul_nt(grad, b.t())
        grad_b = matmul_nt(grad.t(), a.t())
        return grad_a.to(a.dtype), grad_b.to(b.dtype)


def gemm_fp8(
    a: torch.Tensor, b: torch.Tensor, trans_b: bool = True, config: Float8QuantConfig | None = None
) -> torch.Tensor:
    if not trans_b:
        raise NotImplementedError("the fixture implements the NT layout only (trans_b=True)")
    if config is not None and not isinstance(config, Float8QuantConfig):
        raise TypeError(f"config must be a Float8QuantConfig, not {type(config).__name__}")
    out: torch.Tensor = _GemmFp8.apply(a, b)
    return out
