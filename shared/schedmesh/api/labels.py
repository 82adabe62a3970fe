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
