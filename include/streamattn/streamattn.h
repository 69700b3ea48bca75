/*
 * streamattn: exact softmax attention for inference, on CPUs and (when present) CUDA GPUs.
 *
 * This is the whole public C ABI. Conventions (see docs/design.md):
 *  - Every function that can fail returns sattn_status; sattn_last_error() then gives a
 *    thread-local message that names the offending argument.
 *  - Bad input writes nothing to any output, and never crashes or aborts.
 *  - Tensors are views: a pointer, a dtype, a device, a rank <= 4, a shape and strides counted in
 *    elements (not bytes). Any strides are accepted, including 0 (broadcast) and negative ones
 *    on inputs; an output must not overlap itself.
 *  - Option structs begin with struct_size (set it to sizeof the struct); all other fields
 *    zero mean "default". Fields are only ever appended, so old callers keep working.
 *  - Attention layouts follow FlashAttention: q, out [batch, seq_q, heads_q, head_dim];
 *    k, v [batch, seq_k, heads_kv, head_dim]; lse [batch, heads_q, seq_q] float32, natural log.
 *  - A sattn_context may be shared by threads: calls on one context run one at a time (they
 *    share its scratch; each call still uses all the context's threads), so threads whose calls
 *    must overlap need a context each. Distinct contexts are independent.
 *
 * The header is C99 and C++ compatible.
 */
#ifndef STREAMATTN_STREAMATTN_H_
#define STREAMATTN_STREAMATTN_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define SATTN_API __declspec(dllexport)
#elif defined(__GNUC__)
#define SATTN_API __attribute__((visibility("default")))
#else
#define SATTN_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define SATTN_VERSION_MAJOR 0
#define SATTN_VERSION_MINOR 1
#define SATTN_VERSION_PATCH 0

/* ------------------------------------------------------------------ status and errors */

typedef enum sattn_status {
  SATTN_OK = 0,
  SATTN_ERR_INVALID_ARGUMENT = 1,    /* the call is malformed; nothing was written */
  SATTN_ERR_UNSUPPORTED = 2,         /* well-formed, but this build/backend cannot do it */
  SATTN_ERR_OUT_OF_MEMORY = 3,       /* an allocation failed; nothing was written */
  SATTN_ERR_BACKEND_UNAVAILABLE = 4, /* e.g. CUDA requested but no usable GPU */
  SATTN_ERR_INTERNAL = 5,            /* a bug in streamattn: please report the message */
  /* the context's parallel runner (sattn_context_options.runner) returned non-zero, or broke
   * its contract; the message gives the runner's code. Outputs are unspecified. */
  SATTN_ERR_RUNNER_FAILED = 6
} sattn_status;

/* "major.minor.patch" of the library actually loaded (may differ from the header's). */
SATTN_API const char* sattn_version(void);

/* A static, human-readable name of a status ("invalid argument"); never NULL. */
SATTN_API const char* sattn_status_string(sattn_status status);

/* The message of the last failed call on this thread ("" if none). Valid until the next call
 * into streamattn on this thread. */
SATTN_API const char* sattn_last_error(void);

/* ------------------------------------------------------------------ tensors */

typedef enum sattn_dtype {
  SATTN_DTYPE_F32 = 1,
  SATTN_DTYPE_F16 = 2,  /* IEEE binary16 */
  SATTN_DTYPE_BF16 = 3, /* bfloat16 */
  SATTN_DTYPE_I32 = 4,  /* int32: only where a call asks for integers (indices, lengths) */
  /* Quantized KV-cache formats: only for sattn_attention's k and v (with their scales in
   * sattn_attention_options) and sattn_quantize_kv's output. Their bytes, exactly:
   *
   * SATTN_DTYPE_I8: one byte per element, a two's-complement int8 q; the element's value is
   *   q * scale, scale being its group's entry in the scales tensor (k_scales / v_scales): the G
   *   consecutive channels [g*G, (g+1)*G) of one (key, kv head) row share entry g.
   *   sattn_quantize_kv writes q in [-127, 127] and scale = max |x| / 127 of the group
   *   (rounded to the scales' dtype); readers accept -128 too.
   *
   * SATTN_DTYPE_FP8_E4M3: one byte per element in the OCP 8-bit format E4M3 (the "e4m3fn" of
   *   PyTorch, ml_dtypes, vLLM and FlashAttention-3): bit 7 the sign, bits 6-3 the exponent
   *   (bias 7), bits 2-0 the mantissa; exponent 0 is subnormal (m * 2^-9); no infinities;
   *   S.1111.111 (0x7F, 0xFF) is NaN; the largest finite value is 448. The element's value is
   *   that number times one float32 scale per kv head or per tensor.
   *
   * SATTN_DTYPE_I4: two elements per byte along the last dimension (head_dim): element 2j of a
   *   row in bits 0-3 of the row's byte j, element 2j + 1 in bits 4-7, each a two's-complement
   *   4-bit q in [-8, 7]; value q * scale of its group, as for I8 (sattn_quantize_kv writes q in
   *   [-7, 7], scale = max |x| / 7). A view of I4 counts shape and strides in elements (half
   *   bytes): its last dimension must have stride 1 and an even extent, and every other stride
   *   must be even, so that each row starts on a byte; data points at the byte whose low half is
   *   element [0, 0, 0, 0]. */
  SATTN_DTYPE_I8 = 5,
  SATTN_DTYPE_FP8_E4M3 = 6,
  SATTN_DTYPE_I4 = 7
} sattn_dtype;

