"""The filter-worker service: serves Filter for one partition of the nodes (see docs/mesh.md)."""
