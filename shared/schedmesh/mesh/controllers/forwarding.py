"""schedmesh.v1.Policy on the queue-manager: every call is forwarded to the controller-manager
(SCHEDMESH_CONTROLLER_MANAGER, host:port), which alone spends disruption budgets, so a client
needs only the scheduler's address. Refusals come back with their code, message and trailing
metadata (the Eviction API's HTTP status) unchanged. Each call carries the pods and nodes
topics' offsets this queue-manager has read, so the controller-manager answers from a view at
least as new (a pod listed here is never "not found" there because its cache is behind)."""
from __future__ import annotations

import os
from typing import Callable, Optional

import grpc

from schedmesh.bus.topics import NODES, PODS
from schedmesh.mesh.runtime import peer_channel
from schedmesh.v1 import policy_pb2_grpc

ENV_CONTROLLER_MANAGER = "SCHEDMESH_CONTROLLER_MANAGER"
FORWARD_TIMEOUT = 30.0


class PolicyForwarder(policy_pb2_grpc.PolicyServicer):
    def __init__(self, target: Optional[str] = None,
                 offsets: Optional[Callable[[], dict[str, int]]] = None) -> None:
        self.target = (target if target is not None else os.environ.get(ENV_CONTROLLER_MANAGER, "")).strip()
        self.offsets = offsets  # this queue-manager's cache's view (ClusterCache.view_offsets)
        self._channel: Optional[grpc.aio.Channel] = None
        self._stub: Optional[policy_pb2_grpc.PolicyStub] = None

    def _policy(self) -> policy_pb2_grpc.PolicyStub:
        if self._stub is None:
            self._channel = peer_channel(self.target, aio=True)
            self._stub = policy_pb2_grpc.PolicyStub(self._channel)
        return self._stub

    async def close(self) -> None:
        """Close the channel to the controller-manager (opened at the first call)."""
        if self._channel is not None:
            channel, self._channel, self._stub = self._channel, None, None
            await channel.close()

    async def _forward(self, method: str, request, context):
        if not self.target:
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                f"this scheduler has no controller-manager ({ENV_CONTROLLER_MANAGER} is not set): "
                                "evict, cordon, drain and taint need one")
        if self.offsets is not None and not request.offsets:
            request.offsets.update({k: v for k, v in self.offsets().items() if k.split("/", 1)[0] in (PODS, NODES)})
        try:
            return await getattr(self._policy(), method)(request, timeout=FORWARD_TIMEOUT)
        except grpc.aio.AioRpcError as e:
            details = e.details() or str(e.code())
            if e.code() == grpc.StatusCode.UNAVAILABLE:
                details = f"the controller-manager at {self.target} is not reachable: {details}"
            await context.abort(e.code(), details, trailing_metadata=tuple(e.trailing_metadata() or ()))

    async def Evict(self, request, context):
        return await self._forward("Evict", request, context)

    async def Cordon(self, request, context):
        return await self._forward("Cordon", request, context)

    async def Taint(self, request, context):
        return await self._forward("Taint", request, context)
