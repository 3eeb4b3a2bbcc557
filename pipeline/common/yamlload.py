"""YAML for the user's config files (sources.yaml, synonyms.yaml, eval cases): ``yaml.safe_load`` that refuses a
duplicate key in a mapping and an alias bomb.

YAML forbids duplicate keys but PyYAML silently keeps the last one: two top-level ``sources:`` keys would drop the
first list, a ``path:`` given twice in one source block would keep the second. :func:`safe_load` raises
:class:`DuplicateKeyError` instead, naming the key and both lines; callers prefix the file name.
(Note frontmatter's hardened loader in :mod:`pipeline.common.frontmatter` extends :class:`UniqueKeySafeLoader`.)
"""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["MAX_EXPANDED", "BoundedAliases", "DuplicateKeyError", "UniqueKeySafeLoader", "UniqueKeys", "load_with",
           "safe_load"]

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


#: values a config file may hold once its aliases are expanded: a real sources.yaml, synonyms or eval file holds
#: thousands at most; nine nested lists of nine aliases each hold 387 million (a "billion laughs" file)
MAX_EXPANDED = 1_000_000


class BoundedAliases:
    """Loader mixin (before a ``yaml`` loader class in the bases): raise a :class:`yaml.MarkedYAMLError` at the
    alias (``*name``) that makes the document hold more than :data:`MAX_EXPANDED` values once aliases are expanded.

    PyYAML shares an aliased node instead of copying it, so such a document loads in a millisecond; whatever then
    walks it (validating every ``include`` glob of sources.yaml) walks hundreds of millions of values. Before
    session 40 `docsvault sources validate` (and `build`) of such a file ran for minutes at 1.8 GB and more.
    Each node's expanded size is counted once, when it is composed (an alias adds its anchor's size)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        is_alias = self.check_event(yaml.AliasEvent)  # type: ignore[attr-defined]
        alias_mark = self.peek_event().start_mark if is_alias else None  # type: ignore[attr-defined]
        node = super().compose_node(parent, index)  # type: ignore[misc]
        sizes: dict[int, int] = self.__dict__.setdefault("_expanded", {})
        size = sizes.get(id(node))
        if size is None:
            if isinstance(node, yaml.SequenceNode):
                size = 1 + sum(sizes.get(id(c), 1) for c in node.value)
            elif isinstance(node, yaml.MappingNode):
                size = 1 + sum(sizes.get(id(k), 1) + sizes.get(id(v), 1) for k, v in node.value)
            else:
                size = 1
            sizes[id(node)] = size
        if size > MAX_EXPANDED:
            raise yaml.MarkedYAMLError(
                problem=f"more than {MAX_EXPANDED:,} values once its aliases (*name) are expanded (an alias bomb?); "
                        "write the values out or use fewer aliases",
                problem_mark=alias_mark or node.start_mark)
        return node


class UniqueKeySafeLoader(BoundedAliases, UniqueKeys, yaml.SafeLoader):
    """``yaml.SafeLoader`` that raises :class:`DuplicateKeyError` when a mapping repeats a scalar key, and refuses
    an alias bomb (:class:`BoundedAliases`)."""


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
