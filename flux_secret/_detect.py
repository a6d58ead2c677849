"""An optional second layer: detect secrets that were never registered.

Detectors are byte regular expressions for shapes that carry credentials — assignments
to secret-looking names, ``Authorization``/``Bearer`` values, passwords in URL userinfo,
PEM private-key blocks and well-known token prefixes. They **add** to registration and
never replace it: a registered secret is masked whatever its shape.

Every detector has a maximum match length (``max_length``, checked against the regex by
the tests), so a stream needs to hold back only that many bytes to decide a match. A
value longer than its detector's limit still matches — the limit ends the masked span
(4096 bytes for assignments and bearer tokens, 16 KiB for a PEM body), and whatever
runs past it is not masked by detection (registration has no such limit).
Matches are found as ``re.finditer`` finds them over the whole text (leftmost, then
resuming after the match): :func:`detect` reproduces exactly that sequence in a stream,
accepting a match only once the bytes that decide it have arrived.
"""

from __future__ import annotations

import bisect
import re
import typing
from dataclasses import dataclass

import ahocorasick_rs

from flux_secret._matcher import Interval

__all__ = ["DEFAULT_DETECTORS", "Detector", "DetectorSet", "detect"]

LOOKBEHIND = 8  # bytes of context a detector may look at before a match (>= any (?<!..))
_LOOKAHEAD = 4  # one byte to end a greedy repeat + 3 to widen to a UTF-8 boundary


@typing.final
@dataclass(frozen=True, slots=True)
class Detector:
    """A named byte regex; the spans of its ``v*`` groups are what gets masked.

    *anchors* (lower-case byte strings) make detection fast: every match must contain
    one of them, case-insensitively, starting at most *anchor_offset* bytes after the
    match start. The regex is then tried only at those few positions (one
    Aho-Corasick pass finds them for all detectors) instead of at every byte; the
    matches found are exactly those of ``re.finditer``. Without anchors the regex
    searches every position.

    Guarantee: ``max_length`` bounds the length of any match of ``pattern`` (the tests
    check it against the parsed regex), which bounds a stream's hold-back.

    Not guaranteed: detection is heuristic — it can miss a credential in an unusual
    shape and mask a harmless value that looks like one. Wrong anchors (a match
    without one) make a detector miss matches; the tests check the shipped ones
    against the plain regex search.
    """

    name: str
    pattern: re.Pattern[bytes]
    max_length: int
    anchors: tuple[bytes, ...] = ()
    anchor_offset: int = 0


_SECRET_WORD = (
    rb"(?:pass(?:word|wd|phrase)?|pwd|secret|token|api[_-]?key|access[_-]?key"
    rb"|private[_-]?key|credentials?|client[_-]?secret|auth[_-]?token|session[_-]?id)"
)
_VALUE = (
    # double-quoted (JSON): the closing quote is optional, so an over-long value is masked
    rb"(?:\"(?P<v1>(?:\\.|[^\"\\\r\n]){1,4096})"
    rb"|'(?P<v2>[^'\r\n]{1,4096})"
    rb"|(?P<v3>[^\s\"',;&<>{}\[\]]{1,4096}))"
)

DEFAULT_DETECTORS: tuple[Detector, ...] = (
    Detector(
        "assignment",
        re.compile(
            rb"(?i)"
            + _SECRET_WORD
            + rb"[A-Za-z0-9_.\-]{0,32}[\"']?[ \t]{0,4}(?:=|:)[ \t]{0,4}"
            + _VALUE
        ),
        1 + 15 + 32 + 1 + 4 + 1 + 4 + 1 + 2 * 4096,
        (
            *(b"pass", b"pwd", b"secret", b"token", b"api", b"access", b"private"),
            *(b"credential", b"client", b"auth", b"session"),
        ),
    ),
    Detector(
        "authorization",
        re.compile(
            rb"(?<![A-Za-z0-9_])(?:[Bb]earer|BEARER|Basic|BASIC|Digest)[ \t]{1,4}"
            rb"(?P<v1>[A-Za-z0-9._~+/\-]{8,4096}={0,2})"
        ),
        6 + 4 + 4096 + 2 + 1,
        (b"bearer", b"basic", b"digest"),
    ),
    Detector(
        "url_password",
        re.compile(
            rb"(?i)\b[a-z][a-z0-9+.\-]{0,15}://[^\s:/?#@\[\]]{0,256}:(?P<v1>[^\s/?#@]{1,256})@"
        ),
        16 + 3 + 256 + 1 + 256 + 1,
        (b"://",),
        16,  # the scheme before "://"
    ),
    Detector(
        "private_key",
        re.compile(
            rb"-----BEGIN (?:[A-Z0-9]{1,16} ){0,3}PRIVATE KEY(?: BLOCK)?-----"
            rb"(?P<v1>(?:(?!-----END)[A-Za-z0-9+/=:,.\-\s]){1,16384})"
        ),
        11 + 3 * 17 + 11 + 6 + 5 + 16384 + 8,  # + the 8-byte lookahead for -----END
        (b"-----begin ",),
    ),
    Detector(
        "token",
        re.compile(
            rb"(?<![A-Za-z0-9_])(?P<v1>"
            rb"gh[pousr]_[A-Za-z0-9]{30,255}"
            rb"|github_pat_[A-Za-z0-9_]{22,255}"
            rb"|glpat-[A-Za-z0-9_\-]{20,255}"
            rb"|xox[abposr]-[A-Za-z0-9\-]{10,255}"
            rb"|xapp-[A-Za-z0-9\-]{10,255}"
            rb"|(?:AKIA|ASIA)[0-9A-Z]{16}"
            rb"|sk-[A-Za-z0-9_\-]{20,255}"
            rb"|[sr]k_(?:live|test)_[A-Za-z0-9]{16,255}"
            rb"|AIza[0-9A-Za-z_\-]{35}"
            rb"|npm_[A-Za-z0-9]{36}"
            rb"|pypi-[A-Za-z0-9_\-]{50,255}"
            rb")"
        ),
        11 + 255,
        (
            *(b"gh", b"github_pat_", b"glpat-", b"xox", b"xapp-", b"akia", b"asia"),
            *(b"sk-", b"sk_", b"rk_", b"aiza", b"npm_", b"pypi-"),
        ),
    ),
)


