"""v1 LimitRange, and kube-apiserver's LimitRanger admission plugin (plugin/pkg/admission/limitranger,
v1.35) for the pods schedmesh creates.

Reading a LimitRange: each spec.limits[] item is defaulted as the API server stores it
(SetDefaults_LimitRangeItem: for type Container a missing `default` takes `max`, a missing
`defaultRequest` takes `default`, then `min`) and validated as ValidateLimitRange validates it,
with its messages.

Admitting a pod being created (kube runs the plugin on pod create only; an update is not
re-defaulted): `set_default_resources` is the mutating phase (each Container-type item of each
LimitRange of the pod's namespace gives its containers and init containers the default limits and
requests they do not set, and the `kubernetes.io/limit-ranger` annotation says what was set);
`validate_limits` the validating phase (Container-type min, max and maxLimitRequestRatio per
container and init container, Pod-type ones over the pod's requests and limits, as
resourcehelper sums them), refusing with kube's message. PersistentVolumeClaim-type items are
read and validated but constrain nothing here (no claims are modelled)."""
from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Iterable, Mapping, Optional

from schedmesh.api.quantity import (QuantityError, canonical_quantity, milli_value, parse_quantity,
                                    quantity_format, quantity_string, value)
from schedmesh.api.resources import (CPU, EPHEMERAL_STORAGE, MEMORY, is_extended_resource_name,
                                     is_hugepage_resource_name, is_native_resource, is_qualified_name,
                                     is_supported_pod_level_resource)
from schedmesh.api.types import (LIMIT_TYPE_CONTAINER, LIMIT_TYPE_POD, LIMIT_TYPE_PVC, Container, LimitRange,
                                 LimitRangeItem, Pod, ResourceList)

LIMIT_RANGER_ANNOTATION = "kubernetes.io/limit-ranger"
STANDARD_LIMIT_TYPES = (LIMIT_TYPE_POD, LIMIT_TYPE_CONTAINER, LIMIT_TYPE_PVC)
# resource.MaxMilliValue: values above it are compared in whole units, not thousandths.
_MAX_MILLI_VALUE = (2**63 - 1) // 1000
_ITEM_FIELDS = (("max", "max"), ("min", "min"), ("default", "default"), ("defaultRequest", "default_request"),
                ("maxLimitRequestRatio", "max_limit_request_ratio"))


class LimitRangeInvalid(ValueError):
    """A LimitRange the API server refuses: the field path and kube's reason."""

    def __init__(self, path: str, reason: str) -> None:
        self.path, self.reason = path, reason
        super().__init__(f"{path}: {reason}")


# ---------------------------------------------------------------------------------------------
# Reading a LimitRange
# ---------------------------------------------------------------------------------------------

def default_item(item: LimitRangeItem) -> LimitRangeItem:
    """SetDefaults_LimitRangeItem: a Container item's default limit from max, its default
    request from the default limit, else from min."""
    if item.type != LIMIT_TYPE_CONTAINER:
        return item
    default = dict(item.default)
    for k, q in item.max.items():
        default.setdefault(k, q)
    default_request = dict(item.default_request)
    for k, q in default.items():
        default_request.setdefault(k, q)
    for k, q in item.min.items():
        default_request.setdefault(k, q)
    return dataclasses.replace(item, default=default, default_request=default_request)


def _resource_name_error(limit_type: str, name: str) -> Optional[str]:
    """validateLimitRangeResourceName's reason, or None."""
    if not is_qualified_name(name):
        return f'Invalid value: "{name}": must be a qualified name'
    if limit_type not in (LIMIT_TYPE_POD, LIMIT_TYPE_CONTAINER):
        return None
    if "/" not in name:
        if name not in (CPU, MEMORY, EPHEMERAL_STORAGE) and not is_hugepage_resource_name(name):
            return f'Invalid value: "{name}": must be a standard resource for containers'
    elif not is_native_resource(name) and not is_extended_resource_name(name):
        return f'Invalid value: "{name}": doesn\'t follow extended resource name standard'
    return None


