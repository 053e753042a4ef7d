/*
 * torchvendor-sim collectives: communicators across processes through POSIX shared memory.
 *
 * A communicator is one named segment (shm_open("/tvsim-<id>")) that every rank maps: a header
 * with a process-shared mutex and condition variable, a barrier (arrivals + generation), and
 * sequence numbers of the point-to-point mailboxes; then one staging slot per rank; then one
 * mailbox per ordered pair of ranks. Rank 0 initialises the header, every rank waits for all to
 * join, and rank 0 then unlinks the name (the mappings stay), so nothing is left in /dev/shm.
 *
 * Algorithms, run by the stream worker that reaches the command, chunk by chunk of a slot:
 *   all_reduce      copy my chunk to my slot; barrier; every rank reduces all slots, in rank
 *                   order (so every rank gets the same bits); barrier (slots reusable).
 *   broadcast       the root fills its slot; barrier; the others copy it; barrier.
 *   all_gather      my chunk to my slot; barrier; copy every slot to its place; barrier.
 *   reduce_scatter  my pieces of every block to my slot; barrier; reduce my block; barrier.
 *   send / recv     a one-chunk mailbox per (sender, receiver): the sender waits until it is
 *                   empty, fills it and bumps `sent`; the receiver waits for it, empties it and
 *                   bumps `taken`.
 * A rank that waits longer than TORCHVENDOR_SIM_COMM_TIMEOUT_S (default 300) marks the segment
 * broken, which fails that collective on every rank instead of hanging them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "sim_collectives.h"

#define MAX_RANKS 64
#define SLOT_BYTES ((size_t)4 << 20)  /* staging per rank and chunk */
#define MBOX_BYTES ((size_t)1 << 20)  /* one point-to-point chunk */
#define READY 0x74766373U

struct seg_hdr {
  _Atomic uint32_t ready;   /* READY once rank 0 has initialised mu and cv */
  int32_t nranks, joined, broken;
  char present[MAX_RANKS];
  pthread_mutex_t mu;
  pthread_cond_t cv;        /* broadcast on every change below */
  uint64_t arrived, gen;    /* the barrier */
  uint64_t sent[MAX_RANKS][MAX_RANKS], taken[MAX_RANKS][MAX_RANKS]; /* [from][to] */
  size_t mbox_len[MAX_RANKS][MAX_RANKS];
};

#define HDR_BYTES ((sizeof(struct seg_hdr) + 4095) & ~(size_t)4095)

static int say(char* err, size_t n, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, n, fmt, ap);
  va_end(ap);
  return 1;
}

static char* slot(tv_comm c, int r) { return (char*)c->seg + HDR_BYTES + (size_t)r * SLOT_BYTES; }
static char* mbox(tv_comm c, int from, int to) {
  return slot(c, c->nranks) + ((size_t)from * c->nranks + to) * MBOX_BYTES;
}

static long timeout_s(void) {
  const char* v = getenv("TORCHVENDOR_SIM_COMM_TIMEOUT_S");
  long t = v && *v ? strtol(v, NULL, 10) : 300;
  return t > 0 ? t : 300;
}

static struct timespec deadline(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += timeout_s();
  return ts;
}

/* Wait on the segment's condition (mu held) until `cond` or the deadline, which breaks the
 * communicator for every rank; rc is 0 once cond holds, -1 if broken. */
#define WAIT_FOR(h, cond, dl, rc)                                         \
  do {                                                                    \
    while (!(cond) && !(h)->broken)                                       \
      if (pthread_cond_timedwait(&(h)->cv, &(h)->mu, &(dl)) == ETIMEDOUT) \
        (h)->broken = 1, pthread_cond_broadcast(&(h)->cv);                \
    (rc) = (cond) ? 0 : -1;                                               \
  } while (0)

static int barrier(tv_comm c) {
  struct seg_hdr* h = c->seg;
  struct timespec dl = deadline();
  pthread_mutex_lock(&h->mu);
  uint64_t gen = h->gen;
  if (++h->arrived == (uint64_t)h->nranks) h->arrived = 0, h->gen++, pthread_cond_broadcast(&h->cv);
  int rc;
  WAIT_FOR(h, h->gen != gen, dl, rc);
  pthread_mutex_unlock(&h->mu);
  return rc;
}

