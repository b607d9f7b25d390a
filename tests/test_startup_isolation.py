"""docs/reliability.md §7 row 20: nothing a candidate runs can outlive its process or reach another.

Two planted cheats, each a file a candidate's process writes so that a *later*
process runs it at interpreter start-up, before the harness's first line:

* (a) importing the op writes ``sitecustomize.py`` at the candidate tree's root (its
  tree was on ``PYTHONPATH`` with ``site`` on, so its next worker ran it);
* (b) importing the op writes a ``*.pth`` file and a module into the interpreter's
  site-packages (every later process of that interpreter ran it).

Guards: the local executor starts every worker isolated (``runner.core.startup``:
``python -I -S`` and an explicit ``sys.path``), so neither file runs; the harness
proof (``runner.round.tamper_check``) names a start-up file that appeared on the path
and a loadable file a role's process created in its tree; the clock guard
(``runner.worker.bench.timing.check_clocks``) refuses clocks that are not the C builtins.
Each test runs real worker processes in test mode (no torch, well under a second
each) or the proof on real git trees.
"""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

from runner.core.spec import RoundSpec, TimingSettings, save_spec
from runner.executors.base import WorkerJob
from runner.executors.local import LocalExecutor
from runner.round.tamper_check import snapshot, tampering

# The cheat's start-up hook: notes that it ran (the marker) and slows the process clock.
HOOK = """\
import os, time
open(os.environ["CHEAT_MARKER"], "a").write("ran\\n")
_real = time.process_time
time.process_time = lambda: _real() * 0.5
"""

# (a) the candidate's op: at import, it plants the hook at its tree's root.
OP_SITECUSTOMIZE = f"""\
from pathlib import Path
Path(__file__).resolve().parent.joinpath("sitecustomize.py").write_text({HOOK!r})
"""

# (b) the candidate's op: at import, a module and a .pth that imports it, in the
# site-packages of the interpreter that runs it.
OP_PTH = f"""\
import site
from pathlib import Path
sp = Path(site.getsitepackages()[0])
sp.joinpath("zz_cheat_hook.py").write_text({HOOK!r})
sp.joinpath("zz_cheat.pth").write_text("import zz_cheat_hook\\n")
"""


def _tree(path: Path, op: str) -> Path:
    path.mkdir(parents=True)
    (path / "cheat_op.py").write_text(op)
    (path / "k.py").write_text("x = 1\n")
    for args in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "k"],
    ):
        subprocess.run(["git", *args], cwd=path, check=True)
    return path


def _test_job(tmp: Path, name: str, tree: Path, command: str, marker: Path) -> WorkerJob:
    """A worker in test mode on ``tree`` running ``command`` (a real worker process:
    ``python -m runner.worker SPEC OUT``, started as the executor starts every worker)."""
    spec = RoundSpec(
        campaign="t",
        round=2,
        role="candidate",
        pass_index=1,
        level="quick",
        target="example",
        op="gemm_fp8",
        options={},
        shapes=(),
        timing=TimingSettings(),
        mode="test",
        command=command,
    )
    folder = tmp / name
    folder.mkdir(parents=True)
    save_spec(folder / "spec.json", spec)
    env = {"PYTHONPATH": str(tree), "CHEAT_MARKER": str(marker)}  # as the example target's
    return WorkerJob(name, folder / "spec.json", tree, folder / "out", env=env)


def test_a_sitecustomize_a_candidate_wrote_never_runs_in_its_later_workers(
    tmp_path: Path,
) -> None:
    tree = _tree(tmp_path / "cand", OP_SITECUSTOMIZE)
    marker = tmp_path / "marker"
    executor = LocalExecutor()
    before = snapshot({"candidate": tree}, dirs=[])
    first = executor.run_job(
        _test_job(tmp_path / "r", "job-1", tree, "python -c 'import cheat_op'", marker)
    )
    assert first.returncode == 0, first.log_path.read_text()
    assert (tree / "sitecustomize.py").is_file()  # the cheat is planted (no mount namespace)
    assert not marker.exists()  # planted after its own interpreter started
    second = executor.run_job(_test_job(tmp_path / "r", "job-2", tree, "true", marker))
    assert second.returncode == 0, second.log_path.read_text()
    assert not marker.exists(), "the later worker ran the candidate's sitecustomize.py"
    problems = "\n".join(tampering(before, tmp_path / "r", guarded=()))
    assert f"interpreter start-up file {tree / 'sitecustomize.py'} was created" in problems
    assert "harness proof: start-up files" in problems
    assert "the candidate's own processes wrote sitecustomize.py into its tree" in problems


# The focused test's own interpreter (docs/reliability.md §7 row 20, its last gap): the command's
# ``python`` and ``pytest`` start isolated too (``runner.worker.bench.focused_test.write_shims``).
FOCUSED = "python -c 'import k' && python -m pytest --version && pytest --version"


def test_a_sitecustomize_a_candidate_wrote_never_runs_in_its_focused_test(
    tmp_path: Path,
) -> None:
    tree = _tree(tmp_path / "cand", OP_SITECUSTOMIZE)
    marker = tmp_path / "marker"
    executor = LocalExecutor()
    first = executor.run_job(
        _test_job(tmp_path / "r", "job-1", tree, "python -c 'import cheat_op'", marker)
    )
    assert first.returncode == 0 and (tree / "sitecustomize.py").is_file()
    second = executor.run_job(_test_job(tmp_path / "r", "job-2", tree, FOCUSED, marker))
    log = second.log_path.read_text() + (second.out_dir / "test.log").read_text()
    assert json.loads((second.out_dir / "test.json").read_text())["returncode"] == 0, log
    assert "pytest" in log  # the test command ran: its module, pytest by -m and by name
    assert not marker.exists(), "the focused test's python ran the candidate's sitecustomize.py"


