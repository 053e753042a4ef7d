/*
 * torchvendor-sim: the reference simulated accelerator behind torchvendor/runtime.h, in plain C11.
 * The runtime the tests and the reference CPU backend use, and the template a vendor copies;
 * docs/runtime.md explains the design.
 *
 * Memory. Each device owns an address range reserved PROT_NONE (its device addresses) and a
 * read-write mapping of the same size (its alias). A device pointer is base + offset; the runtime
 * and kernels touch alias + offset. A host dereference of a device pointer faults as on real
 * hardware, and no protection is ever toggled, so streams never race on mprotect. Allocation is
 * first fit over a sorted, coalescing block list; pinned host memory is one more such arena.
 *
 * Streams. One worker thread per stream runs its commands (copy, memset, launch, event record,
 * wait on event, collective) in order. A command that returns promptly, enqueued on an idle
 * stream, runs on the enqueuing thread instead (see quick()): waking the worker costs more than
 * a small kernel. One mutex guards all runtime state; `progress` is broadcast whenever a command
 * completes. A NULL stream is the calling thread's current device's default stream.
 *
 * Kernel calling convention (torchvendor/sim_kernel.h). A module is a shared library; a kernel
 * is `int32_t kernel(const tv_sim_launch* launch, void* args)`, called once per launch on the
 * stream's worker with a private copy of the argument buffer whose device pointers (at
 * config->pointer_offsets) were translated to aliases at launch time. A non-zero return marks
 * the stream failed: TV_ERROR_LAUNCH_FAILED from its next stream_query/stream_synchronize and
 * from device_synchronize, sticky until the stream is destroyed. Later work still runs, so
 * events recorded after the failure still complete and nothing waits forever.
 *
 * Collectives (runtime.h minor 1) are commands like the others: the entries below validate and
 * translate their buffers and enqueue them; sim_collectives.c holds the communicators (POSIX
 * shared memory across processes) and the algorithms the worker runs.
 *
 * Environment: TORCHVENDOR_SIM_DEVICES (default 2), TORCHVENDOR_SIM_MEMORY_MB (default 4096,
 * per device and for the pinned host pool), TORCHVENDOR_SIM_ABI_MINOR (default 2; 0 serves the
 * minor-0 table, without collectives), TORCHVENDOR_SIM_COMM_TIMEOUT_S (sim_collectives.c).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "sim_collectives.h"
#include "torchvendor/runtime.h"
#include "torchvendor/runtime_checks.h"
#include "torchvendor/sim_kernel.h"

#define MAX_DEVICES 64
#define ALIGNMENT 256
#define LIVE 0x7476736dU /* magic of a live handle, cleared when its owner releases it */

static _Thread_local int32_t t_dev;

typedef struct block { size_t off, size, req; int used; struct block* next; } block;
typedef struct arena {
  char* base;      /* the addresses handed out (PROT_NONE for devices) */
  char* alias;     /* the same offsets, read-write (== base for the pinned pool) */
  size_t cap, used;
  block* blocks;   /* every block, sorted by offset */
} arena;

typedef struct cmd {
  enum { C_COPY, C_SET, C_LAUNCH, C_RECORD, C_WAIT, C_COLL } kind;
  struct cmd* next;
  char* dst;
  const char* src;
  size_t n;
  int value;
  tv_event ev;     /* C_RECORD, C_WAIT: holds a reference */
  uint64_t gen;    /* the event's record generation to set or wait for */
  tv_function fn;  /* C_LAUNCH: holds a reference to fn->mod */
  tv_sim_launch launch;
  void* args;
  tv_comm comm;    /* C_COLL: holds a reference */
  coll co;
} cmd;

struct tv_stream_st {
  uint32_t magic;
  int32_t dev, prio;
  int dying;
  int inline_busy;  /* the head runs on the thread that enqueued it (see enqueue) */
  uint64_t submitted, done;
  cmd *head, *tail; /* the head stays queued while it runs, so queries see it */
  pthread_cond_t wake;
  tv_status err;    /* sticky kernel failure, with its message */
  char msg[256];
  tv_stream next;
};
struct tv_event_st { uint32_t magic, flags; int32_t dev; int refs; uint64_t gen, done_gen, t_ns; };
struct tv_function_st { uint32_t magic; tv_module mod; tv_sim_kernel fn; int waits;
                        tv_function next; char name[]; };
struct tv_module_st { uint32_t magic; int32_t dev; int refs; void* dl; tv_function fns; };

static struct {
  pthread_mutex_t mu;      /* guards everything below and every handle */
  pthread_cond_t progress; /* broadcast when any stream completes a command */
  int32_t ndev;
  arena dev[MAX_DEVICES], pinned;
  tv_stream streams, defstream[MAX_DEVICES];
  int draining;            /* drain() calls walking `streams`: workers must not free theirs */
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .progress = PTHREAD_COND_INITIALIZER};

#define CHECK_DEV(d) TV_CHECK_DEVICE(d, g.ndev) /* the checks: torchvendor/runtime_checks.h */

/* ---------------------------------------------------------------- memory */
static int dev_of(const void* p) {
  for (int i = 0; i < g.ndev; i++)
    if ((uintptr_t)p - (uintptr_t)g.dev[i].base < g.dev[i].cap) return i;
  return -1;
}

/* The alias of device range [p, p+n), or NULL unless it lies inside one live allocation
 * (g.mu held). */
