/*
 * torchvendor-cuda: the runtime table of torchvendor/runtime.h over the CUDA driver API, in C11.
 * What a GPU vendor writes to bring its driver to PyTorch: every entry is a thin, checked call
 * into the driver; docs/reference_cuda.md explains the design.
 *
 * Driver. libcuda.so.1 is opened with dlopen at the first torchvendor_get_runtime, and each
 * entry point is looked up under the versioned name cuda.h gives it (cuMemAlloc is
 * cuMemAlloc_v2). So the library builds with only cuda.h, loads on a machine without a driver,
 * and there fails with a message saying so ($TORCHVENDOR_CUDA_DRIVER names another library).
 *
 * Contexts. Device i runs in its primary context (the one the CUDA runtime and PyTorch use),
 * retained on first use. The current device is per host thread; every entry makes the context
 * of the device it works on current before calling the driver.
 *
 * Streams and events wrap CUstream/CUevent with their device. A NULL tv_stream is the legacy
 * default stream of the current device's context. Created streams are blocking streams, so the
 * blocking copies (ordered after the default stream) are ordered after them too, as the ABI asks.
 *
 * Modules are PTX, cubin or fatbin images (cuModuleLoadDataEx; PTX is JIT-compiled with the JIT
 * log in the error message). launch passes the packed argument buffer to cuLaunchKernel as
 * CU_LAUNCH_PARAM_BUFFER_POINTER: the ABI's buffer layout (natural C alignment) is the kernel
 * parameter layout. Device pointers are real GPU addresses, so pointer_offsets are not needed.
 *
 * Collectives (runtime.h minor 1 and 2) run on NCCL, opened with dlopen on first use (the one
 * torch ships, found by the Python side; no build-time dependency). Rank 0's ncclUniqueId is the
 * communicator's bootstrap token, which the device layer hands to the other ranks through the
 * c10d store, so one communicator spans hosts; each collective is the NCCL call on the
 * tv_stream's CUstream.
 *
 * Failures. A kernel fault is sticky for the whole context in CUDA (not only for its stream, as
 * the ABI describes): every later call on the device returns TV_ERROR_LAUNCH_FAILED.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "torchvendor/runtime.h"
#include "torchvendor/runtime_checks.h"

#define MAX_DEVICES 64
#define LIVE 0x74766375U /* magic of a live handle, cleared when it is destroyed */

/* ---------------------------------------------------------------- the driver, through dlopen */
#define DRIVER(X)                                                                                  \
  X(cuInit) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGetCount) X(cuDeviceGet)               \
  X(cuDeviceGetName) X(cuDeviceTotalMem) X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain)       \
  X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuCtxGetStreamPriorityRange) X(cuMemAlloc)              \
  X(cuMemFree) X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemcpy) X(cuMemcpyAsync) X(cuMemsetD8Async)  \
  X(cuPointerGetAttribute) X(cuPointerGetAttributes) X(cuStreamCreateWithPriority) X(cuStreamDestroy) X(cuStreamQuery)       \
  X(cuStreamSynchronize) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventQuery)       \
  X(cuEventSynchronize) X(cuStreamWaitEvent) X(cuEventElapsedTime) X(cuModuleLoadDataEx)           \
  X(cuModuleUnload) X(cuModuleGetFunction) X(cuFuncSetAttribute) X(cuLaunchKernel) X(cuCtxGetCurrent)
#define STR_(x) #x
#define STR(x) STR_(x) /* expands cuda.h's renames: STR(cuMemAlloc) is "cuMemAlloc_v2" */
#define DECLARE(f) __typeof__(f)* f;
static struct { DRIVER(DECLARE) } drv; /* drv.cuMemAlloc(...) calls cuMemAlloc_v2 */

static _Thread_local int32_t t_dev;

static tv_status status_of(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return TV_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE: return TV_ERROR_INVALID_VALUE;
    case CUDA_ERROR_INVALID_DEVICE: case CUDA_ERROR_NO_DEVICE: return TV_ERROR_INVALID_DEVICE;
    case CUDA_ERROR_OUT_OF_MEMORY: return TV_ERROR_OUT_OF_MEMORY;
    case CUDA_ERROR_NOT_READY: return TV_ERROR_NOT_READY;
    case CUDA_ERROR_NOT_FOUND: case CUDA_ERROR_FILE_NOT_FOUND: return TV_ERROR_NOT_FOUND;
    case CUDA_ERROR_INVALID_IMAGE: case CUDA_ERROR_INVALID_PTX: case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION: case CUDA_ERROR_INVALID_SOURCE:
    case CUDA_ERROR_JIT_COMPILER_NOT_FOUND: return TV_ERROR_INVALID_IMAGE;
    case CUDA_ERROR_LAUNCH_FAILED: case CUDA_ERROR_ILLEGAL_ADDRESS: case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_MISALIGNED_ADDRESS: case CUDA_ERROR_ASSERT: case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_HARDWARE_STACK_ERROR: case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE: return TV_ERROR_LAUNCH_FAILED;
    case CUDA_ERROR_INVALID_HANDLE: case CUDA_ERROR_INVALID_CONTEXT:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED: return TV_ERROR_INVALID_HANDLE;
    case CUDA_ERROR_NOT_SUPPORTED: return TV_ERROR_NOT_SUPPORTED;
    default: return TV_ERROR_UNKNOWN;
  }
}

