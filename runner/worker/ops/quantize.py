"""FP8 quantisation op adapter: ``quantize`` (tensorwise / rowwise / blockwise).

Call as Primus-Turbo's ``ops.quantize_fp8(x, out_dtype, granularity, block_size=bs,
axis=-1)`` on an activation x (M, N) in bf16, returning ``(x_fp8, scale_inv)`` with
``x ~= x_fp8 * scale_inv``; scales along the last dim (rowwise: one per row; blockwise:
1 x block_size blocks).

Memory-bound, scored in ``Forward GB/s`` with bytes = each input read once and each
output written once: x as bf16 (2 bytes/element), the codes (1 byte/element), the
scales as float32 (4 bytes each, counted from the scale tensor the call returns).
Quantisation has no autograd backward, so the Backward columns are ``-`` (no backward
path; dequantisation is a separate op, not this op's backward).

Correctness, against a float32 reference (``scale_inv = amax / fp8_max`` per scaling
group, ``codes = cast(clamp(x / scale_inv))`` with round-to-nearest-even):

* scales: every scale within a relative 2^-20 of the reference (a kernel that
  multiplies by ``1/fp8_max`` instead of dividing rounds differently in the last bit);
* codes: every code within one FP8 ULP of the reference code (neighbours in the code
  order; a one-ULP-different scale can move a value across a rounding boundary), and
  at most 0.1% of the codes differing at all;
* ``max_abs_err`` (the CSV's correctness column): ``max |x_fp8 * scale_inv - x|`` over
  the tensor divided by ``max |x|``, i.e. the worst dequantisation error relative to
  the tensor's absolute maximum (dimensionless).  It must not exceed one ULP of the
  format's top binade relative to its maximum: 2^-3 (E4M3) / 2^-2 (E5M2).

Each check also verifies that the call left its input untouched and that two calls on
the same input agree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from runner.worker.ops.base import Case, CheckResult, InputFlip, OpAdapter, seeded

if TYPE_CHECKING:
    from runner.core.shapes import Shape
    from runner.targets.base import TargetAPI
    from runner.worker.ops.base import Options, Outputs

MANTISSA_BITS = {"e4m3": 3, "e5m2": 2}
SCALE_RTOL = 2.0**-20
MAX_CODE_MISMATCH = 1e-3


def fp8_dtype(fmt: str, device: str) -> torch.dtype:
    """torch FP8 dtype of ``fmt`` for ``device``: the fnuz variants on ROCm gfx942."""
    fnuz = False
    if device != "cpu" and torch.version.hip is not None:
        arch = getattr(torch.cuda.get_device_properties(0), "gcnArchName", "")
        fnuz = arch.startswith("gfx942")
    if fmt == "e4m3":
        return torch.float8_e4m3fnuz if fnuz else torch.float8_e4m3fn
    return torch.float8_e5m2fnuz if fnuz else torch.float8_e5m2


class QuantizeOp(OpAdapter):
    name = "quantize"

    def __init__(self, api: TargetAPI, options: Options) -> None:
        super().__init__(api, options)
        self.granularity = str(options.get("granularity") or "blockwise").upper()
        self.format = str(options.get("format", "e4m3")).lower()
        self.block_size = int(options.get("block_size", 128))

    def call(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gran = getattr(self.api.ScalingGranularity, self.granularity)
        dtype = fp8_dtype(self.format, x.device.type)
        kwargs: dict[str, int] = {"axis": -1}
        if self.granularity == "BLOCKWISE":
            kwargs["block_size"] = self.block_size
        codes, scale_inv = self.api.ops.quantize_fp8(x, dtype, gran, **kwargs)
        return codes, scale_inv

    def inputs(self, shape: Shape, device: str, seed: int) -> torch.Tensor:
        """Activations with a per-row spread of magnitudes (so per-row and per-block
        scales differ from the tensor scale) and a few outliers."""
        gen = seeded(device, seed)
        x = torch.randn(shape.m, shape.n, generator=gen, device=device)
        spread = torch.randint(-4, 5, (shape.m, 1), generator=gen, device=device)
        x *= torch.exp2(spread.float())
        count = (max(1, shape.m // 16),)
        outliers = torch.randint(0, shape.m * shape.n, count, generator=gen, device=device)
        x.view(-1)[outliers] *= 30.0
        return x.to(torch.bfloat16)

    def case(self, shape: Shape, device: str, seed: int) -> Case:
        x = self.inputs(shape, device, seed)
        _codes, scale_inv = self.call(x)
        elements = shape.m * shape.n
        moved = elements * x.element_size() + elements * 1 + scale_inv.numel() * 4

        ref_codes, ref_scale = reference_quantize(
            x.clone(), _codes.dtype, self.granularity, self.block_size
        )

        def forward() -> tuple[torch.Tensor, torch.Tensor]:
            return self.call(x)

        def verify(kind: str, gots: list[Outputs]) -> list[list[str]]:
            if kind != "forward":
                return [[] for _ in gots]
            return [compare_quantized(got[0], got[1], ref_codes, ref_scale) for got in gots]

        flips = {"forward": InputFlip(x)}  # the codes negate, the scales stay
        return Case(
            forward, None, shape.flops_fwd, 0.0, fwd_bytes=float(moved), verify=verify, flips=flips
        )

    def check(self, shape: Shape, device: str, seed: int) -> CheckResult:
        x = self.inputs(shape, device, seed)
        pristine = x.clone()
        codes, scale_inv = self.call(x)
        ref_codes, ref_scale = reference_quantize(
            pristine, codes.dtype, self.granularity, self.block_size
        )
        problems = compare_quantized(codes, scale_inv, ref_codes, ref_scale)
        if not torch.equal(x, pristine):
            problems.append("the call wrote into its input x")
        again_codes, again_scale = self.call(pristine.clone())
        if not (_same(again_codes, codes) and torch.equal(again_scale, scale_inv)):
            problems.append("two calls on the same input differ (race or stale state)")
        err = float("nan")
        if codes.shape == x.shape:
            err = max_abs_err(pristine, codes, scale_inv, ref_scale.shape, self.block_size)
        bound = 2.0 ** -MANTISSA_BITS[self.format]
        if not err <= bound:
            problems.append(f"max_abs_err {err:.4g} above {bound:.4g} (one top-binade ULP)")
        return CheckResult(not problems, {"max_abs_err": err}, problems)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def reference_quantize(
    x: torch.Tensor, dtype: torch.dtype, granularity: str, block_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 reference: (codes (M, N), scale_inv of shape (), (M,) or (M, N/bs))."""
    xf = x.float()
    fp8_max = torch.finfo(dtype).max
    m, n = xf.shape
    if granularity == "TENSORWISE":
        amax = xf.abs().amax()
        groups = xf.reshape(1, 1, -1)
    elif granularity == "ROWWISE":
        amax = xf.abs().amax(dim=1)
        groups = xf.reshape(m, 1, n)
    else:
        kb = -(-n // block_size)
        padded = torch.nn.functional.pad(xf, (0, kb * block_size - n))
        groups = padded.reshape(m, kb, block_size)
        amax = groups.abs().amax(dim=2)
    # Divided by a tensor: torch on CUDA turns division by a Python float into
    # multiplication by its reciprocal, 1 ULP off amax / fp8_max for ~half the groups
    # (seen on an H200: 0.12% of rowwise codes moved); tensor division rounds correctly.
    divisor = torch.tensor(fp8_max, dtype=torch.float32, device=xf.device)
    scale_inv = (amax.clamp(min=1e-12) / divisor).to(torch.float32)
    per_group = scale_inv.reshape(groups.shape[0], groups.shape[1], 1)
    scaled = (groups / per_group).reshape(groups.shape[0], -1)
    scaled = scaled.reshape(m, -1)[:, :n] if granularity == "BLOCKWISE" else scaled.reshape(m, n)
    codes = scaled.clamp(-fp8_max, fp8_max).to(dtype)
    return codes, scale_inv


def _ordered(codes: torch.Tensor) -> torch.Tensor:
    """FP8 codes as integers in value order (sign-magnitude -> two's complement)."""
    bits = codes.view(torch.uint8).to(torch.int32)
    mag = bits & 0x7F
    return torch.where(bits >= 0x80, -mag, mag)


def _align_scales(got: torch.Tensor, ref: torch.Tensor) -> torch.Tensor | None:
    """``got`` in the reference's layout: same numel, either shape-compatible
    (e.g. (M, 1) vs (M,)) or the transposed 2-D layout; None when it cannot be."""
    if got.numel() != ref.numel():
        return None
    if ref.dim() == 2 and got.dim() == 2 and got.shape == ref.t().shape != ref.shape:
        return got.t()
    return got.reshape(ref.shape)


def compare_quantized(
    codes: torch.Tensor,
    scale_inv: torch.Tensor,
    ref_codes: torch.Tensor,
    ref_scale: torch.Tensor,
) -> list[str]:
    """The tolerance of the module docstring; one line per violated rule."""
    if codes.shape != ref_codes.shape or codes.dtype != ref_codes.dtype:
        return [
            f"codes are {codes.dtype} {tuple(codes.shape)}, expected "
            f"{ref_codes.dtype} {tuple(ref_codes.shape)}"
        ]
    problems = []
    scales = _align_scales(scale_inv.detach().float().cpu(), ref_scale.cpu())
    if scales is None:
        problems.append(f"{scale_inv.numel()} scales, expected {ref_scale.numel()}")
    else:
        rel = ((scales - ref_scale.cpu()).abs() / ref_scale.cpu().abs()).max().item()
        if not rel <= SCALE_RTOL:
            problems.append(f"scales differ from the reference by up to {rel:.3g} (relative)")
    dist = (_ordered(codes.cpu()) - _ordered(ref_codes.cpu())).abs()
    if dist.numel() and dist.max().item() > 1:
        problems.append(f"codes differ by up to {dist.max().item()} FP8 ULPs (allowed: 1)")
    frac = (dist > 0).float().mean().item() if dist.numel() else 0.0
    if frac > MAX_CODE_MISMATCH:
        problems.append(f"{100 * frac:.3f}% of codes differ (allowed: {100 * MAX_CODE_MISMATCH}%)")
    return problems


def max_abs_err(
    x: torch.Tensor,
    codes: torch.Tensor,
    scale_inv: torch.Tensor,
    ref_scale_shape: torch.Size,
    block_size: int,
) -> float:
    """max |codes * scale_inv - x| / max |x| (the CSV's ``max_abs_err``)."""
    xf = x.float().cpu()
    m, n = xf.shape
    raw = scale_inv.detach().float().cpu()
    scales = _align_scales(raw, torch.empty(ref_scale_shape)) if raw.numel() > 1 else raw
    if scales is None:
        return float("nan")
    if scales.numel() == 1:
        full = scales.reshape(1, 1)
    elif scales.dim() == 1:
        full = scales.reshape(m, 1)
    else:
        full = scales.repeat_interleave(block_size, dim=1)[:, :n]
    deq = codes.float().cpu() * full
    amax = xf.abs().max().item()
    return (deq - xf).abs().max().item() / amax if amax else 0.0
