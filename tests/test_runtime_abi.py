"""The one ctypes mirror of runtime.h (sdk/conformance/runtime_abi.py) agrees with the header:
every field of tv_runtime in order with its argument and result types, the structs, the status
codes and enums, which entries are optional, and the size the simulator reports."""
from __future__ import annotations

import ctypes
import re
from pathlib import Path

from torchvendor.sdk.conformance import runtime_abi as abi

HEADER = (Path(__file__).resolve().parents[1] / "csrc" / "include" / "torchvendor" / "runtime.h").read_text()
P = ctypes.POINTER
SCALARS = {"uint32_t": ctypes.c_uint32, "uint64_t": ctypes.c_uint64, "int32_t": ctypes.c_int32,
           "tv_status": ctypes.c_int32, "size_t": ctypes.c_size_t, "int": ctypes.c_int, "float": ctypes.c_float,
           "tv_memcpy_kind": ctypes.c_int, "tv_dtype": ctypes.c_int, "tv_reduce_op": ctypes.c_int}
HANDLES = {"tv_stream", "tv_event", "tv_module", "tv_function", "tv_comm"}
STRUCTS = {"tv_device_properties": abi.DeviceProperties, "tv_launch_config": abi.LaunchConfig}


def _strip(text: str) -> str:
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def _ctype(decl: str):
    """The ctypes type of a C parameter or result type such as ``const tv_launch_config*``."""
    decl = re.sub(r"\b(const|struct)\b", "", decl).strip()
    decl = re.sub(r"\s+[A-Za-z_]\w*$", "", decl) if not decl.endswith("*") and " " in decl else decl
    stars = decl.count("*")
    base = decl.replace("*", "").strip()
    if base == "char" and stars == 1:
        return ctypes.c_char_p
    if base == "void" and stars >= 1:
        t, stars = ctypes.c_void_p, stars - 1
    elif base in HANDLES:
        t = ctypes.c_void_p
    else:
        t = SCALARS.get(base) or STRUCTS[base]
    for _ in range(stars):
        t = P(t)
    return t


def _param_type(param: str):
    param = param.strip()
    name = re.search(r"([A-Za-z_]\w*)\s*$", param)
    return _ctype(param[:name.start()] if name and param != "void" else param)


def _same(a, b) -> bool:
    if a is b:
        return True
    pa, pb = getattr(a, "_type_", None), getattr(b, "_type_", None)
    return (hasattr(a, "contents") and hasattr(b, "contents") and _same(pa, pb)) or a.__name__ == b.__name__


def _table_fields() -> list[tuple[str, object]]:
    body = _strip(re.search(r"typedef struct tv_runtime \{(.*?)\} tv_runtime;", HEADER, re.S).group(1))
    out = []
    for decl in (d.strip() for d in body.split(";") if d.strip()):
        fn = re.match(r"(.+?)\(\*(\w+)\)\((.*)\)$", decl, re.S)
        if fn:
            params = [] if fn.group(3).strip() == "void" else [_param_type(p) for p in fn.group(3).split(",")]
            out.append((fn.group(2), (_ctype(fn.group(1)), params)))
        else:
            ctype, name = decl.rsplit(None, 1) if "*" not in decl else decl.rsplit("*", 1)
            out.append((name.strip(), _ctype(ctype + ("*" if "*" in decl else ""))))
    return out


def test_every_table_field_matches_the_header():
    fields = _table_fields()
    assert [n for n, _ in fields] == [n for n, _ in abi.RuntimeTable._fields_]
    for (name, want), (_, have) in zip(fields, abi.RuntimeTable._fields_):
        if isinstance(want, tuple):
            restype, params = want
            assert _same(have._restype_, restype), (name, have._restype_, restype)
            assert len(have._argtypes_) == len(params), name
            for k, (a, b) in enumerate(zip(have._argtypes_, params)):
                assert _same(a, b), (name, k, a, b)
        else:
            assert _same(have, want), (name, have, want)


def test_structs_match_the_header():
    for cname, mirror in STRUCTS.items():
        body = _strip(re.search(rf"typedef struct {cname} \{{(.*?)\}} {cname};", HEADER, re.S).group(1))
        names = [re.sub(r"\[.*\]", "", d.strip().replace("*", " ").split()[-1]) for d in body.split(";") if d.strip()]
        assert names == [n for n, _ in mirror._fields_], cname


def test_constants_and_optional_entries_match_the_header():
    enums = dict(re.findall(r"\b(TV_[A-Z0-9_]+)\s*=\s*(\d+)", _strip(HEADER)))
    assert {k: int(v) for k, v in enums.items() if k.startswith(("TV_SUCCESS", "TV_ERROR"))} == abi.STATUS
    assert {k: int(enums[k]) for k in abi.DTYPES} == abi.DTYPES
    assert {k: int(enums[k]) for k in abi.REDUCE_OPS} == abi.REDUCE_OPS
    assert [int(enums[f"TV_MEMCPY_{k}"]) for k in ("HOST_TO_DEVICE", "DEVICE_TO_HOST", "DEVICE_TO_DEVICE",
                                                   "HOST_TO_HOST")] == [abi.H2D, abi.D2H, abi.D2D, abi.H2H]
    assert (int(enums["TV_EVENT_DEFAULT"]), int(enums["TV_EVENT_ENABLE_TIMING"])) == (abi.EVENT_DEFAULT,
                                                                                        abi.EVENT_ENABLE_TIMING)
    assert f"#define TV_RUNTIME_ABI_MAJOR {abi.ABI_MAJOR}" in HEADER
    assert f"#define TV_RUNTIME_ABI_MINOR {abi.ABI_MINOR}" in HEADER
    body = re.search(r"typedef struct tv_runtime \{(.*?)\} tv_runtime;", HEADER, re.S).group(1)
    optional = set()
    comment = ""
    for piece in re.split(r"(/\*.*?\*/)", body, flags=re.S):
        if piece.startswith("/*"):
            comment = piece
            continue
        for name in re.findall(r"\(\*(\w+)\)", piece):
            if re.match(r"/\*\s*Optional\.", comment):
                optional.add(name)
            comment = ""
    assert optional == abi.OPTIONAL


def test_the_simulator_reports_the_mirrors_size():
    from torchvendor.sdk.conformance.runtime_cases import load_runtime

    table = load_runtime(None)
    assert (table.abi_major, table.abi_minor) == (abi.ABI_MAJOR, abi.ABI_MINOR)
    assert table.struct_size == ctypes.sizeof(abi.RuntimeTable) == abi.minor_size(2)
