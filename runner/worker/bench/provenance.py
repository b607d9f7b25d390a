"""Where the measured code was loaded from: the worker proves that the target package
and its compiled modules come from the tree under test (``SOURCE_ENV``, set by the
executor) and records it in ``provenance.json``, before a number is taken.

Worker-side: no torch needed, never pydantic.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, cast

from runner.core.artifact_names import PROVENANCE
from runner.core.files import blob_hash, write_json_atomic
from runner.core.loaded_record import LoadedRecord, read_loaded, write_loaded
from runner.core.spec import SOURCE_ENV

if TYPE_CHECKING:
    from runner.targets.base import Target, TargetAPI

log = logging.getLogger("runner.worker")


def loaded_from(names: list[str]) -> dict[str, str | None]:
    """``__file__`` of each module as the process holds it: the ``sys.modules`` entry
    (else a fresh import) and, for a submodule, the parent package's attribute too,
    recorded as ``<name> (attribute)`` when it is another module (code that rebinds
    ``package._C`` to a copy loaded from elsewhere); None when it has no file."""
    import importlib

    def file_of(module: object) -> str | None:
        file = getattr(module, "__file__", None)
        return str(Path(file).resolve()) if file else None

    files: dict[str, str | None] = {}
    for name in names:
        module = sys.modules.get(name)
        parent, _, attr = name.rpartition(".")
        held = getattr(sys.modules.get(parent), attr, None) if parent else None
        if module is None:
            module = held if held is not None else importlib.import_module(name)
        files[name] = file_of(module)
        if held is not None and held is not module:
            files[f"{name} (attribute)"] = file_of(held)
    return files


def check_provenance(target: Target, api: TargetAPI, out_dir: Path) -> None:
    """Prove that the target package and its compiled modules were loaded from the
    tree under test (``SOURCE_ENV``, set by the executor); record where
    each came from in ``provenance.json``.  Anything else (a copy in site-packages,
    a library loaded from elsewhere) stops the pass before a number is taken."""
    expected = os.environ.get(SOURCE_ENV)
    names = [target.package, *target.api_modules, *target.native_modules]
    files = loaded_from(names)
    # the ops module of a package imported from its files: a __file__ (str)
    files[api.ops.__name__] = str(Path(cast(str, api.ops.__file__)).resolve())
    root = Path(expected).resolve() if expected else None
    outside = {
        name: file
        for name, file in files.items()
        if root is not None and (file is None or root not in Path(file).parents)
    }
    error = None
    if outside:
        where = "; ".join(f"{n} from {f or 'no file'}" for n, f in outside.items())
        error = (
            f"the tree under test is {root}, but {where}: the measurement would not be of "
            "that tree; uninstall the other copy (pip uninstall), rebuild the tree, or fix "
            "the import that reaches outside it"
        )
    record = {"expected_root": str(root) if root else None, "modules": files, "error": error}
    write_json_atomic(out_dir / PROVENANCE, record)
    if error:
        log.error("%s", error)
        raise SystemExit(f"provenance: {error}")


def module_paths() -> list[str]:
    """The real path of every module file this process holds in ``sys.modules``.  Each
    folder is resolved once (a worker holds some 1,150 modules in a few hundred
    folders): ``realpath(dir/name)`` is ``realpath(realpath(dir)/name)``, and only a
    name that is itself a link is resolved again."""
    folders: dict[str, str] = {}
    paths: list[str] = []
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not isinstance(file, str) or not file:
            continue
        folder, name = os.path.split(os.path.abspath(file))
        real = folders.get(folder)
        if real is None:
            real = folders[folder] = os.path.realpath(folder)
        path = os.path.join(real, name)
        paths.append(os.path.realpath(path) if os.path.islink(path) else path)
    return paths


def loaded_files(root: Path, paths: list[str] | None = None) -> dict[str, str | None]:
    """Every module file this process loaded from ``root`` (a resolved folder),
    relative to it, with the git blob id of its bytes on disk now (None: the file is
    gone).  ``paths``: ``module_paths()`` when the caller already has them."""
    prefix = str(root).rstrip(os.sep) + os.sep
    files: dict[str, str | None] = {}
    for path in module_paths() if paths is None else paths:
        if not path.startswith(prefix):
            continue
        rel = Path(path[len(prefix) :]).as_posix()
        try:
            files[rel] = blob_hash(Path(path).read_bytes())
        except OSError:
            files[rel] = None
    return dict(sorted(files.items()))


def record_loaded(out_dir: Path, role: str, phase: str) -> None:
    """Add to ``loaded.json`` the files this process loaded from the tree under test
    and from the harness (the ``runner`` package) and their blob ids, as of ``phase``
    ("load": right after the target's import, "end": when the pass is done).  The host
    compares them with the role's own files and its own harness
    (``runner.round.tamper_check``): a file another role changed fails the round."""
    import runner

    expected = os.environ.get(SOURCE_ENV)
    if not expected:
        return
    harness = Path(runner.__file__).resolve().parent
    record = read_loaded(out_dir) or LoadedRecord(role, str(harness))
    paths = module_paths()
    record.tree[phase] = loaded_files(Path(expected).resolve(), paths)
    record.harness[phase] = loaded_files(harness, paths)
    write_loaded(out_dir, record)
