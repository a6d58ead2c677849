"""A ``logging.Filter`` that redacts log records in place."""

from __future__ import annotations

import logging
import typing

if typing.TYPE_CHECKING:
    from flux_secret._redactor import Redactor

__all__ = ["RedactingFilter"]

_FORMATTER = logging.Formatter()


@typing.final
class RedactingFilter(logging.Filter):
    """Redact each record's message, exception text and stack text; keep the record.

    Guarantee: the record's message is rendered (``msg % args``) then redacted and
    stored back as ``msg`` with empty ``args``, so a handler formats only redacted
    text; ``exc_info`` is rendered to text, redacted into ``exc_text`` and dropped;
    ``stack_info`` is redacted. A record whose arguments do not fit its format is
    rendered as its redacted ``repr`` rather than raising.

    Not guaranteed: custom attributes passed through ``extra=`` and read by a custom
    formatter are not redacted; attach the filter to every handler (or to the
    logger whose records all handlers see) — a filter on a logger does not run for
    records propagated from its children.

    Args:
        redactor: the registry to redact with.
    """

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self._redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        red = self._redactor
        try:
            message = record.getMessage()
        except Exception:  # bad args for the format: never lose (or leak) the record
            message = f"{record.msg!r} % {record.args!r}"
        record.msg = red.redact(message)
        record.args = ()
        if record.exc_info:
            if not record.exc_text:
                record.exc_text = _FORMATTER.formatException(record.exc_info)
            record.exc_info = None
        if record.exc_text:
            record.exc_text = red.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = red.redact(record.stack_info)
        return True
