from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class IfExists(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IF_EXISTS_UNSPECIFIED: _ClassVar[IfExists]
    IF_EXISTS_REJECT: _ClassVar[IfExists]
    IF_EXISTS_KEEP: _ClassVar[IfExists]
    IF_EXISTS_REPLACE: _ClassVar[IfExists]

class KeyOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KEY_OUTCOME_NEW: _ClassVar[KeyOutcome]
    KEY_OUTCOME_EXISTS: _ClassVar[KeyOutcome]
    KEY_OUTCOME_KEPT: _ClassVar[KeyOutcome]
    KEY_OUTCOME_REPLACED: _ClassVar[KeyOutcome]

class CancelOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CANCEL_OUTCOME_UNSPECIFIED: _ClassVar[CancelOutcome]
    CANCEL_OUTCOME_CANCELLED: _ClassVar[CancelOutcome]
    CANCEL_OUTCOME_NOT_FOUND: _ClassVar[CancelOutcome]
    CANCEL_OUTCOME_ALREADY_DELIVERED: _ClassVar[CancelOutcome]
    CANCEL_OUTCOME_ALREADY_CANCELLED: _ClassVar[CancelOutcome]

class MessageState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MESSAGE_STATE_UNSPECIFIED: _ClassVar[MessageState]
    MESSAGE_STATE_PENDING: _ClassVar[MessageState]
    MESSAGE_STATE_CANCELLED: _ClassVar[MessageState]
    MESSAGE_STATE_DELIVERED: _ClassVar[MessageState]
    MESSAGE_STATE_RESCHEDULED: _ClassVar[MessageState]

class AckOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACK_OUTCOME_UNSPECIFIED: _ClassVar[AckOutcome]
    ACK_OUTCOME_ACKED: _ClassVar[AckOutcome]
    ACK_OUTCOME_ALREADY_ACKED: _ClassVar[AckOutcome]
    ACK_OUTCOME_STALE: _ClassVar[AckOutcome]
    ACK_OUTCOME_NOT_FOUND: _ClassVar[AckOutcome]
    ACK_OUTCOME_INVALID_RECEIPT: _ClassVar[AckOutcome]

class BackoffKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BACKOFF_KIND_FIXED: _ClassVar[BackoffKind]
    BACKOFF_KIND_EXPONENTIAL: _ClassVar[BackoffKind]

class Jitter(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JITTER_NONE: _ClassVar[Jitter]
    JITTER_FULL: _ClassVar[Jitter]
    JITTER_EQUAL: _ClassVar[Jitter]

class ShardState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SHARD_STATE_ACTIVE: _ClassVar[ShardState]
    SHARD_STATE_JOINING: _ClassVar[ShardState]
    SHARD_STATE_LEAVING: _ClassVar[ShardState]

class CatchUp(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CATCH_UP_UNSPECIFIED: _ClassVar[CatchUp]
    CATCH_UP_NONE: _ClassVar[CatchUp]
    CATCH_UP_LATEST: _ClassVar[CatchUp]
    CATCH_UP_ALL: _ClassVar[CatchUp]
IF_EXISTS_UNSPECIFIED: IfExists
IF_EXISTS_REJECT: IfExists
IF_EXISTS_KEEP: IfExists
IF_EXISTS_REPLACE: IfExists
KEY_OUTCOME_NEW: KeyOutcome
KEY_OUTCOME_EXISTS: KeyOutcome
KEY_OUTCOME_KEPT: KeyOutcome
KEY_OUTCOME_REPLACED: KeyOutcome
CANCEL_OUTCOME_UNSPECIFIED: CancelOutcome
CANCEL_OUTCOME_CANCELLED: CancelOutcome
CANCEL_OUTCOME_NOT_FOUND: CancelOutcome
CANCEL_OUTCOME_ALREADY_DELIVERED: CancelOutcome
CANCEL_OUTCOME_ALREADY_CANCELLED: CancelOutcome
MESSAGE_STATE_UNSPECIFIED: MessageState
MESSAGE_STATE_PENDING: MessageState
MESSAGE_STATE_CANCELLED: MessageState
MESSAGE_STATE_DELIVERED: MessageState
MESSAGE_STATE_RESCHEDULED: MessageState
ACK_OUTCOME_UNSPECIFIED: AckOutcome
ACK_OUTCOME_ACKED: AckOutcome
ACK_OUTCOME_ALREADY_ACKED: AckOutcome
ACK_OUTCOME_STALE: AckOutcome
ACK_OUTCOME_NOT_FOUND: AckOutcome
ACK_OUTCOME_INVALID_RECEIPT: AckOutcome
BACKOFF_KIND_FIXED: BackoffKind
BACKOFF_KIND_EXPONENTIAL: BackoffKind
JITTER_NONE: Jitter
JITTER_FULL: Jitter
JITTER_EQUAL: Jitter
SHARD_STATE_ACTIVE: ShardState
SHARD_STATE_JOINING: ShardState
SHARD_STATE_LEAVING: ShardState
CATCH_UP_UNSPECIFIED: CatchUp
CATCH_UP_NONE: CatchUp
CATCH_UP_LATEST: CatchUp
CATCH_UP_ALL: CatchUp

class NewMessage(_message.Message):
    __slots__ = ("topic", "body", "key", "headers", "deliver_at_ms", "delay_ms", "delay_level", "if_exists", "dedup_window_ms")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    DELAY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    IF_EXISTS_FIELD_NUMBER: _ClassVar[int]
    DEDUP_WINDOW_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    body: bytes
    key: str
    headers: _containers.ScalarMap[str, str]
    deliver_at_ms: int
    delay_ms: int
    delay_level: int
    if_exists: IfExists
    dedup_window_ms: int
    def __init__(self, topic: _Optional[str] = ..., body: _Optional[bytes] = ..., key: _Optional[str] = ..., headers: _Optional[_Mapping[str, str]] = ..., deliver_at_ms: _Optional[int] = ..., delay_ms: _Optional[int] = ..., delay_level: _Optional[int] = ..., if_exists: _Optional[_Union[IfExists, str]] = ..., dedup_window_ms: _Optional[int] = ...) -> None: ...

class ItemError(_message.Message):
    __slots__ = ("code", "field", "message", "retry_after_ms")
    CODE_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    code: int
    field: str
    message: str
    retry_after_ms: int
    def __init__(self, code: _Optional[int] = ..., field: _Optional[str] = ..., message: _Optional[str] = ..., retry_after_ms: _Optional[int] = ...) -> None: ...

class ScheduleRequest(_message.Message):
    __slots__ = ("messages", "packed")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[NewMessage]
    packed: PackedSchedule
    def __init__(self, messages: _Optional[_Iterable[_Union[NewMessage, _Mapping]]] = ..., packed: _Optional[_Union[PackedSchedule, _Mapping]] = ...) -> None: ...

class Blobs(_message.Message):
    __slots__ = ("data", "ends")
    DATA_FIELD_NUMBER: _ClassVar[int]
    ENDS_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    ends: bytes
    def __init__(self, data: _Optional[bytes] = ..., ends: _Optional[bytes] = ...) -> None: ...

class IndexedHeaders(_message.Message):
    __slots__ = ("index", "headers")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    INDEX_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    index: int
    headers: _containers.ScalarMap[str, str]
    def __init__(self, index: _Optional[int] = ..., headers: _Optional[_Mapping[str, str]] = ...) -> None: ...

class IndexedError(_message.Message):
    __slots__ = ("index", "error")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    index: int
    error: ItemError
    def __init__(self, index: _Optional[int] = ..., error: _Optional[_Union[ItemError, _Mapping]] = ...) -> None: ...

class PackedSchedule(_message.Message):
    __slots__ = ("topics", "topic_index", "bodies", "keys", "deliver_at_ms", "delay_ms", "delay_level", "headers", "if_exists", "dedup_window_ms")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_INDEX_FIELD_NUMBER: _ClassVar[int]
    BODIES_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    DELAY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    IF_EXISTS_FIELD_NUMBER: _ClassVar[int]
    DEDUP_WINDOW_MS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    topic_index: bytes
    bodies: Blobs
    keys: Blobs
    deliver_at_ms: bytes
    delay_ms: bytes
    delay_level: bytes
    headers: _containers.RepeatedCompositeFieldContainer[IndexedHeaders]
    if_exists: bytes
    dedup_window_ms: bytes
    def __init__(self, topics: _Optional[_Iterable[str]] = ..., topic_index: _Optional[bytes] = ..., bodies: _Optional[_Union[Blobs, _Mapping]] = ..., keys: _Optional[_Union[Blobs, _Mapping]] = ..., deliver_at_ms: _Optional[bytes] = ..., delay_ms: _Optional[bytes] = ..., delay_level: _Optional[bytes] = ..., headers: _Optional[_Iterable[_Union[IndexedHeaders, _Mapping]]] = ..., if_exists: _Optional[bytes] = ..., dedup_window_ms: _Optional[bytes] = ...) -> None: ...

class PackedScheduled(_message.Message):
    __slots__ = ("ids", "deliver_at_ms", "errors", "key_outcomes")
    IDS_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    KEY_OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    ids: Blobs
    deliver_at_ms: bytes
    errors: _containers.RepeatedCompositeFieldContainer[IndexedError]
    key_outcomes: bytes
    def __init__(self, ids: _Optional[_Union[Blobs, _Mapping]] = ..., deliver_at_ms: _Optional[bytes] = ..., errors: _Optional[_Iterable[_Union[IndexedError, _Mapping]]] = ..., key_outcomes: _Optional[bytes] = ...) -> None: ...

class ScheduleResult(_message.Message):
    __slots__ = ("id", "deliver_at_ms", "error", "key_outcome")
    ID_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    KEY_OUTCOME_FIELD_NUMBER: _ClassVar[int]
    id: str
    deliver_at_ms: int
    error: ItemError
    key_outcome: KeyOutcome
    def __init__(self, id: _Optional[str] = ..., deliver_at_ms: _Optional[int] = ..., error: _Optional[_Union[ItemError, _Mapping]] = ..., key_outcome: _Optional[_Union[KeyOutcome, str]] = ...) -> None: ...

class ScheduleResponse(_message.Message):
    __slots__ = ("results", "topology_epoch", "packed")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ScheduleResult]
    topology_epoch: int
    packed: PackedScheduled
    def __init__(self, results: _Optional[_Iterable[_Union[ScheduleResult, _Mapping]]] = ..., topology_epoch: _Optional[int] = ..., packed: _Optional[_Union[PackedScheduled, _Mapping]] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("ids", "topic", "keys")
    IDS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    topic: str
    keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ids: _Optional[_Iterable[str]] = ..., topic: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ...) -> None: ...

class CancelResult(_message.Message):
    __slots__ = ("id", "outcome", "error", "key", "cancelled")
    ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    id: str
    outcome: CancelOutcome
    error: ItemError
    key: str
    cancelled: int
    def __init__(self, id: _Optional[str] = ..., outcome: _Optional[_Union[CancelOutcome, str]] = ..., error: _Optional[_Union[ItemError, _Mapping]] = ..., key: _Optional[str] = ..., cancelled: _Optional[int] = ...) -> None: ...

class CancelResponse(_message.Message):
    __slots__ = ("results", "topology_epoch")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_EPOCH_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[CancelResult]
    topology_epoch: int
    def __init__(self, results: _Optional[_Iterable[_Union[CancelResult, _Mapping]]] = ..., topology_epoch: _Optional[int] = ...) -> None: ...

class RescheduleRequest(_message.Message):
    __slots__ = ("id", "deliver_at_ms", "delay_ms", "topic", "key")
    ID_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    id: str
    deliver_at_ms: int
    delay_ms: int
    topic: str
    key: str
    def __init__(self, id: _Optional[str] = ..., deliver_at_ms: _Optional[int] = ..., delay_ms: _Optional[int] = ..., topic: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class RescheduleResponse(_message.Message):
    __slots__ = ("id", "deliver_at_ms", "ids")
    ID_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    id: str
    deliver_at_ms: int
    ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[str] = ..., deliver_at_ms: _Optional[int] = ..., ids: _Optional[_Iterable[str]] = ...) -> None: ...

class LookupRequest(_message.Message):
    __slots__ = ("id", "topic", "key")
    ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    id: str
    topic: str
    key: str
    def __init__(self, id: _Optional[str] = ..., topic: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class LookupResponse(_message.Message):
    __slots__ = ("id", "state", "topic", "deliver_at_ms", "accepted_at_ms", "key", "headers", "body", "key_matches", "key_ids", "key_messages")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    KEY_MATCHES_FIELD_NUMBER: _ClassVar[int]
    KEY_IDS_FIELD_NUMBER: _ClassVar[int]
    KEY_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    id: str
    state: MessageState
    topic: str
    deliver_at_ms: int
    accepted_at_ms: int
    key: str
    headers: _containers.ScalarMap[str, str]
    body: bytes
    key_matches: int
    key_ids: _containers.RepeatedScalarFieldContainer[str]
    key_messages: _containers.RepeatedCompositeFieldContainer[LookupResponse]
    def __init__(self, id: _Optional[str] = ..., state: _Optional[_Union[MessageState, str]] = ..., topic: _Optional[str] = ..., deliver_at_ms: _Optional[int] = ..., accepted_at_ms: _Optional[int] = ..., key: _Optional[str] = ..., headers: _Optional[_Mapping[str, str]] = ..., body: _Optional[bytes] = ..., key_matches: _Optional[int] = ..., key_ids: _Optional[_Iterable[str]] = ..., key_messages: _Optional[_Iterable[_Union[LookupResponse, _Mapping]]] = ...) -> None: ...

class ReceiveRequest(_message.Message):
    __slots__ = ("topic", "group", "max_messages", "wait_ms", "invisible_ms", "auto_ack", "packed")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_MS_FIELD_NUMBER: _ClassVar[int]
    AUTO_ACK_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    max_messages: int
    wait_ms: int
    invisible_ms: int
    auto_ack: bool
    packed: bool
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ..., max_messages: _Optional[int] = ..., wait_ms: _Optional[int] = ..., invisible_ms: _Optional[int] = ..., auto_ack: _Optional[bool] = ..., packed: _Optional[bool] = ...) -> None: ...

class ReceivedMessage(_message.Message):
    __slots__ = ("id", "topic", "key", "headers", "body", "deliver_at_ms", "delivered_at_ms", "receipt", "attempt")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    id: str
    topic: str
    key: str
    headers: _containers.ScalarMap[str, str]
    body: bytes
    deliver_at_ms: int
    delivered_at_ms: int
    receipt: str
    attempt: int
    def __init__(self, id: _Optional[str] = ..., topic: _Optional[str] = ..., key: _Optional[str] = ..., headers: _Optional[_Mapping[str, str]] = ..., body: _Optional[bytes] = ..., deliver_at_ms: _Optional[int] = ..., delivered_at_ms: _Optional[int] = ..., receipt: _Optional[str] = ..., attempt: _Optional[int] = ...) -> None: ...

class ReceiveResponse(_message.Message):
    __slots__ = ("messages", "topology_epoch", "packed")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ReceivedMessage]
    topology_epoch: int
    packed: PackedReceived
    def __init__(self, messages: _Optional[_Iterable[_Union[ReceivedMessage, _Mapping]]] = ..., topology_epoch: _Optional[int] = ..., packed: _Optional[_Union[PackedReceived, _Mapping]] = ...) -> None: ...

class PackedReceived(_message.Message):
    __slots__ = ("topic", "ids", "bodies", "keys", "headers", "deliver_at_ms", "delivered_at_ms", "receipts", "attempts")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    BODIES_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    ids: Blobs
    bodies: Blobs
    keys: Blobs
    headers: _containers.RepeatedCompositeFieldContainer[IndexedHeaders]
    deliver_at_ms: bytes
    delivered_at_ms: bytes
    receipts: Blobs
    attempts: bytes
    def __init__(self, topic: _Optional[str] = ..., ids: _Optional[_Union[Blobs, _Mapping]] = ..., bodies: _Optional[_Union[Blobs, _Mapping]] = ..., keys: _Optional[_Union[Blobs, _Mapping]] = ..., headers: _Optional[_Iterable[_Union[IndexedHeaders, _Mapping]]] = ..., deliver_at_ms: _Optional[bytes] = ..., delivered_at_ms: _Optional[bytes] = ..., receipts: _Optional[_Union[Blobs, _Mapping]] = ..., attempts: _Optional[bytes] = ...) -> None: ...

class AckRequest(_message.Message):
    __slots__ = ("topic", "group", "receipts", "packed_receipts")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    PACKED_RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    receipts: _containers.RepeatedScalarFieldContainer[str]
    packed_receipts: Blobs
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ..., receipts: _Optional[_Iterable[str]] = ..., packed_receipts: _Optional[_Union[Blobs, _Mapping]] = ...) -> None: ...

