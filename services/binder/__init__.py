"""The binder service: the authoritative per-node ledger (see docs/mesh.md, schedmesh.mesh.binder)."""
