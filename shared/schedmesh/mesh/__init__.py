"""The mesh's shared logic: the replicated cluster cache, node partitioning, and the shard side
of Filter/Score fan-out. Services under services/ wire these to gRPC and Kafka."""
