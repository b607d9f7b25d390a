"""``python -m runner.targets.buildcheck TARGET ROOT``: run inside a role's build
environment after the build; exits 2 with the fix when the environment would import
another copy of the target package than the tree at ROOT (``Target.check_build``)."""

from __future__ import annotations

import sys
from pathlib import Path

from runner.core.errors import ConfigError
from runner.targets.registry import get_target


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m runner.targets.buildcheck TARGET ROOT", file=sys.stderr)
        return 2
    root = Path(args[1]).resolve()
    try:
        get_target(args[0]).check_build(root)
    except ConfigError as exc:
        print(f"build check: {exc}", file=sys.stderr)
        return 2
    print(f"build check: {args[0]} is installed from {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