/* The status of a driver result; on failure the message names the entry and the driver error. */
static tv_status check(CUresult r, const char* where) {
  const char *name = "?", *text = "";
  if (r == CUDA_SUCCESS) return TV_SUCCESS;
  drv.cuGetErrorName(r, &name);
  drv.cuGetErrorString(r, &text);
  return tv_fail(status_of(r), "%s: %s (%s)", where, name, text);
}
#define CU(call) check(drv.call, __func__)

static struct {
  pthread_mutex_t mu; /* guards ctx[] and every module's function list */
  int32_t ndev;
  CUcontext ctx[MAX_DEVICES];
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

#define CHECK_DEV(d) TV_CHECK_DEVICE(d, g.ndev) /* the checks: torchvendor/runtime_checks.h */

/* Make device dev's primary context current on this thread (retaining it on first use). Every
 * launch comes here: once retained, a context is read without the lock, and set only when the
 * thread's current one is another (torch's CUDA runtime uses the same primary contexts). */
static tv_status use(int32_t dev) {
  CHECK_DEV(dev);
  CUcontext c = __atomic_load_n(&g.ctx[dev], __ATOMIC_ACQUIRE), cur = NULL;
  if (c) {
    if (drv.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == c) return TV_SUCCESS;
    return check(drv.cuCtxSetCurrent(c), "cuCtxSetCurrent");
  }
  pthread_mutex_lock(&g.mu);
  CUresult r = CUDA_SUCCESS;
  CUdevice d;
  if (!g.ctx[dev] && !(r = drv.cuDeviceGet(&d, dev)) && !(r = drv.cuDevicePrimaryCtxRetain(&c, d)))
    __atomic_store_n(&g.ctx[dev], c, __ATOMIC_RELEASE);
  c = g.ctx[dev];
  pthread_mutex_unlock(&g.mu);
  TV_TRY(check(r, "retaining the primary context"));
  return check(drv.cuCtxSetCurrent(c), "cuCtxSetCurrent");
}

/* ---------------------------------------------------------------- devices */
static tv_status cu_device_count(int32_t* count) {
  TV_CHECK_ARGS(count);
  *count = g.ndev;
  return TV_SUCCESS;
}

static tv_status cu_get_device_properties(int32_t dev, tv_device_properties* props) {
  CHECK_DEV(dev);
  TV_TRY(tv_check_properties(__func__, props));
  CUdevice d;
  size_t total = 0;
  int major = 0, minor = 0, sms = 0;
  TV_TRY(CU(cuDeviceGet(&d, dev)));
  *props = (tv_device_properties){.struct_size = props->struct_size};
  TV_TRY(CU(cuDeviceGetName(props->name, sizeof props->name, d)));
  TV_TRY(CU(cuDeviceTotalMem(&total, d)));
  TV_TRY(CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d)));
  TV_TRY(CU(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d)));
  TV_TRY(CU(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d)));
  props->total_memory = total, props->capability_major = major, props->capability_minor = minor;
  props->multiprocessor_count = sms;
  return TV_SUCCESS;
}

static tv_status cu_set_device(int32_t dev) {
  CHECK_DEV(dev);
  t_dev = dev;
  return TV_SUCCESS;
}

static tv_status cu_get_device(int32_t* dev) {
  TV_CHECK_ARGS(dev);
  CHECK_DEV(t_dev); /* only with 0 devices */
  *dev = t_dev;
  return TV_SUCCESS;
}

static tv_status cu_device_synchronize(int32_t dev) {
  TV_TRY(use(dev));
  return CU(cuCtxSynchronize());
}

/* ---------------------------------------------------------------- memory */
static tv_status cu_malloc(int32_t dev, size_t size, void** ptr) {
  TV_CHECK_ARGS(ptr);
  TV_TRY(use(dev));
  if (!size) return *ptr = NULL, TV_SUCCESS;
  CUdeviceptr p = 0;
  CUresult r = drv.cuMemAlloc(&p, size);
  if (r == CUDA_ERROR_OUT_OF_MEMORY)
    return tv_fail(TV_ERROR_OUT_OF_MEMORY, "out of memory on device %d: requested %zu bytes",
                   (int)dev, size);
  TV_TRY(check(r, __func__));
  *ptr = (void*)(uintptr_t)p;
  return TV_SUCCESS;
}

/* The device that owns ptr, or -1 if the driver does not know it as device memory. */
static int device_of(const void* ptr) {
  int ordinal = -1, type = 0;
  CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr;
  if (drv.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) ||
      type != CU_MEMORYTYPE_DEVICE ||
      drv.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p))
    return -1;
  return ordinal;
}

static tv_status cu_free(int32_t dev, void* ptr) {
  TV_TRY(use(dev));
  if (!ptr) return TV_SUCCESS;
  if (device_of(ptr) != dev)
    return tv_fail(TV_ERROR_INVALID_VALUE, "%s: %p is not an allocation of device %d", __func__, ptr,
                   (int)dev);
  return CU(cuMemFree((CUdeviceptr)(uintptr_t)ptr));
}

static tv_status cu_host_malloc(size_t size, void** ptr) {
  TV_CHECK_ARGS(ptr);
  TV_TRY(use(t_dev));
  if (!size) return *ptr = NULL, TV_SUCCESS;
  CUresult r = drv.cuMemHostAlloc(ptr, size, CU_MEMHOSTALLOC_PORTABLE);
  if (r == CUDA_ERROR_OUT_OF_MEMORY)
    return tv_fail(TV_ERROR_OUT_OF_MEMORY, "%s: cannot pin %zu bytes", __func__, size);
  return check(r, __func__);
}

