"""Kafka and TLS. The embedded Tansu 0.6.0 cannot serve TLS (pinned below), so `schedmesh up` keeps
Kafka plaintext on loopback. Compose and Kubernetes run Apache Kafka with SSL and client auth;
no Docker engine here, so the services' side of that (SCHEDMESH_KAFKA_TLS=1: every aiokafka
client of the bus talks SSL with the process's certificate) is checked against Tansu behind a
TLS-terminating proxy that, like Kafka's ssl.client.auth=required, admits only certificates of
the mesh's CA."""
from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest

from schedmesh.broker.embedded import find_tansu_binary, free_port
from schedmesh.bus import EventConsumer, EventProducer
from schedmesh.local.supervisor import kafka_answers
from schedmesh.security import identity as ids
from schedmesh.security.credentials import ENV_CA, ENV_CERT, ENV_KAFKA_TLS, ENV_KEY
from schedmesh.security.pki import make_pki

TOPIC = "schedmesh.tls-check"


@contextlib.contextmanager
def tansu(advertised_port: int | None = None):
    """A plaintext Tansu on a free loopback port, advertising `advertised_port` (the proxy's)."""
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    adv = f"tcp://127.0.0.1:{advertised_port or port}"
    proc = subprocess.Popen([find_tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", adv,
                             "--storage-engine", "memory://tansu/"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={"PATH": os.environ["PATH"]})
    try:
        deadline = time.time() + 20
        while not kafka_answers(port, 1):
            assert time.time() < deadline and proc.poll() is None, "tansu did not start"
            time.sleep(0.1)
        yield port
    finally:
        proc.send_signal(2)  # SIGINT stops Tansu at once
        proc.wait(10)


async def tls_proxy(listen_port: int, upstream_port: int, pki: Path) -> asyncio.AbstractServer:
    """TLS with required client certificates of the mesh's CA in front of a plaintext broker."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "kafka.crt"), str(pki / "kafka.key"))
    ctx.verify_mode = ssl.CERT_REQUIRED

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def handle(reader, writer) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    return await asyncio.start_server(handle, "127.0.0.1", listen_port, ssl=ctx)


def use_tls(monkeypatch, pki: Path, identity: str) -> None:
    monkeypatch.setenv(ENV_KAFKA_TLS, "1")
    monkeypatch.setenv(ENV_CA, str(pki / "ca.crt"))
    monkeypatch.setenv(ENV_CERT, str(pki / f"{identity}.crt"))
    monkeypatch.setenv(ENV_KEY, str(pki / f"{identity}.key"))


async def test_bus_talks_ssl_with_the_process_certificate(tmp_path: Path, monkeypatch) -> None:
    pki, forged = tmp_path / "pki", tmp_path / "forged"
    make_pki(pki, identities=[ids.KAFKA, ids.BINDER], clients=[])
    make_pki(forged, identities=[ids.BINDER], clients=[])
    proxy_port = free_port()
    with tansu(advertised_port=proxy_port) as broker_port:
        proxy = await tls_proxy(proxy_port, broker_port, pki)
        bootstrap = f"127.0.0.1:{proxy_port}"
        try:
            use_tls(monkeypatch, pki, ids.BINDER)
            producer = EventProducer(bootstrap, topics=[TOPIC], client_id="tls-producer")
            await producer.start(timeout=20)
            try:
                await producer.send(TOPIC, b"over-tls", key=b"k")
                await producer.flush()
            finally:
                await producer.stop()
            consumer = EventConsumer(bootstrap, [TOPIC], client_id="tls-consumer")
            await consumer.start(timeout=20)
            try:
                assert [r.value for r in await consumer.catch_up(20)] == [b"over-tls"]
            finally:
                await consumer.stop()
            # A certificate of another CA, and plaintext, get nowhere.
            use_tls(monkeypatch, forged, ids.BINDER)
            with pytest.raises(Exception):
                await EventProducer(bootstrap, topics=[TOPIC], client_id="forged").start(timeout=3)
            monkeypatch.delenv(ENV_KAFKA_TLS)
            with pytest.raises(Exception):
                await EventProducer(bootstrap, topics=[TOPIC], client_id="plaintext").start(timeout=3)
        finally:
            proxy.close()
            await proxy.wait_closed()


def test_kafka_tls_needs_the_certificate_variables(monkeypatch) -> None:
    from schedmesh.security.credentials import CredentialsError, kafka_client_options
    for k in (ENV_CA, ENV_CERT, ENV_KEY):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv(ENV_KAFKA_TLS, "1")
    with pytest.raises(CredentialsError, match="SCHEDMESH_KAFKA_TLS=1 needs SCHEDMESH_TLS_CA"):
        kafka_client_options()
    monkeypatch.setenv(ENV_KAFKA_TLS, "0")
    assert kafka_client_options() == {}


def test_embedded_tansu_serves_no_tls(tmp_path: Path) -> None:
    """Why `up` keeps Kafka plaintext: Tansu 0.6.0 lists --cert/--key, but refuses the two together,
    and with --cert alone its listener still speaks plaintext Kafka (a TLS ClientHello gets no
    answer). If a newer Tansu does TLS, this fails and the embedded broker can use it."""
    d = tmp_path / "pki"
    make_pki(d, identities=[ids.KAFKA], clients=[ids.ADMIN])
    binary = find_tansu_binary()
    both = subprocess.run([binary, "broker", "--cert", str(d / "kafka.crt"), "--key", str(d / "kafka.key")],
                          capture_output=True, text=True, timeout=30)
    assert both.returncode != 0 and "cannot be used with" in both.stderr
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen([binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                             "--storage-engine", "memory://tansu/", "--cert", str(d / "kafka.pem")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={"PATH": os.environ["PATH"]})
    try:
        deadline = time.time() + 20
        while not kafka_answers(port, 1) and time.time() < deadline:
            time.sleep(0.1)
        assert kafka_answers(port, 2), "plaintext Kafka answers on the --cert listener"
        ctx = ssl.create_default_context(cafile=str(d / "ca.crt"))
        ctx.load_cert_chain(str(d / f"{ids.ADMIN}.crt"), str(d / f"{ids.ADMIN}.key"))
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            with pytest.raises((ssl.SSLError, OSError)):
                ctx.wrap_socket(s, server_hostname="localhost").do_handshake()
    finally:
        proc.send_signal(2)
        proc.wait(10)
