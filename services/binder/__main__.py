"""The binder service: Binder.Bind over gRPC, bindings published to Kafka (schedmesh.mesh.binder)."""
from schedmesh.mesh.binder import main

main()
