"""What users applied, kept on local disk for a broker that keeps nothing (the embedded Tansu is
memory only): the queue-manager writes every object it publishes for Apply and every deletion
of one here, and at its start publishes again what the broker no longer has. So a whole-mesh
`down` then `up` (or a broker restart while the queue-manager is down) keeps the applied
namespaces, priority and runtime classes, PDBs, nodes and pods. Kept: the objects as applied. Not kept:
bindings and pod status (the kubelet agent that ran the pods is gone; the pods are scheduled
again), events.

The file is a journal of JSON lines {"topic", "key", "value" (the record, base64)}; a record
with value null deletes its key. A batch record of pods or nodes is written as published, in one
line, and read as one entry per object (keyed by uid or node name): the Apply path never decodes
what it just encoded (that was half a millisecond of the queue-manager's CPU per Apply). Reading
keeps the last entry per (topic, key); a torn last line (a crash while writing) is skipped.
`compact` rewrites it from what is live, one line per object."""
from __future__ import annotations

import base64
import json
import logging
import os
import threading
from pathlib import Path
from typing import Iterable, Optional

from google.protobuf.message import DecodeError

from schedmesh.bus.topics import (NAMESPACES as TOPIC_NAMESPACES, NODES as TOPIC_NODES, PDBS as TOPIC_PDBS,
                                  PODS as TOPIC_PODS, PRIORITY_CLASSES as TOPIC_PRIORITY_CLASSES)
from schedmesh.mesh.records import BATCH_KEY_PREFIX
from schedmesh.v1 import events_pb2

log = logging.getLogger("schedmesh.applied_store")

STATE_DIR_ENV = "SCHEDMESH_STATE_DIR"
JOURNAL = "applied.jsonl"
# Topics whose records the store keeps, in the order they are published again (what pods need
# first: namespaces, classes, budgets, nodes).
STORED_TOPICS = (TOPIC_NAMESPACES, TOPIC_PRIORITY_CLASSES, TOPIC_PDBS, TOPIC_NODES, TOPIC_PODS)
Record = tuple[str, str, bytes]


def _deleted(topic: str, value: bytes) -> bool:
    msg = {TOPIC_NAMESPACES: events_pb2.NamespaceRecord, TOPIC_PRIORITY_CLASSES: events_pb2.PriorityClassRecord,
           TOPIC_PDBS: events_pb2.PodDisruptionBudgetRecord, TOPIC_NODES: events_pb2.NodeRecord,
           TOPIC_PODS: events_pb2.PodRecord}[topic].FromString(value)
    return bool(msg.deleted)


def _entries(topic: str, key: str, value: bytes) -> list[tuple[str, Optional[bytes]]]:
    """The objects a published record holds, as (key, record or None when deleted): a pod batch
    one per pod (by uid; deltas, which are bindings and status, are not what users applied), a
    node batch one per node (by name), any other record itself."""
    if topic == TOPIC_PODS:
        rec = events_pb2.PodRecord.FromString(value)
        return [(item.pod.metadata.uid, None if item.deleted else item.SerializeToString())
                for item in (rec.batch or [rec]) if not item.HasField("update")]
    if topic == TOPIC_NODES and key.startswith(BATCH_KEY_PREFIX):
        return [(item.node.metadata.name, None if item.deleted else item.SerializeToString())
                for item in events_pb2.NodeRecord.FromString(value).batch]
    return [(key, None if _deleted(topic, value) else value)]


class AppliedStore:
    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / JOURNAL
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls) -> Optional["AppliedStore"]:
        """The store of a local mesh (`schedmesh up` sets SCHEDMESH_STATE_DIR), else None: with
        Apache Kafka (compose, Kubernetes) the broker's own storage keeps the topics."""
        d = os.environ.get(STATE_DIR_ENV, "").strip()
        return cls(d) if d else None

    def write(self, records: Iterable[Record]) -> None:
        """Journal records as published: a batch of pods or nodes as it is (split when read), any
        other record under its key; deletions become null values."""
        lines = []
        for topic, key, value in records:
            if topic not in STORED_TOPICS:
                continue
            if topic in (TOPIC_PODS, TOPIC_NODES) and key.startswith(BATCH_KEY_PREFIX):
                lines.append(self._line(topic, key, value))
            else:
                for k, v in _entries(topic, key, value):
                    lines.append(self._line(topic, k, v))
        self._append(lines)

    def forget(self, topic: str, keys: Iterable[str]) -> None:
        """Objects deleted by someone else (an ended pod its kubelet deleted, say)."""
        # not synced: called per deletion on a cache thread; the next write or compaction syncs it
        self._append([self._line(topic, k, None) for k in keys], sync=False)

    @staticmethod
    def _line(topic: str, key: str, value: Optional[bytes]) -> str:
        return json.dumps({"topic": topic, "key": key,
                           "value": base64.b64encode(value).decode() if value is not None else None}) + "\n"

    def _append(self, lines: list[str], sync: bool = True) -> None:
        if not lines:
            return
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.write("".join(lines))
            f.flush()
            if sync:
                os.fsync(f.fileno())

    def load(self) -> dict[tuple[str, str], bytes]:
        """(topic, key) -> the record last written, deleted keys left out."""
        out: dict[tuple[str, str], bytes] = {}
        try:
            f = open(self.path, encoding="utf-8")
        except FileNotFoundError:
            return out
        with f:
            for n, line in enumerate(f, 1):
                try:
                    d = json.loads(line)
                    key = (d["topic"], d["key"])
                    value = base64.b64decode(d["value"]) if d["value"] is not None else None
                except (ValueError, KeyError, TypeError):
                    log.warning("%s: line %d is not a record (a write cut short?); skipped", self.path, n)
                    continue
                if value is None:
                    out.pop(key, None)
                    continue
                if not key[1].startswith(BATCH_KEY_PREFIX):  # one object, split by write()
                    out[key] = value
                    continue
                try:
                    entries = _entries(key[0], key[1], value)
                except DecodeError:
                    log.warning("%s: line %d holds no readable record; skipped", self.path, n)
                    continue
                for k, v in entries:
                    if v is None:
                        out.pop((key[0], k), None)
                    else:
                        out[(key[0], k)] = v
        return out

    def records(self) -> list[Record]:
        """The stored objects as records to publish, in STORED_TOPICS order; pods as single records."""
        stored = self.load()
        return [(t, k, v) for topic in STORED_TOPICS for (t, k), v in stored.items() if t == topic]

    def compact(self) -> None:
        """Rewrite the journal with only what is live (atomically: a crash keeps the old file)."""
        with self._lock:
            stored = self.load()
            tmp = self.path.with_suffix(".tmp")
            with open(tmp, "w", encoding="utf-8") as f:
                f.write("".join(self._line(t, k, v) for (t, k), v in stored.items()))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