def _overcommit_allowed(name: str) -> bool:
    return is_native_resource(name) and not is_hugepage_resource_name(name)


def _in_units(qs: Iterable[Fraction]) -> list[int]:
    """requestLimitEnforcedValues: thousandths when every value fits, else whole units."""
    qs = list(qs)
    if all(value(q) <= _MAX_MILLI_VALUE for q in qs):
        return [milli_value(q) for q in qs]
    return [value(q) for q in qs]


def validate_limit_range(limits: list[LimitRangeItem]) -> None:
    """ValidateLimitRange's checks of spec.limits (already defaulted), in its order; raises
    LimitRangeInvalid with the first refusal."""
    seen_types: set[str] = set()
    for i, item in enumerate(limits):
        path = f"spec.limits[{i}]"
        if not is_qualified_name(item.type):
            raise LimitRangeInvalid(f"{path}.type", f'Invalid value: "{item.type}": must be a qualified name')
        if "/" not in item.type and item.type not in STANDARD_LIMIT_TYPES:
            raise LimitRangeInvalid(f"{path}.type",
                                    f'Invalid value: "{item.type}": must be a standard limit type or fully qualified')
        if item.type in seen_types:
            raise LimitRangeInvalid(f"{path}.type", f'Duplicate value: "{item.type}"')
        seen_types.add(item.type)
        if item.type == LIMIT_TYPE_POD:
            for field_name, attr in (("default", "default"), ("defaultRequest", "default_request")):
                if getattr(item, attr):
                    raise LimitRangeInvalid(f"{path}.{field_name}",
                                            "Forbidden: may not be specified when `type` is 'Pod'")
        keys: list[str] = []
        for field_name, attr in _ITEM_FIELDS:
            for k in getattr(item, attr):
                error = _resource_name_error(item.type, k)
                if error:
                    raise LimitRangeInvalid(f"{path}.{field_name}[{k}]", error)
                if k not in keys:
                    keys.append(k)
        if item.type == LIMIT_TYPE_PVC and "storage" not in item.min and "storage" not in item.max:
            raise LimitRangeInvalid(f"{path}.limits", "Required value: either minimum or maximum storage value is "
                                                      "required, but neither was provided")
        for k in keys:
            _validate_resource(path, k, item)


def _validate_resource(path: str, k: str, item: LimitRangeItem) -> None:
    text = {attr: getattr(item, attr).get(k) for _f, attr in _ITEM_FIELDS}
    q = {attr: parse_quantity(t) for attr, t in text.items() if t is not None}
    lo, hi, default, request, ratio = (q.get(a) for a in ("min", "max", "default", "default_request",
                                                           "max_limit_request_ratio"))
    checks = (
        (lo is not None and hi is not None and lo > hi, "min", text["min"],
         f"min value {text['min']} is greater than max value {text['max']}"),
        (request is not None and lo is not None and lo > request, "defaultRequest", text["default_request"],
         f"min value {text['min']} is greater than default request value {text['default_request']}"),
        (request is not None and hi is not None and request > hi, "defaultRequest", text["default_request"],
         f"default request value {text['default_request']} is greater than max value {text['max']}"),
        (request is not None and default is not None and request > default, "defaultRequest",
         text["default_request"],
         f"default request value {text['default_request']} is greater than default limit value {text['default']}"),
        (default is not None and lo is not None and lo > default, "default", text["min"],
         f"min value {text['min']} is greater than default value {text['default']}"),
        (default is not None and hi is not None and default > hi, "default", text["max"],
         f"default value {text['default']} is greater than max value {text['max']}"),
        (ratio is not None and ratio < 1, "maxLimitRequestRatio", text["max_limit_request_ratio"],
         f"ratio {text['max_limit_request_ratio']} is less than 1"),
    )
    for failed, field_name, shown, reason in checks:
        if failed:
            raise LimitRangeInvalid(f"{path}.{field_name}[{k}]", f'Invalid value: "{shown}": {reason}')
    if ratio is not None and lo is not None and hi is not None:
        # kube compares floats here: the ratio in thousandths over 1000 against max/min
        if all(value(x) < _MAX_MILLI_VALUE for x in (ratio, lo, hi)):
            ratio_value, lo_value, hi_value = milli_value(ratio) / 1000, milli_value(lo), milli_value(hi)
        else:
            ratio_value, lo_value, hi_value = float(value(ratio)), value(lo), value(hi)
        allowed = float(hi_value) / float(lo_value) if lo_value else float("inf")
        if ratio_value > allowed:
            raise LimitRangeInvalid(f"{path}.maxLimitRequestRatio[{k}]",
                                    f'Invalid value: "{text["max_limit_request_ratio"]}": ratio '
                                    f"{text['max_limit_request_ratio']} is greater than max/min = {allowed:f}")
    if not _overcommit_allowed(k) and default is not None and request is not None and default != request:
        raise LimitRangeInvalid(f"{path}.defaultRequest[{k}]",
                                f'Invalid value: "{text["default_request"]}": default value {text["default"]} '
                                f"must equal to defaultRequest value {text['default_request']} in {k}")


