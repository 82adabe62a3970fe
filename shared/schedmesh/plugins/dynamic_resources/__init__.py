"""DynamicResources plugin (pods without ResourceClaims only; claims are out of scope)."""
from schedmesh.plugins.dynamic_resources.plugin import MSG_NO_CLAIMS, NOT_FOUND, DynamicResources

__all__ = ["DynamicResources", "MSG_NO_CLAIMS", "NOT_FOUND"]
