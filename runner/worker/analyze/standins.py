"""Importing a measured tree's kernel modules on a machine without its build or its GPU.

A kernel file of a real project imports more than Triton: its package's ``__init__``
loads the compiled extension (Primus-Turbo's ``primus_turbo.pytorch._C``, checked at
a6a16cdc), sibling modules import other DSLs (``flydsl``), and helpers ask the GPU what
it is (``torch.cuda.get_device_properties``).  ``tree_imports`` makes those imports work
for an ahead-of-time compile:

* the tree's packages are imported without running their ``__init__.py`` (only the
  modules a kernel file imports are loaded, never the extension an ``__init__`` pulls in);
* a module that is still missing when a module of the tree imports it (a compiled
  extension, an uninstalled DSL, a file a partial checkout lacks) is stood in for by an
  empty module whose attributes are inert stand-ins; each name stood in for is recorded;
* ``torch.cuda`` answers as the target GPU would (``TargetDevice``): its capability, its
  arch name and its CU count, so a wrapper's ``is_gfx950()`` picks the target's branch.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["DEVICES", "TargetDevice", "tree_imports"]


@dataclass(frozen=True)
class TargetDevice:
    """What ``torch.cuda.get_device_properties`` says on the target (ROCm reports the
    gfx version as the capability: gfx942 is 9.4, gfx950 is 9.5)."""

    major: int
    minor: int
    gcnArchName: str  # torch's attribute name
    multi_processor_count: int
    name: str
    total_memory: int


DEVICES = {
    "gfx942": TargetDevice(9, 4, "gfx942:sramecc+:xnack-", 304, "AMD Instinct MI300X", 192 << 30),
    "gfx950": TargetDevice(9, 5, "gfx950:sramecc+:xnack-", 256, "AMD Instinct MI355X", 288 << 30),
    "sm90": TargetDevice(9, 0, "", 132, "NVIDIA H200", 141 << 30),
}


class _StandInType(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _stand_in(f"{cls.__name__}.{name}")


class _StandIn(metaclass=_StandInType):
    """An inert value: callable, subclassable, any attribute is another stand-in; used
    as a decorator it hands the decorated function back."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return _StandIn()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _stand_in(name)


def _stand_in(name: str) -> type:
    return _StandInType(name, (_StandIn,), {})


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _stand_in(f"{self.__name__}.{name}")


class _StandInLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StandInModule(spec.name)
        module.__path__ = []  # its submodules are stood in for too
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class _Finder(importlib.abc.MetaPathFinder):
    """First: the tree's packages without their ``__init__``; last: stand-ins."""

    def __init__(self, tree: Path, top: str, last: bool, stood_in: list[str]) -> None:
        self.tree, self.top, self.last, self.stood_in = tree, top, last, stood_in

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if self.last:
            if not _imported_by(self.tree):
                return None  # torch's or Triton's own optional imports stay as they are
            self.stood_in.append(fullname)
            return importlib.machinery.ModuleSpec(fullname, _StandInLoader(), is_package=True)
        if fullname != self.top and not fullname.startswith(self.top + "."):
            return None
        folder = self.tree.joinpath(*fullname.split("."))
        if not folder.is_dir():
            return None
        spec = importlib.machinery.ModuleSpec(fullname, None, is_package=True)
        spec.submodule_search_locations = [str(folder)]
        return spec


def _imported_by(tree: Path) -> bool:
    """Whether the import under way was made by a module of ``tree``."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith("<") and name != __file__:
            return Path(name).is_relative_to(tree)
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _cuda_as(device: TargetDevice) -> dict[str, Any]:
    return {
        "is_available": lambda: True,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "get_device_properties": lambda *a, **k: device,
        "get_device_capability": lambda *a, **k: (device.major, device.minor),
        "get_device_name": lambda *a, **k: device.name,
    }


@contextlib.contextmanager
def tree_imports(tree: Path, top: str, arch: str) -> Iterator[list[str]]:
    """Import ``top`` (a package of ``tree``) as described above, for ``arch``; yields
    the list the names stood in for are appended to.  Everything is undone on exit
    except the modules imported meanwhile, which stay in ``sys.modules`` (a compile
    process imports one tree for one arch)."""
    import torch

    stood_in: list[str] = []
    first, last = _Finder(tree, top, False, stood_in), _Finder(tree, top, True, stood_in)
    saved = {k: getattr(torch.cuda, k) for k in _cuda_as(DEVICES[arch])}
    sys.meta_path.insert(0, first)
    sys.meta_path.append(last)
    for key, value in _cuda_as(DEVICES[arch]).items():
        setattr(torch.cuda, key, value)
    try:
        yield stood_in
    finally:
        sys.meta_path.remove(first)
        sys.meta_path.remove(last)
        for key, value in saved.items():
            setattr(torch.cuda, key, value)