class AckResult(_message.Message):
    __slots__ = ("receipt", "outcome", "error")
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    receipt: str
    outcome: AckOutcome
    error: ItemError
    def __init__(self, receipt: _Optional[str] = ..., outcome: _Optional[_Union[AckOutcome, str]] = ..., error: _Optional[_Union[ItemError, _Mapping]] = ...) -> None: ...

class AckResponse(_message.Message):
    __slots__ = ("results", "topology_epoch", "outcomes", "errors")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_EPOCH_FIELD_NUMBER: _ClassVar[int]
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[AckResult]
    topology_epoch: int
    outcomes: bytes
    errors: _containers.RepeatedCompositeFieldContainer[IndexedError]
    def __init__(self, results: _Optional[_Iterable[_Union[AckResult, _Mapping]]] = ..., topology_epoch: _Optional[int] = ..., outcomes: _Optional[bytes] = ..., errors: _Optional[_Iterable[_Union[IndexedError, _Mapping]]] = ...) -> None: ...

class ChangeInvisibilityRequest(_message.Message):
    __slots__ = ("topic", "group", "receipts", "invisible_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    receipts: _containers.RepeatedScalarFieldContainer[str]
    invisible_ms: int
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ..., receipts: _Optional[_Iterable[str]] = ..., invisible_ms: _Optional[int] = ...) -> None: ...

class ChangeInvisibilityResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[AckResult]
    def __init__(self, results: _Optional[_Iterable[_Union[AckResult, _Mapping]]] = ...) -> None: ...

class NackRequest(_message.Message):
    __slots__ = ("topic", "group", "receipts")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    receipts: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ..., receipts: _Optional[_Iterable[str]] = ...) -> None: ...

class NackResponse(_message.Message):
    __slots__ = ("results", "topology_epoch")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_EPOCH_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[AckResult]
    topology_epoch: int
    def __init__(self, results: _Optional[_Iterable[_Union[AckResult, _Mapping]]] = ..., topology_epoch: _Optional[int] = ...) -> None: ...

class Backoff(_message.Message):
    __slots__ = ("kind", "initial_ms", "multiplier", "max_ms", "jitter")
    KIND_FIELD_NUMBER: _ClassVar[int]
    INITIAL_MS_FIELD_NUMBER: _ClassVar[int]
    MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    MAX_MS_FIELD_NUMBER: _ClassVar[int]
    JITTER_FIELD_NUMBER: _ClassVar[int]
    kind: BackoffKind
    initial_ms: int
    multiplier: float
    max_ms: int
    jitter: Jitter
    def __init__(self, kind: _Optional[_Union[BackoffKind, str]] = ..., initial_ms: _Optional[int] = ..., multiplier: _Optional[float] = ..., max_ms: _Optional[int] = ..., jitter: _Optional[_Union[Jitter, str]] = ...) -> None: ...

