"""Loading a server's bearer token and TLS context: never from argv, never loosely.

Guarantee: a token comes from an environment variable or a file; a token file must be
a regular file that neither group nor others can read or write, owned by this user
or root (as ssh insists for its keys and configuration), and its one line is the
token. Errors name the variable or file, never the
token's value.
"""

from __future__ import annotations

import os
import ssl
import stat

from flux_system._exceptions import PortError, PortReason

__all__ = ["MIN_TOKEN_LENGTH", "server_tls_context", "token_from_env", "token_from_file"]

MIN_TOKEN_LENGTH = 16
"""Shorter tokens are refused: a guessable token is no authentication."""


def _auth(message: str, target: str) -> PortError:
    return PortError(message, op="token", target=target, reason=PortReason.AUTH)


def _check(token: str, where: str) -> bytes:
    token = token.strip("\r\n")
    if len(token) < MIN_TOKEN_LENGTH:
        raise _auth(f"the token in {where} is shorter than {MIN_TOKEN_LENGTH} characters", where)
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in token):
        raise _auth(f"the token in {where} holds whitespace or control characters", where)
    return token.encode("utf-8")


def token_from_env(name: str) -> bytes:
    """The token in environment variable *name*.

    Raises:
        PortError: ``AUTH`` when it is unset, too short or malformed.
    """
    value = os.environ.get(name)
    if value is None:
        raise _auth(f"environment variable {name} is not set", name)
    return _check(value, f"${name}")


def token_from_file(path: str) -> bytes:
    """The token in the file *path* (one line).

    Raises:
        PortError: ``AUTH`` when the file is missing, not a regular file, accessible to
            group or others, owned by another user than this one or root, too large,
            or its token is too short or malformed.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise _auth(f"cannot open token file {path}: {exc.strerror}", path) from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _auth(f"token file {path} is not a regular file", path)
        if st.st_mode & 0o077:
            raise _auth(f"token file {path} is accessible to group or others (chmod 600 it)", path)
        if st.st_uid not in (os.geteuid(), 0):  # its owner can read and change it
            raise _auth(f"token file {path} is owned by uid {st.st_uid}, not by this user", path)
        data = os.read(fd, 4097)
    finally:
        os.close(fd)
    if len(data) > 4096:
        raise _auth(f"token file {path} is larger than 4 KiB", path)
    try:
        text = data.decode("utf-8").splitlines()[0] if data else ""
    except UnicodeDecodeError as exc:
        raise _auth(f"token file {path} is not UTF-8", path) from exc
    return _check(text, path)


def server_tls_context(cert: str, key: str) -> ssl.SSLContext:
    """A TLS server context (TLS 1.2 or later) from a certificate chain and its key.

    Raises:
        PortError: ``AUTH`` when either cannot be loaded.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise _auth(f"cannot load TLS certificate {cert} / key {key}: {exc}", cert) from exc
    return ctx
