/*
 * torchvendor runtime ABI: the table of C functions a vendor's driver library implements.
 *
 *     PyTorch (Python, ATen, c10)
 *           |
 *     torchvendor._C  -- the device layer: allocator, guard, hooks, generators, copies, fallback.
 *           |             Rebuilt for each torch release; the vendor never compiles against torch.
 *     tv_runtime table  -- THIS HEADER. Plain C99, no torch, no C++ types.
 *           |
 *     vendor driver library (libacme_tv.so), exporting `torchvendor_get_runtime`.
 *
 * Rules for changing this header (the ABI contract):
 *   - The table starts with its version and size; those fields never move.
 *   - A minor version only appends entries at the end of `tv_runtime`. A library built for an
 *     older minor keeps working: the device layer reads only entries that lie inside the
 *     library's `struct_size`, and treats optional entries that are NULL as "not provided".
 *   - A major version may change anything; the device layer refuses a major it does not know.
 *   - Signatures never change within a major version: a new behaviour gets a new entry (`_v2`).
 *
 * Error handling: every entry returns a `tv_status` (0 is success) and never lets an exception
 * or a signal escape. Details for the calling thread are available from `last_error_message`.
 *
 * Each entry's contract is the comment directly above it; docs/runtime.md repeats these comments
 * word for word (tests/test_device_runtime_contract.py checks it). Entries marked "Optional."
 * may be NULL: the feature they serve (pinned memory, async copies, timing, modules and
 * launches, error strings, native collectives) is then reported missing by
 * `torch.<name>.diagnose()` and raises NotImplementedError when used (collectives are then staged
 * through host memory instead). Every other entry is required.
 *
 * Streams: a NULL `tv_stream` names the default stream of the calling thread's current device.
 * An event and the stream it is recorded on or waited by belong to one device; a function may be
 * launched only on a stream of the device its module was loaded on. Function handles stay valid
 * until their module is unloaded.
 *
 * Asynchronous failures: a launched function that fails makes the next stream_query,
 * stream_synchronize and device_synchronize on that stream's device return
 * TV_ERROR_LAUNCH_FAILED (sticky for that stream, as in CUDA); later work still runs.
 *
 * Threading: unless an entry says otherwise it may be called from any thread at any time, and
 * concurrently with any other entry. "Current device" state is per host thread.
 *
 * Blocking: entries marked [blocks] may wait for device work; all others must return promptly
 * (enqueue and return). The device layer never holds the Python GIL across a [blocks] call.
 */
#ifndef TORCHVENDOR_RUNTIME_H_
#define TORCHVENDOR_RUNTIME_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TV_RUNTIME_ABI_MAJOR 1
#define TV_RUNTIME_ABI_MINOR 2

/* The one symbol a vendor library exports. */
#define TV_RUNTIME_ENTRY_SYMBOL "torchvendor_get_runtime"

#if defined(_WIN32)
#define TV_EXPORT __declspec(dllexport)
#else
#define TV_EXPORT __attribute__((visibility("default")))
#endif

typedef int32_t tv_status;
enum {
  TV_SUCCESS = 0,
  TV_ERROR_INVALID_VALUE = 1,   /* a bad argument: NULL out-pointer, size, kind, ... */
  TV_ERROR_INVALID_DEVICE = 2,  /* device index out of range */
  TV_ERROR_OUT_OF_MEMORY = 3,   /* the allocation cannot be satisfied */
  TV_ERROR_NOT_READY = 4,       /* query: work is still pending (not a failure) */
  TV_ERROR_NOT_FOUND = 5,       /* module or function name not found */
  TV_ERROR_INVALID_IMAGE = 6,   /* module binary cannot be loaded */
  TV_ERROR_LAUNCH_FAILED = 7,   /* a launched function failed on the device */
  TV_ERROR_NOT_SUPPORTED = 8,   /* the runtime does not implement this operation */
  TV_ERROR_INVALID_HANDLE = 9,  /* a stream, event, module or function handle is not valid */
  TV_ERROR_UNKNOWN = 999
};

typedef enum tv_memcpy_kind {
  TV_MEMCPY_HOST_TO_DEVICE = 1,
  TV_MEMCPY_DEVICE_TO_HOST = 2,
  TV_MEMCPY_DEVICE_TO_DEVICE = 3, /* same or different devices */
  TV_MEMCPY_HOST_TO_HOST = 4
} tv_memcpy_kind;

/* Opaque handles, owned by the runtime. */
typedef struct tv_stream_st* tv_stream;
typedef struct tv_event_st* tv_event;
typedef struct tv_module_st* tv_module;
typedef struct tv_function_st* tv_function;
typedef struct tv_comm_st* tv_comm;       /* minor 1: one rank's handle on a communicator */

/* The most bytes a communicator's bootstrap token may have (minor 2; NCCL's unique id is 128). */
#define TV_COMM_TOKEN_MAX 1024

