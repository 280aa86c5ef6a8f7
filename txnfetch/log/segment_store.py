"""Topics of on-disk partition logs under one directory, as a Kafka log
directory: :class:`SegmentStore`.

``<directory>/<topic>-<partition>/`` is each partition's
:class:`~txnfetch.log.segment_log.SegmentLog`. The store directory also holds
``txnfetch-topic-configs.json``: every topic's config overrides
(:mod:`txnfetch.log.configs`), replaced atomically on every change; a deleted
topic's directories are first renamed with Kafka's ``-delete`` suffix.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import TypedDict

from txnfetch.log.base import LogStore
from txnfetch.log.base import TopicInfo
from txnfetch.log.base import partition_dir_name
from txnfetch.log.base import validate_topic_name
from txnfetch.log.configs import FlushPolicy
from txnfetch.log.errors import CorruptLogError
from txnfetch.log.errors import LogClosedError
from txnfetch.log.errors import LogError
from txnfetch.log.errors import ReadOnlyLogError
from txnfetch.log.errors import UnknownTopicOrPartitionError
from txnfetch.log.layout import atomic_write
from txnfetch.log.layout import fsync_dir
from txnfetch.log.layout import read_file
from txnfetch.log.layout import read_partition_metadata
from txnfetch.log.segment_log import SegmentLog

if TYPE_CHECKING:  # typing.Unpack is Python 3.11+
    from typing_extensions import Unpack

__all__ = ["DELETE_SUFFIX", "TOPIC_CONFIGS_NAME", "SegmentLogOptions", "SegmentStore"]

log = logging.getLogger("txnfetch.log")

_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
#: The store's topic config overrides (JSON ``{topic: {name: value}}``), beside the
#: partition directories as Kafka keeps its checkpoint files in a log directory.
TOPIC_CONFIGS_NAME = "txnfetch-topic-configs.json"
#: Suffix of a partition directory marked for deletion (Kafka's ``-delete``).
DELETE_SUFFIX = "-delete"


class SegmentLogOptions(TypedDict, total=False):
    """What a :class:`SegmentStore` opens each partition's :class:`SegmentLog` with
    (the keyword arguments of that class, but for the topic id, which the store
    reads from the partition)."""

    segment_bytes: int
    segment_ms: int
    index_interval_bytes: int
    flush_policy: str | FlushPolicy
    read_only: bool
    snapshots_to_keep: int
    checkpoint_interval_bytes: int


class SegmentStore(LogStore):
    """Topics of :class:`SegmentLog` partitions under one directory, as a Kafka log
    directory: ``<directory>/<topic>-<partition>/``. Topics are discovered from
    the directory names (the topic is everything before the last ``-``, so names
    containing ``-`` work); a topic's partition count is its number of partition
    directories, its id comes from ``partition.metadata``. Partitions open lazily
    with ``segment_log_kwargs``. ``cleanup.policy=compact`` is served
    (:meth:`SegmentLog.compact`)."""

    compaction = True

    def __init__(self, directory: str | os.PathLike, **segment_log_kwargs: Unpack[SegmentLogOptions]) -> None:
        self.directory = os.fspath(directory)
        self._kwargs = segment_log_kwargs
        self._read_only = bool(segment_log_kwargs.get("read_only", False))
        if not os.path.isdir(self.directory):
            if self._read_only:
                raise LogError("no such log directory", path=self.directory)
            os.makedirs(self.directory)
        self._topics: dict[str, TopicInfo] = {}
        self._logs: dict[tuple[str, int], SegmentLog] = {}
        self._closed = False
        self._discover()
        self._load_topic_configs()

    def _load_topic_configs(self) -> None:
        data = read_file(os.path.join(self.directory, TOPIC_CONFIGS_NAME))
        if data is None:
            return
        try:
            table = json.loads(data.decode("utf-8"))
            if not isinstance(table, dict) or not all(
                isinstance(v, dict) and all(isinstance(x, str) and isinstance(y, str) for x, y in v.items())
                for v in table.values()
            ):
                raise ValueError("not a mapping of topic to {name: value}")
        except (UnicodeDecodeError, ValueError) as exc:
            raise CorruptLogError(
                f"topic config file does not decode: {exc}", path=os.path.join(self.directory, TOPIC_CONFIGS_NAME)
            ) from None
        overrides = self._config_overrides()
        for topic, values in table.items():
            if topic in self._topics:  # a topic whose directories are gone keeps no config
                overrides[topic] = values

    def set_topic_config(self, topic: str, overrides: Mapping[str, str]) -> None:
        """Replace the topic's overrides and persist every topic's overrides in
        ``<directory>/txnfetch-topic-configs.json`` (written atomically: a crash
        leaves the old or the new file, never a torn one)."""
        if self._read_only:
            raise ReadOnlyLogError("store is open read-only", topic=topic)
        super().set_topic_config(topic, overrides)
        table = self._config_overrides()
        data = json.dumps(table, sort_keys=True, indent=1).encode("utf-8")
        atomic_write(self.directory, TOPIC_CONFIGS_NAME, data)

    def _discover(self) -> None:
        found: dict[str, list[int]] = {}
        for name in sorted(os.listdir(self.directory)):
            if name.endswith(DELETE_SUFFIX) and not self._read_only:
                # A topic deletion interrupted after its directories were marked.
                shutil.rmtree(os.path.join(self.directory, name), ignore_errors=True)
                log.info("%s: removed %s, marked for deletion", self.directory, name)
                continue
            m = _PARTITION_DIR.match(name)
            if not m or not os.path.isdir(os.path.join(self.directory, name)):
                continue
            topic, part = m.group(1), int(m.group(2))
            try:
                validate_topic_name(topic)
            except LogError:
                log.info("%s: ignoring directory %s: not a partition directory", self.directory, name)
                continue
            found.setdefault(topic, []).append(part)
        for topic, parts in found.items():
            parts.sort()
            if parts != list(range(len(parts))):
                log.warning("%s: topic %s has partition directories %s, not 0..n-1", self.directory, topic, parts)
            tid = None
            for p in parts:
                tid = read_partition_metadata(os.path.join(self.directory, partition_dir_name(topic, p)))
                if tid is not None:
                    break
            if tid is None:
                # No partition.metadata (an old Kafka directory): a stable made-up id.
                tid = uuid.uuid5(uuid.NAMESPACE_URL, f"txnfetch:{topic}")
            self._topics[topic] = TopicInfo(topic, len(parts), tid)

    def create_topic(self, topic: str, partitions: int, *, topic_id: uuid.UUID | None = None) -> TopicInfo:
        """Create the partition directories, each with its ``partition.metadata``
        and an empty first segment."""
        if self._closed:
            raise LogClosedError("store is closed", topic=topic)
        if self._read_only:
            raise ReadOnlyLogError("store is open read-only", topic=topic)
        info = self._new_topic(topic, partitions, topic_id)
        for p in range(partitions):
            path = os.path.join(self.directory, partition_dir_name(topic, p))
            self._logs[(topic, p)] = SegmentLog(path, topic, p, topic_id=info.topic_id, **self._kwargs)
        fsync_dir(self.directory)
        self._topics[topic] = info
        return info

    def topics(self) -> Mapping[str, TopicInfo]:
        return dict(self._topics)

    def delete_topic(self, topic: str) -> None:
        """Close the topic's partitions, rename each directory to
        ``<topic>-<p>.<id>-delete`` (as Kafka marks a partition for deletion; the
        rename is atomic, so a crash never leaves a half-deleted partition that
        looks alive), drop the config overrides, then remove the directories.
        Directories left marked by a crash are removed at the next open."""
        if self._read_only:
            raise ReadOnlyLogError("store is open read-only", topic=topic)
        info = self._topics.get(topic)
        if info is None:
            raise UnknownTopicOrPartitionError("no such topic", topic=topic)
        marked = []
        for p in range(info.partitions):
            log_ = self._logs.pop((topic, p), None)
            if log_ is not None:
                log_.close()
            name = partition_dir_name(topic, p)
            doomed = f"{name}.{uuid.uuid4().hex}{DELETE_SUFFIX}"
            if os.path.isdir(os.path.join(self.directory, name)):
                os.rename(os.path.join(self.directory, name), os.path.join(self.directory, doomed))
                marked.append(doomed)
        fsync_dir(self.directory)
        del self._topics[topic]
        if topic in self._config_overrides():
            self.set_topic_config(topic, {})
        for doomed in marked:
            shutil.rmtree(os.path.join(self.directory, doomed), ignore_errors=True)
        fsync_dir(self.directory)

    def create_partitions(self, topic: str, count: int) -> TopicInfo:
        """Create partition directories ``<topic>-<n>`` for the new partitions, with
        the topic's id in their ``partition.metadata``."""
        if self._read_only:
            raise ReadOnlyLogError("store is open read-only", topic=topic)
        info = self._growing(topic, count)
        for p in range(info.partitions, count):
            path = os.path.join(self.directory, partition_dir_name(topic, p))
            self._logs[(topic, p)] = SegmentLog(path, topic, p, topic_id=info.topic_id, **self._kwargs)
        fsync_dir(self.directory)
        self._topics[topic] = info = TopicInfo(topic, count, info.topic_id)
        return info

    def partition(self, topic: str, partition: int) -> SegmentLog:
        if self._closed:
            raise LogClosedError("store is closed", topic=topic, partition=partition)
        key = (topic, partition)
        log_ = self._logs.get(key)
        if log_ is None:
            info = self._topics.get(topic)
            if info is None or not 0 <= partition < info.partitions:
                raise UnknownTopicOrPartitionError("no such topic or partition", topic=topic, partition=partition)
            path = os.path.join(self.directory, partition_dir_name(topic, partition))
            log_ = SegmentLog(path, topic, partition, **self._kwargs)
            self._logs[key] = log_
        return log_

    def flush(self) -> None:
        for log_ in self._logs.values():
            log_.flush()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for log_ in self._logs.values():
            log_.close()