typedef enum sattn_device {
  SATTN_DEVICE_CPU = 0, /* zero, so a zero-initialised view is a host view */
  SATTN_DEVICE_CUDA = 1
} sattn_device;

#define SATTN_MAX_NDIM 4

typedef struct sattn_tensor {
  void* data;                      /* element [0, 0, ...]; for inputs only read */
  int32_t dtype;                   /* a sattn_dtype */
  int32_t device;                  /* a sattn_device */
  int32_t device_index;            /* which CUDA device; 0 for the CPU */
  int32_t ndim;                    /* 1..SATTN_MAX_NDIM */
  int64_t shape[SATTN_MAX_NDIM];   /* every used extent >= 1 */
  int64_t strides[SATTN_MAX_NDIM]; /* in elements */
} sattn_tensor;

/* A host view with row-major (C-contiguous) strides. `shape` holds `ndim` extents. Performs no
 * validation: the call that receives the view checks it. */
SATTN_API sattn_tensor sattn_tensor_contiguous(void* data, sattn_dtype dtype, int32_t ndim,
                                               const int64_t* shape);

/* ------------------------------------------------------------------ contexts */

/* The environment variable STREAMATTN_BACKEND=cpu|cuda|auto, when set, overrides the option;
 * STREAMATTN_CUDA_PLUGIN names the CUDA plugin to load (default: libstreamattn_cuda.so in the
 * directory libstreamattn was loaded from). A CUDA context computes calls on device tensors on
 * the GPU and calls on host tensors on the CPU; one call never mixes the two. */
typedef enum sattn_backend {
  SATTN_BACKEND_AUTO = 0, /* CUDA when the plugin loads and sees a GPU, else the CPU */
  SATTN_BACKEND_CPU = 1,
  SATTN_BACKEND_CUDA = 2
} sattn_backend;

/* The tile kernel of prefill-shaped attention on the CPU (sattn_attention with 16 or more
 * query rows per kv head: prefill, chunked prefill, decoding of large GQA groups), where the
 * CPU multiplies a dtype natively. The environment variable STREAMATTN_CPU_KERNEL=auto|f32-fma|
 * avx512-bf16|neon-bf16|neon-fp16, when set, overrides the option. sattn_context_get_info names
 * the kernel each input dtype gets. Every native kernel multiplies exact products into f32 sums
 * and rounds P to the input's dtype for P.V unless the call sets
 * sattn_attention_options.f32_pv; forcing one makes sattn_context_create fail with
 * SATTN_ERR_UNSUPPORTED, naming it, where this CPU (or the SIMD target the process runs) cannot
 * run it, and leaves the dtypes it does not take on f32-fma. */
