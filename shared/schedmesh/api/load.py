"""Reading Kubernetes manifests as users write them, the way the API server would.

Multi-document YAML, JSON, `kind: List`; v1 Pod, Node, Namespace, Service (its selector),
scheduling.k8s.io/v1 PriorityClass, node.k8s.io/v1 RuntimeClass, policy/v1 PodDisruptionBudget,
v1 LimitRange (schedmesh.api.limit_range), apps/v1 Deployment, ReplicaSet and StatefulSet, v1
ReplicationController and batch/v1 Job (expanded to the pods their controllers create at once,
named as they name them), apps/v1 DaemonSet (kept whole: its pods depend on the nodes, see schedmesh.workloads.daemonset) and
kubescheduler.config.k8s.io/v1 KubeSchedulerConfiguration (kept as a dict for
`schedmesh.framework.config`). Kinds scheduling never reads (ConfigMaps, Secrets, RBAC,
Ingresses, ...: `_SKIPPED`) are accepted and kept only as names (`Manifests.skipped`), so a
platform's manifest applies whole; any other kind is refused. Defaults are applied as the API
server applies them (namespace, requests from limits, pod-level requests, matchLabelKeys merged
into affinity selectors), and names, labels and annotations are validated as it validates them.
Every error is a ManifestError naming the source, the document, the field path and the reason.

Input is bounded (the limits below) and refused before it is expanded: a YAML alias bomb or a
deeply nested document costs what its text costs, not what it would expand to.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import random
import re
import secrets
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional

import yaml
from yaml.events import AliasEvent, MappingEndEvent, MappingStartEvent, ScalarEvent, SequenceEndEvent, StreamEndEvent
from yaml.nodes import MappingNode, Node as _YAMLNode, ScalarNode, SequenceNode

from schedmesh.api.labels import (LABEL_SELECTOR_OPERATORS, IN, NOT_IN, LabelSelector,
                                  LabelSelectorRequirement)
from schedmesh.api.evolve import evolve
from schedmesh.api.limit_range import LimitRangeInvalid, canonical_quantities, default_item, validate_limit_range
from schedmesh.api.quantity import QuantityError, parse_quantity
from schedmesh.api.resources import (aggregate_container_requests, is_hugepage_resource_name,
                                     is_supported_pod_level_resource)
from schedmesh.api.types import (DEFAULT_BACKOFF_LIMIT, DEFAULT_NAMESPACE, INDEXED, NO_EXECUTE, NO_SCHEDULE,
                                 NON_INDEXED, ON_DELETE, ORDERED_READY, PARALLEL, PREEMPT_LOWER_PRIORITY,
                                 PREEMPT_NEVER, PREFER_NO_SCHEDULE, REPLACE_FAILED, ROLLING_UPDATE,
                                 SYSTEM_PRIORITY_CLASSES, TERMINATING_OR_FAILED,
                                 Affinity, Container, ContainerImage, ContainerPort, DaemonSet, LimitRange,
                                 LimitRangeItem, Namespace, Node,
                                 NodeAffinity, NodeCondition, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
                                 ObjectMeta, OwnerReference, Pod, PodAffinity, PodAffinityTerm,
                                 PodCondition, PodDisruptionBudget, PreferredSchedulingTerm, PriorityClass,
                                 ResourceList, RuntimeClass, RuntimeClassScheduling, Taint, Toleration,
                                 TopologySpreadConstraint, WeightedPodAffinityTerm, WorkloadSelector, WorkloadSpec)


# ---------------------------------------------------------------------------------------------
# Limits. One request is one load_text() or load_files() call (one apply, one explain input).
# Kubernetes itself stops far earlier (the API server takes 3 MiB per request, etcd 1.5 MiB per
# object); these bounds keep a hostile or mistaken manifest from exhausting the process.
# ---------------------------------------------------------------------------------------------

MAX_MANIFEST_BYTES = 8 * 1024 * 1024   # per file or text, UTF-8
MAX_DEPTH = 64                         # nested mappings/sequences in a document, aliases expanded
MAX_DOCUMENTS = 10_000                 # YAML documents per file or text
MAX_EXPANDED_NODES = 1_000_000         # YAML/JSON nodes per request, every alias expanded
MAX_TEMPLATE_COPY_NODES = 2_000_000    # replicas x pod-template nodes, summed over a request's workloads
MAX_OBJECTS = 100_000                  # objects per request after List items and workload pods
MAX_REPLICAS = 10_000                  # pods one workload expands to (spec.replicas; a Job's parallel pods)
MAX_CONTAINERS = 100                   # spec.containers, and spec.initContainers, per pod
MAX_PORTS_PER_CONTAINER = 1_000        # ports of one container
MAX_PORTS_PER_POD = 2_000              # ports of a pod's containers and init containers together
MAX_ANNOTATIONS_BYTES = 256 * 1024     # kube's TotalAnnotationSizeLimitB


class ManifestError(ValueError):
    """A manifest that cannot be read: names where (document, field path) and why."""

    def __init__(self, where: str, path: str, reason: str) -> None:
        self.where, self.path, self.reason = where, path, reason
        super().__init__(f"{where}: {path}: {reason}" if path else f"{where}: {reason}")

    def __reduce__(self):
        # pickled as made (the queue-manager's admission worker process raises it)
        return type(self), (self.where, self.path, self.reason)


@dataclass
class Manifests:
    """Everything read from one or more files, in order."""

    nodes: list[Node] = field(default_factory=list)
    pods: list[Pod] = field(default_factory=list)
    priority_classes: list[PriorityClass] = field(default_factory=list)
    pdbs: list[PodDisruptionBudget] = field(default_factory=list)
    namespaces: list[Namespace] = field(default_factory=list)
    scheduler_configs: list[dict] = field(default_factory=list)
    runtime_classes: list[RuntimeClass] = field(default_factory=list)
    # The pod controllers the workloads expanded here stand for (their selectors and what their
    # controllers keep), and the Services applied (selectors only).
    workloads: list[WorkloadSelector] = field(default_factory=list)
    # Objects of kinds scheduling never reads: named in apply's output, never published.
    skipped: list["SkippedObject"] = field(default_factory=list)
    # Kept whole: which nodes get their pods is for their controller to decide.
    daemon_sets: list[DaemonSet] = field(default_factory=list)
    # Admission's part: they default and limit the pods created in their namespace.
    limit_ranges: list[LimitRange] = field(default_factory=list)
    # Where each pod was read ((namespace, name) -> "file: document N (Kind name)"), so an
    # admission refusal decided later names the document.
    pod_sources: dict[tuple[str, str], str] = field(default_factory=dict)

    def extend(self, other: "Manifests") -> "Manifests":
        for f in ("nodes", "pods", "priority_classes", "pdbs", "namespaces", "scheduler_configs", "runtime_classes",
                  "workloads", "skipped", "daemon_sets", "limit_ranges"):
            getattr(self, f).extend(getattr(other, f))
        self.pod_sources.update(other.pod_sources)
        return self

    def pod_source(self, pod: Pod) -> str:
        """Where `pod` was read and which pod it is: "m.yaml: document 2 (Deployment web): Pod default/web-x"."""
        where = self.pod_sources.get((pod.namespace, pod.name))
        return f"{where}: Pod {pod.key}" if where else f"Pod {pod.key}"


@dataclass(frozen=True)
class SkippedObject:
    """An object accepted but not read (a ConfigMap, a Role, ...): scheduling never looks at
    its kind, so only its name is kept, for the line apply and delete -f print about it."""

    resource: str   # as kubectl names the kind: "configmap", "role.rbac.authorization.k8s.io"
    namespace: str  # "" for a cluster-scoped kind
    name: str
    reason: str     # why it is skipped, for the line

    @property
    def key(self) -> str:
        return f"{self.resource}/{self.namespace}/{self.name}" if self.namespace else f"{self.resource}/{self.name}"

    def line(self) -> str:
        return f"{self.key} skipped: {self.reason}"


class _Doc:
    """Field access with paths for error messages."""

    def __init__(self, where: str, req: Optional["_Request"] = None) -> None:
        self.where = where
        self.req = req if req is not None else _Request()

    def fail(self, path: str, reason: str) -> ManifestError:
        return ManifestError(self.where, path, reason)

    def obj(self, d: Any, path: str) -> dict:
        if d is None:
            return {}
        if not isinstance(d, dict):
            raise self.fail(path, f"expected an object, got {_kind(d)}")
        return d

    def lst(self, d: Any, path: str) -> list:
        if d is None:
            return []
        if not isinstance(d, list):
            raise self.fail(path, f"expected a list, got {_kind(d)}")
        return d

    def str_(self, d: Any, path: str, default: str = "") -> str:
        if d is None:
            return default
        if not isinstance(d, str):
            raise self.fail(path, f"expected a string, got {_kind(d)}")
        return d

    def int_(self, d: Any, path: str, default: Optional[int] = 0) -> Optional[int]:
        if d is None:
            return default
        if isinstance(d, bool) or not isinstance(d, int):
            if isinstance(d, float) and d.is_integer():
                return int(d)
            raise self.fail(path, f"expected an integer, got {_kind(d)} {d!r}")
        return d

    def bool_(self, d: Any, path: str, default: bool = False) -> bool:
        if d is None:
            return default
        if not isinstance(d, bool):
            raise self.fail(path, f"expected true or false, got {_kind(d)} {d!r}")
        return d

    def str_map(self, d: Any, path: str) -> dict[str, str]:
        out = {}
        for k, v in self.obj(d, path).items():
            if not isinstance(v, str):
                raise self.fail(f"{path}.{k}", f"expected a string value, got {_kind(v)} {v!r}")
            out[str(k)] = v
        return out

    def labels(self, d: Any, path: str) -> dict[str, str]:
        """A label map (metadata.labels, a nodeSelector, matchLabels), validated as ValidateLabels does."""
        labels = self.str_map(d, path)
        for k, v in labels.items():
            errs = qualified_name_errors(k)
            if errs:
                raise self.fail(path, _invalid(k, errs))
            errs = label_value_errors(v)
            if errs:
                raise self.fail(path, _invalid(v, errs))
        return labels

    def quantities(self, d: Any, path: str) -> ResourceList:
        out: ResourceList = {}
        for k, v in self.obj(d, path).items():
            try:
                q = parse_quantity(v)
            except (QuantityError, ValueError):  # ValueError: more digits than int() takes
                shown = _quote(v) if isinstance(v, str) else repr(v)
                raise self.fail(f"{path}.{k}", f"{shown} is not a quantity") from None
            if q < 0:
                raise self.fail(f"{path}.{k}", f"{json.dumps(v)} must be greater than or equal to 0")
            out[str(k)] = q
        return out

    def time(self, d: Any, path: str) -> Optional[float]:
        if d is None:
            return None
        if isinstance(d, _dt.datetime):  # YAML parses unquoted timestamps
            t = d if d.tzinfo else d.replace(tzinfo=_dt.timezone.utc)
            try:
                return t.timestamp()
            except (ValueError, OverflowError):
                raise self.fail(path, f"{d} is out of range") from None
        if not isinstance(d, str):
            raise self.fail(path, f"expected an RFC 3339 time, got {_kind(d)}")
        try:
            return _dt.datetime.fromisoformat(d.replace("Z", "+00:00")).timestamp()
        except (ValueError, OverflowError):
            raise self.fail(path, f"{d!r} is not an RFC 3339 time") from None


def _kind(v: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(v), type(v).__name__)


def object_uid(kind: str, namespace: str, name: str) -> str:
    """The uid an object read here gets when it names none: the same for the same kind and name."""
    return str(uuid.UUID(bytes=hashlib.sha1(f"{kind}/{namespace}/{name}".encode()).digest()[:16], version=5))


# ---------------------------------------------------------------------------------------------
# API-server validation of names, labels and annotations (apimachinery's util/validation), with
# its messages
# ---------------------------------------------------------------------------------------------

_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL_ERR = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
                      "and must start and end with an alphanumeric character")
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_ERR = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
                          "or '.', and must start and end with an alphanumeric character")
_QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QUALIFIED_NAME_ERR = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                       "alphanumeric character")
_LABEL_VALUE_FMT = "(" + _QUALIFIED_NAME_FMT + ")?"
_LABEL_VALUE_ERR = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                    "and must start and end with an alphanumeric character")
_DNS1123_LABEL_RE = re.compile(_DNS1123_LABEL_FMT, re.ASCII)
_DNS1123_SUBDOMAIN_RE = re.compile(_DNS1123_SUBDOMAIN_FMT, re.ASCII)
_QUALIFIED_NAME_RE = re.compile(_QUALIFIED_NAME_FMT, re.ASCII)
DNS1123_LABEL_MAX_LENGTH = 63
DNS1123_SUBDOMAIN_MAX_LENGTH = 253
QUALIFIED_NAME_MAX_LENGTH = 63
LABEL_VALUE_MAX_LENGTH = 63


def _max_len_error(n: int) -> str:
    return f"must be no more than {n} characters"


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    # Byte for byte apimachinery's RegexError, double space before "or" included.
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    return msg + " (e.g. " + " or ".join(f"'{e}', " for e in examples) + f"regex used for validation is '{fmt}')"


def dns1123_label_errors(value: str) -> list[str]:
    if len(value) > DNS1123_LABEL_MAX_LENGTH:  # the regex is skipped: the length says enough
        return [_max_len_error(DNS1123_LABEL_MAX_LENGTH)]
    if _DNS1123_LABEL_RE.fullmatch(value):
        return []
    if _DNS1123_SUBDOMAIN_RE.fullmatch(value):
        return ["must not contain dots"]
    return [_regex_error(_DNS1123_LABEL_ERR, _DNS1123_LABEL_FMT, "my-name", "123-abc")]


def dns1123_subdomain_errors(value: str) -> list[str]:
    if len(value) > DNS1123_SUBDOMAIN_MAX_LENGTH:
        return [_max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH)]
    if _DNS1123_SUBDOMAIN_RE.fullmatch(value):
        return []
    return [_regex_error(_DNS1123_SUBDOMAIN_ERR, _DNS1123_SUBDOMAIN_FMT, "example.com")]


def _qualified_name_regex_error() -> str:
    return _regex_error(_QUALIFIED_NAME_ERR, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")


def qualified_name_errors(value: str) -> list[str]:
    """IsQualifiedName: label keys and annotation keys, `[prefix/]name`."""
    errs = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += ["prefix part " + m for m in dns1123_subdomain_errors(prefix)]
    else:
        return ["a qualified name " + _qualified_name_regex_error()
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > QUALIFIED_NAME_MAX_LENGTH:
        errs.append("name part " + _max_len_error(QUALIFIED_NAME_MAX_LENGTH))
    elif not _QUALIFIED_NAME_RE.fullmatch(name):
        errs.append("name part " + _qualified_name_regex_error())
    return errs


def label_value_errors(value: str) -> list[str]:
    if len(value) > LABEL_VALUE_MAX_LENGTH:
        return [_max_len_error(LABEL_VALUE_MAX_LENGTH)]
    if not value or _QUALIFIED_NAME_RE.fullmatch(value):
        return []
    return [_regex_error(_LABEL_VALUE_ERR, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345")]


def _quote(value: Any) -> str:
    """A value as field.Invalid prints it; long strings are cut (an error message is no place for 8 MiB)."""
    if isinstance(value, str):
        if len(value) > 128:
            return json.dumps(value[:128], ensure_ascii=False)[:-1] + f'..." ({len(value)} characters)'
        if value.isascii() and value.isprintable() and '"' not in value and "\\" not in value:
            return f'"{value}"'  # what json.dumps writes for it (every List item's place quotes two)
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _invalid(value: Any, errors: list[str]) -> str:
    return f"Invalid value: {_quote(value)}: {'; '.join(errors)}"


def _mask_trailing_dash(name: str) -> str:
    # A generateName prefix may end with '-': the random suffix follows it.
    return name[:-1] + "a" if len(name) > 1 and name.endswith("-") else name


def path_segment_errors(value: str) -> list[str]:
    """IsValidPathSegmentName, which every object name meets (it is a segment of the object's URL),
    and at most 253 characters."""
    if value in (".", ".."):
        return [f"may not be '{value}'"]
    errs = [f"may not contain '{c}'" for c in ("/", "%") if c in value]
    if len(value) > DNS1123_SUBDOMAIN_MAX_LENGTH:
        errs.append(_max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH))
    return errs


def _name_errors_for(kind: str, strict: bool) -> Callable[[str], list[str]]:
    """Strictly as the API server: ValidateNamespaceName is a DNS label; Pods, Nodes,
    PriorityClasses, RuntimeClasses, PDBs and the workloads (apps/v1, ReplicationControllers,
    Jobs) are DNS subdomains.
    Otherwise any name that can be a URL path segment (see load_text's strict_names)."""
    if not strict:
        return path_segment_errors
    return dns1123_label_errors if kind == "Namespace" else dns1123_subdomain_errors


def api_server_name_warnings(m: "Manifests") -> list[str]:
    """What a Kubernetes API server would refuse among names accepted leniently: one line per
    object, naming it and the rule (kubectl shows the server's warnings this way)."""
    out = []
    named = [("namespace", "Namespace", n.name) for n in m.namespaces]
    named += [("priorityclass", "PriorityClass", c.name) for c in m.priority_classes]
    named += [("runtimeclass", "RuntimeClass", c.name) for c in m.runtime_classes]
    named += [("node", "Node", n.name) for n in m.nodes]
    named += [("poddisruptionbudget", "PodDisruptionBudget", f"{p.namespace}/{p.name}") for p in m.pdbs]
    named += [("daemonset.apps", "DaemonSet", d.key) for d in m.daemon_sets]
    named += [("pod", "Pod", p.key) for p in m.pods]
    for resource, kind, key in named:
        name = key.rsplit("/", 1)[-1]
        errs = _name_errors_for(kind, True)(name)
        if errs:
            out.append(f"{resource}/{key}: metadata.name: Invalid value: {_quote(name)}: {'; '.join(errs)} "
                       "(a Kubernetes API server refuses it; accepted here, --strict-names refuses it)")
    return out


# ---------------------------------------------------------------------------------------------
# Reading YAML and JSON within the limits
# ---------------------------------------------------------------------------------------------

class _Refused(Exception):
    """A limit crossed while reading a document; becomes a ManifestError naming the document."""

    def __init__(self, path: str, reason: str, whole_source: bool = False) -> None:
        super().__init__(reason)
        self.path, self.reason, self.whole_source = path, reason, whole_source


def _render_path(segments: Iterable[Any]) -> str:
    """A field path for a message: long keys cut, the middle of a very deep path elided."""
    parts = []
    for s in segments:
        if isinstance(s, int) and not isinstance(s, bool):
            parts.append(f"[{s}]")
        else:
            s = str(s)
            parts.append("." + (s if len(s) <= 40 else s[:40] + "..."))
    if len(parts) > 16:
        parts = parts[:8] + [f".<{len(parts) - 12} more>"] + parts[-4:]
    return "".join(parts).lstrip(".")


def _too_many_nodes(document_nodes: int) -> str:
    if document_nodes > MAX_EXPANDED_NODES:
        return f"expands to more than {MAX_EXPANDED_NODES} nodes (YAML aliases)"
    return f"the request expands to more than {MAX_EXPANDED_NODES} nodes in all (YAML aliases included)"


_LoaderBase: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when present


class _BoundedLoader(_LoaderBase):  # type: ignore[misc, valid-type]
    """yaml.SafeLoader with its own composer. Every node is counted as it will be once aliases
    are expanded (an alias adds the full size of the node it names, known from when that node was
    composed) and every nesting level is measured, so an alias bomb, a recursive alias or a
    too-deep document is refused while composing, before anything is constructed from it.
    The composer recurses once per nesting level, so MAX_DEPTH bounds its recursion too."""

    def __init__(self, stream: str, budget: int) -> None:
        super().__init__(stream)
        self.anchors: dict[str, _YAMLNode] = {}
        self.budget = budget       # nodes this source may still expand to
        self.expanded = 0          # nodes expanded so far in this source
        self.document_start = 0    # `expanded` when the current document began
        self.path: list[Any] = []  # where the composer is, for messages

    def construct_object(self, node: _YAMLNode, deep: bool = False) -> Any:
        # A constructor's own checks (2001-02-30, an integer of 5000 digits) raise ValueError
        # without a place; say where.
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError) as e:
            shown = f" {_quote(node.value)}" if isinstance(node, ScalarNode) else ""
            raise yaml.constructor.ConstructorError(None, None, f"cannot read{shown}: {str(e).split(';')[0]}",
                                                    node.start_mark) from None

    def composed_documents(self) -> Iterator[_YAMLNode]:
        self.get_event()  # StreamStartEvent
        documents = 0
        while not self.check_event(StreamEndEvent):
            documents += 1
            if documents > MAX_DOCUMENTS:
                raise _Refused("", f"has more than {MAX_DOCUMENTS} YAML documents", whole_source=True)
            self.get_event()  # DocumentStartEvent
            self.document_start = self.expanded
            node = self._compose(0)
            self.get_event()  # DocumentEndEvent
            self.anchors = {}
            yield node
        self.get_event()

    def _count(self, n: int) -> None:
        self.expanded += n
        if self.expanded > self.budget:
            in_document = self.expanded - self.document_start
            # Where the document itself blows up is worth naming; where a request ran out is not.
            path = _render_path(self.path) if in_document > MAX_EXPANDED_NODES else ""
            raise _Refused(path, _too_many_nodes(in_document))

    def _compose(self, depth: int) -> _YAMLNode:
        """One node at `depth` enclosing collections; sets node.expanded_size / expanded_height."""
        event = self.peek_event()
        kind = type(event)
        if kind is AliasEvent:
            self.get_event()
            node = self.anchors.get(event.anchor)
            if node is None:
                raise yaml.composer.ComposerError(None, None, f"found undefined alias {event.anchor!r}",
                                                  event.start_mark)
            size = getattr(node, "expanded_size", None)
            if size is None:  # still being composed: the alias is inside the node it names
                raise _Refused(_render_path(self.path), f"the YAML alias *{event.anchor} refers to a node "
                                                        "that contains it (a recursive structure)")
            if depth + node.expanded_height > MAX_DEPTH:
                raise _Refused(_render_path(self.path),
                               f"nests more than {MAX_DEPTH} levels deep once YAML aliases are expanded")
            self._count(size)
            return node
        anchor = event.anchor
        if anchor is not None and anchor in self.anchors:
            first = self.anchors[anchor].start_mark
            raise yaml.composer.ComposerError(None, None, f"found duplicate anchor {anchor!r} (first at line "
                                                          f"{first.line + 1})", event.start_mark)
        start = self.expanded
        self._count(1)
        height = 0
        if kind is ScalarEvent:
            self.get_event()
            tag = event.tag
            if tag is None or tag == "!":
                tag = self.resolve(ScalarNode, event.value, event.implicit)
            node: _YAMLNode = ScalarNode(tag, event.value, event.start_mark, event.end_mark, style=event.style)
            if anchor is not None:
                self.anchors[anchor] = node
        else:
            if depth >= MAX_DEPTH:
                raise _Refused(_render_path(self.path), f"nests more than {MAX_DEPTH} levels deep")
            self.get_event()
            mapping = kind is MappingStartEvent
            cls = MappingNode if mapping else SequenceNode
            tag = event.tag
            if tag is None or tag == "!":
                tag = self.resolve(cls, None, event.implicit)
            node = cls(tag, [], event.start_mark, None, flow_style=event.flow_style)
            if anchor is not None:
                self.anchors[anchor] = node
            path, items = self.path, node.value
            if mapping:
                while not self.check_event(MappingEndEvent):
                    key = self._compose(depth + 1)
                    path.append(key.value if isinstance(key, ScalarNode) else "?")
                    value = self._compose(depth + 1)
                    path.pop()
                    items.append((key, value))
                    height = max(height, key.expanded_height, value.expanded_height)
            else:
                while not self.check_event(SequenceEndEvent):
                    path.append(len(items))
                    item = self._compose(depth + 1)
                    path.pop()
                    items.append(item)
                    height = max(height, item.expanded_height)
            node.end_mark = self.get_event().end_mark
            height += 1
        node.expanded_size = self.expanded - start
        node.expanded_height = height
        return node


def _json_nodes(value: Any, budget: int) -> int:
    """Nodes in decoded JSON (keys count, as in YAML), refusing past `budget` or MAX_DEPTH.
    Also measures constructed YAML, whose aliases are shared objects counted at each use."""
    count = 1
    stack: list[tuple[Any, int, Any]] = [(value, 1, None)] if isinstance(value, (dict, list)) else []
    while stack:
        obj, depth, link = stack.pop()
        if depth > MAX_DEPTH:
            segments = []
            while link is not None:
                link, seg = link
                segments.append(seg)
            raise _Refused(_render_path(reversed(segments)), f"nests more than {MAX_DEPTH} levels deep")
        if isinstance(obj, dict):
            count += 2 * len(obj)
            children = obj.items()
        else:
            count += len(obj)
            children = enumerate(obj)
        if count > budget:
            raise _Refused("", _too_many_nodes(count))  # JSON has no aliases: the size is the text's
        for k, v in children:
            if isinstance(v, (dict, list)):
                stack.append((v, depth + 1, (link, k)))
    return count


def _decode(req: "_Request", text: str, source: str) -> list[Any]:
    """The non-empty documents of one source, within every limit."""
    size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_MANIFEST_BYTES:
        raise ManifestError(source, "", f"is {size} bytes; at most {MAX_MANIFEST_BYTES} bytes are read")
    budget = MAX_EXPANDED_NODES - req.expanded
    if text.lstrip()[:1] in ("{", "["):  # JSON: the C parser is ~100x faster than PyYAML
        try:
            data = json.loads(text)
        except RecursionError:
            raise ManifestError(source, "", f"nests more than {MAX_DEPTH} levels deep") from None
        except ValueError:
            pass  # not JSON after all (a YAML flow collection, or an error YAML words better)
        else:
            try:
                nodes = _json_nodes(data, budget)
            except _Refused as e:
                raise ManifestError(source, e.path, e.reason) from None
            req.expanded += nodes
            return [data]
    loader: Optional[_BoundedLoader] = None
    docs: list[Any] = []
    try:
        loader = _BoundedLoader(text, budget)
        for node in loader.composed_documents():
            data = loader.construct_document(node)
            if data is not None:
                docs.append(data)
    except _Refused as e:
        raise ManifestError(source if e.whole_source else f"{source}: document {len(docs) + 1}",
                            e.path, e.reason) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
        raise ManifestError(source, "", f"not valid YAML or JSON at {at}: {getattr(e, 'problem', None) or e}") from None
    except UnicodeError as e:
        raise ManifestError(source, "", f"is not valid UTF-8 text: {e.reason}") from None
    except RecursionError:  # a net: merge keys (<<) chained through many anchors
        raise ManifestError(f"{source}: document {len(docs) + 1}", "", "nests too deeply (YAML merge keys)") from None
    except (ValueError, OverflowError) as e:  # a net: construct_object words these with their place
        raise ManifestError(f"{source}: document {len(docs) + 1}", "", f"has a value that cannot be read: {e}") from None
    finally:
        if loader is not None:
            loader.dispose()
    req.expanded += loader.expanded
    return docs


_ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"  # utilrand's alphabet: no vowels, no look-alikes
_MAX_GENERATED_BASE = 63 - 5                 # SimpleNameGenerator: base cut so base + 5 fits a label


def _safe_encode(s: str) -> str:
    """utilrand.SafeEncodeString: each character mapped into the alphabet above."""
    return "".join(_ALPHANUMS[ord(c) % len(_ALPHANUMS)] for c in s)


class _Request:
    """What one request's documents share: the node and object budgets, the objects defined so
    far (duplicates are refused naming both documents) and the pod names generated names avoid."""

    def __init__(self, strict_names: bool = False) -> None:
        self.strict_names = strict_names
        self.expanded = 0
        self.template_copy_nodes = 0
        self.objects = 0
        self.defined: dict[tuple[str, str, str], str] = {}  # (kind, namespace, name) -> where
        self.reserved_pods: set[tuple[str, str]] = set()      # (namespace, name) of explicit Pods

    def define(self, doc: "_Doc", kind: str, namespace: str, name: str, where: Optional[str] = None,
               made_here: str = "") -> None:
        """Records an object; `where` describes this definition for a later duplicate's message,
        `made_here` says how this document makes the object when it is not the document itself."""
        key = (kind, namespace, name)
        first = self.defined.get(key)
        if first is not None:
            what = f"{kind} {namespace + '/' if namespace else ''}{name}{made_here}"
            raise doc.fail("metadata.name", f"Duplicate value: {_quote(name)}: {what} is also defined by {first}")
        self.defined[key] = where or doc.where

    def pod_name_taken(self, namespace: str, name: str) -> bool:
        return ("Pod", namespace, name) in self.defined or (namespace, name) in self.reserved_pods

    def add_objects(self, doc: "_Doc", n: int, path: str = "") -> None:
        self.objects += n
        if self.objects > MAX_OBJECTS:
            raise doc.fail(path, f"the request has more than {MAX_OBJECTS} objects "
                                 "(List items and the pods of workloads included)")

    def copy_template(self, doc: "_Doc", replicas: int, template_nodes: int, path: str = "spec.replicas") -> None:
        """Every replica parses its own copy of the pod template: bound what that costs. `path`:
        the field that sets how many replicas there are."""
        self.template_copy_nodes += replicas * template_nodes
        if self.template_copy_nodes > MAX_TEMPLATE_COPY_NODES:
            raise doc.fail(path, f"Invalid value: {replicas}: {replicas} copies of a {template_nodes}-node "
                                 f"pod template take the request past {MAX_TEMPLATE_COPY_NODES} "
                                 "pod-template nodes")

    def generate_name(self, doc: "_Doc", kind: str, namespace: str, base: str,
                      draw: Callable[[], str]) -> str:
        """names.SimpleNameGenerator: base cut to 58 characters + 5 drawn ones, drawn again while
        the name is taken in this request (the API server retries a taken generated name too)."""
        base = base[:_MAX_GENERATED_BASE]
        for _ in range(100):
            name = base + draw()
            if kind != "Pod" or not self.pod_name_taken(namespace, name):
                if (kind, namespace, name) not in self.defined:
                    return name
        raise doc.fail("metadata.generateName", f"no free name starting with {_quote(base)} after 100 tries")


def _random_suffix() -> str:
    return "".join(secrets.choice(_ALPHANUMS) for _ in range(5))


# ---------------------------------------------------------------------------------------------
# metadata, selectors, affinity
# ---------------------------------------------------------------------------------------------

def _meta(doc: _Doc, d: Any, kind: str, namespaced: bool) -> ObjectMeta:
    """ObjectMeta, validated as ValidateObjectMeta does (name, generateName, namespace, labels,
    annotations); a generateName becomes a name as the API server generates it."""
    m = doc.obj(d, "metadata")
    name_errors = _name_errors_for(kind, doc.req.strict_names)
    ns = doc.str_(m.get("namespace"), "metadata.namespace", DEFAULT_NAMESPACE) if namespaced else ""
    if namespaced:
        ns = ns or DEFAULT_NAMESPACE
        errs = _name_errors_for("Namespace", doc.req.strict_names)(ns)
        if errs:
            raise doc.fail("metadata.namespace", _invalid(ns, errs))
    generate = doc.str_(m.get("generateName"), "metadata.generateName")
    if generate:
        errs = name_errors(_mask_trailing_dash(generate))
        if errs:
            raise doc.fail("metadata.generateName", _invalid(generate, errs))
    name = doc.str_(m.get("name"), "metadata.name")
    if not name:
        if not generate:
            raise doc.fail("metadata.name", "Required value: name or generateName is required")
        name = doc.req.generate_name(doc, kind, ns, generate, _random_suffix)
    errs = name_errors(name)
    if errs:
        raise doc.fail("metadata.name", _invalid(name, errs))
    annotations = doc.str_map(m.get("annotations"), "metadata.annotations")
    total = 0
    for k, v in annotations.items():
        errs = qualified_name_errors(k.lower())
        if errs:
            raise doc.fail("metadata.annotations", _invalid(k, errs))
        total += len(k.encode("utf-8", "surrogatepass")) + len(v.encode("utf-8", "surrogatepass"))
    if total > MAX_ANNOTATIONS_BYTES:
        raise doc.fail("metadata.annotations", f"Too long: may not be more than {MAX_ANNOTATIONS_BYTES} bytes")
    owners = []
    for i, o in enumerate(doc.lst(m.get("ownerReferences"), "metadata.ownerReferences")):
        p = f"metadata.ownerReferences[{i}]"
        o = doc.obj(o, p)
        owners.append(OwnerReference(kind=doc.str_(o.get("kind"), f"{p}.kind"),
                                     name=doc.str_(o.get("name"), f"{p}.name"),
                                     uid=doc.str_(o.get("uid"), f"{p}.uid"),
                                     api_version=doc.str_(o.get("apiVersion"), f"{p}.apiVersion"),
                                     controller=doc.bool_(o.get("controller"), f"{p}.controller")))
    return ObjectMeta(
        name=name, namespace=ns,
        uid=doc.str_(m.get("uid"), "metadata.uid") or object_uid(kind, ns, name),
        labels=doc.labels(m.get("labels"), "metadata.labels"),
        annotations=annotations,
        creation_timestamp=doc.time(m.get("creationTimestamp"), "metadata.creationTimestamp"),
        deletion_timestamp=doc.time(m.get("deletionTimestamp"), "metadata.deletionTimestamp"),
        owner_references=owners,
        resource_version=str(m.get("resourceVersion") or ""),
    )


def parse_label_selector(doc: _Doc, d: Any, path: str) -> Optional[LabelSelector]:
    if d is None:
        return None
    d = doc.obj(d, path)
    reqs = []
    for i, e in enumerate(doc.lst(d.get("matchExpressions"), f"{path}.matchExpressions")):
        p = f"{path}.matchExpressions[{i}]"
        e = doc.obj(e, p)
        op = doc.str_(e.get("operator"), f"{p}.operator")
        if op not in LABEL_SELECTOR_OPERATORS:
            raise doc.fail(f"{p}.operator", f"{op!r} is not a valid label selector operator "
                                            f"(one of {', '.join(LABEL_SELECTOR_OPERATORS)})")
        values = tuple(doc.str_(v, f"{p}.values[{j}]") for j, v in enumerate(doc.lst(e.get("values"), f"{p}.values")))
        if op in (IN, NOT_IN) and not values:
            raise doc.fail(f"{p}.values", f"must be specified when operator is {op}")
        if op not in (IN, NOT_IN) and values:
            raise doc.fail(f"{p}.values", f"may not be specified when operator is {op}")
        key = doc.str_(e.get("key"), f"{p}.key")
        if not key:
            raise doc.fail(f"{p}.key", "is required")
        errs = qualified_name_errors(key)
        if errs:
            raise doc.fail(f"{p}.key", _invalid(key, errs))
        for j, v in enumerate(values):
            errs = label_value_errors(v)
            if errs:
                raise doc.fail(f"{p}.values[{j}]", _invalid(v, errs))
        reqs.append(LabelSelectorRequirement(key, op, values))
    return LabelSelector.of(doc.labels(d.get("matchLabels"), f"{path}.matchLabels"), reqs)


_NODE_SELECTOR_OPS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def _node_selector_reqs(doc: _Doc, d: Any, path: str, fields: bool) -> list[NodeSelectorRequirement]:
    out = []
    for i, e in enumerate(doc.lst(d, path)):
        p = f"{path}[{i}]"
        e = doc.obj(e, p)
        op = doc.str_(e.get("operator"), f"{p}.operator")
        if op not in _NODE_SELECTOR_OPS:
            raise doc.fail(f"{p}.operator", f"{op!r} is not a valid node selector operator "
                                            f"(one of {', '.join(_NODE_SELECTOR_OPS)})")
        values = [doc.str_(v, f"{p}.values[{j}]") for j, v in enumerate(doc.lst(e.get("values"), f"{p}.values"))]
        if op in ("Gt", "Lt"):
            if len(values) != 1:
                raise doc.fail(f"{p}.values", f"must be a single element for operator {op}")
        key = doc.str_(e.get("key"), f"{p}.key")
        if fields and key != "metadata.name":
            raise doc.fail(f"{p}.key", f"{key!r} is not a supported field selector (only metadata.name)")
        out.append(NodeSelectorRequirement(key, op, values))
    return out


def _node_selector_term(doc: _Doc, d: Any, path: str) -> NodeSelectorTerm:
    d = doc.obj(d, path)
    return NodeSelectorTerm(
        match_expressions=_node_selector_reqs(doc, d.get("matchExpressions"), f"{path}.matchExpressions", False),
        match_fields=_node_selector_reqs(doc, d.get("matchFields"), f"{path}.matchFields", True))


def parse_node_selector(doc: _Doc, d: Any, path: str) -> Optional[NodeSelector]:
    if d is None:
        return None
    d = doc.obj(d, path)
    return NodeSelector([_node_selector_term(doc, t, f"{path}.nodeSelectorTerms[{i}]")
                         for i, t in enumerate(doc.lst(d.get("nodeSelectorTerms"), f"{path}.nodeSelectorTerms"))])


def _pod_affinity_term(doc: _Doc, d: Any, path: str, pod_labels: dict[str, str]) -> PodAffinityTerm:
    d = doc.obj(d, path)
    tk = doc.str_(d.get("topologyKey"), f"{path}.topologyKey")
    if not tk:
        raise doc.fail(f"{path}.topologyKey", "can not be empty")
    sel = parse_label_selector(doc, d.get("labelSelector"), f"{path}.labelSelector")
    mlk = [doc.str_(v, f"{path}.matchLabelKeys[{i}]") for i, v in enumerate(doc.lst(d.get("matchLabelKeys"), f"{path}.matchLabelKeys"))]
    mmlk = [doc.str_(v, f"{path}.mismatchLabelKeys[{i}]") for i, v in enumerate(doc.lst(d.get("mismatchLabelKeys"), f"{path}.mismatchLabelKeys"))]
    # The API server merges matchLabelKeys / mismatchLabelKeys into the label selector at
    # creation (only for keys the pod has, and only when a labelSelector is set).
    if sel is not None and (mlk or mmlk):
        extra = [LabelSelectorRequirement(k, IN, (pod_labels[k],)) for k in mlk if k in pod_labels]
        extra += [LabelSelectorRequirement(k, NOT_IN, (pod_labels[k],)) for k in mmlk if k in pod_labels]
        sel = sel.with_requirements(extra)
    return PodAffinityTerm(
        topology_key=tk, label_selector=sel,
        namespaces=[doc.str_(v, f"{path}.namespaces[{i}]") for i, v in enumerate(doc.lst(d.get("namespaces"), f"{path}.namespaces"))],
        namespace_selector=parse_label_selector(doc, d.get("namespaceSelector"), f"{path}.namespaceSelector"),
        match_label_keys=mlk, mismatch_label_keys=mmlk)


def _pod_affinity(doc: _Doc, d: Any, path: str, pod_labels: dict[str, str]) -> Optional[PodAffinity]:
    if d is None:
        return None
    d = doc.obj(d, path)
    rp = f"{path}.requiredDuringSchedulingIgnoredDuringExecution"
    pp = f"{path}.preferredDuringSchedulingIgnoredDuringExecution"
    required = [_pod_affinity_term(doc, t, f"{rp}[{i}]", pod_labels) for i, t in enumerate(doc.lst(d.get(rp.rsplit('.', 1)[1]), rp))]
    preferred = []
    for i, w in enumerate(doc.lst(d.get(pp.rsplit('.', 1)[1]), pp)):
        w = doc.obj(w, f"{pp}[{i}]")
        weight = doc.int_(w.get("weight"), f"{pp}[{i}].weight")
        if not 1 <= weight <= 100:
            raise doc.fail(f"{pp}[{i}].weight", f"{weight} must be in the range 1-100")
        preferred.append(WeightedPodAffinityTerm(weight, _pod_affinity_term(doc, w.get("podAffinityTerm"), f"{pp}[{i}].podAffinityTerm", pod_labels)))
    return PodAffinity(required, preferred)


def _affinity(doc: _Doc, d: Any, path: str, pod_labels: dict[str, str]) -> Optional[Affinity]:
    if d is None:
        return None
    d = doc.obj(d, path)
    na = None
    if d.get("nodeAffinity") is not None:
        p = f"{path}.nodeAffinity"
        n = doc.obj(d["nodeAffinity"], p)
        preferred = []
        pp = f"{p}.preferredDuringSchedulingIgnoredDuringExecution"
        for i, w in enumerate(doc.lst(n.get("preferredDuringSchedulingIgnoredDuringExecution"), pp)):
            w = doc.obj(w, f"{pp}[{i}]")
            weight = doc.int_(w.get("weight"), f"{pp}[{i}].weight")
            if not 1 <= weight <= 100:
                raise doc.fail(f"{pp}[{i}].weight", f"{weight} must be in the range 1-100")
            preferred.append(PreferredSchedulingTerm(weight, _node_selector_term(doc, w.get("preference"), f"{pp}[{i}].preference")))
        na = NodeAffinity(parse_node_selector(doc, n.get("requiredDuringSchedulingIgnoredDuringExecution"),
                                              f"{p}.requiredDuringSchedulingIgnoredDuringExecution"), preferred)
    return Affinity(na, _pod_affinity(doc, d.get("podAffinity"), f"{path}.podAffinity", pod_labels),
                    _pod_affinity(doc, d.get("podAntiAffinity"), f"{path}.podAntiAffinity", pod_labels))


# ---------------------------------------------------------------------------------------------
# Pod
# ---------------------------------------------------------------------------------------------

def _bounded_list(doc: _Doc, d: Any, path: str, limit: int) -> list:
    items = doc.lst(d, path)
    if len(items) > limit:
        raise doc.fail(path, f"Too many: {len(items)}: must have at most {limit} items")
    return items


def _container(doc: _Doc, d: Any, path: str, init: bool) -> Container:
    d = doc.obj(d, path)
    res = doc.obj(d.get("resources"), f"{path}.resources")
    requests = doc.quantities(res.get("requests"), f"{path}.resources.requests")
    limits = doc.quantities(res.get("limits"), f"{path}.resources.limits")
    for k, v in limits.items():  # the API server defaults requests to limits
        requests.setdefault(k, v)
    for k, v in requests.items():
        if k in limits and v > limits[k]:
            raise doc.fail(f"{path}.resources.requests.{k}", f"must be less than or equal to {k} limit")
    ports = []
    for i, p in enumerate(_bounded_list(doc, d.get("ports"), f"{path}.ports", MAX_PORTS_PER_CONTAINER)):
        pp = f"{path}.ports[{i}]"
        p = doc.obj(p, pp)
        cport = doc.int_(p.get("containerPort"), f"{pp}.containerPort")
        if not cport:
            raise doc.fail(f"{pp}.containerPort", "Required value")
        if not 1 <= cport <= 65535:
            raise doc.fail(f"{pp}.containerPort", f"Invalid value: {cport}: must be between 1 and 65535, inclusive")
        hport = doc.int_(p.get("hostPort"), f"{pp}.hostPort")
        if not 0 <= hport <= 65535:
            raise doc.fail(f"{pp}.hostPort", f"{hport} must be between 0 and 65535")
        proto = doc.str_(p.get("protocol"), f"{pp}.protocol", "TCP")
        if proto not in ("TCP", "UDP", "SCTP"):
            raise doc.fail(f"{pp}.protocol", f"{proto!r} is not one of TCP, UDP, SCTP")
        ports.append(ContainerPort(cport, hport, proto, doc.str_(p.get("hostIP"), f"{pp}.hostIP"),
                                   doc.str_(p.get("name"), f"{pp}.name")))
    rp = doc.str_(d.get("restartPolicy"), f"{path}.restartPolicy") or None
    if rp is not None and (not init or rp != "Always"):
        raise doc.fail(f"{path}.restartPolicy", "only 'Always' is allowed, and only for init containers")
    return Container(name=doc.str_(d.get("name"), f"{path}.name"), image=doc.str_(d.get("image"), f"{path}.image"),
                     requests=requests, limits=limits, ports=ports, restart_policy=rp)


_EFFECTS = (NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE)


def _toleration(doc: _Doc, d: Any, path: str) -> Toleration:
    d = doc.obj(d, path)
    op = doc.str_(d.get("operator"), f"{path}.operator", "Equal") or "Equal"
    if op not in ("Equal", "Exists"):
        raise doc.fail(f"{path}.operator", f"{op!r} is not one of Equal, Exists")
    effect = doc.str_(d.get("effect"), f"{path}.effect")
    if effect and effect not in _EFFECTS:
        raise doc.fail(f"{path}.effect", f"{effect!r} is not one of {', '.join(_EFFECTS)}")
    value = doc.str_(d.get("value"), f"{path}.value")
    if op == "Exists" and value:
        raise doc.fail(f"{path}.value", "must be empty when operator is Exists")
    ts = d.get("tolerationSeconds")
    return Toleration(key=doc.str_(d.get("key"), f"{path}.key"), operator=op, value=value, effect=effect,
                      toleration_seconds=None if ts is None else doc.int_(ts, f"{path}.tolerationSeconds"))


def _spread(doc: _Doc, d: Any, path: str, pod_labels: dict[str, str]) -> TopologySpreadConstraint:
    d = doc.obj(d, path)
    max_skew = doc.int_(d.get("maxSkew"), f"{path}.maxSkew", None)
    if max_skew is None or max_skew < 1:
        raise doc.fail(f"{path}.maxSkew", "must be greater than zero")
    tk = doc.str_(d.get("topologyKey"), f"{path}.topologyKey")
    if not tk:
        raise doc.fail(f"{path}.topologyKey", "can not be empty")
    wu = doc.str_(d.get("whenUnsatisfiable"), f"{path}.whenUnsatisfiable")
    if wu not in ("DoNotSchedule", "ScheduleAnyway"):
        raise doc.fail(f"{path}.whenUnsatisfiable", f"{wu!r} is not one of DoNotSchedule, ScheduleAnyway")
    md = d.get("minDomains")
    if md is not None:
        md = doc.int_(md, f"{path}.minDomains")
        if md < 1:
            raise doc.fail(f"{path}.minDomains", "must be greater than zero")
        if wu != "DoNotSchedule":
            raise doc.fail(f"{path}.minDomains", "can only use minDomains if whenUnsatisfiable=DoNotSchedule")
    policies = {}
    for f in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
        v = doc.str_(d.get(f), f"{path}.{f}") or None
        if v is not None and v not in ("Honor", "Ignore"):
            raise doc.fail(f"{path}.{f}", f"{v!r} is not one of Honor, Ignore")
        policies[f] = v
    sel = parse_label_selector(doc, d.get("labelSelector"), f"{path}.labelSelector")
    mlk = [doc.str_(v, f"{path}.matchLabelKeys[{i}]") for i, v in enumerate(doc.lst(d.get("matchLabelKeys"), f"{path}.matchLabelKeys"))]
    return TopologySpreadConstraint(max_skew=max_skew, topology_key=tk, when_unsatisfiable=wu, label_selector=sel,
                                    min_domains=md, node_affinity_policy=policies["nodeAffinityPolicy"],
                                    node_taints_policy=policies["nodeTaintsPolicy"], match_label_keys=mlk)


def _aggregate_limits(pod: Pod) -> ResourceList:
    shadow = Pod(meta=pod.meta,
                 containers=[Container(c.name, requests=c.limits) for c in pod.containers],
                 init_containers=[Container(c.name, requests=c.limits, restart_policy=c.restart_policy)
                                  for c in pod.init_containers])
    return aggregate_container_requests(shadow)


def _default_pod_level_resources(pod: Pod) -> None:
    """defaultHugePagePodLimits + defaultPodRequests of the API server (PodLevelResources)."""
    if pod.resource_requests is None and pod.resource_limits is None:
        return
    reqs = dict(pod.resource_requests or {})
    lims = dict(pod.resource_limits or {})
    if reqs or lims:
        for k, v in _aggregate_limits(pod).items():
            if is_supported_pod_level_resource(k) and is_hugepage_resource_name(k) and k not in reqs:
                lims.setdefault(k, v)
    if lims:
        for k, v in aggregate_container_requests(pod).items():
            if k not in reqs and is_supported_pod_level_resource(k) and not is_hugepage_resource_name(k):
                reqs[k] = v
        for k, v in lims.items():
            if k not in reqs and is_supported_pod_level_resource(k):
                reqs[k] = v
    pod.resource_requests = reqs or pod.resource_requests
    pod.resource_limits = lims or pod.resource_limits


def _pod_container(doc: _Doc, d: Any, path: str, init: bool, ports: list[int]) -> Container:
    """One container of a pod; `ports[0]` counts the pod's ports, which MAX_PORTS_PER_POD bounds
    (containers then init containers, in order: the error names the container that crosses it)."""
    c = _container(doc, d, path, init)
    ports[0] += len(c.ports)
    if ports[0] > MAX_PORTS_PER_POD:
        raise doc.fail(f"{path}.ports", f"Too many: {ports[0]}: the pod's containers and init containers "
                                        f"must have at most {MAX_PORTS_PER_POD} ports in all")
    return c


#: Pods of one spec, status and labels parsed once (replicas in an Apply, a workload's expansion):
#: the JSON text of those three -> the parsed pod (its metadata aside). The parse and validation
#: of a pod read nothing else, and every parsed pod is first validated by a full parse.
_PARSED_PODS: dict[str, Pod] = {}
_PARSED_PODS_MAX = 256


def _parse_key(d: dict, labels: dict[str, str]) -> Optional[str]:
    """The memo key of a pod document; None when it holds values JSON cannot write (YAML's
    timestamps, binary, sets), which are parsed as usual."""
    try:
        return json.dumps((d.get("spec"), d.get("status"), labels), separators=(",", ":"))
    except (TypeError, ValueError):
        return None


def parse_pod(doc: _Doc, d: dict) -> Pod:
    meta = _meta(doc, d.get("metadata"), "Pod", True)
    key = _parse_key(d, meta.labels)
    known = _PARSED_PODS.get(key) if key is not None else None
    if known is not None:
        # The spec objects are shared by these pods: nothing edits a pod's spec in place (admission
        # and the cluster caches replace fields, as convert.pod_from_proto's replicas rely on too).
        return evolve(known, meta=meta)
    pod = _parse_pod_body(doc, d, meta)
    if key is not None:
        if len(_PARSED_PODS) >= _PARSED_PODS_MAX:
            _PARSED_PODS.clear()
        _PARSED_PODS[key] = evolve(pod)  # a copy: a field set on `pod` later stays out of the memo
    return pod


def _parse_pod_body(doc: _Doc, d: dict, meta: ObjectMeta) -> Pod:
    spec = doc.obj(d.get("spec"), "spec")
    status = doc.obj(d.get("status"), "status")
    ports = [0]  # of the pod so far: at most MAX_PORTS_PER_POD + MAX_PORTS_PER_CONTAINER are ever read
    containers = [_pod_container(doc, c, f"spec.containers[{i}]", False, ports)
                  for i, c in enumerate(_bounded_list(doc, spec.get("containers"), "spec.containers", MAX_CONTAINERS))]
    if not containers:
        raise doc.fail("spec.containers", "must have at least one container")
    init = [_pod_container(doc, c, f"spec.initContainers[{i}]", True, ports)
            for i, c in enumerate(_bounded_list(doc, spec.get("initContainers"), "spec.initContainers", MAX_CONTAINERS))]
    res = doc.obj(spec.get("resources"), "spec.resources")
    pod = Pod(
        meta=meta, containers=containers, init_containers=init,
        node_name=doc.str_(spec.get("nodeName"), "spec.nodeName"),
        node_selector=doc.labels(spec.get("nodeSelector"), "spec.nodeSelector"),
        affinity=_affinity(doc, spec.get("affinity"), "spec.affinity", meta.labels),
        tolerations=[_toleration(doc, t, f"spec.tolerations[{i}]") for i, t in enumerate(doc.lst(spec.get("tolerations"), "spec.tolerations"))],
        topology_spread_constraints=[_spread(doc, t, f"spec.topologySpreadConstraints[{i}]", meta.labels)
                                     for i, t in enumerate(doc.lst(spec.get("topologySpreadConstraints"), "spec.topologySpreadConstraints"))],
        scheduler_name=doc.str_(spec.get("schedulerName"), "spec.schedulerName") or "default-scheduler",
        priority_class_name=doc.str_(spec.get("priorityClassName"), "spec.priorityClassName"),
        priority=doc.int_(spec.get("priority"), "spec.priority", None),
        preemption_policy=doc.str_(spec.get("preemptionPolicy"), "spec.preemptionPolicy"),
        overhead=doc.quantities(spec.get("overhead"), "spec.overhead"),
        resource_requests=doc.quantities(res["requests"], "spec.resources.requests") if res.get("requests") else None,
        resource_limits=doc.quantities(res["limits"], "spec.resources.limits") if res.get("limits") else None,
        scheduling_gates=[doc.str_(doc.obj(g, f"spec.schedulingGates[{i}]").get("name"), f"spec.schedulingGates[{i}].name")
                          for i, g in enumerate(doc.lst(spec.get("schedulingGates"), "spec.schedulingGates"))],
        termination_grace_period_seconds=doc.int_(spec.get("terminationGracePeriodSeconds"), "spec.terminationGracePeriodSeconds", 30),
        runtime_class_name=doc.str_(spec.get("runtimeClassName"), "spec.runtimeClassName"),
        host_network=doc.bool_(spec.get("hostNetwork"), "spec.hostNetwork"),
        volumes=doc.lst(spec.get("volumes"), "spec.volumes"),
        phase=doc.str_(status.get("phase"), "status.phase", "Pending") or "Pending",
        nominated_node_name=doc.str_(status.get("nominatedNodeName"), "status.nominatedNodeName"),
        start_time=doc.time(status.get("startTime"), "status.startTime"),
        conditions=[PodCondition(type=str(c.get("type", "")), status=str(c.get("status", "")),
                                 reason=str(c.get("reason", "")), message=str(c.get("message", "")))
                    for c in doc.lst(status.get("conditions"), "status.conditions") if isinstance(c, dict)],
        status_reason=doc.str_(status.get("reason"), "status.reason"),
        status_message=doc.str_(status.get("message"), "status.message"),
    )
    if pod.preemption_policy and pod.preemption_policy not in (PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER):
        raise doc.fail("spec.preemptionPolicy", f"{pod.preemption_policy!r} is not one of PreemptLowerPriority, Never")
    if pod.host_network:  # the API server defaults hostPort to containerPort on the host network
        for c in pod.containers + pod.init_containers:
            for p in c.ports:
                if p.host_port == 0:
                    p.host_port = p.container_port
    _default_pod_level_resources(pod)
    return pod


# ---------------------------------------------------------------------------------------------
# Node, PriorityClass, RuntimeClass, PDB, Namespace
# ---------------------------------------------------------------------------------------------

def parse_node(doc: _Doc, d: dict) -> Node:
    meta = _meta(doc, d.get("metadata"), "Node", False)
    spec = doc.obj(d.get("spec"), "spec")
    status = doc.obj(d.get("status"), "status")
    taints = []
    for i, t in enumerate(doc.lst(spec.get("taints"), "spec.taints")):
        p = f"spec.taints[{i}]"
        t = doc.obj(t, p)
        effect = doc.str_(t.get("effect"), f"{p}.effect")
        if effect not in _EFFECTS:
            raise doc.fail(f"{p}.effect", f"{effect!r} is not one of {', '.join(_EFFECTS)}")
        key = doc.str_(t.get("key"), f"{p}.key")
        if not key:
            raise doc.fail(f"{p}.key", "is required")
        taints.append(Taint(key, effect, doc.str_(t.get("value"), f"{p}.value"), doc.time(t.get("timeAdded"), f"{p}.timeAdded")))
    capacity = doc.quantities(status.get("capacity"), "status.capacity")
    allocatable = doc.quantities(status.get("allocatable"), "status.allocatable") if "allocatable" in status else dict(capacity)
    images = []
    for i, im in enumerate(doc.lst(status.get("images"), "status.images")):
        im = doc.obj(im, f"status.images[{i}]")
        images.append(ContainerImage([doc.str_(n, f"status.images[{i}].names[{j}]") for j, n in enumerate(doc.lst(im.get("names"), f"status.images[{i}].names"))],
                                     doc.int_(im.get("sizeBytes"), f"status.images[{i}].sizeBytes")))
    conditions = [NodeCondition(type=str(c.get("type", "")), status=str(c.get("status", "")),
                                reason=str(c.get("reason", "")), message=str(c.get("message", "")))
                  for c in doc.lst(status.get("conditions"), "status.conditions") if isinstance(c, dict)]
    return Node(meta=meta, unschedulable=doc.bool_(spec.get("unschedulable"), "spec.unschedulable"), taints=taints,
                allocatable=allocatable, capacity=capacity, images=images, conditions=conditions)


def parse_priority_class(doc: _Doc, d: dict) -> PriorityClass:
    meta = _meta(doc, d.get("metadata"), "PriorityClass", False)
    if "value" not in d:
        raise doc.fail("value", "is required")
    value = doc.int_(d.get("value"), "value")
    if value > 1_000_000_000 and not meta.name.startswith("system-"):
        raise doc.fail("value", f"{value} must not be greater than 1000000000 (reserved for system classes)")
    pp = doc.str_(d.get("preemptionPolicy"), "preemptionPolicy") or PREEMPT_LOWER_PRIORITY
    if pp not in (PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER):
        raise doc.fail("preemptionPolicy", f"{pp!r} is not one of PreemptLowerPriority, Never")
    return PriorityClass(meta.name, value, doc.bool_(d.get("globalDefault"), "globalDefault"), pp,
                         doc.str_(d.get("description"), "description"))


def parse_runtime_class(doc: _Doc, d: dict) -> RuntimeClass:
    """node.k8s.io/v1 RuntimeClass, validated as kube's ValidateRuntimeClass."""
    meta = _meta(doc, d.get("metadata"), "RuntimeClass", False)
    handler = doc.str_(d.get("handler"), "handler")
    if not handler:
        raise doc.fail("handler", "Required value")
    errs = dns1123_label_errors(handler)
    if errs:
        raise doc.fail("handler", _invalid(handler, errs))
    overhead = None
    if d.get("overhead") is not None:
        overhead = doc.quantities(doc.obj(d.get("overhead"), "overhead").get("podFixed"), "overhead.podFixed")
    scheduling = None
    if d.get("scheduling") is not None:
        sc = doc.obj(d.get("scheduling"), "scheduling")
        tolerations: list[Toleration] = []
        for i, t in enumerate(doc.lst(sc.get("tolerations"), "scheduling.tolerations")):
            tol = _toleration(doc, t, f"scheduling.tolerations[{i}]")
            # Tolerations are a list map keyed by key, operator, value and effect in node/v1.
            if any((e.key, e.operator, e.value, e.effect) == (tol.key, tol.operator, tol.value, tol.effect)
                   for e in tolerations):
                raise doc.fail(f"scheduling.tolerations[{i}]", "Duplicate value: the same key, operator, value "
                                                               "and effect as an earlier toleration")
            tolerations.append(tol)
        scheduling = RuntimeClassScheduling(doc.labels(sc.get("nodeSelector"), "scheduling.nodeSelector"),
                                            tolerations)
    return RuntimeClass(meta.name, handler, overhead, scheduling)


def parse_service(doc: _Doc, d: dict) -> WorkloadSelector:
    """v1 Service: only its spec.selector, which PodTopologySpread's default constraints read
    (helper.DefaultSelector); a Service without one selects no pod. Ports, type and the rest
    mean nothing to scheduling and are not kept."""
    meta = _meta(doc, d.get("metadata"), "Service", True)
    spec = doc.obj(d.get("spec"), "spec")
    raw = spec.get("selector")
    selector = None if raw is None else LabelSelector.of(doc.labels(raw, "spec.selector"))
    return WorkloadSelector("Service", meta.namespace, meta.name, selector)


def parse_pdb(doc: _Doc, d: dict) -> PodDisruptionBudget:
    meta = _meta(doc, d.get("metadata"), "PodDisruptionBudget", True)
    spec = doc.obj(d.get("spec"), "spec")
    status = doc.obj(d.get("status"), "status")

    def int_or_percent(v: Any, path: str) -> Optional[str]:
        if v is None:
            return None
        if isinstance(v, int) and not isinstance(v, bool):
            return str(v)
        if isinstance(v, str) and v.endswith("%") and v[:-1].isdigit():
            return v
        raise doc.fail(path, f"{v!r} is not an integer or a percentage")

    return PodDisruptionBudget(meta=meta, selector=parse_label_selector(doc, spec.get("selector"), "spec.selector"),
                               min_available=int_or_percent(spec.get("minAvailable"), "spec.minAvailable"),
                               max_unavailable=int_or_percent(spec.get("maxUnavailable"), "spec.maxUnavailable"),
                               disruptions_allowed=doc.int_(status.get("disruptionsAllowed"), "status.disruptionsAllowed"),
                               disrupted_pods={str(k): doc.time(v, f"status.disruptedPods.{k}") or 0.0
                                               for k, v in doc.obj(status.get("disruptedPods"), "status.disruptedPods").items()},
                               status_given=status.get("disruptionsAllowed") is not None)


def parse_namespace(doc: _Doc, d: dict) -> Namespace:
    meta = _meta(doc, d.get("metadata"), "Namespace", False)
    labels = dict(meta.labels)
    labels["kubernetes.io/metadata.name"] = meta.name
    return Namespace(meta.name, labels)


def _canonical(d: Any, memo: Optional[dict[int, Any]] = None) -> Any:
    """JSON-able whatever YAML built (non-string keys, timestamps, sets); json.dumps sorts the keys.

    A YAML alias is one shared object wherever it is used: `memo` (by id of the built
    collection) converts each shared collection once and shares the result, so a template
    nested with aliases costs its distinct nodes here, not the up to MAX_EXPANDED_NODES nodes it
    expands to (json.dumps still writes the expanded text, in C). The ids stay valid: the input
    holds every collection alive for the whole call."""
    if isinstance(d, (dict, list, tuple)):
        if memo is None:
            memo = {}
        done = memo.get(id(d))
        if done is not None:
            return done
        if isinstance(d, dict):
            out: Any = {str(k): _canonical(v, memo) for k, v in d.items()}
        else:
            out = [_canonical(v, memo) for v in d]
        memo[id(d)] = out
        return out
    if d is None or isinstance(d, (str, int, float, bool)):
        return d
    return str(d)


def pod_template_hash(template: dict) -> str:
    """The pod-template-hash label a Deployment's ReplicaSet gets: like kube's ComputeHash, a 32-bit
    hash of the template written with SafeEncodeString. kube hashes the Go struct, so the value is
    not kube's, but it is as stable: the same template always gives the same hash."""
    text = json.dumps(_canonical(template, {}), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
    return _safe_encode(str(int.from_bytes(digest[:4], "big")))


def _pods_prefix(controller: str) -> str:
    """The ReplicaSet controller's getPodsPrefix: "<controller>-" when that is a valid name prefix."""
    prefix = controller + "-"
    return prefix if not dns1123_subdomain_errors(_mask_trailing_dash(prefix)) else controller


def pod_name_candidates(controller: str, seed: str) -> Iterator[str]:
    """The names a controller's pods are generated with, "<controller>-<5 characters>" (getPodsPrefix
    and SimpleNameGenerator), endlessly: drawn from kube's alphabet by a generator seeded with
    `seed`, so the same seed gives the same names in the same order. The caller skips taken ones."""
    return generated_names(_pods_prefix(controller), seed)


def generated_names(prefix: str, seed: str) -> Iterator[str]:
    """SimpleNameGenerator over a generateName `prefix` (cut to 58 characters), endlessly, drawn
    as pod_name_candidates draws them."""
    rng = random.Random(hashlib.sha256(seed.encode("utf-8", "surrogatepass")).digest())
    base = prefix[:_MAX_GENERATED_BASE]
    while True:
        yield base + "".join(rng.choice(_ALPHANUMS) for _ in range(5))


# Labels and the annotation kube's Job API and job controller give a Job's pods (batch/v1's
# JobNameLabel, ControllerUidLabel, their legacy unprefixed forms, JobCompletionIndexAnnotation).
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
JOB_CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
LEGACY_JOB_NAME_LABEL = "job-name"
LEGACY_JOB_CONTROLLER_UID_LABEL = "controller-uid"
JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
_MAX_INDEXED_JOB_PARALLELISM = 100_000  # batch validation's maxParallelismForIndexedJob


@dataclass
class _Replicas:
    """What a workload's controller makes its pods from, as read from the workload's spec."""

    count: int                         # the pods it creates at once
    count_path: str                    # the field that decides `count`, for messages
    template: dict                     # spec.template
    labels: dict[str, str]             # the pods' labels (the template's, and any its API server adds)
    owner_api_version: str             # of the pods' controller reference
    selector: Optional[LabelSelector]  # the workload's spec.selector, defaulted
    # helper.DefaultSelector reads this kind's selector (ReplicaSets, StatefulSets and
    # ReplicationControllers do, Jobs do not): only then is a WorkloadSelector kept for it.
    spreads_by_default: bool = True
    indexed: bool = False              # an Indexed Job: each pod carries its completion index
    replicas: Optional[int] = None     # the pods its controller keeps, when not `count` (a Job's parallelism)
    # a Job's: spec.completions, backoffLimit, suspend and podReplacementPolicy, defaulted
    completions: Optional[int] = None
    backoff_limit: int = DEFAULT_BACKOFF_LIMIT
    suspend: bool = False
    pod_replacement_policy: str = TERMINATING_OR_FAILED


def _nonnegative(doc: _Doc, d: Any, path: str, default: Optional[int]) -> Optional[int]:
    n = doc.int_(d, path, default)
    if n is not None and n < 0:
        raise doc.fail(path, f"Invalid value: {n}: must be greater than or equal to 0")
    return n


def _within_replica_limit(doc: _Doc, count: int, path: str) -> None:
    if count > MAX_REPLICAS:
        raise doc.fail(path, f"Invalid value: {count}: must be no more than {MAX_REPLICAS} "
                             "(the most pods one workload is expanded to)")


def _pod_template(doc: _Doc, spec: dict) -> tuple[dict, dict]:
    """spec.template and its metadata."""
    template = doc.obj(spec.get("template"), "spec.template")
    return template, doc.obj(template.get("metadata"), "spec.template.metadata")


def _selects_template(doc: _Doc, selector: Optional[LabelSelector], labels: dict[str, str]) -> None:
    if selector is not None and not selector.matches(labels):
        raise doc.fail("spec.template.metadata.labels", "`selector` does not match template `labels`")


def _template_restart_policy(doc: _Doc, template: dict) -> str:
    """spec.template.spec.restartPolicy as written ("" when unset: a pod's default, Always)."""
    tspec = doc.obj(template.get("spec"), "spec.template.spec")
    return doc.str_(tspec.get("restartPolicy"), "spec.template.spec.restartPolicy")


def _restarts_always(doc: _Doc, template: dict) -> None:
    """Controllers that keep their replicas running take only pods restarted Always (apps and
    core validation of a ReplicaSet's, a StatefulSet's, a ReplicationController's template)."""
    policy = _template_restart_policy(doc, template)
    if policy not in ("", "Always"):
        raise doc.fail("spec.template.spec.restartPolicy",
                       f'Unsupported value: {_quote(policy)}: supported values: "Always"')


def _apps_replicas(doc: _Doc, meta: ObjectMeta, spec: dict) -> _Replicas:
    """apps/v1 Deployment, ReplicaSet, StatefulSet: spec.replicas pods (default 1)."""
    replicas = _nonnegative(doc, spec.get("replicas"), "spec.replicas", 1)
    _within_replica_limit(doc, replicas, "spec.replicas")
    template, tmeta = _pod_template(doc, spec)
    selector = parse_label_selector(doc, spec.get("selector"), "spec.selector")
    labels = doc.labels(tmeta.get("labels"), "spec.template.metadata.labels")
    _selects_template(doc, selector, labels)
    _restarts_always(doc, template)
    return _Replicas(replicas, "spec.replicas", template, labels, "apps/v1", selector)


def _replication_controller_replicas(doc: _Doc, meta: ObjectMeta, spec: dict) -> _Replicas:
    """v1 ReplicationController: spec.replicas pods (default 1); its selector is a plain label
    map, and when absent or empty it is the template's labels (SetDefaults_ReplicationController)."""
    replicas = _nonnegative(doc, spec.get("replicas"), "spec.replicas", 1)
    _within_replica_limit(doc, replicas, "spec.replicas")
    if spec.get("template") is None:  # optional in the type, required by validation
        raise doc.fail("spec.template", "Required value")
    template, tmeta = _pod_template(doc, spec)
    labels = doc.labels(tmeta.get("labels"), "spec.template.metadata.labels")
    selector = doc.labels(spec.get("selector"), "spec.selector") or labels
    if not selector:
        raise doc.fail("spec.selector", "Required value")
    _selects_template(doc, LabelSelector.of(selector), labels)
    _restarts_always(doc, template)
    return _Replicas(replicas, "spec.replicas", template, labels, "v1", LabelSelector.of(selector))


def _job_generated_selector(doc: _Doc, meta: ObjectMeta, labels: dict[str, str],
                            selector: Optional[LabelSelector]) -> tuple[dict[str, str], LabelSelector]:
    """The Job API's generateSelector (manualSelector unset): the pod template gets the Job's
    name and uid as labels and the selector selects the uid. A template label set to another
    value, or a selector that would not select those labels, is refused as ValidateJob refuses it."""
    uid = object_uid("Job", meta.namespace, meta.name)
    generated = {LEGACY_JOB_NAME_LABEL: meta.name, JOB_NAME_LABEL: meta.name,
                 LEGACY_JOB_CONTROLLER_UID_LABEL: uid, JOB_CONTROLLER_UID_LABEL: uid}
    for key, value in generated.items():
        if labels.get(key, value) != value:
            raise doc.fail(f"spec.template.metadata.labels[{key}]",
                           f"Invalid value: {_quote(labels[key])}: must be '{value}'")
    match_labels = dict(selector.match_labels) if selector is not None else {}
    match_labels.setdefault(JOB_CONTROLLER_UID_LABEL, uid)
    selector = LabelSelector.of(match_labels, list(selector.match_expressions) if selector is not None else [])
    if not selector.matches(generated):
        raise doc.fail("spec.selector", f"Invalid value: {_quote(str(selector))}: `selector` not auto-generated")
    return {**labels, **generated}, selector


def _job_restart_policy(doc: _Doc, template: dict, spec: dict) -> None:
    """validateJobSpec: a Job's pods must end, so Always (and unset, which a pod defaults to
    Always) is refused."""
    path = "spec.template.spec.restartPolicy"
    policy = _template_restart_policy(doc, template)
    if policy in ("", "Always"):
        raise doc.fail(path, 'Required value: valid values: "OnFailure", "Never"')
    if policy not in ("OnFailure", "Never"):
        raise doc.fail(path, f'Unsupported value: {_quote(policy)}: supported values: "OnFailure", "Never"')
    if spec.get("podFailurePolicy") is not None and policy != "Never":
        raise doc.fail(path, f'Invalid value: {_quote(policy)}: only "Never" is supported when '
                             "podFailurePolicy is specified")


def _job_replicas(doc: _Doc, meta: ObjectMeta, spec: dict) -> _Replicas:
    """batch/v1 Job: the pods its controller creates for it at once (manageJob, no pod yet):
    parallelism of them (default 1), no more than spec.completions when that is set, none while
    it is suspended."""
    parallelism = _nonnegative(doc, spec.get("parallelism"), "spec.parallelism", None)
    completions = _nonnegative(doc, spec.get("completions"), "spec.completions", None)
    mode = doc.str_(spec.get("completionMode"), "spec.completionMode") or "NonIndexed"
    if mode not in ("NonIndexed", "Indexed"):
        raise doc.fail("spec.completionMode",
                       f'Unsupported value: {_quote(mode)}: supported values: "NonIndexed", "Indexed"')
    indexed = mode == "Indexed"
    if indexed:
        if completions is None:
            raise doc.fail("spec.completions", "Required value: when completion mode is Indexed")
        if parallelism is not None and parallelism > _MAX_INDEXED_JOB_PARALLELISM:
            raise doc.fail("spec.parallelism", f"Invalid value: {parallelism}: must be less than or equal to "
                                               f"{_MAX_INDEXED_JOB_PARALLELISM} when completion mode is Indexed")
        # ValidateJob: the last index's hostname must be a DNS label; a name check, so only
        # with strict names (load_text's strict_names)
        highest = f"{meta.name}-{completions - 1}"
        if doc.req.strict_names and completions > 0 and dns1123_label_errors(highest):
            raise doc.fail("metadata.name", f"Invalid value: {_quote(meta.name)}: will not able to create pod "
                                            f"with invalid DNS label: {highest}")
    if parallelism is None:  # batch/v1 defaulting
        parallelism = 1
    suspended = doc.bool_(spec.get("suspend"), "spec.suspend")
    count = 0 if suspended else parallelism if completions is None else min(parallelism, completions)
    count_path = "spec.completions" if completions is not None and completions < parallelism else "spec.parallelism"
    _within_replica_limit(doc, count, count_path)
    template, tmeta = _pod_template(doc, spec)
    selector = parse_label_selector(doc, spec.get("selector"), "spec.selector")
    labels = doc.labels(tmeta.get("labels"), "spec.template.metadata.labels")
    if doc.bool_(spec.get("manualSelector"), "spec.manualSelector"):
        if selector is None:
            raise doc.fail("spec.selector", "Required value")
    else:
        labels, selector = _job_generated_selector(doc, meta, labels, selector)
    _selects_template(doc, selector, labels)
    _job_restart_policy(doc, template, spec)
    backoff_limit = _nonnegative(doc, spec.get("backoffLimit"), "spec.backoffLimit", DEFAULT_BACKOFF_LIMIT)
    return _Replicas(count, count_path, template, labels, "batch/v1", selector, spreads_by_default=False,
                     indexed=indexed, replicas=parallelism, completions=completions, backoff_limit=backoff_limit,
                     suspend=suspended, pod_replacement_policy=_job_pod_replacement_policy(doc, spec))


def _job_pod_replacement_policy(doc: _Doc, spec: dict) -> str:
    """spec.podReplacementPolicy, defaulted as batch/v1 does (Failed with a podFailurePolicy, else
    TerminatingOrFailed) and validated as ValidateJob does."""
    path = "spec.podReplacementPolicy"
    with_failure_policy = spec.get("podFailurePolicy") is not None
    policy = doc.str_(spec.get(path.split(".")[1]), path)
    if not policy:
        return REPLACE_FAILED if with_failure_policy else TERMINATING_OR_FAILED
    supported = (REPLACE_FAILED,) if with_failure_policy else (REPLACE_FAILED, TERMINATING_OR_FAILED)
    if policy not in supported:
        raise doc.fail(path, f"Unsupported value: {_quote(policy)}: supported values: "
                             + ", ".join(f'"{v}"' for v in supported))
    return policy


def _pod_management_policy(doc: _Doc, spec: dict) -> str:
    """A StatefulSet's spec.podManagementPolicy, defaulted (OrderedReady) and validated."""
    path = "spec.podManagementPolicy"
    policy = doc.str_(spec.get("podManagementPolicy"), path) or ORDERED_READY
    if policy not in (ORDERED_READY, PARALLEL):
        raise doc.fail(path, f'Unsupported value: {_quote(policy)}: supported values: "{ORDERED_READY}", '
                             f'"{PARALLEL}"')
    return policy


def indexed_pods_prefix(job: str, index: int) -> str:
    """The job controller's podGenerateNameWithIndex: "<job>-<index>-", the Job's name cut so
    the index stays within a generated name's prefix."""
    suffix = f"-{index}-"
    if len(job) + len(suffix) > _MAX_GENERATED_BASE:
        job = job[:_MAX_GENERATED_BASE - len(suffix)]
    return job + suffix


_APPS_WORKLOAD_KINDS = ("Deployment", "ReplicaSet", "StatefulSet")
_REPLICA_READERS: dict[str, Callable[[_Doc, ObjectMeta, dict], _Replicas]] = {
    **{kind: _apps_replicas for kind in _APPS_WORKLOAD_KINDS},
    "ReplicationController": _replication_controller_replicas,
    "Job": _job_replicas,
}


def expand_workload(doc: _Doc, d: dict) -> tuple[list[Pod], WorkloadSelector]:
    """apps/v1 Deployment, ReplicaSet or StatefulSet, v1 ReplicationController or batch/v1 Job ->
    the pods its controller creates at once and their controller's record: its selector (a
    Deployment's ReplicaSet selects its pods by the Deployment's selector and their
    pod-template-hash, as kube's deployment controller makes it; PodTopologySpread never reads a
    Job's) and the WorkloadSpec its controller keeps the pods by (the template as these pods were
    made from it, the replicas, the kind's settings, these pods' names). Pods are named as their
    controllers name them: a Deployment's pods "<deployment>-<pod-template-hash>-<5 characters>"
    (its ReplicaSet is "<deployment>-<pod-template-hash>"), a ReplicaSet's, a
    ReplicationController's and a Job's "<name>-<5 characters>", an Indexed Job's
    "<job>-<index>-<5 characters>", a StatefulSet's "<statefulset>-<ordinal>". The 5 characters
    are drawn from kube's alphabet by a generator seeded with the workload and its template, so
    the same manifest expands to the same names, and drawn again when a name is taken in the
    request."""
    kind = d["kind"]
    meta = _meta(doc, d.get("metadata"), kind, True)
    ns, req = meta.namespace, doc.req
    req.define(doc, kind, ns, meta.name)
    spec = doc.obj(d.get("spec"), "spec")
    replicas = _REPLICA_READERS[kind](doc, meta, spec)
    pod_management_policy = _pod_management_policy(doc, spec) if kind == "StatefulSet" else ORDERED_READY
    template, count = replicas.template, replicas.count
    tmeta = doc.obj(template.get("metadata"), "spec.template.metadata")
    try:
        template_nodes = _json_nodes(template, MAX_EXPANDED_NODES)
    except _Refused as e:  # not expected: the document was measured when read
        raise doc.fail("spec.template", e.reason) from None
    req.copy_template(doc, count, template_nodes, replicas.count_path)
    req.add_objects(doc, count, replicas.count_path)
    template_hash = pod_template_hash(template)
    if kind == "Deployment":
        sel = replicas.selector
        owner_kind, owner = "ReplicaSet", f"{meta.name}-{template_hash}"
        req.define(doc, "ReplicaSet", ns, owner, f"{doc.where}, whose ReplicaSet it is",
                   made_here=", this Deployment's ReplicaSet,")
        labels = dict(replicas.labels, **{"pod-template-hash": template_hash})
        # labelsutil.CloneSelectorAndAddLabel: the hash joins the selector's matchLabels
        owner_selector: Optional[LabelSelector] = LabelSelector.of(
            {**(dict(sel.match_labels) if sel is not None else {}), "pod-template-hash": template_hash},
            list(sel.match_expressions) if sel is not None else [])
    else:
        owner_kind, owner, labels, owner_selector = kind, meta.name, replicas.labels, replicas.selector
    rng = random.Random(hashlib.sha256(f"{kind}/{ns}/{meta.name}/{template_hash}".encode()).digest())
    draw = lambda: "".join(rng.choice(_ALPHANUMS) for _ in range(5))  # noqa: E731
    prefix = _pods_prefix(owner)
    annotations = (doc.str_map(tmeta.get("annotations"), "spec.template.metadata.annotations")
                   if replicas.indexed else {})
    owner_ref = {"kind": owner_kind, "name": owner, "controller": True, "apiVersion": replicas.owner_api_version,
                 "uid": object_uid(owner_kind, ns, owner)}
    pods = []
    first: Optional[Pod] = None
    for i in range(max(count, 1)):  # with no pod to make the template is still validated
        pm = dict(tmeta)
        pod_labels = labels
        if kind == "StatefulSet":
            name = f"{meta.name}-{i}"
            errs = _name_errors_for("Pod", req.strict_names)(name)
            if errs:
                raise doc.fail("metadata.name",
                               f"the pod name {_quote(name)} made from it is invalid: {'; '.join(errs)}")
        elif replicas.indexed:
            name = req.generate_name(doc, "Pod", ns, indexed_pods_prefix(meta.name, i), draw)
            # the job controller's addCompletionIndexAnnotation and addCompletionIndexLabel
            pod_labels = {**labels, JOB_COMPLETION_INDEX: str(i)}
            pm["annotations"] = {**annotations, JOB_COMPLETION_INDEX: str(i)}
        else:
            name = req.generate_name(doc, "Pod", ns, prefix, draw)
        pm.update({"name": name, "namespace": ns, "labels": pod_labels, "ownerReferences": [owner_ref]})
        pm.pop("generateName", None)
        try:
            pod = parse_pod(_Doc(f"{doc.where} (replica {i})", req), {"metadata": pm, "spec": template.get("spec")})
        except ManifestError as e:
            raise doc.fail(f"spec.template.{e.path}" if e.path else "spec.template", e.reason) from None
        first = first or pod
        if count:
            req.define(doc, "Pod", ns, name, f"{doc.where}, which generates it",
                       made_here=f", which this {kind} generates,")
            pods.append(pod)
    assert first is not None
    # The replicas' template: a replica without its name, uid and completion index.
    template_meta = ObjectMeta(name=owner, namespace=ns, uid="", labels=dict(labels),
                               annotations=dict(annotations if replicas.indexed else first.meta.annotations),
                               owner_references=list(first.meta.owner_references))
    workload_spec = WorkloadSpec(
        template=evolve(first, meta=template_meta), template_hash=template_hash,
        replicas=count if replicas.replicas is None else replicas.replicas,
        deployment=meta.name if kind == "Deployment" else "", pod_management_policy=pod_management_policy,
        completions=replicas.completions, backoff_limit=replicas.backoff_limit,
        completion_mode=INDEXED if replicas.indexed else NON_INDEXED, suspend=replicas.suspend,
        pod_replacement_policy=replicas.pod_replacement_policy, created_pods=tuple(p.name for p in pods))
    return pods, WorkloadSelector(owner_kind, ns, owner, owner_selector, workload_spec)


# The API server's spec.templateGeneration, carried in apps/v1 by this annotation.
DAEMON_SET_TEMPLATE_GENERATION_ANNOTATION = "deprecated.daemonset.template.generation"
_PERCENT_RE = re.compile(r"[0-9]+%")


def _int_or_percent(doc: _Doc, v: Any, path: str) -> tuple[str, int]:
    """An IntOrString that must be a non-negative integer or a percentage (apps validation's
    ValidatePositiveIntOrPercent and IsNotMoreThan100Percent): the value as written, and the
    number it holds (a percentage's digits)."""
    if isinstance(v, int) and not isinstance(v, bool):
        if v < 0:
            raise doc.fail(path, f"Invalid value: {v}: must be greater than or equal to 0")
        return str(v), v
    if isinstance(v, str):
        if not _PERCENT_RE.fullmatch(v):
            raise doc.fail(path, f"Invalid value: {_quote(v)}: a valid percent string must be a numeric string "
                                 "followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is "
                                 "'[0-9]+%')")
        n = int(v[:-1])
        if n > 100:
            raise doc.fail(path, f"Invalid value: {_quote(v)}: must not be greater than 100%")
        return v, n
    raise doc.fail(path, f"expected an integer or a percentage string, got {_kind(v)}")


def _daemon_set_update_strategy(doc: _Doc, spec: dict) -> tuple[str, str]:
    """spec.updateStrategy, defaulted as apps/v1 defaults it (RollingUpdate, maxUnavailable 1,
    maxSurge 0) and validated as ValidateDaemonSetUpdateStrategy does: the strategy type and
    maxUnavailable as written. maxSurge is checked but not kept (surge is not modelled: a pod
    is replaced by deleting it first, maxUnavailable at a time)."""
    strategy = doc.obj(spec.get("updateStrategy"), "spec.updateStrategy")
    kind = doc.str_(strategy.get("type"), "spec.updateStrategy.type") or ROLLING_UPDATE
    if kind not in (ROLLING_UPDATE, ON_DELETE):
        raise doc.fail("spec.updateStrategy.type", f'Unsupported value: {_quote(kind)}: supported values: '
                                                   f'"{ON_DELETE}", "{ROLLING_UPDATE}"')
    rolling = doc.obj(strategy.get("rollingUpdate"), "spec.updateStrategy.rollingUpdate")
    if kind == ON_DELETE:
        return kind, "1"
    path = "spec.updateStrategy.rollingUpdate"
    surge = 0
    if rolling.get("maxSurge") is not None:
        surge = _int_or_percent(doc, rolling["maxSurge"], f"{path}.maxSurge")[1]
    max_unavailable, unavailable = ("1", 1) if rolling.get("maxUnavailable") is None else \
        _int_or_percent(doc, rolling["maxUnavailable"], f"{path}.maxUnavailable")
    if unavailable == 0 and surge == 0:
        raise doc.fail(f"{path}.maxUnavailable", f"Invalid value: {_quote(rolling.get('maxUnavailable'))}: "
                                                 "may not be 0 when `maxSurge` is 0")
    return kind, max_unavailable


def parse_daemon_set(doc: _Doc, d: dict) -> DaemonSet:
    """apps/v1 DaemonSet, validated as ValidateDaemonSetSpec validates it: a non-empty selector
    that selects the template's labels, a template whose pods restart Always and set no
    activeDeadlineSeconds, a valid update strategy. The template is read as a pod named after
    the DaemonSet; its pods are made from it by schedmesh.workloads.daemonset."""
    meta = _meta(doc, d.get("metadata"), "DaemonSet", True)
    doc.req.define(doc, "DaemonSet", meta.namespace, meta.name)
    spec = doc.obj(d.get("spec"), "spec")
    if spec.get("selector") is None:
        raise doc.fail("spec.selector", "Required value")
    selector = parse_label_selector(doc, spec["selector"], "spec.selector")
    if not selector.match_labels and not selector.match_expressions:
        raise doc.fail("spec.selector", "Invalid value: {}: empty selector is invalid for daemonset")
    template, tmeta = _pod_template(doc, spec)
    labels = doc.labels(tmeta.get("labels"), "spec.template.metadata.labels")
    _selects_template(doc, selector, labels)
    _restarts_always(doc, template)
    tspec = doc.obj(template.get("spec"), "spec.template.spec")
    if tspec.get("activeDeadlineSeconds") is not None:
        raise doc.fail("spec.template.spec.activeDeadlineSeconds",
                       f"Invalid value: {tspec['activeDeadlineSeconds']!r}: activeDeadlineSeconds in DaemonSet "
                       "is not Supported")
    _nonnegative(doc, spec.get("minReadySeconds"), "spec.minReadySeconds", 0)
    _nonnegative(doc, spec.get("revisionHistoryLimit"), "spec.revisionHistoryLimit", 10)
    strategy, max_unavailable = _daemon_set_update_strategy(doc, spec)
    generation = 1
    written = meta.annotations.get(DAEMON_SET_TEMPLATE_GENERATION_ANNOTATION)
    if written is not None:
        if not written.isdigit():
            raise doc.fail(f"metadata.annotations[{DAEMON_SET_TEMPLATE_GENERATION_ANNOTATION}]",
                           f"Invalid value: {_quote(written)}: must be a non-negative integer")
        generation = max(int(written), 1)  # PrepareForCreate: at least 1
    pm = dict(tmeta)
    pm.update({"name": meta.name, "namespace": meta.namespace, "labels": labels})
    pm.pop("generateName", None)
    try:
        template_pod = parse_pod(_Doc(f"{doc.where} (pod template)", doc.req),
                                 {"metadata": pm, "spec": template.get("spec")})
    except ManifestError as e:
        raise doc.fail(f"spec.template.{e.path}" if e.path else "spec.template", e.reason) from None
    template_pod = evolve(template_pod, meta=evolve(template_pod.meta, uid=""))  # a template, never a pod itself
    return DaemonSet(meta=meta, selector=selector, template=template_pod, template_hash=pod_template_hash(template),
                     template_generation=generation, update_strategy=strategy, max_unavailable=max_unavailable)


_LIMIT_RANGE_FIELDS = (("max", "max"), ("min", "min"), ("default", "default"), ("defaultRequest", "default_request"),
                       ("maxLimitRequestRatio", "max_limit_request_ratio"))


def parse_limit_range(doc: _Doc, d: dict) -> LimitRange:
    """v1 LimitRange, defaulted and validated as the API server stores it (limit_range.py)."""
    meta = _meta(doc, d.get("metadata"), "LimitRange", True)
    spec = doc.obj(d.get("spec"), "spec")
    items = []
    for i, raw in enumerate(doc.lst(spec.get("limits"), "spec.limits")):
        path = f"spec.limits[{i}]"
        raw = doc.obj(raw, path)
        maps = {}
        for field_name, attr in _LIMIT_RANGE_FIELDS:
            given = doc.obj(raw.get(field_name), f"{path}.{field_name}")
            for k in given:
                errs = qualified_name_errors(str(k))
                if errs:
                    raise doc.fail(f"{path}.{field_name}[{k}]", _invalid(k, errs))
            try:
                maps[attr] = canonical_quantities(given, f"{path}.{field_name}")
            except LimitRangeInvalid as e:
                raise doc.fail(e.path, e.reason) from None
        limit_type = doc.str_(raw.get("type"), f"{path}.type")
        if not limit_type:
            raise doc.fail(f"{path}.type", "Required value")
        items.append(default_item(LimitRangeItem(type=limit_type, **maps)))
    try:
        validate_limit_range(items)
    except LimitRangeInvalid as e:
        raise doc.fail(e.path, e.reason) from None
    return LimitRange(meta=meta, limits=tuple(items))


_PARSERS: dict[tuple[str, str], Callable[[_Doc, dict], Any]] = {
    ("v1", "Pod"): parse_pod,
    ("v1", "Node"): parse_node,
    ("v1", "Namespace"): parse_namespace,
    ("scheduling.k8s.io/v1", "PriorityClass"): parse_priority_class,
    ("node.k8s.io/v1", "RuntimeClass"): parse_runtime_class,
    ("policy/v1", "PodDisruptionBudget"): parse_pdb,
    ("v1", "Service"): parse_service,
    ("v1", "LimitRange"): parse_limit_range,
}
_WORKLOADS = {("apps/v1", k) for k in _APPS_WORKLOAD_KINDS} | {("v1", "ReplicationController"), ("batch/v1", "Job")}
_CONFIG = ("kubescheduler.config.k8s.io/v1", "KubeSchedulerConfiguration")
_DAEMON_SET = ("apps/v1", "DaemonSet")

_NOT_READ = "not used for scheduling"
# Kinds kube-scheduler never reads and that make no pod now: accepted, kept only as names
# (Manifests.skipped). (apiVersion, kind) -> (namespaced, why, for apply's line). A list, not
# "anything unknown": a kind not here may change scheduling, and is refused.
_SKIPPED: dict[tuple[str, str], tuple[bool, str]] = {
    ("v1", "ConfigMap"): (True, _NOT_READ),
    ("v1", "Secret"): (True, _NOT_READ),
    ("v1", "ServiceAccount"): (True, _NOT_READ),
    ("v1", "Endpoints"): (True, _NOT_READ),
    ("discovery.k8s.io/v1", "EndpointSlice"): (True, _NOT_READ),
    ("rbac.authorization.k8s.io/v1", "Role"): (True, _NOT_READ),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): (True, _NOT_READ),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): (False, _NOT_READ),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): (False, _NOT_READ),
    ("networking.k8s.io/v1", "Ingress"): (True, _NOT_READ),
    ("networking.k8s.io/v1", "IngressClass"): (False, _NOT_READ),
    ("networking.k8s.io/v1", "NetworkPolicy"): (True, _NOT_READ),
    ("autoscaling/v1", "HorizontalPodAutoscaler"): (True, f"{_NOT_READ} (it resizes its target later, from metrics)"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"): (True, f"{_NOT_READ} (it resizes its target later, from metrics)"),
    ("batch/v1", "CronJob"): (True, f"{_NOT_READ} (its pods appear only when its schedule fires)"),
}
# Kinds that change where pods go, or whether they are admitted, but are not modelled: refused
# with the reason, since skipping them would place pods where kube would not.
_NOT_MODELLED: dict[tuple[str, str], str] = {
    ("v1", "ResourceQuota"): "it refuses pods at admission once the namespace's quota is used up",
    ("v1", "PersistentVolumeClaim"): "a pod using a claim can only go where its volume binds, and volumes are "
                                     "not modelled",
    ("v1", "PersistentVolume"): "its node affinity decides where the pods using it can go, and volumes are "
                                "not modelled",
    ("storage.k8s.io/v1", "StorageClass"): "its binding mode and allowed topologies decide where pods with claims "
                                           "can go, and volumes are not modelled",
}


