"""The plugin registry: plugin name -> class. In-tree plugins load lazily; out-of-tree ones register.

An out-of-tree plugin is any `schedmesh.framework.interface.Plugin` subclass:

    from schedmesh.framework.registry import default_registry
    default_registry().register(MyPlugin)

or, without code changes, listed in the SCHEDMESH_PLUGINS environment variable as
`package.module:Class` entries separated by commas (every service reads it at start).
"""
from __future__ import annotations

import importlib
import os
from typing import Optional

from schedmesh.framework.interface import Plugin

# kube-scheduler's in-tree plugin names and the package implementing each.
IN_TREE: dict[str, str] = {
    "PrioritySort": "schedmesh.plugins.queue_sort",
    "SchedulingGates": "schedmesh.plugins.scheduling_gates",
    "NodeUnschedulable": "schedmesh.plugins.node_unschedulable",
    "NodeName": "schedmesh.plugins.node_name",
    "TaintToleration": "schedmesh.plugins.taint_toleration",
    "NodeAffinity": "schedmesh.plugins.node_affinity",
    "NodePorts": "schedmesh.plugins.node_ports",
    "NodeResourcesFit": "schedmesh.plugins.node_resources",
    "NodeResourcesBalancedAllocation": "schedmesh.plugins.node_resources",
    "VolumeRestrictions": "schedmesh.plugins.volumes",
    "NodeVolumeLimits": "schedmesh.plugins.volumes",
    "VolumeBinding": "schedmesh.plugins.volumes",
    "VolumeZone": "schedmesh.plugins.volumes",
    "PodTopologySpread": "schedmesh.plugins.pod_topology_spread",
    "InterPodAffinity": "schedmesh.plugins.inter_pod_affinity",
    "DynamicResources": "schedmesh.plugins.dynamic_resources",
    "DefaultPreemption": "schedmesh.plugins.default_preemption",
    "ImageLocality": "schedmesh.plugins.image_locality",
    "DefaultBinder": "schedmesh.plugins.default_binder",
}


class UnknownPluginError(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


class Registry:
    def __init__(self) -> None:
        self._classes: dict[str, type[Plugin]] = {}

    def register(self, cls: type[Plugin], name: Optional[str] = None) -> None:
        name = name or cls.name
        if not name:
            raise ValueError(f"{cls.__name__} has no plugin name")
        if name in self._classes and self._classes[name] is not cls:
            raise ValueError(f"a plugin named {name!r} is already registered")
        self._classes[name] = cls

    def register_path(self, spec: str) -> type[Plugin]:
        """Register `package.module:Class`."""
        mod, _, attr = spec.strip().partition(":")
        cls = getattr(importlib.import_module(mod), attr)
        self.register(cls)
        return cls

    def get(self, name: str) -> type[Plugin]:
        cls = self._classes.get(name)
        if cls is not None:
            return cls
        module = IN_TREE.get(name)
        if module is None:
            raise UnknownPluginError(f"plugin {name!r} is not registered (known: {', '.join(sorted(self.names()))})")
        mod = importlib.import_module(module)
        for obj in vars(mod).values():
            if isinstance(obj, type) and issubclass(obj, Plugin) and getattr(obj, "name", "") == name:
                self._classes[name] = obj
                return obj
        raise UnknownPluginError(f"module {module} has no plugin named {name!r}")

    def names(self) -> list[str]:
        return sorted(set(self._classes) | set(IN_TREE))


_DEFAULT: Optional[Registry] = None


def default_registry() -> Registry:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Registry()
        for spec in filter(None, os.environ.get("SCHEDMESH_PLUGINS", "").split(",")):
            _DEFAULT.register_path(spec)
    return _DEFAULT
