"""Protobuf and gRPC code generated from protos/schedmesh/v1 by `make protos` (not committed)."""