typedef enum sattn_cpu_kernel {
  /* The fastest kernel this CPU has for each call's dtypes: avx512-bf16 or neon-bf16 where q,
   * k and v are all bf16, neon-fp16 where they are all f16, where the CPU has them; else
   * f32-fma. */
  SATTN_CPU_KERNEL_AUTO = 0,
  /* f32 FMAs for every dtype (f16 and bf16 widened exactly): every CPU, the reference. */
  SATTN_CPU_KERNEL_F32_FMA = 1,
  /* Native bf16 dot products (vdpbf16ps) where q, k and v are bf16: x86 CPUs with AVX512_BF16
   * (AMD Zen 4 and later, Intel Cooper Lake, Sapphire Rapids and later) at the AVX-512 target.
   * Sums in f32, P rounded to bf16. */
  SATTN_CPU_KERNEL_AVX512_BF16 = 2,
  /* Native bf16 dot products (BFDOT) where q, k and v are bf16: 64-bit Arm Linux CPUs with
   * FEAT_BF16 (HWCAP2_BF16: Neoverse V1, V2, N2, Cortex-A510, A710, X2 and later), at every
   * aarch64 SIMD target (NEON, SVE, SVE2) of a library built by GCC 12 or later. Sums in f32
   * (BFDOT rounds them to odd), P rounded to bf16. */
  SATTN_CPU_KERNEL_NEON_BF16 = 3,
  /* f16 products widened into f32 sums (FMLAL, FMLAL2; never an f16 sum) where q, k and v are
   * f16: 64-bit Arm Linux CPUs with FEAT_FHM (HWCAP_ASIMDFHM: Neoverse V1, V2, N2, Cortex-A510,
   * A710, X2 and later; not Cortex-A55, A76 or Neoverse N1), as neon-bf16. P rounded to f16. */
  SATTN_CPU_KERNEL_NEON_FP16 = 4
} sattn_cpu_kernel;

/* An application's own threads for a context's parallel loops, in the manner of libjxl's
 * JxlParallelRunner (sattn_context_options.runner). Every parallel loop of the context calls
 *
 *   runner(runner_data, task, task_data, count)
 *
 * which must call task(task_data, index, thread) exactly once for every index in [0, count)
 * and return 0 once all those calls have returned (count >= 1). Contract:
 *  - runner is called only on the thread that called into streamattn, inside that call, never
 *    concurrently for one context, and never from inside a task.
 *  - The indices may run in any order, on any threads (the calling one included), at once.
 *    streamattn lists heavier tasks before lighter ones (a packed batch's query blocks sorted
 *    by cost; under a causal mask, each kv head's blocks from the last): a runner that hands
 *    them out in increasing order, each thread taking the next as it finishes one (a shared
 *    counter), balances its threads best, as the built-in pool does.
 *  - thread is a slot in [0, num_threads), num_threads being the context's
 *    (sattn_context_info.num_threads): two task calls that run at the same time must pass
 *    different slots; calls one after another may share one. A pool's worker number fits.
 *    streamattn checks what it cheaply can: a slot outside that range or in use, an index
 *    outside [0, count) (the task returns without running either) or a number of task calls
 *    other than count makes the call return SATTN_ERR_RUNNER_FAILED.
 *  - task never fails, never throws and never calls into streamattn or the allocator.
 *  - Failure: return any non-zero code (e.g. the pool could not start a thread); the runner
 *    may then skip the indices it has not started, but must still return only after every
 *    task call it made has returned. The streamattn call then returns
 *    SATTN_ERR_RUNNER_FAILED, its message names the code, and the contents of its outputs are
 *    unspecified (some may be written). The context stays usable.
 * Results are the same bytes for every runner and every num_threads. */
typedef void (*sattn_parallel_task)(void* task_data, int64_t index, int32_t thread);
typedef int32_t (*sattn_parallel_runner)(void* runner_data, sattn_parallel_task task,
                                         void* task_data, int64_t count);

typedef struct sattn_context_options {
  uint32_t struct_size; /* sizeof(sattn_context_options) */
  int32_t num_threads;  /* CPU threads, the caller's included; 0 or more than the process
                         * may use = all it may use (with a runner: its thread slots; in a
                         * build without oneTBB and no runner: always 1) */
  int32_t backend;      /* a sattn_backend; 0 = auto */
  /* Optional allocator (appended in the second version of this struct: a struct_size of 12,
   * the first version's, means none). Set both functions or neither (NULL: the C library's
   * aligned_alloc and free).
   *   alloc_fn(alloc_user, bytes, alignment): bytes > 0, alignment a power of two <= 64; returns
   *     memory aligned to it, or NULL. Memory returned misaligned is passed to free_fn and
   *     counts as a failure.
   *   free_fn(alloc_user, p): p is a non-NULL pointer alloc_fn returned.
   * Through it go the context itself and every buffer streamattn sizes from a call's arguments
   * or the thread count: per-thread scratch (kept, and grown, across calls), split-KV partial
   * results, per-row and per-part bookkeeping, copies of per-head and per-sequence options.
   * Not through it: oneTBB's worker threads and task arena, which oneTBB allocates itself on
   * a context's first multi-threaded call; error messages (at most 512 bytes per thread); and a
   * GPU backend's device memory.
   * The functions are called only from the thread that called into streamattn, never from a
   * worker thread and never concurrently for one context (contexts used by different threads
   * may call them concurrently). Everything taken is given back by the call that took it or by
   * sattn_context_destroy. When alloc_fn fails, the call returns SATTN_ERR_OUT_OF_MEMORY with
   * nothing written to any output (every call allocates before its first write), having
   * given back what it took, and the context works as before. */
  void* (*alloc_fn)(void* alloc_user, size_t bytes, size_t alignment);
  void (*free_fn)(void* alloc_user, void* p);
  void* alloc_user;
  /* A sattn_cpu_kernel; 0 = auto (appended in the third version of this struct). */
  int32_t cpu_kernel;
  /* Optional parallel runner (appended in the fourth version; see sattn_parallel_runner):
   * when set, the context starts no threads of its own and runs every parallel loop through
   * runner(runner_data, ...); num_threads is then the number of thread slots it passes
   * (0 = as many as the CPUs the process may use; not capped by them). NULL: oneTBB, or, in a
   * build without oneTBB (STREAMATTN_TBB=OFF), the calling thread alone. runner_data is only
   * passed to it; setting it without runner is an error. */
  sattn_parallel_runner runner;
  void* runner_data;
} sattn_context_options;

