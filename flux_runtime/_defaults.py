"""The built-in catalog and the default policy of ``flux run``.

The default policy lets the agent read beneath the workspace without asking, and asks
before every write, process and network request; it denies ``.env`` files to every
operation and the sandbox's protected paths to every writing one. Destructive
operations are asked for by the executor whatever a policy says.
"""

from __future__ import annotations

from flux_policy import Policy, load_policy_string
from flux_runtime._builtins_files import file_operations
from flux_runtime._builtins_system import system_operations
from flux_runtime._catalog import Catalog
from flux_runtime._web import web_operations

__all__ = ["DEFAULT_POLICY", "default_catalog", "default_policy"]

DEFAULT_POLICY = """
version = 1

[[grant]]
id = "agent-reads"
subjects = ["**"]
actions = ["read", "read_many", "grep", "glob", "file_stat", "path_exists", "cwd", "now",
           "git_status", "git_diff", "git_log"]
resources = ["workspace", "workspace/**", "process/git", "system/clock"]

[[grant]]
id = "agent-writes-ask"
subjects = ["**"]
actions = ["write", "append", "edit", "patch", "remove"]
resources = ["workspace/**"]
requires_approval = true

[[grant]]
id = "agent-effects-ask"
subjects = ["**"]
actions = ["proc.run", "http.request", "web.fetch"]
resources = ["process/**", "net/**"]
requires_approval = true

[[deny]]
id = "no-dotenv"
subjects = ["**"]
actions = ["**"]
resources = ["workspace/**/.env", "workspace/.env"]

# The sandbox's protected paths (DESIGN §2.5): what tools outside the sandbox run or
# read as configuration (git hooks and config, editor and agent settings, direnv, shell
# rc files). A process cannot change them, approved or not; nor can a file operation
# (decision 0109). tests/flux_runtime/test_runtime_attacks.py keeps this list equal to
# flux_system.sandbox's.
[[deny]]
id = "no-protected-writes"
subjects = ["**"]
actions = ["write", "append", "edit", "patch", "remove"]
resources = ["workspace/**/.git/hooks", "workspace/**/.git/hooks/**",
    "workspace/**/.git/config", "workspace/**/.git/config/**",
    "workspace/**/.git/config.worktree", "workspace/**/.git/config.worktree/**",
    "workspace/**/.git/commondir", "workspace/**/.git/commondir/**",
    "workspace/**/.git/rebase-merge", "workspace/**/.git/rebase-merge/**",
    "workspace/**/.git/rebase-apply", "workspace/**/.git/rebase-apply/**",
    "workspace/**/.vscode", "workspace/**/.vscode/**", "workspace/**/.idea",
    "workspace/**/.idea/**", "workspace/**/.envrc", "workspace/**/.envrc/**",
    "workspace/**/.mcp.json", "workspace/**/.mcp.json/**", "workspace/**/.claude",
    "workspace/**/.claude/**", "workspace/**/.devcontainer",
    "workspace/**/.devcontainer/**", "workspace/**/.devcontainer.json",
    "workspace/**/.devcontainer.json/**", "workspace/**/.pre-commit-config.yaml",
    "workspace/**/.pre-commit-config.yaml/**", "workspace/**/.bashrc",
    "workspace/**/.bashrc/**", "workspace/**/.bash_profile",
    "workspace/**/.bash_profile/**", "workspace/**/.bash_login",
    "workspace/**/.bash_login/**", "workspace/**/.bash_logout",
    "workspace/**/.bash_logout/**", "workspace/**/.profile",
    "workspace/**/.profile/**", "workspace/**/.zshrc", "workspace/**/.zshrc/**",
    "workspace/**/.zshenv", "workspace/**/.zshenv/**", "workspace/**/.zprofile",
    "workspace/**/.zprofile/**", "workspace/**/.zlogin", "workspace/**/.zlogin/**",
    "workspace/**/.zlogout", "workspace/**/.zlogout/**", "workspace/**/.cshrc",
    "workspace/**/.cshrc/**", "workspace/**/.tcshrc", "workspace/**/.tcshrc/**",
    "workspace/**/.kshrc", "workspace/**/.kshrc/**", "workspace/**/.inputrc",
    "workspace/**/.inputrc/**"]
"""


def default_catalog() -> Catalog:
    """Every built-in operation."""
    return Catalog([*file_operations(), *system_operations(), *web_operations()])


def default_policy() -> Policy:
    return load_policy_string(DEFAULT_POLICY)
