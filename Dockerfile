# One image for every schedmesh service: the command picks the service
# (python -m services.<name>). Build: docker build -t schedmesh:latest .
#
# Two stages. The first installs the pinned dependencies (requirements.lock, `make lock`) in a layer
# of their own, which stays cached until a lock file changes, and the pinned build tools
# (requirements-build.lock: setuptools, wheel, grpcio-tools) in a virtual environment of their
# own; then it builds the project's wheel with those tools (--no-build-isolation: pip would
# otherwise fetch the newest setuptools and grpcio-tools for the build, whose generated code could
# need a newer protobuf than the lock's) and installs it without resolving anything: setup.py's
# build hook runs grpc_tools.protoc on protos/, so the package carries the generated gRPC code.
# The second stage copies only the runtime virtual environment: no compiler, no build tools, no
# sources.
FROM python:3.11-slim AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/schedmesh/bin:$PATH

RUN python -m venv /opt/schedmesh && python -m venv /opt/build
# The dependency layer: only the lock files are in its context.
COPY requirements.lock requirements-build.lock /tmp/
RUN pip install -r /tmp/requirements.lock \
 && /opt/build/bin/pip install -r /tmp/requirements-build.lock

WORKDIR /src
COPY . .
RUN /opt/build/bin/pip wheel --no-build-isolation --no-deps --wheel-dir /tmp/wheels . \
 && pip install --no-deps /tmp/wheels/schedmesh-*.whl \
 && python -c "import schedmesh.v1.scheduling_pb2_grpc, grpc_health.v1.health_pb2, services.filter_worker" \
 && schedmesh --version

FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/schedmesh/bin:$PATH

COPY --from=build /opt/schedmesh /opt/schedmesh
WORKDIR /app
COPY deploy/docker/entrypoint.py /app/deploy/docker/entrypoint.py
RUN useradd --uid 10001 --user-group --create-home --home-dir /home/schedmesh --shell /usr/sbin/nologin schedmesh

# Numeric user so Kubernetes runAsNonRoot can verify it.
USER 10001:10001

# Every service listens on this port inside its container (SCHEDMESH_PORT) on all interfaces.
ENV SCHEDMESH_PORT=50051 \
    SCHEDMESH_HOST=0.0.0.0
EXPOSE 50051

# Derives the shard index of a scaled replica, then execs the command (deploy/docker/entrypoint.py).
ENTRYPOINT ["python", "/app/deploy/docker/entrypoint.py"]
CMD ["python", "-m", "services.queue_manager"]