static tv_status cu_host_free(void* ptr) {
  TV_TRY(use(t_dev));
  return ptr ? CU(cuMemFreeHost(ptr)) : TV_SUCCESS;
}

/* ---------------------------------------------------------------- streams */
struct tv_stream_st { uint32_t magic; int32_t dev; CUstream s; };
struct tv_event_st { uint32_t magic, flags; int32_t dev; int recorded; CUevent e; };

/* The CUstream and device of a tv_stream (NULL: the current device's default stream), with
 * that device's context made current. */
static tv_status resolve(tv_stream in, CUstream* out, int32_t* dev) {
  *out = NULL, *dev = t_dev;
  if (in && in->magic != LIVE) return tv_fail(TV_ERROR_INVALID_HANDLE, "invalid stream %p", (void*)in);
  if (in) *out = in->s, *dev = in->dev;
  return use(*dev);
}

static tv_status cu_stream_create(int32_t dev, int32_t priority, tv_stream* stream) {
  TV_CHECK_ARGS(stream);
  TV_TRY(use(dev));
  int least = 0, greatest = 0;
  TV_TRY(CU(cuCtxGetStreamPriorityRange(&least, &greatest)));
  priority = priority > least ? least : priority < greatest ? greatest : priority;
  tv_stream s = calloc(1, sizeof *s);
  if (!s) return tv_fail(TV_ERROR_OUT_OF_MEMORY, "%s: out of host memory", __func__);
  tv_status st = CU(cuStreamCreateWithPriority(&s->s, CU_STREAM_DEFAULT, priority));
  if (st) return free(s), st;
  s->magic = LIVE, s->dev = dev;
  *stream = s;
  return TV_SUCCESS;
}

static tv_status cu_stream_destroy(tv_stream s) {
  TV_CHECK_ARGS(s);
  if (s->magic != LIVE) return tv_fail(TV_ERROR_INVALID_HANDLE, "%s: invalid stream", __func__);
  TV_TRY(use(s->dev));
  s->magic = 0; /* the driver lets pending work finish */
  tv_status st = CU(cuStreamDestroy(s->s));
  free(s);
  return st;
}

static tv_status cu_stream_query(tv_stream stream) {
  CUstream s;
  int32_t dev;
  TV_TRY(resolve(stream, &s, &dev));
  CUresult r = drv.cuStreamQuery(s);
  return r == CUDA_ERROR_NOT_READY ? TV_ERROR_NOT_READY : check(r, __func__);
}

static tv_status cu_stream_synchronize(tv_stream stream) {
  CUstream s;
  int32_t dev;
  TV_TRY(resolve(stream, &s, &dev));
  return CU(cuStreamSynchronize(s));
}

static tv_status cu_stream_priority_range(int32_t* least, int32_t* greatest) {
  TV_CHECK_ARGS(least && greatest);
  int lo = 0, hi = 0;
  TV_TRY(use(t_dev));
  TV_TRY(CU(cuCtxGetStreamPriorityRange(&lo, &hi)));
  *least = lo, *greatest = hi;
  return TV_SUCCESS;
}

/* ---------------------------------------------------------------- copies */
/* What the driver knows of one side of a copy, in one call: the device whose memory it is (-1:
 * not device memory, i.e. host memory, pinned or not) and the live allocation around it. */
typedef struct { int dev; CUdeviceptr base; size_t size; } side;

static side classify(const void* ptr) {
  unsigned type = 0;
  int ordinal = -1;
  CUdeviceptr base = 0;
  size_t size = 0;
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void* data[] = {&type, &ordinal, &base, &size};
  /* an address the driver does not know is not an error here: its attributes stay 0 */
  if (drv.cuPointerGetAttributes(4, attrs, data, (CUdeviceptr)(uintptr_t)ptr) ||
      type != CU_MEMORYTYPE_DEVICE)
    return (side){-1, 0, 0};
  return (side){ordinal, base, size};
}

/* INVALID_VALUE unless `p` is memory of the kind the copy says (device memory for a device side,
 * anything else for a host side) and, for device memory, [p, p + n) lies in its allocation. */
static tv_status check_side(const char* what, const char* name, const void* p, size_t n,
                            int device, side info) {
  if (!device && info.dev >= 0)
    return tv_fail(TV_ERROR_INVALID_VALUE, "%s: the %s %p is device memory of device %d, but the "
                   "kind says host memory", what, name, p, info.dev);
  if (device && info.dev < 0)
    return tv_fail(TV_ERROR_INVALID_VALUE, "%s: %s %p (+%zu bytes) is not device memory", what, name,
                   p, n);
  CUdeviceptr a = (CUdeviceptr)(uintptr_t)p;
  if (device && (a - info.base > info.size || n > info.size - (a - info.base)))
    return tv_fail(TV_ERROR_INVALID_VALUE, "%s: the %s range %p + %zu bytes ends %zu bytes past its "
                   "allocation (%zu bytes at %p)", what, name, p, n,
                   (size_t)(a - info.base) + n - info.size, info.size, (void*)(uintptr_t)info.base);
  return TV_SUCCESS;
}