/* ---------------------------------------------------------------- communicators */
static int init_header(struct seg_hdr* h, int32_t nranks) { /* rank 0, before READY */
  pthread_mutexattr_t ma;
  pthread_condattr_t ca;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
  pthread_condattr_init(&ca);
  pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  int rc = pthread_mutex_init(&h->mu, &ma) || pthread_cond_init(&h->cv, &ca);
  h->nranks = nranks;
  atomic_store(&h->ready, READY);
  return rc;
}

static int join(tv_comm c, char* err, size_t n) {
  struct seg_hdr* h = c->seg;
  struct timespec dl = deadline();
  if (c->rank == 0 && init_header(h, c->nranks)) return say(err, n, "cannot initialise locks");
  for (long ms = 0; atomic_load(&h->ready) != READY; ms++) { /* rank 0 may not be there yet */
    if (ms > timeout_s() * 1000)
      return say(err, n, "rank 0 of '%s' did not arrive within %ld s", c->id, timeout_s());
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  int bad = 0;
  pthread_mutex_lock(&h->mu);
  if (h->nranks != c->nranks)
    bad = say(err, n, "'%s' has %d ranks, this rank says %d", c->id, h->nranks, c->nranks);
  else if (h->present[c->rank])
    bad = say(err, n, "rank %d joined '%s' twice", c->rank, c->id);
  else
    h->present[c->rank] = 1, h->joined++, pthread_cond_broadcast(&h->cv);
  if (!bad) {
    WAIT_FOR(h, h->joined == h->nranks, dl, bad);
    if (bad) say(err, n, "only %d of %d ranks joined '%s' within %ld s", h->joined, h->nranks,
                 c->id, timeout_s());
  }
  pthread_mutex_unlock(&h->mu);
  return bad;
}

tv_status coll_comm_open(const char* id, int32_t nranks, int32_t rank, tv_comm c, char* err,
                         size_t n) {
  size_t len = strlen(id);
  if (!len || len > 63 || strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                     "0123456789_.-") != len)
    return say(err, n, "id '%s' is not 1 to 63 characters of [A-Za-z0-9_.-]", id),
           TV_ERROR_INVALID_VALUE;
  if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks)
    return say(err, n, "rank %d of %d: need 0 <= rank < nranks <= %d", rank, nranks, MAX_RANKS),
           TV_ERROR_INVALID_VALUE;
  char name[80];
  snprintf(name, sizeof name, "/tvsim-%s", id);
  *c = (struct tv_comm_st){.rank = rank, .nranks = nranks,
                           .seg_bytes = HDR_BYTES + (size_t)nranks * SLOT_BYTES +
                                        (size_t)nranks * nranks * MBOX_BYTES};
  snprintf(c->id, sizeof c->id, "%s", id);
  int fd = shm_open(name, O_CREAT | O_RDWR, 0600); /* pages commit on first touch */
  if (fd < 0 || ftruncate(fd, (off_t)c->seg_bytes))
    return say(err, n, "shm_open/ftruncate '%s': %s", name, strerror(errno)),
           fd >= 0 ? close(fd) : 0, TV_ERROR_OUT_OF_MEMORY;
  c->seg = mmap(NULL, c->seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (c->seg == MAP_FAILED)
    return say(err, n, "mmap of '%s' failed: %s", name, strerror(errno)), TV_ERROR_OUT_OF_MEMORY;
  int failed = join(c, err, n);
  if (failed || rank == 0) shm_unlink(name); /* everyone has it mapped, or it is of no use */
  if (failed) munmap(c->seg, c->seg_bytes);
  return failed ? TV_ERROR_NOT_READY : TV_SUCCESS;
}

void coll_comm_close(tv_comm c) { munmap(c->seg, c->seg_bytes); }

/* ---------------------------------------------------------------- element types and reductions */
static size_t esize(tv_dtype t) {
  static const size_t sizes[] = {4, 8, 2, 2, 1, 1, 4, 8, 1};
  return (unsigned)t < sizeof sizes / sizeof *sizes ? sizes[t] : 0;
}

static float bf2f(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint16_t f2bf(float f) { /* round to nearest even, as torch does */
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffU) > 0x7f800000U) return 0x7fc0; /* NaN */
  return (uint16_t)((u + 0x7fffU + ((u >> 16) & 1)) >> 16);
}