def parse_skipped(doc: _Doc, api: str, kind: str, d: dict) -> SkippedObject:
    """An object of a kind in _SKIPPED: only its name (and namespace) is read, and checked no
    more than any object's: a name that can be a URL path segment."""
    namespaced, reason = _SKIPPED[(api, kind)]
    m = doc.obj(d.get("metadata"), "metadata")
    name = doc.str_(m.get("name"), "metadata.name")
    if not name:
        raise doc.fail("metadata.name", "Required value: name is required")
    errs = path_segment_errors(name)
    if errs:
        raise doc.fail("metadata.name", _invalid(name, errs))
    ns = ""
    if namespaced:
        ns = doc.str_(m.get("namespace"), "metadata.namespace") or DEFAULT_NAMESPACE
        errs = _name_errors_for("Namespace", doc.req.strict_names)(ns)
        if errs:
            raise doc.fail("metadata.namespace", _invalid(ns, errs))
    doc.req.define(doc, kind, ns, name)
    group = api.rpartition("/")[0]  # kubectl names a kind with its group: role.rbac.authorization.k8s.io
    return SkippedObject(kind.lower() + (f".{group}" if group else ""), ns, name, reason)


def _kind_list(kinds: Iterable[tuple[str, str]]) -> str:
    return ", ".join(sorted(f"{a} {k}" for a, k in kinds))


