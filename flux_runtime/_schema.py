"""A small JSON Schema validator for operation inputs (the subset the catalog uses).

Supported keywords: ``type`` (object, string, integer, number, boolean, array),
``properties``, ``required``, ``additionalProperties`` (``false`` only), ``items``,
``minLength``, ``maxLength``, ``minItems``, ``maxItems``, ``minimum``, ``maximum``,
``enum``. Guarantee: an input passes only if every keyword present holds; an unknown
keyword in a *schema* is refused when the catalog is built (:func:`check_schema`), so
a schema never silently means less than it says. ``bool`` is not an integer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["check_schema", "validate"]

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
