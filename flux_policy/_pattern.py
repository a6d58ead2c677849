"""Pattern and name validation, shared by the loader and both evaluators' request checks.

This module *validates*; it does not match. Each evaluator matches patterns with its
own code (``_reference.py``, ``_index.py``) so a differential test can see a matcher
bug. The pattern language, the same for subjects, actions and resources:

- ``*`` matches any run of characters except ``/`` (possibly empty);
- ``**`` matches any run of characters including ``/`` (possibly empty);
- ``/**/`` matches ``/`` followed by any run ending in ``/``, or a single ``/``;
- every other character is literal.

Tokenisation is left to right, longest first: ``/**/`` before ``**`` before ``*``.
Three or more consecutive ``*`` are refused (ambiguous).

Resource patterns must also be in normal form (no ``.``, ``..`` or empty segment, no
trailing ``/``), because request resources are normalised before matching; a pattern
that is not normal could never match and is a mistake.

Names that start with a group prefix (``role:``, ``group:``) are group references,
never patterns: they must name a declared group and hold no wildcard.
"""

from __future__ import annotations

import re

__all__ = [
    "GROUP_PREFIXES",
    "MAX_NAME_LENGTH",
    "MAX_PATTERN_LENGTH",
    "MAX_WILDCARDS",
    "has_control",
    "is_group_ref",
    "name_problem",
    "pattern_problem",
]

# A request name longer than PATH_MAX is refused: bounds matcher work per request.
MAX_NAME_LENGTH = 4096
# Patterns are author-written; bound them so matching cost stays small and predictable.
MAX_PATTERN_LENGTH = 1024
# Bound on wildcard tokens per pattern: every matcher is O(len(name) x tokens).
MAX_WILDCARDS = 16

GROUP_PREFIXES = ("role:", "group:")

# Control characters, and lone surrogates (not encodable as UTF-8, so no digest).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def has_control(text: str) -> bool:
    """Whether *text* holds a control character or a lone surrogate."""
    return _CONTROL.search(text) is not None


def is_group_ref(entry: str) -> bool:
    """True when *entry* is spelled as a group reference (``role:x``, ``group:x``)."""
    return entry.startswith(GROUP_PREFIXES)


def _common_problem(text: str, limit: int) -> str | None:
    if not text:
        return "is empty"
    if len(text) > limit:
        return f"is longer than {limit} characters"
    if _CONTROL.search(text):
        return "contains a control character or a lone surrogate"
    return None


def name_problem(name: str) -> str | None:
    """Why a request subject/action/resource name is unusable, or ``None``."""
    problem = _common_problem(name, MAX_NAME_LENGTH)
    if problem is not None:
        return problem
    if is_group_ref(name):
        return "names a group; requests name principals, actions and resources"
    return None


def pattern_problem(pattern: str, *, resource: bool) -> str | None:
    """Why *pattern* is not a valid pattern, or ``None`` when it is.

    Args:
        pattern: the pattern text (not a group reference).
        resource: also require the normal form of a resource path.
    """
    problem = _common_problem(pattern, MAX_PATTERN_LENGTH)
    if problem is not None:
        return problem
    if "***" in pattern:
        return "has three or more consecutive '*'"
    if pattern.count("*") - pattern.count("**") > MAX_WILDCARDS:
        return f"has more than {MAX_WILDCARDS} wildcards"
    if is_group_ref(pattern):
        return "group references cannot hold wildcards"
    if resource and pattern != "/":
        segments = pattern.split("/")
        if pattern.startswith("/"):
            segments = segments[1:]
        for segment in segments:
            if segment == "":
                return "is not a normal path (empty segment or trailing '/')"
            if segment in {".", ".."}:
                return f"is not a normal path (a {segment!r} segment)"
    return None
