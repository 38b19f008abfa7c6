from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReleaseOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RELEASE_OUTCOME_UNSPECIFIED: _ClassVar[ReleaseOutcome]
    RELEASE_OUTCOME_RELEASED: _ClassVar[ReleaseOutcome]
    RELEASE_OUTCOME_ALREADY_DELIVERED: _ClassVar[ReleaseOutcome]
    RELEASE_OUTCOME_ALREADY_CANCELLED: _ClassVar[ReleaseOutcome]
    RELEASE_OUTCOME_NOT_FOUND: _ClassVar[ReleaseOutcome]

class BlockOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BLOCK_OUTCOME_UNSPECIFIED: _ClassVar[BlockOutcome]
    BLOCK_OUTCOME_BLOCKED: _ClassVar[BlockOutcome]
    BLOCK_OUTCOME_ALREADY_BLOCKED: _ClassVar[BlockOutcome]
    BLOCK_OUTCOME_NOT_PENDING: _ClassVar[BlockOutcome]
RELEASE_OUTCOME_UNSPECIFIED: ReleaseOutcome
RELEASE_OUTCOME_RELEASED: ReleaseOutcome
RELEASE_OUTCOME_ALREADY_DELIVERED: ReleaseOutcome
RELEASE_OUTCOME_ALREADY_CANCELLED: ReleaseOutcome
RELEASE_OUTCOME_NOT_FOUND: ReleaseOutcome
BLOCK_OUTCOME_UNSPECIFIED: BlockOutcome
BLOCK_OUTCOME_BLOCKED: BlockOutcome
BLOCK_OUTCOME_ALREADY_BLOCKED: BlockOutcome
BLOCK_OUTCOME_NOT_PENDING: BlockOutcome

class EpochEntry(_message.Message):
    __slots__ = ("epoch", "start")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    start: int
    def __init__(self, epoch: _Optional[int] = ..., start: _Optional[int] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ("epoch", "lease_ms", "insync", "lease_token")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    INSYNC_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    lease_ms: int
    insync: _containers.RepeatedScalarFieldContainer[str]
    lease_token: int
    def __init__(self, epoch: _Optional[int] = ..., lease_ms: _Optional[int] = ..., insync: _Optional[_Iterable[str]] = ..., lease_token: _Optional[int] = ...) -> None: ...

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
    __slots__ = ("name", "shard", "address", "role", "epoch", "fenced", "lease_valid", "log_end", "flushed", "high_water", "insync", "replicas", "master", "streaming", "replication", "min_insync", "epochs", "failovers", "recovering", "lease_token", "leased")
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
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
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
    lease_token: int
    leased: bool
    def __init__(self, name: _Optional[str] = ..., shard: _Optional[int] = ..., address: _Optional[str] = ..., role: _Optional[str] = ..., epoch: _Optional[int] = ..., fenced: _Optional[bool] = ..., lease_valid: _Optional[bool] = ..., log_end: _Optional[int] = ..., flushed: _Optional[int] = ..., high_water: _Optional[int] = ..., insync: _Optional[_Iterable[str]] = ..., replicas: _Optional[_Iterable[_Union[ReplicaState, _Mapping]]] = ..., master: _Optional[str] = ..., streaming: _Optional[bool] = ..., replication: _Optional[str] = ..., min_insync: _Optional[int] = ..., epochs: _Optional[_Iterable[_Union[EpochEntry, _Mapping]]] = ..., failovers: _Optional[int] = ..., recovering: _Optional[bool] = ..., lease_token: _Optional[int] = ..., leased: _Optional[bool] = ...) -> None: ...

class PromoteRequest(_message.Message):
    __slots__ = ("epoch", "insync", "lease_ms", "lease_token")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    INSYNC_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    insync: _containers.RepeatedScalarFieldContainer[str]
    lease_ms: int
    lease_token: int
    def __init__(self, epoch: _Optional[int] = ..., insync: _Optional[_Iterable[str]] = ..., lease_ms: _Optional[int] = ..., lease_token: _Optional[int] = ...) -> None: ...

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
    __slots__ = ("position", "data", "epochs", "epoch", "log_end", "high_water", "truncate", "sent_ms", "receipt_key", "address")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LOG_END_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATER_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_FIELD_NUMBER: _ClassVar[int]
    SENT_MS_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_KEY_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    position: int
    data: bytes
    epochs: _containers.RepeatedCompositeFieldContainer[EpochEntry]
    epoch: int
    log_end: int
    high_water: int
    truncate: bool
    sent_ms: int
    receipt_key: bytes
    address: str
    def __init__(self, position: _Optional[int] = ..., data: _Optional[bytes] = ..., epochs: _Optional[_Iterable[_Union[EpochEntry, _Mapping]]] = ..., epoch: _Optional[int] = ..., log_end: _Optional[int] = ..., high_water: _Optional[int] = ..., truncate: _Optional[bool] = ..., sent_ms: _Optional[int] = ..., receipt_key: _Optional[bytes] = ..., address: _Optional[str] = ...) -> None: ...

class BeginExportRequest(_message.Message):
    __slots__ = ("partition_bytes", "since")
    PARTITION_BYTES_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    partition_bytes: int
    since: int
    def __init__(self, partition_bytes: _Optional[int] = ..., since: _Optional[int] = ...) -> None: ...

class ExportPartition(_message.Message):
    __slots__ = ("start", "end")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    start: int
    end: int
    def __init__(self, start: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...

class ExportPlan(_message.Message):
    __slots__ = ("snapshot", "shard", "epoch", "role", "position", "pending", "partitions", "idle_ms", "since")
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    IDLE_MS_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    snapshot: str
    shard: int
    epoch: int
    role: str
    position: int
    pending: int
    partitions: _containers.RepeatedCompositeFieldContainer[ExportPartition]
    idle_ms: int
    since: int
    def __init__(self, snapshot: _Optional[str] = ..., shard: _Optional[int] = ..., epoch: _Optional[int] = ..., role: _Optional[str] = ..., position: _Optional[int] = ..., pending: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[ExportPartition, _Mapping]]] = ..., idle_ms: _Optional[int] = ..., since: _Optional[int] = ...) -> None: ...