static tv_status transfer(void* dst, const void* src, int value, size_t n, int kind,
                          int async, tv_stream stream) {
  int set = kind == 0; /* memset */
  const char* what = set ? "memset" : "memcpy";
  if (!set) TV_TRY(tv_check_memcpy_kind(kind));
  if (!n) return TV_SUCCESS;
  if (!dst || (!set && !src))
    return tv_fail(TV_ERROR_INVALID_VALUE, "%s: %s is NULL", what, dst ? "source" : "destination");
  int dd = set || kind == TV_MEMCPY_HOST_TO_DEVICE || kind == TV_MEMCPY_DEVICE_TO_DEVICE;
  int sd = !set && (kind == TV_MEMCPY_DEVICE_TO_HOST || kind == TV_MEMCPY_DEVICE_TO_DEVICE);
  side di = classify(dst), si = set ? (side){-1, 0, 0} : classify(src);
  TV_TRY(check_side(what, "destination", dst, n, dd, di));
  if (!set) TV_TRY(check_side(what, "source", src, n, sd, si));
  int ddev = di.dev, sdev = si.dev;
  if (kind == TV_MEMCPY_HOST_TO_HOST && !async) return memcpy(dst, src, n), TV_SUCCESS;
  CUstream s = NULL;
  int32_t dev = ddev >= 0 ? ddev : sdev >= 0 ? sdev : t_dev;
  if (async) TV_TRY(resolve(stream, &s, &dev));
  else TV_TRY(use(dev));
  CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst;
  if (set) {
    TV_TRY(CU(cuMemsetD8Async(d, (unsigned char)value, n, s)));
    return async ? TV_SUCCESS : CU(cuStreamSynchronize(NULL));
  }
  if (async) return CU(cuMemcpyAsync(d, (CUdeviceptr)(uintptr_t)src, n, s));
  if (sdev >= 0 && sdev != dev) { /* order after the source device's default stream too */
    TV_TRY(use(sdev));
    TV_TRY(CU(cuCtxSynchronize()));
    TV_TRY(use(dev));
  }
  return CU(cuMemcpy(d, (CUdeviceptr)(uintptr_t)src, n));
}

static tv_status cu_memcpy(void* dst, const void* src, size_t n, tv_memcpy_kind kind) {
  return transfer(dst, src, 0, n, kind, 0, NULL);
}
static tv_status cu_memcpy_async(void* dst, const void* src, size_t n, tv_memcpy_kind kind,
                                 tv_stream stream) {
  return transfer(dst, src, 0, n, kind, 1, stream);
}
static tv_status cu_memset(void* dst, int value, size_t n) {
  return transfer(dst, NULL, value, n, 0, 0, NULL);
}
static tv_status cu_memset_async(void* dst, int value, size_t n, tv_stream stream) {
  return transfer(dst, NULL, value, n, 0, 1, stream);
}

/* ---------------------------------------------------------------- events */
#define CHECK_EVENT(e) \
  if (!(e) || (e)->magic != LIVE) return tv_fail(TV_ERROR_INVALID_HANDLE, "%s: invalid event", __func__)

static tv_status cu_event_create(int32_t dev, uint32_t flags, tv_event* event) {
  TV_TRY(tv_check_event_create(__func__, event, flags));
  TV_TRY(use(dev));
  tv_event e = calloc(1, sizeof *e);
  if (!e) return tv_fail(TV_ERROR_OUT_OF_MEMORY, "%s: out of host memory", __func__);
  unsigned cu_flags = flags & TV_EVENT_ENABLE_TIMING ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING;
  tv_status st = CU(cuEventCreate(&e->e, cu_flags));
  if (st) return free(e), st;
  e->magic = LIVE, e->flags = flags, e->dev = dev;
  *event = e;
  return TV_SUCCESS;
}

static tv_status cu_event_destroy(tv_event e) {
  CHECK_EVENT(e);
  TV_TRY(use(e->dev));
  e->magic = 0; /* the driver releases it once its pending record completes */
  tv_status st = CU(cuEventDestroy(e->e));
  free(e);
  return st;
}

static tv_status cu_event_record(tv_event e, tv_stream stream) {
  CHECK_EVENT(e);
  CUstream s;
  int32_t dev;
  TV_TRY(resolve(stream, &s, &dev));
  TV_TRY(tv_check_same_device("event_record", "event", e->dev, "stream", dev));
  TV_TRY(CU(cuEventRecord(e->e, s)));
  e->recorded = 1;
  return TV_SUCCESS;
}

static tv_status cu_event_query(tv_event e) {
  CHECK_EVENT(e);
  TV_TRY(use(e->dev));
  CUresult r = drv.cuEventQuery(e->e);
  return r == CUDA_ERROR_NOT_READY ? TV_ERROR_NOT_READY : check(r, __func__);
}

static tv_status cu_event_synchronize(tv_event e) {
  CHECK_EVENT(e);
  TV_TRY(use(e->dev));
  return CU(cuEventSynchronize(e->e));
}

static tv_status cu_stream_wait_event(tv_stream stream, tv_event e) {
  CHECK_EVENT(e);
  CUstream s;
  int32_t dev;
  TV_TRY(resolve(stream, &s, &dev));
  return CU(cuStreamWaitEvent(s, e->e, 0));
}

