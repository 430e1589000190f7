"""Text helpers shared by the display and the diagnostics: terminal colours stripped, and an
error as one short line (what went wrong, without Keras's and TensorFlow's wrapping)."""

from __future__ import annotations

import re

from companion._checks import check_instance, shorten

#: Terminal colour and style codes, which Keras puts in some messages and in ``summary()``.
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def strip_ansi(text: str) -> str:
    r"""Remove terminal colour codes (``\x1b[1m`` ...) so text reads the same everywhere.

    Raises:
        TypeError: If ``text`` is not a str.

    Example:
        >>> strip_ansi("\x1b[1mModel\x1b[0m summary")
        'Model summary'

    Taught in chapter 11, "The first op that produced it".
    """
    return ANSI_ESCAPE.sub("", check_instance(text, "text", str, "a str"))


#: Longest problem text kept from an error message (Keras appends whole configs to some).
MESSAGE_LIMIT = 240


def keras_message(text: str) -> str:
    """``text`` without the whole config Keras appends to some messages, shortened."""
    return shorten(text.split(" Full object config")[0], MESSAGE_LIMIT)


#: Lines of Keras's and TensorFlow's error messages that say where, not what.
NOISE = ("Exception encountered when calling", "in user code:")


def error_text(error: BaseException) -> str:
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
        if not line.startswith(NOISE):
            kept.append(line)
    return keras_message(f"{name}: {' '.join(kept)}")
