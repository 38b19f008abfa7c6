from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EpochEntry(_message.Message):
    __slots__ = ("epoch", "start")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    start: int
    def __init__(self, epoch: _Optional[int] = ..., start: _Optional[int] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ("epoch", "lease_ms", "insync")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    INSYNC_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    lease_ms: int
    insync: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, epoch: _Optional[int] = ..., lease_ms: _Optional[int] = ..., insync: _Optional[_Iterable[str]] = ...) -> None: ...

class ReplicaState(_message.Message):
    __slots__ = ("name", "written", "flushed", "lag_bytes", "lag_ms", "connected", "insync")
    NAME_FIELD_NUMBER: _ClassVar[int]
    WRITTEN_FIELD_NUMBER: _ClassVar[int]
    FLUSHED_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    LAG_MS_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    INSYNC_FIELD_NUMBER: _ClassVar[int]
    name: str
    written: int
    flushed: int
    lag_bytes: int
    lag_ms: int
    connected: bool
    insync: bool
    def __init__(self, name: _Optional[str] = ..., written: _Optional[int] = ..., flushed: _Optional[int] = ..., lag_bytes: _Optional[int] = ..., lag_ms: _Optional[int] = ..., connected: _Optional[bool] = ..., insync: _Optional[bool] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("name", "shard", "address", "role", "epoch", "fenced", "lease_valid", "log_end", "flushed", "high_water", "insync", "replicas", "master", "streaming", "replication", "min_insync", "epochs", "failovers", "recovering")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    LEASE_VALID_FIELD_NUMBER: _ClassVar[int]
    LOG_END_FIELD_NUMBER: _ClassVar[int]
    FLUSHED_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATER_FIELD_NUMBER: _ClassVar[int]
    INSYNC_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    MASTER_FIELD_NUMBER: _ClassVar[int]
    STREAMING_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FIELD_NUMBER: _ClassVar[int]
    MIN_INSYNC_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    FAILOVERS_FIELD_NUMBER: _ClassVar[int]
    RECOVERING_FIELD_NUMBER: _ClassVar[int]
    name: str
    shard: int
    address: str
    role: str
    epoch: int
    fenced: bool
    lease_valid: bool
    log_end: int
    flushed: int
    high_water: int
    insync: _containers.RepeatedScalarFieldContainer[str]
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaState]
    master: str
    streaming: bool
    replication: str
    min_insync: int
    epochs: _containers.RepeatedCompositeFieldContainer[EpochEntry]
    failovers: int
    recovering: bool
    def __init__(self, name: _Optional[str] = ..., shard: _Optional[int] = ..., address: _Optional[str] = ..., role: _Optional[str] = ..., epoch: _Optional[int] = ..., fenced: _Optional[bool] = ..., lease_valid: _Optional[bool] = ..., log_end: _Optional[int] = ..., flushed: _Optional[int] = ..., high_water: _Optional[int] = ..., insync: _Optional[_Iterable[str]] = ..., replicas: _Optional[_Iterable[_Union[ReplicaState, _Mapping]]] = ..., master: _Optional[str] = ..., streaming: _Optional[bool] = ..., replication: _Optional[str] = ..., min_insync: _Optional[int] = ..., epochs: _Optional[_Iterable[_Union[EpochEntry, _Mapping]]] = ..., failovers: _Optional[int] = ..., recovering: _Optional[bool] = ...) -> None: ...

class PromoteRequest(_message.Message):
    __slots__ = ("epoch", "insync", "lease_ms")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    INSYNC_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    insync: _containers.RepeatedScalarFieldContainer[str]
    lease_ms: int
    def __init__(self, epoch: _Optional[int] = ..., insync: _Optional[_Iterable[str]] = ..., lease_ms: _Optional[int] = ...) -> None: ...

class FollowRequest(_message.Message):
    __slots__ = ("epoch", "master")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    MASTER_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    master: str
    def __init__(self, epoch: _Optional[int] = ..., master: _Optional[str] = ...) -> None: ...

class FenceRequest(_message.Message):
    __slots__ = ("epoch",)
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    def __init__(self, epoch: _Optional[int] = ...) -> None: ...

class ReplicaReport(_message.Message):
    __slots__ = ("name", "epochs", "epoch", "written", "flushed")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    WRITTEN_FIELD_NUMBER: _ClassVar[int]
    FLUSHED_FIELD_NUMBER: _ClassVar[int]
    name: str
    epochs: _containers.RepeatedCompositeFieldContainer[EpochEntry]
    epoch: int
    written: int
    flushed: int
    def __init__(self, name: _Optional[str] = ..., epochs: _Optional[_Iterable[_Union[EpochEntry, _Mapping]]] = ..., epoch: _Optional[int] = ..., written: _Optional[int] = ..., flushed: _Optional[int] = ...) -> None: ...

class LogChunk(_message.Message):
    __slots__ = ("position", "data", "epochs", "epoch", "log_end", "high_water", "truncate", "sent_ms")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LOG_END_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATER_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_FIELD_NUMBER: _ClassVar[int]
    SENT_MS_FIELD_NUMBER: _ClassVar[int]
    position: int
    data: bytes
    epochs: _containers.RepeatedCompositeFieldContainer[EpochEntry]
    epoch: int
    log_end: int
    high_water: int
    truncate: bool
    sent_ms: int
    def __init__(self, position: _Optional[int] = ..., data: _Optional[bytes] = ..., epochs: _Optional[_Iterable[_Union[EpochEntry, _Mapping]]] = ..., epoch: _Optional[int] = ..., log_end: _Optional[int] = ..., high_water: _Optional[int] = ..., truncate: _Optional[bool] = ..., sent_ms: _Optional[int] = ...) -> None: ...
