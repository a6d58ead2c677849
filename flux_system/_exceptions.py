"""Errors raised by :mod:`flux_system`.

Every error raised by a public call is a :class:`FluxSystemError`; an ``OSError``
never escapes a public call untranslated (see :func:`map_os_errors`). Each error
carries structured fields — ``op`` (the operation), ``target`` (the path, host or
argv[0] it concerned; never a full URL query or a secret) and ``reason`` (an enum
member). Tests and callers branch on ``reason``, never on message text.

``str(err)`` is the message followed by what it concerned, e.g.
``read_bytes: No such file or directory (path 'src/a.py')``: the target is quoted
with ``repr`` escaping and any control or other non-printable character in the message
is escaped the same way, so a file name holding a newline or ESC cannot forge a log
line or drive a terminal. Data being written, environment values and URL queries are
never part of an error.

The tree::

    FluxSystemError
    ├── WorkspaceError                 a file operation failed inside the confinement
    │   └── NotFoundError              (reason NOT_FOUND)
    ├── ConfinementError               the request would leave (or abuse) the confinement
    │   ├── PathEscapeError            resolution would leave the root (.., symlink, magic link)
    │   └── InvalidPathError           refused before any syscall (NUL, control byte, too long)
    ├── EgressDeniedError              the egress guard refused a destination
    ├── ProcessError                   a child could not be run to a result
    │   ├── ProcessTimeoutError        the wall-time limit expired (carries captured output)
    │   └── SpawnError                 the child could not be created
    ├── SandboxUnavailableError        a required sandbox layer is not usable here
    └── PortError                      a port (remote substrate) call failed
        ├── RefusedError               the far side's guard said no: do not retry unchanged
        ├── UnreachableError           no answer: acceptance unknown
        ├── UnknownOutcomeError        accepted, result unprovable: never auto-retry a mutation
        └── UnservedError              the operation is not served by that substrate
"""

from __future__ import annotations

import contextlib
import enum
import errno
from collections.abc import Iterator
from typing import ClassVar

__all__ = [
    "ConfinementError",
    "ConfinementReason",
    "EgressDeniedError",
    "EgressReason",
    "FluxSystemError",
    "InvalidPathError",
    "NotFoundError",
    "PathEscapeError",
    "PortError",
    "PortReason",
    "ProcessError",
    "ProcessReason",
    "ProcessTimeoutError",
    "RefusedError",
    "SandboxReason",
    "SandboxUnavailableError",
    "SpawnError",
    "UnknownOutcomeError",
    "UnreachableError",
    "UnservedError",
    "WorkspaceError",
    "WorkspaceReason",
    "map_os_errors",
]


class WorkspaceReason(enum.Enum):
    """Why a file operation inside the confinement failed."""

    NOT_FOUND = "not_found"
    EXISTS = "exists"
    NOT_A_DIRECTORY = "not_a_directory"
    IS_A_DIRECTORY = "is_a_directory"
    NOT_EMPTY = "not_empty"
    PERMISSION = "permission"
    SPECIAL_FILE = "special_file"  # FIFO, socket or device: refused before it is opened
    HARD_LINK = "hard_link"  # in-place write to an inode another name shares
    TOO_LARGE = "too_large"  # over a caller's limit
    READ_ONLY = "read_only"  # write through a read-only root
    TOO_MANY_ENTRIES = "too_many_entries"
    CROSS_ROOT = "cross_root"  # rename/link between different roots
    IS_A_SYMLINK = "is_a_symlink"
    CLOSED = "closed"
    NO_SPACE = "no_space"
    IO = "io"  # any other OS error (the errno is kept on the error)
    BAD_NAME = "bad_name"  # final component is ".", ".." or the root: nothing to act on
    TOO_DEEP = "too_deep"  # directory nesting over a walk's bound
    UNSUPPORTED = "unsupported"  # e.g. resolver="openat2" on a kernel without openat2
    DECODE = "decode"  # read_text: the bytes are not valid in the requested encoding


