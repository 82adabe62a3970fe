"""SchedulingGates pre-enqueue plugin."""
from schedmesh.plugins.scheduling_gates.plugin import SchedulingGates, gates_message

__all__ = ["SchedulingGates", "gates_message"]
