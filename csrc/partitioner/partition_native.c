/* torchvendor.partitioner._partition_native: the partitioner's whole-graph integer loops, in C.
 *
 * - edges, buckets, crossings: core.py's _edges, _buckets, _crossings (index and assembly);
 * - waves: core.py's _waves (Kahn's sort in waves);
 * - refine_waves: boundary.py's refine_waves, the boundary-bytes sweeps;
 * - boundary_total: boundary.py's boundary_total;
 * - pair_cuts, min_cut: cuts.py's pair_cuts (the same flow network pass by pass) and min_cut (Dinic);
 * - span_cut: span.py's span_cut (one minimum cut for the span relaxation: the same network);
 * - eject_cheap: boundary.py's eject_cheap (cheap views at a partition's edge fall back).
 *
 * The Python functions are the specification, as heapq is for _heapq: this file mirrors them,
 * and for the sweeps _boundary_marks, _summaries, _sweep_backward/_sweep_forward, _visit,
 * _best_single, _best_group, _cone, _move_cone, _move and wave_books, function by function, with
 * the same iteration orders and tie-breaks, so both give the same waves (tests/test_partitioner.py
 * compares them on random DAGs). Sets of waves are stamp arrays indexed by wave + 1 (waves run
 * from -1, the fallback, to n_waves). Sizes come from the caller's size_of(node) on first use
 * (through its cache list when given); moves are booked here (books=) or asked of the caller's
 * movable(unit, old, new). Every index is range-checked on the way in. No torch: the
 * partitioner stays torch-free.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>

typedef long long i64;

/* Adjacency as compressed rows: the neighbours of i are idx[off[i]] .. idx[off[i + 1] - 1]. */
typedef struct {
  Py_ssize_t *off;
  long *idx;
} Csr;

/* A set of waves (or of nodes): membership by stamp, elements listed in insertion order. */
typedef struct {
  int *stamp;
  int cur;
  long *items;
  Py_ssize_t n;
} Set;

typedef struct {
  Py_ssize_t n_units, n_nodes;
  long n_waves;
  long *uwave, *nwave, *unit_of; /* unit_of NULL: every node is its own unit (nwave == uwave) */
  Csr usucc, upreds, preds, succ, members; /* members: nodes of each multi-node unit (else empty) */
  char *multi;                             /* unit holds several nodes (a key of `members`) */
  i64 *sizes;                              /* -1: not looked up yet */
  long *fresh;                             /* nodes whose size this call looked up, for the cache */
  Py_ssize_t n_fresh;
  PyObject *size_of, *movable;
  /* wave books (boundary.wave_books), kept here when the caller passes books instead of movable */
  int books;
  long min_size;
  char *compute, *exempt; /* per node / per unit; NULL: every node computes / no unit is exempt */
  i64 *wave_nodes, *wave_compute; /* per wave + 1; the same array when every node computes */
  char *marks, *settled;
  long *settled_lo, *settled_hi;
  /* scratch */
  Set zone, own, cand, gkeys, inside, seen, cone_set;
  i64 *gain;
  long *cone;
  Py_ssize_t cone_cap;
  long *outs;        /* _best_group: the outside reader waves of each member, concatenated */
  Py_ssize_t *owns;  /* per member with outside readers: start in outs, count, m, neg; size */
  i64 *own_size;
  int failed;
} St;

#define DEG(c, i) ((c).off[(i) + 1] - (c).off[(i)])
/* for each neighbour `var` of i in c (a plain loop: break and continue work) */
#define FOR_EACH(c, i, var) \
  for (long var, *var##_p = (c).idx + (c).off[i], *var##_e = (c).idx + (c).off[(i) + 1]; \
       var##_p < var##_e && ((var = *var##_p), 1); ++var##_p)

static int set_init(Set *s, Py_ssize_t n) {
  s->stamp = calloc(n, sizeof(int));
  s->items = malloc(sizeof(long) * (n ? n : 1));
  s->cur = 1;
  s->n = 0;
  return s->stamp && s->items;
}
static void set_free(Set *s) {
  free(s->stamp);
  free(s->items);
}
/* sets live for one refine_waves call, far fewer clears than an int's range */
static inline void set_clear(Set *s) {
  s->n = 0;
  s->cur++;
}
/* wave sets are indexed by wave + 1; node sets by node */
static inline int set_has(const Set *s, long k) { return s->stamp[k] == s->cur; }
static inline void set_add(Set *s, long k) {
  if (s->stamp[k] != s->cur) {
    s->stamp[k] = s->cur;
    s->items[s->n++] = k;
  }
}
static inline void set_discard(Set *s, long k) {
  if (s->stamp[k] == s->cur) {
    s->stamp[k] = 0;
    for (Py_ssize_t i = 0; i < s->n; ++i)
      if (s->items[i] == k) {
        memmove(s->items + i, s->items + i + 1, sizeof(long) * (s->n - i - 1));
        s->n--;
        break;
      }
  }
}

/* ---- conversions ---------------------------------------------------------------------------- */

/* n ints of a sequence into out, each in [lo, hi] (else a ValueError naming `what`) */
static int to_longs(PyObject *seq, Py_ssize_t n, long *out, const char *what, long lo, long hi) {
  PyObject *fast = PySequence_Fast(seq, what); /* a list or tuple is itself: no copy */
  if (!fast) return -1;
  Py_ssize_t got = PySequence_Fast_GET_SIZE(fast);
  PyObject **items = PySequence_Fast_ITEMS(fast);
  int rc = 0;
  if (got != n) {
    PyErr_Format(PyExc_ValueError, "%s has %zd entries, expected %zd", what, got, n);
    rc = -1;
  }
  for (Py_ssize_t i = 0; i < n && !rc; ++i) {
    long v = PyLong_AsLong(items[i]);
    if (v == -1 && PyErr_Occurred()) {
      rc = -1;
    } else if (v < lo || v > hi) {
      PyErr_Format(PyExc_ValueError, "%s holds %ld, outside %ld..%ld", what, v, lo, hi);
      rc = -1;
    }
    out[i] = v;
  }
  Py_DECREF(fast);
  return rc;
}

/* A list of n sequences of ints into compressed rows; each int names one of `targets` items. */
static int to_csr(PyObject *lists, Py_ssize_t n, Csr *c, const char *what, Py_ssize_t targets) {
  PyObject *fast = PySequence_Fast(lists, what);
  if (!fast) return -1;
  if (PySequence_Fast_GET_SIZE(fast) != n) {
    PyErr_Format(PyExc_ValueError, "%s has %zd entries, expected %zd", what, PySequence_Fast_GET_SIZE(fast), n);
    Py_DECREF(fast);
    return -1;
  }
  PyObject **rows = PySequence_Fast_ITEMS(fast);
  c->off = malloc(sizeof(Py_ssize_t) * (n + 1));
  Py_ssize_t total = 0;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject *row = rows[i]; /* rows are lists almost always: read them in place */
    Py_ssize_t k = PyList_CheckExact(row) ? PyList_GET_SIZE(row) : PyObject_Length(row);
    if (k < 0) {
      Py_DECREF(fast);
      return -1;
    }
    c->off[i] = total;
    total += k;
  }
  c->off[n] = total;
  c->idx = malloc(sizeof(long) * (total ? total : 1));
  int rc = 0;
  for (Py_ssize_t i = 0; i < n && !rc; ++i) {
    PyObject *row = rows[i];
    long *out = c->idx + c->off[i];
    Py_ssize_t k = c->off[i + 1] - c->off[i];
    if (!PyList_CheckExact(row)) {
      rc = to_longs(row, k, out, what, 0, (long)targets - 1);
      continue;
    }
    if (PyList_GET_SIZE(row) != k) { /* changed under us (a size_of callback cannot, but be safe) */
      PyErr_Format(PyExc_ValueError, "%s changed while read", what);
      rc = -1;
    }
    for (Py_ssize_t j = 0; j < k && !rc; ++j) {
      long v = PyLong_AsLong(PyList_GET_ITEM(row, j));
      if (v == -1 && PyErr_Occurred()) {
        rc = -1;
      } else if (v < 0 || v >= targets) {
        PyErr_Format(PyExc_ValueError, "%s holds %ld, outside 0..%zd", what, v, targets - 1);
        rc = -1;
      }
      out[j] = v;
    }
  }
  Py_DECREF(fast);
  return rc;
}

/* ---- the state's primitives (boundary.py's _Placement) ------------------------------------- */

static inline long unit(const St *st, long node) { return st->unit_of ? st->unit_of[node] : node; }

/* the caller's size cache (a list, -1: not looked up yet; or None) into sizes */
static int read_cache(PyObject *cache, Py_ssize_t n, i64 *sizes) {
  if (cache == Py_None) {
    for (Py_ssize_t i = 0; i < n; ++i) sizes[i] = -1;
    return 0;
  }
  if (!PyList_Check(cache) || PyList_GET_SIZE(cache) != n) {
    PyErr_Format(PyExc_ValueError, "sizes must be a list of %zd ints (-1: not looked up yet)", n);
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    sizes[i] = PyLong_AsLongLong(PyList_GET_ITEM(cache, i));
    if (sizes[i] == -1 && PyErr_Occurred()) return -1;
  }
  return 0;
}

/* the sizes this call looked up back into the caller's cache */
static int write_cache(PyObject *cache, const i64 *sizes, const long *fresh, Py_ssize_t n_fresh) {
  if (cache == Py_None) return 0;
  for (Py_ssize_t i = 0; i < n_fresh; ++i) {
    PyObject *v = PyLong_FromLongLong(sizes[fresh[i]]);
    if (!v || PyList_SetItem(cache, fresh[i], v) < 0) return -1;
  }
  return 0;
}

static i64 size(St *st, long x) {
  i64 s = st->sizes[x];
  if (s >= 0) return s;
  if (st->failed) return 1; /* an exception is pending: call nothing more, the sweep unwinds */
  PyObject *r = PyObject_CallFunction(st->size_of, "l", x);
  if (!r) {
    st->failed = 1;
    return 1;
  }
  s = PyLong_AsLongLong(r);
  Py_DECREF(r);
  if (s == -1 && PyErr_Occurred()) {
    st->failed = 1;
    return 1;
  }
  st->sizes[x] = s;
  st->fresh[st->n_fresh++] = x;
  return s;
}

/* boundary.wave_books's movable */
static int book_move(St *st, long u, long old, long new_) {
  const long *group = &u;
  Py_ssize_t k = 1;
  if (st->multi[u]) group = st->members.idx + st->members.off[u], k = DEG(st->members, u);
  i64 c = k;
  if (st->compute) {
    c = 0;
    for (Py_ssize_t i = 0; i < k; ++i) c += st->compute[group[i]];
  }
  if (st->min_size > 1 && (st->wave_compute[old + 1] - c < st->min_size || (st->exempt && st->exempt[u]))) return 0;
  if (st->wave_nodes[old + 1] - k < 1) return 0;
  st->wave_nodes[old + 1] -= k, st->wave_nodes[new_ + 1] += k;
  if (st->wave_compute != st->wave_nodes) st->wave_compute[old + 1] -= c, st->wave_compute[new_ + 1] += c;
  return 1;
}

/* (min_size, compute per node or None, exempt per unit or None) into the state's books */
static int read_books(St *st, PyObject *books) {
  PyObject *compute, *exempt;
  if (!PyArg_ParseTuple(books, "lOO;books must be (min_size, compute or None, exempt or None)", &st->min_size, &compute,
                        &exempt))
    return -1;
  Py_ssize_t nn = st->n_nodes > 0 ? st->n_nodes : 1, waves = st->n_waves + 2;
  long *tmp = malloc(sizeof(long) * (nn > st->n_units ? nn : st->n_units) + 1);
  int rc = 0;
  if (compute != Py_None) {
    st->compute = malloc(nn);
    if ((rc = to_longs(compute, st->n_nodes, tmp, "compute", LONG_MIN, LONG_MAX)) == 0)
      for (Py_ssize_t i = 0; i < st->n_nodes; ++i) st->compute[i] = tmp[i] != 0;
  }
  if (!rc && exempt != Py_None) {
    st->exempt = malloc(st->n_units ? st->n_units : 1);
    if ((rc = to_longs(exempt, st->n_units, tmp, "exempt", LONG_MIN, LONG_MAX)) == 0)
      for (Py_ssize_t u = 0; u < st->n_units; ++u) st->exempt[u] = tmp[u] != 0;
  }
  free(tmp);
  if (rc) return -1;
  st->wave_nodes = calloc(waves, sizeof(i64));
  for (Py_ssize_t i = 0; i < st->n_nodes; ++i) st->wave_nodes[st->nwave[i] + 1]++;
  st->wave_compute = st->wave_nodes;
  if (st->min_size > 1 && st->compute) {
    st->wave_compute = calloc(waves, sizeof(i64));
    for (Py_ssize_t i = 0; i < st->n_nodes; ++i) st->wave_compute[st->nwave[i] + 1] += st->compute[i];
  }
  st->books = 1;
  return 0;
}

