"""What one round (or acceptance run) works in: the campaign, the executor, a scratch
folder, its GPUs and builds; the worker jobs and focused tests it starts."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

import runner
from runner.compare.shapes import round_probe
from runner.core import interrupts
from runner.core.artifact_names import FOCUSED_TEST, MEMORY
from runner.core.device_memory import MemoryLog
from runner.core.errors import FocusedTestFailed, Tampered
from runner.core.files import read_json
from runner.core.import_cause import explain_failure
from runner.core.prepare_lock import DeviceLock, device_key, lock_path
from runner.core.shapes import Shape
from runner.core.spec import VISIBILITY, RoundSpec, TimingSettings
from runner.core.step_times import StepTimes
from runner.executors.base import BuiltRole, Executor, WorkerJob
from runner.executors.build_cache import BuildCache
from runner.executors.gpus import allocator_env, detect_vendor, gpu_env
from runner.executors.isolation import interpreter_roots, protect
from runner.executors.jit_cache import JitFolders, jit_root
from runner.judge.peaks import device_memory_for
from runner.measure.beside import NOTHING_BESIDE, BesideWork
from runner.measure.host import job_in, read_memory_log, run_job
from runner.measure.paired import supports_paired
from runner.measure.progress import Progress, StepStarted
from runner.store.campaign import Campaign
from runner.store.leases import acquire, lease_dir
from runner.store.leftovers import job_dir, note_step
from runner.store.lineage import Lineage
from runner.store.manifest import Manifest, branch_name
from runner.store.sealed import SEALED_DIR, sealed_dir
from runner.store.workspace import code_root
from runner.targets.base import Target
from runner.targets.registry import manifest_target

# glibc returns large freed blocks to the OS and page-faults them back on the next
# allocation; every timed call then pays for page faults.  Measured on the CPU demo
# shapes: 40% of the time and a +-20% spread between fresh processes, gone with these
# (+-4%).  Harmless on GPU hosts.  Read by glibc at process start, so set per job.
STEADY_MALLOC = {
    "MALLOC_MMAP_THRESHOLD_": str(1 << 30),
    "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
}


@dataclass(frozen=True)
class RoundPlan:
    """What one round (or acceptance run) is, set once when it opens (``open_round``):
    its campaign, executor, progress, scratch folder, number, level, GPUs, whether it
    is the acceptance, and its step clock.  What its steps make is handed on as values
    or as a new plan (``dataclasses.replace``): the builds and the roles' folders by
    ``runner.round.build.built_roles``, the judge files' expectations by the
    candidate's audit (``runner.round.candidate.Audited.expect``)."""

    campaign: Campaign
    executor: Executor
    progress: Progress
    tmp: Path
    round: int
    level: str
    gpus: tuple[int, ...] = ()
    builds: Mapping[Path, BuiltRole] = field(default_factory=dict)  # tree -> its build
    # The folders of the round's role trees: a job may not write any but its own.
    role_dirs: tuple[Path, ...] = ()
    # each (role, tree)'s JIT cache folder, claimed once for the round (shared by the
    # plans made from this one)
    jit_folders: JitFolders = field(default_factory=JitFolders, compare=False, repr=False)
    # ``campaign accept``'s full validation (runner.flow.accept), not a round
    acceptance: bool = False
    # the wall time of each of its steps (runner.core.step_times), into its record
    times: StepTimes = field(default_factory=StepTimes)

    @property
    def manifest(self) -> Manifest:
        return self.campaign.manifest

    @property
    def gpu_target(self) -> bool:
        """Whether the campaign measures on a GPU (its ``target_gpu`` is not "cpu")."""
        return self.manifest.target_gpu != "cpu"

    @property
    def probe(self) -> Shape | None:
        """The round's unannounced shape (``runner.compare.shapes.round_probe``; a
        tournament's entries share its first round's), None at the full level: what the
        comparison measures and the unannounced-shape guard judges."""
        return round_probe(self.manifest, self.level, self.round)

    @property
    def device_bytes(self) -> int | None:
        """The memory of the campaign's GPU (``runner.judge.peaks.DEVICE_MEMORY``; None
        on the CPU or for an unknown GPU)."""
        gpu = self.manifest.target_gpu
        return None if gpu == "cpu" else device_memory_for(gpu)

    @property
    def quick_gpu(self) -> bool:
        """A quick round on a GPU target: short turns, every pair started at once."""
        return self.level == "quick" and self.gpu_target

    @property
    def short_turns(self) -> bool:
        """Short turns for serving workers (``runner.measure.paired.block_timing``): a quick
        round's, and the acceptance's on a GPU target, whose final role's merged samples
        are the full benchmark (its workers together time each callable about as long
        as one worker at the pinned timing)."""
        return self.gpu_target and (self.level == "quick" or self.acceptance)

    @property
    def memory_prior(self) -> MemoryLog | None:
        """The device-memory reports of this round's own last paired session (a
        re-measurement's prior is the same candidate's first measurement), else of
        this campaign's latest earlier round that measured with serving workers (its
        ``artifacts/memory.json``), or None."""
        own = read_memory_log(self.tmp / MEMORY)
        if own is not None:
            return own
        numbers = []
        for folder in self.campaign.rounds_dir.glob("round-*"):
            tail = folder.name.removeprefix("round-")
            if tail.isdigit() and int(tail) < self.round:
                numbers.append(int(tail))
        for n in sorted(numbers, reverse=True):
            doc = read_memory_log(self.campaign.artifacts_dir(n) / MEMORY)
            if doc is not None:
                return doc
        return None

    @property
    def target(self) -> Target:
        return manifest_target(self.manifest)

    @property
    def lineage(self) -> Lineage:
        m = self.manifest
        return Lineage(Path(m.source), m.campaign_name, branch_name(m))

    def timing(self) -> TimingSettings:
        fields = self.manifest.timing.model_dump()
        return TimingSettings(cache_mode=self.manifest.cache_mode, **fields)

    def guarding(self, roles: Mapping[str, Path]) -> RoundPlan:
        """This plan with the folders of ``roles``' trees read-only to each other's
        builds and jobs (``role_dirs``: ``role_folders``), unless it names them
        already."""
        return self if self.role_dirs else replace(self, role_dirs=role_folders(roles))

    @property
    def template(self) -> RoundSpec:
        """The spec every pass of this round fills in (``RoundSpec.for_pass``): the
        manifest's campaign, target, op and options, the round, its level and timing."""
        m = self.manifest
        return RoundSpec(
            campaign=m.campaign_name,
            round=self.round,
            role="",
            pass_index=0,
            level=self.level,
            target=m.target,
            op=m.target_op,
            options={"granularity": m.granularity, "backend": m.target_backend},
            shapes=(),
            timing=self.timing(),
        )

    def worker_job(
        self,
        name: str,
        spec: RoundSpec,
        tree: Path,
        env: Mapping[str, str] | None = None,
        gpu: int | None = None,
    ) -> WorkerJob:
        """The job for one worker (a pass, or a serving worker of a paired round), on
        ``tree``'s build (when the target has one) and on its own leased GPU: ``gpu`` (a
        shard's), else the round's only one."""
        m = self.manifest
        job_env = {
            **STEADY_MALLOC,
            **(allocator_env(detect_vendor()) if self.gpu_target else {}),
            **self.target.job_env(code_root(tree), m.target_op, m.target_backend),
            **(env or {}),
        }
        if gpu is None and len(self.gpus) == 1:
            gpu = self.gpus[0]
        if gpu is not None and not set(VISIBILITY) & set(env or {}):  # a shard names its own
            job_env.update(gpu_env(gpu, detect_vendor()))
        self.step(name)
        job = job_in(self.tmp, name, spec, tree, job_env, gpu, self.builds.get(tree))
        jit = self.jit_folder(spec.role, tree)
        readonly = self.readonly(tree, interpreter=True)
        return replace(job, readonly=readonly, hidden=self.hidden(), jit_cache=jit)

    def jit_folder(self, role: str, tree: Path) -> Path:
        """The role's own JIT cache folder for ``tree``'s content (as the round's first
        job of the role found it; ``runner.executors.jit_cache``), claimed for the
        round (never pruned while it runs), a new one seeded with copies of the
        lineage's folders; then the folders beyond the size limit that no running
        round claimed are pruned (``runner.executors.jit_cache.JitFolders``)."""
        return self.jit_folders.folder(role, tree, self.campaign.root.parent, self.tmp)

    def readonly(self, tree: Path, *, interpreter: bool = False) -> tuple[Path, ...]:
        """What a job on ``tree`` may not write: the other roles' tree folders, the
        round's scratch folder, the campaign folder, the source repository, the
        harness (the ``runner`` package) and the roles' JIT caches (the job's own
        made writable again by the executor) and the build cache (written by the host
        alone) (docs/reliability.md §7); with ``interpreter`` (every worker job and the
        facts' compile, never a build, whose install writes the prefix) also the
        harness root and the interpreter's prefixes (``interpreter_roots``)."""
        mine = tree.resolve()
        harness = Path(runner.__file__).resolve().parent
        jit = jit_root(self.campaign.root.parent)
        jit.mkdir(parents=True, exist_ok=True)
        builds = BuildCache.for_campaign(self.campaign.root).root
        paths = [
            *self.role_dirs,
            self.tmp,
            self.campaign.root,
            Path(self.manifest.source),
            harness,
            jit,
            builds,
        ]
        paths += interpreter_roots() if interpreter else ()
        # never the job's own tree (or a folder holding it: workspace mode's checkout)
        return tuple(p for p in paths if p.resolve() != mine and p.resolve() not in mine.parents)

    def isolate(self, argv: Sequence[str], tree: Path, writable: Sequence[Path] = ()) -> list[str]:
        """``argv``, a host-side process that imports ``tree``'s code (the kernel facts'
        compile), protected as a job on ``tree`` is and its tree read-only too: the other
        roles, the round, the campaign, the harness and the caches read-only, the sealed
        held-out pick unseen (``runner.executors.isolation.protect``); ``writable``: its
        own output."""
        return protect(
            argv, [*self.readonly(tree, interpreter=True), tree], writable, self.hidden()
        )

    def hidden(self) -> tuple[Path, ...]:
        """What no job of any role may read: the sealed folder (the held-out pick,
        ``runner.store.sealed``; docs/reliability.md §7 row 21) of this campaign and of
        every other under its campaigns root (a copy holds the same pick)."""
        others = sorted(self.campaign.root.parent.glob(f"*/{SEALED_DIR}"))
        return tuple(dict.fromkeys([sealed_dir(self.campaign.root), *others]))

    def step(self, name: str) -> None:
        """Say (and note, for ``campaign status``) which step the round is at."""
        interrupts.check()
        self.progress(StepStarted(f"round-{self.round}", name=name))
        if self.round >= 1:
            note_step(self.campaign.round_dir(self.round), name)


