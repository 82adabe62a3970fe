"""Ports for the local mesh's listeners (the embedded broker, every service, /metrics).

Chosen below the kernel's ephemeral range: a port that the OS hands out for `bind(0)` comes from
that range, and between choosing it and the service binding it any outgoing connection's local
end may take it (a local mesh holds dozens of Kafka connections; two meshes side by side, as in
the test suite, made a binder fail to start that way)."""
from __future__ import annotations

import os
import random
import socket
import threading
from typing import Optional

_LOWEST = 20000
PORT_RANGE_ENV = "SCHEDMESH_PORT_RANGE"


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


def port_range() -> tuple[int, int]:
    """The ports free_port hands out: SCHEDMESH_PORT_RANGE ("LOW-HIGH", inclusive) when set (so
    meshes started side by side, such as the test suite's workers, can be given ranges that never
    meet), else from 20000 up to the kernel's ephemeral range."""
    spec = os.environ.get(PORT_RANGE_ENV, "").strip()
    if not spec:
        return _LOWEST, _ephemeral_start() - 1
    try:
        low, high = (int(x) for x in spec.split("-"))
    except ValueError:
        raise ValueError(f"SCHEDMESH_PORT_RANGE={spec!r}: expected LOW-HIGH, e.g. 20000-26000") from None
    if not 1024 <= low < high <= 65535:
        raise ValueError(f"SCHEDMESH_PORT_RANGE={spec!r}: expected 1024 <= LOW < HIGH <= 65535")
    return low, high


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that is free now, outside the ephemeral range when there is room.

    In sequence from a random start, so one process (a supervisor choosing a mesh's ports before
    any of them is bound) never hands out a port twice, and two processes doing so at once
    rarely meet (never, given ranges of their own: port_range)."""
    global _next
    low, high = port_range()
    if high > low + 100:
        with _lock:
            if _next is None or not low <= _next <= high:
                _next = random.randint(low, high)
            for _ in range(high - low):
                port, _next = _next, _next + 1 if _next < high else low
                if _bindable(host, port):
                    return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