#define LOOP(T, EXPR) \
  for (size_t i = 0; i < n; i++) { T x = ((T*)o)[i], y = ((const T*)a)[i]; ((T*)o)[i] = (EXPR); }
#define COMBINE(T)                                   \
  switch (op) {                                      \
    case TV_REDUCE_PROD: LOOP(T, x * y) break;       \
    case TV_REDUCE_MAX: LOOP(T, x > y ? x : y) break; \
    case TV_REDUCE_MIN: LOOP(T, x < y ? x : y) break; \
    default: LOOP(T, x + y)                          \
  }

/* o[i] = op(o[i], a[i]) for n elements (AVG sums here; avg() divides at the end). */
static void combine(void* o, const void* a, size_t n, tv_dtype t, tv_reduce_op op) {
  switch (t) {
    case TV_FLOAT32: COMBINE(float) break;
    case TV_FLOAT64: COMBINE(double) break;
    case TV_FLOAT16: COMBINE(_Float16) break; /* each step rounds to half, as torch's Half does */
    case TV_INT8: COMBINE(int8_t) break;
    case TV_UINT8: COMBINE(uint8_t) break;
    case TV_INT32: COMBINE(int32_t) break;
    case TV_INT64: COMBINE(int64_t) break;
    case TV_BOOL: /* SUM and MAX are "or", PROD and MIN "and" */
      op = op == TV_REDUCE_SUM || op == TV_REDUCE_MAX ? TV_REDUCE_MAX : TV_REDUCE_MIN;
      COMBINE(uint8_t) break;
    case TV_BFLOAT16:
      for (size_t i = 0; i < n; i++) {
        float x = bf2f(((uint16_t*)o)[i]), y = bf2f(((const uint16_t*)a)[i]);
        float r = op == TV_REDUCE_PROD ? x * y : op == TV_REDUCE_MAX ? (x > y ? x : y)
                  : op == TV_REDUCE_MIN ? (x < y ? x : y) : x + y;
        ((uint16_t*)o)[i] = f2bf(r);
      }
      break;
  }
}

static void avg(void* o, size_t n, tv_dtype t, int nranks) {
  for (size_t i = 0; i < n; i++)
    if (t == TV_FLOAT32) ((float*)o)[i] /= nranks;
    else if (t == TV_FLOAT64) ((double*)o)[i] /= nranks;
    else if (t == TV_FLOAT16) ((_Float16*)o)[i] /= nranks;
    else ((uint16_t*)o)[i] = f2bf(bf2f(((uint16_t*)o)[i]) / nranks);
}

tv_status coll_validate(const coll* co, tv_comm c, size_t* sb, size_t* rb, char* err, size_t n) {
  size_t es = esize(co->dtype), bytes = co->count * es;
  if (!es) return say(err, n, "unknown tv_dtype %d", (int)co->dtype), TV_ERROR_NOT_SUPPORTED;
  if (co->count && bytes / co->count != es)
    return say(err, n, "count %zu overflows", co->count), TV_ERROR_INVALID_VALUE;
  *sb = co->kind == COLL_RECV ? 0 : co->kind == COLL_REDUCE_SCATTER ? bytes * c->nranks : bytes;
  *rb = co->kind == COLL_SEND ? 0 : co->kind == COLL_ALL_GATHER ? bytes * c->nranks : bytes;
  if (co->kind == COLL_BROADCAST && c->rank != co->peer) *sb = 0; /* read on the root only */
  return TV_SUCCESS;
}

/* ---------------------------------------------------------------- the algorithms */
static int all_reduce(tv_comm c, const coll* co, size_t es) {
  for (size_t off = 0, per = SLOT_BYTES / es, m; off < co->count; off += m) {
    m = co->count - off < per ? co->count - off : per;
    char* out = co->recv + off * es;
    memcpy(slot(c, c->rank), co->send + off * es, m * es);
    if (barrier(c)) return -1;
    memcpy(out, slot(c, 0), m * es);
    for (int r = 1; r < c->nranks; r++) combine(out, slot(c, r), m, co->dtype, co->op);
    if (co->op == TV_REDUCE_AVG) avg(out, m, co->dtype, c->nranks);
    if (barrier(c)) return -1;
  }
  return 0;
}