def _describe(d: Any) -> str:
    """' (Kind name)' for a document's location, when it has both."""
    if not isinstance(d, dict):
        return ""
    kind, meta = d.get("kind"), d.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if isinstance(kind, str) and isinstance(name, str) and name:
        return f" ({_quote(kind)[1:-1]} {_quote(name)[1:-1]})"
    return ""


def _is_list(kind: str, d: dict) -> bool:
    return kind == "List" or (kind.endswith("List") and "items" in d)


def _reserve_pod_names(req: _Request, d: Any) -> None:
    """Names of the Pods written out in a document, so names generated for workloads avoid them
    wherever the Pod comes in the request."""
    if not isinstance(d, dict) or not isinstance(d.get("kind"), str):
        return
    if _is_list(d["kind"], d):
        items = d.get("items")
        for item in items if isinstance(items, list) else ():
            _reserve_pod_names(req, item)
    elif d["kind"] == "Pod" and isinstance(d.get("metadata"), dict):
        name, ns = d["metadata"].get("name"), d["metadata"].get("namespace")
        if isinstance(name, str) and name:
            req.reserved_pods.add((ns if isinstance(ns, str) and ns else DEFAULT_NAMESPACE, name))


def _add_object(req: _Request, out: Manifests, d: Any, where: str) -> None:
    doc = _Doc(where, req)
    if not isinstance(d, dict):
        raise doc.fail("", f"expected a Kubernetes object, got {_kind(d)}")
    kind = doc.str_(d.get("kind"), "kind")
    if not kind:
        raise doc.fail("kind", "is required")
    if _is_list(kind, d):
        for i, item in enumerate(doc.lst(d.get("items"), "items")):
            _add_object(req, out, item, f"{where}: items[{i}]" + _describe(item))
        return
    api = doc.str_(d.get("apiVersion"), "apiVersion")
    if not api:
        raise doc.fail("apiVersion", "is required")
    if (api, kind) == _CONFIG:
        out.scheduler_configs.append(d)
        return
    if (api, kind) in _WORKLOADS:
        pods, workload = expand_workload(doc, d)
        out.pods.extend(pods)
        out.pod_sources.update(((p.namespace, p.name), where) for p in pods)
        if workload is not None:
            out.workloads.append(workload)
        return
    if (api, kind) in _SKIPPED:
        req.add_objects(doc, 1)
        out.skipped.append(parse_skipped(doc, api, kind, d))
        return
    if (api, kind) == _DAEMON_SET:
        req.add_objects(doc, 1)
        out.daemon_sets.append(parse_daemon_set(doc, d))
        return
    parser = _PARSERS.get((api, kind))
    if parser is None:
        what = f"{_quote(api)[1:-1]} {_quote(kind)[1:-1]}"
        if (api, kind) in _NOT_MODELLED:
            raise doc.fail("kind", f"{what} is not supported here and cannot be skipped: {_NOT_MODELLED[(api, kind)]}")
        raise doc.fail("kind", f"{what} is not supported here (supported: "
                               f"{_kind_list([*_PARSERS, *_WORKLOADS, _DAEMON_SET, _CONFIG])}; skipped, as {_NOT_READ}: "
                               f"{_kind_list(_SKIPPED)})")
    req.add_objects(doc, 1)
    obj = parser(doc, d)
    if isinstance(obj, Pod):
        out.pod_sources[(obj.namespace, obj.name)] = where
    if isinstance(obj, (Pod, PodDisruptionBudget, LimitRange)):
        req.define(doc, kind, obj.meta.namespace, obj.meta.name)
    elif isinstance(obj, WorkloadSelector):
        req.define(doc, kind, obj.namespace, obj.name)
    else:
        req.define(doc, kind, "", obj.name)
    {Pod: out.pods, Node: out.nodes, Namespace: out.namespaces, PriorityClass: out.priority_classes,
     RuntimeClass: out.runtime_classes, PodDisruptionBudget: out.pdbs,
     WorkloadSelector: out.workloads, LimitRange: out.limit_ranges}[type(obj)].append(obj)


