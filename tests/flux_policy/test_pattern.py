"""Both matchers against the pattern definition, and pattern validation."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flux_policy._glob import compile_pattern
from flux_policy._pattern import MAX_WILDCARDS, name_problem, pattern_problem
from flux_policy._reference import reference_match

# (pattern, name, expected) — straight from the definition in the issue.
CASES = [
    ("fs.*", "fs.read", True),
    ("fs.*", "fs.", True),
    ("fs.*", "fs", False),
    ("fs.*", "fs.read/x", False),
    ("workspace/*", "workspace/a", True),
    ("workspace/*", "workspace/a/b", False),
    ("workspace/*", "workspace", False),
    ("workspace/**", "workspace/a/b", True),
    ("workspace/**", "workspace/", True),
    ("workspace/**", "workspace", False),
    ("workspace/**", "workspacex/a", False),
    ("workspace/**/.env", "workspace/.env", True),  # /**/ matches a single /
    ("workspace/**/.env", "workspace/a/b/.env", True),
    ("workspace/**/.env", "workspace/a/.envx", False),
    ("workspace/**/.env", "workspace.env", False),
    ("**/.env", ".env", False),  # only /**/ collapses; a leading **/ needs a /
    ("**/.env", "a/.env", True),
    ("**", "", True),
    ("**", "a/b/c", True),
    ("*", "", True),
    ("*", "a/b", False),
    ("a*b", "ab", True),
    ("a*b", "a/b", False),
    ("a**b", "a/x/b", True),
    ("*.py", "x.py", True),
    ("*.py", "d/x.py", False),
    ("a/*/c", "a/b/c", True),
    ("a/*/c", "a//c", True),
    ("a/*/c", "a/b/d/c", False),
    ("a/**/**/b", "a/b", False),  # "/**/" then "**" then "/b": needs a second /
    ("a/**/**/b", "a//b", True),
    ("a/**/**/b", "a/x/b", True),
    ("x.y", "xzy", False),  # "." is literal, never a regex dot
    ("a+b", "a+b", True),
    ("(a)", "(a)", True),
    ("a/**/b/**/c", "a/b/c", True),
    ("*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", False),  # NFA path
    ("*a*a*a*b", "xaxaxab", True),
    ("/etc/**", "/etc/passwd", True),
    ("/etc/**", "etc/passwd", False),
]


@pytest.mark.parametrize(("pattern", "name", "expected"), CASES)
def test_reference_matcher(pattern: str, name: str, expected: bool) -> None:
    assert reference_match(pattern, name) is expected


@pytest.mark.parametrize(("pattern", "name", "expected"), CASES)
def test_compiled_matcher(pattern: str, name: str, expected: bool) -> None:
    assert compile_pattern(pattern)(name) is expected


pieces = st.sampled_from(["a", "b", "/", ".", "*", "**", "/**/", "x", "ab"])
names = st.lists(st.sampled_from(["a", "b", "/", ".", "x", "ab", "*"]), max_size=10).map("".join)


@given(st.lists(pieces, min_size=1, max_size=8).map("".join), names)
def test_matchers_agree(pattern: str, name: str) -> None:
    # Covers every compiled shape: literal, prefix, suffix, regex (<= 2 wildcards), NFA.
    if "***" in pattern:
        return
    assert compile_pattern(pattern)(name) == reference_match(pattern, name)


def test_many_stars_match_in_bounded_time() -> None:
    # A regex with this many stars would backtrack exponentially; the NFA is linear.
    pattern = "*a" * (MAX_WILDCARDS - 1) + "*b"
    assert pattern_problem(pattern, resource=False) is None
    assert compile_pattern(pattern)("a" * 4000) is False


@pytest.mark.parametrize(
    ("pattern", "resource"),
    [
        ("", False),
        ("a***", False),
        ("a\x00b", False),
        ("a\nb", False),
        ("x" * 2000, False),
        ("*" + "/*" * (MAX_WILDCARDS + 1), False),
        ("role:*", False),
        ("a/../b", True),
        ("a/./b", True),
        ("a//b", True),
        ("a/", True),
        ("..", True),
    ],
)
def test_invalid_patterns(pattern: str, resource: bool) -> None:
    assert pattern_problem(pattern, resource=resource) is not None


@pytest.mark.parametrize("pattern", ["a", "/", "/etc/**", "fs.*", "**", "a/**/b", "a..b"])
def test_valid_patterns(pattern: str) -> None:
    assert pattern_problem(pattern, resource=True) is None


@pytest.mark.parametrize("name", ["", "a\x7f", "a\x1b[0m", "role:dev", "group:x", "x" * 5000])
def test_unusable_request_names(name: str) -> None:
    assert name_problem(name) is not None