static tv_status cu_event_elapsed_time(tv_event a, tv_event b, float* ms) {
  CHECK_EVENT(a);
  CHECK_EVENT(b);
  TV_CHECK_ARGS(ms);
  TV_TRY(tv_check_elapsed(__func__, a->flags, b->flags, a->recorded, b->recorded));
  TV_TRY(use(a->dev));
  CUresult r = drv.cuEventElapsedTime(ms, a->e, b->e);
  if (r == CUDA_ERROR_NOT_READY)
    return tv_fail(TV_ERROR_NOT_READY, "%s: an event has not completed yet", __func__);
  return check(r, __func__);
}

/* ---------------------------------------------------------------- modules and launches */
struct tv_function_st { uint32_t magic; tv_module mod; CUfunction f; int shared_set;
                        tv_function next; char name[]; };
struct tv_module_st { uint32_t magic; int32_t dev; CUmodule m; tv_function fns; };

static tv_status cu_module_load_data(int32_t dev, const void* image, size_t size,
                                     tv_module* module) {
  TV_CHECK_ARGS(image && size && module);
  TV_TRY(use(dev));
  /* PTX is text and must end with a NUL; cubin and fatbin images are ELF or fatbin blobs. */
  char* copy = malloc(size + 1);
  tv_module m = calloc(1, sizeof *m);
  if (!copy || !m) return free(copy), free(m), tv_fail(TV_ERROR_OUT_OF_MEMORY, "module_load: out of host memory");
  memcpy(copy, image, size);
  copy[size] = 0;
  char log[2048] = "";
  CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* vals[] = {log, (void*)(uintptr_t)sizeof log};
  CUresult r = drv.cuModuleLoadDataEx(&m->m, copy, 2, opts, vals);
  free(copy);
  if (r) {
    free(m);
    const char* name = "?";
    drv.cuGetErrorName(r, &name);
    return tv_fail(status_of(r), "module_load: %s%s%.400s", name, *log ? "; JIT log: " : "", log);
  }
  m->magic = LIVE, m->dev = dev;
  *module = m;
  return TV_SUCCESS;
}

static tv_status cu_module_load_file(int32_t dev, const char* path, tv_module* module) {
  CHECK_DEV(dev);
  TV_CHECK_ARGS(path && module);
  FILE* f = fopen(path, "rb");
  if (!f) return tv_fail(TV_ERROR_NOT_FOUND, "%s: cannot read '%s'", __func__, path);
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* image = size > 0 ? malloc((size_t)size) : NULL;
  size_t got = image ? fread(image, 1, (size_t)size, f) : 0;
  fclose(f);
  tv_status st = size <= 0 || got != (size_t)size
                     ? tv_fail(TV_ERROR_INVALID_IMAGE, "%s: '%s' is empty or unreadable", __func__, path)
                     : cu_module_load_data(dev, image, (size_t)size, module);
  free(image);
  return st;
}

static tv_status cu_module_unload(tv_module m) {
  TV_CHECK_ARGS(m);
  if (m->magic != LIVE) return tv_fail(TV_ERROR_INVALID_HANDLE, "%s: invalid module", __func__);
  TV_TRY(use(m->dev));
  pthread_mutex_lock(&g.mu);
  m->magic = 0;
  for (tv_function f = m->fns, next; f; f = next) next = f->next, f->magic = 0, free(f);
  pthread_mutex_unlock(&g.mu);
  tv_status st = CU(cuModuleUnload(m->m)); /* the driver waits for pending launches */
  free(m);
  return st;
}

static tv_status cu_module_get_function(tv_module m, const char* name, tv_function* function) {
  TV_CHECK_ARGS(m && name && function);
  if (m->magic != LIVE) return tv_fail(TV_ERROR_INVALID_HANDLE, "%s: invalid module", __func__);
  TV_TRY(use(m->dev));
  tv_status st = TV_SUCCESS;
  pthread_mutex_lock(&g.mu);
  tv_function f = m->fns;
  while (f && strcmp(f->name, name)) f = f->next; /* one handle per name */
  CUfunction cf;
  if (!f) {
    CUresult r = drv.cuModuleGetFunction(&cf, m->m, name);
    if (r == CUDA_ERROR_NOT_FOUND) st = tv_fail(TV_ERROR_NOT_FOUND, "%s: no function '%s'", __func__, name);
    else if (r) st = check(r, __func__);
    else if (!(f = calloc(1, sizeof *f + strlen(name) + 1)))
      st = tv_fail(TV_ERROR_OUT_OF_MEMORY, "%s: out of host memory", __func__);
    else {
      *f = (struct tv_function_st){.magic = LIVE, .mod = m, .f = cf, .next = m->fns};
      strcpy(f->name, name);
      m->fns = f;
    }
  }
  if (!st) *function = f;
  pthread_mutex_unlock(&g.mu);
  return st;
}

static tv_status cu_launch(tv_function f, const tv_launch_config* cfg, const void* args,
                           size_t args_size, tv_stream stream) {
  TV_TRY(tv_check_launch(__func__, f, cfg, args, args_size));
  if (f->magic != LIVE || f->mod->magic != LIVE)
    return tv_fail(TV_ERROR_INVALID_HANDLE, "launch: invalid function or unloaded module");
  CUstream s;
  int32_t dev;
  TV_TRY(resolve(stream, &s, &dev));
  TV_TRY(tv_check_launch_device(f->name, f->mod->dev, dev));
  if (cfg->shared_memory_bytes > 48 * 1024 && f->shared_set < (int)cfg->shared_memory_bytes) {
    TV_TRY(CU(cuFuncSetAttribute(f->f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                              (int)cfg->shared_memory_bytes)));
    f->shared_set = (int)cfg->shared_memory_bytes;
  }
  size_t size = args_size;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, (void*)args, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  CUresult r = drv.cuLaunchKernel(f->f, cfg->grid[0], cfg->grid[1], cfg->grid[2], cfg->block[0],
                                  cfg->block[1], cfg->block[2], cfg->shared_memory_bytes, s, NULL,
                                  args_size ? extra : NULL);
  if (r) return check(r, f->name);
  return TV_SUCCESS;
}

