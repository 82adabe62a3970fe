"""`schedmesh evict`, `cordon`, `uncordon`, `drain` and `taint nodes`: kubectl's node maintenance
over schedmesh.v1.Policy (served by the controller-manager, reached through the scheduler's
address like every other command). Output and errors use kubectl's words."""
from __future__ import annotations

import argparse
import sys
import time
from schedmesh.api.types import Taint
from schedmesh.local.supervisor import MeshError

DRAIN_RETRY_SECONDS = 5.0  # kubectl drain retries a refused eviction after 5 s
DRAIN_POLL_SECONDS = 0.5


class PolicyRefused(Exception):
    """The API refused: `status` is its HTTP status (429 retryable), `message` kube's words."""

    def __init__(self, status: int, message: str, causes: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.status, self.message, self.causes = status, message, causes


class PolicyClient:
    """schedmesh.v1.Policy on the scheduler's channel (the same Client, credentials and token)."""

    def __init__(self) -> None:
        from schedmesh.cli.mesh import _client
        from schedmesh.v1 import policy_pb2_grpc
        self.client = _client()
        self.stub = policy_pb2_grpc.PolicyStub(self.client.channel)

    def call(self, method: str, request):
        import grpc
        from schedmesh.mesh.controllers.policy import CAUSE_KEY, HTTP_STATUS_KEY
        try:
            return getattr(self.stub, method)(request, timeout=self.client.timeout, metadata=self.client.metadata)
        except grpc.RpcError as e:
            trailing = dict((k, v) for k, v in (e.trailing_metadata() or ()) if k == HTTP_STATUS_KEY)
            causes = tuple(v for k, v in (e.trailing_metadata() or ()) if k == CAUSE_KEY)
            if HTTP_STATUS_KEY in trailing:
                raise PolicyRefused(int(trailing[HTTP_STATUS_KEY]), e.details() or "", causes) from None
            if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                # says what to do when the scheduler is gone, waits while its supervisor restarts it
                self.client.call("GetNodes", _get_request())  # (a page of one: it answers, or not)
                raise MeshError(f"{e.details() or e.code().name}; the scheduler answers now: retry") from None
            raise MeshError(e.details() or str(e.code())) from None

    def pods(self, namespace: str = ""):
        return self.client.list_pods(namespace)

    def close(self) -> None:
        self.client.close()


def _get_request():
    from schedmesh.v1 import queue_pb2
    return queue_pb2.GetRequest(limit=1)


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ evict
def run_evict(args: argparse.Namespace) -> int:
    from schedmesh.v1 import policy_pb2
    c = PolicyClient()
    try:
        resp = c.call("Evict", policy_pb2.EvictRequest(namespace=args.namespace, name=args.pod,
                                                      dry_run=args.dry_run))
    except PolicyRefused as e:
        _err(f"error: {e.message}")
        for cause in e.causes:
            _err(f"  {cause}")
        return 1
    finally:
        c.close()
    suffix = " (server dry run)" if args.dry_run else ""
    budget = f" (pdb {resp.pdb}: disruptionsAllowed {resp.disruptions_allowed})" if resp.pdb and not args.dry_run else ""
    print(f"pod/{args.pod} evicted{suffix}{budget}")
    return 0


# ------------------------------------------------------------------ cordon / uncordon
def cordon(c: PolicyClient, node: str, unschedulable: bool) -> str:
    from schedmesh.v1 import policy_pb2
    resp = c.call("Cordon", policy_pb2.CordonRequest(node=node, unschedulable=unschedulable))
    word = "cordoned" if unschedulable else "uncordoned"
    return f"node/{node} {word}" if resp.changed else f"node/{node} already {word}"


def run_cordon(args: argparse.Namespace) -> int:
    c = PolicyClient()
    try:
        print(cordon(c, args.node, args.command == "cordon"))
    finally:
        c.close()
    return 0


# ------------------------------------------------------------------ drain
def _daemon_set_pod(pod) -> bool:
    return any(r.controller and r.kind == "DaemonSet" for r in pod.metadata.owner_references)


def run_drain(args: argparse.Namespace) -> int:
    """kubectl drain: cordon, then evict every pod of the node through the Eviction API (a
    refused one is retried every 5 s), wait for each to be gone, until --timeout. DaemonSet
    pods refuse the drain, or with --ignore-daemonsets stay (their controller would make them
    again on the cordoned node: they tolerate it), as kubectl's drain filters do."""
    from schedmesh.v1 import policy_pb2
    if args.timeout < 0:
        raise MeshError("--timeout must not be negative (0: wait for ever)")
    c = PolicyClient()
    deadline = time.monotonic() + args.timeout if args.timeout else None
    try:
        print(cordon(c, args.node, True), flush=True)
        pending = {v.pod.metadata.uid: v.pod for v in c.pods() if v.pod.node_name == args.node}
        daemon = sorted(f"{p.metadata.namespace}/{p.metadata.name}" for p in pending.values() if _daemon_set_pod(p))
        if daemon and not getattr(args, "ignore_daemonsets", False):
            _err(f'error: unable to drain node "{args.node}" due to error: cannot delete DaemonSet-managed Pods '
                 f"(use --ignore-daemonsets to ignore): {', '.join(daemon)}, continuing command...")
            _err(f"There are pending nodes to be drained:\n {args.node}")
            _err(f"error: cannot delete DaemonSet-managed Pods (use --ignore-daemonsets to ignore): {', '.join(daemon)}")
            return 1
        if daemon:
            _err(f"Warning: ignoring DaemonSet-managed Pods: {', '.join(daemon)}")
            pending = {uid: p for uid, p in pending.items() if not _daemon_set_pod(p)}
        for pod in sorted(pending.values(), key=lambda p: (p.metadata.namespace, p.metadata.name)):
            print(f"evicting pod {pod.metadata.namespace}/{pod.metadata.name}", flush=True)
        retry_at = {uid: 0.0 for uid in pending}  # when to (re)try each eviction; None once accepted
        while pending:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return _drain_timed_out(args, pending)
            for uid, pod in sorted(pending.items(), key=lambda kv: (kv[1].metadata.namespace, kv[1].metadata.name)):
                if retry_at[uid] is None or retry_at[uid] > now:
                    continue
                ns, name = pod.metadata.namespace, pod.metadata.name
                try:
                    c.call("Evict", policy_pb2.EvictRequest(namespace=ns, name=name))
                    retry_at[uid] = None
                except PolicyRefused as e:
                    if e.status == 404:  # gone already
                        retry_at[uid] = None
                    elif e.status == 429:
                        _err(f'error when evicting pods/"{name}" -n "{ns}" (will retry after '
                             f'{DRAIN_RETRY_SECONDS:g}s): {e.message}')
                        retry_at[uid] = now + DRAIN_RETRY_SECONDS
                    else:
                        _err(f'error: unable to drain node "{args.node}" due to error: error when evicting '
                             f'pods/"{name}" -n "{ns}": {e.message}, continuing command...')
                        _err(f"There are pending nodes to be drained:\n {args.node}")
                        _err(f'error: error when evicting pods/"{name}" -n "{ns}": {e.message}')
                        return 1
            alive = {v.pod.metadata.uid for v in c.pods() if v.pod.node_name == args.node}
            for uid in [u for u in pending if retry_at[u] is None and u not in alive]:
                print(f"pod/{pending.pop(uid).metadata.name} evicted", flush=True)
            if pending:
                time.sleep(DRAIN_POLL_SECONDS)
        print(f"node/{args.node} drained")
        return 0
    finally:
        c.close()


def _drain_timed_out(args: argparse.Namespace, pending: dict) -> int:
    why = f"global timeout reached: {args.timeout:g}s"
    left = ", ".join(f"{p.metadata.namespace}/{p.metadata.name}" for p in pending.values())
    _err(f'There are pending pods in node "{args.node}" when an error occurred: {why} ({left})')
    _err(f'error: unable to drain node "{args.node}" due to error: {why}, continuing command...')
    _err(f"There are pending nodes to be drained:\n {args.node}")
    _err(f"error: {why}")
    return 1


# ------------------------------------------------------------------ taint
def parse_taint_specs(specs: list[str]) -> tuple[list[Taint], list[Taint]]:
    """kubectl's ParseTaints: KEY[=VALUE]:EFFECT to add, KEY:EFFECT- or KEY- to remove."""
    from schedmesh.api.load import label_value_errors, qualified_name_errors
    from schedmesh.mesh.controllers.policy import TAINT_EFFECTS
    add: list[Taint] = []
    remove: list[Taint] = []
    for spec in specs:
        removing = spec.endswith("-")
        body = spec[:-1] if removing else spec
        parts = body.split(":")
        value, effect = "", ""
        if len(parts) == 1:
            key = parts[0]
        elif len(parts) == 2:
            effect = parts[1]
            if effect not in TAINT_EFFECTS:
                raise MeshError(f"invalid taint effect: {effect}, unsupported taint effect")
            kv = parts[0].split("=")
            if len(kv) > 2:
                raise MeshError(f"invalid taint spec: {spec}")
            key = kv[0]
            if len(kv) == 2:
                value = kv[1]
                errs = label_value_errors(value)
                if errs:
                    raise MeshError(f"invalid taint spec: {spec}, {'; '.join(errs)}")
        else:
            raise MeshError(f"invalid taint spec: {spec}")
        errs = qualified_name_errors(key)
        if errs:
            raise MeshError(f"invalid taint spec: {spec}, {'; '.join(errs)}")
        if removing:
            remove.append(Taint(key, effect))
        elif not effect:
            raise MeshError(f"invalid taint spec: {spec} (an effect is required to add a taint: "
                            f"{', '.join(TAINT_EFFECTS)})")
        else:
            add.append(Taint(key, effect, value))
    return add, remove


def run_taint(args: argparse.Namespace) -> int:
    from schedmesh.v1 import policy_pb2
    if args.resource not in ("nodes", "node", "no"):
        raise MeshError(f'taint applies to nodes only, not "{args.resource}"')
    add, remove = parse_taint_specs(args.taints)
    req = policy_pb2.TaintRequest(node=args.node, overwrite=args.overwrite)
    for t in add:
        req.add.add(key=t.key, value=t.value, effect=t.effect)
    for t in remove:
        req.remove.add(key=t.key, effect=t.effect)
    c = PolicyClient()
    try:
        try:
            c.call("Taint", req)
        except PolicyRefused as e:
            raise MeshError(e.message) from None
    finally:
        c.close()
    word = "modified" if add and remove else ("tainted" if add else "untainted")
    print(f"node/{args.node} {word}")
    return 0


# ------------------------------------------------------------------ registration
def register(sub) -> None:
    p = sub.add_parser("evict", help="evict a pod through the Eviction API (PodDisruptionBudgets apply)")
    p.add_argument("pod")
    p.add_argument("-n", "--namespace", default="default")
    p.add_argument("--dry-run", action="store_true", help="decide only; nothing is evicted")
    p.set_defaults(func=run_evict)
    for name, helptext in (("cordon", "mark a node unschedulable"), ("uncordon", "mark a node schedulable")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("node")
        p.set_defaults(func=run_cordon)
    p = sub.add_parser("drain", help="cordon a node and evict its pods through the Eviction API")
    p.add_argument("node")
    p.add_argument("--timeout", type=float, default=0.0,
                   help="seconds to wait before giving up (0: for ever), as kubectl drain --timeout")
    p.add_argument("--ignore-daemonsets", action="store_true",
                   help="leave DaemonSet-managed pods on the node (without it, their presence refuses the drain)")
    p.set_defaults(func=run_drain)
    p = sub.add_parser("taint", help="add or remove node taints: KEY[=VALUE]:EFFECT, KEY:EFFECT-, KEY-")
    p.add_argument("resource", help="nodes")
    p.add_argument("node")
    p.add_argument("taints", nargs="+", metavar="TAINT")
    p.add_argument("--overwrite", action="store_true", help="replace a taint of the same key and effect")
    p.set_defaults(func=run_taint)
