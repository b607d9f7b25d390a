"""docs/reliability.md §8, the recipe guard: BLOCKWISE silently computed with one scale per
tensor (one GEMM) was ACCEPTED: correctness was an SNR against float32 on Gaussian
inputs (28.6 dB against the honest 28.7), and the focused test's ``-k blockwise``
deselected the one contract test.  Now the worker's check compares with the requested
recipe's emulation on inputs with outlier rows and blocks (``runner.worker.ops.recipe``), and
the example target's focused test always runs the op's contract tests.  The cheat is
planted as the target's ``gemm_fp8``."""

from __future__ import annotations

import dataclasses
import re
import shlex
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch
from _pytest.mark.expression import Expression

from runner.core.shapes import Shape
from runner.targets.example import EXAMPLE
from runner.worker.ops.base import snr_db
from runner.worker.ops.gemm import Fp8GemmOp
from runner.worker.ops.grouped_gemm import Fp8GroupedGemmOp
from runner.worker.ops.quantize import fp8_dtype
from runner.worker.ops.recipe import (
    MX_BLOCK,
    RECIPE_SNR,
    emulate_fp8_gemm,
    fake_quantize,
    mx_operands,
    outlier_operands,
    recipe_snr,
)

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


def _coarse_when_recording(
    a: torch.Tensor, b: torch.Tensor, trans_b: bool = True, config: Any = None
) -> torch.Tensor:
    """The planted cheat: the requested recipe without autograd (where the guard looked),
    one scale per tensor whenever autograd records (a training step)."""
    from turbo_kernels.pytorch.ops import gemm_fp8

    recording = torch.is_grad_enabled() and (a.requires_grad or b.requires_grad)
    if recording:
        config = dataclasses.replace(
            config, granularity=config.granularity.TENSORWISE, block_size=None
        )
    out: torch.Tensor = gemm_fp8(a, b, trans_b=trans_b, config=config)
    return out


def test_a_recipe_switched_on_autograd_mode_fails_the_check_named_with_its_mode() -> None:
    op = Fp8GemmOp(_api(_coarse_when_recording), {"granularity": "blockwise"})
    result = op.check(SHAPE, "cpu", 11)
    assert not result.ok
    problems = [p for p in result.problems if p.startswith("recipe guard: ")]
    assert len(problems) == 1 and "BLOCKWISE" in problems[0], result.problems
    assert problems[0].endswith("(with autograd recording)")
    assert result.figures["recipe_snr"] < RECIPE_SNR


@pytest.mark.parametrize("granularity", ["tensorwise", "rowwise", "blockwise", "mx_blockwise"])
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


def test_coarser_recipes_are_far_from_the_mx_emulation_and_both_rules_near_it() -> None:
    """MX_BLOCKWISE: 1 x 32 blocks, power-of-two scales (upstream a6a16cdc).  On
    ``mx_operands`` a coarser grouping with the same power-of-two rule is far; the other
    power-of-two rule is not (the guard takes the nearer of the two)."""
    a, b = mx_operands(64, 256, 384, "cpu", 3)
    dtype = fp8_dtype("e4m3", "cpu")
    upstream = emulate_fp8_gemm(a, b, "MX_BLOCKWISE", "e4m3", MX_BLOCK)
    ceil = emulate_fp8_gemm(a, b, "MX_BLOCKWISE", "e4m3", MX_BLOCK, rule="ceil")
    assert upstream is not None and ceil is not None
    assert snr_db(upstream, ceil) > RECIPE_SNR - 5
    for rows, cols in ((1, 64), (1, 128), (1, 384), (64, 384)):
        coarse = fake_quantize(a, dtype, rows, cols) @ fake_quantize(b, dtype, 1, cols).t()
        assert recipe_snr(coarse, a, b, "MX_BLOCKWISE", "e4m3", MX_BLOCK) < RECIPE_SNR - 10


def _coarse_mx_gemm_fp8(
    a: torch.Tensor, b: torch.Tensor, trans_b: bool = True, config: Any = None
) -> torch.Tensor:
    """The planted MX cheat: 1 x 128 FP32-scaled blocks instead of 1 x 32 power-of-two
    ones (a third of the scales)."""
    from turbo_kernels.pytorch.ops import gemm_fp8

    coarse = dataclasses.replace(config, granularity=config.granularity.BLOCKWISE, block_size=128)
    out: torch.Tensor = gemm_fp8(a, b, trans_b=trans_b, config=coarse)
    return out


