"""PrioritySort queue-sort plugin."""
from schedmesh.plugins.queue_sort.plugin import PrioritySort, pod_priority

__all__ = ["PrioritySort", "pod_priority"]