def canonical_quantities(raw: Mapping[str, object], path: str) -> dict[str, str]:
    """A LimitRange's resource map as kube stores it (each quantity written back canonically);
    LimitRangeInvalid naming the key when a value is not a quantity."""
    out = {}
    for k, v in raw.items():
        try:
            out[str(k)] = canonical_quantity(v)  # type: ignore[arg-type]
        except (QuantityError, ValueError):
            raise LimitRangeInvalid(f"{path}.{k}", f"{v!r} is not a quantity") from None
    return out


# ---------------------------------------------------------------------------------------------
# Admission of a pod being created
# ---------------------------------------------------------------------------------------------

def in_namespace(limit_ranges: Iterable[LimitRange], namespace: str) -> list[LimitRange]:
    """The LimitRanges that admit a pod of `namespace`, in a fixed order (by name: kube's
    lister returns them in no particular order)."""
    return sorted((lr for lr in limit_ranges if lr.namespace == namespace), key=lambda lr: lr.name)


def _merge_container(c: Container, limits: Mapping[str, str], requests: Mapping[str, str], kind: str,
                     notes: list[str]) -> Container:
    """mergeContainerResources: the defaults the container does not set, and the annotation's note."""
    set_limits = sorted(k for k in limits if k not in c.limits)
    set_requests = sorted(k for k in requests if k not in c.requests)
    if not set_limits and not set_requests:
        return c
    if set_requests:
        notes.append(f"{', '.join(set_requests)} request for {kind} {c.name}")
    if set_limits:
        notes.append(f"{', '.join(set_limits)} limit for {kind} {c.name}")
    return dataclasses.replace(
        c, limits={**c.limits, **{k: parse_quantity(limits[k]) for k in set_limits}},
        requests={**c.requests, **{k: parse_quantity(requests[k]) for k in set_requests}})


def set_default_resources(pod: Pod, limit_ranges: Iterable[LimitRange]) -> None:
    """The mutating phase (PodMutateLimitFunc for each LimitRange of the pod's namespace), in place.
    Each LimitRange's defaults are the union of its Container items' (a later item's value wins,
    as kube's map does); a LimitRange that sets something rewrites the annotation."""
    for lr in in_namespace(limit_ranges, pod.namespace):
        limits: dict[str, str] = {}
        requests: dict[str, str] = {}
        for item in lr.limits:
            if item.type == LIMIT_TYPE_CONTAINER:
                requests.update(item.default_request)
                limits.update(item.default)
        if not limits and not requests:
            continue
        notes: list[str] = []
        pod.containers = [_merge_container(c, limits, requests, "container", notes) for c in pod.containers]
        pod.init_containers = [_merge_container(c, limits, requests, "init container", notes)
                               for c in pod.init_containers]
        if notes:
            pod.meta.annotations = {**pod.meta.annotations,
                                    LIMIT_RANGER_ANNOTATION: "LimitRanger plugin set: " + "; ".join(notes)}


