"""How a worker's interpreter starts, and the files that could run code before it does
(docs/reliability.md §7 row 20).

A worker starts isolated: ``python -I -S -B -c BOOT runner.worker ARGS``, and so does
the ``python`` (and ``pytest``) of its focused test's command
(``isolated_command``, ``runner.worker.bench.focused_test``).  ``-I``
ignores every ``PYTHON*`` variable and the user's site folder, ``-S`` runs no ``site``
start-up at all: no ``sitecustomize``/``usercustomize`` and no ``import`` line of a
``*.pth`` file, wherever a candidate's earlier process may have written one.  ``BOOT``
then builds ``sys.path`` explicitly: the harness first, the standard library, the
job's own paths (``SYSPATH_ENV``: its tree and its target's ``PYTHONPATH``), and last
the interpreter's site-packages (a venv's, as ``site`` would find them) with the path
lines of their ``*.pth`` files, never their ``import`` lines.  No writable tree comes
before the harness or the standard library.

The host side hashes the start-up files (``startup_files``) of every folder a worker's
``sys.path`` holds before a round's processes start and after, and fails the round
naming a file that appeared or changed (``runner.round.tamper_check``): the local
executor cannot make the interpreter's prefix read-only without root, so it detects.

Standard library only (both sides).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from runner.core.files import blob_hash

SYSPATH_ENV = "TURBO_CAMPAIGN_SYSPATH"  # harness root, then the job's own paths

STARTUP_NAMES = frozenset({"sitecustomize", "usercustomize"})

# Run by ``python -I -S -B -c BOOT MODULE ARGS...`` (self-contained: nothing is on the
# path yet).  The venv handling mirrors ``site.venv`` without its ``addsitepackages``
# (which would run the ``import`` lines of ``*.pth`` files).
BOOT = r"""
import os, sys
def _boot():
    import site
    exe_dir = os.path.dirname(os.path.abspath(sys.executable))
    prefixes = [sys.prefix]
    for conf in (os.path.join(exe_dir, "pyvenv.cfg"),
                 os.path.join(os.path.dirname(exe_dir), "pyvenv.cfg")):
        if os.path.isfile(conf):
            system = "true"
            with open(conf, encoding="utf-8") as f:
                for line in f:
                    key, eq, value = line.partition("=")
                    if eq and key.strip().lower() == "include-system-site-packages":
                        system = value.strip().lower()
            sys.prefix = sys.exec_prefix = os.path.dirname(exe_dir)
            prefixes = [sys.prefix] + ([sys.base_prefix] if system == "true" else [])
            break
    site.PREFIXES[:] = prefixes  # site.getsitepackages() as site would answer in a venv
    given = [p for p in os.environ.get("TURBO_CAMPAIGN_SYSPATH", "").split(os.pathsep) if p]
    sites = []
    for d in site.getsitepackages(prefixes):
        if not os.path.isdir(d) or d in sites:
            continue
        sites.append(d)
        for name in sorted(os.listdir(d)):
            if not name.endswith(".pth"):
                continue
            with open(os.path.join(d, name), encoding="utf-8", errors="replace") as f:
                for line in f:
                    line = line.rstrip()
                    if not line or line.startswith(("#", "import ", "import\t")):
                        continue
                    extra = os.path.join(d, line)
                    if os.path.isdir(extra) and extra not in sites:
                        sites.append(extra)
    global _OWN_AT  # where a command's own folder goes: after the standard library
    _OWN_AT = len(given[:1]) + len(sys.path)
    sys.path[:] = given[:1] + sys.path + given[1:] + sites
    _run()
_boot()
"""
# A worker: ``BOOT MODULE ARGS``.
_RUN_MODULE = r"""
def _run():
    module = sys.argv[1]
    del sys.argv[0]
    import runpy
    runpy.run_module(module, run_name="__main__", alter_sys=True)
"""
# The focused test's ``python``: ``COMMAND_BOOT [-m MODULE | -c CODE | SCRIPT] ARGS``, as
# ``python`` takes them (the flags isolation already sets, and -u, are dropped).  As
# ``python`` does, the script's folder (or, for -m and -c, the working folder) is
# importable: upstream's benchmark scripts import their neighbours (``from config
# import ...``); it goes after the standard library, with the job's own paths, so no
# writable folder comes before the harness or the standard library.  Before the command
# runs, Triton's autotune sweeps are set to compile their configs side by side once the
# command imports the autotuner (``runner.worker.bench.autotune_compile``), and a
# command run beside the workers' start-up holds the device's lock as they do
# (``runner.worker.bench.autotune_alone.join_as_command``).
_RUN_COMMAND = r"""
def _own(folder):
    folder = os.path.abspath(folder)
    if folder not in sys.path:
        sys.path.insert(_OWN_AT, folder)
def _run():
    import runpy
    try:  # the harness is first on the path
        from runner.worker.bench import autotune_alone, autotune_compile
    except ImportError:
        pass
    else:
        joined = autotune_alone.join_as_command()
        autotune_compile.install_on_import(*([autotune_alone.install_in_command] if joined else []))
    args = sys.argv[1:]
    while args and args[0] in ("-I", "-S", "-B", "-s", "-E", "-P", "-u"):
        args.pop(0)
    if args[:1] == ["-m"] and len(args) > 1:
        sys.argv[:] = args[1:]
        _own(os.getcwd())
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    elif args[:1] == ["-c"] and len(args) > 1:
        sys.argv[:] = ["-c", *args[2:]]
        _own(os.getcwd())
        exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__"})
    elif args and not args[0].startswith("-"):
        sys.argv[:] = args
        _own(os.path.dirname(args[0]) or ".")
        runpy.run_path(args[0], run_name="__main__")
    else:
        raise SystemExit("the focused test's python (started isolated, "
                         "docs/reliability.md §7) runs -m MODULE, -c CODE or a script, "
                         "not: " + " ".join(args))
