"""Build hook: ship the example kernel package inside the wheel.

``campaign demo`` (and ``campaign baseline --target example`` without ``--source``) copy
``examples/`` into a fresh git repository.  In a source checkout they read it in place;
an installed wheel carries a copy at ``runner/_examples/`` (``runner.flow.new_campaign.
examples_dir`` looks there first).  Everything else is configured in pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE / "examples"
IGNORE = shutil.ignore_patterns(
    "__pycache__", "*.pyc", "*.egg-info", "build", "dist", ".pytest_cache", ".ruff_cache"
)


class BuildPyWithExamples(build_py):
    """build_py, then copy examples/ to <build_lib>/runner/_examples/ (not for editable
    installs, which read examples/ from the checkout)."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False) or not EXAMPLES.is_dir():
            return
        dest = Path(self.build_lib) / "runner" / "_examples"
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(EXAMPLES, dest, ignore=IGNORE)


setup(cmdclass={"build_py": BuildPyWithExamples})