def _min_error(limit_type: str, k: str, enforced: str, fmt: str, requests: ResourceList,
               limits: ResourceList) -> Optional[tuple[str, str]]:
    req, lim = requests.get(k), limits.get(k)
    observed_req, observed_lim, floor = _in_units((req or 0, lim or 0, parse_quantity(enforced)))
    if req is None:
        return "requests", f"minimum {k} usage per {limit_type} is {enforced}.  No request is specified"
    if observed_req < floor:
        return "requests", f"minimum {k} usage per {limit_type} is {enforced}, but request is {quantity_string(req, fmt)}"
    if lim is not None and observed_lim < floor:
        return "limits", f"minimum {k} usage per {limit_type} is {enforced}, but limit is {quantity_string(lim, fmt)}"
    return None


def _max_error(limit_type: str, k: str, enforced: str, fmt: str, requests: ResourceList,
               limits: ResourceList) -> Optional[tuple[str, str]]:
    req, lim = requests.get(k), limits.get(k)
    observed_req, observed_lim, ceiling = _in_units((req or 0, lim or 0, parse_quantity(enforced)))
    if lim is None:
        return "limits", f"maximum {k} usage per {limit_type} is {enforced}.  No limit is specified"
    if observed_lim > ceiling:
        return "limits", f"maximum {k} usage per {limit_type} is {enforced}, but limit is {quantity_string(lim, fmt)}"
    if req is not None and observed_req > ceiling:
        return "requests", f"maximum {k} usage per {limit_type} is {enforced}, but request is {quantity_string(req, fmt)}"
    return None


def _ratio_error(limit_type: str, k: str, enforced: str, _fmt: str, requests: ResourceList,
                 limits: ResourceList) -> Optional[tuple[str, str]]:
    req, lim = requests.get(k), limits.get(k)
    ratio = parse_quantity(enforced)
    observed_req, observed_lim, _ = _in_units((req or 0, lim or 0, ratio))
    if req is None or observed_req == 0:
        return "requests", (f"{k} max limit to request ratio per {limit_type} is {enforced}, but no request is specified or "
                "request is 0")
    if lim is None or observed_lim == 0:
        return "limits", (f"{k} max limit to request ratio per {limit_type} is {enforced}, but no limit is specified or "
                "limit is 0")
    observed = float(observed_lim) / float(observed_req)  # floats, as kube divides
    shown = observed
    allowed = float(value(ratio))
    if value(ratio) <= _MAX_MILLI_VALUE:
        observed *= 1000
        allowed = float(milli_value(ratio))
    if observed > allowed:
        return "limits", f"{k} max limit to request ratio per {limit_type} is {enforced}, but provided ratio is {shown:f}"
    return None


_CONSTRAINTS = (("min", _min_error), ("max", _max_error), ("max_limit_request_ratio", _ratio_error))


def _check(item: LimitRangeItem, requests: ResourceList, limits: ResourceList, path: str,
           errors: list[tuple[str, str]]) -> None:
    for attr, constraint in _CONSTRAINTS:
        for k, enforced in getattr(item, attr).items():
            # kube writes the pod's value in the format it was written in; schedmesh keeps values,
            # not text, and writes it in the LimitRange's format (the same in the usual manifest)
            error = constraint(item.type, k, enforced, quantity_format(enforced), requests, limits)
            if error:
                which, message = error
                errors.append((f"{path}.{which}.{k}", message))


