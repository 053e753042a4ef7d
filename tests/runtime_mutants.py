"""The mutation harness of the runtime area: faults a driver team really makes, each a C shim over
the simulator's table (``libtorchvendor_sim.so``) that replaces one or two entries, and the case
of ``sdk/conformance/runtime_cases.py`` that must catch it.

``MUTANTS`` maps a name to ``(what the driver gets wrong, C body, the killing case, entries)``.
The body defines replacement functions and ``install(t)`` that puts them in the table; ``real``
is the simulator's own table. ``build(name, dir)`` compiles one mutant; ``kill(lib)`` runs the
runtime area on it in a subprocess (no torch) and returns ``{case: (status, reason)}``.
docs/conformance.md holds the kill table (``kill_table()`` writes it); tests/test_runtime_mutants.py
keeps both true. Every mutant here is killed: none needed an argument for surviving.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TEMPLATE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "torchvendor/runtime.h"
static tv_runtime table;
static const tv_runtime* real;
static int accept_any_major;
/* a private stream on device 0, for work a mutant runs "elsewhere" */
static tv_stream side(void) { static tv_stream s; if (!s) real->stream_create(0, 0, &s); return s; }
/* events recorded so far (for mutants that treat them differently) */
static tv_event recorded[4096]; static int nrecorded; static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static void mark(tv_event e) { pthread_mutex_lock(&mu); if (nrecorded < 4096) recorded[nrecorded++] = e;
                               pthread_mutex_unlock(&mu); }
static tv_status forget(tv_event e) { pthread_mutex_lock(&mu); for (int i = 0; i < nrecorded; i++)
  if (recorded[i] == e) recorded[i] = NULL; pthread_mutex_unlock(&mu); return real->event_destroy(e); }
static int was_recorded(tv_event e) { int r = 0; pthread_mutex_lock(&mu);
  for (int i = 0; i < nrecorded; i++) r |= recorded[i] == e; pthread_mutex_unlock(&mu); return r; }
%(body)s
TV_EXPORT tv_status torchvendor_get_runtime(uint32_t major, const tv_runtime** out) {
  if (!real) {
    void* h = dlopen("%(sim)s", RTLD_NOW | RTLD_LOCAL);
    tv_get_runtime_fn get = h ? (tv_get_runtime_fn)dlsym(h, "torchvendor_get_runtime") : NULL;
    tv_status s = get ? get(1, &real) : TV_ERROR_UNKNOWN;
    if (s) return s;
    memcpy(&table, real, sizeof table);
    install(&table);
  }
  if (major != TV_RUNTIME_ABI_MAJOR && !accept_any_major) return TV_ERROR_NOT_SUPPORTED;
  *out = &table;
  return TV_SUCCESS;
}
"""


def _m(what: str, body: str, case: str, *entries: str) -> tuple[str, str, str, tuple[str, ...]]:
    return what, body, case, entries


