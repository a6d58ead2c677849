"""Secret references: parsing (vectors) and host-side resolution through caller resolvers."""

from __future__ import annotations

from pathlib import Path

import pytest

from flux_secret import (
    Redactor,
    RefReason,
    ResolutionError,
    ResolutionReason,
    SecretRef,
    SecretRefError,
    SecretResolver,
    SecretValue,
)
from tests._vectors import load_vectors

CASES = load_vectors("flux_secret", "refs")
SECRET = "resolved-Secret-value-42"


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_parse_vectors(case: dict[str, str]) -> None:
    if "reason" in case:
        with pytest.raises(SecretRefError) as info:
            SecretRef.parse(case["ref"])
        assert info.value.reason is RefReason[case["reason"]]
    else:
        ref = SecretRef.parse(case["ref"])
        assert (ref.kind, ref.target) == (case["kind"], case["target"])
        assert str(ref) == case["ref"]
        assert SecretRef.parse(str(ref)) == ref


def test_parse_refuses_non_string() -> None:
    with pytest.raises(SecretRefError) as info:
        SecretRef.parse(b"secret:env/A")  # type: ignore[arg-type]
    assert info.value.reason is RefReason.NOT_A_STRING


def test_env_resolution_registers_before_returning() -> None:
    red = Redactor()
    value = SecretResolver(environ={"TOKEN": SECRET}, redactor=red).resolve("secret:env/TOKEN")
    assert isinstance(value, SecretValue)
    assert value.expose_secret() == SECRET
    assert value.name == "env/TOKEN"
    assert red.names() == ["env/TOKEN"]
    assert red.redact(f"x {SECRET} y") == "x [redacted] y"


def test_env_missing_key_and_no_environ() -> None:
    with pytest.raises(ResolutionError) as info:
        SecretResolver(environ={}).resolve("secret:env/NOPE")
    assert info.value.reason is ResolutionReason.NOT_FOUND
    with pytest.raises(ResolutionError) as info:
        SecretResolver().resolve("secret:env/NOPE")
    assert info.value.reason is ResolutionReason.NO_RESOLVER


def test_file_resolution_with_real_file(tmp_path: Path) -> None:
    (tmp_path / "db").write_bytes(SECRET.encode() + b"\n")
    (tmp_path / "crlf").write_bytes(SECRET.encode() + b"\r\n")
    (tmp_path / "bare-cr").write_bytes(SECRET.encode() + b"\r")

    def read(path: str) -> bytes:
        return (tmp_path / path).read_bytes()

    resolver = SecretResolver(read_file=read)
    assert resolver.resolve("secret:file/db").expose_secret() == SECRET.encode()
    assert resolver.resolve("secret:file/crlf").expose_secret() == SECRET.encode()
    assert resolver.resolve("secret:file/bare-cr").expose_secret() == SECRET.encode() + b"\r"
    with pytest.raises(ResolutionError) as info:
        resolver.resolve("secret:file/missing")
    assert info.value.reason is ResolutionReason.NOT_FOUND


def test_reader_error_is_not_chained_and_does_not_quote_content(tmp_path: Path) -> None:
    def read(path: str) -> bytes:
        raise ValueError(f"bad content: {SECRET}")

    with pytest.raises(ResolutionError) as info:
        SecretResolver(read_file=read).resolve("secret:file/x")
    assert info.value.reason is ResolutionReason.READ_FAILED
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert SECRET not in str(info.value) and SECRET not in repr(info.value)


def test_refused_by_redactor_is_not_returned() -> None:
    red = Redactor()
    with pytest.raises(ResolutionError) as info:
        SecretResolver(environ={"SHORT": "abc12"}, redactor=red).resolve("secret:env/SHORT")
    assert info.value.reason is ResolutionReason.REFUSED_BY_REDACTOR
    assert "abc12" not in str(info.value)
    assert info.value.__cause__ is None


def test_empty_and_bad_values() -> None:
    with pytest.raises(ResolutionError) as info:
        SecretResolver(environ={"E": ""}).resolve("secret:env/E")
    assert info.value.reason is ResolutionReason.EMPTY
    with pytest.raises(ResolutionError) as info:
        SecretResolver(read_file=lambda p: 42).resolve("secret:file/x")  # type: ignore[arg-type,return-value]
    assert info.value.reason is ResolutionReason.BAD_VALUE


def test_long_file_reference_resolves_and_registers(tmp_path: Path) -> None:
    deep = "d/" * 1500 + "secret"
    red = Redactor()
    value = SecretResolver(read_file=lambda p: SECRET.encode(), redactor=red).resolve(
        f"secret:file/{deep}"
    )
    assert value.name == f"file/{deep}"
    assert red.redact(SECRET) == "[redacted]"
