from google.protobuf import field_mask_pb2 as _field_mask_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
ROLE_ARTIFACT: Role
ROLE_ASSISTANT: Role
ROLE_GRADE: Role
ROLE_SYSTEM: Role
ROLE_TOOL: Role
ROLE_UNSPECIFIED: Role
ROLE_USER: Role
SUBSCRIBE_START_CONSUMER: SubscribeStart
SUBSCRIBE_START_EARLIEST: SubscribeStart
SUBSCRIBE_START_LATEST: SubscribeStart
SUBSCRIBE_START_UNSPECIFIED: SubscribeStart

class AppendRequest(_message.Message):
    __slots__ = ["records", "request_id", "shard"]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[Record]
    request_id: str
    shard: str
    def __init__(self, shard: _Optional[str] = ..., records: _Optional[_Iterable[_Union[Record, _Mapping]]] = ..., request_id: _Optional[str] = ...) -> None: ...

class AppendResponse(_message.Message):
    __slots__ = ["results"]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[AppendResult]
    def __init__(self, results: _Optional[_Iterable[_Union[AppendResult, _Mapping]]] = ...) -> None: ...

class AppendResult(_message.Message):
    __slots__ = ["already_present", "epoch", "generation", "id", "seq"]
    ALREADY_PRESENT_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    already_present: bool
    epoch: int
    generation: int
    id: str
    seq: int
    def __init__(self, id: _Optional[str] = ..., seq: _Optional[int] = ..., already_present: bool = ..., epoch: _Optional[int] = ..., generation: _Optional[int] = ...) -> None: ...

class BatchGetRequest(_message.Message):
    __slots__ = ["fields", "ids", "shard"]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    fields: _field_mask_pb2.FieldMask
    ids: _containers.RepeatedScalarFieldContainer[str]
    shard: str
    def __init__(self, shard: _Optional[str] = ..., ids: _Optional[_Iterable[str]] = ..., fields: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ...) -> None: ...

class BatchGetResponse(_message.Message):
    __slots__ = ["results"]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[BatchGetResult]
    def __init__(self, results: _Optional[_Iterable[_Union[BatchGetResult, _Mapping]]] = ...) -> None: ...

class BatchGetResult(_message.Message):
    __slots__ = ["id", "not_found", "over_limit", "record"]
    ID_FIELD_NUMBER: _ClassVar[int]
    NOT_FOUND_FIELD_NUMBER: _ClassVar[int]
    OVER_LIMIT_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    id: str
    not_found: bool
    over_limit: bool
    record: Record
    def __init__(self, id: _Optional[str] = ..., record: _Optional[_Union[Record, _Mapping]] = ..., not_found: bool = ..., over_limit: bool = ...) -> None: ...

class CommitConsumerRequest(_message.Message):
    __slots__ = ["consumer", "generation", "positions", "prefix"]
    class PositionsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    consumer: str
    generation: int
    positions: _containers.ScalarMap[str, int]
    prefix: str
    def __init__(self, prefix: _Optional[str] = ..., consumer: _Optional[str] = ..., positions: _Optional[_Mapping[str, int]] = ..., generation: _Optional[int] = ...) -> None: ...

class CommitConsumerResponse(_message.Message):
    __slots__ = ["generation"]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    generation: int
    def __init__(self, generation: _Optional[int] = ...) -> None: ...

