"""DefaultBinder (pkg/scheduler/framework/plugins/defaultbinder, v1.35).

kube's DefaultBinder posts a v1.Binding (pod namespace/name/uid -> node) through the API
client. Here the actual binding is delegated to a `binder` callable, `binder(pod, node_name)`,
which raises on failure. It is looked up, in this order, in the handle's services
(`handle.services["binder"]`, where the process puts the mesh binder service's client), as a
`handle.binder` attribute, and in the plugin args (`{"binder": callable}`, handy in tests). Any exception becomes an Error status, as kube's AsStatus(err) does; without a binder
Bind fails with an Error too, so a misconfigured profile never reports pods as bound.
"""
from __future__ import annotations

from typing import Any, Callable, ClassVar, Optional

from schedmesh.api.types import Pod
from schedmesh.framework.interface import BindPlugin, CycleState, Status

NAME = "DefaultBinder"

Binder = Callable[[Pod, str], None]


class DefaultBinder(BindPlugin):
    name: ClassVar[str] = NAME

    def node_local(self, pod) -> bool:
        return True  # binding reads no other pod

    def __init__(self, args: Optional[dict] = None, handle: Any = None) -> None:
        super().__init__(args, handle)
        candidate = handle.services.get("binder") if handle is not None else None
        if candidate is None:
            candidate = (args or {}).get("binder")
        if candidate is not None and not callable(candidate):
            raise ValueError("binder: must be a callable binder(pod, node_name)")
        self._binder: Optional[Binder] = candidate

    def bind(self, state: CycleState, pod: Pod, node_name: str) -> Optional[Status]:
        if self._binder is None:
            return Status.as_error("DefaultBinder has no binder configured")
        try:
            self._binder(pod, node_name)
        except Exception as e:  # noqa: BLE001 - any failure of the binder is a bind error
            return Status.as_error(e)
        return None