static char* alias_of_locked(const void* p, size_t n, int* devp) {
  int i = *devp = dev_of(p);
  char* r = NULL;
  if (i < 0) return NULL;
  size_t o = (uintptr_t)p - (uintptr_t)g.dev[i].base;
  for (block* b = g.dev[i].blocks; b && b->off <= o && !r; b = b->next)
    if (b->used && o - b->off <= b->req && n <= b->req - (o - b->off)) r = g.dev[i].alias + o;
  return r;
}

static char* alias_of(const void* p, size_t n, int* devp) {
  pthread_mutex_lock(&g.mu);
  char* r = alias_of_locked(p, n, devp);
  pthread_mutex_unlock(&g.mu);
  return r;
}

static char* arena_alloc(arena* a, size_t size) { /* g.mu held; NULL if no block fits */
  size_t need = (size + ALIGNMENT - 1) & ~(size_t)(ALIGNMENT - 1);
  block* b = a->blocks;
  while (b && (b->used || b->size < need)) b = b->next;
  if (!b || need < size) return NULL; /* need < size: the rounding overflowed */
  if (b->size > need) {               /* split off the tail as a free block */
    block* rest = malloc(sizeof *rest);
    if (!rest) return NULL;
    *rest = (block){b->off + need, b->size - need, 0, 0, b->next};
    b->next = rest, b->size = need;
  }
  b->used = 1, b->req = size, a->used += b->size;
  return a->base + b->off;
}

static int arena_free(arena* a, void* p) { /* g.mu held; 0 if p is not an allocation */
  size_t o = (uintptr_t)p - (uintptr_t)a->base;
  block *prev = NULL, *b = a->blocks;
  for (; b && b->off < o; prev = b, b = b->next) {}
  if (!b || b->off != o || !b->used) return 0;
  b->used = 0, a->used -= b->size;
  if (b->next && !b->next->used) { /* coalesce with free neighbours */
    block* n = b->next;
    b->size += n->size, b->next = n->next;
    free(n);
  }
  if (prev && !prev->used) prev->size += b->size, prev->next = b->next, free(b);
  return 1;
}

static tv_status sim_malloc(int32_t dev, size_t size, void** ptr) {
  CHECK_DEV(dev);
  TV_CHECK_ARGS(ptr);
  if (!size) return *ptr = NULL, TV_SUCCESS;
  pthread_mutex_lock(&g.mu);
  *ptr = arena_alloc(&g.dev[dev], size);
  size_t free_bytes = g.dev[dev].cap - g.dev[dev].used;
  pthread_mutex_unlock(&g.mu);
  if (*ptr) return TV_SUCCESS;
  return tv_fail(TV_ERROR_OUT_OF_MEMORY, "out of memory on device %d: requested %zu bytes, "
                 "%zu bytes free of %zu total", (int)dev, size, free_bytes, g.dev[dev].cap);
}

static tv_status sim_free(int32_t dev, void* ptr) {
  CHECK_DEV(dev);
  pthread_mutex_lock(&g.mu);
  int ok = !ptr || (dev_of(ptr) == dev && arena_free(&g.dev[dev], ptr));
  pthread_mutex_unlock(&g.mu);
  if (ok) return TV_SUCCESS;
  return tv_fail(TV_ERROR_INVALID_VALUE, "%s: %p is not an allocation of device %d", __func__, ptr,
                 (int)dev);
}

/* Pinned memory comes from its own arena, so host_free recognises it. There is no DMA engine
 * to pin for, so the pages are not mlock'ed. */
