"""The one ctypes mirror of ``csrc/include/torchvendor/runtime.h`` (ABI 1.1): its status codes,
enums, structs and the ``tv_runtime`` table, field by field in the header's order.

The runtime area of the suite and the tests that drive the simulator directly both use it;
``tests/test_runtime_abi.py`` parses the header and checks that every field, argument type and
constant here agrees with it, so the two cannot drift apart again.

    >>> import ctypes
    >>> [name for name, _ in RuntimeTable._fields_[:4]]
    ['abi_major', 'abi_minor', 'struct_size', 'name']
    >>> ctypes.sizeof(RuntimeTable) == minor_size(2) > minor_size(1) > minor_size(0)
    True
"""
from __future__ import annotations

import ctypes
from typing import Any

__all__ = ["STATUS", "SUCCESS", "INVALID_VALUE", "INVALID_DEVICE", "OUT_OF_MEMORY", "NOT_READY", "NOT_FOUND",
           "INVALID_IMAGE", "LAUNCH_FAILED", "NOT_SUPPORTED", "INVALID_HANDLE", "UNKNOWN", "H2D", "D2H", "D2D",
           "H2H", "EVENT_DEFAULT", "EVENT_ENABLE_TIMING", "DTYPES", "REDUCE_OPS", "DeviceProperties",
           "LaunchConfig", "RuntimeTable", "GetRuntime", "OPTIONAL", "COLLECTIVES", "minor_size",
           "ABI_MAJOR", "ABI_MINOR", "ENTRY_SYMBOL"]

ABI_MAJOR, ABI_MINOR = 1, 2
ENTRY_SYMBOL = "torchvendor_get_runtime"

#: tv_status values, as the header's enum names them
STATUS: dict[str, int] = {
    "TV_SUCCESS": 0, "TV_ERROR_INVALID_VALUE": 1, "TV_ERROR_INVALID_DEVICE": 2, "TV_ERROR_OUT_OF_MEMORY": 3,
    "TV_ERROR_NOT_READY": 4, "TV_ERROR_NOT_FOUND": 5, "TV_ERROR_INVALID_IMAGE": 6, "TV_ERROR_LAUNCH_FAILED": 7,
    "TV_ERROR_NOT_SUPPORTED": 8, "TV_ERROR_INVALID_HANDLE": 9, "TV_ERROR_UNKNOWN": 999,
}
(SUCCESS, INVALID_VALUE, INVALID_DEVICE, OUT_OF_MEMORY, NOT_READY, NOT_FOUND, INVALID_IMAGE, LAUNCH_FAILED,
 NOT_SUPPORTED, INVALID_HANDLE, UNKNOWN) = STATUS.values()
#: tv_memcpy_kind
H2D, D2H, D2D, H2H = 1, 2, 3, 4
EVENT_DEFAULT, EVENT_ENABLE_TIMING = 0, 1
#: tv_dtype and tv_reduce_op (minor 1)
DTYPES: dict[str, int] = {"TV_FLOAT32": 0, "TV_FLOAT64": 1, "TV_FLOAT16": 2, "TV_BFLOAT16": 3, "TV_INT8": 4,
                          "TV_UINT8": 5, "TV_INT32": 6, "TV_INT64": 7, "TV_BOOL": 8}
REDUCE_OPS: dict[str, int] = {"TV_REDUCE_SUM": 0, "TV_REDUCE_PROD": 1, "TV_REDUCE_MAX": 2, "TV_REDUCE_MIN": 3,
                              "TV_REDUCE_AVG": 4}

_st, _i32, _u32, _u64, _sz, _vp = ctypes.c_int32, ctypes.c_int32, ctypes.c_uint32, ctypes.c_uint64, \
    ctypes.c_size_t, ctypes.c_void_p
_enum = ctypes.c_int  # C enums (tv_memcpy_kind, tv_dtype, tv_reduce_op) are ints
_P = ctypes.POINTER


class DeviceProperties(ctypes.Structure):
    """``tv_device_properties``."""

    _fields_ = [("struct_size", _u32), ("name", ctypes.c_char * 256), ("total_memory", _u64),
                ("capability_major", _i32), ("capability_minor", _i32), ("multiprocessor_count", _i32),
                ("reserved", _i32 * 9)]


class LaunchConfig(ctypes.Structure):
    """``tv_launch_config``."""

    _fields_ = [("grid", _u32 * 3), ("block", _u32 * 3), ("shared_memory_bytes", _u32),
                ("pointer_offsets", _P(_u32)), ("num_pointer_offsets", _u32)]


def _fn(*args: Any) -> Any:
    return ctypes.CFUNCTYPE(_st, *args)