typedef struct sattn_context sattn_context;

/* Creates a context. `options` may be NULL for the defaults. On failure *ctx is set to NULL. */
SATTN_API sattn_status sattn_context_create(const sattn_context_options* options,
                                            sattn_context** ctx);

/* Destroys a context; NULL is accepted and does nothing. */
SATTN_API sattn_status sattn_context_destroy(sattn_context* ctx);

typedef struct sattn_context_info {
  uint32_t struct_size;          /* sizeof(sattn_context_info), set by the caller */
  int32_t backend;               /* the sattn_backend this context runs on (never AUTO) */
  int32_t num_threads;           /* CPU worker threads */
  const char* backend_reason;    /* why that backend was chosen */
  const char* simd_target;       /* the CPU SIMD target chosen at run time, e.g. "AVX2" */
  const char* compiled_targets;  /* every SIMD target compiled in, best first */
  const char* cuda_availability; /* "available: ..." or "unavailable: <reason>" */
  /* The CPU tile kernel prefill-shaped attention runs when q, k and v are all of one dtype,
   * for each dtype: "f32-fma", "avx512-bf16", "neon-bf16" or "neon-fp16" (appended in the
   * second version). */
  const char* f32_kernel;
  const char* f16_kernel;
  const char* bf16_kernel;
} sattn_context_info;

/* Fills `info` (up to info->struct_size bytes). The strings live as long as the context. */
SATTN_API sattn_status sattn_context_get_info(const sattn_context* ctx, sattn_context_info* info);

/* The CUDA stream (a cudaStream_t, passed as void* so this header needs no CUDA) on which the
 * context's calls on device tensors run, in order with the caller's other work on it; NULL, the
 * default, is CUDA's default stream. The stream must belong to the device the tensors live on
 * and outlive its use. Kernels are queued on it and the call returns without waiting for them,
 * except that a call whose seqused_k, block_table, ALiBi slopes or sinks live on the device
 * first waits for the stream to copy those (small) tensors to the host for validation; keep
 * them on the host to avoid that wait. Returns SATTN_ERR_BACKEND_UNAVAILABLE, and changes
 * nothing, on a context that does not run on CUDA (see sattn_context_info.backend). */
SATTN_API sattn_status sattn_context_set_cuda_stream(sattn_context* ctx, void* stream);

/* ------------------------------------------------------------------ elementwise */

/* y[i] = 2^x[i] for i < n, by the library's own SIMD exp2 (the only exponential it uses):
 * at most 2 ulp from the exact value over [-150, 128] (subnormal results included), exactly 0
 * below -150 and for -inf, +inf from 128 on, NaN for NaN. y may equal x (in place); any other
 * overlap is an error. Float32 host arrays. */
SATTN_API sattn_status sattn_exp2(sattn_context* ctx, const float* x, float* y, int64_t n);

/* ------------------------------------------------------------------ attention */

