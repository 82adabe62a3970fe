"""HTTP scheduler extenders (kube-scheduler's pkg/scheduler/extender.go), over the standard library.

An extender is a web service the scheduler POSTs JSON to at up to four verbs under its URL
prefix: filter, prioritize, preempt and bind. The wire format is k8s.io/kube-scheduler/extender/v1,
whose Go structs have no JSON tags: keys are the Go field names ("Pod", "NodeNames", "FailedNodes",
"Host", "Score", ...). Responses are decoded as Go's encoding/json does: keys match fields
case-insensitively, a later duplicate wins, unknown keys are ignored, null leaves the zero value.

The scheduling cycle (`schedmesh.scheduling.cycle`) calls these duck-typed methods: `name`,
`is_filter()`, `is_prioritizer()`, `is_interested(pod)`, `is_ignorable()`, `filter(pod, node_infos)`
and `prioritize(pod, node_infos)`; it scales prioritize scores (0..MAX_EXTENDER_PRIORITY) by
MaxNodeScore / MaxExtenderPriority and the extender's weight.

httpTimeout bounds each call as a whole, and a reply body longer than MAX_EXTENDER_REPLY_BYTES is
refused unread: a slow or runaway extender costs at most that time and that memory.
"""
from __future__ import annotations

import functools
import http.client
import io
import json
import os
import socket
import ssl
import tempfile
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from schedmesh.api.to_json import node_to_json, pod_to_json
from schedmesh.framework.profile import Extender

if TYPE_CHECKING:  # pragma: no cover
    from schedmesh.api.types import Pod
    from schedmesh.cache.node_info import NodeInfo

MIN_EXTENDER_PRIORITY = 0
MAX_EXTENDER_PRIORITY = 10
DEFAULT_EXTENDER_TIMEOUT_SECONDS = 5.0  # used when httpTimeout is 0/unset
MAX_EXTENDER_REPLY_BYTES = 16 * 1024 * 1024  # a longer reply body is refused, not read


class ExtenderError(RuntimeError):
    """A call to an extender failed (transport, HTTP status, bad response, or the extender's Error)."""


@dataclass(slots=True)
class ExtenderTLSConfig:
    """config.ExtenderTLSConfig: the *Data fields (PEM bytes) take precedence over the *File ones."""

    insecure: bool = False
    server_name: str = ""
    cert_file: str = ""
    key_file: str = ""
    ca_file: str = ""
    cert_data: bytes = b""
    key_data: bytes = b""
    ca_data: bytes = b""

    def is_set(self) -> bool:
        return any((self.insecure, self.server_name, self.cert_file, self.key_file, self.ca_file,
                    self.cert_data, self.key_data, self.ca_data))


@dataclass(slots=True)
class Victims:
    """extenderv1.Victims: the pods preemption would evict on one node."""

    pods: list["Pod"] = field(default_factory=list)
    num_pdb_violations: int = 0


# ---------------------------------------------------------------------------------------------
# Go-style JSON decoding helpers
# ---------------------------------------------------------------------------------------------

def _field(obj: Mapping[str, Any], name: str) -> Any:
    """encoding/json field lookup: case-insensitive, the last matching key wins."""
    found = None
    low = name.lower()
    for k, v in obj.items():
        if k.lower() == low:
            found = v
    return found


