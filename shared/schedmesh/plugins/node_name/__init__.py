"""NodeName plugin."""
from schedmesh.plugins.node_name.plugin import ERR_REASON, NodeName, fits

__all__ = ["NodeName", "ERR_REASON", "fits"]
