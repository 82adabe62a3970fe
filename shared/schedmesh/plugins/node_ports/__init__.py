"""NodePorts plugin."""
from schedmesh.plugins.node_ports.plugin import ERR_REASON, NodePorts, fits, fits_ports

__all__ = ["NodePorts", "ERR_REASON", "fits", "fits_ports"]
