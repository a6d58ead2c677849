"""The built-in catalog and the default policy of ``flux run``.

The default policy lets the agent read beneath the workspace without asking, and asks
before every write, process and network request. Destructive operations are asked for
by the executor whatever a policy says.
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
"""


def default_catalog() -> Catalog:
    """Every built-in operation."""
    return Catalog([*file_operations(), *system_operations(), *web_operations()])


def default_policy() -> Policy:
    return load_policy_string(DEFAULT_POLICY)
