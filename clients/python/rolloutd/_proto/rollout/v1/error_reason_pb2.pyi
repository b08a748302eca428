from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

BACKPRESSURE: ErrorReason
CONSUMER_RESET: ErrorReason
DESCRIPTOR: _descriptor.FileDescriptor
ERROR_REASON_UNSPECIFIED: ErrorReason
NOT_COMMITTED: ErrorReason
OUTCOME_UNKNOWN: ErrorReason
RATE_LIMITED: ErrorReason
SCAN_INTERRUPTED: ErrorReason
SEQ_MISMATCH: ErrorReason
SHARD_DELETED: ErrorReason
STORE_FULL: ErrorReason
TOO_LARGE: ErrorReason

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
