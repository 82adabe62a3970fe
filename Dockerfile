# One image for every schedmesh service: the command picks the service
# (python -m services.<name>). Build: docker build -t schedmesh:latest .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY . .

# Generated protobuf/gRPC code is never committed: generate it here (the same protoc step as
# `make protos`) before installing, so the installed package carries it.
RUN pip install "grpcio-tools>=1.60" \
 && python -m grpc_tools.protoc -Iprotos --python_out=shared --pyi_out=shared --grpc_python_out=shared \
      protos/schedmesh/v1/*.proto \
 && pip install . \
 && python -c "import schedmesh.v1.scheduling_pb2_grpc, grpc_health.v1.health_pb2, services.filter_worker" \
 && useradd --uid 10001 --user-group --create-home --home-dir /home/schedmesh --shell /usr/sbin/nologin schedmesh

# Numeric user so Kubernetes runAsNonRoot can verify it.
USER 10001:10001

# Every service listens on this port inside its container (SCHEDMESH_PORT) on all interfaces.
ENV SCHEDMESH_PORT=50051 \
    SCHEDMESH_HOST=0.0.0.0
EXPOSE 50051

# Derives the shard index of a scaled replica, then execs the command (deploy/docker/entrypoint.py).
ENTRYPOINT ["python", "/app/deploy/docker/entrypoint.py"]
CMD ["python", "-m", "services.queue_manager"]