typedef struct sattn_attention_options {
  uint32_t struct_size; /* sizeof(sattn_attention_options) */
  /* Scores are scale * q.k; 0 means 1/sqrt(head_dim). Must be finite. */
  float scale;
  /* Nonzero: causal mask aligned bottom-right, query i sees keys j <= i + seq_k - seq_q (the
   * last query sees every key, as decoding with a cache needs). */
  int32_t causal;
  /* Nonzero: a sliding window, query i sees keys j with
   * i + seq_k - seq_q - window_left <= j <= i + seq_k - seq_q + window_right;
   * -1 leaves that side unbounded. Combined with causal, the tighter bound wins. */
  int32_t has_window;
  int64_t window_left;
  int64_t window_right;
  /* > 0: scores become softcap * tanh(score / softcap) (after scaling, before ALiBi and the
   * mask). 0: none. */
  float softcap;
  /* Optional (NULL = none) per-query-head ALiBi slopes, float32 [heads_q]: the score of key j
   * for query i gets -slope * |i + seq_k - seq_q - j|. */
  const sattn_tensor* alibi_slopes;
  /* Optional additive mask, f32/f16/bf16 [batch or 1, heads_q or 1, seq_q, seq_k], added to
   * the scores; -inf hides a key. Extent 1 (or stride 0) broadcasts. */
  const sattn_tensor* mask;
  /* Optional per-query-head sink logits, float32 [heads_q] (natural units, not scaled): one
   * extra logit per row that joins the softmax denominator and carries no value, so rows can
   * put weight "nowhere". lse includes it. */
  const sattn_tensor* sinks;
  /* Optional (NULL = all keys) per-sequence key counts, int32 [batch]: sequence b attends to
   * keys [0, seqused_k[b]) of its cache, 0 <= seqused_k[b] <= the cache length, so one call
   * serves a batch of sequences with different fills. Masks align to seqused_k[b] (the last
   * query of sequence b sees key seqused_k[b] - 1). A sequence with 0 keys gets out = 0,
   * lse = -inf. */
  const sattn_tensor* seqused_k;
  /* Optional paged KV cache, int32 [batch, max_pages]: k and v are then
   * [num_pages, page_size, heads_kv, head_dim(_v)] (any page_size >= 1), and key j of sequence
   * b is row j % page_size of page block_table[b, j / page_size]. The cache length is
   * max_pages * page_size; only the entries of pages holding used keys are read, and each must
   * be in [0, num_pages). */
  const sattn_tensor* block_table;
  /* Nonzero: P.V in f32 where a native CPU kernel would round the probabilities P to the
   * inputs' type (bf16: relative error up to 2^-8 per weight, about 1e-3 of the output; f16:
   * 2^-11, about 2e-4; see docs/performance.md), for the f32 kernel's accuracy at part of the
   * native kernel's speed. Appended in the second version of this struct. */
  int32_t f32_pv;
  /* The scales of a quantized k and v (appended in the third version of this struct): required
   * when k.dtype (v.dtype) is SATTN_DTYPE_I8, SATTN_DTYPE_I4 or SATTN_DTYPE_FP8_E4M3, and NULL
   * otherwise. K and V may use different formats. See sattn_dtype for the formats' bytes.
   *  - I8, I4: f16 or f32, laid out like k (v) with the last dimension head_dim / G:
   *    [batch, seq_k, heads_kv, head_dim / G], paged [num_pages, page_size, heads_kv,
   *    head_dim / G]. G, the group size, is head_dim / k_scales.shape[3]; it must divide
   *    head_dim (head_dim_v for v_scales) and, for I4, be even. Entry [.., g] scales channels
   *    [g G, (g + 1) G) of the same row. Any strides; the fast decoding kernels read them in
   *    place when each stride is the cache's stride divided by G and G is a power of two (the
   *    dense layouts, contiguous or paged), other layouts take a slower path. A NaN scale acts as
   *    a NaN in its keys (the rows that see them become NaN).
   *  - FP8_E4M3: float32 [heads_kv] (a scale per kv head) or [1] (one for the tensor), each
   *    finite and >= 0.
   * Scores and outputs are computed in f32 on the dequantized values (q * scale), as accurate
   * as an f32 cache holding those values. */
  const sattn_tensor* k_scales;
  const sattn_tensor* v_scales;
  /* Nonzero (appended in the fourth version of this struct): a faster, approximate Q.K^T over
   * an I4 k, as llama.cpp's quantized caches take it. Each query row is rounded to int8 (one
   * scale per row and kv head: max |q| / 127, q / scale rounded to nearest even), and its
   * products with the cache's integers are summed exactly in int32 by integer dot-product
   * instructions (AVX512-VNNI's vpdpbusd; on AVX2, vpmaddubsw and vpmaddwd), each group's sum
   * then meeting its scale in f32. The rounding of q adds, per score, up to half a step of q
   * (max |q| / 254) times sum |k|, which measured nothing visible beside the error of the I4
   * cache itself (docs/performance.md). It applies where decoding streams the cache (one or
   * four query rows per kv head, head_dim a multiple of 128, group scales read in place) on
   * CPUs that have the instructions; elsewhere (I8 and FP8 caches included: their exact scores
   * measured as fast), and with 0 (the default), the scores are the exact path's, within f32
   * rounding of the dequantized cache's. */
  int32_t int8_queries;
  /* Packed variable-length batches (appended in the fifth version of this struct), as
   * FlashAttention's varlen API (cu_seqlens_q, cu_seqlens_k), vLLM's query_start_loc and
   * FlashInfer lay them out: the sequences stand end to end instead of padded to one length.
   *  - cu_seqlens_q: optional (NULL = not packed) int32 [batch + 1], the prefix sums of the
   *    query lengths: cu_seqlens_q[0] = 0, non-decreasing, cu_seqlens_q[batch] = total_q.
   *    q and out are then [1, total_q, heads_q, head_dim(_v)] and lse [1, heads_q, total_q];
   *    sequence b's queries are rows [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of them. A
   *    sequence of 0 queries is allowed (nothing is written for it).
   *  - cu_seqlens_k: optional (NULL = k and v not packed) int32 [batch + 1], likewise for the
   *    keys: k and v are then [1, total_k, heads_kv, head_dim(_v)] (and quantized scales laid
   *    out like them) and sequence b's keys are rows [cu_seqlens_k[b], cu_seqlens_k[b + 1]).
   *    Requires cu_seqlens_q (its length must equal cu_seqlens_q's); excludes block_table.
   *  - With cu_seqlens_q alone, k and v are either paged (block_table [batch, max_pages], whose
   *    shape[0] is then the batch and must be cu_seqlens_q's length - 1) or one dense cache per
   *    sequence, [batch, seq_k, heads_kv, head_dim(_v)].
   * Everything else applies per sequence, with seq_q(b) and seq_k(b) its own lengths: causal
   * stays bottom-right aligned per sequence (query i of sequence b, counted from the
   * sequence's first query, sees keys j <= i + seq_k(b) - seq_q(b), j counted from its first
   * key), and so do the window and ALiBi's distance. seqused_k [batch] still limits sequence
   * b to its first seqused_k[b] keys (at most its packed length, or the cache length) and the
   * alignment follows it. A sequence with 0 keys gets out = 0 and lse = -inf (or the sink's
   * logit). mask must be NULL with cu_seqlens_q: a [batch, heads, seq_q, seq_k] mask has no
   * meaning for sequences of different lengths. Both views must be int32, rank 1, on the
   * call's device; a batch of sequences gives each the result of its own call. */
  const sattn_tensor* cu_seqlens_q;
  const sattn_tensor* cu_seqlens_k;
} sattn_attention_options;