class GroupPolicy(_message.Message):
    __slots__ = ("max_attempts", "backoff", "rate_per_s", "burst", "max_in_flight", "paused", "push")
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_FIELD_NUMBER: _ClassVar[int]
    RATE_PER_S_FIELD_NUMBER: _ClassVar[int]
    BURST_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    PUSH_FIELD_NUMBER: _ClassVar[int]
    max_attempts: int
    backoff: Backoff
    rate_per_s: float
    burst: int
    max_in_flight: int
    paused: bool
    push: PushTarget
    def __init__(self, max_attempts: _Optional[int] = ..., backoff: _Optional[_Union[Backoff, _Mapping]] = ..., rate_per_s: _Optional[float] = ..., burst: _Optional[int] = ..., max_in_flight: _Optional[int] = ..., paused: _Optional[bool] = ..., push: _Optional[_Union[PushTarget, _Mapping]] = ...) -> None: ...

class PushTarget(_message.Message):
    __slots__ = ("url", "method", "headers", "timeout_ms", "ca_bundle", "secret_ref")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    URL_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    CA_BUNDLE_FIELD_NUMBER: _ClassVar[int]
    SECRET_REF_FIELD_NUMBER: _ClassVar[int]
    url: str
    method: str
    headers: _containers.ScalarMap[str, str]
    timeout_ms: int
    ca_bundle: str
    secret_ref: str
    def __init__(self, url: _Optional[str] = ..., method: _Optional[str] = ..., headers: _Optional[_Mapping[str, str]] = ..., timeout_ms: _Optional[int] = ..., ca_bundle: _Optional[str] = ..., secret_ref: _Optional[str] = ...) -> None: ...

