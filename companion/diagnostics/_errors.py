"""Keras's and TensorFlow's errors as one short line: what went wrong, without the wrapping."""

from __future__ import annotations

import re

from companion._checks import (
    shorten,
)
from companion.notebook import strip_ansi

#: Longest problem text kept from an error message (Keras appends whole configs to some).
_MESSAGE_LIMIT = 240


def _keras_message(text: str) -> str:
    """``text`` without the whole config Keras appends to some messages, shortened."""
    return shorten(text.split(" Full object config")[0], _MESSAGE_LIMIT)


#: Lines of Keras's and TensorFlow's error messages that say where, not what.
_NOISE = ("Exception encountered when calling", "in user code:")


def _error_text(error: BaseException) -> str:
    """``"TypeName: message"`` on one line, keeping what went wrong and dropping the wrapping.

    A model's loading error wraps its layer's after ``"Exception encountered: "``, and an error
    raised while tracing (``"in user code: File ...  TypeError: ..."``) ends with the original
    error: both keep the inner message. Keras's "Arguments received by ..." footer is dropped.
    """
    text = strip_ansi(str(error)).rsplit("Exception encountered: ", 1)[-1]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    name = type(error).__name__
    raised = [i for i, line in enumerate(lines) if re.match(r"[\w.]*(Error|Exception)\w*: ", line)]
    if raised:  # the last "XxxError: ..." line starts the original error's own text
        lines = lines[raised[-1] :]
        name, lines[0] = lines[0].split(": ", 1)
    kept = []
    for line in lines:
        if line.startswith("Arguments received by"):
            break
        if not line.startswith(_NOISE):
            kept.append(line)
    return _keras_message(f"{name}: {' '.join(kept)}")
