"""docs/primus-turbo.md §8: the build facts of Primus-Turbo's setup.py (checked at a6a16cdc).

``PRIMUS_TURBO_BUILD_CK`` (default on; off turns the CK bindings into stubs),
``PRIMUS_TURBO_FRAMEWORK`` and ``GPU_ARCHS`` (``;``-separated or ``native``; gfx1250 in
the list drops CK and the turbo kernels for the whole build) are parsed as upstream
parses them, are part of the build key, and ``init`` refuses a CK campaign whose builds
would have CK off, naming the variable.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import test_primus_turbo_facts as ptf

from runner.core.errors import ConfigError
from runner.executors.build_cache import build_key
from runner.targets.build_facts import (
    BUILD_CK_ENV,
    FRAMEWORK_ENV,
    build_facts,
    ck_requested,
    parse_gpu_archs,
)
from runner.targets.primus_turbo import PRIMUS_TURBO


@pytest.mark.parametrize(
    ("text", "archs"),
    [
        (None, ("native",)),
        ("  ", ("native",)),
        ("gfx942; GFX950 ;gfx942", ("gfx942", "gfx950")),
        ("native;gfx942", ("native", "gfx942")),
        ("gfx90a;gfx942", ("gfx942",)),  # unsupported: left out, as upstream does
    ],
)
def test_gpu_archs_are_parsed_as_setup_py_parses_them(
    text: str | None, archs: tuple[str, ...]
) -> None:
    assert parse_gpu_archs(text) == archs


@pytest.mark.parametrize(
    ("value", "on"),
    [
        (None, True),
        ("1", True),
        ("yes", True),
        ("0", False),
        ("false", False),
        (" OFF ", False),
        ("", False),
    ],
)
def test_ck_is_on_unless_switched_off(value: str | None, on: bool) -> None:
    assert ck_requested({} if value is None else {BUILD_CK_ENV: value}) is on


def test_gfx1250_drops_ck_and_turbo_for_the_whole_build() -> None:
    plain = build_facts({"GPU_ARCHS": "gfx942"})
    assert (plain.ck, plain.turbo, plain.torch) == (True, True, True)
    mixed = build_facts({"GPU_ARCHS": "gfx942;gfx1250"})
    assert (mixed.ck_requested, mixed.ck, mixed.turbo) == (True, False, False)
    assert build_facts({FRAMEWORK_ENV: "jax"}).frameworks == ("JAX",)


def test_the_switches_reach_the_build_and_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    def key() -> str:
        env = PRIMUS_TURBO.build_env("gfx942")
        facts = PRIMUS_TURBO.build_facts(env)
        return build_key(
            {"setup.py": "x"}, gpu_archs="gfx942", commands=[["b"]], identity="i", facts=facts
        )

    for var in (BUILD_CK_ENV, FRAMEWORK_ENV):
        monkeypatch.delenv(var, raising=False)
    default = key()
    assert PRIMUS_TURBO.build_facts(PRIMUS_TURBO.build_env("gfx942"))["ck_backend"] is True
    monkeypatch.setenv(BUILD_CK_ENV, "0")
    assert PRIMUS_TURBO.build_env("gfx942")[BUILD_CK_ENV] == "0"  # the build sees it
    ck_off = key()
    monkeypatch.setenv(BUILD_CK_ENV, "off")
    assert key() == ck_off  # the same build, spelled otherwise
    monkeypatch.delenv(BUILD_CK_ENV)
    monkeypatch.setenv(FRAMEWORK_ENV, "PYTORCH;JAX")
    with_jax = key()
    assert len({default, ck_off, with_jax}) == 3
    plain = build_key({"a": "b"}, gpu_archs=None, commands=[], identity="i")
    assert plain == build_key({"a": "b"}, gpu_archs=None, commands=[], identity="i", facts={})


@pytest.mark.integration  # a real git checkout
def test_init_refuses_a_ck_campaign_whose_build_has_ck_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout = ptf.make_checkout(tmp_path / "Primus-Turbo")

    def init(backend: str, name: str) -> object:
        return ptf.primus_campaign(
            tmp_path / "campaigns",
            checkout,
            "gemm_fp8",
            granularity="blockwise",
            target_backend=backend,
            target_gpu="gfx942",
            campaign_name=name,
        )

    monkeypatch.setenv(BUILD_CK_ENV, "0")
    with pytest.raises(ConfigError, match="PRIMUS_TURBO_BUILD_CK is off, so the CK bindings"):
        init("CK", "ck")
    assert not (tmp_path / "campaigns" / "ck").exists()
    init("TRITON", "triton")  # CK off does not matter to a Triton campaign
    monkeypatch.delenv(BUILD_CK_ENV)
    monkeypatch.setenv(FRAMEWORK_ENV, "JAX")
    with pytest.raises(ConfigError, match="PRIMUS_TURBO_FRAMEWORK=JAX leaves the PyTorch"):
        init("TRITON", "jax")
    monkeypatch.delenv(FRAMEWORK_ENV)
    init("CK", "ck")