class ConsumerInfo(_message.Message):
    __slots__ = ["consumer", "created_at", "generation", "lag_records", "lagging_shards", "positions", "prefix", "shards", "updated_at"]
    class PositionsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    LAGGING_SHARDS_FIELD_NUMBER: _ClassVar[int]
    LAG_RECORDS_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    consumer: str
    created_at: _timestamp_pb2.Timestamp
    generation: int
    lag_records: int
    lagging_shards: int
    positions: _containers.ScalarMap[str, int]
    prefix: str
    shards: int
    updated_at: _timestamp_pb2.Timestamp
    def __init__(self, prefix: _Optional[str] = ..., consumer: _Optional[str] = ..., generation: _Optional[int] = ..., positions: _Optional[_Mapping[str, int]] = ..., shards: _Optional[int] = ..., lag_records: _Optional[int] = ..., lagging_shards: _Optional[int] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DeleteConsumerRequest(_message.Message):
    __slots__ = ["consumer", "prefix"]
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    consumer: str
    prefix: str
    def __init__(self, prefix: _Optional[str] = ..., consumer: _Optional[str] = ...) -> None: ...

class DeleteConsumerResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class DeleteShardRequest(_message.Message):
    __slots__ = ["expected_last_seq", "shard"]
    EXPECTED_LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    expected_last_seq: int
    shard: str
    def __init__(self, shard: _Optional[str] = ..., expected_last_seq: _Optional[int] = ...) -> None: ...

class DeleteShardResponse(_message.Message):
    __slots__ = ["already_deleted", "incarnation", "last_seq", "records"]
    ALREADY_DELETED_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    already_deleted: bool
    incarnation: int
    last_seq: int
    records: int
    def __init__(self, last_seq: _Optional[int] = ..., records: _Optional[int] = ..., already_deleted: bool = ..., incarnation: _Optional[int] = ...) -> None: ...

class DescribeConsumerRequest(_message.Message):
    __slots__ = ["consumer", "include_positions", "prefix"]
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_POSITIONS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    consumer: str
    include_positions: bool
    prefix: str
    def __init__(self, prefix: _Optional[str] = ..., consumer: _Optional[str] = ..., include_positions: bool = ...) -> None: ...

class DescribeShardRequest(_message.Message):
    __slots__ = ["shard"]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    shard: str
    def __init__(self, shard: _Optional[str] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ["id", "shard"]
    ID_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    id: str
    shard: str
    def __init__(self, shard: _Optional[str] = ..., id: _Optional[str] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ["record"]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    record: Record
    def __init__(self, record: _Optional[_Union[Record, _Mapping]] = ...) -> None: ...

class ListConsumersRequest(_message.Message):
    __slots__ = ["page_size", "page_token", "prefix"]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    prefix: str
    def __init__(self, prefix: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListConsumersResponse(_message.Message):
    __slots__ = ["consumers", "next_page_token"]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    consumers: _containers.RepeatedCompositeFieldContainer[ConsumerInfo]
    next_page_token: str
    def __init__(self, consumers: _Optional[_Iterable[_Union[ConsumerInfo, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListShardsRequest(_message.Message):
    __slots__ = ["include_summary", "page_size", "page_token", "prefix"]
    INCLUDE_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    include_summary: bool
    page_size: int
    page_token: str
    prefix: str
    def __init__(self, prefix: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., include_summary: bool = ...) -> None: ...

class ListShardsResponse(_message.Message):
    __slots__ = ["next_page_token", "shards"]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    next_page_token: str
    shards: _containers.RepeatedCompositeFieldContainer[ListedShard]
    def __init__(self, shards: _Optional[_Iterable[_Union[ListedShard, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListedShard(_message.Message):
    __slots__ = ["shard", "summary", "summary_error"]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_ERROR_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    shard: str
    summary: ShardInfo
    summary_error: str
    def __init__(self, shard: _Optional[str] = ..., summary: _Optional[_Union[ShardInfo, _Mapping]] = ..., summary_error: _Optional[str] = ...) -> None: ...

class Record(_message.Message):
    __slots__ = ["advantage", "binary_payload", "content", "content_type", "created_at", "dataset", "grader_id", "id", "include_in_training", "input_tokens", "loss_mask", "metadata", "output_logprobs", "output_tokens", "policy_version", "problem_id", "ref_logprobs", "relationships", "reward", "role", "rollout_id", "score", "seq", "sequence_order"]
    class MetadataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ADVANTAGE_FIELD_NUMBER: _ClassVar[int]
    BINARY_PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    GRADER_ID_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_IN_TRAINING_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LOSS_MASK_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    PROBLEM_ID_FIELD_NUMBER: _ClassVar[int]
    REF_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    RELATIONSHIPS_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ROLLOUT_ID_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_ORDER_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    advantage: float
    binary_payload: bytes
    content: str
    content_type: str
    created_at: _timestamp_pb2.Timestamp
    dataset: str
    grader_id: str
    id: str
    include_in_training: bool
    input_tokens: _containers.RepeatedScalarFieldContainer[int]
    loss_mask: bytes
    metadata: _containers.ScalarMap[str, str]
    output_logprobs: _containers.RepeatedScalarFieldContainer[float]
    output_tokens: _containers.RepeatedScalarFieldContainer[int]
    policy_version: str
    problem_id: str
    ref_logprobs: _containers.RepeatedScalarFieldContainer[float]
    relationships: _containers.RepeatedCompositeFieldContainer[Relationship]
    reward: float
    role: Role
    rollout_id: str
    score: float
    seq: int
    sequence_order: int
    def __init__(self, id: _Optional[str] = ..., seq: _Optional[int] = ..., rollout_id: _Optional[str] = ..., problem_id: _Optional[str] = ..., dataset: _Optional[str] = ..., sequence_order: _Optional[int] = ..., role: _Optional[_Union[Role, str]] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., content: _Optional[str] = ..., content_type: _Optional[str] = ..., input_tokens: _Optional[_Iterable[int]] = ..., output_tokens: _Optional[_Iterable[int]] = ..., output_logprobs: _Optional[_Iterable[float]] = ..., ref_logprobs: _Optional[_Iterable[float]] = ..., loss_mask: _Optional[bytes] = ..., reward: _Optional[float] = ..., advantage: _Optional[float] = ..., score: _Optional[float] = ..., policy_version: _Optional[str] = ..., include_in_training: bool = ..., grader_id: _Optional[str] = ..., relationships: _Optional[_Iterable[_Union[Relationship, _Mapping]]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., binary_payload: _Optional[bytes] = ...) -> None: ...

class Relationship(_message.Message):
    __slots__ = ["relation", "target_id", "weight"]
    RELATION_FIELD_NUMBER: _ClassVar[int]
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    relation: str
    target_id: str
    weight: float
    def __init__(self, target_id: _Optional[str] = ..., relation: _Optional[str] = ..., weight: _Optional[float] = ...) -> None: ...

class ResetConsumerRequest(_message.Message):
    __slots__ = ["consumer", "positions", "prefix", "to"]
    class PositionsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    consumer: str
    positions: _containers.ScalarMap[str, int]
    prefix: str
    to: SubscribeStart
    def __init__(self, prefix: _Optional[str] = ..., consumer: _Optional[str] = ..., to: _Optional[_Union[SubscribeStart, str]] = ..., positions: _Optional[_Mapping[str, int]] = ...) -> None: ...

class ResetConsumerResponse(_message.Message):
    __slots__ = ["consumer"]
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    consumer: ConsumerInfo
    def __init__(self, consumer: _Optional[_Union[ConsumerInfo, _Mapping]] = ...) -> None: ...

class ScanRequest(_message.Message):
    __slots__ = ["after_seq", "fields", "follow", "include_in_training", "limit", "role", "rollout_id", "shard"]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_IN_TRAINING_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ROLLOUT_ID_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    after_seq: int
    fields: _field_mask_pb2.FieldMask
    follow: bool
    include_in_training: bool
    limit: int
    role: Role
    rollout_id: str
    shard: str
    def __init__(self, shard: _Optional[str] = ..., after_seq: _Optional[int] = ..., limit: _Optional[int] = ..., rollout_id: _Optional[str] = ..., include_in_training: bool = ..., role: _Optional[_Union[Role, str]] = ..., fields: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ..., follow: bool = ...) -> None: ...

class ScanResponse(_message.Message):
    __slots__ = ["cursor", "records"]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    cursor: int
    records: _containers.RepeatedCompositeFieldContainer[Record]
    def __init__(self, records: _Optional[_Iterable[_Union[Record, _Mapping]]] = ..., cursor: _Optional[int] = ...) -> None: ...

class ShardInfo(_message.Message):
    __slots__ = ["bytes", "created_at", "deleted", "deleted_at", "epoch", "first_seq", "format_version", "generations", "incarnation", "last_commit_at", "last_seq", "records", "shard", "writer_here"]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    DELETED_AT_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    FORMAT_VERSION_FIELD_NUMBER: _ClassVar[int]
    GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    LAST_COMMIT_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    WRITER_HERE_FIELD_NUMBER: _ClassVar[int]
    bytes: int
    created_at: _timestamp_pb2.Timestamp
    deleted: bool
    deleted_at: _timestamp_pb2.Timestamp
    epoch: int
    first_seq: int
    format_version: int
    generations: int
    incarnation: int
    last_commit_at: _timestamp_pb2.Timestamp
    last_seq: int
    records: int
    shard: str
    writer_here: bool
    def __init__(self, shard: _Optional[str] = ..., records: _Optional[int] = ..., bytes: _Optional[int] = ..., generations: _Optional[int] = ..., first_seq: _Optional[int] = ..., last_seq: _Optional[int] = ..., epoch: _Optional[int] = ..., format_version: _Optional[int] = ..., writer_here: bool = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., last_commit_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., incarnation: _Optional[int] = ..., deleted: bool = ..., deleted_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ["consumer", "fields", "include_in_training", "member", "members", "positions", "prefix", "role", "rollout_id", "start"]
    class PositionsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_IN_TRAINING_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ROLLOUT_ID_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    consumer: str
    fields: _field_mask_pb2.FieldMask
    include_in_training: bool
    member: int
    members: int
    positions: _containers.ScalarMap[str, int]
    prefix: str
    role: Role
    rollout_id: str
    start: SubscribeStart
    def __init__(self, prefix: _Optional[str] = ..., start: _Optional[_Union[SubscribeStart, str]] = ..., consumer: _Optional[str] = ..., positions: _Optional[_Mapping[str, int]] = ..., member: _Optional[int] = ..., members: _Optional[int] = ..., rollout_id: _Optional[str] = ..., include_in_training: bool = ..., role: _Optional[_Union[Role, str]] = ..., fields: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ...) -> None: ...

class SubscribeResponse(_message.Message):
    __slots__ = ["cursor", "records", "shard", "shard_deleted", "started"]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    SHARD_DELETED_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    cursor: int
    records: _containers.RepeatedCompositeFieldContainer[Record]
    shard: str
    shard_deleted: bool
    started: SubscribeStarted
    def __init__(self, shard: _Optional[str] = ..., records: _Optional[_Iterable[_Union[Record, _Mapping]]] = ..., cursor: _Optional[int] = ..., shard_deleted: bool = ..., started: _Optional[_Union[SubscribeStarted, _Mapping]] = ...) -> None: ...

class SubscribeStarted(_message.Message):
    __slots__ = ["consumer_generation", "positions"]
    class PositionsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    CONSUMER_GENERATION_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    consumer_generation: int
    positions: _containers.ScalarMap[str, int]
    def __init__(self, consumer_generation: _Optional[int] = ..., positions: _Optional[_Mapping[str, int]] = ...) -> None: ...

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class SubscribeStart(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
