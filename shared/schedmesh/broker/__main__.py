"""``python -m schedmesh.broker``: run the embedded Tansu broker in the foreground.

Prints one ``ready`` line with the bootstrap address once a Kafka client can create a
topic, then runs until SIGINT/SIGTERM (or until the broker dies, whose exit code is
returned). Tansu dies with this process (on Linux), so a killed wrapper leaves no broker
behind.

The wrapper's event loop has the mesh services' watchdog (schedmesh.mesh.watchdog,
SCHEDMESH_WATCHDOG_SECONDS): a hung loop would no longer notice Tansu dying, so it exits
with code 70 instead and is restarted like a dead broker.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from schedmesh.broker.embedded import BrokerError, EmbeddedBroker
from schedmesh.mesh import cpu_affinity
from schedmesh.mesh.watchdog import LoopWatchdog


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m schedmesh.broker",
        description="Run the embedded memory-only Kafka-compatible broker (Tansu).",
    )
    parser.add_argument("--port", type=int, default=9092, help="listen port (0: pick a free one)")
    parser.add_argument("--host", default="127.0.0.1", help="listen and advertised address")
    parser.add_argument(
        "--log-file",
        default="-",
        help="broker output file; '-' (default) writes to this terminal",
    )
    parser.add_argument("--cluster-id", default=None, help="fixed cluster id (default: fresh)")
    parser.add_argument("--startup-timeout", type=float, default=20.0)
    return parser.parse_args(argv)


async def _run(args: argparse.Namespace) -> int:
    broker = EmbeddedBroker(
        port=args.port or None,
        host=args.host,
        log_path=args.log_file,
        cluster_id=args.cluster_id,
        startup_timeout=args.startup_timeout,
        # spawned from this (main) thread: killing this wrapper, even with SIGKILL, kills Tansu
        die_with_parent=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    watchdog = LoopWatchdog.from_env("broker")
    watchdog.start()
    try:
        return await _serve(broker, stop)
    finally:
        watchdog.stop()


async def _serve(broker: EmbeddedBroker, stop: asyncio.Event) -> int:
    try:
        await broker.astart()
    except BrokerError as exc:
        print(f"schedmesh broker: {exc}", file=sys.stderr)
        return 1
    print(
        f"schedmesh broker ready on {broker.bootstrap_servers} "
        f"(cluster id {broker.cluster_id}, pid {broker.pid})",
        flush=True,
    )
    while not stop.is_set():
        if not broker.running:
            code = broker.wait()
            print(f"schedmesh broker: tansu exited with code {code}", file=sys.stderr)
            return code or 1
        try:
            await asyncio.wait_for(stop.wait(), timeout=0.5)
        except TimeoutError:
            pass
    await broker.aclose()
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    cpu_affinity.pin_from_env()  # Tansu, started by this process, runs where it runs
    return asyncio.run(_run(_parse(argv)))


if __name__ == "__main__":
    sys.exit(main())