def pod_requests_and_limits(pod: Pod) -> tuple[ResourceList, ResourceList]:
    """The limitranger's podRequests and podLimits: containers summed, restartable init containers
    added, the largest init container need taken, then pod-level resources (PodLevelResources,
    on by default in v1.35) override cpu, memory and hugepages. Overhead is not counted."""
    out = []
    for attr, pod_level in (("requests", pod.resource_requests), ("limits", pod.resource_limits)):
        total: ResourceList = {}
        for c in pod.containers:
            for k, q in getattr(c, attr).items():
                total[k] = total.get(k, 0) + q
        sidecars: ResourceList = {}
        init_need: ResourceList = {}
        for c in pod.init_containers:
            own = getattr(c, attr)
            if c.restart_policy == "Always":
                for k, q in own.items():
                    total[k] = total.get(k, 0) + q
                    sidecars[k] = sidecars.get(k, 0) + q
                need = sidecars
            else:
                need = dict(own)
                for k, q in sidecars.items():
                    need[k] = need.get(k, 0) + q
            for k, q in need.items():
                if k not in init_need or q > init_need[k]:
                    init_need[k] = q
        for k, q in init_need.items():
            if k not in total or q > total[k]:
                total[k] = q
        for k, q in (pod_level or {}).items():
            if is_supported_pod_level_resource(k):
                total[k] = q
        out.append(total)
    return out[0], out[1]


def limit_errors(pod: Pod, limit_range: LimitRange) -> list[tuple[str, str]]:
    """PodValidateLimitFunc for one LimitRange: (field path, kube's message) per violation."""
    errors: list[tuple[str, str]] = []
    for item in limit_range.limits:
        if item.type == LIMIT_TYPE_CONTAINER:
            for what, containers in (("containers", pod.containers), ("initContainers", pod.init_containers)):
                for i, c in enumerate(containers):
                    _check(item, c.requests, c.limits, f"spec.{what}[{i}].resources", errors)
        elif item.type == LIMIT_TYPE_POD:
            requests, limits = pod_requests_and_limits(pod)
            _check(item, requests, limits, "spec.containers[*].resources", errors)
    return errors


def aggregate_message(messages: list[str]) -> str:
    """utilerrors.NewAggregate(errs).Error(): one message as is, several deduplicated in brackets."""
    unique = list(dict.fromkeys(messages))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


def first_refusal(pod: Pod, limit_ranges: Iterable[LimitRange]) -> Optional[tuple[str, str]]:
    """The validating phase: (field path of the first violation, the refusal's message) for the
    first LimitRange of the pod's namespace the pod violates, or None when it is admitted."""
    for lr in in_namespace(limit_ranges, pod.namespace):
        errors = limit_errors(pod, lr)
        if errors:
            return errors[0][0], aggregate_message([m for _p, m in errors])
    return None


def keep_admitted_defaults(applied: Pod, live: Pod) -> None:
    """An update of `live` by a manifest that never wrote what the LimitRanger set at creation:
    kubectl apply leaves fields it did not write, so each container keeps the live requests and
    limits the manifest does not set, and the pod its limit-ranger annotation (in place)."""
    def keep(new: list[Container], old: list[Container]) -> list[Container]:
        by_name = {c.name: c for c in old}
        out = []
        for c in new:
            o = by_name.get(c.name)
            if o is not None:
                c = dataclasses.replace(c, limits={**o.limits, **c.limits}, requests={**o.requests, **c.requests})
            out.append(c)
        return out
    applied.containers = keep(applied.containers, live.containers)
    applied.init_containers = keep(applied.init_containers, live.init_containers)
    note = live.meta.annotations.get(LIMIT_RANGER_ANNOTATION)
    if note is not None and LIMIT_RANGER_ANNOTATION not in applied.meta.annotations:
        applied.meta.annotations = {**applied.meta.annotations, LIMIT_RANGER_ANNOTATION: note}

