"""Secret references (``secret:env/KEY``, ``secret:file/PATH``) and their resolution.

A reference names where a secret lives; it is not itself secret. Resolution happens on
the host, through resolvers the *caller* passes (an environment mapping, a file-reading
callable): this package opens no file and reads no environment on its own.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from flux_secret._exceptions import (
    RefReason,
    RegistrationError,
    ResolutionError,
    ResolutionReason,
    SecretRefError,
)
from flux_secret._value import SecretValue

if typing.TYPE_CHECKING:
    from flux_secret._redactor import Redactor

__all__ = ["SecretRef", "SecretResolver"]

_PREFIX = "secret:"
_MAX_REF_LENGTH = 4096  # PATH_MAX plus the prefix: a longer reference is not a path
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@typing.final
@dataclass(frozen=True, slots=True)
class SecretRef:
    """A parsed secret reference: ``kind`` is ``"env"`` or ``"file"``, ``target`` the key
    or path.

    Guarantee: an instance only exists for a well-formed reference — an env key
    matching ``[A-Za-z_][A-Za-z0-9_]*``; a file path without control characters,
    backslashes, empty, ``.`` or ``..`` components (an absolute path is written
    ``secret:file//run/secrets/x``).

    Not guaranteed: that the key or file exists, or that the caller's file reader
    confines the path — the reader carries the authority (for example a workspace
    bound to a secrets directory).
    """

    kind: typing.Literal["env", "file"]
    target: str

    @classmethod
    def parse(cls, text: str) -> SecretRef:
        """Parse ``secret:env/KEY`` or ``secret:file/PATH``.

        Raises:
            SecretRefError: the reference is malformed (``reason`` says why).
        """
        if not isinstance(text, str):
            raise SecretRefError("a secret reference must be a str", reason=RefReason.NOT_A_STRING)
        if not text:
            raise SecretRefError("empty secret reference", reason=RefReason.EMPTY)
        if len(text) > _MAX_REF_LENGTH:
            raise SecretRefError("secret reference too long", reason=RefReason.TOO_LONG)
        if _CONTROL.search(text):
            raise SecretRefError(
                "control character in secret reference", reason=RefReason.CONTROL_BYTE
            )
        if not text.startswith(_PREFIX):
            raise SecretRefError("not a secret: reference", reason=RefReason.SCHEME)
        kind, slash, target = text[len(_PREFIX) :].partition("/")
        if not slash or kind not in ("env", "file"):
            raise SecretRefError("secret reference kind must be env or file", reason=RefReason.KIND)
        if kind == "env":
            if not _ENV_KEY.fullmatch(target):
                raise SecretRefError("malformed environment key", reason=RefReason.BAD_KEY)
            return cls("env", target)
        _check_path(target)
        return cls("file", target)

    def __str__(self) -> str:
        return f"{_PREFIX}{self.kind}/{self.target}"


def _check_path(path: str) -> None:
    if not path or "\\" in path:
        raise SecretRefError("malformed secret file path", reason=RefReason.BAD_PATH)
    parts = path[1:].split("/") if path.startswith("/") else path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise SecretRefError("malformed secret file path", reason=RefReason.BAD_PATH)


@typing.final
class SecretResolver:
    """Resolve references through caller-supplied resolvers; optionally register first.

    Guarantee: when a *redactor* is given, the value is registered with it **before**
    :meth:`resolve` returns — a secret is masked before any output can contain it; a
    value the redactor refuses (too short, ...) is not returned at all. A file's
    content loses one trailing line ending (``\\n`` or ``\\r\\n``), as files written by
    ``echo`` carry one. Errors never contain the value, nor chain the reader's
    exception (whose message could quote content).

    Not guaranteed: the environment mapping and reader are the caller's; this object
    adds no confinement to them.

    Args:
        environ: the mapping ``secret:env/KEY`` reads (e.g. a copy of ``os.environ``).
        read_file: a callable returning the bytes at a path (e.g. a workspace's
            ``read_bytes``); ``secret:file/...`` is refused without one.
        redactor: a :class:`Redactor` to register every resolved value with.
    """

    def __init__(
        self,
        *,
        environ: Mapping[str, str] | None = None,
        read_file: Callable[[str], bytes | str] | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        self._environ = environ
        self._read_file = read_file
        self._redactor = redactor

    def resolve(self, ref: SecretRef | str) -> SecretValue:
        """Resolve *ref* (a :class:`SecretRef` or its string) to a :class:`SecretValue`.

        Raises:
            SecretRefError: *ref* is a malformed string.
            ResolutionError: no resolver, not found, reader failure, empty value, or
                the redactor refused the value (``reason`` says which).
        """
        parsed = SecretRef.parse(ref) if isinstance(ref, str) else ref
        if not isinstance(parsed, SecretRef):
            raise TypeError(f"ref must be SecretRef or str, not {type(ref).__name__}")
        value = self._lookup(parsed)
        if not value:
            raise ResolutionError(
                "secret is empty", reason=ResolutionReason.EMPTY, kind=parsed.kind
            )
        name = f"{parsed.kind}/{parsed.target}"
        if self._redactor is not None:
            try:
                self._redactor.register(value, name=name)
            except RegistrationError:
                raise ResolutionError(
                    "the redactor refused the resolved secret",
                    reason=ResolutionReason.REFUSED_BY_REDACTOR,
                    kind=parsed.kind,
                ) from None
        return SecretValue(value, name=name)

    def _lookup(self, ref: SecretRef) -> str | bytes:
        if ref.kind == "env":
            if self._environ is None:
                raise ResolutionError(
                    "no environment given", reason=ResolutionReason.NO_RESOLVER, kind="env"
                )
            found = self._environ.get(ref.target)
            if found is None:
                raise ResolutionError(
                    "environment key not set", reason=ResolutionReason.NOT_FOUND, kind="env"
                )
            if not isinstance(found, str):
                raise ResolutionError(
                    "environment value is not a str", reason=ResolutionReason.BAD_VALUE, kind="env"
                )
            return found
        if self._read_file is None:
            raise ResolutionError(
                "no file reader given", reason=ResolutionReason.NO_RESOLVER, kind="file"
            )
        try:
            data = self._read_file(ref.target)
        except FileNotFoundError:
            raise ResolutionError(
                "secret file not found", reason=ResolutionReason.NOT_FOUND, kind="file"
            ) from None
        except Exception:  # the reader's error may quote content: never chained
            raise ResolutionError(
                "secret file could not be read", reason=ResolutionReason.READ_FAILED, kind="file"
            ) from None
        if isinstance(data, str):
            return data[:-2] if data.endswith("\r\n") else data.removesuffix("\n")
        if isinstance(data, bytes):
            return data[:-2] if data.endswith(b"\r\n") else data.removesuffix(b"\n")
        raise ResolutionError(
            "file reader returned neither bytes nor str",
            reason=ResolutionReason.BAD_VALUE,
            kind="file",
        )
