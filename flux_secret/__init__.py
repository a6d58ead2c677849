"""flux_secret — secret references and a redactor that cannot be split around.

A pure package (stdlib, pydantic and the native ``ahocorasick_rs`` matcher; no process,
network or file IO of its own):

- :class:`SecretRef` parses ``secret:env/KEY`` and ``secret:file/PATH``;
  :class:`SecretResolver` resolves them through the caller's environment mapping and
  file reader, registering each value with a :class:`Redactor` before returning it.
- :class:`SecretValue` never shows its value except through ``expose_secret()``.
- :class:`Redactor` masks registered secrets in every encoded form (raw, base64 at any
  offset, percent-encoding and XML/HTML entities by any encoder, JSON, ``repr``, hex,
  lines) in ``str``, ``bytes``, nested structures, exceptions
  and log records; :class:`StreamRedactor` does the same chunk by chunk with output
  equal to whole-text redaction; :data:`DEFAULT_DETECTORS` optionally catches
  unregistered credentials by shape; :class:`RedactionReport` counts per name.
"""

from __future__ import annotations

from flux_secret._detect import DEFAULT_DETECTORS, Detector
from flux_secret._exceptions import (
    ExposureError,
    ExposureReason,
    RedactionError,
    RedactionReason,
    RefReason,
    RegistrationError,
    RegistrationReason,
    ResolutionError,
    ResolutionReason,
    SecretError,
    SecretRefError,
)
from flux_secret._logging import RedactingFilter
from flux_secret._redactor import Redactor
from flux_secret._ref import SecretRef, SecretResolver
from flux_secret._report import RedactionReport
from flux_secret._stream import StreamRedactor
from flux_secret._structures import RedactedException
from flux_secret._value import SecretValue
from flux_secret._variants import variants

__all__ = [
    "DEFAULT_DETECTORS",
    "Detector",
    "ExposureError",
    "ExposureReason",
    "RedactedException",
    "RedactingFilter",
    "RedactionError",
    "RedactionReason",
    "RedactionReport",
    "Redactor",
    "RefReason",
    "RegistrationError",
    "RegistrationReason",
    "ResolutionError",
    "ResolutionReason",
    "SecretError",
    "SecretRef",
    "SecretRefError",
    "SecretResolver",
    "SecretValue",
    "StreamRedactor",
    "variants",
]