def _load_source(req: _Request, out: Manifests, text: str, source: str) -> None:
    docs = _decode(req, text, source)
    for d in docs:
        _reserve_pod_names(req, d)
    for i, d in enumerate(docs, 1):
        where = (source if len(docs) == 1 else f"{source}: document {i}") + _describe(d)
        try:
            _add_object(req, out, d, where)
        except RecursionError:  # a List of Lists of Lists ...: bounded by MAX_DEPTH, kept as a net
            raise ManifestError(where, "", "nests too deeply") from None


def load_text(text: str, source: str = "<input>", *, strict_names: bool = False) -> Manifests:
    """Parse YAML (one or more documents) or JSON text: one request.

    strict_names=True validates metadata.name, generateName and namespace as the API server does
    (DNS-1123 subdomains; labels for namespaces), which is what `apply` wants. The default accepts
    any name that can be a URL path segment: kube-scheduler schedules whatever objects it is
    given, and the recorded decisions in tests/golden include pods such as "p0-fields_missing"
    that the API server's validation never saw. Labels, annotations, limits and duplicates are
    checked either way."""
    out = Manifests()
    _load_source(_Request(strict_names), out, text, source)
    return out


def read_manifest(f: str | Path) -> str:
    """A manifest file's text ("-": standard input), reading no more than MAX_MANIFEST_BYTES + 1
    bytes (a 10 GB file costs 8 MiB); ManifestError when it is longer, unreadable or not UTF-8."""
    try:
        if str(f) == "-":
            stdin = getattr(sys.stdin, "buffer", sys.stdin)  # bytes when there are any
            data: str | bytes = stdin.read(MAX_MANIFEST_BYTES + 1)
        else:
            with open(f, "rb") as fh:
                data = fh.read(MAX_MANIFEST_BYTES + 1)
    except OSError as e:
        raise ManifestError(str(f), "", f"cannot be read: {e.strerror or e}") from None
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(str(f), "", f"is larger than {MAX_MANIFEST_BYTES} bytes, the most that is read")
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ManifestError(str(f), "", f"is not UTF-8 text (byte {e.start})") from None


