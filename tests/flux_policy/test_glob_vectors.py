"""The compiled glob matchers against fixed vectors, a simple reference and a step bound.

- Vectors (``tests/vectors/flux_policy/glob.json``): every compiled shape (literal,
  always, prefix, suffix, regex, NFA), with names on both sides of each boundary, and
  the shape ``compile_pattern`` picks for each pattern.
- A differential against ``_simple_match`` below: a deliberately naive, memoised
  recursive reading of the grammar, sharing no code with ``flux_policy``.
- A worst-case bound that needs no clock: the NFA's instruction fetches are counted and
  must stay within ``3 x (program length + 1)`` per name character, for every program;
  patterns that compile to a regular expression hold at most two wildcard tokens (at
  worst quadratic backtracking, names being at most ``MAX_NAME_LENGTH`` long).
"""

from __future__ import annotations

import functools
import itertools
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flux_policy._glob import (
    _REGEX_MAX_WILDCARDS,
    Matcher,
    _always,
    _Nfa,
    compile_pattern,
    has_wildcard,
)
from flux_policy._pattern import MAX_NAME_LENGTH, MAX_WILDCARDS, pattern_problem
from tests._vectors import load_vectors

CASES: list[dict[str, Any]] = load_vectors("flux_policy", "glob")
WILDCARDS = ("/**/", "**", "*")


def _tokens(pattern: str) -> list[str]:
    """Left to right, longest first: ``/**/`` before ``**`` before ``*``."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        for tok in WILDCARDS:
            if pattern.startswith(tok, i):
                out.append(tok)
                i += len(tok)
                break
        else:
            out.append(pattern[i])
            i += 1
    return out


def _simple_match(pattern: str, name: str) -> bool:
    """The grammar read literally: try every split, memoised (slow, obviously right)."""
    toks = _tokens(pattern)

    @functools.cache
    def at(i: int, j: int) -> bool:
        if i == len(toks):
            return j == len(name)
        tok = toks[i]
        ends = range(j, len(name) + 1)
        if tok == "*":
            return any("/" not in name[j:k] and at(i + 1, k) for k in ends)
        if tok == "**":
            return any(at(i + 1, k) for k in ends)
        if tok == "/**/":
            run = (name[j:k] for k in ends)
            return any(r.startswith("/") and r.endswith("/") and at(i + 1, j + len(r)) for r in run)
        return name[j : j + 1] == tok and at(i + 1, j + 1)

    return at(0, 0)


def _compiled_regex(matcher: Matcher) -> str:
    """The source of the ``re`` program a regex-shaped matcher runs."""
    bound = [cell.cell_contents for cell in matcher.__closure__ or ()]
    (fullmatch,) = [b for b in bound if isinstance(getattr(b, "__self__", None), re.Pattern)]
    source: str = fullmatch.__self__.pattern
    return source


def _unbounded_repetitions(source: str) -> int:
    """``*`` and ``+`` quantifiers in a regex source (not escaped literals)."""
    count = 0
    escaped = False
    for ch in source:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in "*+":
            count += 1
    return count


def test_regex_budget_is_two_wildcards() -> None:
    # The quadratic bound above holds for two unbounded repetitions; three made
    # ``**a**a**b`` on a 4,096-character name take seconds (issue 18).
    assert _REGEX_MAX_WILDCARDS == 2
    assert _unbounded_repetitions(_compiled_regex(compile_pattern("a/*/b/*.py"))) == 2
    assert isinstance(compile_pattern("**a**a**b"), _Nfa)


def _shape(matcher: Matcher, pattern: str) -> str:
    if isinstance(matcher, _Nfa):
        return "nfa"
    if matcher is _always:
        return "always"
    if getattr(matcher, "__self__", None) == pattern:  # pattern.__eq__
        return "literal"
    # The closure's defining function (a mutation tool may rename it, keeping the name).
    outer = matcher.__qualname__.split(".<locals>.")[0]
    for maker, shape in (("_startswith", "prefix"), ("_endswith", "suffix"), ("_regex", "regex")):
        if maker in outer:
            return shape
    raise AssertionError(f"unknown matcher {matcher!r}")


def test_vectors_are_valid_patterns_and_cover_every_shape() -> None:
    for case in CASES:
        assert pattern_problem(case["pattern"], resource=False) is None, case["id"]
        assert case["source"] and case["why"]
    shapes = {c["shape"] for c in CASES}
    assert shapes == {"literal", "always", "prefix", "suffix", "regex", "nfa"}


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_glob_vector(case: dict[str, Any]) -> None:
    matcher = compile_pattern(case["pattern"])
    assert _shape(matcher, case["pattern"]) == case["shape"]
    for name in case["matches"]:
        assert matcher(name) is True, name
    for name in case["rejects"]:
        assert matcher(name) is False, name


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_vectors_agree_with_the_simple_matcher(case: dict[str, Any]) -> None:
    # The vectors were written by hand; the naive matcher checks the hand.
    for name in case["matches"]:
        assert _simple_match(case["pattern"], name) is True, name
    for name in case["rejects"]:
        assert _simple_match(case["pattern"], name) is False, name


pieces = st.sampled_from(["a", "b", "/", "*", "**", "/**/", "ab"])
names = st.lists(st.sampled_from(["a", "b", "/", "ab", "//"]), max_size=9).map("".join)
# Enough derandomized examples in the ci profile to reach every NFA instruction and
# fast-path test (issue 18: 60 let 26 NFA mutants survive); more under a deeper profile.
EXAMPLES = max(settings().max_examples, 400)


@settings(max_examples=EXAMPLES)
@given(st.lists(pieces, min_size=1, max_size=9).map("".join), st.lists(names, max_size=6))
def test_compiled_matches_the_simple_matcher(pattern: str, batch: list[str]) -> None:
    if "***" in pattern:  # refused at load: ambiguous
        return
    matcher = compile_pattern(pattern)
    for name in batch:
        assert matcher(name) is _simple_match(pattern, name), (pattern, name)


@settings(max_examples=EXAMPLES)
@given(st.lists(pieces, min_size=3, max_size=12).map("".join), st.lists(names, max_size=6))
def test_nfa_matches_the_simple_matcher(pattern: str, batch: list[str]) -> None:
    # The NFA for every pattern, whatever shape compile_pattern would pick for it.
    if "***" in pattern:
        return
    nfa = _Nfa([p for p in _tokens_joined(pattern) if p])
    for name in batch:
        assert nfa(name) is _simple_match(pattern, name), (pattern, name)


def _tokens_joined(pattern: str) -> list[str]:
    """Tokens with consecutive literal characters joined, as ``_Nfa`` takes them."""
    out: list[str] = []
    for tok in _tokens(pattern):
        if tok not in WILDCARDS and out and out[-1] not in WILDCARDS:
            out[-1] += tok
        else:
            out.append(tok)
    return out


class _CountingProgram(list[tuple[str, int | str]]):
    """The NFA's program, counting instruction fetches."""

    fetches = 0

    def __getitem__(self, index: Any) -> Any:
        self.fetches += 1
        return super().__getitem__(index)


