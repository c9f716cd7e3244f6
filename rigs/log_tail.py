"""The end of a process's log, bounded, for a failure message: what a rig printed last is
usually why it stopped (an out-of-memory line, a traceback's last frame)."""

from pathlib import Path

LOG_TAIL_LINES = 12
LOG_TAIL_CHARS = 1_500
_READ_BYTES = 64 * 1024  # enough for any tail we keep, whatever the log's size


def last_lines(text: str, lines: int = LOG_TAIL_LINES, limit: int = LOG_TAIL_CHARS) -> str:
    """The last non-empty `lines` of `text`, at most `limit` characters: a line too long to
    fit whole keeps its end, marked with a leading ellipsis, rather than being dropped."""
    kept = [line.rstrip() for line in text.splitlines() if line.strip()][-lines:]
    tail = "\n".join(kept)
    return tail if len(tail) <= limit else "…" + tail[-(limit - 1) :]


def file_tail(path: Path, lines: int = LOG_TAIL_LINES, limit: int = LOG_TAIL_CHARS) -> str:
    """`last_lines` of a log file; "" when there is no such file."""
    try:
        with path.open("rb") as log:
            size = log.seek(0, 2)
            log.seek(max(0, size - _READ_BYTES))
            data = log.read()
    except FileNotFoundError:
        return ""
    return last_lines(data.decode(errors="replace"), lines, limit)
