"""The queue-manager's end of a shard's batch stream (FilterBatches, ScoreBatches).

A run's requests to one shard go on one long-lived gRPC stream instead of one call each: what a
call costs the shard besides the work asked (setting the call up, its metadata, the
interceptors, its server span) is paid once per stream. A request that brings no work cost a
shard 0.69-0.77 ms of CPU as a call and 0.41-0.48 ms on a stream; that fixed part per run is what
kept a shard's CPU per pod from falling as 1/N with N shards. Answers come back in the order of
the requests; an error ends the stream with the status the call would have had (every request
still unanswered fails with it) and the next request opens another.

A stream left idle is closed (`close_if_idle`; the caller's idle feeding asks every half second):
an open stream keeps two of this process's threads waking, grpc's channel spin thread and the
thread reading answers, whose wait grpc cuts into 0.1 s slices (with 4 + 4 shards, 16 threads
and about 6 ms of CPU a second in an idle queue-manager). The next request opens another.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Callable, Optional

import grpc

log = logging.getLogger("schedmesh.shard_stream")


class StreamFailed(grpc.RpcError):
    """A request the stream did not answer: no answer in time, or the stream ended first."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


class Answer(Future):
    """One request's answer; `result()` waits at most the stream's timeout, after which the
    stream is given up (its later answers would be matched to the wrong requests)."""

    def __init__(self, stream: "ShardStream", call, timeout: float) -> None:
        super().__init__()
        self._stream, self._call, self._timeout = stream, call, timeout

    def result(self, timeout: Optional[float] = None):
        timeout = self._timeout if timeout is None else timeout
        try:
            return super().result(timeout)
        except FutureTimeout:
            self._stream.give_up(self._call)
            raise StreamFailed(grpc.StatusCode.DEADLINE_EXCEEDED, f"no answer within {timeout:g}s") from None


class ShardStream:
    """Requests to one shard on one stream, opened at the first request and again after an error."""

    def __init__(self, method: Callable, name: str, timeout: float) -> None:
        """`method`: the stub's streaming method (`FilterWorkerStub(ch).FilterBatches`)."""
        self._method, self.name, self.timeout = method, name, timeout
        self._lock = threading.Lock()
        self._call = None
        self._requests: Optional[queue.SimpleQueue] = None
        self._awaited: deque[Answer] = deque()
        self.opened = 0  # streams opened (tests)
        self.last_sent = 0.0  # time.monotonic() of the last request

    def send(self, request) -> Answer:
        """Send `request` on the stream (opened if there is none); its answer, in time."""
        with self._lock:
            if self._call is None or self._call.done():  # (one that ended before its reader saw it too)
                self._open()
            answer = Answer(self, self._call, self.timeout)
            self._awaited.append(answer)
            self._requests.put(request)
            self.last_sent = time.monotonic()
        return answer

    def close_if_idle(self, idle_for: float) -> bool:
        """End the stream (its request side: the shard ends it as done, OK) when every request
        on it is answered and none was sent for `idle_for` seconds. Whether it was closed."""
        with self._lock:
            if (self._call is None or self._awaited
                    or time.monotonic() - self.last_sent < idle_for):
                return False
            requests = self._requests
            self._call = self._requests = None
        requests.put(None)  # (the reader then sees the stream end, with nothing left to answer)
        return True

    def _open(self) -> None:
        requests: queue.SimpleQueue = queue.SimpleQueue()

        def outgoing():
            while True:
                request = requests.get()
                if request is None:  # the stream ended or was closed: no more requests
                    return
                yield request
        call = self._method(outgoing())
        awaited: deque[Answer] = deque()
        self._call, self._requests, self._awaited = call, requests, awaited
        self.opened += 1
        threading.Thread(target=self._read, args=(call, requests, awaited), name=f"{self.name}-answers",
                         daemon=True).start()

    def _read(self, call, requests: queue.SimpleQueue, awaited: deque) -> None:
        """Match each answer to the oldest request unanswered; when the stream ends, fail the rest."""
        error: grpc.RpcError = StreamFailed(grpc.StatusCode.UNAVAILABLE, f"{self.name} ended the stream")
        try:
            for response in call:
                with self._lock:
                    answer = awaited.popleft() if awaited else None
                if answer is None:  # more answers than requests: not this protocol
                    error = StreamFailed(grpc.StatusCode.INTERNAL, f"{self.name} answered a request never sent")
                    call.cancel()
                    break
                answer.set_result(response)
        except grpc.RpcError as e:
            error = e
        with self._lock:
            if self._call is call:
                self._call = self._requests = None
            unanswered = list(awaited)
            awaited.clear()
        requests.put(None)  # ends the request iterator grpc's thread is reading
        if unanswered and error.code() is not grpc.StatusCode.CANCELLED:
            log.info("%s: stream ended (%s: %s); %d requests unanswered", self.name, error.code().name,
                     error.details(), len(unanswered))
        for answer in unanswered:  # (this reader is the only one to settle its stream's answers)
            answer.set_exception(error)

    def give_up(self, call) -> None:
        """Cancel `call`; the next request opens another stream at once."""
        with self._lock:
            if self._call is call:
                self._call = self._requests = None
        call.cancel()

    def close(self) -> None:
        with self._lock:
            call = self._call
        if call is not None:
            self.give_up(call)
