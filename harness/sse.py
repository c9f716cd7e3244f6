"""Incremental Server-Sent Events decoder: bytes in, the `data` of each complete event out.

Follows the WHATWG event-stream rules the harness needs: lines end in LF, CRLF or CR; a line
starting with ":" is a comment (keep-alive) and is dropped; an event is dispatched at a blank
line; several `data:` lines of one event are joined with "\n"; other fields are ignored.
"""

from __future__ import annotations


class SSEDecoder:
    __slots__ = ("_buffer", "_data")

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[str]:
        """Add bytes from the wire; return the data of every event they completed."""
        buffer = self._buffer + chunk
        if b"\r" in buffer:
            # A CR at the very end may be the first half of a CRLF: keep it for the next feed.
            keep_cr = buffer.endswith(b"\r")
            buffer = buffer[:-1] if keep_cr else buffer
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if keep_cr:
                buffer += b"\r"
        *lines, self._buffer = buffer.split(b"\n")
        events: list[str] = []
        for raw in lines:
            if not raw:
                if self._data:
                    events.append("\n".join(self._data))
                    self._data = []
                continue
            if raw[0] == 0x3A:  # ":" comment
                continue
            field, _, value = raw.partition(b":")
            if field == b"data":
                text = value.decode("utf-8")
                self._data.append(text[1:] if text.startswith(" ") else text)
        return events

    @property
    def pending(self) -> bool:
        """True when bytes or data lines of an unfinished event are buffered."""
        return bool(self._buffer.strip(b"\r\n")) or bool(self._data)
