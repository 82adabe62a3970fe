"""Conversions between the object model (api.types) and its protobuf form (protos/schedmesh/v1/objects.proto)."""
from __future__ import annotations

import json
from typing import Optional

from schedmesh.api.evolve import evolve
from schedmesh.api.labels import LabelSelector, LabelSelectorRequirement
from schedmesh.api.quantity import format_exact, parse_quantity
from schedmesh.api.types import (Affinity, Container, ContainerImage, ContainerPort, DaemonSet, LimitRange,
                                 LimitRangeItem, Namespace, Node,
                                 NodeAffinity, NodeCondition, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
                                 ObjectMeta, OwnerReference, Pod, PodAffinity, PodAffinityTerm, PodCondition,
                                 PodDisruptionBudget, PreferredSchedulingTerm, PriorityClass, ResourceList,
                                 RuntimeClass, RuntimeClassScheduling, Taint, Toleration, TopologySpreadConstraint,
                                 WeightedPodAffinityTerm, WorkloadSelector, WorkloadSpec)
from schedmesh.v1 import objects_pb2 as pb


def _rl_to(rl: ResourceList, m) -> None:
    for k, v in rl.items():
        m[k] = format_exact(v)


def _map_from(m) -> dict:
    """A protobuf map as a dict: upb's maps take their keys()/items() from collections.abc, which
    made dict(map) about 2.7 us even for an empty map (0.1 us here), several per pod decoded in
    every follower."""
    return {k: m[k] for k in m} if m else {}


def _rl_from(m) -> ResourceList:
    return {k: parse_quantity(m[k]) for k in m} if m else {}


def _t(x: Optional[float]) -> float:
    return x or 0.0


def _tf(x: float) -> Optional[float]:
    return x or None


def meta_to(m: ObjectMeta, out: pb.ObjectMeta) -> pb.ObjectMeta:
    out.name, out.namespace, out.uid = m.name, m.namespace, m.uid
    out.labels.update(m.labels)
    out.annotations.update(m.annotations)
    out.creation_timestamp, out.deletion_timestamp = _t(m.creation_timestamp), _t(m.deletion_timestamp)
    for o in m.owner_references:
        out.owner_references.add(kind=o.kind, name=o.name, uid=o.uid, api_version=o.api_version, controller=o.controller)
    out.resource_version = m.resource_version
    return out


def meta_from(m: pb.ObjectMeta) -> ObjectMeta:
    return ObjectMeta(name=m.name, namespace=m.namespace, uid=m.uid, labels=_map_from(m.labels),
                      annotations=_map_from(m.annotations), creation_timestamp=_tf(m.creation_timestamp),
                      deletion_timestamp=_tf(m.deletion_timestamp),
                      owner_references=[OwnerReference(o.kind, o.name, o.uid, o.api_version, o.controller)
                                        for o in m.owner_references],
                      resource_version=m.resource_version)


def selector_to(s: Optional[LabelSelector], out: pb.LabelSelector) -> None:
    out.SetInParent()
    out.match_labels.update(dict(s.match_labels))
    for r in s.match_expressions:
        out.match_expressions.add(key=r.key, operator=r.operator, values=list(r.values))


def selector_from(msg, present: bool) -> Optional[LabelSelector]:
    if not present:
        return None
    return LabelSelector.of(_map_from(msg.match_labels),
                            [LabelSelectorRequirement(r.key, r.operator, tuple(r.values)) for r in msg.match_expressions])


def _nsr_to(reqs: list[NodeSelectorRequirement], out) -> None:
    for r in reqs:
        out.add(key=r.key, operator=r.operator, values=list(r.values))


def _nsr_from(reqs) -> list[NodeSelectorRequirement]:
    return [NodeSelectorRequirement(r.key, r.operator, list(r.values)) for r in reqs]


def _term_to(t: NodeSelectorTerm, out: pb.NodeSelectorTerm) -> None:
    out.SetInParent()
    _nsr_to(t.match_expressions, out.match_expressions)
    _nsr_to(t.match_fields, out.match_fields)


def _term_from(t: pb.NodeSelectorTerm) -> NodeSelectorTerm:
    return NodeSelectorTerm(_nsr_from(t.match_expressions), _nsr_from(t.match_fields))


