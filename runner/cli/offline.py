"""Offline commands: ``campaign score`` and ``campaign gate`` (to be written)."""

from __future__ import annotations

import click

COMMANDS: list[click.Command] = []