static tv_status sim_host_malloc(size_t size, void** ptr) {
  TV_CHECK_ARGS(ptr);
  if (!size) return *ptr = NULL, TV_SUCCESS;
  pthread_mutex_lock(&g.mu);
  *ptr = arena_alloc(&g.pinned, size);
  pthread_mutex_unlock(&g.mu);
  if (*ptr) return TV_SUCCESS;
  return tv_fail(TV_ERROR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes", __func__, size);
}

static tv_status sim_host_free(void* ptr) {
  pthread_mutex_lock(&g.mu);
  int ok = !ptr || ((uintptr_t)ptr - (uintptr_t)g.pinned.base < g.pinned.cap &&
                    arena_free(&g.pinned, ptr));
  pthread_mutex_unlock(&g.mu);
  if (ok) return TV_SUCCESS;
  return tv_fail(TV_ERROR_INVALID_VALUE, "%s: %p is not pinned memory", __func__, ptr);
}

/* ---------------------------------------------------------------- devices */
static tv_status sim_device_count(int32_t* count) {
  TV_CHECK_ARGS(count);
  *count = g.ndev;
  return TV_SUCCESS;
}

static tv_status sim_get_device_properties(int32_t dev, tv_device_properties* props) {
  CHECK_DEV(dev);
  TV_TRY(tv_check_properties(__func__, props));
  *props = (tv_device_properties){.struct_size = props->struct_size, .total_memory = g.dev[dev].cap,
                                  .capability_major = 1, .capability_minor = 0,
                                  .multiprocessor_count = (int32_t)sysconf(_SC_NPROCESSORS_ONLN)};
  snprintf(props->name, sizeof props->name, "torchvendor-sim");
  return TV_SUCCESS;
}

static tv_status sim_set_device(int32_t dev) {
  CHECK_DEV(dev);
  t_dev = dev;
  return TV_SUCCESS;
}

static tv_status sim_get_device(int32_t* dev) {
  TV_CHECK_ARGS(dev);
  CHECK_DEV(t_dev); /* only with 0 devices */
  *dev = t_dev;
  return TV_SUCCESS;
}

/* ---------------------------------------------------------------- streams */
static int32_t run(cmd* c) {
  if (c->kind == C_LAUNCH) return c->fn->fn(&c->launch, c->args);
  if (c->kind == C_COPY && c->n) memmove(c->dst, c->src, c->n);
  if (c->kind == C_SET && c->n) memset(c->dst, c->value, c->n);
  return 0;
}

static void module_unref(tv_module m) { /* g.mu held */
  if (--m->refs) return;
  dlclose(m->dl);
  for (tv_function f = m->fns, next; f; f = next) next = f->next, free(f);
  free(m);
}

static void comm_unref(tv_comm c) { /* g.mu held */
  if (--c->refs == 0) coll_comm_close(c), free(c);
}

static void release(cmd* c) { /* g.mu held */
  if (c->ev && --c->ev->refs == 0) free(c->ev);
  if (c->fn) module_unref(c->fn->mod);
  if (c->comm) comm_unref(c->comm);
  free(c->args);
  free(c);
}

/* Runs c, the head of s, and pops it (g.mu held; released while a copy, kernel or collective
 * runs). Called by the stream's worker, or by the enqueuing thread when the stream was idle. */
static void step(tv_stream s, cmd* c) {
  if (c->kind == C_WAIT) {
    while (c->ev->done_gen < c->gen) pthread_cond_wait(&g.progress, &g.mu);
  } else if (c->kind == C_RECORD) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* when the stream reaches the record */
    if (c->gen > c->ev->done_gen) /* a re-record on a faster stream may have finished first */
      c->ev->done_gen = c->gen, c->ev->t_ns = (uint64_t)ts.tv_sec * 1000000000u + ts.tv_nsec;
  } else {
    char err[256];
    pthread_mutex_unlock(&g.mu);
    int32_t rc = c->kind == C_COLL ? coll_run(c->comm, &c->co, err, sizeof err) : run(c);
    pthread_mutex_lock(&g.mu);
    if (rc && !s->err && c->kind == C_COLL)
      s->err = TV_ERROR_LAUNCH_FAILED, snprintf(s->msg, sizeof s->msg, "%s", err);
    else if (rc && !s->err)
      s->err = TV_ERROR_LAUNCH_FAILED,
      snprintf(s->msg, sizeof s->msg, "kernel '%s' failed with status %d on device %d",
               c->fn->name, (int)rc, (int)s->dev);
  }
  if (!(s->head = c->next)) s->tail = NULL;
  s->done++;
  release(c);
  pthread_cond_broadcast(&g.progress);
}

static void* worker(void* arg) {
  tv_stream s = arg;
  pthread_mutex_lock(&g.mu);
  for (cmd* c; (c = s->head) || !s->dying;) {
    if (!c || s->inline_busy) /* nothing queued, or the head runs on the thread that queued it */
      pthread_cond_wait(&s->wake, &g.mu);
    else
      step(s, c);
  }
  while (g.draining) pthread_cond_wait(&g.progress, &g.mu); /* drain() may be reading s */
  tv_stream* p = &g.streams;
  while (*p != s) p = &(*p)->next;
  *p = s->next;
  pthread_cond_destroy(&s->wake);
  free(s);
  pthread_mutex_unlock(&g.mu);
  return NULL;
}

static tv_status new_stream(int32_t dev, int32_t prio, tv_stream* out) { /* g.mu held */
  tv_stream s = calloc(1, sizeof *s);
  pthread_t thread;
  if (!s || pthread_cond_init(&s->wake, NULL)) return free(s), tv_fail(TV_ERROR_OUT_OF_MEMORY,
                                                                   "stream_create: out of memory");
  s->magic = LIVE, s->dev = dev, s->prio = prio;
  if (pthread_create(&thread, NULL, worker, s)) {
    pthread_cond_destroy(&s->wake);
    free(s);
    return tv_fail(TV_ERROR_OUT_OF_MEMORY, "stream_create: cannot start a worker thread");
  }
  pthread_detach(thread); /* the worker frees its stream once destroyed and drained */
  s->next = g.streams, g.streams = *out = s;
  return TV_SUCCESS;
}

/* A live stream, or the current device's default stream for NULL; g.mu held. */
static tv_status get_stream(tv_stream in, tv_stream* out) {
  *out = in;
  if (in) return in->magic == LIVE ? TV_SUCCESS : tv_fail(TV_ERROR_INVALID_HANDLE, "invalid stream");
  CHECK_DEV(t_dev);
  if (g.defstream[t_dev]) return *out = g.defstream[t_dev], TV_SUCCESS;
  tv_status st = new_stream(t_dev, 0, out);
  if (!st) g.defstream[t_dev] = *out;
  return st;
}

/* Whether c may run on the enqueuing thread when its stream is idle (g.mu held): it returns
 * promptly. Not collectives (they wait for other ranks), waits on pending events, copies above
 * 64 KiB (an async copy should not hold the caller that long), or kernels that wait on the host
 * (TV_SIM_KERNEL_WAITS). Running them in place keeps stream order: nothing else is queued. */
static int quick(const cmd* c) {
  switch (c->kind) {
    case C_LAUNCH: return !c->fn->waits;
    case C_RECORD: return 1;
    case C_WAIT: return c->ev->done_gen >= c->gen;
    case C_COPY: case C_SET: return c->n <= (64 << 10);
    default: return 0;
  }
}