def test_coarser_blocks_for_mx_blockwise_fail_the_check_named() -> None:
    op = Fp8GemmOp(_api(_coarse_mx_gemm_fp8), {"granularity": "mx_blockwise"})
    result = op.check(SHAPE, "cpu", 11)
    assert result.figures["out_snr"] >= 25.0  # the SNR floor alone let it through
    assert not result.ok
    assert any(p.startswith("recipe guard: ") and "MX_BLOCKWISE" in p for p in result.problems)


GROUPED = Shape("recipe-grouped", m=48, n=256, k=384, b=3, group_sizes=(64, 0, 80))


def _grouped_api(grouped_gemm_fp8: Any) -> Any:
    api = EXAMPLE.load_api()
    return types.SimpleNamespace(
        ops=types.SimpleNamespace(grouped_gemm_fp8=grouped_gemm_fp8),
        Format=api.Format,
        ScalingGranularity=api.ScalingGranularity,
        Float8QuantConfig=api.Float8QuantConfig,
        ScaleDtype=api.ScaleDtype,
    )


def _coarse_grouped(
    a: torch.Tensor, b: torch.Tensor, lens: torch.Tensor, trans_b: bool = True, config: Any = None
) -> torch.Tensor:
    """The planted grouped cheat: one scale per tensor, whatever the granularity asked."""
    from turbo_kernels.pytorch.ops import grouped_gemm_fp8

    coarse = dataclasses.replace(config, granularity=config.granularity.TENSORWISE, block_size=None)
    out: torch.Tensor = grouped_gemm_fp8(a, b, lens, trans_b=trans_b, config=coarse)
    return out


@pytest.mark.parametrize("granularity", ["rowwise", "blockwise", "mx_blockwise"])
def test_a_grouped_fp8_gemm_with_one_scale_per_tensor_fails_the_check_named(
    granularity: str,
) -> None:
    op = Fp8GroupedGemmOp(_grouped_api(_coarse_grouped), {"granularity": granularity})
    result = op.check(GROUPED, "cpu", 11)
    assert not result.ok
    assert any(p.startswith("recipe guard: ") and granularity.upper() in p for p in result.problems)
    honest = Fp8GroupedGemmOp(
        _grouped_api(EXAMPLE.load_api().ops.grouped_gemm_fp8), {"granularity": granularity}
    )
    passed = honest.check(GROUPED, "cpu", 11)
    assert passed.ok, passed.problems
    assert passed.figures["recipe_snr"] > RECIPE_SNR + 10


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


QUIET = ("-p", "no:cacheprovider")
GEMM_FP8_TESTS = "tests/test_example_gemm_fp8.py"


@pytest.fixture(scope="module")
def gemm_fp8_test_ids() -> list[str]:
    """Every test id of the example's FP8 GEMM test file, as pytest collects it."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", *QUIET, GEMM_FP8_TESTS],
        cwd=EXAMPLES,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line.split("::", 1)[1] for line in out.splitlines() if "::" in line]


@pytest.mark.parametrize("granularity", ["tensorwise", "rowwise", "blockwise", "mx_blockwise"])
def test_the_focused_test_runs_its_granularity_s_tests_and_no_other_s(
    granularity: str, gemm_fp8_test_ids: list[str]
) -> None:
    """ "blockwise" is a substring of "mx_blockwise": a BLOCKWISE campaign's focused test
    ran every MX_BLOCKWISE test too."""
    args = shlex.split(EXAMPLE.test_command("gemm_fp8", granularity, "TORCH"))
    expression = Expression.compile(args[args.index("-k") + 1])
    chosen = [
        t
        for t in gemm_fp8_test_ids
        if expression.evaluate(lambda term, _t=t, **_: term.lower() in _t.lower())
    ]
    contract = [t for t in chosen if t.startswith("test_contract_")]
    rest = [re.findall(r"[a-z_]+", t.split("[", 1)[1]) for t in chosen if t not in contract]
    assert {w for words in rest for w in words if w.endswith("wise")} == {granularity}, chosen
    assert contract  # every granularity's contract tests run too


def test_the_contract_test_fails_the_planted_cheat(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES / "tests"))
    import test_example_gemm_fp8 as contract

    granularity = EXAMPLE.load_api().ScalingGranularity.BLOCKWISE
    contract.test_contract_granularity_is_applied(granularity)  # the honest kernel passes
    monkeypatch.setattr(contract, "gemm_fp8", _coarse_gemm_fp8)
    with pytest.raises(AssertionError):
        contract.test_contract_granularity_is_applied(granularity)
