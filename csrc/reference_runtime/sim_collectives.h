/*
 * The simulator's collectives (runtime.h minor 1), shared by sim_runtime.c (the table entries,
 * which validate, translate device pointers and enqueue) and sim_collectives.c (communicators
 * over POSIX shared memory and the algorithms a stream worker runs).
 */
#ifndef TORCHVENDOR_SIM_COLLECTIVES_H_
#define TORCHVENDOR_SIM_COLLECTIVES_H_

#include <stddef.h>

#include "torchvendor/runtime.h"

typedef enum coll_kind {
  COLL_ALL_REDUCE, COLL_BROADCAST, COLL_ALL_GATHER, COLL_REDUCE_SCATTER, COLL_SEND, COLL_RECV
} coll_kind;

/* One enqueued collective. send/recv are host-visible aliases of the device buffers. */
typedef struct coll {
  coll_kind kind;
  tv_dtype dtype;
  tv_reduce_op op;
  int32_t peer; /* broadcast: the root; send/recv: the other rank */
  size_t count; /* elements, as the entry's count/sendcount/recvcount */
  const char* send;
  char* recv;
} coll;

struct seg_hdr;
struct tv_comm_st {
  uint32_t magic;           /* magic and refs: under the runtime's lock */
  int refs;                 /* the handle, plus one per enqueued collective */
  int32_t dev, rank, nranks;
  struct seg_hdr* seg;      /* the shared segment, mapped in every rank */
  size_t seg_bytes;
  char id[64];
};

/* [blocks] Map (creating if first) the segment of communicator `id` and wait for all ranks.
 * Fills everything but magic, refs and dev; on failure writes why into err. */
tv_status coll_comm_open(const char* id, int32_t nranks, int32_t rank, tv_comm comm, char* err,
                         size_t errlen);
void coll_comm_close(tv_comm comm); /* unmaps; the caller frees comm */

/* Sets the bytes the send and recv buffers of `co` span for `comm` (INVALID_VALUE if the count
 * overflows). The caller has checked dtype, op and peer (torchvendor/runtime_checks.h). */
tv_status coll_validate(const coll* co, tv_comm comm, size_t* send_bytes, size_t* recv_bytes,
                        char* err, size_t errlen);

/* Runs `co` on the calling stream worker; non-zero (with err filled) if it failed. */
int32_t coll_run(tv_comm comm, const coll* co, char* err, size_t errlen);

#endif /* TORCHVENDOR_SIM_COLLECTIVES_H_ */