def _pat_to(t: PodAffinityTerm, out: pb.PodAffinityTerm) -> None:
    out.topology_key = t.topology_key
    if t.label_selector is not None:
        selector_to(t.label_selector, out.label_selector)
    out.namespaces.extend(t.namespaces)
    if t.namespace_selector is not None:
        selector_to(t.namespace_selector, out.namespace_selector)
    out.match_label_keys.extend(t.match_label_keys)
    out.mismatch_label_keys.extend(t.mismatch_label_keys)


def _pat_from(t: pb.PodAffinityTerm) -> PodAffinityTerm:
    return PodAffinityTerm(topology_key=t.topology_key,
                           label_selector=selector_from(t.label_selector, t.HasField("label_selector")),
                           namespaces=list(t.namespaces),
                           namespace_selector=selector_from(t.namespace_selector, t.HasField("namespace_selector")),
                           match_label_keys=list(t.match_label_keys), mismatch_label_keys=list(t.mismatch_label_keys))


def _pa_to(a: PodAffinity, out: pb.PodAffinity) -> None:
    out.SetInParent()
    for t in a.required:
        _pat_to(t, out.required.add())
    for w in a.preferred:
        m = out.preferred.add(weight=w.weight)
        _pat_to(w.term, m.term)


def _pa_from(a: pb.PodAffinity) -> PodAffinity:
    return PodAffinity([_pat_from(t) for t in a.required],
                       [WeightedPodAffinityTerm(w.weight, _pat_from(w.term)) for w in a.preferred])


def _container_to(c: Container, out: pb.Container) -> None:
    out.name, out.image = c.name, c.image
    _rl_to(c.requests, out.requests)
    _rl_to(c.limits, out.limits)
    for p in c.ports:
        out.ports.add(container_port=p.container_port, host_port=p.host_port, protocol=p.protocol, host_ip=p.host_ip,
                      name=p.name)
    out.restart_policy = c.restart_policy or ""


def _container_from(c: pb.Container) -> Container:
    return Container(name=c.name, image=c.image, requests=_rl_from(c.requests), limits=_rl_from(c.limits),
                     ports=[ContainerPort(p.container_port, p.host_port, p.protocol, p.host_ip, p.name) for p in c.ports],
                     restart_policy=c.restart_policy or None)


def pod_to_proto(p: Pod, out: Optional[pb.Pod] = None) -> pb.Pod:
    out = out if out is not None else pb.Pod()
    meta_to(p.meta, out.metadata)
    for c in p.containers:
        _container_to(c, out.containers.add())
    for c in p.init_containers:
        _container_to(c, out.init_containers.add())
    out.node_name = p.node_name
    out.node_selector.update(p.node_selector)
    if p.affinity is not None:
        a = out.affinity
        a.SetInParent()
        if p.affinity.node_affinity is not None:
            na = a.node_affinity
            na.SetInParent()
            if p.affinity.node_affinity.required is not None:
                na.required.SetInParent()
                for t in p.affinity.node_affinity.required.terms:
                    _term_to(t, na.required.terms.add())
            for w in p.affinity.node_affinity.preferred:
                m = na.preferred.add(weight=w.weight)
                _term_to(w.preference, m.preference)
        if p.affinity.pod_affinity is not None:
            _pa_to(p.affinity.pod_affinity, a.pod_affinity)
        if p.affinity.pod_anti_affinity is not None:
            _pa_to(p.affinity.pod_anti_affinity, a.pod_anti_affinity)
    _tolerations_to(p.tolerations, out.tolerations)
    for c in p.topology_spread_constraints:
        m = out.topology_spread_constraints.add(max_skew=c.max_skew, topology_key=c.topology_key,
                                                when_unsatisfiable=c.when_unsatisfiable, min_domains=c.min_domains or 0,
                                                node_affinity_policy=c.node_affinity_policy or "",
                                                node_taints_policy=c.node_taints_policy or "",
                                                match_label_keys=c.match_label_keys)
        if c.label_selector is not None:
            selector_to(c.label_selector, m.label_selector)
    out.scheduler_name, out.priority_class_name = p.scheduler_name, p.priority_class_name
    out.priority, out.preemption_policy = p.priority or 0, p.preemption_policy
    _rl_to(p.overhead, out.overhead)
    if p.resource_requests is not None:
        out.resource_requests.SetInParent()
        _rl_to(p.resource_requests, out.resource_requests.items)
    if p.resource_limits is not None:
        out.resource_limits.SetInParent()
        _rl_to(p.resource_limits, out.resource_limits.items)
    out.scheduling_gates.extend(p.scheduling_gates)
    out.termination_grace_period_seconds = p.termination_grace_period_seconds
    out.runtime_class_name, out.host_network = p.runtime_class_name, p.host_network
    out.volumes_json = json.dumps(p.volumes) if p.volumes else ""
    out.phase, out.nominated_node_name, out.start_time = p.phase, p.nominated_node_name, _t(p.start_time)
    for c in p.conditions:
        out.conditions.add(type=c.type, status=c.status, reason=c.reason, message=c.message)
    out.status_reason, out.status_message = p.status_reason, p.status_message
    return out


