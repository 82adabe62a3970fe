"""The mesh: every service's process (the queue-manager in scheduler/, the shards' worker, the
binder, the preemption service, the kubelet agent, the controller-manager in controllers/), the
runtime they share (runtime.py: gRPC server, health, the cache follower), the replicated cluster
cache, the records they exchange, and the shard fan-out and feeds. services/ holds only their
entry points (`python -m services.NAME`)."""