/* Enqueue c (heap-allocated) on stream, validating its handles; takes ownership of c. */
static tv_status enqueue(tv_stream stream, cmd* c) {
  tv_stream s;
  pthread_mutex_lock(&g.mu);
  tv_status st = get_stream(stream, &s);
  if (!st && c->ev && c->ev->magic != LIVE) st = tv_fail(TV_ERROR_INVALID_HANDLE, "invalid event");
  if (!st && c->fn && (c->fn->magic != LIVE || c->fn->mod->magic != LIVE))
    st = tv_fail(TV_ERROR_INVALID_HANDLE, "launch: invalid function or unloaded module");
  if (!st && c->kind == C_RECORD)
    st = tv_check_same_device("event_record", "event", c->ev->dev, "stream", s->dev);
  if (!st && c->kind == C_LAUNCH) st = tv_check_launch_device(c->fn->name, c->fn->mod->dev, s->dev);
  if (!st && c->comm && c->comm->magic != LIVE)
    st = tv_fail(TV_ERROR_INVALID_HANDLE, "invalid or destroyed communicator");
  if (!st && c->comm)
    st = tv_check_same_device("collective", "communicator", c->comm->dev, "stream", s->dev);
  if (st) {
    c->ev = NULL, c->fn = NULL, c->comm = NULL; /* no references were taken */
    release(c);
  } else {
    if (c->ev) c->ev->refs++, c->gen = c->kind == C_RECORD ? ++c->ev->gen : c->ev->gen;
    if (c->fn) c->fn->mod->refs++, c->launch.device = s->dev;
    if (c->comm) c->comm->refs++;
    int now = !s->head && quick(c); /* an idle stream: run it here, sparing the worker's wake-up */
    *(s->tail ? &s->tail->next : &s->head) = c;
    s->tail = c;
    s->submitted++;
    if (now) {
      s->inline_busy = 1; /* later work queues behind it, queries see it pending */
      step(s, c);
      s->inline_busy = 0;
    }
    if (s->head || s->dying) pthread_cond_signal(&s->wake);
  }
  pthread_mutex_unlock(&g.mu);
  return st;
}

static cmd* new_cmd(int kind) {
  cmd* c = calloc(1, sizeof *c);
  if (c) c->kind = kind;
  return c;
}
#define OOM_CMD tv_fail(TV_ERROR_OUT_OF_MEMORY, "%s: out of host memory", __func__)

static tv_status sim_stream_create(int32_t dev, int32_t priority, tv_stream* stream) {
  CHECK_DEV(dev);
  TV_CHECK_ARGS(stream);
  pthread_mutex_lock(&g.mu); /* clamp to the range [-1, 0] */
  tv_status st = new_stream(dev, priority < -1 ? -1 : priority > 0 ? 0 : priority, stream);
  pthread_mutex_unlock(&g.mu);
  return st;
}

static tv_status sim_stream_destroy(tv_stream s) {
  TV_CHECK_ARGS(s);
  pthread_mutex_lock(&g.mu);
  int ok = s->magic == LIVE;
  if (ok) s->magic = 0, s->dying = 1, pthread_cond_signal(&s->wake); /* the worker drains it */
  pthread_mutex_unlock(&g.mu);
  return ok ? TV_SUCCESS : tv_fail(TV_ERROR_INVALID_HANDLE, "%s: invalid stream", __func__);
}

static tv_status stream_wait(tv_stream stream, int block) {
  tv_stream s;
  pthread_mutex_lock(&g.mu);
  tv_status st = get_stream(stream, &s);
  for (uint64_t target = st ? 0 : s->submitted; block && !st && s->done < target;)
    pthread_cond_wait(&g.progress, &g.mu);
  if (!st && s->err) st = tv_fail(s->err, "%s", s->msg);
  else if (!st && s->done < s->submitted && !block) st = TV_ERROR_NOT_READY;
  pthread_mutex_unlock(&g.mu);
  return st;
}
static tv_status sim_stream_query(tv_stream s) { return stream_wait(s, 0); }
static tv_status sim_stream_synchronize(tv_stream s) { return stream_wait(s, 1); }

static tv_status sim_stream_priority_range(int32_t* least, int32_t* greatest) {
  TV_CHECK_ARGS(least && greatest);
  *least = 0, *greatest = -1;
  return TV_SUCCESS;
}

/* Wait for the work enqueued on every stream of dev (at least all of it enqueued before the
 * call); returns the first sticky kernel failure among them. */
static tv_status drain(int32_t dev) {
  tv_status st = TV_SUCCESS;
  pthread_mutex_lock(&g.mu);
  g.draining++;
  for (tv_stream s = g.streams; s; s = s->next) {
    for (uint64_t target = s->submitted; s->dev == dev && s->done < target;)
      pthread_cond_wait(&g.progress, &g.mu);
    if (s->dev == dev && s->err && !st) st = tv_fail(s->err, "%s", s->msg);
  }
  if (!--g.draining) pthread_cond_broadcast(&g.progress);
  pthread_mutex_unlock(&g.mu);
  return st;
}

static tv_status sim_device_synchronize(int32_t dev) {
  CHECK_DEV(dev);
  return drain(dev);
}

/* ---------------------------------------------------------------- copies */
/* memcpy (op C_COPY) and memset (C_SET): check both ends, then run now, after the involved
 * devices' earlier work, or enqueue on stream (async). */