class ExportRequest(_message.Message):
    __slots__ = ("snapshot", "start", "end", "batch_rows")
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    BATCH_ROWS_FIELD_NUMBER: _ClassVar[int]
    snapshot: str
    start: int
    end: int
    batch_rows: int
    def __init__(self, snapshot: _Optional[str] = ..., start: _Optional[int] = ..., end: _Optional[int] = ..., batch_rows: _Optional[int] = ...) -> None: ...

class Headers(_message.Message):
    __slots__ = ("entries",)
    class EntriesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.ScalarMap[str, str]
    def __init__(self, entries: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ExportBatch(_message.Message):
    __slots__ = ("ids", "topics", "keys", "headers", "bodies", "deliver_at_ms", "accepted_ms", "roll_counts", "epochs", "positions", "forwarded_to", "blocked", "header_rows")
    IDS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    BODIES_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_MS_FIELD_NUMBER: _ClassVar[int]
    ROLL_COUNTS_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    FORWARDED_TO_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_FIELD_NUMBER: _ClassVar[int]
    HEADER_ROWS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    topics: _containers.RepeatedScalarFieldContainer[str]
    keys: _containers.RepeatedScalarFieldContainer[str]
    headers: _containers.RepeatedCompositeFieldContainer[Headers]
    bodies: _containers.RepeatedScalarFieldContainer[bytes]
    deliver_at_ms: _containers.RepeatedScalarFieldContainer[int]
    accepted_ms: _containers.RepeatedScalarFieldContainer[int]
    roll_counts: _containers.RepeatedScalarFieldContainer[int]
    epochs: _containers.RepeatedScalarFieldContainer[int]
    positions: _containers.RepeatedScalarFieldContainer[int]
    forwarded_to: _containers.RepeatedScalarFieldContainer[int]
    blocked: _containers.RepeatedScalarFieldContainer[bool]
    header_rows: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ids: _Optional[_Iterable[str]] = ..., topics: _Optional[_Iterable[str]] = ..., keys: _Optional[_Iterable[str]] = ..., headers: _Optional[_Iterable[_Union[Headers, _Mapping]]] = ..., bodies: _Optional[_Iterable[bytes]] = ..., deliver_at_ms: _Optional[_Iterable[int]] = ..., accepted_ms: _Optional[_Iterable[int]] = ..., roll_counts: _Optional[_Iterable[int]] = ..., epochs: _Optional[_Iterable[int]] = ..., positions: _Optional[_Iterable[int]] = ..., forwarded_to: _Optional[_Iterable[int]] = ..., blocked: _Optional[_Iterable[bool]] = ..., header_rows: _Optional[_Iterable[int]] = ...) -> None: ...

class EndExportRequest(_message.Message):
    __slots__ = ("snapshot",)
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    snapshot: str
    def __init__(self, snapshot: _Optional[str] = ...) -> None: ...