S, V, P = "static tv_status", "void*", "tv_stream"
MUTANTS: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    # ---- the table and its entry point
    "abi_major_2": _m("the table says ABI major 2", "static void install(tv_runtime* t) { t->abi_major = 2; }",
                      "abi_version", "torchvendor_get_runtime"),
    "struct_size_short": _m("minor 1, with the struct_size of a minor-0 table",
                            "static void install(tv_runtime* t) { t->struct_size = offsetof(tv_runtime, "
                            "comm_create); }", "abi_version", "torchvendor_get_runtime"),
    "no_name": _m("no runtime name", "static void install(tv_runtime* t) { t->name = NULL; }", "abi_version",
                  "torchvendor_get_runtime"),
    "serves_any_major": _m("the entry point serves a major it does not speak",
                           "static void install(tv_runtime* t) { (void)t; accept_any_major = 1; }", "entry_point",
                           "torchvendor_get_runtime"),
    "required_entry_null": _m("a required entry left NULL (stream_query)",
                              "static void install(tv_runtime* t) { t->stream_query = NULL; }", "required_entries",
                              "stream_query"),
    "half_the_collectives": _m("some collectives provided, not all",
                               "static void install(tv_runtime* t) { t->send = NULL; t->recv = NULL; }",
                               "required_entries", "send"),
    # ---- devices
    "device_count_null_ok": _m("device_count(NULL) succeeds",
                               f"{S} bad(int32_t* c) {{ return c ? real->device_count(c) : TV_SUCCESS; }}\n"
                               "static void install(tv_runtime* t) { t->device_count = bad; }", "device_count",
                               "device_count"),
    "props_index_unchecked": _m("get_device_properties answers for any index (device 0's)",
                                f"{S} bad(int32_t d, tv_device_properties* p) {{ return "
                                "real->get_device_properties(d < 0 || d > 1 ? 0 : d, p); }\n"
                                "static void install(tv_runtime* t) { t->get_device_properties = bad; }",
                                "device_properties", "get_device_properties"),
    "props_no_name": _m("device properties without a name",
                        f"{S} bad(int32_t d, tv_device_properties* p) {{ tv_status s = "
                        "real->get_device_properties(d, p); if (!s) p->name[0] = 0; return s; }\n"
                        "static void install(tv_runtime* t) { t->get_device_properties = bad; }",
                        "device_properties", "get_device_properties"),
    "set_device_unchecked": _m("set_device accepts any index",
                               f"{S} bad(int32_t d) {{ return d < 0 || d > 1 ? TV_SUCCESS : real->set_device(d); }}\n"
                               "static void install(tv_runtime* t) { t->set_device = bad; }", "set_device_range",
                               "set_device"),
    "set_device_wrong_code": _m("set_device(out of range) is TV_ERROR_INVALID_VALUE",
                                f"{S} bad(int32_t d) {{ tv_status s = real->set_device(d); "
                                "return s == TV_ERROR_INVALID_DEVICE ? TV_ERROR_INVALID_VALUE : s; }\n"
                                "static void install(tv_runtime* t) { t->set_device = bad; }", "set_device_range",
                                "set_device"),
    "current_device_global": _m("the current device is process-wide, not per thread",
                                "static int32_t cur;\n"
                                f"{S} bad_set(int32_t d) {{ tv_status s = real->set_device(d); if (!s) cur = d; "
                                "return s; }\n"
                                f"{S} bad_get(int32_t* d) {{ if (!d) return TV_ERROR_INVALID_VALUE; *d = cur; "
                                "return TV_SUCCESS; }\n"
                                "static void install(tv_runtime* t) { t->set_device = bad_set; "
                                "t->get_device = bad_get; }", "current_device_per_thread", "set_device"),
    "device_synchronize_noop": _m("device_synchronize returns at once",
                                  f"{S} bad(int32_t d) {{ (void)d; return TV_SUCCESS; }}\n"
                                  "static void install(tv_runtime* t) { t->device_synchronize = bad; }",
                                  "device_synchronize", "device_synchronize"),
    "device_synchronize_index_unchecked": _m("device_synchronize accepts any index",
                                             f"{S} bad(int32_t d) {{ return d < 0 || d > 1 ? TV_SUCCESS : "
                                             "real->device_synchronize(d); }\n"
                                             "static void install(tv_runtime* t) { t->device_synchronize = bad; }",
                                             "device_synchronize", "device_synchronize"),
    # ---- memory
    "malloc_misaligned": _m("device pointers 16 bytes past a 256-byte boundary",
                            f"{S} bad_malloc(int32_t d, size_t n, void** p) {{ tv_status s = real->malloc(d, n + 16, p); "
                            "if (!s && *p) *p = (char*)*p + 16; return s; }\n"
                            f"{S} bad_free(int32_t d, void* p) {{ return real->free(d, p ? (char*)p - 16 : p); }}\n"
                            "static void install(tv_runtime* t) { t->malloc = bad_malloc; t->free = bad_free; }",
                            "malloc_alignment", "malloc"),
    "malloc_zero_not_null": _m("malloc(0) returns a block",
                               f"{S} bad(int32_t d, size_t n, void** p) {{ return real->malloc(d, n ? n : 1, p); }}\n"
                               "static void install(tv_runtime* t) { t->malloc = bad; }", "malloc_zero_size",
                               "malloc"),
    "host_malloc_zero_not_null": _m("host_malloc(0) returns a block",
                                    f"{S} bad(size_t n, void** p) {{ return real->host_malloc(n ? n : 1, p); }}\n"
                                    "static void install(tv_runtime* t) { t->host_malloc = bad; }",
                                    "malloc_zero_size", "host_malloc"),
    "malloc_device_unchecked": _m("malloc on an unknown device allocates on device 0",
                                  f"{S} bad(int32_t d, size_t n, void** p) {{ return real->malloc(d < 0 || d > 1 ? 0 "
                                  ": d, n, p); }\nstatic void install(tv_runtime* t) { t->malloc = bad; }",
                                  "malloc_errors", "malloc"),
    "malloc_oom_wrong_code": _m("exhaustion is TV_ERROR_UNKNOWN",
                                f"{S} bad(int32_t d, size_t n, void** p) {{ tv_status s = real->malloc(d, n, p); "
                                "return s == TV_ERROR_OUT_OF_MEMORY ? TV_ERROR_UNKNOWN : s; }\n"
                                "static void install(tv_runtime* t) { t->malloc = bad; }", "malloc_errors", "malloc"),
    "malloc_one_byte_short": _m("malloc allocates n - 1 bytes",
                                f"{S} bad(int32_t d, size_t n, void** p) {{ return real->malloc(d, n > 1 ? n - 1 : n, "
                                "p); }\nstatic void install(tv_runtime* t) { t->malloc = bad; }",
                                "allocations_disjoint", "malloc"),
    "malloc_reuses_live_block": _m("the allocator hands out a live block again",
                                   "static void* last;\n"
                                   f"{S} bad(int32_t d, size_t n, void** p) {{ if (last && n == 300) {{ *p = last; "
                                   "return TV_SUCCESS; } tv_status s = real->malloc(d, n, p); "
                                   "if (n == 4096) last = *p; return s; }\n"
                                   "static void install(tv_runtime* t) { t->malloc = bad; }",
                                   "allocations_disjoint", "malloc"),
    "free_null_fails": _m("free(NULL) is an error",
                          f"{S} bad(int32_t d, void* p) {{ return p ? real->free(d, p) : TV_ERROR_INVALID_VALUE; }}\n"
                          "static void install(tv_runtime* t) { t->free = bad; }", "free", "free"),
    "free_accepts_anything": _m("free of a pointer that is not a live block succeeds",
                                f"{S} bad(int32_t d, void* p) {{ real->free(d, p); return TV_SUCCESS; }}\n"
                                "static void install(tv_runtime* t) { t->free = bad; }", "free", "free"),
    "free_device_unchecked": _m("free ignores its device argument",
                                f"{S} bad(int32_t d, void* p) {{ tv_status s = real->free(d, p); "
                                "return s && d == 1 ? real->free(0, p) : s; }\n"
                                "static void install(tv_runtime* t) { t->free = bad; }", "free", "free"),
    "host_free_accepts_anything": _m("host_free of any pointer succeeds",
                                     f"{S} bad(void* p) {{ real->host_free(p); return TV_SUCCESS; }}\n"
                                     "static void install(tv_runtime* t) { t->host_free = bad; }", "host_memory",
                                     "host_free"),
    # ---- copies and memset
    "memcpy_drops_a_byte": _m("memcpy copies n - 1 bytes",
                              f"{S} bad({V} d, const void* s, size_t n, tv_memcpy_kind k) {{ return real->memcpy(d, "
                              "s, n > 1 ? n - 1 : n, k); }\nstatic void install(tv_runtime* t) { t->memcpy = bad; }",
                              "memcpy_exact_bytes", "memcpy"),
    "memcpy_one_byte_more": _m("memcpy copies n + 1 bytes",
                               f"{S} bad({V} d, const void* s, size_t n, tv_memcpy_kind k) {{ return real->memcpy(d, "
                               "s, n + 1, k); }\nstatic void install(tv_runtime* t) { t->memcpy = bad; }",
                               "memcpy_exact_bytes", "memcpy"),
    "memcpy_unknown_kind_ok": _m("memcpy of an unknown kind succeeds (and does nothing)",
                                 f"{S} bad({V} d, const void* s, size_t n, tv_memcpy_kind k) {{ return k < 1 || k > 4 "
                                 "? TV_SUCCESS : real->memcpy(d, s, n, k); }\n"
                                 "static void install(tv_runtime* t) { t->memcpy = bad; }", "memcpy_errors",
                                 "memcpy"),
    "memcpy_no_range_check": _m("memcpy does not report a bad pointer or range",
                                f"{S} bad({V} d, const void* s, size_t n, tv_memcpy_kind k) {{ tv_status st = "
                                "real->memcpy(d, s, n, k); return st == TV_ERROR_INVALID_VALUE && k >= 1 && k <= 4 ? "
                                "TV_SUCCESS : st; }\nstatic void install(tv_runtime* t) { t->memcpy = bad; }",
                                "memcpy_errors", "memcpy"),
    "memcpy_not_ordered": _m("the blocking memcpy does not wait for other streams",
                             f"{S} bad({V} d, const void* s, size_t n, tv_memcpy_kind k) {{ tv_status st = "
                             "real->memcpy_async(d, s, n, k, side()); return st ? st : real->stream_synchronize("
                             "side()); }\nstatic void install(tv_runtime* t) { t->memcpy = bad; }",
                             "memcpy_orders_after_streams", "memcpy"),
    "memcpy_async_ignores_stream": _m("memcpy_async runs on the default stream, not the given one",
                                      f"{S} bad({V} d, const void* s, size_t n, tv_memcpy_kind k, {P} st) {{ (void)st; "
                                      "return real->memcpy_async(d, s, n, k, NULL); }\n"
                                      "static void install(tv_runtime* t) { t->memcpy_async = bad; }", "stream_order",
                                      "memcpy_async"),
    "memcpy_async_blocks": _m("memcpy_async is a blocking copy",
                              f"{S} bad({V} d, const void* s, size_t n, tv_memcpy_kind k, {P} st) {{ (void)st; "
                              "return real->memcpy(d, s, n, k); }\n"
                              "static void install(tv_runtime* t) { t->memcpy_async = bad; }",
                              "async_returns_promptly", "memcpy_async"),
    "memset_value_clamped": _m("memset clamps the value to a signed char instead of truncating",
                               f"{S} bad({V} d, int v, size_t n) {{ return real->memset(d, v > 127 ? 127 : v, n); }}\n"
                               "static void install(tv_runtime* t) { t->memset = bad; }", "memset_value_and_size",
                               "memset"),
    "memset_async_value_clamped": _m("memset_async clamps the value to a signed char",
                                     f"{S} bad({V} d, int v, size_t n, {P} s) {{ return real->memset_async(d, v > 127 ? "
                                     "127 : v, n, s); }\nstatic void install(tv_runtime* t) { t->memset_async = bad; }",
                                     "memset_async_value_and_size", "memset_async"),
    "memset_one_byte_more": _m("memset sets n + 1 bytes",
                               f"{S} bad({V} d, int v, size_t n) {{ return real->memset(d, v, n + 1); }}\n"
                               "static void install(tv_runtime* t) { t->memset = bad; }", "memset_value_and_size",
                               "memset"),
    "memset_not_ordered": _m("the blocking memset does not wait for other streams",
                             f"{S} bad({V} d, int v, size_t n) {{ tv_status st = real->memset_async(d, v, n, side()); "
                             "return st ? st : real->stream_synchronize(side()); }\n"
                             "static void install(tv_runtime* t) { t->memset = bad; }", "memset_orders_after_streams",
                             "memset"),
    "memset_async_ignores_stream": _m("memset_async runs on the default stream",
                                      f"{S} bad({V} d, int v, size_t n, {P} s) {{ (void)s; return real->memset_async(d, "
                                      "v, n, NULL); }\nstatic void install(tv_runtime* t) { t->memset_async = bad; }",
                                      "stream_order", "memset_async"),
    "memset_async_blocks": _m("memset_async is a blocking memset",
                              f"{S} bad({V} d, int v, size_t n, {P} s) {{ (void)s; return real->memset(d, v, n); }}\n"
                              "static void install(tv_runtime* t) { t->memset_async = bad; }",
                              "async_returns_promptly", "memset_async"),
    # ---- faults past a size: a chunked or staged path the small cases never reach
    "memcpy_short_above_8mib": _m("memcpy copies n - 1 bytes when n > 8 MiB (a staged path)",
                                  f"{S} bad({V} d, const void* s, size_t n, tv_memcpy_kind k) {{ return real->memcpy("
                                  "d, s, n > (8u << 20) ? n - 1 : n, k); }\n"
                                  "static void install(tv_runtime* t) { t->memcpy = bad; }", "memcpy_sizes", "memcpy"),
    "memcpy_drops_partial_chunk": _m("memcpy past 1 MiB copies whole 1 MiB chunks only (the remainder is lost)",
                                     f"{S} bad({V} d, const void* s, size_t n, tv_memcpy_kind k) {{ size_t c = 1u << 20; "
                                     "return real->memcpy(d, s, n > c && n % c ? n - n % c : n, k); }\n"
                                     "static void install(tv_runtime* t) { t->memcpy = bad; }", "memcpy_sizes",
                                     "memcpy"),
    "memcpy_async_short_above_8mib": _m("memcpy_async copies n - 1 bytes when n > 8 MiB",
                                        f"{S} bad({V} d, const void* s, size_t n, tv_memcpy_kind k, {P} st) {{ return "
                                        "real->memcpy_async(d, s, n > (8u << 20) ? n - 1 : n, k, st); }\n"
                                        "static void install(tv_runtime* t) { t->memcpy_async = bad; }",
                                        "memcpy_async_sizes", "memcpy_async"),
    "memset_short_above_4mib": _m("memset sets n - 1 bytes when n > 4 MiB",
                                  f"{S} bad({V} d, int v, size_t n) {{ return real->memset(d, v, n > (4u << 20) ? n - 1 "
                                  ": n); }\nstatic void install(tv_runtime* t) { t->memset = bad; }", "memset_sizes",
                                  "memset"),
    "memset_async_short_above_16mib": _m("memset_async sets n - 1 bytes when n > 16 MiB (the suite's own backlog size)",
                                         f"{S} bad({V} d, int v, size_t n, {P} s) {{ return real->memset_async(d, v, "
                                         "n > (16u << 20) ? n - 1 : n, s); }\n"
                                         "static void install(tv_runtime* t) { t->memset_async = bad; }",
                                         "memset_async_sizes", "memset_async"),
    # ---- streams
    "stream_synchronize_returns_early": _m("stream_synchronize returns at once",
                                           f"{S} bad({P} s) {{ (void)s; return TV_SUCCESS; }}\n"
                                           "static void install(tv_runtime* t) { t->stream_synchronize = bad; }",
                                           "stream_synchronize_waits", "stream_synchronize"),
    "stream_query_always_done": _m("stream_query always says TV_SUCCESS",
                                   f"{S} bad({P} s) {{ (void)s; return TV_SUCCESS; }}\n"
                                   "static void install(tv_runtime* t) { t->stream_query = bad; }", "stream_query",
                                   "stream_query"),
    "stream_query_never_done": _m("stream_query always says TV_ERROR_NOT_READY",
                                  f"{S} bad({P} s) {{ (void)s; return TV_ERROR_NOT_READY; }}\n"
                                  "static void install(tv_runtime* t) { t->stream_query = bad; }", "stream_query",
                                  "stream_query"),
    "stream_destroy_waits": _m("stream_destroy waits for the stream's work",
                               f"{S} bad({P} s) {{ real->stream_synchronize(s); return real->stream_destroy(s); }}\n"
                               "static void install(tv_runtime* t) { t->stream_destroy = bad; }",
                               "async_returns_promptly", "stream_destroy"),
    "default_stream_split": _m("memset_async on the NULL stream uses another queue than memcpy_async",
                               f"{S} bad({V} d, int v, size_t n, {P} s) {{ return real->memset_async(d, v, n, s ? s : "
                               "side()); }\nstatic void install(tv_runtime* t) { t->memset_async = bad; }",
                               "default_stream", "memset_async"),
    "priority_not_clamped": _m("a priority outside the range is refused",
                               f"{S} bad(int32_t d, int32_t p, tv_stream* s) {{ return p < -1 || p > 0 ? "
                               "TV_ERROR_INVALID_VALUE : real->stream_create(d, p, s); }\n"
                               "static void install(tv_runtime* t) { t->stream_create = bad; }", "stream_priorities",
                               "stream_create"),
    "priority_range_inverted": _m("stream_priority_range swaps least and greatest",
                                  f"{S} bad(int32_t* l, int32_t* g) {{ tv_status s = real->stream_priority_range(g, l); "
                                  "return s; }\nstatic void install(tv_runtime* t) { t->stream_priority_range = bad; }",
                                  "stream_priorities", "stream_priority_range"),
    # ---- events
    "event_flags_unchecked": _m("event_create ignores unknown flag bits",
                                f"{S} bad(int32_t d, uint32_t f, tv_event* e) {{ return real->event_create(d, f & 1, e); "
                                "}\nstatic void install(tv_runtime* t) { t->event_create = bad; }",
                                "event_create_flags", "event_create"),
    "event_device_unchecked": _m("event_create on an unknown device uses device 0",
                                 f"{S} bad(int32_t d, uint32_t f, tv_event* e) {{ return real->event_create(d < 0 || "
                                 "d > 1 ? 0 : d, f, e); }\nstatic void install(tv_runtime* t) { t->event_create = bad; }",
                                 "event_create_flags", "event_create"),
    "event_never_records": _m("event_record does nothing",
                              f"{S} bad(tv_event e, {P} s) {{ (void)e; (void)s; return TV_SUCCESS; }}\n"
                              "static void install(tv_runtime* t) { t->event_record = bad; }", "event_completion",
                              "event_record"),
    "event_fires_early": _m("the event is recorded on an idle stream: it completes before its work",
                            f"{S} bad(tv_event e, {P} s) {{ (void)s; return real->event_record(e, side()); }}\n"
                            "static void install(tv_runtime* t) { t->event_record = bad; }", "event_completion",
                            "event_record"),
    "event_never_completes": _m("a recorded event never completes",
                                f"{S} bad_record(tv_event e, {P} s) {{ mark(e); return real->event_record(e, s); }}\n"
                                f"{S} bad_query(tv_event e) {{ return was_recorded(e) ? TV_ERROR_NOT_READY : "
                                "real->event_query(e); }\n"
                                f"{S} bad_sync(tv_event e) {{ while (was_recorded(e)) usleep(1000); "
                                "return real->event_synchronize(e); }\n"
                                "static void install(tv_runtime* t) { t->event_record = bad_record; t->event_destroy = forget; "
                                "t->event_query = bad_query; t->event_synchronize = bad_sync; }",
                                "event_completion", "event_synchronize"),
    "event_unrecorded_not_ready": _m("event_query says TV_ERROR_NOT_READY for an event never recorded",
                                     f"{S} bad_record(tv_event e, {P} s) {{ mark(e); return real->event_record(e, s); }}\n"
                                     f"{S} bad_query(tv_event e) {{ return was_recorded(e) ? real->event_query(e) : "
                                     "TV_ERROR_NOT_READY; }\nstatic void install(tv_runtime* t) { "
                                     "t->event_record = bad_record; t->event_query = bad_query; t->event_destroy = forget; }",
                                     "event_never_recorded", "event_query"),
    "event_record_device_unchecked": _m("event_record accepts a stream of another device",
                                        f"{S} bad(tv_event e, {P} s) {{ tv_status st = real->event_record(e, s); "
                                        "return st == TV_ERROR_INVALID_VALUE ? TV_SUCCESS : st; }\n"
                                        "static void install(tv_runtime* t) { t->event_record = bad; }",
                                        "event_record_device", "event_record"),
    "stream_wait_event_noop": _m("stream_wait_event does nothing",
                                 f"{S} bad({P} s, tv_event e) {{ (void)s; (void)e; return TV_SUCCESS; }}\n"
                                 "static void install(tv_runtime* t) { t->stream_wait_event = bad; }",
                                 "stream_wait_event", "stream_wait_event"),
    "stream_wait_event_blocks_host": _m("stream_wait_event waits on the host",
                                        f"{S} bad({P} s, tv_event e) {{ real->event_synchronize(e); "
                                        "return real->stream_wait_event(s, e); }\n"
                                        "static void install(tv_runtime* t) { t->stream_wait_event = bad; }",
                                        "async_returns_promptly", "stream_wait_event"),
    "elapsed_in_microseconds": _m("event_elapsed_time in microseconds",
                                  f"{S} bad(tv_event a, tv_event b, float* ms) {{ tv_status s = "
                                  "real->event_elapsed_time(a, b, ms); if (!s) *ms *= 1000; return s; }\n"
                                  "static void install(tv_runtime* t) { t->event_elapsed_time = bad; }",
                                  "elapsed_time", "event_elapsed_time"),
    "elapsed_in_seconds": _m("event_elapsed_time in seconds",
                             f"{S} bad(tv_event a, tv_event b, float* ms) {{ tv_status s = "
                             "real->event_elapsed_time(a, b, ms); if (!s) *ms /= 1000; return s; }\n"
                             "static void install(tv_runtime* t) { t->event_elapsed_time = bad; }",
                             "elapsed_time", "event_elapsed_time"),
    "elapsed_without_timing": _m("event_elapsed_time answers for events created without timing",
                                 f"{S} bad(tv_event a, tv_event b, float* ms) {{ tv_status s = "
                                 "real->event_elapsed_time(a, b, ms); if (s == TV_ERROR_INVALID_VALUE) { *ms = 0; "
                                 "return TV_SUCCESS; } return s; }\n"
                                 "static void install(tv_runtime* t) { t->event_elapsed_time = bad; }",
                                 "elapsed_time", "event_elapsed_time"),
    "elapsed_pending_is_zero": _m("event_elapsed_time of a pending event is 0, not TV_ERROR_NOT_READY",
                                  f"{S} bad(tv_event a, tv_event b, float* ms) {{ tv_status s = "
                                  "real->event_elapsed_time(a, b, ms); if (s == TV_ERROR_NOT_READY) { *ms = 0; "
                                  "return TV_SUCCESS; } return s; }\n"
                                  "static void install(tv_runtime* t) { t->event_elapsed_time = bad; }",
                                  "elapsed_time", "event_elapsed_time"),
    "elapsed_unrecorded_wrong_code": _m("event_elapsed_time of unrecorded events is TV_ERROR_INVALID_VALUE",
                                        f"{S} bad(tv_event a, tv_event b, float* ms) {{ tv_status s = "
                                        "real->event_elapsed_time(a, b, ms); return s == TV_ERROR_INVALID_HANDLE ? "
                                        "TV_ERROR_INVALID_VALUE : s; }\n"
                                        "static void install(tv_runtime* t) { t->event_elapsed_time = bad; }",
                                        "elapsed_time", "event_elapsed_time"),
    # ---- modules
    "module_missing_file_wrong_code": _m("a missing module file is TV_ERROR_INVALID_IMAGE",
                                         f"{S} bad(int32_t d, const char* p, tv_module* m) {{ tv_status s = "
                                         "real->module_load_file(d, p, m); return s == TV_ERROR_NOT_FOUND ? "
                                         "TV_ERROR_INVALID_IMAGE : s; }\n"
                                         "static void install(tv_runtime* t) { t->module_load_file = bad; }",
                                         "module_load_errors", "module_load_file"),
    "function_lookup_wrong_code": _m("an unknown function name is TV_ERROR_INVALID_VALUE",
                                     f"{S} bad(tv_module m, const char* n, tv_function* f) {{ tv_status s = "
                                     "real->module_get_function(m, n, f); return s == TV_ERROR_NOT_FOUND ? "
                                     "TV_ERROR_INVALID_VALUE : s; }\n"
                                     "static void install(tv_runtime* t) { t->module_get_function = bad; }",
                                     "module_functions", "module_get_function"),
    "launch_args_not_copied": _m("launch reads the argument buffer later, from another thread",
                                 "struct job { tv_function f; tv_launch_config c; const void* a; size_t n; "
                                 "tv_stream s; };\n"
                                 "static void* later(void* p) { struct job* j = p; usleep(20000); "
                                 "real->launch(j->f, &j->c, j->a, j->n, j->s); return NULL; }\n"
                                 f"{S} bad(tv_function f, const tv_launch_config* c, const void* a, size_t n, {P} s) "
                                 "{ static struct job j; pthread_t t; j = (struct job){f, *c, a, n, s}; "
                                 "if (pthread_create(&t, NULL, later, &j)) return TV_ERROR_UNKNOWN; "
                                 "pthread_detach(t); return TV_SUCCESS; }\n"
                                 "static void install(tv_runtime* t) { t->launch = bad; }",
                                 "module_functions", "launch"),
    # ---- errors
    "error_string_null": _m("get_error_string returns NULL for an unknown status",
                            "static const char* bad(tv_status s) { return s > 9 && s != 999 ? NULL : "
                            "real->get_error_string(s); }\n"
                            "static void install(tv_runtime* t) { t->get_error_string = bad; }", "error_strings",
                            "get_error_string"),
    "error_string_generic": _m("every status is named \"error\"",
                               "static const char* bad(tv_status s) { return s ? \"error\" : \"success\"; }\n"
                               "static void install(tv_runtime* t) { t->get_error_string = bad; }", "error_strings",
                               "get_error_string"),
    "last_error_always_empty": _m("last_error_message is always empty",
                                  "static const char* bad(void) { return \"\"; }\n"
                                  "static void install(tv_runtime* t) { t->last_error_message = bad; }",
                                  "last_error_message", "last_error_message"),
    # ---- collectives
    "comm_rank_unchecked": _m("comm_create accepts a rank outside [0, nranks)",
                              f"{S} bad(const char* id, int32_t n, int32_t r, int32_t d, tv_comm* c) {{ return "
                              "real->comm_create(id, n, r < 0 || r >= n ? 0 : r, d, c); }\n"
                              "static void install(tv_runtime* t) { t->comm_create = bad; }",
                              "collectives_single_rank", "comm_create"),
}


