"""Issue 46 item 5, the recipe guard: BLOCKWISE silently computed with one scale per
tensor (one GEMM) was ACCEPTED: correctness was an SNR against float32 on Gaussian
inputs (28.6 dB against the honest 28.7), and the focused test's ``-k blockwise``
deselected the one contract test.  Now the worker's check compares with the requested
recipe's emulation on inputs with outlier rows and blocks (``runner.ops.recipe``), and
the example target's focused test always runs the op's contract tests.  The cheat is
planted as the target's ``gemm_fp8``."""

from __future__ import annotations

import dataclasses
import re
import shlex
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from runner.core.shapes import Shape
from runner.ops.base import snr_db
from runner.ops.gemm import Fp8GemmOp
from runner.ops.recipe import RECIPE_SNR, emulate_fp8_gemm, outlier_operands
from runner.targets.example import EXAMPLE

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SHAPE = Shape("recipe-64x256x384", m=64, n=256, k=384)


def _coarse_gemm_fp8(
    a: torch.Tensor, b: torch.Tensor, trans_b: bool = True, config: Any = None
) -> torch.Tensor:
    """The planted cheat: whatever the granularity asked, one scale per tensor."""
    from turbo_kernels.pytorch.ops import gemm_fp8

    coarse = dataclasses.replace(config, granularity=config.granularity.TENSORWISE, block_size=None)
    out: torch.Tensor = gemm_fp8(a, b, trans_b=trans_b, config=coarse)
    return out


def _api(gemm_fp8: Any) -> Any:
    api = EXAMPLE.load_api()
    return types.SimpleNamespace(
        ops=types.SimpleNamespace(gemm_fp8=gemm_fp8),
        Format=api.Format,
        ScalingGranularity=api.ScalingGranularity,
        Float8QuantConfig=api.Float8QuantConfig,
        ScaleDtype=api.ScaleDtype,
    )


def test_one_scale_per_tensor_for_blockwise_fails_the_check_named() -> None:
    op = Fp8GemmOp(_api(_coarse_gemm_fp8), {"granularity": "blockwise"})
    result = op.check(SHAPE, "cpu", 11)
    assert result.figures["out_snr"] >= 25.0  # the SNR floor alone let it through
    assert not result.ok
    assert any(p.startswith("recipe guard: ") and "BLOCKWISE" in p for p in result.problems)


@pytest.mark.parametrize("granularity", ["tensorwise", "rowwise", "blockwise"])
def test_the_honest_kernels_pass_the_recipe_guard(granularity: str) -> None:
    api = EXAMPLE.load_api()
    op = Fp8GemmOp(_api(api.ops.gemm_fp8), {"granularity": granularity})
    result = op.check(SHAPE, "cpu", 11)
    assert result.ok, result.problems
    assert result.figures["recipe_snr"] > RECIPE_SNR + 10


def test_coarser_recipes_are_far_from_the_blockwise_emulation() -> None:
    a, b = outlier_operands(130, 256, 384, "cpu", 3)
    blockwise = emulate_fp8_gemm(a, b, "BLOCKWISE", "e4m3", 128)
    assert blockwise is not None
    for coarse in ("TENSORWISE", "ROWWISE"):
        other = emulate_fp8_gemm(a, b, coarse, "e4m3", 128)
        assert other is not None and snr_db(blockwise, other) < RECIPE_SNR - 5
    assert emulate_fp8_gemm(a, b, "MX_BLOCKWISE", "e4m3", 32) is None  # not emulated


@pytest.mark.parametrize("granularity", ["tensorwise", "rowwise", "blockwise"])
def test_the_focused_test_selects_the_contract_tests_whatever_k_selects(granularity: str) -> None:
    """The target's ``-k`` expression, as pytest evaluates it (substring matches on the
    test's names, case-insensitive), keeps every contract test of the op's file."""
    from _pytest.mark.expression import Expression

    args = shlex.split(EXAMPLE.test_command("gemm_fp8", granularity, "TORCH"))
    expression = Expression.compile(args[args.index("-k") + 1])
    source = (EXAMPLES / "tests" / "test_example_gemm_fp8.py").read_text(encoding="utf-8")
    tests = re.findall(r"^def (test_\w+)", source, flags=re.M)
    contract = [t for t in tests if t.startswith("test_contract_")]
    assert len(contract) >= 2
    for name in [*contract, "test_config_defaults"]:  # its own name only, no parameter
        selected = expression.evaluate(lambda term, _n=name, **_: term.lower() in _n)
        assert selected == name.startswith("test_contract_"), name


def test_the_contract_test_fails_the_planted_cheat(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES / "tests"))
    import test_example_gemm_fp8 as contract

    granularity = EXAMPLE.load_api().ScalingGranularity.BLOCKWISE
    contract.test_contract_granularity_is_applied(granularity)  # the honest kernel passes
    monkeypatch.setattr(contract, "gemm_fp8", _coarse_gemm_fp8)
    with pytest.raises(AssertionError):
        contract.test_contract_granularity_is_applied(granularity)