class SetGroupPolicyRequest(_message.Message):
    __slots__ = ("topic", "group", "policy")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    policy: GroupPolicy
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ..., policy: _Optional[_Union[GroupPolicy, _Mapping]] = ...) -> None: ...

class GetGroupPolicyRequest(_message.Message):
    __slots__ = ("topic", "group")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ...) -> None: ...

class PauseGroupRequest(_message.Message):
    __slots__ = ("topic", "group")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ...) -> None: ...

class GroupPolicyResponse(_message.Message):
    __slots__ = ("topic", "group", "policy", "explicit", "node")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    EXPLICIT_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    policy: GroupPolicy
    explicit: bool
    node: NodeStats
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ..., policy: _Optional[_Union[GroupPolicy, _Mapping]] = ..., explicit: _Optional[bool] = ..., node: _Optional[_Union[NodeStats, _Mapping]] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("groups", "node")
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[GroupPolicyResponse]
    node: NodeStats
    def __init__(self, groups: _Optional[_Iterable[_Union[GroupPolicyResponse, _Mapping]]] = ..., node: _Optional[_Union[NodeStats, _Mapping]] = ...) -> None: ...

class NodeStats(_message.Message):
    __slots__ = ("shard", "epoch", "role", "commitlog_end", "topology_epoch", "address")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    COMMITLOG_END_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    shard: int
    epoch: int
    role: str
    commitlog_end: int
    topology_epoch: int
    address: str
    def __init__(self, shard: _Optional[int] = ..., epoch: _Optional[int] = ..., role: _Optional[str] = ..., commitlog_end: _Optional[int] = ..., topology_epoch: _Optional[int] = ..., address: _Optional[str] = ...) -> None: ...

class GetRouteRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class ShardRoute(_message.Message):
    __slots__ = ("index", "master", "replicas", "epoch", "state", "admin")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    MASTER_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    index: int
    master: str
    replicas: _containers.RepeatedScalarFieldContainer[str]
    epoch: int
    state: ShardState
    admin: str
    def __init__(self, index: _Optional[int] = ..., master: _Optional[str] = ..., replicas: _Optional[_Iterable[str]] = ..., epoch: _Optional[int] = ..., state: _Optional[_Union[ShardState, str]] = ..., admin: _Optional[str] = ...) -> None: ...

class GetRouteResponse(_message.Message):
    __slots__ = ("topology_epoch", "shard_count", "shards")
    TOPOLOGY_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SHARD_COUNT_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    topology_epoch: int
    shard_count: int
    shards: _containers.RepeatedCompositeFieldContainer[ShardRoute]
    def __init__(self, topology_epoch: _Optional[int] = ..., shard_count: _Optional[int] = ..., shards: _Optional[_Iterable[_Union[ShardRoute, _Mapping]]] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class DueBucket(_message.Message):
    __slots__ = ("within_ms", "count")
    WITHIN_MS_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    within_ms: int
    count: int
    def __init__(self, within_ms: _Optional[int] = ..., count: _Optional[int] = ...) -> None: ...

class TopicStats(_message.Message):
    __slots__ = ("topic", "pending", "delivered", "cancelled", "group_backlog", "due", "group_dead_lettered", "groups")
    class GroupBacklogEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class GroupDeadLetteredEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    GROUP_BACKLOG_FIELD_NUMBER: _ClassVar[int]
    DUE_FIELD_NUMBER: _ClassVar[int]
    GROUP_DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    pending: int
    delivered: int
    cancelled: int
    group_backlog: _containers.ScalarMap[str, int]
    due: _containers.RepeatedCompositeFieldContainer[DueBucket]
    group_dead_lettered: _containers.ScalarMap[str, int]
    groups: _containers.RepeatedCompositeFieldContainer[GroupStats]
    def __init__(self, topic: _Optional[str] = ..., pending: _Optional[int] = ..., delivered: _Optional[int] = ..., cancelled: _Optional[int] = ..., group_backlog: _Optional[_Mapping[str, int]] = ..., due: _Optional[_Iterable[_Union[DueBucket, _Mapping]]] = ..., group_dead_lettered: _Optional[_Mapping[str, int]] = ..., groups: _Optional[_Iterable[_Union[GroupStats, _Mapping]]] = ...) -> None: ...

class AttemptCount(_message.Message):
    __slots__ = ("attempt", "count")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    count: int
    def __init__(self, attempt: _Optional[int] = ..., count: _Optional[int] = ...) -> None: ...

class GroupStats(_message.Message):
    __slots__ = ("group", "policy", "explicit", "paused", "in_flight", "in_flight_limit", "waiting", "attempts", "next_retry_at_ms", "throttled", "retries", "push")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    EXPLICIT_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_LIMIT_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_RETRY_AT_MS_FIELD_NUMBER: _ClassVar[int]
    THROTTLED_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    PUSH_FIELD_NUMBER: _ClassVar[int]
    group: str
    policy: GroupPolicy
    explicit: bool
    paused: bool
    in_flight: int
    in_flight_limit: int
    waiting: int
    attempts: _containers.RepeatedCompositeFieldContainer[AttemptCount]
    next_retry_at_ms: int
    throttled: int
    retries: int
    push: PushStats
    def __init__(self, group: _Optional[str] = ..., policy: _Optional[_Union[GroupPolicy, _Mapping]] = ..., explicit: _Optional[bool] = ..., paused: _Optional[bool] = ..., in_flight: _Optional[int] = ..., in_flight_limit: _Optional[int] = ..., waiting: _Optional[int] = ..., attempts: _Optional[_Iterable[_Union[AttemptCount, _Mapping]]] = ..., next_retry_at_ms: _Optional[int] = ..., throttled: _Optional[int] = ..., retries: _Optional[int] = ..., push: _Optional[_Union[PushStats, _Mapping]] = ...) -> None: ...

class PushStats(_message.Message):
    __slots__ = ("target", "state", "requests", "in_flight", "consecutive_failures", "last_success_ms", "not_before_ms", "acks_lost", "latency_ms_p50", "latency_ms_p99", "lateness_ms_p50", "lateness_ms_p99")
    class RequestsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    TARGET_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    CONSECUTIVE_FAILURES_FIELD_NUMBER: _ClassVar[int]
    LAST_SUCCESS_MS_FIELD_NUMBER: _ClassVar[int]
    NOT_BEFORE_MS_FIELD_NUMBER: _ClassVar[int]
    ACKS_LOST_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_P50_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_P99_FIELD_NUMBER: _ClassVar[int]
    LATENESS_MS_P50_FIELD_NUMBER: _ClassVar[int]
    LATENESS_MS_P99_FIELD_NUMBER: _ClassVar[int]
    target: str
    state: str
    requests: _containers.ScalarMap[str, int]
    in_flight: int
    consecutive_failures: int
    last_success_ms: int
    not_before_ms: int
    acks_lost: int
    latency_ms_p50: int
    latency_ms_p99: int
    lateness_ms_p50: int
    lateness_ms_p99: int
    def __init__(self, target: _Optional[str] = ..., state: _Optional[str] = ..., requests: _Optional[_Mapping[str, int]] = ..., in_flight: _Optional[int] = ..., consecutive_failures: _Optional[int] = ..., last_success_ms: _Optional[int] = ..., not_before_ms: _Optional[int] = ..., acks_lost: _Optional[int] = ..., latency_ms_p50: _Optional[int] = ..., latency_ms_p99: _Optional[int] = ..., lateness_ms_p50: _Optional[int] = ..., lateness_ms_p99: _Optional[int] = ...) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("topics", "lateness_ms_p50", "lateness_ms_p99", "release_lag_ms", "node", "schedules")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    LATENESS_MS_P50_FIELD_NUMBER: _ClassVar[int]
    LATENESS_MS_P99_FIELD_NUMBER: _ClassVar[int]
    RELEASE_LAG_MS_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicStats]
    lateness_ms_p50: int
    lateness_ms_p99: int
    release_lag_ms: int
    node: NodeStats
    schedules: ScheduleStats
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicStats, _Mapping]]] = ..., lateness_ms_p50: _Optional[int] = ..., lateness_ms_p99: _Optional[int] = ..., release_lag_ms: _Optional[int] = ..., node: _Optional[_Union[NodeStats, _Mapping]] = ..., schedules: _Optional[_Union[ScheduleStats, _Mapping]] = ...) -> None: ...