static int ask_movable(St *st, long u, long old, long new_) {
  if (st->books) return book_move(st, u, old, new_);
  if (st->movable == Py_None) return 1;
  if (st->failed) return 0;
  PyObject *r = PyObject_CallFunction(st->movable, "lll", u, old, new_);
  if (!r) {
    st->failed = 1;
    return 0;
  }
  int ok = PyObject_IsTrue(r);
  Py_DECREF(r);
  if (ok < 0) {
    st->failed = 1;
    return 0;
  }
  return ok;
}

static void unsettle(St *st, long u) { st->settled[u] = 0; }

/* _move: put `units` in wave new_; `group` (n_group nodes) the nodes they hold, or NULL. */
static void move(St *st, const long *units, Py_ssize_t n_units, const long *group, Py_ssize_t n_group, long new_) {
  for (Py_ssize_t i = 0; i < n_units; ++i) st->uwave[units[i]] = new_;
  const long *nodes = group ? group : units;
  Py_ssize_t n = group ? n_group : n_units;
  for (Py_ssize_t i = 0; i < n; ++i) {
    long m = nodes[i];
    st->nwave[m] = new_;
    FOR_EACH(st->preds, m, x) st->marks[unit(st, x)] = 1;
    FOR_EACH(st->succ, m, x) st->marks[unit(st, x)] = 1;
    unsettle(st, unit(st, m));
    FOR_EACH(st->succ, m, x) unsettle(st, unit(st, x));
    FOR_EACH(st->preds, m, p) {
      unsettle(st, unit(st, p));
      FOR_EACH(st->succ, p, x) unsettle(st, unit(st, x));
    }
  }
}

static int interior(const St *st, long u, long w0) {
  FOR_EACH(st->preds, u, p) if (st->nwave[p] != w0) return 0;
  FOR_EACH(st->succ, u, k) if (st->nwave[k] != w0) return 0;
  return 1;
}

static inline void add_gain(St *st, long w, i64 v) {
  if (!set_has(&st->gkeys, w + 1)) {
    set_add(&st->gkeys, w + 1);
    st->gain[w + 1] = 0;
  }
  st->gain[w + 1] += v;
}
static inline i64 gain_at(const St *st, long w) { return set_has(&st->gkeys, w + 1) ? st->gain[w + 1] : 0; }

static int cmp_long(const void *a, const void *b) {
  long x = *(const long *)a, y = *(const long *)b;
  return (x > y) - (x < y);
}

/* candidates in [lo, hi] minus w0, sorted, into st->cand.items (as waves, not wave + 1) */
static void sorted_candidates(St *st, long w0) {
  set_discard(&st->cand, w0 + 1);
  for (Py_ssize_t i = 0; i < st->cand.n; ++i) st->cand.items[i] -= 1;
  qsort(st->cand.items, st->cand.n, sizeof(long), cmp_long);
}

static long best_single(St *st, long u, long w0, long lo, long hi, int backward) {
  set_clear(&st->gkeys);
  FOR_EACH(st->preds, u, p) {
    long pw = st->nwave[p];
    if (DEG(st->succ, p) == 1) { /* read by u alone: a move away from pw adds read and write */
      if (lo <= pw && pw <= hi) {
        i64 pen = size(st, p);
        add_gain(st, pw, pen + pen);
      }
      continue;
    }
    set_clear(&st->zone);
    FOR_EACH(st->succ, p, x) if (x != u) set_add(&st->zone, st->nwave[x] + 1);
    set_discard(&st->zone, pw + 1);
    if (!(lo <= pw && pw <= hi)) {
      int any = 0;
      for (Py_ssize_t i = 0; i < st->zone.n && !any; ++i) any = lo <= st->zone.items[i] - 1 && st->zone.items[i] - 1 <= hi;
      if (!any) continue;
    }
    i64 pen = size(st, p);
    if (st->zone.n == 0 && pw != -1) pen += pen; /* no other reader outside: a new one adds the write */
    add_gain(st, pw, pen);
    for (Py_ssize_t i = 0; i < st->zone.n; ++i) add_gain(st, st->zone.items[i] - 1, pen);
  }
  set_clear(&st->own);
  FOR_EACH(st->succ, u, x) set_add(&st->own, st->nwave[x] + 1);
  set_clear(&st->cand);
  for (Py_ssize_t i = 0; i < st->gkeys.n; ++i) {
    long w = st->gkeys.items[i] - 1;
    if (lo <= w && w <= hi) set_add(&st->cand, w + 1);
  }
  for (Py_ssize_t i = 0; i < st->own.n; ++i) {
    long w = st->own.items[i] - 1;
    if (lo <= w && w <= hi) set_add(&st->cand, w + 1);
  }
  set_add(&st->cand, lo + 1);
  set_add(&st->cand, hi + 1);
  sorted_candidates(st, w0);
  int neg = set_has(&st->own, 0);
  i64 m = st->own.n - neg;
  i64 s_u = st->own.n ? size(st, u) : 0;
  i64 a = m - set_has(&st->own, w0 + 1);
  long best = w0;
  i64 best_cost = s_u * (a + (a > 0 || neg)) - gain_at(st, w0);
  for (Py_ssize_t i = 0; i < st->cand.n; ++i) {
    long w = st->cand.items[i];
    a = m - set_has(&st->own, w + 1);
    i64 cost = s_u * (a + (a > 0 || neg)) - gain_at(st, w);
    if (cost < best_cost || (backward && cost == best_cost && w > best)) {
      best = w;
      best_cost = cost;
    }
  }
  return best;
}

/* _outside_readers: the waves of x's readers outside the block (st->inside), into st->zone */
static void outside_readers(St *st, long x) {
  set_clear(&st->zone);
  FOR_EACH(st->succ, x, y) if (!set_has(&st->inside, y)) set_add(&st->zone, st->nwave[y] + 1);
}

static long best_group(St *st, const long *group, Py_ssize_t k, long w0, long lo, long hi, int backward) {
  set_clear(&st->inside);
  for (Py_ssize_t i = 0; i < k; ++i) set_add(&st->inside, group[i]);
  set_clear(&st->gkeys);
  set_clear(&st->seen);
  for (Py_ssize_t i = 0; i < k; ++i) {
    FOR_EACH(st->preds, group[i], p) {
      if (set_has(&st->seen, p)) continue;
      set_add(&st->seen, p);
      if (set_has(&st->inside, p)) continue;
      long pw = st->nwave[p];
      i64 pen = size(st, p);
      outside_readers(st, p);
      set_discard(&st->zone, pw + 1);
      if (st->zone.n == 0 && pw != -1) pen += pen;
      add_gain(st, pw, pen);
      for (Py_ssize_t j = 0; j < st->zone.n; ++j) add_gain(st, st->zone.items[j] - 1, pen);
    }
  }
  set_clear(&st->cand);
  for (Py_ssize_t i = 0; i < st->gkeys.n; ++i) {
    long w = st->gkeys.items[i] - 1;
    if (lo <= w && w <= hi) set_add(&st->cand, w + 1);
  }
  /* owns: (waves read outside the block, #those >= 0, read by a fallback node?, size) */
  Py_ssize_t n_owns = 0, n_outs = 0;
  for (Py_ssize_t i = 0; i < k; ++i) {
    outside_readers(st, group[i]);
    for (Py_ssize_t j = 0; j < st->zone.n; ++j) {
      long w = st->zone.items[j] - 1;
      if (lo <= w && w <= hi) set_add(&st->cand, w + 1);
    }
    if (st->zone.n) {
      int neg = set_has(&st->zone, 0);
      Py_ssize_t *o = st->owns + 4 * n_owns;
      o[0] = n_outs;
      o[1] = st->zone.n;
      o[2] = st->zone.n - neg;
      o[3] = neg;
      memcpy(st->outs + n_outs, st->zone.items, sizeof(long) * st->zone.n);
      n_outs += st->zone.n;
      st->own_size[n_owns++] = size(st, group[i]);
    }
  }
  set_add(&st->cand, lo + 1);
  set_add(&st->cand, hi + 1);
  sorted_candidates(st, w0);
  long best = w0;
  i64 best_cost = 0;
  for (Py_ssize_t c = -1; c < st->cand.n; ++c) {
    long w = c < 0 ? w0 : st->cand.items[c];
    i64 cost = -gain_at(st, w);
    for (Py_ssize_t i = 0; i < n_owns; ++i) {
      const Py_ssize_t *o = st->owns + 4 * i;
      int in = 0;
      for (Py_ssize_t j = 0; j < o[1] && !in; ++j) in = st->outs[o[0] + j] == w + 1;
      i64 a = o[2] - in;
      cost += st->own_size[i] * (a + (a > 0 || o[3]));
    }
    if (c < 0 || cost < best_cost || (backward && cost == best_cost && w > best)) {
      best = w;
      best_cost = cost;
    }
  }
  return best;
}

/* _cone: u and its exclusive producers in its wave (inward = upreds), or consumers (usucc) */
static Py_ssize_t build_cone(St *st, long u, long w0, const Csr *inward, const Csr *outward) {
  const Py_ssize_t limit = 32;
  Py_ssize_t n = 1, i = 0;
  st->cone[0] = u;
  set_clear(&st->cone_set);
  set_add(&st->cone_set, u);
  while (i < n && n < limit) {
    long m = st->cone[i++];
    FOR_EACH(*inward, m, p) {
      if (set_has(&st->cone_set, p) || st->uwave[p] != w0 || st->multi[p] || (st->unit_of && st->unit_of[p] != p))
        continue;
      int excl = 1;
      FOR_EACH(*outward, p, x) {
        if (!set_has(&st->cone_set, x) && (st->uwave[x] >= 0 || DEG(*outward, x) > 0)) {
          excl = 0;
          break;
        }
      }
      if (excl) {
        if (n == st->cone_cap) {
          st->cone_cap *= 2;
          st->cone = realloc(st->cone, sizeof(long) * st->cone_cap);
        }
        st->cone[n++] = p;
        set_add(&st->cone_set, p);
      }
    }
  }
  return n;
}

static int move_cone(St *st, long u, long w0, long lo, long hi, const Csr *inward, const Csr *outward) {
  Py_ssize_t n = build_cone(st, u, w0, inward, outward);
  if (n == 1) return 0;
  int backward = hi > w0;
  long best = best_group(st, st->cone, n, w0, lo, hi, backward);
  if (st->failed || best == w0) return 0;
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!ask_movable(st, st->cone[i], w0, best)) {
      for (Py_ssize_t d = 0; d < i && !st->failed; ++d) ask_movable(st, st->cone[d], best, w0);
      return 0;
    }
  }
  move(st, st->cone, n, st->cone, n, best);
  return 1;
}

static int visit(St *st, long u, long w0, long lo, long hi, int backward) {
  int group = st->multi[u];
  if (!group && interior(st, u, w0)) {
    st->marks[u] = 0;
    return 0;
  }
  long best;
  if (st->settled[u] && st->settled_lo[u] <= lo && hi <= st->settled_hi[u]) {
    best = w0; /* nothing it touches moved since it was found cheapest on a range holding this one */
  } else if (group) {
    best = best_group(st, st->members.idx + st->members.off[u], DEG(st->members, u), w0, lo, hi, backward);
  } else {
    best = best_single(st, u, w0, lo, hi, backward);
  }
  if (st->failed) return 0;
  if (best != w0 && ask_movable(st, u, w0, best)) {
    if (group)
      move(st, &u, 1, st->members.idx + st->members.off[u], DEG(st->members, u), best);
    else
      move(st, &u, 1, NULL, 0, best);
    st->settled[u] = 1, st->settled_lo[u] = lo, st->settled_hi[u] = hi;
    return 1;
  }
  if (st->failed) return 0;
  if (best == w0) st->settled[u] = 1, st->settled_lo[u] = lo, st->settled_hi[u] = hi;
  if (group) return 0;
  const Csr *inward, *outward;
  if (backward && hi > w0) {
    inward = &st->upreds, outward = &st->usucc, lo = w0;
  } else if (!backward && lo < w0) {
    inward = &st->usucc, outward = &st->upreds, hi = w0;
  } else {
    return 0;
  }
  FOR_EACH(*inward, u, p) { /* the cone's first step (most units have none) */
    if (st->uwave[p] != w0 || st->multi[p] || (st->unit_of && st->unit_of[p] != p)) continue;
    int excl = 1;
    FOR_EACH(*outward, p, x) {
      if (x != u && (st->uwave[x] >= 0 || DEG(*outward, x) > 0)) {
        excl = 0;
        break;
      }
    }
    if (excl) return move_cone(st, u, w0, lo, hi, inward, outward);
  }
  return 0;
}