class EndExportResponse(_message.Message):
    __slots__ = ("ended",)
    ENDED_FIELD_NUMBER: _ClassVar[int]
    ended: bool
    def __init__(self, ended: _Optional[bool] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("ids", "target", "target_address", "job")
    IDS_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    TARGET_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    target: int
    target_address: str
    job: str
    def __init__(self, ids: _Optional[_Iterable[str]] = ..., target: _Optional[int] = ..., target_address: _Optional[str] = ..., job: _Optional[str] = ...) -> None: ...

class ReleaseResult(_message.Message):
    __slots__ = ("id", "outcome", "error")
    ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    id: str
    outcome: ReleaseOutcome
    error: str
    def __init__(self, id: _Optional[str] = ..., outcome: _Optional[_Union[ReleaseOutcome, str]] = ..., error: _Optional[str] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ReleaseResult]
    def __init__(self, results: _Optional[_Iterable[_Union[ReleaseResult, _Mapping]]] = ...) -> None: ...

class MovedMessage(_message.Message):
    __slots__ = ("source_id", "topic", "key", "headers", "body", "deliver_at_ms")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    source_id: str
    topic: str
    key: str
    headers: _containers.ScalarMap[str, str]
    body: bytes
    deliver_at_ms: int
    def __init__(self, source_id: _Optional[str] = ..., topic: _Optional[str] = ..., key: _Optional[str] = ..., headers: _Optional[_Mapping[str, str]] = ..., body: _Optional[bytes] = ..., deliver_at_ms: _Optional[int] = ...) -> None: ...

class ImportRequest(_message.Message):
    __slots__ = ("messages", "job")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[MovedMessage]
    job: str
    def __init__(self, messages: _Optional[_Iterable[_Union[MovedMessage, _Mapping]]] = ..., job: _Optional[str] = ...) -> None: ...

class ImportResult(_message.Message):
    __slots__ = ("id", "error")
    ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    id: str
    error: str
    def __init__(self, id: _Optional[str] = ..., error: _Optional[str] = ...) -> None: ...

class ImportResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ImportResult]
    def __init__(self, results: _Optional[_Iterable[_Union[ImportResult, _Mapping]]] = ...) -> None: ...

class PrepareRequest(_message.Message):
    __slots__ = ("owners", "topology_epoch", "hold_ms", "job")
    OWNERS_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_EPOCH_FIELD_NUMBER: _ClassVar[int]
    HOLD_MS_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    owners: int
    topology_epoch: int
    hold_ms: int
    job: str
    def __init__(self, owners: _Optional[int] = ..., topology_epoch: _Optional[int] = ..., hold_ms: _Optional[int] = ..., job: _Optional[str] = ...) -> None: ...

class PrepareResponse(_message.Message):
    __slots__ = ("held_since_ms",)
    HELD_SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    held_since_ms: int
    def __init__(self, held_since_ms: _Optional[int] = ...) -> None: ...

class BlockedMessage(_message.Message):
    __slots__ = ("id", "topic", "deliver_at_ms", "roll_count")
    ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    ROLL_COUNT_FIELD_NUMBER: _ClassVar[int]
    id: str
    topic: str
    deliver_at_ms: int
    roll_count: int
    def __init__(self, id: _Optional[str] = ..., topic: _Optional[str] = ..., deliver_at_ms: _Optional[int] = ..., roll_count: _Optional[int] = ...) -> None: ...

class AddBlockRequest(_message.Message):
    __slots__ = ("job", "start_ms", "end_ms", "rows")
    JOB_FIELD_NUMBER: _ClassVar[int]
    START_MS_FIELD_NUMBER: _ClassVar[int]
    END_MS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    job: str
    start_ms: int
    end_ms: int
    rows: _containers.RepeatedCompositeFieldContainer[BlockedMessage]
    def __init__(self, job: _Optional[str] = ..., start_ms: _Optional[int] = ..., end_ms: _Optional[int] = ..., rows: _Optional[_Iterable[_Union[BlockedMessage, _Mapping]]] = ...) -> None: ...

class BlockResult(_message.Message):
    __slots__ = ("id", "outcome", "error")
    ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    id: str
    outcome: BlockOutcome
    error: str
    def __init__(self, id: _Optional[str] = ..., outcome: _Optional[_Union[BlockOutcome, str]] = ..., error: _Optional[str] = ...) -> None: ...

class AddBlockResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[BlockResult]
    def __init__(self, results: _Optional[_Iterable[_Union[BlockResult, _Mapping]]] = ...) -> None: ...
