"""DefaultBinder bind plugin."""
from schedmesh.plugins.default_binder.plugin import DefaultBinder

__all__ = ["DefaultBinder"]