def test_a_pth_a_candidate_wrote_into_site_packages_never_runs_in_a_later_worker(
    tmp_path: Path,
) -> None:
    """A venv of its own (no pip: a second), whose site-packages reaches this one's
    through a path line of a ``.pth`` (honoured; only ``import`` lines are not)."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
    python = env_dir / "bin" / "python"
    probe = "import site; print(site.getsitepackages()[0])"
    sp = Path(
        subprocess.run(
            [python, "-c", probe], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    import yaml  # the harness's one third-party import, reached by a path line

    (sp / "host.pth").write_text(str(Path(yaml.__file__).parent.parent) + "\n")
    tree = _tree(tmp_path / "cand", OP_PTH)
    marker = tmp_path / "marker"
    executor = LocalExecutor(python=str(python))
    before = snapshot({"candidate": tree}, dirs=[sp])
    first = executor.run_job(
        _test_job(tmp_path / "r", "job-1", tree, "python -c 'import cheat_op'", marker)
    )
    assert first.returncode == 0, first.log_path.read_text()
    assert (sp / "zz_cheat.pth").is_file()
    marker.unlink(missing_ok=True)
    second = executor.run_job(_test_job(tmp_path / "r", "job-2", tree, "true", marker))
    assert second.returncode == 0, second.log_path.read_text()
    assert json.loads((second.out_dir / "test.json").read_text())["returncode"] == 0
    assert not marker.exists(), "the later worker ran the .pth the candidate planted"
    third = executor.run_job(
        _test_job(tmp_path / "r", "job-3", tree, "python -c 'import k'", marker)
    )
    assert json.loads((third.out_dir / "test.json").read_text())["returncode"] == 0
    assert not marker.exists(), "the focused test's python ran the .pth the candidate planted"
    problems = "\n".join(tampering(before, tmp_path / "r", guarded=()))
    assert f"interpreter start-up file {sp / 'zz_cheat.pth'} was created" in problems


def test_the_proof_names_a_loaded_file_the_snapshot_did_not_have(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "cand", "")
    before = snapshot({"candidate": tree}, dirs=[])
    out = tmp_path / "tmp" / "pass-02-candidate"
    out.mkdir(parents=True)
    for name in ("worker.log", "benchmark.csv"):
        (out / name).write_text("")
    (tree / "planted.py").write_text("x = 2\n")
    record = {
        "role": "candidate",
        "load": {"k.py": before["candidate"].files["k.py"], "planted.py": "1" * 40},
        "end": {},
    }
    (out / "loaded.json").write_text(json.dumps(record))
    problems = "\n".join(tampering(before, tmp_path / "tmp", guarded=()))
    assert "loaded planted.py, not the candidate's (created after the round's snapshot)" in problems


CLOCK_HOOK = """\
import time
_real = time.process_time
time.process_time = lambda: _real() * 0.5  # what a start-up hook did before the harness
from runner.worker.bench import timing
try:
    timing.check_clocks()
except timing.ClockTampered as exc:
    print(exc)
"""


def test_the_clock_guard_refuses_clocks_replaced_before_the_harness_started() -> None:
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run(
        [sys.executable, "-c", CLOCK_HOOK], cwd=root, capture_output=True, text=True, check=True
    )
    assert "clock guard: time.process_time is not the interpreter's C builtin" in proc.stdout


def test_a_script_run_by_the_isolated_python_imports_its_neighbours_after_the_stdlib(
    tmp_path: Path,
) -> None:
    """``python bench/x.py`` as upstream's benchmark is run: its folder is importable
    (``from config import ...``, as a plain ``python`` allows), and a neighbour named
    like a standard-library module does not shadow it (the folder comes after it)."""
    tree = _tree(tmp_path / "cand", "x = 1\n")
    bench = tree / "bench" / "ops"
    bench.mkdir(parents=True)
    (bench / "config.py").write_text("MODELS = ['Llama-2-7B']\n")
    (bench / "json.py").write_text("raise SystemExit('a neighbour shadowed the stdlib')\n")
    (bench / "run_bench.py").write_text(
        "import json\nfrom config import MODELS\nprint('models', json.dumps(MODELS))\n"
    )
    marker = tmp_path / "marker"
    job = _test_job(tmp_path / "r", "job-1", tree, "python bench/ops/run_bench.py", marker)
    done = LocalExecutor().run_job(job)
    log = done.log_path.read_text() + (done.out_dir / "test.log").read_text()
    assert json.loads((done.out_dir / "test.json").read_text())["returncode"] == 0, log
    assert 'models ["Llama-2-7B"]' in log


def test_the_isolated_python_compiles_autotune_sweeps_ahead_once_triton_is_imported(
    tmp_path: Path,
) -> None:
    """A test command's ``python`` sets Triton's autotune sweeps to compile their
    configs side by side (``runner.worker.bench.autotune_compile``) when the command
    imports the autotuner, and imports no Triton for a command that does not."""
    tree = _tree(tmp_path / "cand", "x = 1\n")
    code = (
        "import sys; print('triton before', 'triton' in sys.modules); "
        "from triton.runtime.autotuner import Autotuner; "
        "print('compile ahead', getattr(Autotuner._bench, '__turbo_campaign_compile_all__', 0))"
    )
    marker = tmp_path / "marker"
    job = _test_job(tmp_path / "r", "job-1", tree, f'python -c "{code}"', marker)
    done = LocalExecutor().run_job(job)
    log = done.log_path.read_text() + (done.out_dir / "test.log").read_text()
    assert json.loads((done.out_dir / "test.json").read_text())["returncode"] == 0, log
    assert "triton before False" in log and "compile ahead True" in log, log