static tv_status transfer(int op, void* dst, const void* src, int value, size_t n,
                          tv_memcpy_kind kind, int async, tv_stream stream) {
  const char* what = op == C_SET ? "memset" : "memcpy";
  if (op == C_COPY) TV_TRY(tv_check_memcpy_kind(kind));
  int dd = op == C_SET || kind == TV_MEMCPY_HOST_TO_DEVICE || kind == TV_MEMCPY_DEVICE_TO_DEVICE;
  int sd = op == C_COPY && (kind == TV_MEMCPY_DEVICE_TO_HOST || kind == TV_MEMCPY_DEVICE_TO_DEVICE);
  int devs[2] = {-1, -1};
  cmd c = {.kind = op, .n = n, .value = value, .dst = dd ? alias_of(dst, n, &devs[0]) : dst,
           .src = sd ? alias_of(src, n, &devs[1]) : src};
  int bad_dst = !c.dst, bad_src = op == C_COPY && !c.src;
  if (n && (bad_dst || bad_src))
    return tv_fail(TV_ERROR_INVALID_VALUE, "%s: %s %p (+%zu bytes) is %s", what,
                   bad_dst ? "destination" : "source", bad_dst ? dst : src, n,
                   (bad_dst ? dd : sd) ? "not inside a device allocation" : "NULL");
  if (n && ((!dd && dev_of(dst) >= 0) || (op == C_COPY && !sd && dev_of(src) >= 0)))
    return tv_fail(TV_ERROR_INVALID_VALUE, "memcpy: kind %d, but a host side is device memory", kind);
  if (async) {
    cmd* h = new_cmd(op);
    return h ? (*h = c, enqueue(stream, h)) : OOM_CMD;
  }
  for (int i = 0; i < 2; i++)
    if (devs[i] >= 0) drain(devs[i]); /* a kernel failure is reported by synchronize, not here */
  run(&c);
  return TV_SUCCESS;
}

static tv_status sim_memcpy(void* dst, const void* src, size_t n, tv_memcpy_kind kind) {
  return transfer(C_COPY, dst, src, 0, n, kind, 0, NULL);
}
static tv_status sim_memcpy_async(void* dst, const void* src, size_t n, tv_memcpy_kind kind,
                                  tv_stream stream) {
  return transfer(C_COPY, dst, src, 0, n, kind, 1, stream);
}
static tv_status sim_memset(void* dst, int value, size_t n) {
  return transfer(C_SET, dst, NULL, value, n, 0, 0, NULL);
}
static tv_status sim_memset_async(void* dst, int value, size_t n, tv_stream stream) {
  return transfer(C_SET, dst, NULL, value, n, 0, 1, stream);
}

/* ---------------------------------------------------------------- events */
static tv_status sim_event_create(int32_t dev, uint32_t flags, tv_event* event) {
  CHECK_DEV(dev);
  TV_TRY(tv_check_event_create(__func__, event, flags));
  tv_event e = calloc(1, sizeof *e);
  if (!e) return tv_fail(TV_ERROR_OUT_OF_MEMORY, "%s: out of host memory", __func__);
  *e = (struct tv_event_st){.magic = LIVE, .flags = flags, .dev = dev, .refs = 1};
  *event = e;
  return TV_SUCCESS;
}

static tv_status sim_event_destroy(tv_event e) {
  TV_CHECK_ARGS(e);
  pthread_mutex_lock(&g.mu);
  int ok = e->magic == LIVE;
  if (ok && (e->magic = 0, --e->refs == 0)) free(e); /* else pending commands still hold it */
  pthread_mutex_unlock(&g.mu);
  return ok ? TV_SUCCESS : tv_fail(TV_ERROR_INVALID_HANDLE, "%s: invalid event", __func__);
}

static tv_status event_cmd(int kind, tv_event e, tv_stream stream) {
  TV_CHECK_ARGS(e);
  cmd* c = new_cmd(kind);
  if (!c) return OOM_CMD;
  c->ev = e; /* enqueue validates and references it under the lock */
  return enqueue(stream, c);
}
static tv_status sim_event_record(tv_event e, tv_stream s) { return event_cmd(C_RECORD, e, s); }
static tv_status sim_stream_wait_event(tv_stream s, tv_event e) { return event_cmd(C_WAIT, e, s); }

static tv_status event_wait(tv_event e, int block) {
  TV_CHECK_ARGS(e);
  pthread_mutex_lock(&g.mu);
  tv_status st = e->magic == LIVE ? TV_SUCCESS : tv_fail(TV_ERROR_INVALID_HANDLE, "invalid event");
  for (uint64_t gen = e->gen; !st && block && e->done_gen < gen;)
    pthread_cond_wait(&g.progress, &g.mu);
  if (!st && e->done_gen < e->gen) st = TV_ERROR_NOT_READY;
  pthread_mutex_unlock(&g.mu);
  return st;
}
static tv_status sim_event_query(tv_event e) { return event_wait(e, 0); }
static tv_status sim_event_synchronize(tv_event e) { return event_wait(e, 1); }

