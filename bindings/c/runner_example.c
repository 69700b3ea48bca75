/* streamattn on an application's own threads: a small pthreads pool passed to the context as
 * its parallel runner (sattn_context_options.runner), then a causal prefill of a prompt and a
 * few decode steps against the growing KV cache. The same calls on a one-thread context must
 * give the same bytes. Meant for the static, oneTBB-free library an application ships in one
 * binary:
 *   cmake -DBUILD_SHARED_LIBS=OFF -DSTREAMATTN_TBB=OFF ...; cmake --install ...
 *   cc -std=c99 runner_example.c $(pkg-config --static --cflags --libs streamattn) -lpthread
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "streamattn/streamattn.h"

/* ------------------------------------------------------------------ the application's pool */

/* kThreads slots: the calling thread is slot 0, the pool's threads 1 .. kThreads - 1. Each loop
 * hands out indices one at a time under the lock (streamattn's tasks are coarse: a query block
 * or a row chunk, so the lock is cheap beside them). */
enum { kThreads = 4 };

typedef struct pool {
  pthread_mutex_t lock;
  pthread_cond_t wake, done;
  pthread_t threads[kThreads];
  int started;     /* pool threads running */
  long generation; /* bumped per loop, and on shutdown */
  int stop;
  /* The current loop. */
  sattn_parallel_task task;
  void* task_data;
  int64_t count, next;
  int busy; /* pool threads still inside the current loop */
} pool;

typedef struct worker {
  pool* p;
  int32_t slot;
} worker;

static worker workers[kThreads];

/* Runs indices of the current loop as `slot` until none are left. */
static void run_indices(pool* p, int32_t slot) {
  for (;;) {
    int64_t index;
    pthread_mutex_lock(&p->lock);
    index = p->next < p->count ? p->next++ : -1;
    pthread_mutex_unlock(&p->lock);
    if (index < 0) return;
    p->task(p->task_data, index, slot);
  }
}

static void* pool_thread(void* arg) {
  worker* w = (worker*)arg;
  pool* p = w->p;
  long seen = 0;
  for (;;) {
    pthread_mutex_lock(&p->lock);
    while (p->generation == seen && !p->stop) pthread_cond_wait(&p->wake, &p->lock);
    if (p->stop) {
      pthread_mutex_unlock(&p->lock);
      return NULL;
    }
    seen = p->generation;
    pthread_mutex_unlock(&p->lock);
    run_indices(p, w->slot);
    pthread_mutex_lock(&p->lock);
    if (--p->busy == 0) pthread_cond_signal(&p->done);
    pthread_mutex_unlock(&p->lock);
  }
}

/* The sattn_parallel_runner: called on the thread that called into streamattn, which joins in
 * as slot 0 and returns once the pool's threads are out of the loop too. */
static int32_t pool_run(void* runner_data, sattn_parallel_task task, void* task_data,
                        int64_t count) {
  pool* p = (pool*)runner_data;
  pthread_mutex_lock(&p->lock);
  p->task = task;
  p->task_data = task_data;
  p->count = count;
  p->next = 0;
  p->busy = p->started;
  ++p->generation;
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->lock);
  run_indices(p, 0);
  pthread_mutex_lock(&p->lock);
  while (p->busy > 0) pthread_cond_wait(&p->done, &p->lock);
  pthread_mutex_unlock(&p->lock);
  return 0;
}

static void pool_stop(pool* p) {
  int i;
  pthread_mutex_lock(&p->lock);
  p->stop = 1;
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->lock);
  for (i = 1; i <= p->started; ++i) pthread_join(p->threads[i], NULL);
}

/* Starts kThreads - 1 threads; 0 on success. */
static int pool_start(pool* p) {
  int i;
  memset(p, 0, sizeof(*p));
  pthread_mutex_init(&p->lock, NULL);
  pthread_cond_init(&p->wake, NULL);
  pthread_cond_init(&p->done, NULL);
  for (i = 1; i < kThreads; ++i) {
    workers[i].p = p;
    workers[i].slot = i;
    if (pthread_create(&p->threads[i], NULL, pool_thread, &workers[i]) != 0) {
      pool_stop(p);
      return 1;
    }
    p->started = i;
  }
  return 0;
}

/* ------------------------------------------------------------------ prefill, then decode */

enum { kPrompt = 300, kSteps = 4, kMaxKeys = kPrompt + kSteps };
enum { kHeadsQ = 8, kHeadsKv = 2, kDim = 64 };

static float prompt_q[kPrompt * kHeadsQ * kDim], prompt_out[kPrompt * kHeadsQ * kDim];
static float k_cache[kMaxKeys * kHeadsKv * kDim], v_cache[kMaxKeys * kHeadsKv * kDim];
static float step_q[kHeadsQ * kDim], step_out[kSteps][kHeadsQ * kDim];

/* A value in [-1, 1) from a position, a head, a channel and a salt (no libm needed). */
static float value(int64_t i, unsigned salt) {
  unsigned x = (unsigned)i * 2654435761u ^ salt * 40503u;
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  return (float)(x % 2000u) / 1000.0f - 1.0f;
}

/* The prompt's causal prefill (its own keys fill the cache), then kSteps decode steps, each
 * appending one key and value and attending over the whole cache so far. */