static void boundary_marks(St *st) {
  memset(st->marks, 0, st->n_units);
  for (Py_ssize_t k = 0; k < st->n_nodes; ++k) {
    long wk = st->nwave[k];
    FOR_EACH(st->preds, k, p) {
      if (st->nwave[p] != wk) st->marks[unit(st, p)] = st->marks[unit(st, k)] = 1;
    }
  }
  for (Py_ssize_t u = 0; u < st->n_units; ++u)
    if (st->multi[u]) st->marks[u] = 1;
}

/* _summaries: A (forward) or B (backward) of every unsupported unit */
static void summaries(const St *st, const long *order, long *out, int forward) {
  Py_ssize_t n = st->n_units;
  if (forward) {
    for (Py_ssize_t i = 0; i < n; ++i) {
      long u = order[i];
      if (st->uwave[u] >= 0) continue;
      long a = -1;
      FOR_EACH(st->upreds, u, p) {
        long v = st->uwave[p] >= 0 ? st->uwave[p] : out[p];
        if (v > a) a = v;
      }
      out[u] = a;
    }
  } else {
    for (Py_ssize_t i = n - 1; i >= 0; --i) {
      long u = order[i];
      if (st->uwave[u] >= 0) continue;
      long b = st->n_waves;
      FOR_EACH(st->usucc, u, s) {
        long v = st->uwave[s] >= 0 ? st->uwave[s] : out[s];
        if (v < b) b = v;
      }
      out[u] = b;
    }
  }
}

static long sweep_backward(St *st, const long *order, long *a_of, long *b_of) {
  long moves = 0, n_waves = st->n_waves;
  summaries(st, order, a_of, 1);
  for (Py_ssize_t i = 0; i < st->n_units; ++i) b_of[i] = n_waves;
  for (Py_ssize_t i = st->n_units - 1; i >= 0 && !st->failed; --i) {
    long u = order[i], w0 = st->uwave[u];
    if (w0 < 0) {
      long b = n_waves;
      FOR_EACH(st->usucc, u, s) {
        long v = st->uwave[s];
        if (v < 0) v = b_of[s];
        if (v < b) b = v;
      }
      b_of[u] = b;
      continue;
    }
    if (!st->marks[u]) continue;
    long hi = n_waves - 1;
    FOR_EACH(st->usucc, u, s) {
      long v = st->uwave[s];
      if (v < 0) v = b_of[s] - 1;
      if (v < hi) hi = v;
    }
    long lo = 0;
    FOR_EACH(st->upreds, u, p) {
      long v = st->uwave[p];
      if (v < 0) v = a_of[p] + 1;
      if (v > lo) {
        lo = v;
        if (lo >= hi) break;
      }
    }
    if (lo < hi) moves += visit(st, u, w0, lo, hi, 1);
  }
  return moves;
}

static long sweep_forward(St *st, const long *order, long *a_of, long *b_of) {
  long moves = 0, n_waves = st->n_waves;
  summaries(st, order, b_of, 0);
  for (Py_ssize_t i = 0; i < st->n_units; ++i) a_of[i] = -1;
  for (Py_ssize_t i = 0; i < st->n_units && !st->failed; ++i) {
    long u = order[i], w0 = st->uwave[u];
    if (w0 < 0) {
      long a = -1;
      FOR_EACH(st->upreds, u, p) {
        long v = st->uwave[p];
        if (v < 0) v = a_of[p];
        if (v > a) a = v;
      }
      a_of[u] = a;
      continue;
    }
    if (!st->marks[u]) continue;
    long lo = 0;
    FOR_EACH(st->upreds, u, p) {
      long v = st->uwave[p];
      if (v < 0) v = a_of[p] + 1;
      if (v > lo) lo = v;
    }
    long hi = n_waves - 1;
    FOR_EACH(st->usucc, u, s) {
      long v = st->uwave[s];
      if (v < 0) v = b_of[s] - 1;
      if (v < hi) {
        hi = v;
        if (hi <= lo) break;
      }
    }
    if (lo < hi) moves += visit(st, u, w0, lo, hi, 0);
  }
  return moves;
}

static void st_free(St *st) {
  if (st->nwave != st->uwave) free(st->nwave);
  free(st->uwave);
  free(st->unit_of);
  Csr *all[] = {&st->usucc, &st->upreds, &st->preds, &st->succ, &st->members};
  for (int i = 0; i < 5; ++i) free(all[i]->off), free(all[i]->idx);
  if (st->wave_compute != st->wave_nodes) free(st->wave_compute);
  free(st->wave_nodes), free(st->compute), free(st->exempt);
  free(st->multi), free(st->sizes), free(st->fresh), free(st->marks), free(st->settled), free(st->settled_lo), free(st->settled_hi);
  Set *sets[] = {&st->zone, &st->own, &st->cand, &st->gkeys, &st->inside, &st->seen, &st->cone_set};
  for (int i = 0; i < 7; ++i) set_free(sets[i]);
  free(st->gain), free(st->cone), free(st->outs), free(st->owns), free(st->own_size);
}

/* members: {root unit: [nodes]} into rows per unit (empty for single-node units) */
static int members_csr(St *st, PyObject *members) {
  Py_ssize_t n = st->n_units, total = 0, pos = 0;
  PyObject *key, *value;
  Py_ssize_t *count = calloc(n + 1, sizeof(Py_ssize_t));
  st->multi = calloc(n ? n : 1, 1);
  while (PyDict_Next(members, &pos, &key, &value)) {
    long root = PyLong_AsLong(key);
    Py_ssize_t k = PyObject_Length(value);
    if ((root == -1 && PyErr_Occurred()) || k < 0) return free(count), -1;
    if (root < 0 || root >= n) {
      free(count);
      PyErr_Format(PyExc_ValueError, "members names unit %ld, not in 0..%zd", root, n - 1);
      return -1;
    }
    count[root] = k;
    st->multi[root] = 1;
    total += k;
  }
  st->members.off = malloc(sizeof(Py_ssize_t) * (n + 1));
  st->members.idx = malloc(sizeof(long) * (total ? total : 1));
  Py_ssize_t acc = 0;
  for (Py_ssize_t u = 0; u < n; ++u) st->members.off[u] = acc, acc += count[u];
  st->members.off[n] = acc;
  free(count);
  pos = 0;
  while (PyDict_Next(members, &pos, &key, &value)) {
    long root = PyLong_AsLong(key);
    if (to_longs(value, DEG(st->members, root), st->members.idx + st->members.off[root], "members", 0,
                 (long)st->n_nodes - 1) < 0)
      return -1;
  }
  return 0;
}

/* The state's graphs, waves, size cache and books from refine_waves's (and pair_cuts's) arguments
 * (usucc, upreds None: not read, as by eject_cheap). */
static int st_open(St *st, PyObject *uwave_obj, long n_waves, PyObject *usucc, PyObject *upreds, PyObject *unit_of,
                   PyObject *members, PyObject *preds, PyObject *succ, PyObject *size_of, PyObject *cache,
                   PyObject *books) {
  memset(st, 0, sizeof *st);
  st->n_units = PyList_GET_SIZE(uwave_obj);
  st->n_nodes = PyObject_Length(succ);
  st->n_waves = n_waves;
  st->size_of = size_of, st->movable = Py_None;
  Py_ssize_t nu = st->n_units ? st->n_units : 1, nn = st->n_nodes > 0 ? st->n_nodes : 1;
  st->uwave = malloc(sizeof(long) * nu);
  if (st->n_nodes < 0 || to_longs(uwave_obj, st->n_units, st->uwave, "uwave", -1, n_waves - 1) < 0) return -1;
  if (unit_of == Py_None) {
    if (st->n_nodes != st->n_units) {
      PyErr_SetString(PyExc_ValueError, "without unit_of, every node is a unit: uwave and succ differ in length");
      return -1;
    }
    st->nwave = st->uwave;
  } else {
    st->unit_of = malloc(sizeof(long) * nn);
    st->nwave = malloc(sizeof(long) * nn);
    if (to_longs(unit_of, st->n_nodes, st->unit_of, "unit_of", 0, (long)st->n_units - 1) < 0) return -1;
    for (Py_ssize_t i = 0; i < st->n_nodes; ++i) st->nwave[i] = st->uwave[st->unit_of[i]];
  }
  if ((usucc != Py_None && to_csr(usucc, st->n_units, &st->usucc, "usucc", st->n_units) < 0) ||
      (upreds != Py_None && to_csr(upreds, st->n_units, &st->upreds, "upreds", st->n_units) < 0) ||
      to_csr(preds, st->n_nodes, &st->preds, "preds", st->n_nodes) < 0 ||
      to_csr(succ, st->n_nodes, &st->succ, "succ", st->n_nodes) < 0 || members_csr(st, members) < 0)
    return -1;
  st->sizes = malloc(sizeof(i64) * nn);
  st->fresh = malloc(sizeof(long) * nn);
  return read_cache(cache, st->n_nodes, st->sizes) < 0 || (books != Py_None && read_books(st, books) < 0) ? -1 : 0;
}

static PyObject *refine_waves(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *uwave_obj, *usucc, *upreds, *unit_of, *members, *preds, *succ, *size_of, *movable, *order_obj;
  PyObject *cache = Py_None, *books = Py_None;
  long n_waves, sweeps;
  if (!PyArg_ParseTuple(args, "O!lOOOO!OOOOlO|OO:refine_waves", &PyList_Type, &uwave_obj, &n_waves, &usucc, &upreds,
                        &unit_of, &PyDict_Type, &members, &preds, &succ, &size_of, &movable, &sweeps, &order_obj,
                        &cache, &books))
    return NULL;
  St st;
  Py_ssize_t nu = PyList_GET_SIZE(uwave_obj) ? PyList_GET_SIZE(uwave_obj) : 1;
  long *order = malloc(sizeof(long) * nu), *a_of = malloc(sizeof(long) * nu), *b_of = malloc(sizeof(long) * nu);
  PyObject *result = NULL;
  if (st_open(&st, uwave_obj, n_waves, usucc, upreds, unit_of, members, preds, succ, size_of, cache, books) < 0 ||
      to_longs(order_obj, st.n_units, order, "order", 0, (long)st.n_units - 1) < 0)
    goto done;
  st.movable = movable;
  Py_ssize_t nn = st.n_nodes > 0 ? st.n_nodes : 1, waves = n_waves + 2;
  st.marks = malloc(nu), st.settled = calloc(nu, 1);
  st.settled_lo = malloc(sizeof(long) * nu), st.settled_hi = malloc(sizeof(long) * nu);
  st.gain = malloc(sizeof(i64) * waves);
  st.cone_cap = 64, st.cone = malloc(sizeof(long) * st.cone_cap);
  Py_ssize_t max_outs = 0; /* reader waves of a block: at most the readers of its nodes */
  for (Py_ssize_t i = 0; i < st.n_nodes; ++i) max_outs += DEG(st.succ, i) < waves ? DEG(st.succ, i) : waves;
  st.outs = malloc(sizeof(long) * (max_outs + 1));
  st.owns = malloc(sizeof(Py_ssize_t) * 4 * (st.n_nodes + 1));
  st.own_size = malloc(sizeof(i64) * (st.n_nodes + 1));
  if (!set_init(&st.zone, waves) || !set_init(&st.own, waves) || !set_init(&st.cand, waves) ||
      !set_init(&st.gkeys, waves) || !set_init(&st.inside, nn) || !set_init(&st.seen, nn) ||
      !set_init(&st.cone_set, nu)) {
    PyErr_NoMemory();
    goto done;
  }
  boundary_marks(&st);
  long moves = 0;
  for (long sweep = 0; sweep < sweeps && !st.failed; ++sweep)
    moves += sweep % 2 == 0 ? sweep_backward(&st, order, a_of, b_of) : sweep_forward(&st, order, a_of, b_of);
  if (st.failed || write_cache(cache, st.sizes, st.fresh, st.n_fresh) < 0) goto done;
  for (Py_ssize_t u = 0; u < st.n_units; ++u) {
    PyObject *w = PyLong_FromLong(st.uwave[u]);
    if (!w) goto done;
    PyList_SetItem(uwave_obj, u, w); /* steals w */
  }
  result = PyLong_FromLong(moves);
done:
  free(order), free(a_of), free(b_of);
  st_free(&st);
  return result;
}

/* ---- waves and totals ----------------------------------------------------------------------- */

static PyObject *list_of(const long *v, Py_ssize_t n) {
  PyObject *out = PyList_New(n);
  if (!out) return NULL;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject *x = PyLong_FromLong(v[i]);
    if (!x) return Py_DECREF(out), NULL;
    PyList_SET_ITEM(out, i, x);
  }
  return out;
}

