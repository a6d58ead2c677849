"""The child's environment: starts empty, allow-list from the parent, hooks never copied.

Guarantee: a variable reaches the child only if it is on the allow-list (copied from
the parent) or the caller passed it explicitly; loader and interpreter hooks on
:data:`DENIED_HOOKS` are never copied from the parent, whatever the allow-list says.
Names are compared upper-cased against the hooks, so no case variant slips through.
The parent's ``PATH`` is copied without its relative entries (empty, ``.``, ``bin``):
a child shell would otherwise search its workspace cwd for commands.
Not guaranteed: what the caller's explicit ``env`` contains — it is applied last, as
given (a caller may deliberately hand a child ``PYTHONPATH`` or a relative ``PATH``);
it is only validated (names, NUL, encodability), and a refused pair never appears in
the error. Nor what a child can read with its own authority: an unsandboxed child
running as this process's uid can read ``/proc/<parent>/environ`` (docs/decisions/0022).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from flux_system._exceptions import ProcessReason, SpawnError

__all__ = [
    "DEFAULT_ENV_ALLOWLIST",
    "DENIED_HOOKS",
    "build_env",
    "is_denied_hook",
    "over",
    "resolve_argv0",
]

DEFAULT_ENV_ALLOWLIST: frozenset[str] = frozenset(
    {
        "PATH",
        "HOME",
        "LANG",
        "LC_ALL",
        "LC_CTYPE",
        "TERM",
        "TZ",
        "USER",
        "LOGNAME",
        "TMPDIR",
        # toolchain locations (directories, not hooks)
        "CARGO_HOME",
        "RUSTUP_HOME",
        "GOPATH",
        "GOROOT",
        "JAVA_HOME",
        "VIRTUAL_ENV",
    }
)
"""Variables copied from the parent by default."""

# Loader and interpreter hooks: a variable that makes a program load or run code it
# was not asked to. Never copied from the parent, even if an allow-list names it.
DENIED_HOOKS: frozenset[str] = frozenset(
    {
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "LD_DEBUG",
        "LD_DEBUG_OUTPUT",
        "LD_PROFILE",
        "LD_ORIGIN_PATH",
        "LD_BIND_NOW",
        "GCONV_PATH",
        "HOSTALIASES",
        "LOCALDOMAIN",
        "RES_OPTIONS",
        "NLSPATH",
        "MALLOC_CHECK_",
        "BASH_ENV",
        "ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "PS4",
        "PROMPT_COMMAND",
        "IFS",
        "CDPATH",
        "PYTHONSTARTUP",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONINSPECT",
        "PYTHONUSERBASE",
        "PYTHONBREAKPOINT",
        "PERL5LIB",
        "PERL5OPT",
        "PERLLIB",
        "RUBYLIB",
        "RUBYOPT",
        "NODE_OPTIONS",
        "NODE_PATH",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "CLASSPATH",
        "GIT_SSH",
        "GIT_SSH_COMMAND",
        "GIT_EXEC_PATH",
        "GIT_ASKPASS",
        "GIT_CONFIG_PARAMETERS",
        "GIT_CONFIG_GLOBAL",
        "SSH_ASKPASS",
        "SSH_AUTH_SOCK",
        "EDITOR",
        "VISUAL",
        "PAGER",
        "GLIBC_TUNABLES",
        "LOCPATH",
        "GETCONF_DIR",
        "RESOLV_HOST_CONF",
        "NIS_PATH",
        "OPENSSL_CONF",
        "OPENSSL_ENGINES",
        "LESSOPEN",
        "LESSCLOSE",
        "ZDOTDIR",
        "BASH_XTRACEFD",
        # shells: prompts expand $(...) in interactive shells; autoloaded functions
        "PS0",
        "PS1",
        "PS2",
        "FPATH",
        # runtimes and tools that run or load code named by a variable at startup
        "PHPRC",
        "PHP_INI_SCAN_DIR",
        "R_PROFILE",
        "R_PROFILE_USER",
        "R_ENVIRON",
        "R_ENVIRON_USER",
        "TCLLIBPATH",
        "VIMINIT",
        "GVIMINIT",
        "EXINIT",
        "MYVIMRC",
        "HGRCPATH",
        "SUDO_ASKPASS",
        "SUDO_EDITOR",
        "MANPAGER",
        "BROWSER",
        # ambient authority, like SSH_AUTH_SOCK: session bus, X server, Kerberos tickets
        "DBUS_SESSION_BUS_ADDRESS",
        "XAUTHORITY",
        "KRB5CCNAME",
        "GPG_AGENT_INFO",
    }
)
# Whole families: the loader (LD_, DYLD_), malloc tunables, exported bash functions
# (``BASH_FUNC_name%%``), interpreter hooks (PYTHON*, PERL*, RUBY*, NODE_*, LUA_INIT /
# LUA_CPATH, .NET startup hooks and profilers, Erlang's -eval flags, npm's script
# shell), git's command and config hooks (GIT_*).
_DENIED_PREFIXES = (
    "LD_",
    "DYLD_",
    "MALLOC_",
    "BASH_FUNC_",
    "PYTHON",
    "PERL",
    "RUBY",
    "NODE_",
    "GIT_",
    "LUA_",
    "DOTNET_",
    "CORECLR_",
    "COR_",
    "COMPLUS_",
    "ERL_",
    "NPM_CONFIG_",
)

# Bound on a child's PATH: entries looked at before argv[0] is declared not found.
_MAX_PATH_ENTRIES = 256  # a longer PATH is abuse, not configuration


def _is_hook(name: str) -> bool:
    upper = name.upper()  # the loader is case-sensitive; fail closed on variants anyway
    return upper in DENIED_HOOKS or upper.startswith(_DENIED_PREFIXES)


def is_denied_hook(name: str) -> bool:
    """Whether *name* is a loader or interpreter hook that is never copied from the parent.

    Compared upper-cased, as the allow-list filter does; for callers that copy a named
    variable on request (``flux exec --env-pass``) and must refuse the same names.
    """
    return _is_hook(name)


def _absolute_entries(path: str) -> str:
    """*path* without its relative entries (which would search the child's cwd)."""
    return os.pathsep.join(e for e in path.split(os.pathsep) if e.startswith("/"))


def _invalid_env() -> SpawnError:
    # Never name the variable or its value: either may be a secret.
    return SpawnError(
        "env: invalid variable name or value", op="run", reason=ProcessReason.INVALID_ENV
    )


def _check_pair(key: object, value: object) -> tuple[str, str]:
    if not isinstance(key, str) or not isinstance(value, str):
        raise TypeError("env must map str to str")
    key, value = str.__str__(key), str.__str__(value)  # a subclass could lie to `in`
    if not key or "=" in key or "\0" in key or "\0" in value:
        raise _invalid_env()
    try:  # what exec would do later, where the error would carry the value
        os.fsencode(key)
        os.fsencode(value)
        encodable = True
    except UnicodeEncodeError:
        encodable = False
    if not encodable:  # raised outside the handler: no __context__ holding the value
        raise _invalid_env()
    return key, value


def build_env(
    allowlist: frozenset[str],
    caller_env: Mapping[str, str] | None,
    parent_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Return the child's environment: empty, plus the allow-list, plus *caller_env* last.

    The allow-listed part is read from *parent_env* (default ``os.environ``) now: a
    ``System`` calls this once at creation and reuses the result (see :func:`over`).
    """
    parent = os.environ if parent_env is None else parent_env
    env: dict[str, str] = {}
    for name in allowlist.intersection(parent):  # one pass, no lookups of absent names
        if _is_hook(name):
            continue
        value = parent.get(name)  # present a moment ago; another thread may unset it
        if value is not None and "\0" not in value:
            env[name] = _absolute_entries(value) if name == "PATH" else value
    return over(env, caller_env)


def over(base: Mapping[str, str], caller_env: Mapping[str, str] | None) -> dict[str, str]:
    """A new dict: *base* (an allow-listed snapshot) with *caller_env* applied last.

    *base* itself is never modified, so a ``System`` builds its allow-listed part once
    (at creation) and each child gets its own copy.

    Raises:
        TypeError: *caller_env* is not a mapping of str to str.
        SpawnError: ``INVALID_ENV`` (the pair is never named).
    """
    env = dict(base)
    if caller_env is not None:
        if not isinstance(caller_env, Mapping):
            raise TypeError("env must be a mapping of str to str")
        for key, value in caller_env.items():
            k, v = _check_pair(key, value)
            env[k] = v
    return env


def resolve_argv0(argv0: str, env: Mapping[str, str]) -> str:
    """Resolve *argv0* against the child's ``PATH`` (absolute entries only).

    A name containing ``/`` is returned as given (exec resolves it against the child's
    pinned cwd). Relative ``PATH`` entries (empty, ``.``) are skipped: the child's cwd
    is never searched implicitly.

    Raises:
        SpawnError: ``NOT_FOUND`` when no absolute PATH entry has an executable file.
    """
    if "/" in argv0:
        return argv0
    path = env.get("PATH", os.defpath)
    for index, entry in enumerate(path.split(os.pathsep)):
        if index >= _MAX_PATH_ENTRIES:
            break
        if not entry.startswith("/"):
            continue
        candidate = os.path.join(entry, argv0)
        try:
            st = os.stat(candidate)
        except (OSError, ValueError):
            continue
        if (st.st_mode & 0o170000) == 0o100000 and os.access(candidate, os.X_OK):
            return candidate
    raise SpawnError(
        "argv[0] not found on the child's PATH",
        op="run",
        target=argv0,
        reason=ProcessReason.NOT_FOUND,
    )
