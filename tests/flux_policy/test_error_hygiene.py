"""Error hygiene at the policy loader: a bad path argument is a typed refusal."""

from __future__ import annotations

import pytest

from flux_policy import PolicyLoadError, PolicyLoadReason, load_policies, load_policy


@pytest.mark.parametrize("load", [load_policy, lambda p: load_policies([p])])
def test_nul_in_policy_path_is_a_typed_io_refusal(load: object) -> None:
    assert callable(load)
    with pytest.raises(PolicyLoadError) as info:
        load("policy\x00.toml")
    assert info.value.reason is PolicyLoadReason.IO
