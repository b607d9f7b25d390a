"""YAML a user wrote (manifest.yaml, a ``campaign set`` VALUE), read within bounds: its
size (``runner.core.limits.MAX_MANIFEST_BYTES``), the nodes it expands to with every
alias counted each time it is used (``MAX_YAML_NODES``: a 1.6 KB alias bomb made
``status`` hang), its nesting depth, and no key given twice in one mapping (PyYAML
keeps the last one silently).  Problems are ConfigError (exit 2) naming where and what
to do, quoting at most a bounded excerpt."""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from runner.core.errors import ConfigError
from runner.core.limits import MAX_MANIFEST_BYTES, MAX_YAML_NODES, clip, excerpt

MAX_DEPTH = 64  # nested mappings/sequences: a manifest uses 3


class _TooBig(Exception):
    """The document expands past the bounds (raised while counting its nodes)."""


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag.endswith(":merge"):
                continue
            if key_node.value in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"the key {excerpt(key_node.value)} is given twice in "
                    "one mapping (only one can count): keep one",
                    key_node.start_mark,
                )
            seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)


def _expanded(node: Node, sizes: dict[int, int], depth: int = 0) -> int:
    """Nodes ``node`` stands for once every alias is expanded (memoised per node, so an
    alias bomb is counted without being expanded)."""
    if id(node) in sizes:
        return sizes[id(node)]
    if depth > MAX_DEPTH:
        raise _TooBig(f"nested more than {MAX_DEPTH} levels deep")
    sizes[id(node)] = 1  # a recursive alias counts once; safe_load refuses it later
    total = 1
    if isinstance(node, SequenceNode):
        children = list(node.value)
    elif isinstance(node, MappingNode):
        children = [n for pair in node.value for n in pair]
    else:
        children = []
    for child in children:
        total += _expanded(child, sizes, depth + 1)
        if total > MAX_YAML_NODES:
            raise _TooBig(
                f"it expands to over {MAX_YAML_NODES:,} values (aliases counted each time "
                "they are used)"
            )
    sizes[id(node)] = total
    return total


def load_yaml(text: str, where: str) -> object:
    """The value of one YAML document ``text`` (``where`` names it in messages), bounded
    in size, expansion and depth, with no duplicate keys; ConfigError otherwise."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_MANIFEST_BYTES:
        raise ConfigError(
            f"{where}: over the {MAX_MANIFEST_BYTES >> 10} KiB a manifest may be; this is "
            "not a campaign manifest: restore it (`campaign init` writes one)"
        )
    loader: _BoundedLoader | None = None
    try:
        loader = _BoundedLoader(text)  # its reader refuses control characters at once
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded(node, {})
        return loader.construct_document(node)
    except _TooBig as exc:
        raise ConfigError(f"{where}: refused, {exc}; write the values out plainly") from None
    except (yaml.YAMLError, RecursionError) as exc:
        raise ConfigError(
            f"{where}: not valid YAML ({clip(str(exc), 600)}); fix the syntax"
        ) from None
    finally:
        if loader is not None:
            loader.dispose()


__all__ = ["MAX_DEPTH", "load_yaml"]