"""
COMMAND_BOOT = _RUN_COMMAND + BOOT
BOOT = _RUN_MODULE + BOOT


def isolated_python(python: str, module: str, args: Sequence[str]) -> list[str]:
    """``python -m module args`` started isolated (see the module's docstring)."""
    return [python, "-I", "-S", "-B", "-c", BOOT, module, *args]


def isolated_command(python: str) -> list[str]:
    """The focused test's ``python`` started isolated: append its arguments as
    ``python`` takes them (``-m MODULE``, ``-c CODE`` or ``SCRIPT``, then theirs)."""
    return [python, "-I", "-S", "-B", "-c", COMMAND_BOOT]


def syspath(harness_root: str | Path, own: Iterable[str | Path]) -> str:
    """``SYSPATH_ENV``'s value: the harness root first, then the job's own paths."""
    paths = [str(harness_root), *(str(p) for p in own if str(p))]
    return os.pathsep.join(dict.fromkeys(paths))


def is_startup_file(name: str) -> bool:
    """A file the interpreter's start-up may run: ``sitecustomize``/``usercustomize``
    (a module, a package or an extension) or any ``*.pth``."""
    stem = name.split(".", 1)[0]
    return name.endswith(".pth") or stem in STARTUP_NAMES


def interpreter_dirs() -> list[Path]:
    """The folders this interpreter's start-up reads (its ``sys.path``, its site
    folders, the user's site folder): a local worker runs this interpreter."""
    import site
    import sysconfig

    found = [*sys.path, *site.getsitepackages(), site.getusersitepackages()]
    found += [sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib")]
    return [Path(p) for p in dict.fromkeys(found) if p and Path(p).is_dir()]


def startup_files(dirs: Iterable[Path]) -> dict[str, str]:
    """Absolute path -> blob id of every start-up file directly in each of ``dirs``
    (a ``sitecustomize/`` package by its ``__init__.py``)."""
    return _hashed_entries(dirs, _startup_entry)


def _startup_entry(entry: Path) -> tuple[Path, Path | str] | None:
    """A start-up file under its own path, a package hashed by its ``__init__.py``."""
    if not is_startup_file(entry.name):
        return None
    return entry, (entry / "__init__.py" if entry.is_dir() else entry)


# what ``import NAME`` finds directly in a folder: a module, an extension, a package
MODULE_SUFFIXES = (".py", ".pyc", ".so", ".pyd")
NAMESPACE = "(folder)"  # a folder without ``__init__.py``: an implicit namespace package


def shadowing_dirs(harness_root: Path) -> list[Path]:
    """The folders a worker's ``sys.path`` holds before the job's own paths and
    site-packages (``BOOT``): the harness root and the standard library's."""
    import sysconfig

    stdlib = [sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")]
    dynload = [p for p in sys.path if p.endswith("lib-dynload")]
    found = [harness_root, *(Path(p) for p in [*stdlib, *dynload])]
    return [p for p in dict.fromkeys(found) if p.is_dir()]


def importable_files(dirs: Iterable[Path]) -> dict[str, str]:
    """Absolute path -> blob id of everything ``import`` could find directly in each of
    ``dirs`` (a package by its ``__init__.py``, a namespace folder as ``NAMESPACE``):
    a file that appears or changes there shadows a module of every later worker."""
    return _hashed_entries(dirs, _importable_entry)


def _importable_entry(entry: Path) -> tuple[Path, Path | str] | None:
    """A module under its own path, a package under its ``__init__.py``'s, a folder
    without one as ``NAMESPACE``; hidden entries and bytecode caches are no module."""
    if entry.name.startswith(".") or entry.name == "__pycache__":
        return None
    if entry.is_dir():
        init = entry / "__init__.py"
        return (init, init) if init.is_file() else (entry, NAMESPACE)
    return (entry, entry) if entry.name.endswith(MODULE_SUFFIXES) else None


def _hashed_entries(
    dirs: Iterable[Path], pick: Callable[[Path], tuple[Path, Path | str] | None]
) -> dict[str, str]:
    """The one walk both listings take: each entry directly in each of ``dirs`` (each
    folder once, an unreadable one skipped) that ``pick`` keeps, as ``pick``'s path ->
    the blob id of ``pick``'s file (``"(unreadable)"`` where it cannot be read), or
    ``pick``'s text where it gives one instead of a file."""
    files: dict[str, str] = {}
    for folder in dict.fromkeys(Path(d) for d in dirs):
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            continue
        for entry in entries:
            picked = pick(entry)
            if picked is None:
                continue
            key, what = picked
            files[str(key)] = what if isinstance(what, str) else _blob_id(what)
    return files


def _blob_id(file: Path) -> str:
    """``file``'s blob id, or ``"(unreadable)"`` where it cannot be read."""
    try:
        return blob_hash(file.read_bytes())
    except OSError:
        return "(unreadable)"
