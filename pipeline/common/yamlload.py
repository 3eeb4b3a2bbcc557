"""YAML for the user's config files (sources.yaml, synonyms.yaml, eval cases): ``yaml.safe_load`` that refuses a
duplicate key in a mapping.

YAML forbids duplicate keys but PyYAML silently keeps the last one: two top-level ``sources:`` keys would drop the
first list, a ``path:`` given twice in one source block would keep the second. :func:`safe_load` raises
:class:`DuplicateKeyError` instead, naming the key and both lines; callers prefix the file name.
(Note frontmatter's hardened loader in :mod:`pipeline.common.frontmatter` extends :class:`UniqueKeySafeLoader`.)
"""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["DuplicateKeyError", "UniqueKeySafeLoader", "UniqueKeys", "load_with", "safe_load"]

_MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKeyError(yaml.MarkedYAMLError):
    """A mapping repeats a key. ``str()`` is ``duplicate key 'x' at line 5 (first at line 1); keep one``;
    ``problem`` (``duplicate key 'x'``) and ``problem_mark`` (the repeated key) as for any marked YAML error."""

    def __init__(self, key: str, mark: Any, first_line: int) -> None:
        self.key, self.line, self.first_line = key, mark.line + 1, first_line
        super().__init__(problem=f"duplicate key {key!r}", problem_mark=mark)

    def __str__(self) -> str:
        return f"duplicate key {self.key!r} at line {self.line} (first at line {self.first_line}); keep one"


class UniqueKeys:
    """Loader mixin (before a ``yaml`` loader class in the bases): raise :class:`DuplicateKeyError` when a mapping
    repeats a scalar key."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            first: dict[tuple[str, str], int] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE_TAG:
                    continue
                key = (key_node.tag, key_node.value)
                line = key_node.start_mark.line + 1
                if key in first:
                    raise DuplicateKeyError(key_node.value, key_node.start_mark, first[key])
                first[key] = line
        return super().construct_mapping(node, deep=deep)  # type: ignore[misc]


class UniqueKeySafeLoader(UniqueKeys, yaml.SafeLoader):
    """``yaml.SafeLoader`` that raises :class:`DuplicateKeyError` when a mapping repeats a scalar key."""


def load_with(loader_class: type[yaml.SafeLoader], text: str) -> Any:
    """One YAML document of ``text`` through ``loader_class`` (a SafeLoader subclass), the loader disposed after."""
    loader = loader_class(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` that refuses duplicate keys.

    Raises:
        DuplicateKeyError: a mapping repeats a key (message names the key and both lines).
        yaml.YAMLError: any other invalid YAML.
    """
    return load_with(UniqueKeySafeLoader, text)