def role_folders(roles: Mapping[str, Path]) -> tuple[Path, ...]:
    """The folder of each role's tree that no other role may write: the worktree's own
    folder (``lineage.worktree``: ``<owned folder>/src``) when it holds no other role's
    tree, else the tree itself."""
    trees = [Path(t).resolve() for t in roles.values()]
    folders = []
    for tree in trees:
        parent = tree.parent
        alone = not any(o != tree and (o == parent or parent in o.parents) for o in trees)
        folders.append(parent if alone and tree.name == "src" else tree)
    return tuple(dict.fromkeys(folders))


def gpu_lease(
    gpus: Sequence[int], campaign: Campaign, n: int
) -> contextlib.AbstractContextManager[object]:
    """Exclusive leases on the GPUs a round measures on (none: nothing to lease)."""
    if not gpus:
        return contextlib.nullcontext()
    return acquire(list(gpus), campaign.name, round=n)


# ---- opening a round -----------------------------------------------------------------
@contextlib.contextmanager
def open_round(
    campaign: Campaign,
    executor: Executor,
    progress: Progress,
    n: int,
    level: str,
    gpus: Sequence[int] = (),
    *,
    acceptance: bool = False,
    workdir: Path | None = None,
    times: StepTimes | None = None,
) -> Iterator[RoundPlan]:
    """The one way a flow opens round ``n`` that measures (baseline, VALIDATE, a
    tournament, acceptance, a reproduction), under ``locked``: exclusive leases on its
    GPUs, then its scratch folder (a job folder removed afterwards, or ``workdir``), then
    its ``RoundPlan``; ``times``: the flow's step recorder when it started before (a new one
    otherwise)."""
    times = times if times is not None else StepTimes()
    with contextlib.ExitStack() as stack:
        with times.step("lease and scratch folder"):
            stack.enter_context(gpu_lease(gpus, campaign, n))
            tmp = workdir or stack.enter_context(job_dir(campaign.root, campaign.name))
        yield RoundPlan(
            campaign,
            executor,
            progress,
            tmp,
            n,
            level,
            tuple(gpus),
            acceptance=acceptance,
            times=times,
        )