static PyObject *waves(PyObject *self, PyObject *args) {
  (void)self;
  Py_ssize_t n;
  PyObject *succ_obj, *indeg_obj, *sup_obj;
  if (!PyArg_ParseTuple(args, "nOOO:waves", &n, &succ_obj, &indeg_obj, &sup_obj)) return NULL;
  Py_ssize_t nn = n > 0 ? n : 1;
  Csr succ = {0};
  long *indeg = malloc(sizeof(long) * nn), *sup = malloc(sizeof(long) * nn), *assign = malloc(sizeof(long) * nn);
  long *border = malloc(sizeof(long) * nn), *ready = malloc(sizeof(long) * nn), *deferred = malloc(sizeof(long) * nn);
  long *order = malloc(sizeof(long) * nn);
  PyObject *result = NULL;
  if (to_csr(succ_obj, n, &succ, "succ", n) < 0 || to_longs(indeg_obj, n, indeg, "indeg", LONG_MIN, LONG_MAX) < 0 ||
      to_longs(sup_obj, n, sup, "sup", LONG_MIN, LONG_MAX) < 0)
    goto done;
  Py_ssize_t n_ready = 0, n_deferred = 0, n_order = 0;
  for (Py_ssize_t u = n - 1; u >= 0; --u)
    if (!indeg[u]) ready[n_ready++] = u;
  for (Py_ssize_t u = 0; u < n; ++u) assign[u] = border[u] = -1;
  long wave = 0, group = 0;
  for (;;) {
    while (n_ready) {
      long u = ready[--n_ready];
      if (sup[u]) {
        order[n_order++] = u;
        assign[u] = wave;
        group++;
        FOR_EACH(succ, u, s) {
          border[s] = wave;
          if (!--indeg[s]) ready[n_ready++] = s;
        }
      } else if (border[u] == wave) {
        deferred[n_deferred++] = u;
      } else {
        order[n_order++] = u;
        FOR_EACH(succ, u, s) if (!--indeg[s]) ready[n_ready++] = s;
      }
    }
    if (!n_deferred) break;
    if (group) wave++, group = 0;
    for (Py_ssize_t i = n_deferred - 1; i >= 0; --i) ready[n_ready++] = deferred[i];
    n_deferred = 0;
  }
  PyObject *a = list_of(assign, n), *o = list_of(order, n_order);
  if (a && o) result = Py_BuildValue("(NlN)", a, wave + (group ? 1 : 0), o);
  else Py_XDECREF(a), Py_XDECREF(o);
done:
  free(succ.off), free(succ.idx);
  free(indeg), free(sup), free(assign), free(border), free(ready), free(deferred), free(order);
  return result;
}

static PyObject *boundary_total(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *uwave_obj, *unit_of_obj, *succ_obj, *size_of, *cache = Py_None;
  if (!PyArg_ParseTuple(args, "OOOO|O:boundary_total", &uwave_obj, &unit_of_obj, &succ_obj, &size_of, &cache))
    return NULL;
  Py_ssize_t n_units = PyObject_Length(uwave_obj), n = PyObject_Length(succ_obj);
  if (n_units < 0 || n < 0) return NULL;
  Py_ssize_t nn = n > 0 ? n : 1;
  long *uwave = malloc(sizeof(long) * (n_units ? n_units : 1)), *nwave = malloc(sizeof(long) * nn);
  long *unit_of = NULL, *fresh = malloc(sizeof(long) * nn);
  i64 *sizes = malloc(sizeof(i64) * nn);
  Py_ssize_t n_fresh = 0;
  Csr succ = {0};
  Set seen = {0};
  int ok = 0;
  PyObject *result = NULL;
  if (to_longs(uwave_obj, n_units, uwave, "uwave", -1, LONG_MAX - 2) < 0 || to_csr(succ_obj, n, &succ, "succ", n) < 0 ||
      read_cache(cache, n, sizes) < 0)
    goto done;
  if (unit_of_obj == Py_None) {
    if (n_units != n) {
      PyErr_SetString(PyExc_ValueError, "without unit_of, every node is a unit: uwave and succ differ in length");
      goto done;
    }
    memcpy(nwave, uwave, sizeof(long) * n);
  } else {
    unit_of = malloc(sizeof(long) * nn);
    if (to_longs(unit_of_obj, n, unit_of, "unit_of", 0, (long)n_units - 1) < 0) goto done;
    for (Py_ssize_t i = 0; i < n; ++i) nwave[i] = uwave[unit_of[i]];
  }
  long max_wave = -1;
  for (Py_ssize_t i = 0; i < n; ++i)
    if (nwave[i] > max_wave) max_wave = nwave[i];
  if (!(ok = set_init(&seen, max_wave + 2))) {
    PyErr_NoMemory();
    goto done;
  }
  i64 total = 0;
  for (Py_ssize_t x = 0; x < n; ++x) {
    long px = nwave[x];
    int crosses = 0;
    FOR_EACH(succ, x, k) if (nwave[k] != px) { crosses = 1; break; }
    if (!crosses) continue;
    i64 size = sizes[x];
    if (size < 0) {
      PyObject *r = PyObject_CallFunction(size_of, "n", x);
      if (!r) goto done;
      size = PyLong_AsLongLong(r);
      Py_DECREF(r);
      if (size == -1 && PyErr_Occurred()) goto done;
      sizes[x] = size, fresh[n_fresh++] = x;
    }
    set_clear(&seen); /* the other partitions reading x (wave + 1; 0: outside every partition) */
    FOR_EACH(succ, x, k) if (nwave[k] != px) set_add(&seen, nwave[k] + 1);
    i64 reads = seen.n - set_has(&seen, 0);
    total += size * (reads + (px != -1));
  }
  if (write_cache(cache, sizes, fresh, n_fresh) == 0) result = PyLong_FromLongLong(total);
done:
  free(uwave), free(nwave), free(unit_of), free(fresh), free(sizes), free(succ.off), free(succ.idx);
  if (ok) set_free(&seen);
  return result;
}

/* ---- index and assembly ---------------------------------------------------------------------- */

/* core._edges: per-node distinct inputs (order of first use) from their counts and positions
 * end to end, readers in order, and the first node read at or before its own position */
static PyObject *edges(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *lens_obj, *flat_obj;
  if (!PyArg_ParseTuple(args, "OO:edges", &lens_obj, &flat_obj)) return NULL;
  Py_ssize_t n = PyObject_Length(lens_obj), total = PyObject_Length(flat_obj);
  if (n < 0 || total < 0) return NULL;
  long *lens = malloc(sizeof(long) * (n ? n : 1)), *flat = malloc(sizeof(long) * (total ? total : 1));
  Py_ssize_t *deg = calloc(n + 1, sizeof(Py_ssize_t)), *kept = malloc(sizeof(Py_ssize_t) * (n + 1));
  long *first = malloc(sizeof(long) * (n ? n : 1));
  Set seen = {0};
  PyObject *preds = NULL, *succ = NULL, *result = NULL;
  if (to_longs(lens_obj, n, lens, "lens", 0, LONG_MAX) < 0 || to_longs(flat_obj, total, flat, "flat", 0, (long)n - 1) < 0)
    goto done;
  Py_ssize_t sum = 0;
  for (Py_ssize_t i = 0; i < n; ++i) sum += lens[i];
  if (sum != total) {
    PyErr_Format(PyExc_ValueError, "lens add up to %zd, flat has %zd positions", sum, total);
    goto done;
  }
  if (!set_init(&seen, n ? n : 1) || !(preds = PyList_New(n))) goto done;
  for (Py_ssize_t i = 0, at = 0; i < n; at += lens[i], ++i) {
    long *row = flat + at;
    Py_ssize_t k = lens[i], m = k;
    if (k >= 2) { /* keep the first use of each input */
      set_clear(&seen);
      m = 0;
      for (Py_ssize_t j = 0; j < k; ++j)
        if (!set_has(&seen, row[j])) set_add(&seen, row[j]), row[m++] = row[j];
    }
    kept[i] = m;
    PyObject *pl = list_of(row, m);
    if (!pl) goto done;
    PyList_SET_ITEM(preds, i, pl);
    for (Py_ssize_t j = 0; j < m; ++j) deg[row[j]]++;
  }
  if (!(succ = PyList_New(n))) goto done;
  for (Py_ssize_t p = 0; p < n; ++p) {
    PyObject *row = PyList_New(deg[p]);
    if (!row) goto done;
    PyList_SET_ITEM(succ, p, row);
    deg[p] = 0; /* now: entries written */
    first[p] = n;
  }
  for (Py_ssize_t i = 0, at = 0; i < n; at += lens[i], ++i) {
    for (Py_ssize_t j = 0; j < kept[i]; ++j) {
      long p = flat[at + j];
      PyObject *x = PyLong_FromSsize_t(i);
      if (!x) goto done;
      if (!deg[p]) first[p] = i;
      PyList_SET_ITEM(PyList_GET_ITEM(succ, p), deg[p]++, x);
    }
  }
  long bad = -1;
  for (Py_ssize_t p = 0; p < n && bad < 0; ++p) /* readers are in order: the first must come after */
    if (first[p] <= p) bad = p;
  result = Py_BuildValue("(OOl)", preds, succ, bad);
done:
  Py_XDECREF(preds), Py_XDECREF(succ);
  free(lens), free(flat), free(deg), free(kept), free(first);
  set_free(&seen);
  return result;
}

/* core._buckets: the nodes of each wave, in order */
static PyObject *buckets(PyObject *self, PyObject *node_wave) {
  (void)self;
  Py_ssize_t n = PyObject_Length(node_wave);
  if (n < 0) return NULL;
  long *w = malloc(sizeof(long) * (n ? n : 1));
  PyObject *out = NULL;
  if (to_longs(node_wave, n, w, "node_wave", LONG_MIN, LONG_MAX - 1) < 0) goto done;
  long top = -1;
  for (Py_ssize_t i = 0; i < n; ++i)
    if (w[i] > top) top = w[i];
  Py_ssize_t *count = calloc(top + 2, sizeof(Py_ssize_t));
  if (!count) {
    PyErr_NoMemory();
    goto done;
  }
  for (Py_ssize_t i = 0; i < n; ++i)
    if (w[i] >= 0) count[w[i]]++;
  if (!(out = PyList_New(top + 1))) goto counted;
  for (long b = 0; b <= top; ++b) {
    PyObject *row = PyList_New(count[b]);
    if (!row) {
      Py_CLEAR(out);
      goto counted;
    }
    PyList_SET_ITEM(out, b, row);
    count[b] = 0;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (w[i] < 0) continue;
    PyObject *x = PyLong_FromSsize_t(i);
    if (!x) {
      Py_CLEAR(out);
      break;
    }
    PyList_SET_ITEM(PyList_GET_ITEM(out, w[i]), count[w[i]]++, x);
  }
counted:
  free(count);
done:
  free(w);
  return out;
}

/* core._crossings: the partition of each node, the inputs of each partition (order of first
 * use) and the output flags */
static PyObject *crossings(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *parts_obj, *preds_obj;
  Py_ssize_t n;
  if (!PyArg_ParseTuple(args, "OOn:crossings", &parts_obj, &preds_obj, &n)) return NULL;
  Py_ssize_t n_parts = PyObject_Length(parts_obj);
  if (n_parts < 0 || n < 0) return NULL;
  Py_ssize_t nn = n ? n : 1;
  long *part = malloc(sizeof(long) * nn), *pairs = NULL, *mark = calloc(nn, sizeof(long));
  char *is_out = calloc(nn, 1);
  Py_ssize_t *count = calloc(n_parts + 1, sizeof(Py_ssize_t)), n_pairs = 0;
  Csr members = {0}, in = {0};
  PyObject *part_list = NULL, *inputs = NULL, *outs = NULL, *result = NULL;
  if (to_csr(parts_obj, n_parts, &members, "parts", n) < 0 || to_csr(preds_obj, n, &in, "preds", n) < 0) goto done;
  for (Py_ssize_t i = 0; i < n; ++i) part[i] = -1;
  for (Py_ssize_t p = 0; p < n_parts; ++p) FOR_EACH(members, p, i) part[i] = p;
  pairs = malloc(sizeof(long) * 2 * (in.off[n] + 1)); /* (reading partition, input) per crossing edge */
  for (Py_ssize_t i = 0; i < n; ++i) {
    long pi = part[i];
    FOR_EACH(in, i, j) {
      long pj = part[j];
      if (pj == pi) continue;
      if (pi >= 0) pairs[2 * n_pairs] = pi, pairs[2 * n_pairs + 1] = j, n_pairs++, count[pi]++;
      if (pj >= 0) is_out[j] = 1;
    }
  }
  if (!(inputs = PyList_New(n_parts))) goto done;
  Py_ssize_t *at = calloc(n_parts + 1, sizeof(Py_ssize_t)); /* bucket the pairs by partition, keeping order */
  long *by_part = malloc(sizeof(long) * (n_pairs + 1));
  for (Py_ssize_t p = 0, acc = 0; p < n_parts; ++p) at[p] = acc, acc += count[p];
  for (Py_ssize_t k = 0; k < n_pairs; ++k) by_part[at[pairs[2 * k]]++] = pairs[2 * k + 1];
  for (Py_ssize_t p = 0, start = 0; p < n_parts; start += count[p], ++p) {
    Py_ssize_t kept = 0; /* the first use of each input: mark[j] = p + 1 once added to p */
    for (Py_ssize_t k = start; k < start + count[p]; ++k)
      if (mark[by_part[k]] != p + 1) mark[by_part[k]] = p + 1, by_part[start + kept++] = by_part[k];
    PyObject *row = list_of(by_part + start, kept);
    if (!row) break;
    PyList_SET_ITEM(inputs, p, row);
  }
  free(at), free(by_part);
  if (PyErr_Occurred()) goto done;
  if (!(outs = PyList_New(n)) || !(part_list = list_of(part, n))) goto done;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject *b = is_out[i] ? Py_True : Py_False;
    Py_INCREF(b);
    PyList_SET_ITEM(outs, i, b);
  }
  result = PyTuple_Pack(3, part_list, inputs, outs);