def _spans(match: re.Match[bytes], base: int, name: str) -> list[Interval]:
    out: list[Interval] = []
    for group, value in match.groupdict().items():
        if value is not None and group.startswith("v"):
            s, e = match.span(group)
            out.append((base + s, base + e, (f"detected:{name}",)))
    return out


@typing.final
class DetectorSet:
    """The detectors of a redactor and one automaton over all their anchors."""

    __slots__ = ("_ac", "_owners", "detectors")

    def __init__(self, detectors: tuple[Detector, ...]) -> None:
        self.detectors = detectors
        owners: dict[bytes, list[int]] = {}
        for i, det in enumerate(detectors):
            for anchor in det.anchors:
                owners.setdefault(anchor.lower(), []).append(i)
        keys = list(owners)
        self._owners = [owners[k] for k in keys]
        self._ac = (
            ahocorasick_rs.BytesAhoCorasick(keys, matchkind=ahocorasick_rs.MatchKind.Standard)
            if keys
            else None
        )

    def candidates(self, data: bytes) -> list[list[int]]:
        """Per detector, the sorted positions where a match could start."""
        per: list[set[int]] = [set() for _ in self.detectors]
        if self._ac is not None:
            for pid, s, _e in self._ac.find_matches_as_indexes(data.lower(), overlapping=True):
                for i in self._owners[pid]:
                    per[i].update(range(max(0, s - self.detectors[i].anchor_offset), s + 1))
        return [sorted(c) for c in per]


def detect(
    dset: DetectorSet,
    data: bytes,
    base: int,
    positions: list[int],
    *,
    final: bool,
) -> list[Interval]:
    """Find detector matches in *data* (absolute offset *base*) from each position on.

    ``positions[i]`` is the absolute offset detector *i* resumes from; it is advanced
    past every match accepted. A match is accepted only when decided: the bytes from
    its start to ``max_length + _LOOKAHEAD`` past it are all in *data*, or *final*.
    Positions before the returned frontier that are not inside a match are decided
    non-matches, so the concatenated results of a stream equal one call on the whole
    (and both equal ``re.finditer`` over the whole).
    """
    out: list[Interval] = []
    size = len(data)
    cands = dset.candidates(data)
    for i, det in enumerate(dset.detectors):
        pos = positions[i] - base
        decided = size if final else size - det.max_length - _LOOKAHEAD
        if det.anchors:
            pos = _scan_anchored(
                det, data, base=base, pos=pos, cands=cands[i], decided=decided, out=out
            )
        else:
            pos = _scan_plain(det, data, base=base, pos=pos, decided=decided, out=out)
        positions[i] = base + max(pos, min(decided, size))
    return out


def _scan_anchored(
    det: Detector,
    data: bytes,
    *,
    base: int,
    pos: int,
    cands: list[int],
    decided: int,
    out: list[Interval],
) -> int:
    idx = bisect.bisect_left(cands, pos)
    while idx < len(cands):
        start = cands[idx]
        if start > decided:
            break
        m = det.pattern.match(data, start)
        if m is not None and m.end() > start:
            out.extend(_spans(m, base, det.name))
            pos = m.end()
            idx = bisect.bisect_left(cands, pos, idx)
        else:
            idx += 1
    return pos


def _scan_plain(
    det: Detector, data: bytes, *, base: int, pos: int, decided: int, out: list[Interval]
) -> int:
    while pos <= len(data):
        m = det.pattern.search(data, pos)
        if m is None or m.start() > decided:
            break
        out.extend(_spans(m, base, det.name))
        pos = m.end() if m.end() > m.start() else m.start() + 1
    return pos