def load_files(paths: Iterable[str | Path], *, strict_names: bool = False) -> Manifests:
    """Every file (directories: their .yaml, .yml and .json files) as one request: the limits and
    the duplicate check span all of them. strict_names as for load_text."""
    out = Manifests()
    req = _Request(strict_names)
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files = sorted(f for f in p.iterdir() if f.suffix in (".yaml", ".yml", ".json"))
        else:
            files = [p]
        for f in files:
            _load_source(req, out, read_manifest(f), str(f))
    return out


def _object_keys(m: Manifests) -> dict[tuple[str, str, str], str]:
    keys = {("Pod", p.meta.namespace, p.meta.name): f"Pod {p.meta.namespace}/{p.meta.name}" for p in m.pods}
    keys.update({("PodDisruptionBudget", p.meta.namespace, p.meta.name):
                 f"PodDisruptionBudget {p.meta.namespace}/{p.meta.name}" for p in m.pdbs})
    keys.update({("Node", "", n.name): f"Node {n.name}" for n in m.nodes})
    keys.update({("PriorityClass", "", c.name): f"PriorityClass {c.name}" for c in m.priority_classes})
    keys.update({("RuntimeClass", "", c.name): f"RuntimeClass {c.name}" for c in m.runtime_classes})
    keys.update({("Namespace", "", n.name): f"Namespace {n.name}" for n in m.namespaces})
    keys.update({(s.resource, s.namespace, s.name): s.key for s in m.skipped})
    keys.update({("DaemonSet", d.namespace, d.name): f"DaemonSet {d.key}" for d in m.daemon_sets})
    keys.update({("LimitRange", r.namespace, r.name): f"LimitRange {r.key}" for r in m.limit_ranges})
    return keys


