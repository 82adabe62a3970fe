"""Node selector matching as component-helpers/scheduling/corev1/nodeaffinity does it (v1.35).

Compiled once per pod (or per plugin for addedAffinity), then matched per node (`match(node)`)
or over every node of a snapshot at once (`match_columns(cols)` -> bool array indexed by node
row). Reused by NodeAffinity, PodTopologySpread's nodeAffinityPolicy and preemption.

Semantics kept from kube:
* NodeSelector terms are ORed; a term's requirements are ANDed; an empty term (no
  matchExpressions, no matchFields) is dropped, so a selector with no usable term matches nothing.
* A term that fails to parse (labels.NewRequirement / field selector validation: bad key, bad
  value, wrong number of values, non-integer Gt/Lt value, unknown operator) never matches
  ("lazy errors"); `errors` lists them for callers that must reject them (plugin args).
* Gt/Lt parse the node's label value with strconv.ParseInt; a value that does not parse never
  matches. NotIn and DoesNotExist match a node without the label.
* matchFields compare against {"metadata.name": node name} (an absent field reads as "");
  a node with an empty name skips the field check.
* pod.spec.nodeSelector is labels.SelectorFromSet: exact equality, no validation.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import numpy as np

from schedmesh.api.resources import is_qualified_name
from schedmesh.api.types import Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod, PreferredSchedulingTerm

OP_IN, OP_NOT_IN, OP_EXISTS, OP_DOES_NOT_EXIST, OP_GT, OP_LT = "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"
LABEL_OPERATORS = (OP_IN, OP_NOT_IN, OP_EXISTS, OP_DOES_NOT_EXIST, OP_GT, OP_LT)
FIELD_OPERATORS = (OP_IN, OP_NOT_IN)
OBJECT_NAME_FIELD = "metadata.name"

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_PARSE_INT_RE = re.compile(r"[+-]?[0-9]+")
_LABEL_VALUE_RE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
LABEL_VALUE_MAX_LENGTH = 63


def parse_int64(s: str) -> Optional[int]:
    """strconv.ParseInt(s, 10, 64): optional sign, ASCII digits only (leading zeros allowed),
    no spaces or underscores, within int64; None on any error."""
    if not _PARSE_INT_RE.fullmatch(s):
        return None
    v = int(s)
    return v if _INT64_MIN <= v <= _INT64_MAX else None


def is_valid_label_value(v: str) -> bool:
    """content.IsLabelValue: at most 63 chars, alphanumeric at both ends, [-_.] inside; may be empty."""
    return len(v) <= LABEL_VALUE_MAX_LENGTH and _LABEL_VALUE_RE.fullmatch(v) is not None


def _go_value(v: object) -> str:
    if isinstance(v, (list, tuple)):
        return "[]string{" + ", ".join(json.dumps(x) for x in v) + "}"
    return json.dumps(v)


def _invalid(path: str, value: object, detail: str) -> str:
    return f"{path}: Invalid value: {_go_value(value)}: {detail}"


def _not_supported(path: str, value: str, supported: Sequence[str]) -> str:
    return f"{path}: Unsupported value: {json.dumps(value)}: supported values: " + ", ".join(
        json.dumps(s) for s in supported)


# ---- requirements ------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class LabelRequirement:
    """One parsed matchExpressions entry (a labels.Requirement)."""

    key: str
    operator: str
    values: frozenset[str]
    bound: int = 0  # Gt/Lt: the parsed integer

    def _value_matches(self, value: Optional[str]) -> bool:
        op = self.operator
        if op == OP_IN:
            return value is not None and value in self.values
        if op == OP_NOT_IN:
            return value is None or value not in self.values
        if op == OP_EXISTS:
            return value is not None
        if op == OP_DOES_NOT_EXIST:
            return value is None
        if value is None:
            return False
        n = parse_int64(value)
        if n is None:
            return False
        return n > self.bound if op == OP_GT else n < self.bound

    def matches(self, labels: Mapping[str, str]) -> bool:
        return self._value_matches(labels.get(self.key))

    def match_column(self, cols) -> np.ndarray:
        """bool per node row. One decision per distinct label value, gathered by label code;
        the extra last slot answers for nodes without the label (code -1)."""
        col = cols.label(self.key)
        lut = np.fromiter((self._value_matches(v) for v in col.values), dtype=bool, count=len(col.values))
        lut = np.append(lut, self._value_matches(None))
        return lut[col.codes]


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    """One parsed matchFields entry (fields.OneTermEqualSelector / OneTermNotEqualSelector)."""

    key: str
    operator: str  # In | NotIn
    value: str

    def matches_name(self, node_name: str) -> bool:
        got = node_name if self.key == OBJECT_NAME_FIELD else ""
        return (got == self.value) if self.operator == OP_IN else (got != self.value)

    def match_column(self, cols) -> np.ndarray:
        n = cols.n
        if self.key != OBJECT_NAME_FIELD:
            # Every node reads "" for an unknown field.
            return np.full(n, ("" == self.value) == (self.operator == OP_IN), dtype=bool)
        idx = cols.index_of(self.value)
        if self.operator == OP_IN:
            mask = np.zeros(n, dtype=bool)
            if idx >= 0:
                mask[idx] = True
        else:
            mask = np.ones(n, dtype=bool)
            if idx >= 0:
                mask[idx] = False
        return mask


def compile_label_requirement(r: NodeSelectorRequirement, path: str) -> tuple[Optional[LabelRequirement], list[str]]:
    """labels.NewRequirement for a NodeSelectorRequirement; (None, errors) when invalid."""
    if r.operator not in LABEL_OPERATORS:
        return None, [_not_supported(f"{path}.operator", r.operator, LABEL_OPERATORS)]
    errs: list[str] = []
    if not is_qualified_name(r.key):
        errs.append(_invalid(f"{path}.key", r.key, "name part must consist of alphanumeric characters, '-', '_' or '.', "
                                                  "and must start and end with an alphanumeric character"))
    vals = list(r.values)
    vpath = f"{path}.values"
    bound = 0
    if r.operator in (OP_IN, OP_NOT_IN):
        if not vals:
            errs.append(_invalid(vpath, vals, "for 'in', 'notin' operators, values set can't be empty"))
    elif r.operator in (OP_EXISTS, OP_DOES_NOT_EXIST):
        if vals:
            errs.append(_invalid(vpath, vals, "values set must be empty for exists and does not exist"))
    else:
        if len(vals) != 1:
            errs.append(_invalid(vpath, vals, "for 'Gt', 'Lt' operators, exactly one value is required"))
        for i, v in enumerate(vals):
            n = parse_int64(v)
            if n is None:
                errs.append(_invalid(f"{vpath}[{i}]", v, "for 'Gt', 'Lt' operators, the value must be an integer"))
            else:
                bound = n
    for i, v in enumerate(vals):
        if not is_valid_label_value(v):
            errs.append(_invalid(f"{vpath}[{i}][{r.key}]", v, "a valid label must be an empty string or consist of "
                                                             "alphanumeric characters, '-', '_' or '.', and must start "
                                                             "and end with an alphanumeric character"))
    if errs:
        return None, errs
    return LabelRequirement(r.key, r.operator, frozenset(vals), bound), []


def compile_field_requirement(r: NodeSelectorRequirement, path: str) -> tuple[Optional[FieldRequirement], list[str]]:
    if r.operator not in FIELD_OPERATORS:
        return None, [_not_supported(f"{path}.operator", r.operator, FIELD_OPERATORS)]
    if len(r.values) != 1:
        return None, [_invalid(f"{path}.values", list(r.values), "must have one element")]
    return FieldRequirement(r.key, r.operator, r.values[0]), []


# ---- terms -------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class CompiledTerm:
    """A NodeSelectorTerm: None for a part the term does not set; errors make it match nothing."""

    labels: Optional[tuple[LabelRequirement, ...]]
    fields: Optional[tuple[FieldRequirement, ...]]
    errors: tuple[str, ...] = ()

    def match(self, node: Node) -> bool:
        if self.errors:
            return False
        if self.labels is not None:
            labels = node.meta.labels
            if not all(r.matches(labels) for r in self.labels):
                return False
        name = node.meta.name
        if self.fields is not None and name:
            if not all(f.matches_name(name) for f in self.fields):
                return False
        return True

    def match_columns(self, cols) -> np.ndarray:
        n = cols.n
        if self.errors:
            return np.zeros(n, dtype=bool)
        mask = np.ones(n, dtype=bool)
        for r in self.labels or ():
            mask &= r.match_column(cols)
        if self.fields:
            fmask = np.ones(n, dtype=bool)
            for f in self.fields:
                fmask &= f.match_column(cols)
            unnamed = cols.index_of("")
            if unnamed >= 0:  # a node without a name has no fields to check
                fmask[unnamed] = True
            mask &= fmask
        return mask


def is_empty_term(term: NodeSelectorTerm) -> bool:
    return not term.match_expressions and not term.match_fields


def compile_term(term: NodeSelectorTerm, path: str) -> CompiledTerm:
    errs: list[str] = []
    labels: Optional[tuple[LabelRequirement, ...]] = None
    fields: Optional[tuple[FieldRequirement, ...]] = None
    if term.match_expressions:
        parsed = []
        for j, r in enumerate(term.match_expressions):
            req, e = compile_label_requirement(r, f"{path}.matchExpressions[{j}]")
            errs.extend(e)
            if req is not None:
                parsed.append(req)
        labels = tuple(parsed)
    if term.match_fields:
        parsed_f = []
        for j, r in enumerate(term.match_fields):
            freq, e = compile_field_requirement(r, f"{path}.matchFields[{j}]")
            errs.extend(e)
            if freq is not None:
                parsed_f.append(freq)
        fields = tuple(parsed_f)
    return CompiledTerm(labels, fields, tuple(errs))


# ---- selectors ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class NodeSelectorMatcher:
    """A NodeSelector (LazyErrorNodeSelector): terms ORed, empty terms dropped."""

    terms: tuple[CompiledTerm, ...]

    @property
    def errors(self) -> list[str]:
        return [e for t in self.terms for e in t.errors]

    def match(self, node: Optional[Node]) -> bool:
        if node is None:
            return False
        return any(t.match(node) for t in self.terms)

    def match_lazy(self, node: Optional[Node]) -> tuple[bool, list[str]]:
        """LazyErrorNodeSelector.Match: (True, []) when a term matches, else (False, the parse
        errors of the terms that could not be evaluated)."""
        if node is None:
            return False, []
        errs: list[str] = []
        for t in self.terms:
            if t.errors:
                errs.extend(t.errors)
            elif t.match(node):
                return True, []
        return False, errs

    def match_columns(self, cols) -> np.ndarray:
        mask = np.zeros(cols.n, dtype=bool)
        for t in self.terms:
            if not t.errors:
                mask |= t.match_columns(cols)
        return mask


def compile_node_selector(ns: NodeSelector, path: str = "") -> NodeSelectorMatcher:
    base = f"{path}.nodeSelectorTerms" if path else "nodeSelectorTerms"
    return NodeSelectorMatcher(tuple(compile_term(t, f"{base}[{i}]")
                                     for i, t in enumerate(ns.terms) if not is_empty_term(t)))


@dataclass(frozen=True, slots=True)
class PreferredTerms:
    """PreferredSchedulingTerms: the sum of the weights of the terms a node matches."""

    terms: tuple[tuple[int, CompiledTerm], ...]
    errors: tuple[str, ...] = ()

    def score(self, node: Node) -> int:
        return sum(w for w, t in self.terms if t.match(node))

    def score_columns(self, cols) -> np.ndarray:
        out = np.zeros(cols.n, dtype=np.int64)
        for w, t in self.terms:
            out += w * t.match_columns(cols)
        return out


def compile_preferred_terms(terms: Sequence[PreferredSchedulingTerm], path: str = "") -> PreferredTerms:
    """NewPreferredSchedulingTerms: zero-weight and empty terms are skipped (even if invalid);
    a term with parse errors is reported in `errors` (kube then refuses the whole list)."""
    parsed: list[tuple[int, CompiledTerm]] = []
    errs: list[str] = []
    for i, term in enumerate(terms):
        if term.weight == 0 or is_empty_term(term.preference):
            continue
        c = compile_term(term.preference, f"{path}[{i}]")
        if c.errors:
            errs.extend(c.errors)
        else:
            parsed.append((term.weight, c))
    return PreferredTerms(tuple(parsed), tuple(errs))


@dataclass(frozen=True, slots=True)
class RequiredNodeAffinity:
    """GetRequiredNodeAffinity(pod): spec.nodeSelector AND spec.affinity.nodeAffinity.required."""

    node_selector_labels: Optional[tuple[tuple[str, str], ...]] = None
    node_selector: Optional[NodeSelectorMatcher] = None

    def match(self, node: Node) -> bool:
        if self.node_selector_labels is not None:
            labels = node.meta.labels
            for k, v in self.node_selector_labels:
                if labels.get(k) != v:
                    return False
        if self.node_selector is not None:
            return self.node_selector.match(node)
        return True

    def match_lazy(self, node: Node) -> tuple[bool, list[str]]:
        """RequiredNodeAffinity.Match with its error: parse errors surface only when no term matched."""
        if self.node_selector_labels is not None:
            labels = node.meta.labels
            for k, v in self.node_selector_labels:
                if labels.get(k) != v:
                    return False, []
        if self.node_selector is not None:
            return self.node_selector.match_lazy(node)
        return True, []

    def match_columns(self, cols) -> np.ndarray:
        """bool per node row of `cols` (a snapshot's Columns)."""
        mask = np.ones(cols.n, dtype=bool)
        for k, v in self.node_selector_labels or ():
            mask &= cols.label(k).isin((v,))
        if self.node_selector is not None:
            mask &= self.node_selector.match_columns(cols)
        return mask

    def is_trivial(self) -> bool:
        """True when it matches every node."""
        return self.node_selector_labels is None and self.node_selector is None


def required_node_affinity(pod: Pod) -> RequiredNodeAffinity:
    labels = tuple(sorted(pod.node_selector.items())) if pod.node_selector else None
    ns = None
    aff = pod.affinity
    if aff is not None and aff.node_affinity is not None and aff.node_affinity.required is not None:
        ns = compile_node_selector(aff.node_affinity.required)
    return RequiredNodeAffinity(labels, ns)


def pod_preferred_terms(pod: Pod) -> Optional[PreferredTerms]:
    """The pod's preferred node affinity terms, or None when it has none (nil in kube: the API
    round trip turns an empty list into nil)."""
    aff = pod.affinity
    if aff is None or aff.node_affinity is None or not aff.node_affinity.preferred:
        return None
    return compile_preferred_terms(aff.node_affinity.preferred)
