"""A client of a mesh's Scheduler API: the endpoint and credentials (`Target`), and `Client`, which
calls it and, for a local mesh, waits out a queue-manager its supervisor is restarting. How the
CLI picks its target (flags, environment, config contexts) is schedmesh.cli.connection's."""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from schedmesh.local.supervisor import (APPLIED_DIR, MeshError, MeshState, load_state, pid_alive, state_path,
                                        supervisor_alive)

MAX_MESSAGE_BYTES = 512 * 2**20
LIST_PAGE = 5000  # pods, nodes or events a list asks for at a time (a page of nodes about 2 MB, of pods about 5)


def _err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Target:
    """A resolved Scheduler API endpoint and the credentials to present to it."""
    server: str
    certificate_authority: str = ""
    client_certificate: str = ""
    client_key: str = ""
    token: str = ""
    tls_server_name: str = ""
    origin: str = ""  # where it came from, for error messages
    state: Optional[MeshState] = None  # the local mesh's state, when the target is that mesh
    state_file: str = ""  # and the file it was read from (read again to see restarts)

    def channel(self):
        """A blocking gRPC channel: TLS (mutual when a client certificate is given) or, without a
        CA, plaintext to a loopback address only."""
        import grpc
        from schedmesh.security.credentials import channel as plain_or_tls_channel, is_loopback, target_host
        options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                   # a restarted queue-manager is reached within a second (gRPC's default backoff grows to 120 s)
                   ("grpc.initial_reconnect_backoff_ms", 200), ("grpc.min_reconnect_backoff_ms", 200),
                   ("grpc.max_reconnect_backoff_ms", 1000)]
        if self.tls_server_name:
            options.append(("grpc.ssl_target_name_override", self.tls_server_name))
        if bool(self.client_certificate) != bool(self.client_key):
            raise MeshError(f"{self.origin}: client-certificate and client-key go together")
        if not self.certificate_authority:
            if self.client_certificate:
                raise MeshError(f"{self.origin}: a client certificate needs certificate-authority too")
            if not is_loopback(target_host(self.server)):
                raise MeshError(f"{self.origin}: refusing plaintext gRPC to {self.server} (not a loopback address): "
                                "give --certificate-authority (and --client-certificate/--client-key)")
            return plain_or_tls_channel(self.server, None, options)
        ca = read_credential(self.certificate_authority, "certificate-authority", self.origin)
        cert = read_credential(self.client_certificate, "client-certificate", self.origin) if self.client_certificate else None
        key = read_credential(self.client_key, "client-key", self.origin) if self.client_key else None
        creds = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
        return grpc.secure_channel(self.server, creds, options=options)

    def metadata(self) -> list[tuple[str, str]]:
        from schedmesh.security.credentials import bearer_metadata
        return bearer_metadata(self.token or None)


def read_credential(path: str, what: str, origin: str) -> bytes:
    """A certificate, key or token file's bytes; MeshError naming `origin` when unreadable or empty."""
    try:
        data = Path(path).expanduser().read_bytes()
    except OSError as e:
        raise MeshError(f"{origin}: {what} {path}: {e.strerror}") from None
    if not data.strip():
        raise MeshError(f"{origin}: {what} {path} is empty")
    return data


# ------------------------------------------------------------------ arguments
def local_target(base: Optional[Path] = None) -> Target:
    """The mesh `schedmesh up` runs in `base` (default: the current directory)."""
    return replace(local_target_of(load_state(base), str(state_path(base))), state_file=str(state_path(base)))


def local_target_of(state: MeshState, origin: str = "the local mesh") -> Target:
    """A local mesh's Scheduler API with the CA, client certificate and token `up` made."""
    from schedmesh.security.credentials import read_token
    if not state.scheduler:
        raise MeshError(f"{origin}: the mesh is still starting (no scheduler address yet)")
    token = read_token(state.token_file) if state.token_file else ""
    tls = state.tls
    return Target(server=state.scheduler, certificate_authority=state.ca if tls else "",
                  client_certificate=state.client_cert if tls else "", client_key=state.client_key if tls else "",
                  token=token, origin=origin, state=state)