done:
  Py_XDECREF(part_list), Py_XDECREF(inputs), Py_XDECREF(outs);
  free(part), free(pairs), free(mark), free(is_out), free(count);
  free(members.off), free(members.idx), free(in.off), free(in.idx);
  return result;
}


/* ---- cuts.py's min_cut: Dinic's maximum flow, then the source side of the residual graph ---- */

#define CAP_INF ((i64)1 << 62) /* an infinite capacity (float('inf') in Python); never decreased */

typedef struct {
  Py_ssize_t n, m;  /* nodes, arcs (twice the input arcs: each with its reverse at e ^ 1) */
  long *head;
  i64 *cap;
  Py_ssize_t *first; /* the arcs of node v: order[first[v]] .. order[first[v + 1] - 1] */
  Py_ssize_t *order, *it;
  long *level, *queue;
  Py_ssize_t *path;
} Flow;

static void flow_free(Flow *f) {
  free(f->head), free(f->cap), free(f->first), free(f->order), free(f->it), free(f->level), free(f->queue),
      free(f->path);
}

/* Breadth-first levels from the source over arcs with residual capacity; returns the sink's level. */
static long flow_levels(Flow *f, long source, long sink) {
  for (Py_ssize_t v = 0; v < f->n; ++v) f->level[v] = -1;
  Py_ssize_t qh = 0, qt = 0;
  f->level[source] = 0;
  f->queue[qt++] = source;
  while (qh < qt) {
    long v = f->queue[qh++];
    for (Py_ssize_t k = f->first[v]; k < f->first[v + 1]; ++k) {
      Py_ssize_t e = f->order[k];
      long w = f->head[e];
      if (f->cap[e] > 0 && f->level[w] < 0) f->level[w] = f->level[v] + 1, f->queue[qt++] = w;
    }
  }
  return f->level[sink];
}

/* One blocking-flow path (iterative DFS), pushed; 0 if none is left in this phase. */
static int flow_augment(Flow *f, long source, long sink) {
  Py_ssize_t depth = 0;
  long v = source;
  for (;;) {
    if (v == sink) {
      i64 push = CAP_INF;
      for (Py_ssize_t d = 0; d < depth; ++d)
        if (f->cap[f->path[d]] < push) push = f->cap[f->path[d]];
      for (Py_ssize_t d = 0; d < depth; ++d) {
        Py_ssize_t e = f->path[d];
        if (f->cap[e] < CAP_INF) f->cap[e] -= push;
        if (f->cap[e ^ 1] < CAP_INF) f->cap[e ^ 1] += push;
      }
      return push < CAP_INF ? 1 : -1; /* -1: an infinite path, no finite cut */
    }
    Py_ssize_t e = -1;
    for (; f->it[v] < f->first[v + 1]; ++f->it[v]) {
      Py_ssize_t c = f->order[f->it[v]];
      if (f->cap[c] > 0 && f->level[f->head[c]] == f->level[v] + 1) {
        e = c;
        break;
      }
    }
    if (e < 0) {
      if (!depth) return 0;
      f->level[v] = -1; /* dead end: never again in this phase */
      e = f->path[--depth];
      v = f->head[e ^ 1];
      ++f->it[v];
      continue;
    }
    f->path[depth++] = e;
    v = f->head[e];
  }
}

static int arc_capacity(PyObject *c, i64 *out) {
  if (PyFloat_Check(c)) {
    double d = PyFloat_AS_DOUBLE(c);
    if (d != d || d < 0) return PyErr_SetString(PyExc_ValueError, "min_cut: a capacity is negative or NaN"), -1;
    *out = d >= (double)CAP_INF ? CAP_INF : (i64)d;
    if ((double)*out != d && *out < CAP_INF)
      return PyErr_SetString(PyExc_ValueError, "min_cut: a finite capacity must be an integer"), -1;
    return 0;
  }
  *out = PyLong_AsLongLong(c);
  if (*out == -1 && PyErr_Occurred()) return -1;
  if (*out < 0) return PyErr_SetString(PyExc_ValueError, "min_cut: a capacity is negative"), -1;
  if (*out > CAP_INF) *out = CAP_INF;
  return 0;
}

/* The residual graph of arcs (tails[k], heads[k], caps[k]), bucketed by tail in input order. */
static int flow_build(Flow *f, Py_ssize_t n, const long *tails, const long *heads, const i64 *caps, Py_ssize_t na) {
  Py_ssize_t m = 2 * na;
  f->n = n, f->m = m;
  f->head = malloc(sizeof(long) * (m + 1)), f->cap = malloc(sizeof(i64) * (m + 1));
  f->first = calloc(n + 2, sizeof(Py_ssize_t)), f->order = malloc(sizeof(Py_ssize_t) * (m + 1));
  f->it = malloc(sizeof(Py_ssize_t) * (n + 1)), f->level = malloc(sizeof(long) * (n + 1));
  f->queue = malloc(sizeof(long) * (n + 1)), f->path = malloc(sizeof(Py_ssize_t) * (n + 1));
  if (!f->head || !f->cap || !f->first || !f->order || !f->it || !f->level || !f->queue || !f->path) {
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t k = 0; k < na; ++k) {
    f->head[2 * k] = heads[k], f->head[2 * k + 1] = tails[k];
    f->cap[2 * k] = caps[k], f->cap[2 * k + 1] = 0;
    f->first[tails[k] + 1]++, f->first[heads[k] + 1]++;
  }
  for (Py_ssize_t v = 0; v < n; ++v) f->first[v + 1] += f->first[v];
  for (Py_ssize_t v = 0; v < n; ++v) f->it[v] = f->first[v];
  for (Py_ssize_t e = 0; e < m; ++e) f->order[f->it[f->head[e ^ 1]]++] = e;
  return 0;
}

/* Maximum flow (Dinic); afterwards level[v] >= 0 marks the smallest source side of a minimum cut.
 * Returns 1 (and stops) if it would take more than max_phases phases (< 0: no limit), else 0. */
static int flow_solve(Flow *f, long source, long sink, long max_phases) {
  long phases = 0;
  for (int infinite = 0; !infinite && flow_levels(f, source, sink) >= 0;) {
    if (max_phases >= 0 && ++phases > max_phases) return 1;
    for (Py_ssize_t v = 0; v < f->n; ++v) f->it[v] = f->first[v];
    for (int r; (r = flow_augment(f, source, sink)) != 0;)
      if (r < 0) { /* an infinite source-sink path: no finite cut; stop (the sink stays reachable) */
        infinite = 1;
        break;
      }
  }
  flow_levels(f, source, sink);
  return 0;
}

/* Read the (tail, head, capacity) arcs of Python's min_cut. */
static int flow_read(Flow *f, PyObject *arcs_obj, Py_ssize_t n) {
  PyObject *seq = PySequence_Fast(arcs_obj, "min_cut: arcs must be a sequence of (tail, head, capacity)");
  if (!seq) return -1;
  Py_ssize_t na = PySequence_Fast_GET_SIZE(seq);
  long *tails = malloc(sizeof(long) * (na + 1)), *heads = malloc(sizeof(long) * (na + 1));
  i64 *caps = malloc(sizeof(i64) * (na + 1));
  int rc = -1;
  for (Py_ssize_t k = 0; k < na; ++k) {
    PyObject *t = PySequence_Fast_GET_ITEM(seq, k);
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 3) {
      PyErr_SetString(PyExc_TypeError, "min_cut: each arc must be a (tail, head, capacity) tuple");
      goto done;
    }
    long a = PyLong_AsLong(PyTuple_GET_ITEM(t, 0)), b = PyLong_AsLong(PyTuple_GET_ITEM(t, 1));
    if (PyErr_Occurred()) goto done;
    if (a < 0 || a >= n || b < 0 || b >= n) {
      PyErr_Format(PyExc_IndexError, "min_cut: arc %zd (%ld, %ld) names a node outside 0..%zd", k, a, b, n - 1);
      goto done;
    }
    if (arc_capacity(PyTuple_GET_ITEM(t, 2), &caps[k]) < 0) goto done;
    tails[k] = a, heads[k] = b;
  }
  rc = flow_build(f, n, tails, heads, caps, na);
done:
  free(tails), free(heads), free(caps);
  Py_DECREF(seq);
  return rc;
}

static PyObject *min_cut(PyObject *self, PyObject *args) {
  (void)self;
  Py_ssize_t n;
  long source = 0, sink = 1, max_phases = -1;
  PyObject *arcs_obj, *result = NULL;
  if (!PyArg_ParseTuple(args, "nO|lll:min_cut", &n, &arcs_obj, &source, &sink, &max_phases)) return NULL;
  if (n < 2 || source < 0 || source >= n || sink < 0 || sink >= n || source == sink)
    return PyErr_Format(PyExc_ValueError, "min_cut: need n >= 2 and distinct source and sink in 0..n-1 "
                        "(got n=%zd, source=%ld, sink=%ld)", n, source, sink);
  Flow f = {0};
  if (flow_read(&f, arcs_obj, n) < 0) goto done;
  if (flow_solve(&f, source, sink, max_phases)) {
    result = Py_NewRef(Py_None);
    goto done;
  }
  if (!(result = PyList_New(n))) goto done;
  for (Py_ssize_t v = 0; v < n; ++v) {
    PyObject *b = f.level[v] >= 0 ? Py_True : Py_False;
    Py_INCREF(b);
    PyList_SET_ITEM(result, v, b);
  }
done:
  flow_free(&f);
  return result;
}

/* ---- cuts.py's pair_cuts: minimum cuts between adjacent waves ------------------------------------
 * Mirrors cuts.py's _State.run_pass, _forced, _chain, _values, _value_terms, _apply, _short_pairs and
 * pair_cuts's loop over the dirty pairs. The network is the same (node numbers of the extra nodes
 * may differ); its smallest minimum-cut source side is unique, so both give the same waves. */

typedef struct {
  St *st;
  long *free_k;  /* per unit: the low wave k of its pair in this pass, or -1 */
  long *node;    /* per unit: its network node (0: the source, 1: the sink, else >= 2) */
  signed char *forced; /* per unit: -1, or pinned at 0 (wave k) / 1 (wave k + 1) */
  long *stack, *buf, *old, *changed;
  Py_ssize_t n_changed;
  long *tails, *heads;
  i64 *caps;
  Py_ssize_t na, arc_cap;
  long n; /* network nodes */
  Set seen, vals, cons, fixed, pairs; /* units, nodes, units, waves + 1, low waves */
  i64 *wave_nodes, *wave_comp;
  char *kept;
} Cut;

static void cut_arc(Cut *c, long a, long b, i64 cap) {
  if (a == b || a == 1 || b == 0 || c->st->failed) return; /* self-loops, out of the sink, into the source */
  if (c->na == c->arc_cap) {
    Py_ssize_t nc = c->arc_cap * 2 + 64;
    long *t = realloc(c->tails, sizeof(long) * nc), *h = t ? realloc(c->heads, sizeof(long) * nc) : NULL;
    if (t) c->tails = t;
    if (h) c->heads = h;
    i64 *k = h ? realloc(c->caps, sizeof(i64) * nc) : NULL;
    if (!k) {
      c->st->failed = 1;
      PyErr_NoMemory();
      return;
    }
    c->caps = k, c->arc_cap = nc;
  }
  c->tails[c->na] = a, c->heads[c->na] = b, c->caps[c->na++] = cap;
}

