"""The redactor: a registry of secrets and the masking of str, bytes and structures."""

from __future__ import annotations

import re
import typing
from collections.abc import Sequence

from flux_secret._detect import Detector, DetectorSet, detect
from flux_secret._exceptions import RegistrationError, RegistrationReason
from flux_secret._matcher import Interval, merge, snap_out
from flux_secret._registry import Registry, Snapshot
from flux_secret._report import RedactionReport, _Tally
from flux_secret._value import SecretValue
from flux_secret._variants import variants

if typing.TYPE_CHECKING:
    from flux_secret._logging import RedactingFilter
    from flux_secret._stream import StreamRedactor
    from flux_secret._structures import RedactedException

__all__ = ["Redactor"]

_S = typing.TypeVar("_S", str, bytes)

_DEFAULT_MIN_LENGTH = 8  # bytes: shorter values over-mask and make masking an oracle
_MIN_LENGTH_FLOOR = 6  # no setting may go below this
_MAX_SECRET_BYTES = 64 << 10  # a longer value would make a stream hold back too much
_NAME_OK = re.compile(r"[^\x00-\x1f\x7f]{1,4200}")  # long enough for any reference name


@typing.final
class Redactor:
    """Masks registered secrets (and their encoded forms) in text, bytes and structures.

    Guarantee: after :meth:`register` returns, every redaction that starts masks every
    occurrence of the value in every form of :func:`variants` — raw; base64 standard
    and URL-safe, padded or not, at any byte offset inside a longer blob; JSON-escaped;
    Python ``repr`` with either quote; hex; each long-enough line of a multi-line
    value — and percent-encoded or XML/HTML entity-escaped with any mix of literal and
    escaped bytes (either hex case, ``+`` or ``%20`` for a space: whatever set an
    encoder leaves unescaped, see ``_escapes.py``). The union of every
    occurrence of every secret is masked: overlapping and adjacent occurrences become
    one marker, so no occurrence can hide the tail of another. Registration is
    thread-safe while other threads redact; the input is never modified.

    Not guaranteed: a value shorter than the minimum length is refused, not masked; a
    secret transformed in a way not listed (re-encoded twice, split and encoded in two
    parts, case-folded) is not found; detection of unregistered secrets
    (*detectors*) is heuristic.

    Args:
        min_length: minimum value length in bytes (default 8, never below 6).
        marker: the replacement text, ``[redacted]`` by default.
        named_marker: a template containing ``{names}``, e.g. ``[redacted:{names}]``,
            to name the masked secrets (comma-separated) instead of *marker*.
        detectors: detection layers for unregistered secrets, e.g.
            :data:`DEFAULT_DETECTORS`; none by default.

    Raises:
        RegistrationError: a setting is out of range (``MIN_LENGTH``, ``BAD_SETTING``).
    """

    def __init__(
        self,
        *,
        min_length: int = _DEFAULT_MIN_LENGTH,
        marker: str = "[redacted]",
        named_marker: str | None = None,
        detectors: Sequence[Detector] = (),
    ) -> None:
        if not isinstance(min_length, int) or min_length < _MIN_LENGTH_FLOOR:
            raise RegistrationError(
                "min_length below the floor of 6 bytes", reason=RegistrationReason.MIN_LENGTH
            )
        if not isinstance(marker, str) or not marker:
            raise RegistrationError(
                "marker must be a non-empty str", reason=RegistrationReason.BAD_SETTING
            )
        if named_marker is not None and (
            not isinstance(named_marker, str) or "{names}" not in named_marker
        ):
            raise RegistrationError(
                "named_marker must contain {names}", reason=RegistrationReason.BAD_SETTING
            )
        if not all(isinstance(d, Detector) for d in detectors):
            raise TypeError("detectors must be a sequence of Detector")
        self._min_length = min_length
        self._marker = marker.encode("utf-8", "surrogatepass")
        self._named_marker = named_marker
        self._registry = Registry(DetectorSet(tuple(detectors)))
        self._tally = _Tally()

    @property
    def min_length(self) -> int:
        """The minimum length, in bytes, of a registered value."""
        return self._min_length

    def names(self) -> list[str]:
        """The names of the registered secrets, sorted."""
        return self._registry.names()

    def register(self, value: str | bytes | SecretValue, name: str | None = None) -> str:
        """Register *value* (under *name*, or a generated ``secret-N``); return the name.

        Registering another value under an existing name adds it (both are masked).

        Raises:
            TypeError: *value* or *name* has the wrong type.
            RegistrationError: ``TOO_SHORT``, ``TOO_LONG``, ``BAD_NAME``,
                ``NAME_CONTAINS_SECRET`` or ``TOO_MANY`` — never quoting the value.
        """
        if isinstance(value, SecretValue):
            name = value.name if name is None else name
            value = value.expose_secret()
        if isinstance(value, str):  # str.__str__: a subclass's encode() could register a decoy
            raw = str.__str__(value).encode("utf-8", "surrogatepass")
        elif isinstance(value, bytes):
            raw = value
        else:
            raise TypeError(f"value must be str, bytes or SecretValue, not {type(value).__name__}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be str or None, not {type(name).__name__}")
        if len(raw) < self._min_length:
            raise RegistrationError(
                "secret shorter than the minimum length",
                reason=RegistrationReason.TOO_SHORT,
                name=name,
            )
        if len(raw) > _MAX_SECRET_BYTES:
            raise RegistrationError(
                "secret longer than the maximum length",
                reason=RegistrationReason.TOO_LONG,
                name=name,
            )
        if name is not None:
            if not _NAME_OK.fullmatch(name):
                raise RegistrationError("malformed secret name", reason=RegistrationReason.BAD_NAME)
            if raw in name.encode("utf-8", "surrogatepass"):
                raise RegistrationError(
                    "secret name contains the secret",
                    reason=RegistrationReason.NAME_CONTAINS_SECRET,
                )
        return self._registry.add(name, variants(raw, min_length=self._min_length))

    def unregister(self, name: str) -> None:
        """Forget every value registered under *name*.

        Raises:
            RegistrationError: ``UNKNOWN_NAME``.
        """
        self._registry.remove(name)

    def rotate(
        self, name: str, value: str | bytes | SecretValue, *, keep_old: bool = False
    ) -> None:
        """Register *value* under *name*, then (unless *keep_old*) forget the older values.

        The new value is registered before the old ones are dropped, so there is no
        moment at which neither is masked.

        Raises:
            RegistrationError: as :meth:`register`, or ``UNKNOWN_NAME``.
        """
        before = self._registry.known(name)
        self.register(value, name)
        if not keep_old:
            self._registry.remove(name, oldest=before)

    def _snapshot(self) -> Snapshot:
        return self._registry.snapshot()

    def _marker_for(self, names: tuple[str, ...]) -> bytes:
        if self._named_marker is None:
            return self._marker
        # A name is a caller's label and may hold a secret (another one's value, or an
        # encoded form of its own): the label is masked like any text before it is shown.
        label = ",".join(names).encode("utf-8", "surrogatepass")
        pieces: list[bytes] = []
        pos = 0
        for s, e, _ in self._intervals(self._snapshot(), label, text=True):
            pieces += [label[pos:s], self._marker]
            pos = e
        pieces.append(label[pos:])
        template = self._named_marker.encode("utf-8", "surrogatepass")
        return template.replace(b"{names}", b"".join(pieces))

    def _intervals(self, snap: Snapshot, data: bytes, *, text: bool) -> list[Interval]:
        found = snap.find(data)
        detectors = snap.dset.detectors  # (Snapshot.detectors, without the property call)
        if detectors:
            found += detect(snap.dset, data, 0, [0] * len(detectors), final=True)
        if text and found:
            found = [snap_out(data, iv) for iv in found]
        return merge(found) if found else found

    def _splice(self, source: _S, merged: list[Interval], markers: list[_S]) -> _S:
        pieces: list[_S] = []
        pos = 0
        for (s, e, _names), marker in zip(merged, markers, strict=True):
            pieces.append(source[pos:s])
            pieces.append(marker)
            pos = e
        pieces.append(source[pos:])
        self._tally.add(names for _, _, names in merged)
        return source[:0].join(pieces)

    def redact(self, text: str) -> str:
        """Return *text* with every registered secret (and detection) masked.

        Raises:
            TypeError: *text* is not a str.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be str, not {type(text).__name__}")
        text = str.__str__(text)  # the text itself: a subclass's encode() could hide a secret
        data = text.encode("utf-8", "surrogatepass")
        ascii_only = text.isascii()  # O(1): byte offsets are then character offsets
        merged = self._intervals(self._registry.snapshot(), data, text=not ascii_only)
        if not merged:
            return text
        markers = [self._marker_for(n).decode("utf-8", "surrogatepass") for _, _, n in merged]
        if ascii_only:
            return self._splice(text, merged, markers)
        out = self._splice(data, merged, [m.encode("utf-8", "surrogatepass") for m in markers])
        return out.decode("utf-8", "surrogatepass")

    def redact_bytes(self, data: bytes | bytearray | memoryview) -> bytes:
        """Return *data* with every registered secret (and detection) masked.

        Raises:
            TypeError: *data* is not bytes-like.
        """
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"data must be bytes, not {type(data).__name__}")
        raw = bytes(data)
        merged = self._intervals(self._snapshot(), raw, text=False)
        if not merged:
            return raw
        return self._splice(raw, merged, [self._marker_for(n) for _, _, n in merged])

    def redact_obj(self, obj: object) -> object:
        """Return a copy of a nested structure with keys and values redacted.

        See :func:`flux_secret._structures.redact_obj` for the guarantee.
        """
        from flux_secret._structures import redact_obj

        return redact_obj(self, obj)

    def redact_exception(self, exc: BaseException) -> RedactedException:
        """Return a :class:`RedactedException` standing for *exc*, everything redacted."""
        from flux_secret._structures import redact_exception

        return redact_exception(self, exc)

    def stream(self, kind: type[str] | type[bytes] | None = None) -> StreamRedactor:
        """A new :class:`StreamRedactor` over this registry, of *kind* (``str`` or
        ``bytes``; by default the type of the first chunk)."""
        from flux_secret._stream import StreamRedactor

        return StreamRedactor(self, kind)

    def logging_filter(self) -> RedactingFilter:
        """A new :class:`RedactingFilter` over this registry."""
        from flux_secret._logging import RedactingFilter

        return RedactingFilter(self)

    def report(self) -> RedactionReport:
        """Counts of masked regions per name since this redactor was created."""
        return self._tally.report()