def sim_path() -> str:
    from torchvendor.sdk import default_runtime_path

    return default_runtime_path()


def build(name: str, out_dir: Path) -> Path:
    """Compile mutant ``name`` into ``out_dir/libmutant_<name>.so``."""
    _, body, _, _ = MUTANTS[name]
    src, lib = out_dir / f"mutant_{name}.c", out_dir / f"libmutant_{name}.so"
    src.write_text(TEMPLATE % {"body": body, "sim": sim_path()})
    cc = shutil.which("cc") or shutil.which("gcc")
    done = subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wall", "-Wno-unused-function", "-Wno-unused-variable",
                           f"-I{ROOT / 'csrc' / 'include'}", str(src), "-o", str(lib), "-ldl", "-lpthread"],
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"mutant {name} does not compile:\n{done.stderr}")
    return lib


def kill(lib: Path, cases: tuple[str, ...] = (), timeout: float = 240.0) -> dict[str, tuple[str, str]]:
    """Run the runtime area on ``lib`` in a subprocess: {case: (status, reason)}; a case running when
    the subprocess died or timed out counts as failed ("crashed")."""
    env = {**os.environ, "TORCHVENDOR_RUNTIME_WATCHDOG_S": "10", "PYTHONWARNINGS": "ignore"}
    cmd = [sys.executable, "-m", "torchvendor.sdk.conformance.runtime_cases", str(lib), *cases]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        out, tail = done.stdout, f"exit {done.returncode}: {done.stderr[-300:]}"
    except subprocess.TimeoutExpired as e:
        out, tail = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), "timed out"
    results, running = {}, None
    for line in out.splitlines():
        row = json.loads(line)
        if "start" in row:
            running = row["start"].removeprefix("runtime/")
        else:  # a failure an earlier one explains comes again at the end, marked "blocked by"
            results[row["id"].removeprefix("runtime/")] = (row["status"], row["reason"])
            running = None
    if running is not None:
        results[running] = ("fail", f"the process died in this case ({tail})")
    return results


