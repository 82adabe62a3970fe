"""DefaultPreemption plugin."""
from schedmesh.plugins.default_preemption.args import DefaultPreemptionArgs
from schedmesh.plugins.default_preemption.plugin import (MSG_WAITING_FOR_PREEMPTION, NAME, DefaultPreemption)

__all__ = ["DefaultPreemption", "DefaultPreemptionArgs", "NAME", "MSG_WAITING_FOR_PREEMPTION"]
