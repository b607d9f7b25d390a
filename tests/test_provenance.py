"""The worker's provenance record: where the target package and its native modules
were loaded from, including a submodule the package rebinds to a copy elsewhere."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.core.files import blob_hash
from runner.worker.bench.provenance import loaded_files, loaded_from


@pytest.fixture
def package(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "tree"
    (root / "pkgprov").mkdir(parents=True)
    (root / "pkgprov" / "__init__.py").write_text("")
    (root / "pkgprov" / "_C.py").write_text("WHERE = 'tree'\n")
    sys.path.insert(0, str(root))
    try:
        yield root
    finally:
        sys.path.remove(str(root))
        for name in [n for n in sys.modules if n.startswith("pkgprov")]:
            del sys.modules[name]


def test_a_submodule_rebound_to_a_copy_elsewhere_is_recorded(package: Path, tmp_path: Path) -> None:
    importlib.import_module("pkgprov._C")
    assert loaded_from(["pkgprov._C"]) == {"pkgprov._C": str(package / "pkgprov" / "_C.py")}
    copy = tmp_path / "elsewhere" / "_C.py"
    copy.parent.mkdir()
    copy.write_text("WHERE = 'elsewhere'\n")
    spec = importlib.util.spec_from_file_location("pkgprov._C", copy)
    assert spec is not None and spec.loader is not None
    outside = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(outside)
    sys.modules["pkgprov"]._C = outside  # type: ignore[attr-defined]  # the package rebinds it
    files = loaded_from(["pkgprov._C"])
    assert files["pkgprov._C"] == str(package / "pkgprov" / "_C.py")
    assert files["pkgprov._C (attribute)"] == str(copy.resolve())


def test_loaded_files_resolve_linked_folders_and_files(package: Path, tmp_path: Path) -> None:
    """A module imported through a linked folder, or from a file that is itself a link
    into the tree, is the tree's file; one whose link leads out of the tree is not."""
    (package / "pkgprov" / "real.py").write_text("X = 1\n")
    outside = tmp_path / "outside.py"
    outside.write_text("X = 2\n")
    (package / "pkgprov" / "linked.py").symlink_to(package / "pkgprov" / "real.py")
    (package / "pkgprov" / "leaves.py").symlink_to(outside)
    via = tmp_path / "via"
    via.symlink_to(package, target_is_directory=True)
    sys.path.insert(0, str(via))
    try:
        for name in ("pkgprov._C", "pkgprov.linked", "pkgprov.leaves"):
            importlib.import_module(name)
    finally:
        sys.path.remove(str(via))
    assert str(sys.modules["pkgprov._C"].__file__).startswith(str(via))
    files = loaded_files(package.resolve())
    assert files == {
        "pkgprov/__init__.py": blob_hash(b""),
        "pkgprov/_C.py": blob_hash(b"WHERE = 'tree'\n"),
        "pkgprov/real.py": blob_hash(b"X = 1\n"),
    }
