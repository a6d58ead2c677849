"""Hostile ``str`` subclasses cannot steer the egress guard or its parse caches.

``parse_url`` memoizes accepted parses by text in a process-wide dict: a subclass with
a lying ``__hash__``/``__eq__`` stored as a key would answer for another URL later, and
one with a lying ``isprintable``/``__contains__`` would pass the character checks.
"""

from __future__ import annotations

import pytest

from flux_system import EgressDeniedError, EgressReason
from flux_system.net import (
    EgressPolicy,
    PrivateNetAllow,
    StaticResolver,
    guard_host,
    guard_url,
)

_VICTIM = "http://metadata.invalid-hygiene.example/latest"


class _Poison(str):
    __slots__ = ()

    def __hash__(self) -> int:
        return hash(_VICTIM)

    def __eq__(self, other: object) -> bool:
        return True


class _Liar(str):
    __slots__ = ()

    def isprintable(self) -> bool:
        return True

    def isascii(self) -> bool:
        return True

    def __contains__(self, item: object) -> bool:
        return False


def _resolver() -> StaticResolver:
    return StaticResolver(
        {
            "good.hygiene.example": ["93.184.216.34"],
            "metadata.invalid-hygiene.example": ["169.254.169.254"],
        }
    )


def test_a_lying_key_cannot_poison_the_parse_cache_for_another_url() -> None:
    guard_url(_Poison("http://good.hygiene.example/x"), resolver=_resolver())
    with pytest.raises(EgressDeniedError) as info:
        guard_url(_VICTIM, resolver=_resolver())
    assert info.value.reason is EgressReason.BLOCKED_ADDRESS


def test_a_lying_url_cannot_pass_the_control_byte_check() -> None:
    with pytest.raises(EgressDeniedError) as info:
        guard_url(_Liar("http://good.hygiene.example/a\r\nX: y"), resolver=_resolver())
    assert info.value.reason is EgressReason.CONTROL_BYTE


def test_a_lying_host_cannot_pass_the_control_byte_check() -> None:
    with pytest.raises(EgressDeniedError) as info:
        guard_host(_Liar("good.hygiene.example\n"), 80, resolver=_resolver())
    assert info.value.reason is EgressReason.CONTROL_BYTE


class _EqualsAll(str):
    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0

    def strip(self, chars: str | None = None) -> str:
        return self

    def lower(self) -> str:
        return self

    def removesuffix(self, suffix: str) -> str:
        return self


def test_a_lying_allow_list_pattern_admits_only_its_own_text() -> None:
    policy = EgressPolicy(allow_hosts=[_EqualsAll("good.hygiene.example")])
    assert all(type(p) is str for p in policy.allow_hosts)
    with pytest.raises(EgressDeniedError) as info:
        guard_host("other.hygiene.example", 80, resolver=_resolver(), policy=policy)
    assert info.value.reason is EgressReason.NOT_ALLOWED


def test_a_lying_private_host_grant_admits_only_its_own_text() -> None:
    grants = PrivateNetAllow(hosts=[_EqualsAll("good.hygiene.example")])
    assert all(type(p) is str for p in grants.hosts)
    assert not grants.admits_name("localhost")