def _tolerations_to(tolerations: list[Toleration], out) -> None:
    for t in tolerations:
        out.add(key=t.key, operator=t.operator, value=t.value, effect=t.effect,
                has_toleration_seconds=t.toleration_seconds is not None, toleration_seconds=t.toleration_seconds or 0)


def _tolerations_from(m) -> list[Toleration]:
    return [Toleration(t.key, t.operator, t.value, t.effect, t.toleration_seconds if t.has_toleration_seconds else None)
            for t in m]


# A pod's spec -> a pod decoded from it: a workload's replicas differ only in their metadata,
# binding and status, and every follower of the pods topic decodes every pod (19 us each; 8 us
# from here), as a shard decodes every bound pod its feeds bring. The pods returned share their
# spec's objects (containers, tolerations...), as copies made by `evolve` do; nothing changes
# those in place.
_POD_SPECS: dict[bytes, Pod] = {}
_POD_SPECS_MAX = 1024
# Pod's fields that are not its spec: metadata (1), binding (node_name, 4) and status (21-26),
# the fields of api.types.POD_BINDING_AND_STATUS.
_NOT_SPEC_FIELDS = frozenset({1, 4, 21, 22, 23, 24, 25, 26})


def _varint(raw: bytes, i: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        b = raw[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def _spec_key(raw: bytes) -> bytes:
    """A serialized Pod without its metadata, binding and status fields: its top-level fields
    walked in the wire format, the others kept as they are (still a Pod's serialization)."""
    kept: list[bytes] = []
    i, n, keep_from = 0, len(raw), 0
    while i < n:
        start = i
        tag = raw[i]  # (one byte for fields 1-15: this is run for every pod decoded)
        i += 1
        if tag & 0x80:
            tag, i = _varint(raw, start)
        wire = tag & 7
        if wire == 2:
            length = raw[i]
            i += 1
            if length & 0x80:
                length, i = _varint(raw, i - 1)
            i += length
        elif wire == 0:
            _, i = _varint(raw, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:  # groups: never in a Pod's encoding
            raise ValueError(f"wire type {wire} at byte {start} of a Pod's encoding")
        if tag >> 3 in _NOT_SPEC_FIELDS:
            if start > keep_from:
                kept.append(raw[keep_from:start])
            keep_from = i
    if i != n:
        raise ValueError(f"a Pod's encoding ends inside a field ({n} bytes, field ends at {i})")
    kept.append(raw[keep_from:])
    return b"".join(kept)


def split_pod_encoding(raw: bytes) -> Optional[tuple[bytes, bytes]]:
    """(its metadata's encoding, everything after it) of a serialized Pod whose first field is its
    metadata, as protobuf's serializers write a message (fields in their numbers' order); None for
    another. Two pods whose encodings end alike decode alike but for their metadata."""
    if len(raw) < 2 or raw[0] != 0x0A:  # field 1 (metadata), length-delimited
        return None
    length, start = _varint(raw, 1)
    end = start + length
    if end > len(raw):
        raise ValueError(f"a Pod's encoding ends inside its metadata ({len(raw)} bytes, metadata ends at {end})")
    return raw[start:end], raw[end:]


def join_pod_encoding(metadata: bytes, rest: bytes) -> bytes:
    """A serialized Pod from its metadata's encoding and the rest: split_pod_encoding's inverse."""
    length = bytearray()
    n = len(metadata)
    while n > 0x7F:
        length.append((n & 0x7F) | 0x80)
        n >>= 7
    length.append(n)
    return b"\n" + bytes(length) + metadata + rest  # field 1, length-delimited


def pod_from_proto(m: pb.Pod, encoded: Optional[bytes] = None) -> Pod:
    """`encoded`: m's serialization, when the caller has it. Any serialization gives the right
    pod; a deterministic one (what this makes without it) meets a replica's spec more often, since
    map fields may come in another order otherwise."""
    key = _spec_key(encoded if encoded is not None else m.SerializeToString(deterministic=True))
    spec = _POD_SPECS.get(key)
    if spec is None:
        pod = _decode_pod(m)
        if len(_POD_SPECS) >= _POD_SPECS_MAX:
            _POD_SPECS.clear()
        # A copy without binding and status: a field set on `pod` later stays out of the memo.
        _POD_SPECS[key] = evolve(pod, node_name="", phase="Pending", nominated_node_name="", start_time=None,
                                 conditions=[], status_reason="", status_message="")
        return pod
    pod = evolve(spec, meta=meta_from(m.metadata))
    # Only what is set: a pending pod has no binding and no status yet.
    if m.node_name:
        pod.node_name = m.node_name
    if m.phase:
        pod.phase = m.phase
    if m.nominated_node_name:
        pod.nominated_node_name = m.nominated_node_name
    if m.start_time:
        pod.start_time = m.start_time
    if m.conditions:
        pod.conditions = _conditions_from(m.conditions)
    if m.status_reason:
        pod.status_reason = m.status_reason
    if m.status_message:
        pod.status_message = m.status_message
    return pod


def _conditions_from(conditions) -> list[PodCondition]:
    return [PodCondition(c.type, c.status, c.reason, c.message) for c in conditions]


def _decode_pod(m: pb.Pod) -> Pod:
    aff = None
    if m.HasField("affinity"):
        a = m.affinity
        na = None
        if a.HasField("node_affinity"):
            req = NodeSelector([_term_from(t) for t in a.node_affinity.required.terms]) \
                if a.node_affinity.HasField("required") else None
            na = NodeAffinity(req, [PreferredSchedulingTerm(w.weight, _term_from(w.preference))
                                    for w in a.node_affinity.preferred])
        aff = Affinity(na, _pa_from(a.pod_affinity) if a.HasField("pod_affinity") else None,
                       _pa_from(a.pod_anti_affinity) if a.HasField("pod_anti_affinity") else None)
    return Pod(
        meta=meta_from(m.metadata),
        containers=[_container_from(c) for c in m.containers],
        init_containers=[_container_from(c) for c in m.init_containers],
        node_name=m.node_name, node_selector=_map_from(m.node_selector), affinity=aff,
        tolerations=_tolerations_from(m.tolerations),
        topology_spread_constraints=[TopologySpreadConstraint(
            c.max_skew, c.topology_key, c.when_unsatisfiable,
            selector_from(c.label_selector, c.HasField("label_selector")), c.min_domains or None,
            c.node_affinity_policy or None, c.node_taints_policy or None, list(c.match_label_keys))
            for c in m.topology_spread_constraints],
        scheduler_name=m.scheduler_name, priority_class_name=m.priority_class_name, priority=m.priority,
        preemption_policy=m.preemption_policy, overhead=_rl_from(m.overhead),
        resource_requests=_rl_from(m.resource_requests.items) if m.HasField("resource_requests") else None,
        resource_limits=_rl_from(m.resource_limits.items) if m.HasField("resource_limits") else None,
        scheduling_gates=list(m.scheduling_gates),
        termination_grace_period_seconds=m.termination_grace_period_seconds,
        runtime_class_name=m.runtime_class_name, host_network=m.host_network,
        volumes=json.loads(m.volumes_json) if m.volumes_json else [],
        phase=m.phase or "Pending", nominated_node_name=m.nominated_node_name, start_time=_tf(m.start_time),
        conditions=_conditions_from(m.conditions),
        status_reason=m.status_reason, status_message=m.status_message,
    )


def node_to_proto(n: Node, out: Optional[pb.Node] = None) -> pb.Node:
    out = out if out is not None else pb.Node()
    meta_to(n.meta, out.metadata)
    out.unschedulable = n.unschedulable
    for t in n.taints:
        out.taints.add(key=t.key, value=t.value, effect=t.effect, time_added=_t(t.time_added))
    _rl_to(n.allocatable, out.allocatable)
    _rl_to(n.capacity, out.capacity)
    for im in n.images:
        out.images.add(names=im.names, size_bytes=im.size_bytes)
    for c in n.conditions:
        condition_to_proto(c, out.conditions.add())
    return out


def condition_to_proto(c: NodeCondition, out: pb.NodeCondition) -> pb.NodeCondition:
    out.type, out.status, out.reason, out.message = c.type, c.status, c.reason, c.message
    out.last_heartbeat_time = _t(c.last_heartbeat_time)
    return out


def node_from_proto(m: pb.Node) -> Node:
    return Node(meta=meta_from(m.metadata), unschedulable=m.unschedulable,
                taints=[Taint(t.key, t.effect, t.value, _tf(t.time_added)) for t in m.taints],
                allocatable=_rl_from(m.allocatable), capacity=_rl_from(m.capacity),
                images=[ContainerImage(list(i.names), i.size_bytes) for i in m.images],
                conditions=[NodeCondition(c.type, c.status, c.reason, c.message, _tf(c.last_heartbeat_time))
                            for c in m.conditions])


def priority_class_to_proto(c: PriorityClass) -> pb.PriorityClass:
    return pb.PriorityClass(name=c.name, value=c.value, global_default=c.global_default,
                            preemption_policy=c.preemption_policy, description=c.description)


def priority_class_from_proto(m: pb.PriorityClass) -> PriorityClass:
    return PriorityClass(m.name, m.value, m.global_default, m.preemption_policy or "PreemptLowerPriority", m.description)


def runtime_class_to_proto(c: RuntimeClass) -> pb.RuntimeClass:
    out = pb.RuntimeClass(name=c.name, handler=c.handler)
    if c.overhead is not None:
        out.overhead.SetInParent()
        _rl_to(c.overhead, out.overhead.items)
    if c.scheduling is not None:
        out.scheduling.SetInParent()
        out.scheduling.node_selector.update(c.scheduling.node_selector)
        _tolerations_to(c.scheduling.tolerations, out.scheduling.tolerations)
    return out


def runtime_class_from_proto(m: pb.RuntimeClass) -> RuntimeClass:
    scheduling = None
    if m.HasField("scheduling"):
        scheduling = RuntimeClassScheduling(_map_from(m.scheduling.node_selector),
                                            _tolerations_from(m.scheduling.tolerations))
    return RuntimeClass(m.name, m.handler, _rl_from(m.overhead.items) if m.HasField("overhead") else None, scheduling)


def pdb_to_proto(p: PodDisruptionBudget) -> pb.PodDisruptionBudget:
    out = pb.PodDisruptionBudget(min_available=p.min_available or "", max_unavailable=p.max_unavailable or "",
                                 disruptions_allowed=p.disruptions_allowed, disrupted_pods=p.disrupted_pods,
                                 expected_pods=p.expected_pods, current_healthy=p.current_healthy,
                                 desired_healthy=p.desired_healthy, status_given=p.status_given)
    meta_to(p.meta, out.metadata)
    if p.selector is not None:
        selector_to(p.selector, out.selector)
    return out


def pdb_from_proto(m: pb.PodDisruptionBudget) -> PodDisruptionBudget:
    return PodDisruptionBudget(meta=meta_from(m.metadata), selector=selector_from(m.selector, m.HasField("selector")),
                               min_available=m.min_available or None, max_unavailable=m.max_unavailable or None,
                               disruptions_allowed=m.disruptions_allowed, disrupted_pods=_map_from(m.disrupted_pods),
                               expected_pods=m.expected_pods, current_healthy=m.current_healthy,
                               desired_healthy=m.desired_healthy, status_given=m.status_given)


def workload_to_proto(w: WorkloadSelector) -> pb.WorkloadSelector:
    out = pb.WorkloadSelector(kind=w.kind, namespace=w.namespace, name=w.name)
    if w.selector is not None:
        selector_to(w.selector, out.selector)
    if w.spec is not None:
        _workload_spec_to(w.spec, out.spec)
    return out


def workload_from_proto(m: pb.WorkloadSelector) -> WorkloadSelector:
    return WorkloadSelector(m.kind, m.namespace, m.name, selector_from(m.selector, m.HasField("selector")),
                            _workload_spec_from(m.spec) if m.HasField("spec") else None)


def _workload_spec_to(s: WorkloadSpec, out: pb.WorkloadSpec) -> None:
    pod_to_proto(s.template, out.template)
    if s.template.priority is not None:
        out.template_priority = s.template.priority
    out.template_hash, out.replicas, out.deployment = s.template_hash, s.replicas, s.deployment
    out.pod_management_policy, out.backoff_limit, out.completion_mode = (s.pod_management_policy, s.backoff_limit,
                                                                          s.completion_mode)
    if s.completions is not None:
        out.completions = s.completions
    out.suspend, out.pod_replacement_policy = s.suspend, s.pod_replacement_policy
    out.created_pods.extend(s.created_pods)
    out.created_at = s.created_at


def _workload_spec_from(m: pb.WorkloadSpec) -> WorkloadSpec:
    template = evolve(pod_from_proto(m.template),
                      priority=m.template_priority if m.HasField("template_priority") else None)
    return WorkloadSpec(template=template, template_hash=m.template_hash, replicas=m.replicas,
                        deployment=m.deployment, pod_management_policy=m.pod_management_policy,
                        completions=m.completions if m.HasField("completions") else None,
                        backoff_limit=m.backoff_limit, completion_mode=m.completion_mode, suspend=m.suspend,
                        pod_replacement_policy=m.pod_replacement_policy, created_pods=tuple(m.created_pods),
                        created_at=m.created_at)


def namespace_to_proto(n: Namespace) -> pb.Namespace:
    return pb.Namespace(name=n.name, labels=n.labels)


def namespace_from_proto(m: pb.Namespace) -> Namespace:
    return Namespace(m.name, _map_from(m.labels))


def daemon_set_to_proto(d: DaemonSet) -> pb.DaemonSet:
    out = pb.DaemonSet(template_hash=d.template_hash, template_generation=d.template_generation,
                       update_strategy=d.update_strategy, max_unavailable=d.max_unavailable)
    meta_to(d.meta, out.metadata)
    selector_to(d.selector, out.selector)
    pod_to_proto(d.template, out.template)
    if d.template.priority is not None:
        out.template_priority = d.template.priority
    return out


def daemon_set_from_proto(m: pb.DaemonSet) -> DaemonSet:
    template = evolve(pod_from_proto(m.template),
                      priority=m.template_priority if m.HasField("template_priority") else None)
    return DaemonSet(meta=meta_from(m.metadata), selector=selector_from(m.selector, True),
                     template=template, template_hash=m.template_hash,
                     template_generation=m.template_generation, update_strategy=m.update_strategy,
                     max_unavailable=m.max_unavailable)


_LIMIT_RANGE_MAPS = ("max", "min", "default", "default_request", "max_limit_request_ratio")


def limit_range_to_proto(r: LimitRange) -> pb.LimitRange:
    out = pb.LimitRange()
    meta_to(r.meta, out.metadata)
    for item in r.limits:
        m = out.limits.add(type=item.type)
        for attr in _LIMIT_RANGE_MAPS:
            getattr(m, attr).update(getattr(item, attr))
    return out


def limit_range_from_proto(m: pb.LimitRange) -> LimitRange:
    return LimitRange(meta=meta_from(m.metadata), limits=tuple(
        LimitRangeItem(type=i.type, **{attr: _map_from(getattr(i, attr)) for attr in _LIMIT_RANGE_MAPS})
        for i in m.limits))