/* ---------------------------------------------------------------- collectives, over NCCL */
/* NCCL is opened with dlopen on first use, like the driver: $TORCHVENDOR_NCCL, else the
 * libnccl.so.2 already in the process or on the library path (the Python side points
 * TORCHVENDOR_NCCL at the one torch ships, nvidia/nccl/lib/libnccl.so.2). The few types and
 * functions used are declared here from NCCL's stable C API, so nccl.h is not needed to build. */
typedef struct { char internal[128]; } nccl_uid; /* ncclUniqueId */
typedef struct nccl_comm* nccl_comm_t;           /* ncclComm_t */
typedef int nccl_result;                         /* ncclResult_t: 0 is ncclSuccess */
enum { NCCL_INT8 = 0, NCCL_UINT8 = 1, NCCL_INT32 = 2, NCCL_INT64 = 4, NCCL_FLOAT16 = 6,
       NCCL_FLOAT32 = 7, NCCL_FLOAT64 = 8, NCCL_BFLOAT16 = 9 };      /* ncclDataType_t */
enum { NCCL_SUM = 0, NCCL_PROD = 1, NCCL_MAX = 2, NCCL_MIN = 3, NCCL_AVG = 4 }; /* ncclRedOp_t */

static struct {
  nccl_result (*GetUniqueId)(nccl_uid*);
  nccl_result (*CommInitRank)(nccl_comm_t*, int, nccl_uid, int);
  nccl_result (*CommDestroy)(nccl_comm_t);
  const char* (*GetErrorString)(nccl_result);
  const char* (*GetLastError)(nccl_comm_t);
  nccl_result (*AllReduce)(const void*, void*, size_t, int, int, nccl_comm_t, CUstream);
  nccl_result (*Broadcast)(const void*, void*, size_t, int, int, nccl_comm_t, CUstream);
  nccl_result (*AllGather)(const void*, void*, size_t, int, nccl_comm_t, CUstream);
  nccl_result (*ReduceScatter)(const void*, void*, size_t, int, int, nccl_comm_t, CUstream);
  nccl_result (*Send)(const void*, size_t, int, int, nccl_comm_t, CUstream);
  nccl_result (*Recv)(void*, size_t, int, int, nccl_comm_t, CUstream);
} nccl;
static tv_status nccl_status;
static char nccl_msg[512];

static void load_nccl(void) {
  const char* path = getenv("TORCHVENDOR_NCCL");
  path = path && *path ? path : "libnccl.so.2";
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    nccl_status = TV_ERROR_NOT_SUPPORTED;
    snprintf(nccl_msg, sizeof nccl_msg, "the collectives need NCCL, and %s cannot be loaded (%s): "
             "install torch's CUDA build (it ships nvidia/nccl/lib/libnccl.so.2) or the "
             "nvidia-nccl-cu13 package, or set TORCHVENDOR_NCCL to the path of libnccl.so.2", path,
             dlerror());
    return;
  }
  const char* missing = NULL;
#define NCCL_LOAD(f) if (!(*(void**)&nccl.f = dlsym(lib, "nccl" #f)) && !missing) missing = "nccl" #f;
  NCCL_LOAD(GetUniqueId) NCCL_LOAD(CommInitRank) NCCL_LOAD(CommDestroy) NCCL_LOAD(GetErrorString)
  NCCL_LOAD(GetLastError) NCCL_LOAD(AllReduce) NCCL_LOAD(Broadcast) NCCL_LOAD(AllGather)
  NCCL_LOAD(ReduceScatter) NCCL_LOAD(Send) NCCL_LOAD(Recv)
  if (missing) {
    nccl_status = TV_ERROR_NOT_SUPPORTED;
    snprintf(nccl_msg, sizeof nccl_msg, "%s lacks %s: NCCL 2.7 or newer is needed", path, missing);
  }
}

static tv_status need_nccl(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, load_nccl);
  return nccl_status ? tv_fail(nccl_status, "%s", nccl_msg) : TV_SUCCESS;
}

struct tv_comm_st { uint32_t magic; int32_t dev, nranks, rank; nccl_comm_t c; };

static tv_status nccl_check(nccl_result r, nccl_comm_t c, const char* where) {
  if (!r) return TV_SUCCESS;
  const char* last = c && nccl.GetLastError ? nccl.GetLastError(c) : "";
  /* ncclInvalidArgument (4) and ncclInvalidUsage (5) are the caller's; the rest the system's */
  return tv_fail(r == 4 || r == 5 ? TV_ERROR_INVALID_VALUE : TV_ERROR_UNKNOWN, "%s: %s%s%s", where,
                 nccl.GetErrorString(r), last && *last ? ": " : "", last ? last : "");
}

static tv_status cu_comm_token(int32_t dev, void* token, size_t* size) {
  TV_CHECK_ARGS(token && size);
  TV_TRY(need_nccl());
  TV_TRY(use(dev));
  nccl_uid id;
  TV_TRY(nccl_check(nccl.GetUniqueId(&id), NULL, "ncclGetUniqueId"));
  memcpy(token, &id, sizeof id);
  *size = sizeof id;
  return TV_SUCCESS;
}