static tv_status sim_event_elapsed_time(tv_event a, tv_event b, float* ms) {
  TV_CHECK_ARGS(a && b && ms);
  tv_status st = TV_SUCCESS;
  pthread_mutex_lock(&g.mu);
  if (a->magic != LIVE || b->magic != LIVE)
    st = tv_fail(TV_ERROR_INVALID_HANDLE, "%s: invalid event", __func__);
  else
    st = tv_check_elapsed(__func__, a->flags, b->flags, a->gen != 0, b->gen != 0);
  if (!st && (a->done_gen < a->gen || b->done_gen < b->gen))
    st = tv_fail(TV_ERROR_NOT_READY, "%s: an event has not completed yet", __func__);
  else if (!st)
    *ms = (float)((double)(int64_t)(b->t_ns - a->t_ns) / 1e6);
  pthread_mutex_unlock(&g.mu);
  return st;
}

/* ---------------------------------------------------------------- modules */
static tv_status module_new(int32_t dev, void* dl, tv_module* module) {
  tv_module m = dl ? calloc(1, sizeof *m) : NULL;
  if (!m && !dl) return tv_fail(TV_ERROR_INVALID_IMAGE, "module_load: %s", dlerror());
  if (!m) return dlclose(dl), tv_fail(TV_ERROR_OUT_OF_MEMORY, "module_load: out of host memory");
  *m = (struct tv_module_st){.magic = LIVE, .dev = dev, .refs = 1, .dl = dl};
  *module = m;
  return TV_SUCCESS;
}

static tv_status sim_module_load_file(int32_t dev, const char* path, tv_module* module) {
  CHECK_DEV(dev);
  TV_CHECK_ARGS(path && module);
  if (access(path, R_OK)) return tv_fail(TV_ERROR_NOT_FOUND, "%s: cannot read '%s'", __func__, path);
  return module_new(dev, dlopen(path, RTLD_NOW | RTLD_LOCAL), module);
}