/* Exact softmax attention: out = softmax(scale * q k^T + bias) v, streamed over key tiles with
 * the online softmax (never materialising seq_q x seq_k scores).
 *   q   [batch, seq_q, heads_q, head_dim]     f32, f16 or bf16
 *   k   [batch, seq_k, heads_kv, head_dim]    f32, f16, bf16, or a quantized format with
 *                                             options->k_scales (paged: see block_table)
 *   v   [batch, seq_k, heads_kv, head_dim_v]  likewise, with options->v_scales (head_dim_v may
 *                                             differ)
 *   out [batch, seq_q, heads_q, head_dim_v]   f32, f16 or bf16 (may differ from q)
 *   lse [batch, heads_q, seq_q] float32, natural log; optional (NULL)
 * heads_q must be a multiple of heads_kv (GQA; heads_kv = 1 is MQA); query head h reads kv
 * head h / (heads_q / heads_kv). head_dim is 1..576 and head_dim_v 1..512 (MLA's widths, below);
 * larger ones are refused (SATTN_ERR_INVALID_ARGUMENT naming q.shape[3] or v.shape[3]; the CUDA
 * backend covers head_dim 64, 128 and 256 and returns SATTN_ERR_UNSUPPORTED for others). Any
 * strides.
 * The state is float32 whatever the dtypes. A row that sees no key gets out = 0 and
 * lse = -inf (or the sink's logit when sinks are given), never NaN.
 * Non-finite inputs. A row sees the keys its causal mask and window allow, below seqused_k[b],
 * and not set to -inf by the mask; its score for such a key is scale * q.k after softcap, ALiBi
 * and the mask. A NaN or +inf score makes the row's out and lse NaN (so does a NaN anywhere in
 * the row's q, when it sees any key). A -inf score (from an infinite q or k) weighs 0, though a
 * NaN or infinite v of that key may still reach out. A NaN or infinite v of a key the row sees
 * with nonzero weight makes out non-finite where it appears; lse is unaffected. Keys a row does
 * not see never affect it, whatever q.k, k and v hold there; pages the block table does not
 * name for a sequence's used keys are never read.
 * out may be exactly the same view as q (in place); no other overlap between out, lse and the
 * inputs is allowed (inputs may overlap each other). Results are bitwise identical for any thread
 * count. options may be NULL.
 * V inside K (multi-head latent attention after weight absorption: DeepSeek-V2/V3, Kimi K2): v
 * may be a view of the leading channels of k's own rows, the same data pointer, dtype and
 * strides with a smaller shape[3] (and, quantized, v_scales the same view of k_scales). The
 * kernels then read each cached row once for both: converted K tiles serve as V tiles, and
 * decoding in place finds V in the lines the scores loaded. For a cache of one latent kv head,
 * 512 latent + 64 rotary channels a row, and 128 absorbed query heads of 576 channels:
 *     int64_t kv_shape[4] = {batch, seq_k, 1, 576};
 *     sattn_tensor k = sattn_tensor_contiguous(cache, SATTN_DTYPE_BF16, 4, kv_shape);
 *     sattn_tensor v = k;
 *     v.shape[3] = 512;             (the first 512 channels of every row, k's strides)
 *     q [batch, 1, 128, 576], out [batch, 1, 128, 512]; options->scale = 1/sqrt(192), the
 *     un-absorbed head's width (128 + 64).
 * Decoding (seq_q up to 16) takes a path that packs the query heads of a kv head into one
 * tile and splits long caches into chunks merged with sattn_merge_states' rule, so each K/V
 * byte is read once per call. */
