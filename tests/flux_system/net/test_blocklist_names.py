"""Every block-table row at both ends, with the name a user reads.

The vectors are tests/vectors/flux_system/blocklist.json.

The reason alone does not show which row denied an address: a row whose name or
reference were swapped, or a range cut by one address, would still deny *something*.
Each vector fixes, for one address, the row expected to match, its name (which must
appear in the error text of every entry point) and its reference (a field of
:class:`BlockEntry`), or that the address is public and allowed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from ipaddress import ip_address, ip_network
from typing import Any

import pytest

from flux_system import EgressDeniedError, EgressReason
from flux_system.net import (
    GuardedTarget,
    StaticResolver,
    _blocklist,
    _classify,
    classify_address,
    guard_host,
    guard_url,
)
from flux_system.net._blocklist import (
    IPV6_GLOBAL_UNICAST,
    REGISTRY_DATES,
    TABLE,
    TABLE_REVIEWED,
    BlockEntry,
)
from tests._vectors import load_vector_file, load_vectors

CASES = load_vectors("flux_system", "blocklist")
OUTSIDE = "2000::/3 (outside)"  # the classifier's rule for IPv6 outside global unicast
NAME = "named.flux.example"


def _url(address: str) -> str:
    return f"http://[{address}]/" if ":" in address else f"http://{address}/"


def test_every_row_is_covered_at_both_ends_and_nothing_else_is_claimed() -> None:
    rows = {str(e.network) for e in TABLE}
    covered: dict[str, set[str]] = {}
    for case in CASES:
        covered.setdefault(case["row"], set()).add(case["where"])
    assert set(covered) == rows | {str(IPV6_GLOBAL_UNICAST)}
    for row, where in covered.items():
        assert {"first", "last"} <= where or row == str(IPV6_GLOBAL_UNICAST), row
    # Every row's own name is asserted at least once (a shadowed end adds a case).
    named = {c["network"] for c in CASES if c["expect"] == "blocked_address"}
    assert named == rows | {OUTSIDE}


def test_vector_file_has_provenance() -> None:
    data = load_vector_file("flux_system", "blocklist")
    sources = data["provenance"]["sources"]
    assert {c["source"] for c in CASES} == set(sources)
    assert {"rfc7534", "rfc7535", "rfc7450"} <= set(sources)
    # The vectors were checked against this state of the table: a table re-reviewed
    # (new date, newer registry) must have its vectors re-reviewed too.
    assert data["provenance"]["table_reviewed"] == TABLE_REVIEWED
    assert data["provenance"]["registry_dates"] == REGISTRY_DATES


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_classify_names_the_row(case: dict[str, Any]) -> None:
    address = ip_address(case["address"])
    entry = classify_address(address)
    if case["expect"] == "allow":
        assert entry is None
        return
    assert entry is not None
    assert (entry.name, entry.reference) == (case["name"], case["reference"])
    if case["network"] == OUTSIDE:
        assert entry.network == IPV6_GLOBAL_UNICAST
    else:
        assert entry.network == ip_network(case["network"])
        assert entry.first <= int(address) <= entry.last


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_every_entry_point_reports_the_row_name(case: dict[str, Any]) -> None:
    text = case["address"]
    address = ip_address(text)
    resolver = StaticResolver({NAME: [address]})
    calls: list[tuple[str, str, Callable[[], GuardedTarget]]] = [
        ("guard_host", text, lambda: guard_host(text, 443)),
        ("guard_url", text, lambda: guard_url(_url(text))),
        ("guard_url", NAME, lambda: guard_url(f"https://{NAME}/", resolver=resolver)),
    ]
    for op, host, call in calls:
        if case["expect"] == "allow":
            assert call().addresses == (address,)
            continue
        with pytest.raises(EgressDeniedError) as info:
            call()
        err = info.value
        assert err.reason is EgressReason.BLOCKED_ADDRESS
        assert (err.op, err.target, err.address) == (op, host, text)
        assert err.message == f"{op}: blocked address ({case['name']})"
        assert str(err).startswith(err.message)  # what a user reads names the row too


def _mismatches() -> list[str]:
    """Ids of the cases the *current* classifier disagrees with (name, reference, row)."""
    wrong = []
    for case in CASES:
        entry = classify_address(ip_address(case["address"]))
        if case["expect"] == "allow":
            if entry is not None:
                wrong.append(case["id"])
        elif entry is None or (entry.name, entry.reference) != (case["name"], case["reference"]):
            wrong.append(case["id"])
    return wrong


def _shadowed(address: int, top: int, earlier: tuple[tuple[int, int, BlockEntry], ...]) -> bool:
    return not 0 <= address <= top or any(f <= address <= t for f, t, _ in earlier)


def _mutants() -> list[tuple[str, str, object, bool]]:
    """(label, attribute of _classify, mutated value, equivalent?): one change each.

    A moved bound is *equivalent* (no address changes its verdict or name) exactly when
    the one address it adds or drops cannot be addressed (below 0 or past the top of
    the family) or is matched by a row the classifier checks earlier — a more specific
    row, or one of the same length listed before (e.g. ``240.0.0.0/4 last-1`` only
    drops 255.255.255.255, which the /32 "limited broadcast" row names anyway).
    """
    out: list[tuple[str, str, object, bool]] = []
    for attr, top in (("_V4", 2**32 - 1), ("_V6", 2**128 - 1)):
        rows: tuple[tuple[int, int, BlockEntry], ...] = getattr(_classify, attr)
        for i, (first, last, entry) in enumerate(rows):
            earlier = rows[:i]
            variants = {
                "name": ((first, last, replace(entry, name=entry.name + "x")), False),
                "reference": (
                    (first, last, replace(entry, reference=entry.reference + "x")),
                    False,
                ),
                "first+1": ((first + 1, last, entry), _shadowed(first, top, earlier)),
                "last-1": ((first, last - 1, entry), _shadowed(last, top, earlier)),
                "first-1": ((first - 1, last, entry), _shadowed(first - 1, top, earlier)),
                "last+1": ((first, last + 1, entry), _shadowed(last + 1, top, earlier)),
            }
            for kind, (row, equivalent) in variants.items():
                label = f"{entry.network} {kind}"
                out.append((label, attr, (*rows[:i], row, *rows[i + 1 :]), equivalent))
    outside = _classify._OUTSIDE_GLOBAL_UNICAST
    out.append(("outside name", "_OUTSIDE_GLOBAL_UNICAST", replace(outside, name="x"), False))
    out.append(
        ("outside reference", "_OUTSIDE_GLOBAL_UNICAST", replace(outside, reference="x"), False)
    )
    return out


def test_negative_control_every_label_and_bound_mutant_is_noticed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The vectors must tell the real table from one with any single row's name or
    # reference changed, or any single bound moved by one address — the mutations an
    # outside run found surviving (label-only) and the ones it found killed (bounds).
    assert _mismatches() == []  # the real table agrees
    survivors, equivalents = [], []
    mutants = _mutants()
    for label, attr, value, equivalent in mutants:
        with monkeypatch.context() as m:
            m.setattr(_classify, attr, value)
            noticed = bool(_mismatches())
        if equivalent:
            equivalents.append(label)
            assert not noticed, f"{label} was expected to be equivalent"
        elif not noticed:
            survivors.append(label)
    assert survivors == []
    assert len(mutants) == 6 * len(TABLE) + 2 and len(equivalents) < 20  # the control ran


def test_the_table_is_its_rows_parsed_strictly() -> None:
    """TABLE is built from the row literals when the module is imported; rebuilding it
    here runs the same code again under test. A row whose address has host bits set
    (a typo such as ``10.0.0.1/8``) is refused rather than widened to its network."""
    rebuilt = _blocklist._rows(_blocklist._IPV4_ROWS) + _blocklist._rows(_blocklist._IPV6_ROWS)
    assert sorted(rebuilt, key=str) == sorted(TABLE, key=str)
    for entry, (net, name, ref) in zip(
        rebuilt, _blocklist._IPV4_ROWS + _blocklist._IPV6_ROWS, strict=True
    ):
        assert (str(entry.network), entry.name, entry.reference) == (net, name, ref)
    with pytest.raises(ValueError, match="has host bits set"):
        _blocklist._rows((("10.0.0.1/8", "private-use", "RFC 1918"),))