/* Element types of collectives (minor 1). */
typedef enum tv_dtype {
  TV_FLOAT32 = 0, TV_FLOAT64 = 1, TV_FLOAT16 = 2, TV_BFLOAT16 = 3,
  TV_INT8 = 4, TV_UINT8 = 5, TV_INT32 = 6, TV_INT64 = 7, TV_BOOL = 8
} tv_dtype;

/* Reductions of collectives (minor 1). TV_REDUCE_AVG is the sum divided by the number of ranks,
 * for floating-point types only. */
typedef enum tv_reduce_op {
  TV_REDUCE_SUM = 0, TV_REDUCE_PROD = 1, TV_REDUCE_MAX = 2, TV_REDUCE_MIN = 3, TV_REDUCE_AVG = 4
} tv_reduce_op;

typedef struct tv_device_properties {
  uint32_t struct_size;         /* set by the caller to sizeof(tv_device_properties) */
  char name[256];               /* NUL-terminated, e.g. "Acme A1" */
  uint64_t total_memory;        /* bytes */
  int32_t capability_major;     /* vendor-defined compute capability */
  int32_t capability_minor;
  int32_t multiprocessor_count; /* parallel units; informational */
  int32_t reserved[9];
} tv_device_properties;

/* Event flags for event_create. */
enum { TV_EVENT_DEFAULT = 0, TV_EVENT_ENABLE_TIMING = 1 };

typedef struct tv_launch_config {
  uint32_t grid[3];             /* number of blocks in x, y, z */
  uint32_t block[3];            /* threads per block in x, y, z */
  uint32_t shared_memory_bytes;
  /* Byte offsets into the argument buffer at which device pointers lie. Runtimes whose device
   * memory lives at another address than the host sees (the simulator) translate these; a GPU
   * runtime may ignore them. */
  const uint32_t* pointer_offsets;
  uint32_t num_pointer_offsets;
} tv_launch_config;

