"""The tool's own git commits are never signed: a user's ``commit.gpgsign=true`` (with
a gpg program that cannot sign, as on a machine without the key) stops none of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.flow.new_campaign import fresh_example_copy
from runner.store.lineage import Lineage

PATCH = (
    "diff --git a/NOTE b/NOTE\nnew file mode 100644\n--- /dev/null\n+++ b/NOTE\n@@ -0,0 +1 @@\n+x\n"
)


@pytest.fixture
def signing_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "gitconfig"
    config.write_text(
        "[commit]\n\tgpgsign = true\n[tag]\n\tgpgsign = true\n[gpg]\n\tprogram = false\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))


@pytest.mark.usefixtures("signing_user")
def test_the_example_copy_and_a_lineage_commit_are_unsigned(tmp_path: Path) -> None:
    source = fresh_example_copy(tmp_path / "src")
    lineage = Lineage(source, "c", None)
    base = lineage.resolve("HEAD")
    lineage.start(base)
    commit = lineage.make_commit(base, PATCH, "[optimize] one")
    assert lineage.parent(commit) == base
    ref = lineage.keep_change("rolled-back/round-2", PATCH, "kept")
    assert lineage.resolve(ref) != base