# ---- passes --------------------------------------------------------------------------
def run_command_in(
    rnd: RoundPlan,
    name: str,
    tree: Path,
    command: str,
    role: str = "final",
    expect: dict[str, str] | None = None,
    threads: int | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[int, str, Path]:
    """``command`` in ``tree`` through the worker's test mode (job ``name``): its exit
    code, its log and the job's output folder ($TURBO_CAMPAIGN_OUT there).  ``threads``:
    the CPU threads its math libraries may use (``OMP_NUM_THREADS``), for commands run
    side by side; ``env``: more of the job's environment."""
    spec = rnd.template.for_pass(role, 0, [], mode="test", command=command, expect=expect)
    job_env = dict(env or {}) | ({"OMP_NUM_THREADS": str(threads)} if threads else {})
    outcome = run_job(rnd, name, spec, tree, job_env or None)
    log = outcome.out_dir / "test.log"
    text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    if not text and outcome.log_path.exists():
        text = outcome.log_path.read_text(encoding="utf-8", errors="replace")
    return outcome.returncode, text, outcome.out_dir


def run_focused_test(
    rnd: RoundPlan,
    role: str,
    tree: Path,
    threads: int | None = None,
    *,
    expect: Mapping[str, str] | None = None,
) -> tuple[bool, str]:
    """The focused test of ``role``'s tree: passed, and the tail of its log (``threads``:
    ``run_command_in``'s).  ``expect``: what its judge files must hold when the test
    starts (the candidate's audit, ``runner.round.candidate.Audited.expect``); raises
    Tampered when the worker found one not as restored."""
    wanted = dict(expect or {})
    code, text, out = run_command_in(
        rnd, f"test-{role}", tree, rnd.manifest.test_command, role, wanted, threads
    )
    changed = _tampered_files(out) if wanted else []
    if changed:
        raise Tampered(
            f"TAMPERED: the {role}'s judge file(s) {', '.join(changed)} no longer held the "
            "lineage head's bytes restored in its tree when its focused test was to start "
            "(its own build rewrote them: its setup.py runs arbitrary code); the test did "
            "not run, the round is FAILED and nothing was judged; review the candidate "
            "patch before measuring it again",
            guard="judge files",
            problems=changed,
        )
    return code == 0, explain_failure(text[-1500:], text)


def _tampered_files(out: Path) -> list[str]:
    """The judge files the test job said were changed (test.json's ``tampered``)."""
    data = read_json(out / FOCUSED_TEST)
    found = data.get("tampered") if isinstance(data, dict) else None
    return [str(p) for p in found] if isinstance(found, list) else []


def device_lock_file(rnd: RoundPlan) -> Path:
    """The preparation lock of the device ``rnd``'s workers prepare on
    (``runner.core.prepare_lock``), as the local executor names it to them."""
    return lock_path(lease_dir(), device_key(rnd.gpus, os.environ))


_B = TypeVar("_B", bound="BesideStartUp")


class BesideStartUp:
    """Work that must be done before anything is timed, run beside serving workers'
    start-up where it can be.

    When the round measures a GPU target with serving workers, ``work`` runs in a
    thread beside the workers' start-up (imports, compile/JIT, first calls: nothing is
    timed then), and ``beside_work`` makes the first timed turn of every wave wait for
    it (``require``): the caller hands that to the measurement.  Elsewhere (the CPU,
    the Slurm passes) it runs at once: two CPU cores shared by it and worker
    start-up would slow both, and a pass-per-worker executor has no start-up to hide it
    behind.

    ``done``; ``wait()`` raises what ``work`` raised (in the thread, or at once);
    ``seconds`` it ran; leave through ``close()`` (or use
    it as a context manager), which waits for the thread and clears the hook."""

    # whether the host holds the device's preparation lock shared while the work runs
    # beside the start-up (``_device_shared``)
    holds_device = True

    def __init__(self, rnd: RoundPlan, name: str, work: Callable[[], None]) -> None:
        self.rnd = rnd
        self.seconds = 0.0  # how long ``work`` ran
        self._work = work
        self._name = name
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        if self.possible(rnd):
            self._thread = threading.Thread(target=self._run, name=name, daemon=True)
            self._thread.start()
        else:
            self._run()

    @staticmethod
    def possible(rnd: RoundPlan) -> bool:
        """Whether ``rnd`` has a start-up to run work beside: a GPU target measured by
        serving workers."""
        return rnd.gpu_target and supports_paired(rnd.executor)

    @property
    def beside(self) -> bool:
        """Whether it ran beside the workers' start-up (else at once, before them)."""
        return self._thread is not None

    @property
    def beside_work(self) -> BesideWork:
        """What a measurement beside it owes it: the first timed turn of every wave
        waits for it (``require``) where it runs beside the start-up; nothing where it
        ran at once."""
        return BesideWork(waits=(self.require,)) if self.beside else NOTHING_BESIDE

    def _run(self) -> None:
        t0 = time.monotonic()
        beside = "worker start-up" if self._thread is not None else ""
        try:
            with self.rnd.times.step(self._name, beside), self._device_shared():
                self._work()
        except BaseException as exc:  # raised again by wait(), in the round's thread
            self._error = exc
        finally:
            self.seconds = round(time.monotonic() - t0, 1)

    @contextlib.contextmanager
    def _device_shared(self) -> Iterator[None]:
        """Beside the workers' start-up the work runs kernels on their device: the host
        holds the device's preparation lock shared for it, so no worker autotunes while
        it runs (``runner.core.prepare_lock``).  Run at once, nothing is beside it."""
        if self._thread is None or not self.holds_device:
            yield
            return
        with DeviceLock(device_lock_file(self.rnd)) as lock, lock.shared():
            yield

    @property
    def done(self) -> bool:
        return self._thread is None or not self._thread.is_alive()

    def wait(self) -> bool:
        """Wait for the work; True when it passed (here: it raised nothing)."""
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        return True

    def require(self) -> None:
        """Before the first timed turn: wait for the work."""
        self.wait()

    def close(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def __enter__(self: _B) -> _B:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FocusedTest(BesideStartUp):
    """The focused test of one tree, run before anything is timed (``BesideStartUp``:
    on a GPU target with serving workers beside their start-up, which saved the test's
    12-26 s of a round on an H200); the first timed turn raises ``FocusedTestFailed``
    when it failed.  ``expect``: ``run_focused_test``'s.  ``ok``/``tail`` after
    ``wait()``."""

    def __init__(
        self, rnd: RoundPlan, role: str, tree: Path, expect: Mapping[str, str] | None = None
    ) -> None:
        self.ok = False
        self.tail = ""

        def work() -> None:
            self.ok, self.tail = run_focused_test(rnd, role, tree, expect=expect)

        super().__init__(rnd, f"focused-test-{role}", work)

    def wait(self) -> bool:
        return super().wait() and self.ok

    def require(self) -> None:
        """Before the first timed turn: wait for the test; raise FocusedTestFailed when
        it failed."""
        if not self.wait():
            raise FocusedTestFailed("the focused test failed", tail=self.tail)