class RuntimeTable(ctypes.Structure):
    """``tv_runtime``: the header, then every entry in the order ``runtime.h`` declares them."""

    _fields_ = [
        ("abi_major", _u32), ("abi_minor", _u32), ("struct_size", _u64), ("name", ctypes.c_char_p),
        # devices
        ("device_count", _fn(_P(_i32))), ("get_device_properties", _fn(_i32, _P(DeviceProperties))),
        ("set_device", _fn(_i32)), ("get_device", _fn(_P(_i32))), ("device_synchronize", _fn(_i32)),
        # memory
        ("malloc", _fn(_i32, _sz, _P(_vp))), ("free", _fn(_i32, _vp)),
        ("host_malloc", _fn(_sz, _P(_vp))), ("host_free", _fn(_vp)),
        ("memcpy", _fn(_vp, _vp, _sz, _enum)), ("memcpy_async", _fn(_vp, _vp, _sz, _enum, _vp)),
        ("memset", _fn(_vp, ctypes.c_int, _sz)), ("memset_async", _fn(_vp, ctypes.c_int, _sz, _vp)),
        # streams
        ("stream_create", _fn(_i32, _i32, _P(_vp))), ("stream_destroy", _fn(_vp)), ("stream_query", _fn(_vp)),
        ("stream_synchronize", _fn(_vp)), ("stream_priority_range", _fn(_P(_i32), _P(_i32))),
        # events
        ("event_create", _fn(_i32, _u32, _P(_vp))), ("event_destroy", _fn(_vp)), ("event_record", _fn(_vp, _vp)),
        ("event_query", _fn(_vp)), ("event_synchronize", _fn(_vp)), ("stream_wait_event", _fn(_vp, _vp)),
        ("event_elapsed_time", _fn(_vp, _vp, _P(ctypes.c_float))),
        # modules
        ("module_load_file", _fn(_i32, ctypes.c_char_p, _P(_vp))),
        ("module_load_data", _fn(_i32, _vp, _sz, _P(_vp))),
        ("module_unload", _fn(_vp)), ("module_get_function", _fn(_vp, ctypes.c_char_p, _P(_vp))),
        ("launch", _fn(_vp, _P(LaunchConfig), _vp, _sz, _vp)),
        # errors
        ("get_error_string", ctypes.CFUNCTYPE(ctypes.c_char_p, _st)),
        ("last_error_message", ctypes.CFUNCTYPE(ctypes.c_char_p)),
        # collectives (minor 1)
        ("comm_create", _fn(ctypes.c_char_p, _i32, _i32, _i32, _P(_vp))), ("comm_destroy", _fn(_vp)),
        ("all_reduce", _fn(_vp, _vp, _sz, _enum, _enum, _vp, _vp)),
        ("broadcast", _fn(_vp, _vp, _sz, _enum, _i32, _vp, _vp)),
        ("all_gather", _fn(_vp, _vp, _sz, _enum, _vp, _vp)),
        ("reduce_scatter", _fn(_vp, _vp, _sz, _enum, _enum, _vp, _vp)),
        ("send", _fn(_vp, _sz, _enum, _i32, _vp, _vp)), ("recv", _fn(_vp, _sz, _enum, _i32, _vp, _vp)),
        # communicator bootstrap (minor 2)
        ("comm_token", _fn(_i32, _vp, _P(_sz))), ("comm_create_from_token", _fn(_vp, _sz, _i32, _i32, _i32, _P(_vp))),
    ]


#: ``tv_get_runtime_fn``: the library's one exported symbol
GetRuntime = ctypes.CFUNCTYPE(_st, _u32, _P(_P(RuntimeTable)))

#: entries whose comment starts "Optional." (they may be NULL); every other entry is required
OPTIONAL = frozenset({
    "host_malloc", "host_free", "memcpy_async", "memset", "memset_async", "stream_priority_range",
    "event_elapsed_time", "module_load_file", "module_load_data", "module_unload", "module_get_function",
    "launch", "get_error_string", "last_error_message", "comm_create", "comm_destroy", "all_reduce",
    "broadcast", "all_gather", "reduce_scatter", "send", "recv", "comm_token", "comm_create_from_token"})
#: the collective entries of minor 1: provided together or not at all
COLLECTIVES = ("comm_create", "comm_destroy", "all_reduce", "broadcast", "all_gather", "reduce_scatter", "send",
               "recv")


#: the bootstrap entries of minor 2: provided together or not at all
BOOTSTRAP = ("comm_token", "comm_create_from_token")


def minor_size(minor: int) -> int:
    """``sizeof(tv_runtime)`` as a library built against ``minor`` declares it (0: up to
    ``last_error_message``; 1: with the collectives; 2: with the communicator bootstrap)."""
    if minor >= 2:
        return ctypes.sizeof(RuntimeTable)
    return getattr(RuntimeTable, "comm_create" if minor < 1 else "comm_token").offset