/* _Network.some_at: `size` if some of units[0..k) sits in the upper wave (upper) or the lower one */
static void some_at(Cut *c, const long *units, Py_ssize_t k, int upper, i64 size) {
  if (k == 1) {
    if (upper) cut_arc(c, 0, c->node[units[0]], size);
    else cut_arc(c, c->node[units[0]], 1, size);
    return;
  }
  long a = c->n++;
  if (upper) cut_arc(c, 0, a, size);
  else cut_arc(c, a, 1, size);
  for (Py_ssize_t i = 0; i < k; ++i) {
    if (upper) cut_arc(c, a, c->node[units[i]], CAP_INF);
    else cut_arc(c, c->node[units[i]], a, CAP_INF);
  }
}

static int cmp_pair(const void *a, const void *b) {
  const long *x = a, *y = b;
  return x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : (x[1] > y[1]) - (x[1] < y[1]);
}

#define FIXED(w) set_has(&c->fixed, (w) + 1)
/* _value_terms: the terms of the value of unit pu read by the distinct units cons[0..m) (pu excluded) */
static void value_terms(Cut *c, long pu, const long *cons, Py_ssize_t m, i64 size) {
  long kp = c->free_k[pu], pw = c->st->uwave[pu], *buf = c->buf, *grp = c->buf + 2 * m;
  Py_ssize_t nf = 0, n_groups = 0, at_kp = -1;
  set_clear(&c->fixed);
  for (Py_ssize_t i = 0; i < m; ++i) {
    long k = c->free_k[cons[i]];
    if (k < 0) set_add(&c->fixed, c->st->uwave[cons[i]] + 1);
    else buf[2 * nf] = k, buf[2 * nf + 1] = cons[i], nf++;
  }
  qsort(buf, nf, 2 * sizeof(long), cmp_pair);
  for (Py_ssize_t i = 0; i < nf; ++i) grp[i] = buf[2 * i + 1]; /* consumers by pair, groups contiguous */
  for (Py_ssize_t i = 0, j; i < nf; i = j) { /* reads of the pairs that hold free consumers */
    long k = buf[2 * i];
    for (j = i; j < nf && buf[2 * j] == k; ++j) {}
    n_groups++;
    if (k == kp) {
      at_kp = i;
      if (!FIXED(k + 1)) some_at(c, grp + i, j - i, 1, size), cut_arc(c, c->node[pu], 1, size);
      continue;
    }
    if (pw != k && !FIXED(k)) some_at(c, grp + i, j - i, 0, size);
    if (pw != k + 1 && !FIXED(k + 1)) some_at(c, grp + i, j - i, 1, size);
  }
  if (kp >= 0 && FIXED(kp + 1)) cut_arc(c, c->node[pu], 1, size); /* the read of a fixed consumer at kp + 1 */
  if (pw < 0 || FIXED(-1)) return; /* the write: none, or paid whatever */
  if (kp >= 0) {
    if (n_groups > (at_kp >= 0) || (Py_ssize_t)c->fixed.n - FIXED(kp + 1) > 0) return;
    if (FIXED(kp + 1)) cut_arc(c, c->node[pu], 1, size);
    else if (n_groups) some_at(c, grp + at_kp, nf - at_kp, 1, size), cut_arc(c, c->node[pu], 1, size);
    return;
  }
  if ((Py_ssize_t)c->fixed.n - FIXED(pw) > 0 || n_groups != 1) return;
  if (pw == buf[0]) some_at(c, grp, nf, 1, size);
  else if (pw == buf[0] + 1) some_at(c, grp, nf, 0, size);
}
#undef FIXED

/* _chain: whether a supported unit in wave k is reached from `start` through unsupported units only */
static int chain(Cut *c, long start, long k, const Csr *edges) {
  const long *uwave = c->st->uwave;
  Py_ssize_t top = 0;
  set_clear(&c->seen);
  set_add(&c->seen, start);
  c->stack[top++] = start;
  while (top) {
    long x = c->stack[--top];
    FOR_EACH(*edges, x, y) {
      if (uwave[y] == k) return 1;
      if (uwave[y] < 0 && !set_has(&c->seen, y)) set_add(&c->seen, y), c->stack[top++] = y;
    }
  }
  return 0;
}

/* _forced: pin the free units that cannot move, node[u] = 0 (wave k) or 1 (wave k + 1) */
static void pin(Cut *c) {
  St *st = c->st;
  const char *pinned = st->exempt && st->min_size > 1 ? st->exempt : NULL;
  Py_ssize_t top = 0;
  long *stack = c->buf; /* not c->stack: chain() uses that */
  for (Py_ssize_t u = 0; u < st->n_units; ++u) {
    long k = c->free_k[u];
    if (k < 0) continue;
    int up = st->uwave[u] > k, to = -1;
    if (pinned && pinned[u]) to = up;
    else if (up) {
      FOR_EACH(st->upreds, u, p) if (st->uwave[p] < 0 && chain(c, p, k, &st->upreds)) { to = 1; break; }
    } else {
      FOR_EACH(st->usucc, u, s) if (st->uwave[s] < 0 && chain(c, s, k + 1, &st->usucc)) { to = 0; break; }
    }
    if (to >= 0) c->forced[u] = to, stack[top++] = u;
  }
  while (top) { /* precedence within a pair: down pins producers, up pins consumers */
    long u = stack[--top], k = c->free_k[u], to = c->forced[u];
    const Csr *e = to ? &st->usucc : &st->upreds;
    FOR_EACH(*e, u, v) if (c->free_k[v] == k && c->forced[v] < 0) c->forced[v] = to, stack[top++] = v;
  }
  for (Py_ssize_t u = 0; u < st->n_units; ++u)
    if (c->free_k[u] >= 0 && c->forced[u] >= 0) c->node[u] = c->forced[u];
}

/* _values: the nodes whose value's cost depends on units[0..k): their members and the members' inputs */
static void values_of(Cut *c, const long *units, Py_ssize_t k) {
  St *st = c->st;
  set_clear(&c->vals);
  for (Py_ssize_t i = 0; i < k; ++i) {
    long u = units[i];
    const long *g = &u;
    Py_ssize_t gn = 1;
    if (st->multi[u]) g = st->members.idx + st->members.off[u], gn = DEG(st->members, u);
    for (Py_ssize_t j = 0; j < gn; ++j) {
      if (!set_has(&c->vals, g[j])) set_add(&c->vals, g[j]);
      FOR_EACH(st->preds, g[j], p) if (!set_has(&c->vals, p)) set_add(&c->vals, p);
    }
  }
}

static void set_wave(Cut *c, long u, long w) {
  St *st = c->st;
  st->uwave[u] = w;
  if (st->nwave == st->uwave) return;
  if (!st->multi[u]) st->nwave[u] = w;
  else FOR_EACH(st->members, u, m) st->nwave[m] = w;
}

/* _cost: boundary_cost over the values in c->vals */
static i64 vals_cost(Cut *c) {
  St *st = c->st;
  i64 total = 0;
  for (Py_ssize_t i = 0; i < c->vals.n; ++i) {
    long x = c->vals.items[i], px = st->nwave[x];
    if (!DEG(st->succ, x)) continue;
    i64 sz = size(st, x);
    set_clear(&c->fixed);
    FOR_EACH(st->succ, x, k) if (st->nwave[k] != px && !set_has(&c->fixed, st->nwave[k] + 1))
        set_add(&c->fixed, st->nwave[k] + 1);
    if (c->fixed.n) total += sz * ((i64)c->fixed.n - set_has(&c->fixed, 0) + (px != -1));
  }
  return total;
}

/* _short_pairs + the revert: drop the pairs (in c->pairs) whose waves would hold no node, or fewer than
 * min_size compute nodes, putting their changed units back */
static void drop_short_pairs(Cut *c) {
  St *st = c->st;
  for (Py_ssize_t i = 0; i < c->pairs.n; ++i)
    for (long w = c->pairs.items[i]; w <= c->pairs.items[i] + 1; ++w) c->wave_nodes[w] = c->wave_comp[w] = 0, c->kept[w] = 0;
  for (Py_ssize_t u = 0; u < st->n_units; ++u) {
    long k = c->free_k[u];
    if (k < 0 || !set_has(&c->pairs, k)) continue;
    long w = st->uwave[u];
    const long *g = &u;
    Py_ssize_t gn = 1;
    if (st->multi[u]) g = st->members.idx + st->members.off[u], gn = DEG(st->members, u);
    c->wave_nodes[w] += gn;
    for (Py_ssize_t j = 0; j < gn; ++j) c->wave_comp[w] += st->compute ? st->compute[g[j]] : 1;
    if (st->exempt && st->exempt[u]) c->kept[w] = 1;
  }
  for (Py_ssize_t i = 0; i < c->pairs.n; ++i) {
    long k = c->pairs.items[i];
    int bad = 0;
    for (long w = k; w <= k + 1; ++w)
      if (!c->wave_nodes[w] || (st->min_size > 1 && c->wave_comp[w] < st->min_size && !c->kept[w])) bad = 1;
    if (!bad) continue;
    set_discard(&c->pairs, k);
    --i;
    for (Py_ssize_t j = 0; j < c->n_changed; ++j)
      if (c->free_k[c->changed[j]] == k) set_wave(c, c->changed[j], c->old[j]);
  }
}

/* _apply: take the moves if they keep the wave books and lower the exact total; else undo. Returns the
 * moves; c->pairs: the pairs that changed (empty if undone). */
static long apply_moves(Cut *c, const long *to) {
  St *st = c->st;
  values_of(c, c->changed, c->n_changed);
  i64 before = vals_cost(c);
  set_clear(&c->pairs);
  for (Py_ssize_t j = 0; j < c->n_changed; ++j) {
    long u = c->changed[j];
    c->old[j] = st->uwave[u];
    set_wave(c, u, to[j]);
    if (!set_has(&c->pairs, c->free_k[u])) set_add(&c->pairs, c->free_k[u]);
  }
  drop_short_pairs(c);
  if (!c->pairs.n || vals_cost(c) >= before) {
    for (Py_ssize_t j = 0; j < c->n_changed; ++j) set_wave(c, c->changed[j], c->old[j]);
    set_clear(&c->pairs);
    return 0;
  }
  long moves = 0;
  for (Py_ssize_t j = 0; j < c->n_changed; ++j) moves += st->uwave[c->changed[j]] != c->old[j];
  return moves;
}

/* run_pass: solve the pairs (k, k + 1), k with dirty[k] and k % 2 == parity, in one network */
static long run_pass(Cut *c, const char *dirty, long parity) {
  St *st = c->st;
  Py_ssize_t n_free = 0;
  c->n = 2, c->na = 0, c->n_changed = 0;
  set_clear(&c->pairs);
  for (Py_ssize_t u = 0; u < st->n_units; ++u) {
    long w = st->uwave[u], k = -1;
    if (w >= 0 && w + 1 < st->n_waves && dirty[w] && w % 2 == parity) k = w;
    else if (w >= 1 && dirty[w - 1] && (w - 1) % 2 == parity) k = w - 1;
    c->free_k[u] = k, c->forced[u] = -1;
    if (k >= 0) c->node[u] = c->n++, c->buf[n_free++] = u;
  }
  if (!n_free) return 0;
  values_of(c, c->buf, n_free);
  pin(c);
  for (Py_ssize_t u = 0; u < st->n_units; ++u) { /* u at k + 1 takes its consumers in the pair along */
    long k = c->free_k[u], nu = c->node[u];
    if (k < 0 || nu < 2) continue;
    FOR_EACH(st->usucc, u, s) if (c->free_k[s] == k && c->node[s] != 1) cut_arc(c, c->node[s], nu, CAP_INF);
  }
  for (Py_ssize_t i = 0; i < c->vals.n && !st->failed; ++i) {
    long x = c->vals.items[i], pu = unit(st, x);
    Py_ssize_t m = 0;
    set_clear(&c->cons);
    FOR_EACH(st->succ, x, r) {
      long cu = unit(st, r);
      if (cu != pu && !set_has(&c->cons, cu)) set_add(&c->cons, cu), m++;
    }
    if (m) value_terms(c, pu, c->cons.items, m, size(st, x));
  }
  if (st->failed) return 0;
  Flow f = {0};
  if (flow_build(&f, c->n, c->tails, c->heads, c->caps, c->na) < 0) {
    flow_free(&f);
    st->failed = 1;
    return 0;
  }
  flow_solve(&f, 0, 1, -1);
  long *to = c->stack + st->n_units; /* the second half of the stack: new waves of the changed units */
  for (Py_ssize_t u = 0; u < st->n_units; ++u) {
    long k = c->free_k[u];
    if (k < 0) continue;
    long w = k + (f.level[c->node[u]] < 0);
    if (w != st->uwave[u]) to[c->n_changed] = w, c->changed[c->n_changed++] = u;
  }
  flow_free(&f);
  return c->n_changed ? apply_moves(c, to) : 0;
}

