"""The compiled schema validator says exactly what the interpreting one says."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from flux_runtime import default_catalog
from flux_runtime._schema import compile_schema, validate

SCHEMAS = [op.schema for op in default_catalog().exposed()] + [
    {"type": "string", "enum": ["a", "b"], "minLength": 1, "maxLength": 1},
    {"type": "number", "minimum": -1, "maximum": 1.5},
    {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1, "maxItems": 2},
    {"type": "object", "properties": {"x": {"type": "boolean"}}, "required": ["x", "y"]},
    {"enum": [1, "1", None]},
    {},
]

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 300),
    st.floats(allow_nan=False, min_value=-10, max_value=10),
    st.sampled_from(["", "a", "b", "x", "path", "f.txt", "GET", "argv", "url"]),
    st.text(max_size=12),
)
VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.sampled_from(
                ["path", "paths", "text", "argv", "url", "count", "edits", "x", "y", "zz"]
            ),
            inner,
            max_size=4,
        ),
    ),
    max_leaves=12,
)


@given(st.sampled_from(range(len(SCHEMAS))), VALUES)
def test_compiled_equals_interpreted(index: int, value: Any) -> None:
    schema = SCHEMAS[index]
    assert compile_schema(schema)(value) == validate(value, schema)


def test_every_operation_carries_its_compiled_schema() -> None:
    for op in default_catalog().exposed():
        assert op.validate({"no_such_property": 1}) == validate({"no_such_property": 1}, op.schema)
        assert op.validate({"no_such_property": 1})  # positive control: it refuses
