"""The kubelet-eviction agent service: simulated nodes from a node-pool file (schedmesh.mesh.agent)."""
from schedmesh.mesh.agent import main

main()