def _fetches(nfa: _Nfa, name: str) -> tuple[bool, int]:
    counting = _CountingProgram(nfa.prog)
    original = nfa.prog
    nfa.prog = counting
    try:
        result = nfa(name)
    finally:
        nfa.prog = original
    return result, counting.fetches


# Worst cases: names that keep every state alive, on patterns of many wildcard tokens.
WORST = [
    ("**a**a**b", "a" * MAX_NAME_LENGTH),
    ("*a" * (MAX_WILDCARDS - 1) + "*b", "a" * MAX_NAME_LENGTH),
    ("**a" * (MAX_WILDCARDS - 1) + "**b", "a" * MAX_NAME_LENGTH),
    ("/**/" * 4 + "a" + "/**/" * 4 + "*", "/" * MAX_NAME_LENGTH),
    ("*/**/*/**/*", "/a" * (MAX_NAME_LENGTH // 2)),
]


@pytest.mark.parametrize(("pattern", "name"), WORST, ids=[p[:24] for p, _ in WORST])
def test_nfa_steps_are_linear_in_the_name(pattern: str, name: str) -> None:
    assert pattern_problem(pattern, resource=False) is None
    matcher = compile_pattern(pattern)
    assert isinstance(matcher, _Nfa)  # more than two wildcards: never a backtracking regex
    per_char = 3 * (matcher.end + 1)
    for n in (0, 1, 64, len(name) // 2, len(name)):
        result, fetches = _fetches(matcher, name[:n])
        if n <= 64:
            assert result is _simple_match(pattern, name[:n])
        assert fetches <= per_char * (n + 1), (n, fetches)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_every_program_is_bounded(case: dict[str, Any]) -> None:
    pattern = case["pattern"]
    matcher = compile_pattern(pattern)
    wild = [t for t in _tokens(pattern) if t in WILDCARDS]
    if len(wild) > 2:
        assert isinstance(matcher, _Nfa)
    if isinstance(matcher, _Nfa):
        per_char = 3 * (matcher.end + 1)
        for name in [*case["matches"], *case["rejects"], "a/" * 1000, "a" * 2000]:
            _, fetches = _fetches(matcher, name)
            assert fetches <= per_char * (len(name) + 1)
    elif _shape(matcher, pattern) == "regex":
        # Python's backtracking engine: the program actually compiled holds one
        # unbounded repetition per wildcard and never more than two, so matching is at
        # worst quadratic in a name of at most MAX_NAME_LENGTH characters.
        assert _unbounded_repetitions(_compiled_regex(matcher)) == len(wild)
        assert len(wild) <= _REGEX_MAX_WILDCARDS


SMALL_PIECES = ("a", "/", "*", "**", "/**/", "b")
SMALL_NAMES = sorted({"".join(p) for p in itertools.product(("", "a", "/", "b"), repeat=3)})


def test_every_small_pattern_against_every_small_name() -> None:
    # Small-scope exhaustive differential: every pattern of up to four pieces (and
    # each one's NFA) against every name of up to four characters over {a, /, b}.
    checked = 0
    for size in range(1, 5):
        for combo in itertools.product(SMALL_PIECES, repeat=size):
            pattern = "".join(combo)
            if "***" in pattern:
                continue
            matcher = compile_pattern(pattern)
            nfa = _Nfa(_tokens_joined(pattern))
            for name in SMALL_NAMES:
                expected = _simple_match(pattern, name)
                assert matcher(name) is expected, (pattern, name)
                assert nfa(name) is expected, (pattern, name)
                checked += 1
    assert checked > 40_000


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_has_wildcard_tells_literals_from_patterns(case: dict[str, Any]) -> None:
    # The index files literal patterns by equality, the rest through compile_pattern.
    assert has_wildcard(case["pattern"]) is (case["shape"] != "literal")


@pytest.mark.parametrize("pattern", ["a**b", "a/**/b", "**a*b", "*a*b*c", "a**b**c**d", "**/x/**"])
def test_any_character_run_includes_a_newline(pattern: str) -> None:
    # ``**`` and ``/**/`` match any run of characters; names are checked for control
    # characters before matching, but the matchers do not depend on it.
    for name in ("a\nb", "a/\n/b", "\na\nb\nc\nd", "x/x/\n", "q\n/x/\n"):
        assert compile_pattern(pattern)(name) is _simple_match(pattern, name), name
