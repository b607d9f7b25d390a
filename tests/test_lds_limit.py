"""A candidate kernel over the target's LDS limit is refused before it is measured
(runner.round.kernel_facts.refuse_over_lds, called by a round before its builds), from a
recorded round's kernel facts; its message names the kernel and its bytes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from runner.core.errors import LdsOverLimit, MeasurementFailed
from runner.core.isa_facts import KernelFacts, parse_amdgcn
from runner.round.kernel_facts import refuse_over_lds

SAMPLE = Path(__file__).parent / "data" / "kernel_facts" / "lds_over_gfx942.json"
KERNEL = "_gemm_fp8_tensorwise_kernel"


def _sample() -> KernelFacts:
    return KernelFacts.from_dict(json.loads(SAMPLE.read_text()))


def test_candidate_over_gfx942_lds_is_refused_naming_kernel_and_bytes() -> None:
    with pytest.raises(LdsOverLimit) as caught:
        refuse_over_lds(_sample())
    text = str(caught.value)
    assert KERNEL in text and "65792 B" in text and "65536 B" in text and "by 256 B" in text
    assert "gemm_fp8_kernel.py" in text
    assert isinstance(caught.value, MeasurementFailed)  # the round closes FAILED, recorded


def test_the_same_kernel_fits_gfx950() -> None:
    refuse_over_lds(replace(_sample(), arch="gfx950"))  # 160 KiB there: nothing raised


def test_the_incumbent_over_the_limit_is_not_the_candidates_fault() -> None:
    facts = _sample()
    swapped = {"incumbent": facts.roles["candidate"], "candidate": facts.roles["incumbent"]}
    refuse_over_lds(replace(facts, roles=swapped))


def test_lds_bytes_come_from_the_compiled_metadata() -> None:
    """The byte count the refusal names is the one the AMDGCN metadata gives."""
    text = "_k:\n\ts_endpgm\n\t.amdgpu_metadata\n---\namdhsa.kernels:\n"
    text += "  - .group_segment_fixed_size: 65792\n\t.end_amdgpu_metadata\n"
    facts = parse_amdgcn(text, "gfx942", num_warps=8)
    assert facts["shared_bytes"] == 65792