static int broadcast(tv_comm c, const coll* co, size_t es) {
  for (size_t off = 0, per = SLOT_BYTES / es, m; off < co->count; off += m) {
    m = co->count - off < per ? co->count - off : per;
    if (c->rank == co->peer) memcpy(slot(c, co->peer), co->send + off * es, m * es);
    if (barrier(c)) return -1;
    if (c->rank != co->peer || co->recv != co->send)
      memcpy(co->recv + off * es, slot(c, co->peer), m * es);
    if (barrier(c)) return -1;
  }
  return 0;
}

static int all_gather(tv_comm c, const coll* co, size_t es) {
  for (size_t off = 0, per = SLOT_BYTES / es, m; off < co->count; off += m) {
    m = co->count - off < per ? co->count - off : per;
    memcpy(slot(c, c->rank), co->send + off * es, m * es);
    if (barrier(c)) return -1;
    for (int r = 0; r < c->nranks; r++) memcpy(co->recv + (r * co->count + off) * es, slot(c, r), m * es);
    if (barrier(c)) return -1;
  }
  return 0;
}

static int reduce_scatter(tv_comm c, const coll* co, size_t es) {
  for (size_t off = 0, per = SLOT_BYTES / es / c->nranks, m; off < co->count; off += m) {
    m = co->count - off < per ? co->count - off : per;
    for (int r = 0; r < c->nranks; r++) /* block r's piece, at r * m in my slot */
      memcpy(slot(c, c->rank) + r * m * es, co->send + (r * co->count + off) * es, m * es);
    if (barrier(c)) return -1;
    char* out = co->recv + off * es;
    memcpy(out, slot(c, 0) + c->rank * m * es, m * es);
    for (int r = 1; r < c->nranks; r++)
      combine(out, slot(c, r) + c->rank * m * es, m, co->dtype, co->op);
    if (co->op == TV_REDUCE_AVG) avg(out, m, co->dtype, c->nranks);
    if (barrier(c)) return -1;
  }
  return 0;
}

/* send (to = peer) and recv (from = peer), one mailbox chunk at a time. */
static int point_to_point(tv_comm c, const coll* co, size_t es, char* err, size_t n) {
  struct seg_hdr* h = c->seg;
  int sending = co->kind == COLL_SEND, from = sending ? c->rank : co->peer;
  int to = sending ? co->peer : c->rank, rc = 0;
  char* box = mbox(c, from, to);
  for (size_t off = 0, total = co->count * es, m; off < total && !rc; off += m) {
    m = total - off < MBOX_BYTES ? total - off : MBOX_BYTES;
    struct timespec dl = deadline();
    pthread_mutex_lock(&h->mu);
    if (sending) WAIT_FOR(h, h->taken[from][to] == h->sent[from][to], dl, rc);
    else WAIT_FOR(h, h->sent[from][to] > h->taken[from][to], dl, rc);
    if (!rc && !sending && h->mbox_len[from][to] != m) /* the sizes of send and recv differ */
      rc = say(err, n, "recv of %zu bytes from rank %d got a chunk of %zu bytes: the sizes of "
               "send and recv differ", total, from, h->mbox_len[from][to]);
    pthread_mutex_unlock(&h->mu);
    if (rc) break;
    if (sending) memcpy(box, co->send + off, m);
    else memcpy(co->recv + off, box, m);
    pthread_mutex_lock(&h->mu);
    if (sending) h->mbox_len[from][to] = m, h->sent[from][to]++;
    else h->taken[from][to]++;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
  }
  return rc;
}

int32_t coll_run(tv_comm c, const coll* co, char* err, size_t n) {
  static const char* names[] = {"all_reduce", "broadcast", "all_gather", "reduce_scatter", "send",
                                "recv"};
  size_t es = esize(co->dtype);
  err[0] = 0;
  int rc = co->kind == COLL_ALL_REDUCE ? all_reduce(c, co, es)
           : co->kind == COLL_BROADCAST ? broadcast(c, co, es)
           : co->kind == COLL_ALL_GATHER ? all_gather(c, co, es)
           : co->kind == COLL_REDUCE_SCATTER ? reduce_scatter(c, co, es)
           : point_to_point(c, co, es, err, n);
  if (rc && !err[0])
    say(err, n, "%s on communicator '%s' (rank %d of %d) gave up after %ld s waiting for other "
        "ranks: did one exit, or enqueue collectives in another order?", names[co->kind], c->id,
        c->rank, c->nranks, timeout_s());
  return rc ? TV_ERROR_LAUNCH_FAILED : 0;
}