/* pair_cuts's loop: the pairs where some value has an end in both waves first, then the neighbours of
 * the pairs that changed, alternating parities */
static long cut_loop(Cut *c, long max_passes) {
  St *st = c->st;
  long nw = st->n_waves, moves = 0, n_dirty = 0;
  char *dirty = calloc(nw + 1, 1);
  if (!dirty) return PyErr_NoMemory(), st->failed = 1, 0;
  for (Py_ssize_t x = 0; x < st->n_nodes; ++x) { /* _active_pairs */
    if (!DEG(st->succ, x)) continue;
    set_clear(&c->fixed);
    set_add(&c->fixed, st->nwave[x] + 1);
    FOR_EACH(st->succ, x, r) if (!set_has(&c->fixed, st->nwave[r] + 1)) set_add(&c->fixed, st->nwave[r] + 1);
    for (Py_ssize_t i = 0; i < c->fixed.n; ++i) {
      long w = c->fixed.items[i] - 1;
      if (w >= 0 && w + 1 < nw && set_has(&c->fixed, w + 2) && !dirty[w]) dirty[w] = 1, n_dirty++;
    }
  }
  for (long pass = 0, parity = 0; pass < max_passes && n_dirty && !st->failed; ++pass, parity ^= 1) {
    int any = 0;
    for (long k = parity; k + 1 < nw && !any; k += 2) any = dirty[k];
    if (!any) continue;
    moves += run_pass(c, dirty, parity);
    for (long k = parity; k + 1 < nw; k += 2) n_dirty -= dirty[k], dirty[k] = 0;
    for (Py_ssize_t i = 0; i < c->pairs.n; ++i)
      for (long j = c->pairs.items[i] - 1; j <= c->pairs.items[i] + 1; j += 2)
        if (j >= 0 && j < nw - 1 && !dirty[j]) dirty[j] = 1, n_dirty++;
  }
  free(dirty);
  return moves;
}

static PyObject *pair_cuts(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *uwave_obj, *usucc, *upreds, *unit_of, *members, *preds, *succ, *size_of, *cache, *books;
  long n_waves, max_passes;
  if (!PyArg_ParseTuple(args, "O!lOOOO!OOOOOl:pair_cuts", &PyList_Type, &uwave_obj, &n_waves, &usucc, &upreds,
                        &unit_of, &PyDict_Type, &members, &preds, &succ, &size_of, &cache, &books, &max_passes))
    return NULL;
  St st;
  Cut c;
  memset(&c, 0, sizeof c);
  PyObject *result = NULL;
  if (st_open(&st, uwave_obj, n_waves, usucc, upreds, unit_of, members, preds, succ, size_of, cache, books) < 0)
    goto done;
  Py_ssize_t nu = st.n_units + 1, nn = st.n_nodes + 1, waves = n_waves + 2;
  c.st = &st;
  c.free_k = malloc(sizeof(long) * nu), c.node = malloc(sizeof(long) * nu), c.forced = malloc(nu);
  c.stack = malloc(sizeof(long) * 2 * nu), c.buf = malloc(sizeof(long) * 3 * nu);
  c.old = malloc(sizeof(long) * nu), c.changed = malloc(sizeof(long) * nu);
  c.wave_nodes = calloc(waves, sizeof(i64)), c.wave_comp = calloc(waves, sizeof(i64)), c.kept = calloc(waves, 1);
  if (!c.free_k || !c.node || !c.forced || !c.stack || !c.buf || !c.old || !c.changed || !c.wave_nodes ||
      !c.wave_comp || !c.kept || !set_init(&c.seen, nu) || !set_init(&c.vals, nn) || !set_init(&c.cons, nu) ||
      !set_init(&c.fixed, waves) || !set_init(&c.pairs, waves)) {
    PyErr_NoMemory();
    goto done;
  }
  long moves = n_waves < 2 ? 0 : cut_loop(&c, max_passes);
  if (st.failed || write_cache(cache, st.sizes, st.fresh, st.n_fresh) < 0) goto done;
  for (Py_ssize_t u = 0; u < st.n_units; ++u) {
    PyObject *w = PyLong_FromLong(st.uwave[u]);
    if (!w) goto done;
    PyList_SetItem(uwave_obj, u, w); /* steals w */
  }
  result = PyLong_FromLong(moves);
done:
  free(c.free_k), free(c.node), free(c.forced), free(c.stack), free(c.buf), free(c.old), free(c.changed);
  free(c.tails), free(c.heads), free(c.caps), free(c.wave_nodes), free(c.wave_comp), free(c.kept);
  Set *sets[] = {&c.seen, &c.vals, &c.cons, &c.fixed, &c.pairs};
  for (int i = 0; i < 5; ++i) set_free(sets[i]);
  st_free(&st);
  return result;
}

/* ---- span.py's span_cut: one minimum cut for the span relaxation (a proven bound) ----------------
 * Mirrors span.py's span_windows, _Layers, _constraints, _hyper, _split, _readers, _value and
 * span_cut: the same network with the same node numbers, so the same smallest minimum cut. */

#define SP_SOURCE 0
#define SP_SINK 1

typedef struct {
  Cut c;            /* the arcs (cut_arc) and the state */
  long *lo, *hi, *base;
  long *heads;      /* scratch: the nodes of one value's readers at one boundary */
  long *readers;    /* scratch: one value's supported reader units */
  Set seen;         /* units */
} Span;

/* span_windows */
static void sp_windows(Span *s, const long *order, const char *pinned) {
  St *st = s->c.st;
  long top = st->n_waves - 1;
  for (Py_ssize_t i = 0; i < st->n_units; ++i) {
    long u = order[i], sup = st->uwave[u] >= 0, v = sup ? 0 : -1;
    FOR_EACH(st->upreds, u, p) {
      long x = s->lo[p] + (sup && st->uwave[p] < 0);
      if (x > v) v = x;
    }
    s->lo[u] = sup && pinned && pinned[u] ? st->uwave[u] : v;
  }
  for (Py_ssize_t i = st->n_units - 1; i >= 0; --i) {
    long u = order[i], sup = st->uwave[u] >= 0, v = top;
    FOR_EACH(st->usucc, u, q) {
      long x = s->hi[q] - (!sup && st->uwave[q] >= 0);
      if (x < v) v = x;
    }
    s->hi[u] = sup && pinned && pinned[u] ? st->uwave[u] : v;
  }
  for (Py_ssize_t i = 0; i < st->n_units; ++i) {
    long u = order[i];
    if (st->uwave[u] >= 0) continue;
    if (s->hi[u] == top) s->lo[u] = top;
    else if (s->lo[u] < 0) s->hi[u] = -1;
  }
}

/* _Layers.node */
static inline long sp_node(const Span *s, long u, long t) {
  if (t < s->lo[u]) return SP_SINK;
  if (t >= s->hi[u]) return SP_SOURCE;
  return s->base[u] + t;
}

/* _constraints */
static void sp_constraints(Span *s) {
  St *st = s->c.st;
  for (Py_ssize_t u = 0; u < st->n_units; ++u)
    for (long t = s->lo[u]; t < s->hi[u] - 1; ++t) cut_arc(&s->c, s->base[u] + t, s->base[u] + t + 1, CAP_INF);
  for (Py_ssize_t a = 0; a < st->n_units; ++a) {
    FOR_EACH(st->usucc, a, v) {
      long c = st->uwave[a] < 0 && st->uwave[v] >= 0;
      for (long t = s->lo[v]; t < s->hi[v]; ++t) {
        long x = sp_node(s, a, t - c);
        if (x != SP_SOURCE) cut_arc(&s->c, s->base[v] + t, x, CAP_INF);
      }
    }
  }
}

/* _hyper: size if tail is on the source side and some of heads[0..k) on the sink side; the constant part */
static i64 sp_hyper(Span *s, long tail, const long *heads, Py_ssize_t k, i64 size) {
  if (tail == SP_SINK) return 0;
  Py_ssize_t m = 0, last = -1;
  for (Py_ssize_t i = 0; i < k; ++i) {
    if (heads[i] == SP_SINK) {
      if (tail == SP_SOURCE) return size;
      cut_arc(&s->c, tail, SP_SINK, size);
      return 0;
    }
    if (heads[i] != SP_SOURCE) m++, last = heads[i];
  }
  if (!m) return 0;
  if (m == 1) {
    cut_arc(&s->c, tail, last, size);
    return 0;
  }
  long a = s->c.n++;
  cut_arc(&s->c, tail, a, size);
  for (Py_ssize_t i = 0; i < k; ++i)
    if (heads[i] != SP_SOURCE) cut_arc(&s->c, a, heads[i], CAP_INF);
  return 0;
}

/* _split: size if some of nodes[0..k) is on each side; the constant part */
static i64 sp_split(Span *s, const long *nodes, Py_ssize_t k, i64 size) {
  int low = 0, high = 0;
  Py_ssize_t m = 0, last = -1;
  for (Py_ssize_t i = 0; i < k; ++i) {
    if (nodes[i] == SP_SOURCE) low = 1;
    else if (nodes[i] == SP_SINK) high = 1;
    else m++, last = nodes[i];
  }
  if (low && high) return size;
  if (low) return sp_hyper(s, SP_SOURCE, nodes, k, size); /* the sink is not among them */
  if (high) {
    if (m == 1) cut_arc(&s->c, last, SP_SINK, size);
    else if (m) {
      long a = s->c.n++;
      cut_arc(&s->c, a, SP_SINK, size);
      for (Py_ssize_t i = 0; i < k; ++i)
        if (nodes[i] > SP_SINK) cut_arc(&s->c, nodes[i], a, CAP_INF);
    }
    return 0;
  }
  if (m > 1) {
    long e1 = s->c.n++, e2 = s->c.n++;
    cut_arc(&s->c, e1, e2, size);
    for (Py_ssize_t i = 0; i < k; ++i) cut_arc(&s->c, nodes[i], e1, CAP_INF);
    for (Py_ssize_t i = 0; i < k; ++i) cut_arc(&s->c, e2, nodes[i], CAP_INF);
  }
  return 0;
}

/* _readers: the supported reader units of value x other than pu's, into s->readers; *fb: an unsupported one */
static Py_ssize_t sp_readers(Span *s, long x, long pu, int *fb) {
  St *st = s->c.st;
  Py_ssize_t k = 0;
  *fb = 0;
  set_clear(&s->seen);
  set_add(&s->seen, pu);
  FOR_EACH(st->succ, x, c) {
    long r = unit(st, c);
    if (set_has(&s->seen, r)) continue;
    set_add(&s->seen, r);
    if (st->uwave[r] >= 0) s->readers[k++] = r;
    else *fb = 1;
  }
  return k;
}

/* _value: one value's terms; out[0..3) = (constant of S, c, D) */
static void sp_value(Span *s, long pu, Py_ssize_t k, int fb, i64 size, i64 *out) {
  St *st = s->c.st;
  const long *rd = s->readers;
  out[0] = out[1] = out[2] = 0;
  if (st->uwave[pu] >= 0) {
    i64 c = fb ? size : 0;
    out[0] = out[1] = c;
    if (!k) return;
    long top = LONG_MIN;
    for (Py_ssize_t i = 0; i < k; ++i) if (s->hi[rd[i]] > top) top = s->hi[rd[i]];
    i64 w = fb ? size : 2 * size;
    for (long t = s->lo[pu]; t < top; ++t) {
      for (Py_ssize_t i = 0; i < k; ++i) s->heads[i] = sp_node(s, rd[i], t);
      out[0] += sp_hyper(s, sp_node(s, pu, t), s->heads, k, w);
    }
    out[2] = top - s->lo[pu];
    return;
  }
  if (!k) return;
  long bottom = LONG_MAX, top = LONG_MIN;
  for (Py_ssize_t i = 0; i < k; ++i) {
    if (s->lo[rd[i]] < bottom) bottom = s->lo[rd[i]];
    if (s->hi[rd[i]] > top) top = s->hi[rd[i]];
  }
  out[0] = out[1] = size;
  if (k > 1)
    for (long t = bottom; t < top; ++t) {
      for (Py_ssize_t i = 0; i < k; ++i) s->heads[i] = sp_node(s, rd[i], t);
      out[0] += sp_split(s, s->heads, k, size);
    }
  out[2] = top - bottom;
}