/* The image is a shared library; dlopen needs a file, so write it to a private temp file. */
static tv_status sim_module_load_data(int32_t dev, const void* image, size_t size,
                                      tv_module* module) {
  CHECK_DEV(dev);
  TV_CHECK_ARGS(image && module);
  const char* tmp = getenv("TMPDIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/torchvendor-sim-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  int fd = mkstemp(path);
  if (fd < 0) return tv_fail(TV_ERROR_UNKNOWN, "%s: cannot create %s", __func__, path);
  size_t done = 0;
  for (ssize_t w; done < size && (w = write(fd, (const char*)image + done, size - done)) > 0;)
    done += (size_t)w;
  close(fd);
  void* dl = done == size ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  unlink(path); /* the mapping keeps the code alive */
  if (done != size) return tv_fail(TV_ERROR_UNKNOWN, "%s: cannot write %s", __func__, path);
  return module_new(dev, dl, module);
}

static tv_status sim_module_unload(tv_module m) {
  TV_CHECK_ARGS(m);
  pthread_mutex_lock(&g.mu);
  int ok = m->magic == LIVE;
  if (ok) m->magic = 0, module_unref(m); /* pending launches keep the library loaded */
  pthread_mutex_unlock(&g.mu);
  return ok ? TV_SUCCESS : tv_fail(TV_ERROR_INVALID_HANDLE, "%s: invalid module", __func__);
}

static tv_status sim_module_get_function(tv_module m, const char* name, tv_function* function) {
  TV_CHECK_ARGS(m && name && function);
  tv_status st = TV_SUCCESS;
  pthread_mutex_lock(&g.mu);
  tv_function f = m->magic == LIVE ? m->fns : NULL;
  while (f && strcmp(f->name, name)) f = f->next; /* one handle per name */
  void* sym = f || m->magic != LIVE ? NULL : dlsym(m->dl, name);
  if (m->magic != LIVE) st = tv_fail(TV_ERROR_INVALID_HANDLE, "%s: invalid module", __func__);
  else if (!f && !sym) st = tv_fail(TV_ERROR_NOT_FOUND, "%s: no function '%s'", __func__, name);
  else if (!f && !(f = malloc(sizeof *f + strlen(name) + 1))) st = OOM_CMD;
  else if (sym) {
    char marker[300]; /* TV_SIM_KERNEL_WAITS exports <name>__tv_sim_waits */
    snprintf(marker, sizeof marker, "%s__tv_sim_waits", name);
    *f = (struct tv_function_st){.magic = LIVE, .mod = m, .fn = (tv_sim_kernel)sym,
                                 .waits = dlsym(m->dl, marker) != NULL, .next = m->fns};
    strcpy(f->name, name);
    m->fns = f;
  }
  if (!st) *function = f;
  pthread_mutex_unlock(&g.mu);
  return st;
}

static tv_status sim_launch(tv_function f, const tv_launch_config* cfg, const void* args,
                            size_t args_size, tv_stream stream) {
  TV_TRY(tv_check_launch(__func__, f, cfg, args, args_size));
  cmd* c = new_cmd(C_LAUNCH);
  if (!c || !(c->args = malloc(args_size ? args_size : 1))) return free(c), OOM_CMD;
  if (args_size) memcpy(c->args, args, args_size);
  pthread_mutex_lock(&g.mu); /* once for all pointers: launches of small kernels are frequent */
  for (uint32_t i = 0; i < cfg->num_pointer_offsets; i++) {
    uint32_t off = cfg->pointer_offsets[i];
    void* p = NULL;
    char* alias = NULL;
    int dev;
    if (off <= args_size && args_size - off >= sizeof p) memcpy(&p, (char*)c->args + off, sizeof p);
    else return pthread_mutex_unlock(&g.mu), release(c),
                tv_fail(TV_ERROR_INVALID_VALUE, "%s: pointer offset %u is outside the %zu-byte "
                        "argument buffer", __func__, off, args_size);
    if (p && !(alias = alias_of_locked(p, 0, &dev)))
      return pthread_mutex_unlock(&g.mu), release(c),
             tv_fail(TV_ERROR_INVALID_VALUE, "%s: the pointer at offset %u (%p) is not device "
                     "memory", __func__, off, p);
    memcpy((char*)c->args + off, &alias, sizeof alias);
  }
  pthread_mutex_unlock(&g.mu);
  c->fn = f; /* enqueue validates and references it under the lock */
  c->launch = (tv_sim_launch){.grid = {cfg->grid[0], cfg->grid[1], cfg->grid[2]},
                              .block = {cfg->block[0], cfg->block[1], cfg->block[2]},
                              .args_size = args_size};
  return enqueue(stream, c);
}

/* ---------------------------------------------------------------- collectives */
static tv_status sim_comm_create(const char* id, int32_t nranks, int32_t rank, int32_t dev,
                                 tv_comm* comm) {
  CHECK_DEV(dev);
  TV_CHECK_ARGS(id && comm);
  char err[256];
  tv_comm c = calloc(1, sizeof *c);
  if (!c) return tv_fail(TV_ERROR_OUT_OF_MEMORY, "%s: out of host memory", __func__);
  tv_status st = coll_comm_open(id, nranks, rank, c, err, sizeof err);
  if (st) return free(c), tv_fail(st, "%s: %s", __func__, err);
  c->magic = LIVE, c->refs = 1, c->dev = dev;
  *comm = c;
  return TV_SUCCESS;
}

static tv_status sim_comm_destroy(tv_comm c) {
  TV_CHECK_ARGS(c);
  pthread_mutex_lock(&g.mu);
  int ok = c->magic == LIVE;
  if (ok) c->magic = 0, comm_unref(c); /* enqueued collectives hold references */
  pthread_mutex_unlock(&g.mu);
  return ok ? TV_SUCCESS : tv_fail(TV_ERROR_INVALID_HANDLE, "%s: invalid communicator", __func__);
}

/* Validate co, translate its buffers to aliases (each inside one live allocation of the
 * communicator's device) and enqueue it on stream. */
static tv_status coll_enqueue(const char* what, coll co, const void* send, void* recv,
                              tv_comm comm, tv_stream stream) {
  char err[256];
  size_t sb, rb;
  int sdev = -1, rdev = -1;
  TV_CHECK_ARGS(comm && comm->magic == LIVE);
  int reduces = co.kind == COLL_ALL_REDUCE || co.kind == COLL_REDUCE_SCATTER;
  TV_TRY(tv_check_collective_types(what, co.dtype, reduces ? (int)co.op : -1));
  if (co.kind == COLL_BROADCAST || co.kind == COLL_SEND || co.kind == COLL_RECV)
    TV_TRY(tv_check_rank(what, co.peer, comm->nranks));
  tv_status st = coll_validate(&co, comm, &sb, &rb, err, sizeof err);
  if (st) return tv_fail(st, "%s: %s", what, err);
  co.send = sb ? alias_of(send, sb, &sdev) : NULL;
  co.recv = rb ? alias_of(recv, rb, &rdev) : NULL;
  if ((sb && (!co.send || sdev != comm->dev)) || (rb && (!co.recv || rdev != comm->dev)))
    return tv_fail(TV_ERROR_INVALID_VALUE, "%s: the %s buffer %p (+%zu bytes) is not inside a device "
                   "%d allocation", what, sb && (!co.send || sdev != comm->dev) ? "send" : "receive",
                   sb && (!co.send || sdev != comm->dev) ? send : recv,
                   sb && (!co.send || sdev != comm->dev) ? sb : rb, (int)comm->dev);
  cmd* c = new_cmd(C_COLL);
  if (!c) return OOM_CMD;
  c->comm = comm, c->co = co; /* enqueue references the communicator under the lock */
  return enqueue(stream, c);
}

static tv_status sim_all_reduce(const void* send, void* recv, size_t count, tv_dtype dtype,
                                tv_reduce_op op, tv_comm comm, tv_stream stream) {
  coll co = {.kind = COLL_ALL_REDUCE, .dtype = dtype, .op = op, .count = count};
  return coll_enqueue("all_reduce", co, send, recv, comm, stream);
}
static tv_status sim_broadcast(const void* send, void* recv, size_t count, tv_dtype dtype,
                               int32_t root, tv_comm comm, tv_stream stream) {
  coll co = {.kind = COLL_BROADCAST, .dtype = dtype, .peer = root, .count = count};
  return coll_enqueue("broadcast", co, send, recv, comm, stream);
}
static tv_status sim_all_gather(const void* send, void* recv, size_t sendcount, tv_dtype dtype,
                                tv_comm comm, tv_stream stream) {
  coll co = {.kind = COLL_ALL_GATHER, .dtype = dtype, .count = sendcount};
  return coll_enqueue("all_gather", co, send, recv, comm, stream);
}
static tv_status sim_reduce_scatter(const void* send, void* recv, size_t recvcount,
                                    tv_dtype dtype, tv_reduce_op op, tv_comm comm,
                                    tv_stream stream) {
  coll co = {.kind = COLL_REDUCE_SCATTER, .dtype = dtype, .op = op, .count = recvcount};
  return coll_enqueue("reduce_scatter", co, send, recv, comm, stream);
}
static tv_status sim_send(const void* buf, size_t count, tv_dtype dtype, int32_t peer,
                          tv_comm comm, tv_stream stream) {
  coll co = {.kind = COLL_SEND, .dtype = dtype, .peer = peer, .count = count};
  return coll_enqueue("send", co, buf, NULL, comm, stream);
}
static tv_status sim_recv(void* buf, size_t count, tv_dtype dtype, int32_t peer, tv_comm comm,
                          tv_stream stream) {
  coll co = {.kind = COLL_RECV, .dtype = dtype, .peer = peer, .count = count};
  return coll_enqueue("recv", co, NULL, buf, comm, stream);
}

/* ---------------------------------------------------------------- errors and entry point */
/* get_error_string and last_error_message are tv_status_name and tv_last_error_message. */
static const tv_runtime table; /* defined below */
static tv_runtime minor0;      /* TORCHVENDOR_SIM_ABI_MINOR=0: the table as a minor-0 library */
static tv_status init_status;
static char init_msg[256];

static int env_long(const char* name, long dflt, long lo, long hi, long* out) {
  const char* v = getenv(name);
  char* end = "";
  *out = v && *v ? strtol(v, &end, 10) : dflt;
  if (!*end && *out >= lo && *out <= hi) return 1;
  snprintf(init_msg, sizeof init_msg, "%s='%s': expected an integer in [%ld, %ld]", name, v, lo,
           hi);
  return 0;
}

static int map_arena(arena* a, size_t cap, int prot) {
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE; /* pages commit on first touch */
  a->cap = cap;
  a->base = mmap(NULL, cap, prot, flags, -1, 0);
  a->alias = prot == PROT_NONE ? mmap(NULL, cap, PROT_READ | PROT_WRITE, flags, -1, 0) : a->base;
  a->blocks = calloc(1, sizeof(block));
  if (a->blocks) a->blocks->size = cap;
  return a->base != MAP_FAILED && a->alias != MAP_FAILED && a->blocks;
}

static void init(void) {
  long n, mb, minor;
  if (!env_long("TORCHVENDOR_SIM_DEVICES", 2, 0, MAX_DEVICES, &n) ||
      !env_long("TORCHVENDOR_SIM_MEMORY_MB", 4096, 1, 1L << 24, &mb) ||
      !env_long("TORCHVENDOR_SIM_ABI_MINOR", TV_RUNTIME_ABI_MINOR, 0, TV_RUNTIME_ABI_MINOR, &minor)) {
    init_status = TV_ERROR_INVALID_VALUE;
    return;
  }
  int ok = map_arena(&g.pinned, (size_t)mb << 20, PROT_READ | PROT_WRITE);
  for (int i = 0; i < n && ok; i++) ok = map_arena(&g.dev[i], (size_t)mb << 20, PROT_NONE);
  if (!ok) {
    init_status = TV_ERROR_OUT_OF_MEMORY;
    snprintf(init_msg, sizeof init_msg, "cannot map %ld MiB for each of %ld devices", mb, n);
  }
  g.ndev = ok ? (int32_t)n : 0;
  if (minor == 0) /* entries past struct_size are unknown to a minor-0 reader */
    minor0 = table, minor0.abi_minor = 0, minor0.struct_size = offsetof(tv_runtime, comm_create);
}

static const tv_runtime table = {
    .abi_major = TV_RUNTIME_ABI_MAJOR, .abi_minor = TV_RUNTIME_ABI_MINOR,
    .struct_size = sizeof(tv_runtime), .name = "torchvendor-sim 1.0",
    .device_count = sim_device_count, .get_device_properties = sim_get_device_properties,
    .set_device = sim_set_device, .get_device = sim_get_device,
    .device_synchronize = sim_device_synchronize, .malloc = sim_malloc, .free = sim_free,
    .host_malloc = sim_host_malloc, .host_free = sim_host_free, .memcpy = sim_memcpy,
    .memcpy_async = sim_memcpy_async, .memset = sim_memset, .memset_async = sim_memset_async,
    .stream_create = sim_stream_create, .stream_destroy = sim_stream_destroy,
    .stream_query = sim_stream_query, .stream_synchronize = sim_stream_synchronize,
    .stream_priority_range = sim_stream_priority_range, .event_create = sim_event_create,
    .event_destroy = sim_event_destroy, .event_record = sim_event_record,
    .event_query = sim_event_query, .event_synchronize = sim_event_synchronize,
    .stream_wait_event = sim_stream_wait_event, .event_elapsed_time = sim_event_elapsed_time,
    .module_load_file = sim_module_load_file, .module_load_data = sim_module_load_data,
    .module_unload = sim_module_unload, .module_get_function = sim_module_get_function,
    .launch = sim_launch, .get_error_string = tv_status_name,
    .last_error_message = tv_last_error_message, .comm_create = sim_comm_create,
    .comm_destroy = sim_comm_destroy, .all_reduce = sim_all_reduce, .broadcast = sim_broadcast,
    .all_gather = sim_all_gather, .reduce_scatter = sim_reduce_scatter, .send = sim_send,
    .recv = sim_recv,
};

TV_EXPORT tv_status torchvendor_get_runtime(uint32_t requested_major, const tv_runtime** runtime) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  TV_CHECK_ARGS(runtime);
  TV_TRY(tv_check_abi_major("torchvendor-sim", requested_major));
  pthread_once(&once, init);
  if (init_status) return tv_init_failed("torchvendor-sim", init_status, init_msg);
  *runtime = minor0.struct_size ? &minor0 : &table;
  return TV_SUCCESS;
}
