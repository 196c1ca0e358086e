"""A kernel's validity rules as a table a reader can scan.

Each :class:`Rule` is a condition a config must meet and the reason shown when it does not.
A spec's ``check()`` gathers the config, the problem and the derived sizes into one
namespace and reports the first rule, in table order, that the config breaks.

Conditions read the namespace by attribute (``lambda v: v.K % 128 == 0``); messages are
``str.format`` templates over the same names (``"K={K} not a multiple of 128"``), so the
reason shows the values that broke the rule. :func:`tuner.search.enumeration.reason_kind` groups
reasons that differ only in those numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass
from types import SimpleNamespace

Names = SimpleNamespace


@dataclass(frozen=True)
class Rule:
    """``holds(names)`` is true for a config that meets the rule; ``message`` says why one does not."""

    holds: Callable[[Names], object]
    message: str


def one_of(name: str, allowed: Container[object], message: str) -> Rule:
    """The rule that ``name`` takes one of the ``allowed`` values."""
    return Rule(lambda v: getattr(v, name) in allowed, message)


def first_violation(rules: Iterable[Rule], names: Names) -> str | None:
    """The message of the first rule ``names`` breaks, or None if it meets them all."""
    for rule in rules:
        if not rule.holds(names):
            return rule.message.format_map(vars(names))
    return None
