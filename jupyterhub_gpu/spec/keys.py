"""How one field of the spec is declared: on its dataclass field, once.

``key("consolidateAfter", "duration or 0", read_duration_or_zero, "How long ...",
default=600)`` is a :func:`dataclasses.field` whose metadata holds a :class:`Key`: the
field's YAML key, its type as the reference names it, its reader and its
description. The parser's field list (:data:`jupyterhub_gpu.spec.fields.SCHEMA`), the
typed reads of :class:`jupyterhub_gpu.spec.fields.Section` and the generated reference
(:mod:`jupyterhub_gpu.bundle.reference`) are read from these with :func:`keys_of`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from .sharing import Parameter

REQUIRED = dataclasses.MISSING


@dataclass(frozen=True)
class Key:
    """What the spec says about one dataclass field."""

    #: the field's YAML key, e.g. ``consolidateAfter``
    name: str
    #: its type in the reference's words, e.g. ``duration or 0``
    kind: str
    #: its value read from YAML, or a ValueError saying what is wrong; None: the
    #: section's parser reads it (a list, a block, or a read that needs other fields)
    read: Callable[[Any], Any] | None
    #: what it means, in the reference (a function when the text names the sharing
    #: modes, read when the reference is made: the registry may have grown)
    doc: str | Callable[[], str]
    #: what the default means where it is no value to print (derived, empty or a
    #: block); a sharing parameter's default names the modes taking it
    words: str | Parameter | None = None

    @property
    def description(self) -> str:
        return self.doc if isinstance(self.doc, str) else self.doc()


def key(name: str, kind: str, read: Callable[[Any], Any] | None, doc: str | Callable[[], str],
        *, words: str | Parameter | None = None, default: Any = REQUIRED,
        default_factory: Any = REQUIRED) -> Any:
    """A dataclass field that is the spec field ``name`` (see :class:`Key`)."""
    return dataclasses.field(default=default, default_factory=default_factory,
                             metadata={Key: Key(name, kind, read, doc, words)})


def keys_of(cls: type) -> dict[str, tuple[str, Key]]:
    """The spec fields of dataclass ``cls`` in its order: YAML key -> (its dataclass
    field's name, its :class:`Key`). A field declared without :func:`key` is an error."""
    found: dict[str, tuple[str, Key]] = {}
    for f in dataclasses.fields(cls):
        if Key not in f.metadata:
            raise TypeError(f"{cls.__name__}.{f.name} is no spec field: declare it with key()")
        found[f.metadata[Key].name] = (f.name, f.metadata[Key])
    return found


def default_of(cls: type, name: str) -> object:
    """The default of dataclass ``cls``'s field ``name`` (:data:`REQUIRED` if none)."""
    found = next(f for f in dataclasses.fields(cls) if f.name == name)
    if found.default_factory is not dataclasses.MISSING:
        return found.default_factory()
    return found.default
