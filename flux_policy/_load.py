"""Loading policies from a file, a string or a dict, and combining several.

Guarantee: a returned :class:`Policy` is fully validated (see ``_policy.py``); any
problem raises :class:`PolicyLoadError` naming the rule (or group) and the field, and
nothing partial is returned. The only IO is reading the one file the caller names.
Not guaranteed: that the policy means what its author intended.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import re
import stat
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import pydantic

from flux_policy._build import build_policy, fail
from flux_policy._canonical import policy_digest
from flux_policy._exceptions import PolicyLoadError, PolicyLoadReason
from flux_policy._model import PolicyModel
from flux_policy._policy import Policy, Rule

__all__ = [
    "combine_policies",
    "load_policies",
    "load_policy",
    "load_policy_dict",
    "load_policy_string",
]

_MAX_POLICY_BYTES = 8 * 1024 * 1024  # bounds the read and the TOML parse
_UNION_TAG = re.compile(r"^(bool|int|str|datetime|list\[.*\]|union\[.*\])$")


def load_policy(path: str | os.PathLike[str]) -> Policy:
    """Read and validate the TOML policy file *path* (the caller names it).

    Raises:
        PolicyLoadError: unreadable, too large, not UTF-8 TOML, or invalid.
    """
    source = os.fspath(path)
    if not isinstance(source, str):
        raise TypeError("path must be a str or os.PathLike[str]")
    try:
        data = _read_regular(source, _MAX_POLICY_BYTES + 1)
    except OSError as exc:
        raise fail(PolicyLoadReason.IO, exc.strerror or "unreadable", source) from exc
    except ValueError:  # os.open: a NUL byte in the path
        raise fail(PolicyLoadReason.IO, "path contains a NUL byte", source) from None
    if len(data) > _MAX_POLICY_BYTES:
        raise fail(PolicyLoadReason.TOO_LARGE, "policy file too large", source)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise fail(PolicyLoadReason.ENCODING, "policy file is not UTF-8", source) from exc
    return load_policy_string(text, source=source)


def _read_regular(path: str, limit: int) -> bytes:
    """At most *limit* bytes of the regular file *path*. Opened non-blocking and checked
    before reading: a FIFO (whose open would wait for a writer, and whose read for data)
    or a device is refused with ``OSError``, never waited on."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size < limit:
            chunk = os.read(fd, limit - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def load_policy_string(text: str, *, source: str = "<string>") -> Policy:
    """Parse and validate TOML policy *text*; *source* labels errors."""
    if not isinstance(text, str):
        raise TypeError("text must be a str")
    if len(text) > _MAX_POLICY_BYTES:
        raise fail(PolicyLoadReason.TOO_LARGE, "policy text too large", source)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise fail(PolicyLoadReason.SYNTAX, f"invalid TOML: {exc}", source) from exc
    except ValueError as exc:  # tomllib lets int()'s digit limit escape untranslated
        raise fail(PolicyLoadReason.SYNTAX, "invalid TOML: number too long", source) from exc
    except RecursionError as exc:  # tomllib recurses once per nested array/inline table
        raise fail(PolicyLoadReason.SYNTAX, "invalid TOML: nested too deeply", source) from exc
    return load_policy_dict(data, source=source)


def load_policy_dict(data: Mapping[str, Any], *, source: str = "<dict>") -> Policy:
    """Validate a policy document already parsed into a mapping (as TOML would give)."""
    if not isinstance(data, Mapping):
        raise TypeError("data must be a mapping")
    try:
        model = PolicyModel.model_validate(dict(data))
    except pydantic.ValidationError as exc:
        raise _from_validation(exc, data, source) from exc
    return build_policy(model, source)


def load_policies(paths: Iterable[str | os.PathLike[str]]) -> Policy:
    """Load each file and combine them into one policy (see :func:`combine_policies`)."""
    return combine_policies([load_policy(p) for p in paths])


def combine_policies(policies: Sequence[Policy], *, source: str = "<combined>") -> Policy:
    """Combine several policies into one: the union of their groups and rules.

    Each input must be self-contained (its rules reference only its own groups). They
    must declare the same trust order; a group defined in several must have the same
    members; rule ids must be unique across all.

    Raises:
        PolicyLoadError: TRUST_MISMATCH, DUPLICATE_GROUP or DUPLICATE_ID.
        ValueError: no policy given.
    """
    if not policies:
        raise ValueError("combine_policies needs at least one policy")
    first = policies[0]
    groups: dict[str, tuple[str, ...]] = {}
    rules: dict[str, Rule] = {}
    for policy in policies:
        if policy.trust_levels != first.trust_levels:
            raise fail(
                PolicyLoadReason.TRUST_MISMATCH,
                "combined policies declare different trust orders",
                source,
                field="trust_levels",
            )
        for name, members in policy.groups.items():
            if name in groups and groups[name] != members:
                raise fail(
                    PolicyLoadReason.DUPLICATE_GROUP,
                    "group defined differently in combined policies",
                    source,
                    rule=name,
                    field=f"groups.{name}",
                )
            groups[name] = members
        for rule in policy.rules:
            if rule.id in rules:
                raise fail(
                    PolicyLoadReason.DUPLICATE_ID,
                    "rule id used in more than one combined policy",
                    source,
                    rule=rule.id,
                    field="id",
                )
            rules[rule.id] = rule
    merged = Policy(
        version=first.version,
        trust_levels=first.trust_levels,
        groups=MappingProxyType(dict(sorted(groups.items()))),
        rules=tuple(sorted(rules.values(), key=lambda r: r.id)),
    )
    return dataclasses.replace(merged, digest=policy_digest(merged))


def _from_validation(
    exc: pydantic.ValidationError, data: Mapping[str, Any], source: str
) -> PolicyLoadError:
    err = exc.errors()[0]
    loc = [p for i, p in enumerate(err["loc"]) if i == 0 or not _is_tag(p)]
    reason = {
        "extra_forbidden": PolicyLoadReason.UNKNOWN_KEY,
        "missing": PolicyLoadReason.MISSING_FIELD,
    }.get(err["type"], PolicyLoadReason.BAD_TYPE)
    rule: str | None = None
    if len(loc) >= 2 and loc[0] in ("grant", "deny") and isinstance(loc[1], int):
        try:
            candidate = data[str(loc[0])][loc[1]].get("id")
        except (AttributeError, IndexError, KeyError, TypeError):
            candidate = None
        rule = candidate if isinstance(candidate, str) else None
    elif len(loc) >= 2 and loc[0] == "groups" and isinstance(loc[1], str):
        rule = loc[1]
    field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    return fail(reason, err["msg"], source, rule=rule, field=field or None)


def _is_tag(part: object) -> bool:
    return isinstance(part, str) and bool(_UNION_TAG.match(part))