class ConfinementReason(enum.Enum):
    """Why a path was refused by the confinement."""

    ESCAPE = "escape"  # `..` or a relative symlink would leave the root
    ABSOLUTE_PATH = "absolute_path"  # absolute argument not lexically inside a root
    ABSOLUTE_SYMLINK = "absolute_symlink"  # beneath semantics refuse absolute targets
    MAGIC_LINK = "magic_link"  # /proc/self/fd/N, /proc/self/root, ...
    SYMLINK_LOOP = "symlink_loop"  # symlink budget exhausted
    CROSSES_MOUNT = "crosses_mount"
    UNKNOWN_ROOT = "unknown_root"  # @name that is not a named root
    CONTROL_BYTE = "control_byte"
    TOO_LONG = "too_long"
    EMPTY = "empty"
    RACE = "race"  # the kernel reported a concurrent rename during resolution (EAGAIN)
    UNENCODABLE = "unencodable"  # text that the file-system encoding cannot represent


class EgressReason(enum.Enum):
    """Why the egress guard refused a destination."""

    SCHEME = "scheme"
    USERINFO = "userinfo"
    MALFORMED = "malformed"
    CONTROL_BYTE = "control_byte"
    BACKSLASH = "backslash"
    NON_CANONICAL_IP = "non_canonical_ip"
    ZONE_ID = "zone_id"
    EMPTY_HOST = "empty_host"
    HOST_TOO_LONG = "host_too_long"
    IDNA = "idna"
    PORT = "port"
    INTERNAL_NAME = "internal_name"
    NOT_ALLOWED = "not_allowed"  # not on the caller's allow-list of public hosts
    BLOCKED_ADDRESS = "blocked_address"
    RESOLUTION_FAILED = "resolution_failed"
    TOO_MANY_ANSWERS = "too_many_answers"
    REDIRECT = "redirect"  # too many hops, https->http, ...
    DEADLINE = "deadline"
    UNREACHABLE = "unreachable"  # the guard accepted, but no vetted address answered


class ProcessReason(enum.Enum):
    """Why a child could not be run to a result."""

    TIMEOUT = "timeout"
    NOT_FOUND = "not_found"  # argv[0] not found on the child's PATH
    NOT_EXECUTABLE = "not_executable"
    BAD_CWD = "bad_cwd"
    SPAWN_FAILED = "spawn_failed"
    LIMIT_UNENFORCEABLE = "limit_unenforceable"
    TOO_MANY_CHILDREN = "too_many_children"
    STDIN_NOT_CONSUMED = "stdin_not_consumed"
    CANCELLED = "cancelled"
    CLOSED = "closed"
    INVALID_ARGV = "invalid_argv"  # empty argv, NUL byte in an argument
    INVALID_ENV = "invalid_env"  # env name empty or with "=", NUL, not encodable
    STATUS_UNAVAILABLE = "status_unavailable"  # SIGCHLD ignored: exit statuses discarded
    FORKED = "forked"  # used in a child forked from the process that created the System


class SandboxReason(enum.Enum):
    """Why a sandbox layer is not usable."""

    MISSING_BACKEND = "missing_backend"
    LAYER_UNAVAILABLE = "layer_unavailable"
    UNSUPPORTED_PLATFORM = "unsupported_platform"
    BAD_PROFILE = "bad_profile"
    WORKSPACE_COVERS_HOME = "workspace_covers_home"  # the workspace is or holds $HOME or /
    EXTRA_PATH_UNSAFE = "extra_path_unsafe"  # an extra path has a link a run could plant
    BAD_SETTING = "bad_setting"  # a value the sandbox cannot use (a host pattern, a CIDR)


class PortReason(enum.Enum):
    """Why a port (remote substrate) call failed."""

    REFUSED = "refused"
    UNREACHABLE = "unreachable"
    UNKNOWN_OUTCOME = "unknown_outcome"
    UNSERVED = "unserved"
    PROTOCOL = "protocol"
    AUTH = "auth"


def _quote(text: str) -> str:
    """*text* as a ``repr`` literal: quotes, and every non-printable character escaped."""
    return str.__repr__(str.__str__(text))


def _escape(text: str) -> str:
    """*text* with each non-printable character (C0/C1 controls, DEL, bidi and other
    format characters, lone surrogates) replaced by its ``repr`` escape."""
    plain = str.__str__(text)
    if plain.isprintable():
        return plain
    return "".join(c if c.isprintable() else str.__repr__(c)[1:-1] for c in plain)


