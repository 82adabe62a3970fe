"""NodeResourcesFit and NodeResourcesBalancedAllocation (kube-scheduler's noderesources plugins)."""
from schedmesh.plugins.node_resources.balanced_allocation import BalancedAllocation
from schedmesh.plugins.node_resources.fit import Fit

__all__ = ["BalancedAllocation", "Fit"]