def kill_table() -> str:
    """The Markdown kill table of docs/conformance.md."""
    rows = ["| mutant | what the driver gets wrong | killed by |", "|---|---|---|"]
    rows += [f"| `{name}` | {what} | `runtime/{case}` |" for name, (what, _, case, _) in MUTANTS.items()]
    return "\n".join(rows)


def first_suspect(results: dict[str, tuple[str, str]]) -> tuple[str, str]:
    """(entry, case) the report names on its first line for a run's ``results`` (as ``kill`` gives
    them): the first suspect of the first failure, in the suite's order, that no earlier failure
    explains."""
    from types import SimpleNamespace

    from torchvendor.sdk.conformance.runtime_order import fix_first

    rows = [SimpleNamespace(id=f"runtime/{case}", status=status, reason=reason,
                            tags={"blocked_by": "yes"} if reason.startswith("blocked by") else {})
            for case, (status, reason) in results.items()]
    first = fix_first(rows)
    return (first["entry"], first["case"].removeprefix("runtime/")) if first else ("", "")


def suspect_table(found: dict[str, tuple[str, str]]) -> str:
    """The Markdown first-suspect table: each mutant, the entry it breaks, what the report's first
    line names (``found``: mutant -> (entry, case) from :func:`first_suspect`), hit or miss."""
    rows = ["| mutant | entry broken | first line names | from | hit |", "|---|---|---|---|---|"]
    hits = 0
    for name, (_, _, _, entries) in MUTANTS.items():
        entry, case = found.get(name, ("", ""))
        hit = entry in entries
        hits += hit
        rows.append(f"| `{name}` | `{entries[0]}` | `{entry or '-'}` | `runtime/{case or '-'}` | {'yes' if hit else '**no**'} |")
    rows.append(f"| **{hits} / {len(MUTANTS)}** | | | | **{100 * hits / len(MUTANTS):.0f} %** |")
    return "\n".join(rows)
