"""User input as it may appear in a log line (pure).

A user's string (a name, a script path, a job profile) in a log line is shown by
:func:`shown`: bounded in length, with every character that is not printable
(newline, carriage return, tab, the Unicode line separators, escape sequences)
written as its Python escape, so that no input can forge a log line of its own or
fill the log.
"""

from __future__ import annotations

#: the most characters of one user string a log line shows
MAX_SHOWN = 200


def shown(text: object, limit: int = MAX_SHOWN) -> str:
    """``text`` for a log line: at most ``limit`` characters, each non-printable one
    escaped (``"a\\nb"`` is shown as ``a\\\\nb``), and how many more there were."""
    text = str(text)
    cut = text[:limit]
    safe = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in cut)
    more = len(text) - len(cut)
    return f"{safe}... ({more} more characters)" if more else safe


def error_words(error: BaseException | None, reason: str) -> str:
    """What a tornado ``HTTPError`` says to its caller: its message with its arguments
    (user input goes in as an argument, never as tornado's log format, so a ``%`` in it
    breaks neither the log nor the answer), else ``reason`` (the status's phrase)."""
    message = getattr(error, "log_message", None)
    if not message:
        return reason
    args = getattr(error, "args", ())
    return message % args if args else message