class FluxSystemError(Exception):
    """Root of every error raised by :mod:`flux_system`.

    ``str()`` is the message (non-printable characters escaped) followed by the
    target, ``repr``-quoted and labelled (``path``, ``host``, ``command``, ``layer``)
    unless the message already shows it so.

    Attributes:
        op: the operation that failed (``"read_bytes"``, ``"run"``, ``"guard_url"``).
        target: what it concerned — a workspace-relative path, a host, argv[0]; never
            a URL query, an environment value or other secret material.
        reason: an enum member saying why; branch on this, not on the message.
    """

    default_reason: ClassVar[enum.Enum | None] = None
    target_label: ClassVar[str] = "target"  # how str() names the target

    def __init__(
        self,
        message: str,
        *,
        op: str,
        target: str | None = None,
        reason: enum.Enum | None = None,
    ) -> None:
        super().__init__(message)
        self.op = op
        self.target = target
        chosen = reason if reason is not None else self.default_reason
        if chosen is None:
            raise TypeError(f"{type(self).__name__} needs a reason")
        self.reason: enum.Enum = chosen

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __str__(self) -> str:
        text = _escape(self.message)
        target = self.target
        if not isinstance(target, str):
            return text
        shown = _quote(target)
        if shown in text:
            return text
        return f"{text} ({self.target_label} {shown})"

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.message, dict(self.__dict__)))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(op={self.op!r}, target={self.target!r}, "
            f"reason={self.reason.value!r})"
        )


def _rebuild(cls: type[FluxSystemError], message: str, state: dict[str, object]) -> object:
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.__dict__.update(state)
    return err


class WorkspaceError(FluxSystemError):
    """A file operation failed for a reason inside the confinement.

    ``path`` is the caller's path (as given). ``errno`` is the OS error number when
    the failure came from the kernel, else ``None``.
    """

    reason: WorkspaceReason
    target_label = "path"

    def __init__(
        self,
        message: str,
        *,
        op: str,
        path: str | None = None,
        reason: WorkspaceReason,
        errno: int | None = None,
    ) -> None:
        super().__init__(message, op=op, target=path, reason=reason)
        self.errno = errno

    @property
    def path(self) -> str | None:
        return self.target


class NotFoundError(WorkspaceError):
    """The path does not exist (beneath its root)."""

    def __init__(
        self,
        message: str,
        *,
        op: str,
        path: str | None = None,
        reason: WorkspaceReason = WorkspaceReason.NOT_FOUND,
        errno: int | None = None,
    ) -> None:
        super().__init__(message, op=op, path=path, reason=reason, errno=errno)


class ConfinementError(FluxSystemError):
    """The request would leave, or abuse, the confinement."""

    reason: ConfinementReason
    target_label = "path"

    def __init__(
        self, message: str, *, op: str, path: str | None = None, reason: ConfinementReason
    ) -> None:
        super().__init__(message, op=op, target=path, reason=reason)

    @property
    def path(self) -> str | None:
        return self.target


class PathEscapeError(ConfinementError):
    """Resolution would leave the root: ``..``, a symlink, an absolute target, a magic link."""


class InvalidPathError(ConfinementError, ValueError):
    """The path was refused before any syscall (NUL or control byte, too long, empty)."""


class EgressDeniedError(FluxSystemError):
    """The egress guard refused a destination.

    ``target`` is the host (never the URL's path or query); ``address`` the offending
    IP address as text when one was involved.
    """

    reason: EgressReason
    target_label = "host"

    def __init__(
        self,
        message: str,
        *,
        op: str,
        target: str | None = None,
        reason: EgressReason,
        address: str | None = None,
    ) -> None:
        super().__init__(message, op=op, target=target, reason=reason)
        self.address = address

    @property
    def host(self) -> str | None:
        return self.target


class ProcessError(FluxSystemError):
    """A child could not be run to a result (a non-zero exit is a result, not this).

    ``target`` is argv[0] as given (the command), never an argument or the environment.
    """

    reason: ProcessReason
    target_label = "command"

    def __init__(
        self, message: str, *, op: str, target: str | None = None, reason: ProcessReason
    ) -> None:
        super().__init__(message, op=op, target=target, reason=reason)


