"""Text a user gave, shown as data on a terminal or in markdown: the functions live in
``runner.core.escape`` (below every layer, so the records' writers in ``runner.store``
escape with them too); the renderers import them from here."""

from __future__ import annotations

from runner.core.escape import md_text, printable

__all__ = ["md_text", "printable"]
