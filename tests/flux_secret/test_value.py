"""SecretValue never shows its value implicitly."""

from __future__ import annotations

import copy
import logging
import pickle

import pytest

from flux_secret import ExposureError, ExposureReason, SecretValue

RAW = "do-not-show-me-9f3a"


@pytest.mark.parametrize("raw", [RAW, RAW.encode()])
def test_renderings_hide_the_value(raw: str | bytes) -> None:
    value = SecretValue(raw, name="env/X")
    text = RAW
    renderings = [
        repr(value),
        str(value),
        f"{value}",
        f"{value!r}",
        f"{value:>40}",
        "%s %r" % (value, value),  # noqa: UP031 - the %-operator path on purpose
        "{} {!r}".format(value, value),  # noqa: UP032 - str.format on purpose
        repr([value, {"k": value}]),
        str(ValueError(value)),
        repr(ValueError(value)),
    ]
    for rendered in renderings:
        assert text not in rendered
    assert value.expose_secret() == raw


def test_logging_does_not_reveal(caplog: pytest.LogCaptureFixture) -> None:
    value = SecretValue(RAW)
    log = logging.getLogger("flux_secret.test")
    with caplog.at_level(logging.INFO, logger="flux_secret.test"):
        log.info("value %s %r", value, value)
        log.info(value)
        try:
            raise RuntimeError(value)
        except RuntimeError:
            log.exception("failed with %s", value)
    assert caplog.records
    assert RAW not in caplog.text


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickling_refused(protocol: int) -> None:
    with pytest.raises(ExposureError) as info:
        pickle.dumps(SecretValue(RAW), protocol=protocol)
    assert info.value.reason is ExposureReason.PICKLE
    assert RAW not in str(info.value)


def test_pickling_inside_a_structure_refused() -> None:
    with pytest.raises(ExposureError):
        pickle.dumps({"nested": [SecretValue(RAW)]})


def test_copy_keeps_the_same_object_and_bytes_is_refused() -> None:
    value = SecretValue(RAW)
    assert copy.copy(value) is value
    assert copy.deepcopy({"v": value})["v"] is value
    with pytest.raises(ExposureError) as info:
        bytes(value)
    assert info.value.reason is ExposureReason.COPY


def test_equality_unhashable_and_final() -> None:
    assert SecretValue(RAW) == SecretValue(RAW)
    assert SecretValue(RAW) != SecretValue(RAW + "x")
    assert SecretValue(RAW) != SecretValue(RAW.encode())
    with pytest.raises(TypeError):
        hash(SecretValue(RAW))
    with pytest.raises(TypeError):
        type("Sub", (SecretValue,), {})
    with pytest.raises(TypeError):
        SecretValue(42)  # type: ignore[arg-type]
    assert not hasattr(SecretValue(RAW), "__dict__")