typedef struct tv_runtime {
  /* ---- header: never moves ---- */
  uint32_t abi_major;           /* TV_RUNTIME_ABI_MAJOR the library was built with */
  uint32_t abi_minor;           /* TV_RUNTIME_ABI_MINOR the library was built with */
  uint64_t struct_size;         /* sizeof(tv_runtime) the library was built with */
  const char* name;             /* runtime name for diagnostics, e.g. "acme-driver 3.1" */

  /* ---- devices ---- */
  /* Number of devices; 0 is valid. Must not fail once the library is loaded. */
  tv_status (*device_count)(int32_t* count);
  /* Fill props; the caller sets props->struct_size to sizeof(tv_device_properties). An
   * out-of-range device is TV_ERROR_INVALID_DEVICE. */
  tv_status (*get_device_properties)(int32_t device, tv_device_properties* props);
  /* Make `device` current for the calling host thread. An out-of-range index is
   * TV_ERROR_INVALID_DEVICE. */
  tv_status (*set_device)(int32_t device);
  /* The calling host thread's current device (0 until set_device is called). */
  tv_status (*get_device)(int32_t* device);
  /* [blocks] Wait for all work on all streams of `device`; reports a failed launch on any of
   * them as TV_ERROR_LAUNCH_FAILED. */
  tv_status (*device_synchronize)(int32_t device);

  /* ---- memory ---- */
  /* Device memory on `device`, aligned to at least 256 bytes; size 0 yields *ptr == NULL.
   * Exhaustion is TV_ERROR_OUT_OF_MEMORY (the device layer then frees its cache and retries
   * once). May block while the runtime maps memory; never waits on streams. */
  tv_status (*malloc)(int32_t device, size_t size, void** ptr);
  /* Free device memory from malloc on `device`; NULL succeeds; a pointer that is not a live
   * allocation of `device` is TV_ERROR_INVALID_VALUE. The device layer only frees memory whose
   * last use has completed. */
  tv_status (*free)(int32_t device, void* ptr);
  /* Optional. Page-locked host memory usable for asynchronous copies; size 0 yields NULL. */
  tv_status (*host_malloc)(size_t size, void** ptr);
  /* Optional. Free memory from host_malloc; NULL succeeds; any other pointer is
   * TV_ERROR_INVALID_VALUE. */
  tv_status (*host_free)(void* ptr);
  /* [blocks] Copy n bytes of the given kind; returns once the copy is complete and ordered
   * after all work enqueued earlier on every stream of the devices involved. A host pointer
   * where the kind says device (or the reverse), or a range outside a live allocation, is
   * TV_ERROR_INVALID_VALUE. */
  tv_status (*memcpy)(void* dst, const void* src, size_t n, tv_memcpy_kind kind);
  /* Optional. Enqueue a copy on `stream` (NULL: the default stream of the current device).
   * Host memory must stay valid until the stream reaches the copy. */
  tv_status (*memcpy_async)(void* dst, const void* src, size_t n, tv_memcpy_kind kind,
                            tv_stream stream);
  /* Optional. [blocks] Set n bytes of device memory to (unsigned char)value, ordered like
   * memcpy. */
  tv_status (*memset)(void* dst, int value, size_t n);
  /* Optional. Enqueue a memset on `stream`. */
  tv_status (*memset_async)(void* dst, int value, size_t n, tv_stream stream);

  /* ---- streams: in-order queues of device work ---- */
  /* A new stream on `device`. Lower priority numbers are higher priority, as in CUDA;
   * priorities outside stream_priority_range are clamped. */
  tv_status (*stream_create)(int32_t device, int32_t priority, tv_stream* stream);
  /* Returns at once; pending work on the stream still finishes. */
  tv_status (*stream_destroy)(tv_stream stream);
  /* TV_SUCCESS if all work is done, TV_ERROR_NOT_READY while work is pending,
   * TV_ERROR_LAUNCH_FAILED if a launch on it failed (sticky). */
  tv_status (*stream_query)(tv_stream stream);
  /* [blocks] Wait for all work on the stream; a failed launch on it is TV_ERROR_LAUNCH_FAILED
   * (sticky). */
  tv_status (*stream_synchronize)(tv_stream stream);
  /* Optional. The accepted range: *least is the lowest priority, *greatest the highest
   * (greatest <= least). Without it every stream has priority 0. */
  tv_status (*stream_priority_range)(int32_t* least, int32_t* greatest);

  /* ---- events: markers in a stream ---- */
  /* A new event on `device`; flags is TV_EVENT_DEFAULT or TV_EVENT_ENABLE_TIMING, any other
   * bit is TV_ERROR_INVALID_VALUE. */
  tv_status (*event_create)(int32_t device, uint32_t flags, tv_event* event);
  /* May be called while the event is pending; waits on it stay valid. */
  tv_status (*event_destroy)(tv_event event);
  /* Capture the work enqueued so far on `stream` (re-recording replaces the capture). The
   * stream must belong to the event's device, else TV_ERROR_INVALID_VALUE. */
  tv_status (*event_record)(tv_event event, tv_stream stream);
  /* TV_SUCCESS if the captured work is done (or the event was never recorded),
   * TV_ERROR_NOT_READY otherwise. */
  tv_status (*event_query)(tv_event event);
  /* [blocks] Wait for the captured work (returns at once if never recorded). */
  tv_status (*event_synchronize)(tv_event event);
  /* Make future work on `stream` wait for the event's captured work; does not block the host. */
  tv_status (*stream_wait_event)(tv_stream stream, tv_event event);
  /* Optional. Milliseconds between two completed events: TV_ERROR_INVALID_VALUE if either was
   * created without TV_EVENT_ENABLE_TIMING, TV_ERROR_INVALID_HANDLE if either was never
   * recorded, TV_ERROR_NOT_READY if either is still pending. */
  tv_status (*event_elapsed_time)(tv_event start, tv_event end, float* milliseconds);

  /* ---- modules: compiled device code ---- */
  /* Optional. Load a module from a file in the runtime's own binary format (a cubin, an ELF, a
   * shared library...) for `device`. A missing file is TV_ERROR_NOT_FOUND, one the runtime
   * cannot load TV_ERROR_INVALID_IMAGE. */
  tv_status (*module_load_file)(int32_t device, const char* path, tv_module* module);
  /* Optional. Load a module from an in-memory image (copied before return); errors as
   * module_load_file. */
  tv_status (*module_load_data)(int32_t device, const void* image, size_t size,
                                tv_module* module);
  /* Optional. Unload a module; its function handles become invalid, launches already enqueued
   * still run. */
  tv_status (*module_unload)(tv_module module);
  /* Optional. Look up a function by name; an unknown name is TV_ERROR_NOT_FOUND. Handles stay
   * valid until the module is unloaded. */
  tv_status (*module_get_function)(tv_module module, const char* name, tv_function* function);
  /* Optional. Enqueue `function` on `stream` (a stream of the module's device, else
   * TV_ERROR_INVALID_VALUE) with a packed argument buffer, copied before return;
   * config->pointer_offsets say where device pointers lie in it. */
  tv_status (*launch)(tv_function function, const tv_launch_config* config, const void* args,
                      size_t args_size, tv_stream stream);

  /* ---- errors ---- */
  /* Optional. A static string naming a status, e.g. "TV_ERROR_OUT_OF_MEMORY". Never NULL. */
  const char* (*get_error_string)(tv_status status);
  /* Optional. The detailed message of the calling thread's last failing call, or "". Never
   * NULL. */
  const char* (*last_error_message)(void);

  /* ---- collectives (minor 1): all optional, provided together or not at all (comm_create may
   * be NULL when the minor-2 bootstrap entries below are there) ----
   * Like NCCL: every rank of a communicator enqueues the same collectives in the same order;
   * each runs when its stream reaches it and completes when every rank's part has run. Buffers
   * are device memory of the communicator's device, `count` is in elements of `dtype`. A peer
   * that never arrives (a crashed process) fails the collective after the runtime's timeout: the
   * stream then reports TV_ERROR_LAUNCH_FAILED (sticky), as for a failed launch. */
  /* Optional. [blocks] Join communicator `id` (1 to 63 characters of [A-Za-z0-9_.-], the same on
   * every rank, unique among live communicators of the machine) as `rank` of `nranks`, for
   * `device`. Returns once all ranks have joined; a rank outside [0, nranks) is
   * TV_ERROR_INVALID_VALUE, ranks not all joined within the runtime's timeout TV_ERROR_NOT_READY. */
  tv_status (*comm_create)(const char* id, int32_t nranks, int32_t rank, int32_t device,
                           tv_comm* comm);
  /* Optional. Release the communicator; collectives already enqueued on it still run. */
  tv_status (*comm_destroy)(tv_comm comm);
  /* Optional. Enqueue on `stream` (of the communicator's device, else TV_ERROR_INVALID_VALUE) the
   * reduction over all ranks of `count` elements of sendbuf into every rank's recvbuf (which may
   * be sendbuf). A dtype or op the runtime does not reduce is TV_ERROR_NOT_SUPPORTED. */
  tv_status (*all_reduce)(const void* sendbuf, void* recvbuf, size_t count, tv_dtype dtype,
                          tv_reduce_op op, tv_comm comm, tv_stream stream);
  /* Optional. Enqueue on `stream` a copy of `count` elements of rank `root`'s sendbuf into every
   * rank's recvbuf (sendbuf is read on root only). */
  tv_status (*broadcast)(const void* sendbuf, void* recvbuf, size_t count, tv_dtype dtype,
                         int32_t root, tv_comm comm, tv_stream stream);
  /* Optional. Enqueue on `stream`: every rank's `sendcount` elements land in every rank's recvbuf
   * at offset rank * sendcount (sendbuf may lie at that place in recvbuf). */
  tv_status (*all_gather)(const void* sendbuf, void* recvbuf, size_t sendcount, tv_dtype dtype,
                          tv_comm comm, tv_stream stream);
  /* Optional. Enqueue on `stream`: sendbuf holds nranks blocks of `recvcount` elements; rank r's
   * recvbuf gets the reduction over all ranks of block r. Errors as all_reduce. */
  tv_status (*reduce_scatter)(const void* sendbuf, void* recvbuf, size_t recvcount,
                              tv_dtype dtype, tv_reduce_op op, tv_comm comm, tv_stream stream);
  /* Optional. Enqueue on `stream` the sending of `count` elements of buf to rank `peer`, which
   * receives them with recv; sends to one peer arrive in order. */
  tv_status (*send)(const void* buf, size_t count, tv_dtype dtype, int32_t peer, tv_comm comm,
                    tv_stream stream);
  /* Optional. Enqueue on `stream` the receiving of `count` elements from rank `peer` into buf. */
  tv_status (*recv)(void* buf, size_t count, tv_dtype dtype, int32_t peer, tv_comm comm,
                    tv_stream stream);

  /* ---- communicator bootstrap (minor 2): optional, provided together ----
   * For a collective library whose communicators span hosts (NCCL, RCCL, ...): rank 0 makes a
   * token, the device layer hands it to every rank through the process group's c10d store, and
   * every rank joins with it. A runtime that has these may leave comm_create NULL; the device
   * layer prefers them when both are there. */
  /* Optional. Write the bootstrap token of a new communicator on `device` (at most
   * TV_COMM_TOKEN_MAX bytes) to `token` and its length to *size; called on rank 0 only. */
  tv_status (*comm_token)(int32_t device, void* token, size_t* size);
  /* Optional. [blocks] Join the communicator of `token` (size bytes from comm_token on rank 0)
   * as `rank` of `nranks`, for `device`; returns once all ranks have joined. Errors as
   * comm_create. */
  tv_status (*comm_create_from_token)(const void* token, size_t size, int32_t nranks,
                                      int32_t rank, int32_t device, tv_comm* comm);
} tv_runtime;

/* The entry point. `requested_major` is the major version the caller speaks; a library that
 * cannot serve it returns TV_ERROR_NOT_SUPPORTED (and should say why on stderr: the table that
 * carries last_error_message is what it failed to return). The table is static: valid until
 * unload. */
typedef tv_status (*tv_get_runtime_fn)(uint32_t requested_major, const tv_runtime** runtime);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TORCHVENDOR_RUNTIME_H_ */
