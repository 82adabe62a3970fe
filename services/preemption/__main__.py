"""The preemption service: DefaultPreemption's PostFilter acted out (schedmesh.mesh.preemption_service)."""
from schedmesh.mesh.preemption_service import main

main()
