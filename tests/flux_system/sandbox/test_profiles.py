"""Profiles: the built-in ones load without pydantic; bad files name the file and key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from flux_system import SandboxReason, SandboxUnavailableError, System, Workspace
from flux_system.sandbox import BUILTIN_PROFILES, Sandbox, SandboxSettings, load_profile
from flux_system.sandbox._profile import parse_profile, profile_dirs
from tests.flux_system.sandbox._support import require_backend

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("name", BUILTIN_PROFILES)
def test_builtin_profiles_load(name: str) -> None:
    profile = load_profile(name)
    assert profile.name == name
    assert "bubblewrap" in profile.require and "seccomp" in profile.require
    assert profile.restore is True
    assert profile.read_only and all(p.startswith("/") for p in profile.read_only)


def test_strict_requires_landlock_and_net_proxy_uses_the_proxy() -> None:
    assert "landlock" in load_profile("strict").require
    assert "landlock" not in load_profile("default").require
    assert load_profile("net-proxy").network == "proxy"
    assert load_profile("default").network == "none"


def test_loading_builtin_profiles_imports_no_pydantic() -> None:
    code = (
        "import sys\n"
        "from flux_system.sandbox import load_profile\n"
        "for n in ('default', 'strict', 'net-proxy'): load_profile(n)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('pydantic', 'httpx', 'dns')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "p.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("bogus = 1\n", "bogus"),
        ('[filesystem]\nread_ony = ["/usr"]\n', "filesystem.read_ony"),
        ('[network]\nmode = "wide-open"\n', "network.mode"),
        ('require = ["bubblewrap", "magic"]\n', "require"),
        ('restore = "yes"\n', "restore"),
        ('[filesystem]\nread_only = ["usr"]\n', "filesystem.read_only"),
        ('[filesystem]\nprotected = ["../x"]\n', "filesystem.protected"),
        ("[limits]\nprocesses = 0\n", "limits.processes"),
        ("[limits]\nprocesses = true\n", "limits.processes"),
        ("filesystem = 3\n", "filesystem"),
        ("[limits]\nwall = 3\n", "limits.wall"),
        ("not toml [\n", "(file)"),
    ],
)
def test_bad_profile_names_file_and_key(tmp_path: Path, text: str, key: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(SandboxUnavailableError) as ei:
        load_profile(path)
    assert ei.value.reason is SandboxReason.BAD_PROFILE
    assert ei.value.layer == f"{path}:{key}"
    assert path in str(ei.value) and key in str(ei.value)


def test_unknown_builtin_name_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SandboxUnavailableError) as ei:
        load_profile("defualt")
    assert ei.value.reason is SandboxReason.BAD_PROFILE
    with pytest.raises(SandboxUnavailableError) as ei:
        load_profile(str(tmp_path / "absent.toml"))
    assert ei.value.reason is SandboxReason.BAD_PROFILE


def test_a_user_profile_file_loads(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        'require = ["bubblewrap"]\nrestore = false\n[filesystem]\nread_only = ["/usr"]\n'
        'protected = [".secrets"]\n[network]\nmode = "host"\n[limits]\nprocesses = 10\n',
    )
    p = load_profile(path)
    assert (p.name, p.require, p.restore, p.network, p.processes) == (
        "p",
        ("bubblewrap",),
        False,
        "host",
        10,
    )
    assert p.protected == (".secrets",)


def test_profiles_in_the_source_tree_match_the_package_copy() -> None:
    """The wheel ships sandbox-profiles/ as package data (mapped in pyproject.toml)."""
    src = REPO / "sandbox-profiles"
    assert src in profile_dirs()
    for name in BUILTIN_PROFILES:
        assert (src / f"{name}.toml").is_file()


# -- a profile file inside a writable root (decision 0120) ------------------------------


@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_a_profile_file_inside_a_writable_root_is_refused(tmp_path: Path, backend: str) -> None:
    require_backend(backend)
    text = (profile_dirs()[0] / "default.toml").read_text()
    outside = tmp_path / "outside.toml"
    outside.write_text(text)
    ws_dir = tmp_path / "ws"
    ws_dir.mkdir()
    inside = ws_dir / "ci.toml"
    inside.write_text(text)
    for path, refused in ((outside, False), (inside, True)):  # outside: the control
        settings = SandboxSettings(mode="on", backend=backend, profile=str(path))
        sandbox = Sandbox.resolve(settings)
        with Workspace(ws_dir) as ws:
            if not refused:
                with System(ws, sandbox=sandbox) as system:
                    assert system.run(["true"]).exit_code == 0
                continue
            with pytest.raises(SandboxUnavailableError) as err:
                System(ws, sandbox=sandbox)
        assert err.value.reason is SandboxReason.BAD_PROFILE
        assert str(inside) in str(err.value) and "writable" in str(err.value)


# -- the built-in profiles parsed ahead of time (decision 0137) -------------------------


@pytest.mark.parametrize("name", BUILTIN_PROFILES)
def test_the_compiled_built_in_profiles_match_their_files(name: str) -> None:
    """What ``scripts/compile-profiles`` recorded is each file's text and its parse."""
    import tomllib

    from flux_system.sandbox._compiled_profiles import COMPILED

    text = (REPO / "sandbox-profiles" / f"{name}.toml").read_text(encoding="utf-8")
    assert COMPILED[name] == (text, tomllib.loads(text))
    path = profile_dirs()[0] / f"{name}.toml"
    assert load_profile(name) == parse_profile(
        tomllib.loads(path.read_text(encoding="utf-8")), name=name, source=str(path)
    )


def test_an_edited_built_in_profile_is_parsed_from_its_own_text(tmp_path: Path) -> None:
    from flux_system.sandbox._profile import _read

    original = (REPO / "sandbox-profiles" / "default.toml").read_text(encoding="utf-8")
    edited = tmp_path / "default.toml"
    edited.write_text(original.replace("processes = 1024", "processes = 77"), encoding="utf-8")
    assert "processes = 77" in edited.read_text(encoding="utf-8")  # the edit is real
    table = _read(edited, "default.toml", builtin="default")
    assert table["limits"]["processes"] == 77  # type: ignore[index]
    edited.write_text(original + "\nbogus = [", encoding="utf-8")
    with pytest.raises(SandboxUnavailableError, match="not valid TOML"):
        _read(edited, "default.toml", builtin="default")
