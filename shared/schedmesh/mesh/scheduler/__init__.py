"""The queue-manager, in kube-scheduler's shape: scheduler.py (the Scheduler and its lifecycle),
eventhandlers.py (cluster events -> queue), schedule_one.py (the scheduling cycle),
binding_cycle.py, api.py (the Scheduler API), service.py (the process)."""
from schedmesh.mesh.scheduler.scheduler import QueueManager
from schedmesh.mesh.scheduler.service import serve
from schedmesh.mesh.scheduler.state import QueueManagerConfig

__all__ = ["QueueManager", "QueueManagerConfig", "serve"]
