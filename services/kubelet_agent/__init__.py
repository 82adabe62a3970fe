"""The kubelet-eviction agent service: simulated nodes (see docs/mesh.md, schedmesh.mesh.agent)."""