static sattn_status prefill_and_decode(sattn_context* ctx) {
  const int64_t prompt_shape[4] = {1, kPrompt, kHeadsQ, kDim};
  const int64_t step_shape[4] = {1, 1, kHeadsQ, kDim};
  sattn_attention_options opts;
  sattn_tensor q, k, v, out;
  sattn_status s;
  int64_t i, keys;
  int step;
  memset(&opts, 0, sizeof(opts));
  opts.struct_size = sizeof(opts);
  opts.causal = 1;
  for (i = 0; i < kPrompt * kHeadsQ * kDim; ++i) prompt_q[i] = value(i, 1);
  for (i = 0; i < kMaxKeys * kHeadsKv * kDim; ++i) {
    k_cache[i] = value(i, 2);
    v_cache[i] = value(i, 3);
  }
  {
    const int64_t kv_shape[4] = {1, kPrompt, kHeadsKv, kDim};
    q = sattn_tensor_contiguous(prompt_q, SATTN_DTYPE_F32, 4, prompt_shape);
    k = sattn_tensor_contiguous(k_cache, SATTN_DTYPE_F32, 4, kv_shape);
    v = sattn_tensor_contiguous(v_cache, SATTN_DTYPE_F32, 4, kv_shape);
    out = sattn_tensor_contiguous(prompt_out, SATTN_DTYPE_F32, 4, prompt_shape);
    s = sattn_attention(ctx, &q, &k, &v, &out, NULL, &opts);
    if (s != SATTN_OK) return s;
  }
  for (step = 0; step < kSteps; ++step) {
    /* The cache's first `keys` rows: a contiguous prefix of the [1, kMaxKeys, ...] buffers. */
    int64_t kv_shape[4] = {1, 0, kHeadsKv, kDim};
    kv_shape[1] = keys = kPrompt + step + 1;
    for (i = 0; i < kHeadsQ * kDim; ++i) step_q[i] = value(i + keys * kHeadsQ * kDim, 4);
    q = sattn_tensor_contiguous(step_q, SATTN_DTYPE_F32, 4, step_shape);
    k = sattn_tensor_contiguous(k_cache, SATTN_DTYPE_F32, 4, kv_shape);
    v = sattn_tensor_contiguous(v_cache, SATTN_DTYPE_F32, 4, kv_shape);
    out = sattn_tensor_contiguous(step_out[step], SATTN_DTYPE_F32, 4, step_shape);
    s = sattn_attention(ctx, &q, &k, &v, &out, NULL, &opts);
    if (s != SATTN_OK) return s;
  }
  return SATTN_OK;
}

int main(void) {
  static float want_prompt[sizeof(prompt_out) / sizeof(float)];
  static float want_steps[kSteps][kHeadsQ * kDim];
  sattn_context_options options;
  sattn_context_info info;
  sattn_context* ctx = NULL;
  sattn_status s;
  pool p;
  int same;

  /* The reference: a one-thread context. */
  memset(&options, 0, sizeof(options));
  options.struct_size = sizeof(options);
  options.num_threads = 1;
  if (sattn_context_create(&options, &ctx) != SATTN_OK) {
    fprintf(stderr, "context: %s\n", sattn_last_error());
    return 1;
  }
  s = prefill_and_decode(ctx);
  sattn_context_destroy(ctx);
  if (s != SATTN_OK) {
    fprintf(stderr, "one thread: %s: %s\n", sattn_status_string(s), sattn_last_error());
    return 1;
  }
  memcpy(want_prompt, prompt_out, sizeof(prompt_out));
  memcpy(want_steps, step_out, sizeof(step_out));

  /* The application's threads: num_threads is the number of slots the runner passes. */
  if (pool_start(&p) != 0) {
    fprintf(stderr, "could not start the pool's threads\n");
    return 1;
  }
  options.num_threads = kThreads;
  options.runner = pool_run;
  options.runner_data = &p;
  if (sattn_context_create(&options, &ctx) != SATTN_OK) {
    fprintf(stderr, "context: %s\n", sattn_last_error());
    pool_stop(&p);
    return 1;
  }
  memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  sattn_context_get_info(ctx, &info);
  s = prefill_and_decode(ctx);
  sattn_context_destroy(ctx);
  pool_stop(&p);
  if (s != SATTN_OK) {
    fprintf(stderr, "runner: %s: %s\n", sattn_status_string(s), sattn_last_error());
    return 1;
  }
  same = memcmp(want_prompt, prompt_out, sizeof(prompt_out)) == 0 &&
         memcmp(want_steps, step_out, sizeof(step_out)) == 0;
  printf("streamattn %s on %d pthreads (%s): prefill of %d tokens and %d decode steps, %s\n",
         sattn_version(), (int)info.num_threads, info.simd_target, kPrompt, kSteps,
         same ? "the same bytes as one thread" : "DIFFERENT bytes from one thread");
  printf("last step, out[0..3] = %g %g %g %g\n", step_out[kSteps - 1][0], step_out[kSteps - 1][1],
         step_out[kSteps - 1][2], step_out[kSteps - 1][3]);
  return same ? 0 : 1;
}