def _expect(value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    if value is None:
        return None
    if isinstance(value, bool) and kind is not bool:
        raise ExtenderError(f"cannot unmarshal bool into {what}")
    if not isinstance(value, kind):
        raise ExtenderError(f"cannot unmarshal {type(value).__name__} into {what}")
    return value


def _int64(value: Any, what: str) -> int:
    # Go refuses 1.0 (a JSON number with a fraction or exponent) for an int64 field.
    v = _expect(value, int, what)
    if v is None:
        return 0
    if not -(2**63) <= v < 2**63:
        raise ExtenderError(f"number {v} overflows {what}")
    return v


def _string_map(value: Any, what: str) -> dict[str, str]:
    m = _expect(value, dict, what) or {}
    out = {}
    for k, v in m.items():
        out[k] = _expect(v, str, f"{what} value") or ""
    return out


def _decode_first(body: bytes) -> Any:
    """json.Decoder.Decode reads the first JSON value; trailing data is ignored."""
    text = body.decode("utf-8", errors="replace").lstrip()
    value, _ = json.JSONDecoder().raw_decode(text)
    return value


# ---------------------------------------------------------------------------------------------
# transport
# ---------------------------------------------------------------------------------------------

class _Deadline:
    """httpTimeout as Go's http.Client.Timeout: one limit for the whole call (connect, TLS
    handshake, sending, reading the headers and the body), not for each socket operation.
    Name resolution is the exception: getaddrinfo cannot be interrupted, the resolver's own
    timeouts bound it."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    def remaining(self) -> float:
        left = self.at - time.monotonic()
        if left <= 0:
            raise socket.timeout("timed out")
        return left


class _DeadlineReader(io.RawIOBase):
    """The response's socket reads, each allowed only what is left of the deadline (a server
    trickling bytes cannot stretch the call past it)."""

    def __init__(self, sock: socket.socket, deadline: _Deadline, socket_file: io.BufferedReader) -> None:
        super().__init__()
        self._sock, self._deadline = sock, deadline
        # sock.makefile()'s file, unread but kept open: while it is, the connection's close()
        # leaves the socket open for the body (http.client closes early on "Connection: close").
        self._socket_file = socket_file

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self._socket_file.close()
        super().close()

    def readinto(self, buffer: Any) -> int:
        self._sock.settimeout(self._deadline.remaining())
        return self._sock.recv_into(buffer)


class _DeadlineResponse(http.client.HTTPResponse):
    def __init__(self, sock: socket.socket, *args: Any, deadline: _Deadline, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        self.fp = io.BufferedReader(_DeadlineReader(sock, deadline, self.fp))


class _HTTPConnection(http.client.HTTPConnection):
    """HTTPConnection bounded by a _Deadline."""

    def __init__(self, host: str, port: Optional[int], deadline: _Deadline, **kwargs: Any) -> None:
        super().__init__(host, port, timeout=deadline.remaining(), **kwargs)
        self.deadline = deadline
        self.response_class = functools.partial(_DeadlineResponse, deadline=deadline)  # type: ignore[assignment]

    def connect(self) -> None:
        self.timeout = self.deadline.remaining()
        super().connect()

    def send(self, data: Any) -> None:
        if self.sock is None:
            self.connect()
        # sendall's timeout bounds the whole send (Python >= 3.5), so one setting covers it.
        self.sock.settimeout(self.deadline.remaining())
        super().send(data)


class _HTTPSConnection(_HTTPConnection):
    """_HTTPConnection over TLS, whose server name (SNI and certificate check) may differ from the host."""

    default_port = http.client.HTTPS_PORT

    def __init__(self, host: str, port: Optional[int], deadline: _Deadline, *, context: ssl.SSLContext,
                 server_name: str = "") -> None:
        super().__init__(host, port, deadline)
        self._context = context
        self._server_name = server_name

    def connect(self) -> None:
        super().connect()
        self.sock.settimeout(self.deadline.remaining())  # the handshake
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self._server_name or self.host)


def _pem(data: bytes | str) -> str:
    return data.decode() if isinstance(data, bytes) else data


def _tls_context(enable_https: bool, tls: Optional[ExtenderTLSConfig]) -> Optional[ssl.SSLContext]:
    """makeTransport: no TLS settings at all -> None (default verification for https URLs);
    enableHTTPS without a CA -> certificates are not verified."""
    tls = tls or ExtenderTLSConfig()
    has_ca = bool(tls.ca_file or tls.ca_data)
    insecure = tls.insecure or (enable_https and not has_ca)
    if not insecure and not tls.is_set():
        return None
    if insecure and has_ca:
        raise ValueError("specifying a root certificates file with the insecure flag is not allowed")
    ctx = ssl.create_default_context(cafile=None if tls.ca_data else (tls.ca_file or None),
                                     cadata=_pem(tls.ca_data) if tls.ca_data else None)
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    has_cert = bool(tls.cert_data or tls.cert_file)
    has_key = bool(tls.key_data or tls.key_file)
    if has_cert != has_key:
        raise ValueError("client certificate and key must be given together")
    if has_cert:
        _load_client_cert(ctx, tls)
    return ctx


def _load_client_cert(ctx: ssl.SSLContext, tls: ExtenderTLSConfig) -> None:
    # ssl loads certificates only from files: write in-memory PEM to private temporary files.
    temps: list[str] = []
    try:
        def path_of(data: bytes, file: str) -> str:
            if not data:
                return file
            fd, path = tempfile.mkstemp(suffix=".pem")
            temps.append(path)
            with os.fdopen(fd, "wb") as f:
                f.write(data if isinstance(data, bytes) else data.encode())
            return path

        ctx.load_cert_chain(path_of(tls.cert_data, tls.cert_file), path_of(tls.key_data, tls.key_file))
    finally:
        for p in temps:
            os.unlink(p)


# ---------------------------------------------------------------------------------------------
# the extender
# ---------------------------------------------------------------------------------------------

class HTTPExtender:
    """One configured extender (kube's HTTPExtender)."""

    def __init__(self, config: Extender, tls_config: Optional[ExtenderTLSConfig] = None) -> None:
        self.config = config
        self.url_prefix = config.url_prefix
        self.filter_verb = config.filter_verb
        self.prioritize_verb = config.prioritize_verb
        self.preempt_verb = config.preempt_verb
        self.bind_verb = config.bind_verb
        self.weight = int(config.weight)
        self.node_cache_capable = config.node_cache_capable
        self.managed_resources = frozenset(config.managed_resources)
        self.ignorable = config.ignorable
        self.timeout = float(config.http_timeout_seconds) or DEFAULT_EXTENDER_TIMEOUT_SECONDS
        tls = tls_config if tls_config is not None else getattr(config, "tls_config", None)
        self._tls = _tls_context(config.enable_https, tls)
        self._server_name = tls.server_name if tls is not None else ""

    # ---- identity and capabilities ---------------------------------------------------------
    @property
    def name(self) -> str:
        """The URL prefix identifies the extender (kube's Name())."""
        return self.url_prefix

    def __repr__(self) -> str:
        return f"HTTPExtender({self.url_prefix!r})"

    def is_ignorable(self) -> bool:
        return self.ignorable

    def is_filter(self) -> bool:
        return self.filter_verb != ""

    def is_prioritizer(self) -> bool:
        return self.prioritize_verb != ""

    def is_binder(self) -> bool:
        return self.bind_verb != ""

    def supports_preemption(self) -> bool:
        return self.preempt_verb != ""

    def is_interested(self, pod: "Pod") -> bool:
        """True unless the extender manages resources and no container of the pod names one of
        them in its requests or limits (pod-level resources are not looked at, as in kube)."""
        if not self.managed_resources:
            return True
        for c in list(pod.containers) + list(pod.init_containers):
            if any(r in self.managed_resources for r in c.requests) or \
                    any(r in self.managed_resources for r in c.limits):
                return True
        return False

    # ---- verbs -----------------------------------------------------------------------------
    def _extender_args(self, pod: "Pod", nodes: Sequence["NodeInfo"]) -> dict[str, Any]:
        if self.node_cache_capable:
            return {"Pod": pod_to_json(pod), "Nodes": None, "NodeNames": [ni.name for ni in nodes]}
        return {"Pod": pod_to_json(pod), "Nodes": {"metadata": {}, "items": [node_to_json(ni.node) for ni in nodes]},
                "NodeNames": None}

    def filter(self, pod: "Pod", nodes: Sequence["NodeInfo"]
               ) -> tuple[list["NodeInfo"], dict[str, str], dict[str, str]]:
        """Returns (nodes that passed, failed node -> reason, unresolvable node -> reason).
        Raises ExtenderError when the call fails or the extender reports an Error."""
        if not self.filter_verb:
            return list(nodes), {}, {}
        by_name = {ni.name: ni for ni in nodes}
        result = self._send(self.filter_verb, self._extender_args(pod, nodes))
        what = "ExtenderFilterResult"
        if not isinstance(result, dict):
            raise ExtenderError(f"cannot unmarshal {type(result).__name__} into {what}")
        err = _expect(_field(result, "Error"), str, f"{what}.Error")
        if err:
            raise ExtenderError(err)
        node_names = _expect(_field(result, "NodeNames"), list, f"{what}.NodeNames")
        node_list = _expect(_field(result, "Nodes"), dict, f"{what}.Nodes")
        if self.node_cache_capable and node_names is not None:
            names = [_expect(n, str, f"{what}.NodeNames") or "" for n in node_names]
        elif node_list is not None:
            # kube builds fresh NodeInfos from the returned Node objects; schedmesh keeps its own
            # NodeInfo for each returned name (same node, same pods).
            items = _expect(_field(node_list, "items"), list, f"{what}.Nodes.items") or []
            names = []
            for it in items:
                meta = _expect(_field(_expect(it, dict, f"{what}.Nodes.items") or {}, "metadata"), dict,
                               f"{what}.Nodes.items.metadata") or {}
                names.append(_expect(_field(meta, "name"), str, f"{what}.Nodes.items.metadata.name") or "")
        else:
            names = []
        passed = []
        for n in names:
            ni = by_name.get(n)
            if ni is None:
                raise ExtenderError(f"extender {self.url_prefix!r} claims a filtered node {n!r} "
                                    f"which is not found in the input node list")
            passed.append(ni)
        failed = _string_map(_field(result, "FailedNodes"), f"{what}.FailedNodes")
        unresolvable = _string_map(_field(result, "FailedAndUnresolvableNodes"), f"{what}.FailedAndUnresolvableNodes")
        return passed, failed, unresolvable

    def prioritize(self, pod: "Pod", nodes: Sequence["NodeInfo"]) -> tuple[list[tuple[str, int]], int]:
        """Returns ([(host, score 0..10)], weight); without a prioritize verb every node scores 0
        with weight 0."""
        if not self.prioritize_verb:
            return [(ni.name, 0) for ni in nodes], 0
        result = self._send(self.prioritize_verb, self._extender_args(pod, nodes))
        what = "HostPriorityList"
        out = []
        for hp in _expect(result, list, what) or []:
            hp = _expect(hp, dict, f"{what} item") or {}
            out.append((_expect(_field(hp, "Host"), str, "HostPriority.Host") or "",
                        _int64(_field(hp, "Score"), "HostPriority.Score of type int64")))
        return out, self.weight

    def bind(self, pod: "Pod", node_name: str) -> None:
        """Delegates the binding; raises ExtenderError on failure."""
        if not self.is_binder():
            raise ExtenderError("unexpected empty bindVerb in extender")
        result = self._send(self.bind_verb, {"PodName": pod.meta.name, "PodNamespace": pod.meta.namespace,
                                             "PodUID": pod.meta.uid, "Node": node_name})
        if isinstance(result, dict):
            err = _expect(_field(result, "Error"), str, "ExtenderBindingResult.Error")
            if err:
                raise ExtenderError(err)

    def process_preemption(self, pod: "Pod", victims_by_node: Mapping[str, Victims],
                           node_infos: Any = None) -> dict[str, Victims]:
        """Lets the extender trim the preemption candidates: returns node -> victims as the
        extender answered (it always answers with pod UIDs, resolved here against the pods on
        each node). `node_infos` is anything with `.get(node_name) -> NodeInfo | None` (a
        Snapshot); without it, UIDs are resolved against the victims that were sent."""
        if not self.supports_preemption():
            raise ExtenderError(f"preempt verb is not defined for extender {self.url_prefix} "
                                f"but run into ProcessPreemption")
        pod_json = pod_to_json(pod)
        if self.node_cache_capable:
            meta = {node: {"Pods": [{"UID": p.meta.uid} for p in v.pods], "NumPDBViolations": v.num_pdb_violations}
                    for node, v in victims_by_node.items()}
            args = {"Pod": pod_json, "NodeNameToVictims": None, "NodeNameToMetaVictims": meta}
        else:
            full = {node: {"Pods": [pod_to_json(p) for p in v.pods], "NumPDBViolations": v.num_pdb_violations}
                    for node, v in victims_by_node.items()}
            args = {"Pod": pod_json, "NodeNameToVictims": full, "NodeNameToMetaVictims": None}
        result = self._send(self.preempt_verb, args)
        what = "ExtenderPreemptionResult"
        result = _expect(result, dict, what) or {}
        meta_victims = _expect(_field(result, "NodeNameToMetaVictims"), dict, f"{what}.NodeNameToMetaVictims") or {}
        out: dict[str, Victims] = {}
        for node, mv in meta_victims.items():
            pods_on_node = self._pods_on(node, node_infos, victims_by_node)
            mv = _expect(mv, dict, "MetaVictims") or {}
            victims = Victims([], _int64(_field(mv, "NumPDBViolations"), "MetaVictims.NumPDBViolations"))
            for mp in _expect(_field(mv, "Pods"), list, "MetaVictims.Pods") or []:
                uid = _expect(_field(_expect(mp, dict, "MetaPod") or {}, "UID"), str, "MetaPod.UID") or ""
                p = pods_on_node.get(uid)
                if p is None:
                    raise ExtenderError(f"extender: {self.url_prefix} claims to preempt pod (UID: &{{{uid}}}) "
                                        f"on node: {node}, but the pod is not found on that node")
                victims.pods.append(p)
            out[node] = victims
        return out

    @staticmethod
    def _pods_on(node: str, node_infos: Any, sent: Mapping[str, Victims]) -> dict[str, "Pod"]:
        if node_infos is None:
            v = sent.get(node)
            if v is None:
                raise ExtenderError(f"nodeinfo not found for node name {node!r}")
            return {p.meta.uid: p for p in v.pods}
        ni = node_infos.get(node)
        if ni is None:
            raise ExtenderError(f"nodeinfo not found for node name {node!r}")
        return {pi.pod.meta.uid: pi.pod for pi in ni.pods}

    # ---- HTTP ------------------------------------------------------------------------------
    def _send(self, action: str, args: Any) -> Any:
        url = self.url_prefix.rstrip("/") + "/" + action
        body = json.dumps(args, separators=(",", ":")).encode()
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ExtenderError(f"Post {url!r}: unsupported protocol scheme {parts.scheme!r}")
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        deadline = _Deadline(self.timeout)
        conn: Optional[_HTTPConnection] = None
        too_long = ExtenderError(f"extender {self.url_prefix} {action}: the reply is longer than "
                                 f"{MAX_EXTENDER_REPLY_BYTES} bytes")
        try:
            if parts.scheme == "https":
                conn = _HTTPSConnection(parts.hostname, parts.port, deadline,
                                        context=self._tls or ssl.create_default_context(),
                                        server_name=self._server_name)
            else:
                conn = _HTTPConnection(parts.hostname, parts.port, deadline)
            conn.request("POST", target, body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.length is not None and resp.length > MAX_EXTENDER_REPLY_BYTES:
                raise too_long
            data = resp.read(MAX_EXTENDER_REPLY_BYTES + 1)
            if len(data) > MAX_EXTENDER_REPLY_BYTES:
                raise too_long
        except socket.timeout as e:
            raise ExtenderError(f"Post {url!r}: timed out: no complete reply within httpTimeout "
                                f"({self.timeout:g}s)") from e
        except (OSError, ValueError, http.client.HTTPException) as e:  # ValueError: a port out of range
            raise ExtenderError(f"Post {url!r}: {e}") from e
        finally:
            if conn is not None:
                conn.close()
        if resp.status != 200:
            raise ExtenderError(f"failed {action} with extender at URL {url}, code {resp.status}")
        try:
            return _decode_first(data)
        except ValueError as e:
            raise ExtenderError(f"decoding the response of {url}: {e}") from e
