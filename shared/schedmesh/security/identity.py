"""Who is who in the mesh: the identity each service's certificate carries (its common name), the
DNS names it answers to in each deployment mode, and which identities may call which gRPC service.

A certificate's subject CN is the service's role ("queue-manager", "binder", ...). Every replica
of a role shares that identity: the rule "only the queue-manager may bind" is about the role.
"""
from __future__ import annotations

from typing import Optional

QUEUE_MANAGER = "queue-manager"
BINDER = "binder"
FILTER_WORKER = "filter-worker"
SCORE_WORKER = "score-worker"
KUBELET_AGENT = "kubelet-agent"
PREEMPTION = "preemption"
CONTROLLER_MANAGER = "controller-manager"
KAFKA = "kafka"  # the broker in compose and Kubernetes
#: The user's certificate (the CLI, and the local supervisor's health checks): a client only.
ADMIN = "schedmesh-admin"

#: Services that serve gRPC and call each other: their certificates are for both ends of a hop.
SERVICE_IDENTITIES = (QUEUE_MANAGER, BINDER, FILTER_WORKER, SCORE_WORKER, KUBELET_AGENT, PREEMPTION,
                      CONTROLLER_MANAGER, KAFKA)
CLIENT_IDENTITIES = (ADMIN,)

#: The Kubernetes namespace of deploy/kubernetes (its Services are <role>.<namespace>.svc...).
K8S_NAMESPACE = "schedmesh"
#: docker-compose.yml's project name: replicas are <project>-<service>-<n> on its network.
COMPOSE_PROJECT = "schedmesh"
#: Compose replicas a certificate names (docker-compose.yml publishes at most 10 per worker kind).
COMPOSE_MAX_REPLICAS = 10

#: gRPC services (full proto names) and the identities allowed to call them. Services not
#: listed (grpc.health.v1.Health, the user-facing Scheduler and Policy APIs of the
#: queue-manager) take any certificate the CA signed; the user-facing APIs also require the
#: bearer token (interceptors.USER_FACING_APIS).
ALLOWED_CALLERS: dict[str, frozenset[str]] = {
    # Only the queue-manager may commit bindings.
    "schedmesh.v1.Binder": frozenset({QUEUE_MANAGER}),
    # Only the queue-manager may install a ClusterView (its assumed and nominated pods) on a shard.
    "schedmesh.v1.FilterWorker": frozenset({QUEUE_MANAGER}),
    "schedmesh.v1.ScoreWorker": frozenset({QUEUE_MANAGER}),
    # Preemption evicts victims and nominates: only for the queue-manager's PostFilter.
    "schedmesh.v1.Preemption": frozenset({QUEUE_MANAGER}),
}
#: Rules that hold on one server only: the controller-manager's Policy (evict, cordon, taint)
#: is reached through the queue-manager, which checks the user's token and forwards.
SERVER_ALLOWED_CALLERS: dict[str, dict[str, frozenset[str]]] = {
    CONTROLLER_MANAGER: {"schedmesh.v1.Policy": frozenset({QUEUE_MANAGER})},
}


def allowed_callers(server_identity: Optional[str]) -> dict[str, frozenset[str]]:
    """The rules a server with certificate identity `server_identity` enforces."""
    return {**ALLOWED_CALLERS, **SERVER_ALLOWED_CALLERS.get(server_identity or "", {})}


def dns_names(identity: str) -> list[str]:
    """Names a service answers to: localhost for `schedmesh up`, the compose service and replica
    names, and the Kubernetes Service names (with a wildcard for StatefulSet pods behind a
    headless Service, e.g. filter-worker-0.filter-worker.schedmesh.svc.cluster.local)."""
    names = ["localhost", identity]
    names += [f"{COMPOSE_PROJECT}-{identity}-{n}" for n in range(1, COMPOSE_MAX_REPLICAS + 1)]
    # StatefulSet pods by their short names (filter-worker-0.filter-worker, kafka-0.kafka):
    # a wildcard over a one-label name is not honoured by TLS clients
    names += [f"{identity}-{n}.{identity}" for n in range(COMPOSE_MAX_REPLICAS)]
    for suffix in (f"{K8S_NAMESPACE}", f"{K8S_NAMESPACE}.svc", f"{K8S_NAMESPACE}.svc.cluster.local"):
        names += [f"{identity}.{suffix}", f"*.{identity}.{suffix}"]
    return names


def caller_allowed(full_method: str, identity: Optional[str],
                   rules: Optional[dict[str, frozenset[str]]] = None) -> Optional[str]:
    """None when `identity` may call `full_method` ("/package.Service/Method"), else why not."""
    service = full_method.lstrip("/").split("/", 1)[0]
    allowed = (ALLOWED_CALLERS if rules is None else rules).get(service)
    if allowed is None or identity in allowed:
        return None
    who = f"a caller with identity {identity!r}" if identity else "a caller without a client certificate"
    return (f"{who} may not call {full_method}: only {', '.join(sorted(allowed))} may "
            "(the identity is the common name of the peer's TLS certificate)")


def _topic_writers() -> dict[str, frozenset[str]]:
    from schedmesh.bus import topics as t
    qm_agent = frozenset({QUEUE_MANAGER, KUBELET_AGENT})
    # Writers as docs/mesh.md lists them. The binder writes bindings and Scheduled events; the
    # preemption service and the controller-manager act on pods (evictions, deletions) and
    # say so in events.
    pods_writers = frozenset({QUEUE_MANAGER, BINDER, KUBELET_AGENT, PREEMPTION, CONTROLLER_MANAGER})
    return {
        t.NAMESPACES: frozenset({QUEUE_MANAGER}),
        t.PRIORITY_CLASSES: frozenset({QUEUE_MANAGER}),
        t.PDBS: frozenset({QUEUE_MANAGER, CONTROLLER_MANAGER}),  # the disruption controller writes status
        t.NODES: qm_agent | {CONTROLLER_MANAGER},  # node lifecycle: conditions and taints
        t.LEASES: frozenset({KUBELET_AGENT}),
        t.PODS: pods_writers,
        t.EVENTS: pods_writers,
    }


#: Kafka topic -> the identities that may write it (Apache Kafka ACLs in compose and Kubernetes:
#: schedmesh.security.kafka_acls). Every service but the shards (fed by the queue-manager) may read every topic.
TOPIC_WRITERS: dict[str, frozenset[str]] = _topic_writers()
