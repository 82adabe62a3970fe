"""The score-worker service: serves Score for one partition of the nodes (see docs/mesh.md)."""
