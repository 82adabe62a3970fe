"""Ports for the local mesh's listeners (the embedded broker, every service, /metrics).

Chosen below the kernel's ephemeral range: a port that the OS hands out for `bind(0)` comes from
that range, and between choosing it and the service binding it any outgoing connection's local
end may take it (a local mesh holds dozens of Kafka connections; two meshes side by side, as in
the test suite, made a binder fail to start that way)."""
from __future__ import annotations

import random
import socket
import threading
from typing import Optional

_LOWEST = 20000


def _ephemeral_start() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default; other systems: see the fallback below


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


_lock = threading.Lock()
_next: Optional[int] = None  # this process hands out ports in sequence from a random start


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that is free now, outside the ephemeral range when there is room.

    In sequence from a random start, so one process (a supervisor choosing a mesh's ports before
    any of them is bound) never hands out a port twice, and two processes doing so at once
    rarely meet."""
    global _next
    high = _ephemeral_start() - 1
    if high > _LOWEST + 100:
        with _lock:
            if _next is None:
                _next = random.randint(_LOWEST, high)
            for _ in range(high - _LOWEST):
                port, _next = _next, _next + 1 if _next < high else _LOWEST
                if _bindable(host, port):
                    return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