class ScheduleStats(_message.Message):
    __slots__ = ("schedules", "firings", "missed", "lateness_ms_p50", "lateness_ms_p99")
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    FIRINGS_FIELD_NUMBER: _ClassVar[int]
    MISSED_FIELD_NUMBER: _ClassVar[int]
    LATENESS_MS_P50_FIELD_NUMBER: _ClassVar[int]
    LATENESS_MS_P99_FIELD_NUMBER: _ClassVar[int]
    schedules: int
    firings: int
    missed: int
    lateness_ms_p50: int
    lateness_ms_p99: int
    def __init__(self, schedules: _Optional[int] = ..., firings: _Optional[int] = ..., missed: _Optional[int] = ..., lateness_ms_p50: _Optional[int] = ..., lateness_ms_p99: _Optional[int] = ...) -> None: ...

class MessageTemplate(_message.Message):
    __slots__ = ("topic", "body", "headers")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    body: bytes
    headers: _containers.ScalarMap[str, str]
    def __init__(self, topic: _Optional[str] = ..., body: _Optional[bytes] = ..., headers: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ScheduleSpec(_message.Message):
    __slots__ = ("cron", "every_ms", "time_zone", "start_ms", "end_ms", "jitter_ms", "catch_up", "catch_up_window_ms", "template")
    CRON_FIELD_NUMBER: _ClassVar[int]
    EVERY_MS_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    START_MS_FIELD_NUMBER: _ClassVar[int]
    END_MS_FIELD_NUMBER: _ClassVar[int]
    JITTER_MS_FIELD_NUMBER: _ClassVar[int]
    CATCH_UP_FIELD_NUMBER: _ClassVar[int]
    CATCH_UP_WINDOW_MS_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    cron: str
    every_ms: int
    time_zone: str
    start_ms: int
    end_ms: int
    jitter_ms: int
    catch_up: CatchUp
    catch_up_window_ms: int
    template: MessageTemplate
    def __init__(self, cron: _Optional[str] = ..., every_ms: _Optional[int] = ..., time_zone: _Optional[str] = ..., start_ms: _Optional[int] = ..., end_ms: _Optional[int] = ..., jitter_ms: _Optional[int] = ..., catch_up: _Optional[_Union[CatchUp, str]] = ..., catch_up_window_ms: _Optional[int] = ..., template: _Optional[_Union[MessageTemplate, _Mapping]] = ...) -> None: ...

class Schedule(_message.Message):
    __slots__ = ("name", "spec", "paused", "ended", "next_fire_ms", "last_fire_ms", "fired", "missed", "created_ms", "updated_ms", "id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIRE_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_FIRE_MS_FIELD_NUMBER: _ClassVar[int]
    FIRED_FIELD_NUMBER: _ClassVar[int]
    MISSED_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_MS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    spec: ScheduleSpec
    paused: bool
    ended: bool
    next_fire_ms: int
    last_fire_ms: int
    fired: int
    missed: int
    created_ms: int
    updated_ms: int
    id: str
    def __init__(self, name: _Optional[str] = ..., spec: _Optional[_Union[ScheduleSpec, _Mapping]] = ..., paused: _Optional[bool] = ..., ended: _Optional[bool] = ..., next_fire_ms: _Optional[int] = ..., last_fire_ms: _Optional[int] = ..., fired: _Optional[int] = ..., missed: _Optional[int] = ..., created_ms: _Optional[int] = ..., updated_ms: _Optional[int] = ..., id: _Optional[str] = ...) -> None: ...

class CreateScheduleRequest(_message.Message):
    __slots__ = ("name", "spec")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    name: str
    spec: ScheduleSpec
    def __init__(self, name: _Optional[str] = ..., spec: _Optional[_Union[ScheduleSpec, _Mapping]] = ...) -> None: ...

class UpdateScheduleRequest(_message.Message):
    __slots__ = ("name", "spec")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    name: str
    spec: ScheduleSpec
    def __init__(self, name: _Optional[str] = ..., spec: _Optional[_Union[ScheduleSpec, _Mapping]] = ...) -> None: ...

class ScheduleName(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteScheduleResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListSchedulesRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSchedulesResponse(_message.Message):
    __slots__ = ("schedules", "next_page_token")
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    schedules: _containers.RepeatedCompositeFieldContainer[Schedule]
    next_page_token: str
    def __init__(self, schedules: _Optional[_Iterable[_Union[Schedule, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class NextFiringsRequest(_message.Message):
    __slots__ = ("name", "spec", "count")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    name: str
    spec: ScheduleSpec
    count: int
    def __init__(self, name: _Optional[str] = ..., spec: _Optional[_Union[ScheduleSpec, _Mapping]] = ..., count: _Optional[int] = ...) -> None: ...

class NextFiringsResponse(_message.Message):
    __slots__ = ("times_ms",)
    TIMES_MS_FIELD_NUMBER: _ClassVar[int]
    times_ms: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, times_ms: _Optional[_Iterable[int]] = ...) -> None: ...
