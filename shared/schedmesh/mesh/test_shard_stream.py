"""ShardStream: requests on one gRPC stream, each answer matched to its request in order, a
stream that ends failing every request unanswered and the next request opening another. A real
gRPC server on loopback, answering each request with its own bytes."""
from __future__ import annotations

import threading
import time
from concurrent import futures

import grpc
import pytest

from schedmesh.mesh.shard_stream import ShardStream, StreamFailed

METHOD = "/schedmesh.test.Shard/Batches"


class EchoShard:
    """Answers each request with its bytes; b"fail" ends the stream with FAILED_PRECONDITION,
    b"slow" is answered after `delay` seconds."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.streams = 0
        self.ended = 0  # streams whose requests ended (the caller closed its side)

    def batches(self, requests, context):
        self.streams += 1
        for request in requests:
            if request == b"fail":
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, "feed refused")
            if request == b"slow":
                time.sleep(self.delay)
            yield request
        self.ended += 1


@pytest.fixture
def shard_channel():
    shard = EchoShard(delay=1.0)
    server = grpc.server(futures.ThreadPoolExecutor(8))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("schedmesh.test.Shard", {
        "Batches": grpc.stream_stream_rpc_method_handler(shard.batches, lambda b: b, lambda b: b)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    ch = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield shard, ch.stream_stream(METHOD, request_serializer=lambda b: b, response_deserializer=lambda b: b)
    finally:
        ch.close()
        server.stop(0)


def test_answers_come_back_to_their_requests_from_many_senders(shard_channel):
    shard, method = shard_channel
    stream = ShardStream(method, "shard-0", timeout=10)
    got: dict[bytes, bytes] = {}

    def sender(k: int) -> None:
        for i in range(50):
            request = f"{k}:{i}".encode()
            got[request] = stream.send(request).result()
    threads = [threading.Thread(target=sender, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 200 and all(request == answer for request, answer in got.items())
    assert stream.opened == 1 and shard.streams == 1  # one stream for all of them
    stream.close()


def test_an_error_fails_the_requests_unanswered_and_the_next_request_opens_another(shard_channel):
    shard, method = shard_channel
    stream = ShardStream(method, "shard-0", timeout=10)
    assert stream.send(b"first").result() == b"first"
    refused, after = stream.send(b"fail"), stream.send(b"queued behind it")
    for answer in (refused, after):
        with pytest.raises(grpc.RpcError) as e:
            answer.result()
        assert e.value.code() is grpc.StatusCode.FAILED_PRECONDITION and "feed refused" in e.value.details()
    assert stream.send(b"again").result() == b"again"
    assert stream.opened == 2 and shard.streams == 2
    stream.close()


def test_a_request_not_answered_in_time_fails_and_cancels_the_stream(shard_channel):
    shard, method = shard_channel
    stream = ShardStream(method, "shard-0", timeout=0.2)
    slow = stream.send(b"slow")
    with pytest.raises(StreamFailed) as e:
        slow.result()
    assert e.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    # its answer, coming later on the cancelled stream, is never taken for the next request's
    stream.timeout = 10
    assert stream.send(b"next").result() == b"next"
    assert stream.opened == 2
    stream.close()


def test_a_shard_that_is_down_fails_the_request_at_once():
    ch = grpc.insecure_channel("127.0.0.1:1")  # nothing listens there
    stream = ShardStream(ch.stream_stream(METHOD, request_serializer=lambda b: b,
                                          response_deserializer=lambda b: b), "shard-0", timeout=10)
    t0 = time.monotonic()
    with pytest.raises(grpc.RpcError) as e:
        stream.send(b"hello").result()
    assert e.value.code() is grpc.StatusCode.UNAVAILABLE and time.monotonic() - t0 < 5
    ch.close()


def _answer_threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"{name}-answers"]


def test_an_idle_stream_is_closed_and_the_next_request_opens_another(shard_channel):
    shard, method = shard_channel
    stream = ShardStream(method, "idle-shard", timeout=10)
    assert stream.send(b"a").result() == b"a"
    assert not stream.close_if_idle(60.0)  # used just now
    assert stream.close_if_idle(0.0)
    deadline = time.monotonic() + 5
    while (shard.ended < 1 or _answer_threads("idle-shard")) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert shard.ended == 1  # the shard saw the requests end: no error, nothing cancelled
    assert not _answer_threads("idle-shard")  # and the thread reading answers is gone
    assert not stream.close_if_idle(0.0)  # nothing open
    assert stream.send(b"b").result() == b"b"
    assert (stream.opened, shard.streams) == (2, 2)


def test_a_stream_awaiting_an_answer_is_not_closed_as_idle(shard_channel):
    shard, method = shard_channel
    stream = ShardStream(method, "busy-shard", timeout=10)
    slow = stream.send(b"slow")  # answered after a second
    assert not stream.close_if_idle(0.0)
    assert slow.result() == b"slow"
    assert stream.send(b"c").result() == b"c"
    assert (stream.opened, shard.ended) == (1, 0)


def test_messages_larger_than_the_fixed_flow_control_window_pass_both_ways():
    """The mesh's gRPC options fix HTTP/2's window (no bandwidth-delay probing): a whole-cluster
    feed several times the window still goes out and its answer comes back, request after request."""
    from schedmesh.mesh.runtime import FLOW_CONTROL_WINDOW_BYTES, GRPC_OPTIONS
    shard = EchoShard()
    server = grpc.server(futures.ThreadPoolExecutor(2), options=GRPC_OPTIONS)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("schedmesh.test.Shard", {
        "Batches": grpc.stream_stream_rpc_method_handler(shard.batches, lambda b: b, lambda b: b)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    ch = grpc.insecure_channel(f"127.0.0.1:{port}", options=GRPC_OPTIONS)
    try:
        stream = ShardStream(ch.stream_stream(METHOD, request_serializer=lambda b: b,
                                              response_deserializer=lambda b: b), "shard-0", timeout=30)
        for i in range(3):
            big = bytes([i]) * (3 * FLOW_CONTROL_WINDOW_BYTES + 12345)
            assert stream.send(big).result() == big
        assert stream.opened == 1
        stream.close()
    finally:
        ch.close()
        server.stop(0)