SATTN_API sattn_status sattn_attention(sattn_context* ctx, const sattn_tensor* q,
                                       const sattn_tensor* k, const sattn_tensor* v,
                                       const sattn_tensor* out, const sattn_tensor* lse,
                                       const sattn_attention_options* options);

/* ------------------------------------------------------------------ quantized KV caches */

typedef struct sattn_quantize_kv_options {
  uint32_t struct_size; /* sizeof(sattn_quantize_kv_options) */
  /* Optional (NULL = 0 for every sequence) int32 [batch]: the key position of sequence b's
   * first new row, so row t of src goes to key positions[b] + t of values and scales. */
  const sattn_tensor* positions;
  /* Optional paged destination, int32 [batch, max_pages], as in sattn_attention_options:
   * values and scales are then [num_pages, page_size, heads_kv, ...] and key j of sequence b
   * is row j % page_size of page block_table[b, j / page_size]. */
  const sattn_tensor* block_table;
} sattn_quantize_kv_options;

/* Quantizes new K or V rows into a cache of a quantized format (values.dtype), the values and
 * scales sattn_attention reads:
 *   src    [batch, n, heads_kv, head_dim]  f32, f16 or bf16, any strides
 *   values [batch, cache_len, heads_kv, head_dim]  SATTN_DTYPE_I8, SATTN_DTYPE_I4 or
 *          SATTN_DTYPE_FP8_E4M3 (paged: [num_pages, page_size, heads_kv, head_dim])
 *   scales I8, I4: f16 or f32 [batch, cache_len, heads_kv, head_dim / G] (paged likewise),
 *          written: each group's max |x| / 127 (I8) or / 7 (I4), rounded to nearest even in
 *          the scales' dtype (saturating at its largest finite value); a group of zeros gets 0.
 *          FP8_E4M3: float32 [heads_kv] or [1], read: each finite and > 0.
 * Each element becomes q = x / scale (in f32, with the scale as stored) rounded to nearest
 * even: for I8 and I4 an integer saturated to [-127, 127] or [-7, 7] (a scale of 0 gives 0),
 * for FP8 the nearest E4M3 saturated to [-448, 448]. Row t of sequence b goes to key
 * positions[b] + t, which must be below cache_len (max_pages * page_size when paged), through
 * the block table's pages when paged. Deterministic: the same bytes for any thread count.
 * A NaN or infinite element of src is an error naming its index, with nothing written (a
 * scale is never NaN). values and scales must not overlap src, each other or themselves.
 * options may be NULL. */