class ProcessTimeoutError(ProcessError):
    """The wall-time limit expired; the tree was killed and reaped.

    ``stdout``/``stderr`` hold what was captured before the kill (at most the cap).
    """

    def __init__(
        self,
        message: str,
        *,
        op: str,
        target: str | None = None,
        reason: ProcessReason = ProcessReason.TIMEOUT,
        timeout: float,
        stdout: bytes = b"",
        stderr: bytes = b"",
    ) -> None:
        super().__init__(message, op=op, target=target, reason=reason)
        self.timeout = timeout
        self.stdout = stdout
        self.stderr = stderr


class SpawnError(ProcessError):
    """The child could not be created (not found, not executable, bad cwd, limits)."""


class SandboxUnavailableError(FluxSystemError):
    """A sandbox backend or layer that was required is not usable on this host.

    ``layer`` names it (``"bubblewrap"``, ``"landlock"``, ``"seccomp"``, ...).
    """

    reason: SandboxReason
    target_label = "layer"

    def __init__(
        self, message: str, *, op: str, layer: str | None = None, reason: SandboxReason
    ) -> None:
        super().__init__(message, op=op, target=layer, reason=reason)

    @property
    def layer(self) -> str | None:
        return self.target


class PortError(FluxSystemError):
    """A call through a port (a possibly remote substrate) failed.

    ``remote_error`` and ``remote_reason`` are the far side's error class name and
    reason value when the far side reported an error (``None`` otherwise): for display
    and mapping; the class of this error is what a caller branches on.
    """

    reason: PortReason
    remote_error: str | None = None
    remote_reason: str | None = None

    def __init__(
        self,
        message: str,
        *,
        op: str,
        target: str | None = None,
        reason: PortReason | None = None,
    ) -> None:
        super().__init__(message, op=op, target=target, reason=reason)


class RefusedError(PortError):
    """The far side's guard said no. Do not retry unchanged."""

    default_reason = PortReason.REFUSED


class UnreachableError(PortError):
    """No answer came back; whether the far side accepted the call is unknown."""

    default_reason = PortReason.UNREACHABLE


class UnknownOutcomeError(PortError):
    """The call was accepted but its result cannot be proven. Never auto-retry a mutation."""

    default_reason = PortReason.UNKNOWN_OUTCOME


class UnservedError(PortError):
    """The substrate does not serve this operation (never a fabricated value instead)."""

    default_reason = PortReason.UNSERVED


_ERRNO_REASONS: dict[int, WorkspaceReason] = {
    errno.ENOENT: WorkspaceReason.NOT_FOUND,
    errno.EEXIST: WorkspaceReason.EXISTS,
    errno.ENOTDIR: WorkspaceReason.NOT_A_DIRECTORY,
    errno.EISDIR: WorkspaceReason.IS_A_DIRECTORY,
    errno.ENOTEMPTY: WorkspaceReason.NOT_EMPTY,
    errno.EACCES: WorkspaceReason.PERMISSION,
    errno.EPERM: WorkspaceReason.PERMISSION,
    errno.EROFS: WorkspaceReason.READ_ONLY,
    errno.EXDEV: WorkspaceReason.CROSS_ROOT,
    errno.ENOSPC: WorkspaceReason.NO_SPACE,
    errno.EDQUOT: WorkspaceReason.NO_SPACE,
    errno.EFBIG: WorkspaceReason.TOO_LARGE,
    errno.ENXIO: WorkspaceReason.SPECIAL_FILE,
}


def workspace_error_from_os(exc: OSError, *, op: str, path: str | None) -> WorkspaceError:
    """Translate one ``OSError`` into the matching :class:`WorkspaceError`."""
    reason = _ERRNO_REASONS.get(exc.errno or 0, WorkspaceReason.IO)
    cls = NotFoundError if reason is WorkspaceReason.NOT_FOUND else WorkspaceError
    text = exc.strerror or type(exc).__name__
    return cls(f"{op}: {text}", op=op, path=path, reason=reason, errno=exc.errno)


@contextlib.contextmanager
def map_os_errors(op: str, path: str | None = None) -> Iterator[None]:
    """Translate any ``OSError`` raised inside the block into a :class:`WorkspaceError`.

    The one place where OS errors of file operations are translated
    (as httpcore's ``map_exceptions``); always ``raise New(...) from exc``.
    """
    try:
        yield
    except OSError as exc:
        raise workspace_error_from_os(exc, op=op, path=path) from exc
