"""Free loopback ports for local rigs (each local instance serves on its own port)."""

import socket


def free_port() -> int:
    """A port nothing listens on now; the OS picks it, so two rigs never collide by choice."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
