"""The preemption service: DefaultPreemption acted out (see docs/mesh.md, schedmesh.mesh.preemption_service)."""
