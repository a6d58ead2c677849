"""A small JSON Schema validator for operation inputs (the subset the catalog uses).

Supported keywords: ``type`` (object, string, integer, number, boolean, array),
``properties``, ``required``, ``additionalProperties`` (``false`` only), ``items``,
``minLength``, ``maxLength``, ``minItems``, ``maxItems``, ``minimum``, ``maximum``,
``enum``. Guarantee: an input passes only if every keyword present holds; an unknown
keyword in a *schema* is refused when the catalog is built (:func:`check_schema`), so
a schema never silently means less than it says. ``bool`` is not an integer.

:func:`compile_schema` turns a checked schema into a validator built once (each keyword
looked up when compiling, not on every call) that returns exactly what :func:`validate`
returns for the same value — a differential test holds it to that.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Validator", "check_schema", "compile_schema", "validate"]

Validator = Callable[[object], list[str]]


class _Check(typing.Protocol):
    def __call__(self, value: object, where: str = ..., /) -> list[str]: ...


_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "minimum",
        "maximum",
        "enum",
        "description",
    }
)
_TYPES = {
    "object": (dict,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list, tuple),
}


def check_schema(schema: Mapping[str, Any], where: str = "$") -> None:
    """Raise ``ValueError`` naming the place of a keyword this validator does not know."""
    for key in schema:
        if key not in _KEYWORDS:
            raise ValueError(f"{where}: unsupported schema keyword {key!r}")
    if schema.get("additionalProperties", False) is not False:
        raise ValueError(f"{where}: additionalProperties must be false")
    if "type" in schema and schema["type"] not in _TYPES:
        raise ValueError(f"{where}: unknown type {schema['type']!r}")
    for name, sub in schema.get("properties", {}).items():
        check_schema(sub, f"{where}.{name}")
    if "items" in schema:
        check_schema(schema["items"], f"{where}[]")


def validate(value: object, schema: Mapping[str, Any], where: str = "$") -> list[str]:
    """Every violation of *schema* by *value*, as ``place: problem`` strings (empty: valid)."""
    errors: list[str] = []
    kind = schema.get("type")
    if kind is not None:
        ok = isinstance(value, _TYPES[kind]) and not (
            kind in ("integer", "number") and isinstance(value, bool)
        )
        if not ok:
            return [f"{where}: expected {kind}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: not one of {schema['enum']}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            errors.append(f"{where}: shorter than {schema['minLength']}")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{where}: longer than {schema['maxLength']}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{where}: below {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{where}: above {schema['maximum']}")
    if isinstance(value, list | tuple):
        if len(value) < schema.get("minItems", 0):
            errors.append(f"{where}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{where}: more than {schema['maxItems']} items")
        if "items" in schema:
            for i, item in enumerate(value):
                errors.extend(validate(item, schema["items"], f"{where}[{i}]"))
    if isinstance(value, dict):
        props: Mapping[str, Any] = schema.get("properties", {})
        for name in schema.get("required", ()):
            if name not in value:
                errors.append(f"{where}: missing required {name!r}")
        for name, item in value.items():
            if name not in props:
                if "additionalProperties" in schema:
                    errors.append(f"{where}: unexpected property {name!r}")
                continue
            errors.extend(validate(item, props[name], f"{where}.{name}"))
    return errors


def compile_schema(schema: Mapping[str, Any]) -> Validator:
    """A validator for *schema* (already accepted by :func:`check_schema`): the same
    violations, in the same order, as ``validate(value, schema)``."""
    check: Validator = _compile(schema)  # its where defaults to "$": no wrapper frame
    return check


# Type tuples built once: ``int | float`` in a hot isinstance builds a union per call.
_NUMBER = (int, float)
_ARRAY = (list, tuple)


def _compile(schema: Mapping[str, Any]) -> _Check:
    kind = schema.get("type")
    types = _TYPES[kind] if kind is not None else None
    numeric = kind in ("integer", "number")
    has_enum, enum = "enum" in schema, schema.get("enum")
    min_len, has_max_len, max_len = schema.get("minLength", 0), "maxLength" in schema, 0
    if has_max_len:
        max_len = schema["maxLength"]
    minimum, maximum = schema.get("minimum"), schema.get("maximum")
    has_min, has_max = "minimum" in schema, "maximum" in schema
    min_items, has_max_items = schema.get("minItems", 0), "maxItems" in schema
    max_items = schema.get("maxItems", 0)
    items = _compile(schema["items"]) if "items" in schema else None
    props = {name: _compile(sub) for name, sub in schema.get("properties", {}).items()}
    required = tuple(schema.get("required", ()))
    closed = "additionalProperties" in schema

    def check(value: object, where: str = "$", /) -> list[str]:
        if types is not None and (
            not isinstance(value, types) or (numeric and isinstance(value, bool))
        ):
            return [f"{where}: expected {kind}, got {type(value).__name__}"]
        errors: list[str] = []
        if has_enum and value not in enum:  # type: ignore[operator]
            errors.append(f"{where}: not one of {enum}")
        if isinstance(value, str):
            if len(value) < min_len:
                errors.append(f"{where}: shorter than {min_len}")
            if has_max_len and len(value) > max_len:
                errors.append(f"{where}: longer than {max_len}")
        elif isinstance(value, _NUMBER) and not isinstance(value, bool):
            if has_min and value < minimum:  # type: ignore[operator]
                errors.append(f"{where}: below {minimum}")
            if has_max and value > maximum:  # type: ignore[operator]
                errors.append(f"{where}: above {maximum}")
        elif isinstance(value, _ARRAY):
            if len(value) < min_items:
                errors.append(f"{where}: fewer than {min_items} items")
            if has_max_items and len(value) > max_items:
                errors.append(f"{where}: more than {max_items} items")
            if items is not None:
                for i, item in enumerate(value):
                    errors.extend(items(item, f"{where}[{i}]"))
        elif isinstance(value, dict):
            for name in required:
                if name not in value:
                    errors.append(f"{where}: missing required {name!r}")
            for name, item in value.items():
                sub = props.get(name)
                if sub is None:
                    if closed:
                        errors.append(f"{where}: unexpected property {name!r}")
                    continue
                errors.extend(sub(item, f"{where}.{name}"))
        return errors

    return check