SATTN_API sattn_status sattn_quantize_kv(sattn_context* ctx, const sattn_tensor* src,
                                         const sattn_tensor* values, const sattn_tensor* scales,
                                         const sattn_quantize_kv_options* options);

/* ------------------------------------------------------------------ merging partial results */

/* Merges S partial attention results over disjoint sets of keys into the result over their
 * union (the exact merge of online-softmax states, in log-sum-exp form; see docs/design.md):
 *     lse = log(sum_i exp(lse_i)),   out = sum_i exp(lse_i - lse) * o_i.
 * o_parts[i]: [batch, seq, heads, head_dim], any dtype (they may differ);
 * lse_parts[i]: [batch, heads, seq] float32, natural log. lse_i = -inf marks an empty part (the
 * identity): its o_i is never read, so it may hold garbage. If every part is empty the row gets
 * out = 0 and lse = -inf. A NaN lse makes that row NaN.
 * out: [batch, seq, heads, head_dim], any dtype; lse_out: optional (NULL), [batch, heads, seq]
 * float32. out may be exactly the same view as one o_parts[i] (in-place merge), and lse_out as
 * one lse_parts[i]; any other overlap is an error. num_parts may be 0 (the result is the
 * identity). */
SATTN_API sattn_status sattn_merge_states(sattn_context* ctx, int32_t num_parts,
                                          const sattn_tensor* o_parts,
                                          const sattn_tensor* lse_parts, const sattn_tensor* out,
                                          const sattn_tensor* lse_out);

/* ------------------------------------------------------------------ softmax */

typedef struct sattn_softmax_options {
  uint32_t struct_size; /* sizeof(sattn_softmax_options) */
  /* Scores are divided by it. 0 means 1; otherwise finite and at least FLT_MIN (1.2e-38). */
  float temperature;
} sattn_softmax_options;

/* Softmax over the last axis: out[r, j] = exp(in[r, j] / T) / sum_i exp(in[r, i] / T), by the
 * two-pass online softmax (the state (m, l) in one read, the output in a second).
 * in: [n] or [rows, n], f32, f16 or bf16, any strides. out: the same shape, f32 or in's dtype;
 * out may be exactly in (in place); any other overlap is an error. options may be NULL.
 * Computed in f32 whatever the dtypes, from differences of scores, so no score overflows
 * (scores near 100 in f32, above 12 from f16, or near 1e30 are as accurate as small ones).
 * -inf scores get probability 0; a row of only -inf gets all zeros. A row holding a NaN or
 * +inf is all NaN; other rows are unaffected. Results are the same bytes for any thread count. */
SATTN_API sattn_status sattn_softmax(sattn_context* ctx, const sattn_tensor* in,
                                     const sattn_tensor* out, const sattn_softmax_options* options);

/* Log-softmax over the last axis: out[r, j] = in[r, j] / T - log(sum_i exp(in[r, i] / T)).
 * Same views, options and rules as sattn_softmax; -inf scores give -inf, and a row of only
 * -inf gives -inf everywhere. */
SATTN_API sattn_status sattn_log_softmax(sattn_context* ctx, const sattn_tensor* in,
                                         const sattn_tensor* out,
                                         const sattn_softmax_options* options);

/* Fused softmax + top-k (Milakov and Gimelshein): for each row, in one read of the scores, the
 * k largest scores' indices and their probabilities under the softmax of the whole row, and the
 * row's log-sum-exp.
 * in: [n] or [rows, n], f32, f16 or bf16, any strides, n < 2^31. k: 1 <= k <= n, and at most
 * 1024 (beyond that: SATTN_ERR_UNSUPPORTED).
 * indices: [k] or [rows, k] int32; probs: the same shape, float32. Each row is sorted by
 * descending score (so descending probability); equal scores come by lower index, so the
 * result is unique. lse: optional (NULL), float32 [rows] ([1] for a 1-D in), natural log of
 * sum_i exp(in[r, i] / T).
 * A row of only -inf gives probabilities 0 (indices 0..k-1) and lse = -inf. A row holding a NaN
 * or +inf gets indices -1 and NaN probabilities and lse; other rows are unaffected. No output
 * may overlap another or in. Results are the same bytes for any thread count. */
SATTN_API sattn_status sattn_softmax_topk(sattn_context* ctx, const sattn_tensor* in, int32_t k,
                                          const sattn_tensor* indices, const sattn_tensor* probs,
                                          const sattn_tensor* lse,
                                          const sattn_softmax_options* options);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* STREAMATTN_STREAMATTN_H_ */
