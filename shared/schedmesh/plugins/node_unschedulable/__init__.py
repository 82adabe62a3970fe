"""NodeUnschedulable plugin."""
from schedmesh.plugins.node_unschedulable.plugin import ERR_REASON_UNSCHEDULABLE, NodeUnschedulable

__all__ = ["NodeUnschedulable", "ERR_REASON_UNSCHEDULABLE"]