static tv_status cu_comm_create_from_token(const void* token, size_t size, int32_t nranks,
                                           int32_t rank, int32_t dev, tv_comm* comm) {
  TV_CHECK_ARGS(token && comm && nranks > 0 && rank >= 0 && rank < nranks);
  if (size != sizeof(nccl_uid))
    return tv_fail(TV_ERROR_INVALID_VALUE, "%s: a token of %zu bytes; NCCL's (from comm_token) has "
                   "%zu", __func__, size, sizeof(nccl_uid));
  TV_TRY(need_nccl());
  TV_TRY(use(dev)); /* NCCL takes the device from the current context */
  nccl_uid id;
  memcpy(&id, token, sizeof id);
  tv_comm c = calloc(1, sizeof *c);
  if (!c) return tv_fail(TV_ERROR_OUT_OF_MEMORY, "%s: out of host memory", __func__);
  tv_status st = nccl_check(nccl.CommInitRank(&c->c, nranks, id, rank), NULL, "ncclCommInitRank");
  if (st) return free(c), st;
  c->magic = LIVE, c->dev = dev, c->nranks = nranks, c->rank = rank;
  *comm = c;
  return TV_SUCCESS;
}

static tv_status cu_comm_destroy(tv_comm c) {
  TV_CHECK_ARGS(c);
  if (c->magic != LIVE) return tv_fail(TV_ERROR_INVALID_HANDLE, "%s: invalid communicator", __func__);
  TV_TRY(use(c->dev));
  c->magic = 0; /* ncclCommDestroy waits for the collectives already enqueued */
  tv_status st = nccl_check(nccl.CommDestroy(c->c), NULL, "ncclCommDestroy");
  free(c);
  return st;
}

/* NCCL's type and reduction for a tv_dtype and tv_reduce_op (op < 0: no reduction), checked by
 * tv_check_collective_types; bool travels as uint8, where SUM and MAX are "or", PROD and MIN
 * "and", as torch's NCCL group does. */
static tv_status nccl_args(const char* where, tv_dtype dtype, int op, int* type, int* red) {
  static const int types[] = {NCCL_FLOAT32, NCCL_FLOAT64, NCCL_FLOAT16, NCCL_BFLOAT16,
                              NCCL_INT8, NCCL_UINT8, NCCL_INT32, NCCL_INT64, NCCL_UINT8};
  TV_TRY(tv_check_collective_types(where, dtype, op));
  *type = types[dtype], *red = op;
  if (dtype == TV_BOOL && op >= 0)
    *red = op == TV_REDUCE_SUM || op == TV_REDUCE_MAX ? NCCL_MAX : NCCL_MIN;
  return TV_SUCCESS;
}

/* The communicator's CUstream for `stream`, which must be of the communicator's device. */
static tv_status comm_stream(tv_comm c, tv_stream stream, CUstream* s, const char* where) {
  int32_t dev;
  if (!c || c->magic != LIVE) return tv_fail(TV_ERROR_INVALID_HANDLE, "%s: invalid communicator", where);
  TV_TRY(resolve(stream, s, &dev));
  return tv_check_same_device(where, "communicator", c->dev, "stream", dev);
}

static tv_status cu_all_reduce(const void* send, void* recv, size_t count, tv_dtype dtype,
                               tv_reduce_op op, tv_comm c, tv_stream stream) {
  CUstream s;
  int type = 0, red = 0;
  TV_TRY(comm_stream(c, stream, &s, __func__));
  TV_TRY(nccl_args(__func__, dtype, op, &type, &red));
  return nccl_check(nccl.AllReduce(send, recv, count, type, red, c->c, s), c->c, "ncclAllReduce");
}

static tv_status cu_broadcast(const void* send, void* recv, size_t count, tv_dtype dtype,
                              int32_t root, tv_comm c, tv_stream stream) {
  CUstream s;
  int type = 0, red = 0;
  TV_TRY(comm_stream(c, stream, &s, __func__));
  TV_TRY(nccl_args(__func__, dtype, -1, &type, &red));
  TV_TRY(tv_check_rank(__func__, root, c->nranks));
  return nccl_check(nccl.Broadcast(send, recv, count, type, root, c->c, s), c->c, "ncclBroadcast");
}

static tv_status cu_all_gather(const void* send, void* recv, size_t count, tv_dtype dtype,
                               tv_comm c, tv_stream stream) {
  CUstream s;
  int type = 0, red = 0;
  TV_TRY(comm_stream(c, stream, &s, __func__));
  TV_TRY(nccl_args(__func__, dtype, -1, &type, &red));
  return nccl_check(nccl.AllGather(send, recv, count, type, c->c, s), c->c, "ncclAllGather");
}

static tv_status cu_reduce_scatter(const void* send, void* recv, size_t count, tv_dtype dtype,
                                   tv_reduce_op op, tv_comm c, tv_stream stream) {
  CUstream s;
  int type = 0, red = 0;
  TV_TRY(comm_stream(c, stream, &s, __func__));
  TV_TRY(nccl_args(__func__, dtype, op, &type, &red));
  return nccl_check(nccl.ReduceScatter(send, recv, count, type, red, c->c, s), c->c,
                    "ncclReduceScatter");
}