def refuse_duplicates_across(first: Manifests, first_where: str, second: Manifests, second_where: str) -> None:
    """Two requests read as one cluster (explain's --cluster and --pods): an object defined in both
    is refused, as a duplicate within one request is, instead of one silently shadowing the other."""
    seen = _object_keys(first)
    for key, what in _object_keys(second).items():
        if key in seen:
            raise ManifestError(second_where, "metadata.name",
                                f"Duplicate value: {_quote(key[2])}: {what} is also defined in {first_where}")


# ---------------------------------------------------------------------------------------------
# Admission: priority from PriorityClass
# ---------------------------------------------------------------------------------------------

class AdmissionError(ManifestError):
    pass


def admit_pod(pod: Pod, classes: dict[str, PriorityClass]) -> Pod:
    """The Priority admission plugin: resolve spec.priority and preemptionPolicy from the class."""
    if pod.priority_class_name:
        pc = classes.get(pod.priority_class_name) or SYSTEM_PRIORITY_CLASSES.get(pod.priority_class_name)
        if pc is None:
            raise AdmissionError(f"Pod {pod.key}", "spec.priorityClassName",
                                 f"no PriorityClass with name {pod.priority_class_name} was found")
    else:
        pc = next((c for c in classes.values() if c.global_default), None)
        if pc is not None:
            pod.priority_class_name = pc.name
    if pc is not None:
        if pod.priority is not None and pod.priority != pc.value:
            raise AdmissionError(f"Pod {pod.key}", "spec.priority",
                                 f"the integer value of priority ({pod.priority}) must not be provided in pod spec; "
                                 f"priority admission controller computed {pc.value} from the given PriorityClass name")
        pod.priority = pc.value
        if not pod.preemption_policy:
            pod.preemption_policy = pc.preemption_policy
    if pod.priority is None:
        pod.priority = 0
    if not pod.preemption_policy:
        pod.preemption_policy = PREEMPT_LOWER_PRIORITY
    return pod


def admit_all(m: Manifests, extra_classes: Iterable[PriorityClass] = ()) -> Manifests:
    classes = {c.name: c for c in list(extra_classes) + m.priority_classes}
    defaults = [c.name for c in classes.values() if c.global_default]
    if len(defaults) > 1:
        raise AdmissionError("PriorityClasses", "globalDefault", f"more than one global default: {', '.join(defaults)}")
    for p in m.pods:
        admit_pod(p, classes)
    return m