/* span_cut's network, cut and waves; NULL with an exception set on failure */
static PyObject *sp_solve(Span *s, long max_layers, long max_phases) {
  St *st = s->c.st;
  i64 layers = 0;
  for (Py_ssize_t u = 0; u < st->n_units; ++u) layers += s->hi[u] - s->lo[u];
  if (max_layers >= 0 && layers > max_layers) return Py_BuildValue("(Oiii)", Py_None, 0, 0, 1);
  long n = 2;
  for (Py_ssize_t u = 0; u < st->n_units; ++u) s->base[u] = n - s->lo[u], n += s->hi[u] - s->lo[u];
  s->c.n = n;
  sp_constraints(s);
  i64 span = 0, shared = 0, rho = 1, out[3];
  for (Py_ssize_t x = 0; x < st->n_nodes && !st->failed; ++x) {
    long pu = unit(st, x);
    int fb;
    Py_ssize_t k = sp_readers(s, x, pu, &fb);
    if (!k && !fb) continue;
    i64 sz = size(st, x);
    sp_value(s, pu, k, fb, sz, out);
    span += out[0], shared += out[1];
    if (out[2] > rho) rho = out[2];
  }
  if (st->failed) return NULL;
  Flow f = {0};
  PyObject *waves = NULL;
  if (flow_build(&f, s->c.n, s->c.tails, s->c.heads, s->c.caps, s->c.na) < 0) goto done;
  if (flow_solve(&f, SP_SOURCE, SP_SINK, max_phases)) { /* past the cap: no span start */
    flow_free(&f);
    return Py_BuildValue("(Oiii)", Py_None, 0, 0, 1);
  }
  for (Py_ssize_t e = 0; e < s->c.na; ++e)
    if (f.level[s->c.tails[e]] >= 0 && f.level[s->c.heads[e]] < 0)
      span = s->c.caps[e] >= CAP_INF || span >= CAP_INF ? CAP_INF : span + s->c.caps[e];
  if (span >= CAP_INF) { /* the scan's waves meet every constraint: a finite cut exists */
    PyErr_SetString(PyExc_RuntimeError, "span_cut: no finite cut (the waves given do not meet the constraints)");
    goto done;
  }
  if (!(waves = PyList_New(st->n_units))) goto done;
  for (Py_ssize_t u = 0; u < st->n_units; ++u) {
    long w = -1;
    if (st->uwave[u] >= 0)
      for (w = s->lo[u]; w < s->hi[u] && f.level[s->base[u] + w] < 0; ++w) {}
    PyList_SET_ITEM(waves, u, PyLong_FromLong(w));
  }
done:
  flow_free(&f);
  if (!waves) return NULL;
  return Py_BuildValue("(NLLL)", waves, span, shared, rho);
}

static PyObject *span_cut(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *uwave_obj, *usucc, *upreds, *unit_of, *succ, *size_of, *order_obj, *cache, *pinned_obj;
  long n_waves, max_layers, max_phases;
  if (!PyArg_ParseTuple(args, "OlOOOOOOOOll:span_cut", &uwave_obj, &n_waves, &usucc, &upreds, &unit_of, &succ,
                        &size_of, &order_obj, &cache, &pinned_obj, &max_layers, &max_phases))
    return NULL;
  St st;
  Span s;
  memset(&st, 0, sizeof st), memset(&s, 0, sizeof s);
  s.c.st = &st;
  st.size_of = size_of;
  st.n_units = PyObject_Length(uwave_obj);
  st.n_nodes = PyObject_Length(succ);
  st.n_waves = n_waves;
  PyObject *result = NULL;
  long *order = NULL, *tmp = NULL;
  char *pinned = NULL;
  if (st.n_units < 0 || st.n_nodes < 0) goto done;
  Py_ssize_t nu = st.n_units + 1, nn = st.n_nodes + 1;
  st.uwave = malloc(sizeof(long) * nu), st.nwave = st.uwave, order = malloc(sizeof(long) * nu);
  s.lo = malloc(sizeof(long) * nu), s.hi = malloc(sizeof(long) * nu), s.base = malloc(sizeof(long) * nu);
  s.heads = malloc(sizeof(long) * nu), s.readers = malloc(sizeof(long) * nu);
  st.sizes = malloc(sizeof(i64) * nn), st.fresh = malloc(sizeof(long) * nn);
  if (!st.uwave || !order || !s.lo || !s.hi || !s.base || !s.heads || !s.readers || !st.sizes || !st.fresh ||
      !set_init(&s.seen, nu)) {
    PyErr_NoMemory();
    goto done;
  }
  if (to_longs(uwave_obj, st.n_units, st.uwave, "uwave", -1, n_waves - 1) < 0 ||
      to_longs(order_obj, st.n_units, order, "order", 0, (long)st.n_units - 1) < 0 ||
      to_csr(usucc, st.n_units, &st.usucc, "usucc", st.n_units) < 0 ||
      to_csr(upreds, st.n_units, &st.upreds, "upreds", st.n_units) < 0 ||
      to_csr(succ, st.n_nodes, &st.succ, "succ", st.n_nodes) < 0 || read_cache(cache, st.n_nodes, st.sizes) < 0)
    goto done;
  if (unit_of != Py_None) {
    st.unit_of = malloc(sizeof(long) * nn);
    if (!st.unit_of || to_longs(unit_of, st.n_nodes, st.unit_of, "unit_of", 0, (long)st.n_units - 1) < 0) goto done;
  } else if (st.n_nodes != st.n_units) {
    PyErr_SetString(PyExc_ValueError, "without unit_of, every node is a unit: uwave and succ differ in length");
    goto done;
  }
  if (pinned_obj != Py_None) {
    pinned = malloc(nu), tmp = malloc(sizeof(long) * nu);
    if (!pinned || !tmp || to_longs(pinned_obj, st.n_units, tmp, "pinned", LONG_MIN, LONG_MAX) < 0) goto done;
    for (Py_ssize_t u = 0; u < st.n_units; ++u) pinned[u] = tmp[u] != 0;
  }
  sp_windows(&s, order, pinned);
  result = sp_solve(&s, max_layers, max_phases);
  if (result && write_cache(cache, st.sizes, st.fresh, st.n_fresh) < 0) Py_CLEAR(result);
done:
  free(order), free(tmp), free(pinned), free(s.lo), free(s.hi), free(s.base), free(s.heads), free(s.readers);
  free(s.c.tails), free(s.c.heads), free(s.c.caps);
  set_free(&s.seen);
  st_free(&st);
  return result;
}

/* ---- cheap views out of partitions (boundary.py's eject_cheap) -------------------------------- */

/* the boundary bytes of value x at the current waves (boundary.boundary_cost); sizes asked only when it crosses */
static i64 value_cost(St *st, long x) {
  long px = st->nwave[x];
  set_clear(&st->zone);
  FOR_EACH(st->succ, x, k) if (st->nwave[k] != px && !set_has(&st->zone, st->nwave[k] + 1)) set_add(&st->zone, st->nwave[k] + 1);
  if (!st->zone.n) return 0;
  return size(st, x) * (st->zone.n - set_has(&st->zone, 0) + (px != -1));
}

/* the bytes of node v's value and of its inputs' values, v at its current wave */
static i64 touched_cost(St *st, long v) {
  i64 total = value_cost(st, v);
  FOR_EACH(st->preds, v, p) total += value_cost(st, p);
  return total;
}

/* eject_cheap's loop over the candidates; appends the ejected nodes to out */
static int eject_loop(St *st, const long *cheap, Py_ssize_t n_cheap, PyObject *out) {
  for (Py_ssize_t i = 0; i < n_cheap && !st->failed; ++i) {
    long v = cheap[i], u = unit(st, v), w0 = st->uwave[u];
    if (w0 < 0 || u != v || st->multi[u]) continue;
    long hi_pred = -1, lo_succ = LONG_MAX;
    FOR_EACH(st->preds, v, p) if (st->nwave[p] > hi_pred) hi_pred = st->nwave[p];
    FOR_EACH(st->succ, v, k) if (st->nwave[k] >= 0 && st->nwave[k] < lo_succ) lo_succ = st->nwave[k];
    if (lo_succ != LONG_MAX && hi_pred >= lo_succ) continue;
    i64 before = touched_cost(st, v);
    st->nwave[v] = -1;
    i64 after = touched_cost(st, v);
    st->nwave[v] = w0;
    if (st->failed || after >= before || !ask_movable(st, u, w0, -1)) continue;
    st->uwave[u] = st->nwave[v] = -1;
    PyObject *node = PyLong_FromLong(v);
    if (!node || PyList_Append(out, node) < 0) return Py_XDECREF(node), -1;
    Py_DECREF(node);
  }
  return st->failed ? -1 : 0;
}

static PyObject *eject_cheap(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *uwave_obj, *unit_of, *members, *cheap_obj, *preds, *succ, *size_of, *movable, *cache, *books;
  long n_waves;
  if (!PyArg_ParseTuple(args, "O!lOO!OOOOOOO:eject_cheap", &PyList_Type, &uwave_obj, &n_waves, &unit_of,
                        &PyDict_Type, &members, &cheap_obj, &preds, &succ, &size_of, &movable, &cache, &books))
    return NULL;
  St st;
  memset(&st, 0, sizeof st);
  Py_ssize_t n_cheap = PyObject_Length(cheap_obj);
  long *cheap = malloc(sizeof(long) * (n_cheap > 0 ? n_cheap : 1));
  PyObject *out = PyList_New(0), *result = NULL;
  if (n_cheap < 0 || !cheap || !out ||
      st_open(&st, uwave_obj, n_waves, Py_None, Py_None, unit_of, members, preds, succ, size_of, cache, books) < 0 ||
      to_longs(cheap_obj, n_cheap, cheap, "cheap", 0, (long)st.n_nodes - 1) < 0)
    goto done;
  st.movable = movable;
  if (!set_init(&st.zone, n_waves + 2)) {
    PyErr_NoMemory();
    goto done;
  }
  if (eject_loop(&st, cheap, n_cheap, out) < 0 || write_cache(cache, st.sizes, st.fresh, st.n_fresh) < 0) goto done;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(out); ++i) {
    long v = PyLong_AsLong(PyList_GET_ITEM(out, i));
    PyObject *w = PyLong_FromLong(-1);
    if (!w || PyList_SetItem(uwave_obj, unit(&st, v), w) < 0) goto done; /* steals w */
  }
  result = out, out = NULL;
done:
  free(cheap);
  Py_XDECREF(out);
  st_free(&st);
  return result;
}

static PyMethodDef methods[] = {
    {"edges", edges, METH_VARARGS,
     "edges(lens, flat) -> (distinct inputs of each node, readers of each node, first topological break or -1): "
     "core._edges."},
    {"buckets", buckets, METH_O, "buckets(node_wave) -> the nodes of each wave: core._buckets."},
    {"crossings", crossings, METH_VARARGS,
     "crossings(parts, preds, n_nodes) -> (partition of each node, inputs of each partition, output flags): "
     "core._crossings."},
    {"waves", waves, METH_VARARGS,
     "waves(n, succ, indeg, sup) -> (wave of each unit or -1, #waves, processing order): core._waves."},
    {"boundary_total", boundary_total, METH_VARARGS,
     "boundary_total(uwave, unit_of, succ, size_of, sizes=None) -> bytes: boundary.boundary_total."},
    {"refine_waves", refine_waves, METH_VARARGS,
     "refine_waves(uwave, n_waves, usucc, upreds, unit_of, members, preds, succ, size_of, movable, sweeps, order, "
     "sizes=None, books=None)"
     " -> moves: torchvendor.partitioner.boundary.refine_waves's sweeps; uwave is updated in place."},
    {"pair_cuts", pair_cuts, METH_VARARGS,
     "pair_cuts(uwave, n_waves, usucc, upreds, unit_of, members, preds, succ, size_of, sizes, books, max_passes)"
     " -> moves: cuts.pair_cuts; uwave is updated in place."},
    {"eject_cheap", eject_cheap, METH_VARARGS,
     "eject_cheap(uwave, n_waves, unit_of, members, cheap, preds, succ, size_of, movable, sizes, books)"
     " -> ejected nodes: boundary.eject_cheap; uwave is updated in place."},
    {"span_cut", span_cut, METH_VARARGS,
     "span_cut(uwave, n_waves, usucc, upreds, unit_of, succ, size_of, order, sizes, pinned, max_layers, max_phases)"
     " -> (waves or None, min span cost, shared constant, rho): span.span_cut."},
    {"min_cut", min_cut, METH_VARARGS,
     "min_cut(n, arcs, source=0, sink=1, max_phases=-1) -> the source side of a minimum cut (the smallest), or "
     "None past max_phases: cuts.min_cut."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "torchvendor.partitioner._partition_native",
    "The partitioner's whole-graph integer loops in C (torch-free); partitioner/ holds the Python reference.",
    -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__partition_native(void) { return PyModule_Create(&module); }