static tv_status cu_send(const void* buf, size_t count, tv_dtype dtype, int32_t peer, tv_comm c,
                         tv_stream stream) {
  CUstream s;
  int type = 0, red = 0;
  TV_TRY(comm_stream(c, stream, &s, __func__));
  TV_TRY(nccl_args(__func__, dtype, -1, &type, &red));
  TV_TRY(tv_check_rank(__func__, peer, c->nranks));
  TV_CHECK_ARGS(peer != c->rank);
  return nccl_check(nccl.Send(buf, count, type, peer, c->c, s), c->c, "ncclSend");
}

static tv_status cu_recv(void* buf, size_t count, tv_dtype dtype, int32_t peer, tv_comm c,
                         tv_stream stream) {
  CUstream s;
  int type = 0, red = 0;
  TV_TRY(comm_stream(c, stream, &s, __func__));
  TV_TRY(nccl_args(__func__, dtype, -1, &type, &red));
  TV_TRY(tv_check_rank(__func__, peer, c->nranks));
  TV_CHECK_ARGS(peer != c->rank);
  return nccl_check(nccl.Recv(buf, count, type, peer, c->c, s), c->c, "ncclRecv");
}

/* ---------------------------------------------------------------- errors and entry point */
/* get_error_string and last_error_message are tv_status_name and tv_last_error_message. */
static tv_status init_status;
static char init_msg[512];

static void init(void) {
  const char* path = getenv("TORCHVENDOR_CUDA_DRIVER");
  path = path && *path ? path : "libcuda.so.1";
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  const char* missing = NULL;
  if (!lib) {
    init_status = TV_ERROR_NOT_SUPPORTED;
    snprintf(init_msg, sizeof init_msg, "cannot load the NVIDIA driver library %s (%s): this "
             "machine has no NVIDIA driver; install one, or set TORCHVENDOR_CUDA_DRIVER to the "
             "path of libcuda.so.1", path, dlerror());
    return;
  }
#define LOAD(f) if (!(drv.f = (__typeof__(f)*)dlsym(lib, STR(f))) && !missing) missing = STR(f);
  DRIVER(LOAD)
  if (missing) {
    init_status = TV_ERROR_NOT_SUPPORTED;
    snprintf(init_msg, sizeof init_msg, "the NVIDIA driver %s lacks %s: it is older than the "
             "CUDA %d.%d headers this runtime was built with; update the driver", path, missing,
             CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
    return;
  }
  int n = 0;
  CUresult r = drv.cuInit(0);
  if (r == CUDA_SUCCESS) r = drv.cuDeviceGetCount(&n);
  if (r == CUDA_ERROR_NO_DEVICE) r = CUDA_SUCCESS, n = 0; /* a driver and no GPU: zero devices */
  if (r) {
    const char* name = "?";
    drv.cuGetErrorName(r, &name);
    init_status = status_of(r);
    snprintf(init_msg, sizeof init_msg, "cuInit failed: %s", name);
    return;
  }
  g.ndev = n > MAX_DEVICES ? MAX_DEVICES : n;
}

static const tv_runtime table = {
    .abi_major = TV_RUNTIME_ABI_MAJOR, .abi_minor = TV_RUNTIME_ABI_MINOR,
    .struct_size = sizeof(tv_runtime), .name = "torchvendor-cuda 1.0",
    .device_count = cu_device_count, .get_device_properties = cu_get_device_properties,
    .set_device = cu_set_device, .get_device = cu_get_device,
    .device_synchronize = cu_device_synchronize, .malloc = cu_malloc, .free = cu_free,
    .host_malloc = cu_host_malloc, .host_free = cu_host_free, .memcpy = cu_memcpy,
    .memcpy_async = cu_memcpy_async, .memset = cu_memset, .memset_async = cu_memset_async,
    .stream_create = cu_stream_create, .stream_destroy = cu_stream_destroy,
    .stream_query = cu_stream_query, .stream_synchronize = cu_stream_synchronize,
    .stream_priority_range = cu_stream_priority_range, .event_create = cu_event_create,
    .event_destroy = cu_event_destroy, .event_record = cu_event_record,
    .event_query = cu_event_query, .event_synchronize = cu_event_synchronize,
    .stream_wait_event = cu_stream_wait_event, .event_elapsed_time = cu_event_elapsed_time,
    .module_load_file = cu_module_load_file, .module_load_data = cu_module_load_data,
    .module_unload = cu_module_unload, .module_get_function = cu_module_get_function,
    .launch = cu_launch, .get_error_string = tv_status_name,
    .last_error_message = tv_last_error_message,
    /* collectives over NCCL; comm_create stays NULL: NCCL joins from rank 0's unique id */
    .comm_destroy = cu_comm_destroy, .all_reduce = cu_all_reduce, .broadcast = cu_broadcast,
    .all_gather = cu_all_gather, .reduce_scatter = cu_reduce_scatter, .send = cu_send,
    .recv = cu_recv, .comm_token = cu_comm_token,
    .comm_create_from_token = cu_comm_create_from_token,
};

TV_EXPORT tv_status torchvendor_get_runtime(uint32_t requested_major, const tv_runtime** runtime) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  TV_CHECK_ARGS(runtime);
  TV_TRY(tv_check_abi_major("torchvendor-cuda", requested_major));
  pthread_once(&once, init);
  if (init_status) return tv_init_failed("torchvendor-cuda", init_status, init_msg);
  *runtime = &table;
  return TV_SUCCESS;
}
