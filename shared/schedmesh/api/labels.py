"""Label selectors (metav1.LabelSelector) and their matching semantics."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

IN, NOT_IN, EXISTS, DOES_NOT_EXIST = "In", "NotIn", "Exists", "DoesNotExist"
LABEL_SELECTOR_OPERATORS = (IN, NOT_IN, EXISTS, DOES_NOT_EXIST)


@dataclass(slots=True, frozen=True)
class LabelSelectorRequirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op == IN:
            return self.key in labels and labels[self.key] in self.values
        if op == NOT_IN:
            return self.key not in labels or labels[self.key] not in self.values
        if op == EXISTS:
            return self.key in labels
        if op == DOES_NOT_EXIST:
            return self.key not in labels
        return False


@dataclass(slots=True, frozen=True)
class LabelSelector:
    """An empty selector matches everything; a missing (None) selector is decided by its user."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[LabelSelectorRequirement, ...] = field(default=())

    @staticmethod
    def of(match_labels: Optional[Mapping[str, str]] = None,
           match_expressions: Optional[list[LabelSelectorRequirement]] = None) -> "LabelSelector":
        return LabelSelector(tuple(sorted((match_labels or {}).items())), tuple(match_expressions or ()))

    def is_empty(self) -> bool:
        return not self.match_labels and not self.match_expressions

    def matches(self, labels: Mapping[str, str]) -> bool:
        for k, v in self.match_labels:
            if labels.get(k) != v:
                return False
        for r in self.match_expressions:
            if not r.matches(labels):
                return False
        return True

    def with_requirements(self, extra: list[LabelSelectorRequirement]) -> "LabelSelector":
        return LabelSelector(self.match_labels, self.match_expressions + tuple(extra))

    def __str__(self) -> str:
        parts = [f"{k}={v}" for k, v in self.match_labels]
        for r in self.match_expressions:
            if r.operator in (IN, NOT_IN):
                parts.append(f"{r.key} {r.operator.lower()} ({','.join(r.values)})")
            elif r.operator == EXISTS:
                parts.append(r.key)
            else:
                parts.append(f"!{r.key}")
        return ",".join(parts)


def selector_matches(selector: Optional[LabelSelector], labels: Mapping[str, str]) -> bool:
    """LabelSelectorAsSelector semantics: None matches nothing, empty matches everything."""
    return selector is not None and selector.matches(labels)


_SET_OPERATORS = {"in": IN, "notin": NOT_IN}


def parse_selector(text: str) -> LabelSelector:
    """kubectl's `-l` syntax (apimachinery labels.Parse): comma-separated requirements
    `k=v`, `k==v`, `k!=v` (matches a missing key too), `k in (a,b)`, `k notin (a,b)`, `k`, `!k`.
    A ValueError names the requirement that does not parse."""
    reqs: list[LabelSelectorRequirement] = []
    i, n = 0, len(text)
    while i < n:
        # a requirement runs to the next comma outside parentheses
        depth, j = 0, i
        while j < n and (text[j] != "," or depth):
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            j += 1
        part = text[i:j].strip()
        i = j + 1
        if not part:
            raise ValueError(f"label selector {text!r}: empty requirement")
        reqs.append(_parse_requirement(part, text))
    return LabelSelector((), tuple(reqs))


def _parse_requirement(part: str, text: str) -> LabelSelectorRequirement:
    bad = ValueError(f"label selector {text!r}: cannot parse {part!r} (want k=v, k!=v, k in (a,b), "
                     "k notin (a,b), k or !k)")
    if part.startswith("!"):
        key = part[1:].strip()
        if not key or any(c in key for c in "=!() "):
            raise bad
        return LabelSelectorRequirement(key, DOES_NOT_EXIST)
    for op, kube_op in (("!=", NOT_IN), ("==", IN), ("=", IN)):
        if op in part:
            key, _, value = part.partition(op)
            key, value = key.strip(), value.strip()
            if not key or any(c in key + value for c in "=!() "):
                raise bad
            return LabelSelectorRequirement(key, kube_op, (value,))
    words = part.split(None, 1)
    if len(words) == 2:
        key, rest = words[0], words[1].strip()
        word, _, values = rest.partition("(")
        op = _SET_OPERATORS.get(word.strip())
        if op is None or not values.endswith(")"):
            raise bad
        vals = tuple(v.strip() for v in values[:-1].split(",") if v.strip())
        if not vals:
            raise ValueError(f"label selector {text!r}: {part!r}: {word.strip()} needs at least one value")
        return LabelSelectorRequirement(key, op, vals)
    if any(c in part for c in "=!() "):
        raise bad
    return LabelSelectorRequirement(part, EXISTS)
