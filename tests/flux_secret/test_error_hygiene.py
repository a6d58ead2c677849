"""A str subclass cannot talk the redactor out of masking the text it really holds.

``redact`` judged a ``str`` subclass through its own ``encode``/``isascii``; one whose
``encode`` hid the secret was returned unchanged — the secret with it.
"""

from __future__ import annotations

import logging
import pickle

import pytest

from flux_secret import (
    ExposureError,
    ExposureReason,
    RedactionError,
    RedactionReason,
    Redactor,
    RefReason,
    RegistrationError,
    RegistrationReason,
    ResolutionError,
    ResolutionReason,
    SecretError,
    SecretRefError,
    SecretResolver,
)

SECRET = "hygiene-Secret-4242"


class _Hider(str):
    __slots__ = ()

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return b"nothing to see"

    def isascii(self) -> bool:
        return True


def _red() -> Redactor:
    red = Redactor()
    red.register(SECRET, "s")
    return red


def test_redact_masks_the_text_a_str_subclass_holds() -> None:
    out = _red().redact(_Hider(f"token={SECRET}"))
    assert SECRET not in str.__str__(out)


def test_redact_obj_masks_a_str_subclass_inside_a_structure() -> None:
    out = _red().redact_obj({"k": [_Hider(SECRET)]})
    assert isinstance(out, dict)
    assert SECRET not in str.__str__(out["k"][0])


def test_stream_masks_the_text_a_str_subclass_holds() -> None:
    stream = _red().stream()
    first = stream.feed(_Hider(f"a {SECRET} b"))
    rest = stream.flush()
    assert isinstance(rest, str)
    out = first + rest
    assert SECRET not in str.__str__(out)


def test_logging_filter_masks_a_str_subclass_message() -> None:
    record = logging.LogRecord("t", logging.INFO, __file__, 1, _Hider(SECRET), None, None)
    _red().logging_filter().filter(record)
    assert SECRET not in str.__str__(record.getMessage())


class _BytesHider(bytes):
    def __bytes__(self) -> bytes:
        return b"nothing to see"

    def __len__(self) -> int:
        return 64

    def __contains__(self, item: object) -> bool:
        return False


def test_register_masks_the_text_a_str_subclass_holds() -> None:
    red = Redactor()
    red.register(_Hider(SECRET), "s")
    assert SECRET not in red.redact(f"x {SECRET} y")


def test_resolver_registers_the_text_a_str_subclass_value_holds() -> None:
    red = Redactor()
    SecretResolver(environ={"K": _Hider(SECRET)}, redactor=red).resolve("secret:env/K")
    assert SECRET not in red.redact(f"x {SECRET} y")


def test_register_masks_the_bytes_a_bytes_subclass_holds() -> None:
    red = Redactor()
    red.register(_BytesHider(SECRET.encode()), "s")
    assert SECRET not in red.redact(f"x {SECRET} y")


@pytest.mark.parametrize(
    "error",
    [
        SecretRefError("malformed reference", reason=RefReason.SCHEME),
        ResolutionError("not set", reason=ResolutionReason.NOT_FOUND, kind="env"),
        RegistrationError("too short", reason=RegistrationReason.TOO_SHORT, name="api"),
        RedactionError("unsupported", reason=RedactionReason.UNSUPPORTED_TYPE),
        ExposureError("no pickling", reason=ExposureReason.PICKLE),
    ],
    ids=lambda e: type(e).__name__,
)
def test_errors_cross_a_process_boundary_as_they_were(error: SecretError) -> None:
    """Pickled (as a process pool sends them) and back: same type, message and fields
    (the subclasses' constructors used to make unpickling fail with TypeError)."""
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error)
    assert str(again) == str(error)
    assert again.__dict__ == error.__dict__