class Client:
    """The Scheduler API of the mesh `schedmesh.cli.connection` resolves (--server, $SCHEDMESH_SERVER,
    the config file's context, else the local mesh), or of the local mesh `state`."""

    #: Seconds a call waits for the queue-manager of a local mesh whose supervisor is restarting it.
    RESTART_WAIT = 30.0  # a restart is a backoff (0.5-10 s) plus the start of a Python service (5-60 s loaded)
    #: Calls sent again while waiting: reads, and Apply (applying the same manifest twice is
    #: applying it once). A Delete that may have been done is not repeated: the user is told to.
    RETRIED = frozenset({"Apply", "GetPods", "GetNodes", "DescribePod", "ListEvents", "GetServices"})

    def __init__(self, state: Optional[MeshState] = None, timeout: float = 30.0, target=None,
                 restart_wait: Optional[float] = None) -> None:
        from schedmesh.v1 import queue_pb2_grpc
        if target is None:
            if state is None:
                raise TypeError("Client needs the mesh's state or a target")
            target = local_target_of(state)
        self.target = target
        self.state = target.state
        self.timeout = timeout
        self.restart_wait = self.RESTART_WAIT if restart_wait is None else restart_wait
        self.metadata = target.metadata()
        self.channel = target.channel()
        self.stub = queue_pb2_grpc.SchedulerStub(self.channel)

    def call(self, method: str, request, timeout: Optional[float] = None):
        import grpc
        waited_since: Optional[float] = None
        while True:
            try:
                return getattr(self.stub, method)(request, timeout=timeout or self.timeout, metadata=self.metadata)
            except grpc.RpcError as e:
                code = e.code()
                if code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise MeshError(e.details() or str(code)) from None
                if self.state is None:
                    raise MeshError(f"cannot reach the scheduler at {self.target.server} ({self.target.origin}): "
                                    f"{e.details() or code.name}") from None
                now = time.monotonic()
                self._wait_or_raise(method, code, None if waited_since is None else now - waited_since, e)
                if waited_since is None:
                    waited_since = now
                time.sleep(0.5)

    def list_pods(self, namespace: str = "") -> list:
        """Every pod (of `namespace`; "" all) as PodViews, by namespace and name, in pages."""
        from schedmesh.v1 import queue_pb2
        return self._list("GetPods", queue_pb2.GetRequest, "pods", namespace)

    def list_nodes(self) -> list:
        """Every node as NodeViews, by name, in pages."""
        from schedmesh.v1 import queue_pb2
        return self._list("GetNodes", queue_pb2.GetRequest, "nodes")

    def list_events(self, namespace: str = "") -> list:
        """Every event kept (of `namespace`; "" all), oldest first, in pages."""
        from schedmesh.v1 import queue_pb2
        return self._list("ListEvents", queue_pb2.EventsRequest, "events", namespace)

    def _list(self, method: str, request_type, field: str, namespace: str = "") -> list:
        """All of a list's items, LIST_PAGE at a time (kubectl's chunked lists: at 200,000 nodes the
        whole list was 70 MB, more than a message may carry); `request_type` is the method's request
        message (one with namespace, limit and continue_token)."""
        request = request_type(namespace=namespace, limit=LIST_PAGE)
        items: list = []
        while True:
            page = self.call(method, request)
            items.extend(getattr(page, field))
            if not page.continue_token:
                return items
            request.continue_token = page.continue_token

    def _current_state(self) -> Optional[MeshState]:
        """The local mesh's state as its supervisor keeps it now (pids change at restarts), or
        None when the state file is gone (the mesh was stopped). A Client made from a state (no
        file known) reads the one of the working directory if it is that mesh's, else keeps its own."""
        known = getattr(self.target, "state_file", "")
        try:
            now = MeshState.load(Path(known) if known else state_path())
        except FileNotFoundError:
            return None if known else self.state
        except (OSError, ValueError, TypeError, KeyError):
            return self.state
        if not known and (now.scheduler, now.supervisor_pid) != (self.state.scheduler, self.state.supervisor_pid):
            return self.state
        return now

    def _wait_or_raise(self, method: str, code, waited: Optional[float], error) -> None:
        """A call to the local mesh's queue-manager failed (UNAVAILABLE or DEADLINE_EXCEEDED) after
        `waited` seconds of sending it again (None: the first failure). Returns when it is to be
        sent again (its supervisor is restarting the queue-manager, the call is safe to repeat, and
        not for longer than `restart_wait`), else raises what the user should do."""
        import grpc
        state = self._current_state()
        server = self.target.server
        if state is None:
            raise MeshError(f"the scheduler at {server} is gone: the mesh was stopped (no .schedmesh/mesh.json any "
                            f"more); start it again with {self._up_again(self.state)}") from None
        qm = next((p for p in state.procs if p.name == "queue-manager"), None)
        qm_alive = qm is not None and pid_alive(qm.pid, qm.module)
        before = next((p for p in self.state.procs if p.name == "queue-manager"), None)
        restarted = qm is not None and before is not None and (qm.pid != before.pid or qm.restarts != before.restarts)
        if supervisor_alive(state):
            if code == grpc.StatusCode.DEADLINE_EXCEEDED and qm_alive and not restarted:
                raise MeshError(error.details() or str(code)) from None  # slow, not gone
            if code == grpc.StatusCode.UNAVAILABLE and method in self.RETRIED and (waited or 0.0) < self.restart_wait:
                if waited is None:
                    _err(f"schedmesh: the scheduler at {server} does not answer; the mesh supervisor (pid "
                         f"{state.supervisor_pid}) is restarting the queue-manager{self._restart_info(qm)}: "
                         f"waiting up to {self.restart_wait:.0f}s ...")
                return
            raise MeshError(f"the scheduler at {server} does not answer: the mesh supervisor (pid "
                            f"{state.supervisor_pid}) is restarting the queue-manager{self._restart_info(qm)}; "
                            "retry in a few seconds" + (f" (its log: {qm.log})" if qm is not None and qm.log else "")
                            ) from None
        if qm_alive:
            raise MeshError(error.details() or str(code)) from None
        raise MeshError(f"the scheduler at {server} is not running and the mesh supervisor (pid "
                        f"{state.supervisor_pid}) is gone, so nothing restarts it: run `schedmesh down` (it stops "
                        "what is left), then "
                        f"{self._up_again(state)}") from None

    @staticmethod
    def _restart_info(qm) -> str:
        if qm is None or not qm.restarts:
            return ""
        return f" (restart {qm.restarts}: {qm.last_restart})" if qm.last_restart else f" (restart {qm.restarts})"

    @staticmethod
    def _up_again(state: Optional[MeshState]) -> str:
        """How to bring the mesh back with what was applied to it."""
        if state is not None and state.external_kafka:
            return f"`schedmesh up --kafka {state.bootstrap}` (the broker's topics still hold what was applied)"
        return (f"`schedmesh up --restore`, which applies again what was applied (kept in .schedmesh/{APPLIED_DIR}/; "
                "a plain `up` starts empty)")

    def close(self) -> None:
        self.channel.close()
