// Flash attention forward in the FlashAttention-2 manner on tensor cores (mma.sync m16n8k16, f16
// or bf16 in, f32 accumulation): 4 warps own 64 rows, 16 each, with O in registers. Per tile of
// BN keys (K, V double-buffered in shared memory by cp.async, fragments by ldmatrix): S = Q K^T,
// scores in log2 units (log2(e) folded into the scale), one exp2(m_old - m_new) rescale per row,
// O += P V with P straight from the S accumulators; one division per row at the end.
// Cost: 4 * rows * keys * D flops; K and V read once per block of 64 rows.
#ifndef STREAMATTN_CUDA_FLASH_ATTENTION_KERNEL_CUH_
#define STREAMATTN_CUDA_FLASH_ATTENTION_KERNEL_CUH_

#include <cmath>

#include "cuda/cuda_common.cuh"
#include "cuda/flash_attention.cuh"

namespace streamattn {
namespace cuda {

template <typename T>
struct Elem;

template <>
struct Elem<__half> {
  static __device__ __forceinline__ uint32_t Pack(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
  static __device__ __forceinline__ __half From(float x) { return __float2half_rn(x); }
  static __device__ __forceinline__ float To(__half x) { return __half2float(x); }
  static __device__ __forceinline__ bool NonFinite(uint16_t bits) {
    return (bits & 0x7c00u) == 0x7c00u;
  }
  static __device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

template <>
struct Elem<__nv_bfloat16> {
  static __device__ __forceinline__ uint32_t Pack(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
  static __device__ __forceinline__ __nv_bfloat16 From(float x) { return __float2bfloat16_rn(x); }
  static __device__ __forceinline__ float To(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __device__ __forceinline__ bool NonFinite(uint16_t bits) {
    return (bits & 0x7f80u) == 0x7f80u;
  }
  static __device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

// Four 8x8 b16 matrices from shared memory, lanes 8i..8i+7 giving the row addresses of matrix
// i; lane l receives row l/4, columns 2(l%4) and 2(l%4)+1 of each (of each transposed, with
// Trans): exactly the mma.sync A and B fragments.
__device__ __forceinline__ void LoadMatrices(const void* row, uint32_t (&r)[4]) {
  const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// 16 bytes from global to shared memory without passing through registers; `bytes` 0 writes
// zeros and reads nothing. Completion: CommitCopies, then WaitCopies<pending groups allowed>.
__device__ __forceinline__ void CopyAsync(void* dst, const void* src, int bytes) {
  const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(src),
               "r"(bytes));
}
__device__ __forceinline__ void CommitCopies() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void WaitCopies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void LoadMatricesTrans(const void* row, uint32_t (&r)[4]) {
  const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// Keys per tile: 64, or 32 at head_dim 256 to keep shared memory at 71 KB and O in registers.
template <int D>
__host__ __device__ constexpr int FlashKeysPerTile() {
  return D >= 256 ? 32 : 64;
}

template <typename T, int D>
__host__ __device__ constexpr int FlashSharedBytes() {
  constexpr int kBn = FlashKeysPerTile<D>();
  return ((kFlashRows + 4 * kBn) * (D + 8) + kFlashRows * kBn) * static_cast<int>(sizeof(T));
}

template <typename T, int D>
__global__ void __launch_bounds__(kFlashThreads) FlashKernel(const FlashParams p) {
  constexpr int BM = kFlashRows, BN = FlashKeysPerTile<D>();
  // Rows padded by 16 bytes: the 8 rows an ldmatrix reads fall in distinct banks.
  constexpr int LD = D + 8;
  extern __shared__ __align__(16) unsigned char smem[];
  // Q [BM][LD], two buffers of K [BN][LD] and V [BN][LD] (the next tile's copies fly while this
  // one is computed), and P [BM][BN] for the slow path.
  T* qs = reinterpret_cast<T*>(smem);
  T* ps = qs + BM * LD + 4 * BN * LD;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;  // mma fragment coordinates

  const int64_t slot = blockIdx.y;  // a query head (pack 1) or a kv head (pack = group)
  const int64_t b = blockIdx.z / p.num_splits;
  const int64_t split = blockIdx.z % p.num_splits;
  // The last rows first: under a causal mask they have the most keys, so they start earliest.
  const int64_t r0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * BM;
  const int64_t rows = p.seq_q * p.pack;
  const int64_t seq_k = p.seqused_k != nullptr ? p.seqused_k[b * p.seqused_stride] : p.seq_k;
  const int64_t split_lo = split * p.split_keys;
  const int64_t split_hi = min(seq_k, split_lo + p.split_keys) - 1;  // inclusive
  const int64_t kvh = slot * p.pack / p.group;

  // Keys of query i, inclusive, within this split (see VisibleKeys in lib/core).
  auto lo_of = [&](int64_t i) {
    const int64_t diag = i + seq_k - p.seq_q;
    return p.window_left >= 0 ? max(split_lo, diag - p.window_left) : split_lo;
  };
  auto hi_of = [&](int64_t i) {
    const int64_t diag = i + seq_k - p.seq_q;
    return p.window_right >= 0 ? min(split_hi, diag + p.window_right) : split_hi;
  };
  const int64_t i_first = r0 / p.pack, i_last = (min(r0 + BM, rows) - 1) / p.pack;
  const int64_t block_lo = lo_of(i_first), block_hi = hi_of(i_last);  // keys any row sees
  const int64_t all_lo = lo_of(i_last), all_hi = hi_of(i_first);      // keys every row sees

  for (int c = threadIdx.x; c < BM * D / 8; c += kFlashThreads) {
    const int r = c / (D / 8), col = c % (D / 8) * 8;
    const int64_t row = r0 + r;
    const T* src = static_cast<const T*>(p.q);  // padding rows: zeros, nothing read
    if (row < rows) {
      const int64_t i = row / p.pack, h = slot * p.pack + row % p.pack;
      src += b * p.q_strides[0] + i * p.q_strides[1] + h * p.q_strides[2] + col;
    }
    CopyAsync(qs + r * LD + col, src, row < rows ? 16 : 0);
  }

  // Queues the copies of the tile at key n0 into buffer `buffer`; keys no row sees (past
  // block_hi) become zeros and are never read.
  auto copy_tile = [&](int64_t n0, int buffer) {
    T* ks = qs + BM * LD + buffer * 2 * BN * LD;
    T* vs = ks + BN * LD;
    for (int c = threadIdx.x; c < BN * D / 8; c += kFlashThreads) {
      const int r = c / (D / 8), col = c % (D / 8) * 8;
      const int64_t key = n0 + r;
      const T* k_src = static_cast<const T*>(p.k);
      const T* v_src = static_cast<const T*>(p.v);
      if (key <= block_hi) {
        int64_t base_k, base_v;
        if (p.block_table != nullptr) {
          const int64_t page =
              p.block_table[b * p.table_strides[0] + key / p.page_size * p.table_strides[1]];
          const int64_t in_page = key % p.page_size;
          base_k = page * p.k_strides[0] + in_page * p.k_strides[1];
          base_v = page * p.v_strides[0] + in_page * p.v_strides[1];
        } else {
          base_k = b * p.k_strides[0] + key * p.k_strides[1];
          base_v = b * p.v_strides[0] + key * p.v_strides[1];
        }
        k_src += base_k + kvh * p.k_strides[2] + col;
        v_src += base_v + kvh * p.v_strides[2] + col;
      }
      const int bytes = key <= block_hi ? 16 : 0;
      CopyAsync(ks + r * LD + col, k_src, bytes);
      CopyAsync(vs + r * LD + col, v_src, bytes);
    }
  };
  if (block_lo <= block_hi) copy_tile(block_lo, 0);
  CommitCopies();  // Q and the first tile

  int64_t lo[2], hi[2];  // this thread's rows: g and g + 8 of its warp's 16
  for (int rr = 0; rr < 2; ++rr) {
    const int64_t row = r0 + warp * 16 + g + 8 * rr;
    lo[rr] = row < rows ? lo_of(row / p.pack) : 1;
    hi[rr] = row < rows ? hi_of(row / p.pack) : 0;
  }
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  float o[D / 8][4];
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;

  int buffer = 0;
  for (int64_t n0 = block_lo; n0 <= block_hi; n0 += BN, buffer ^= 1) {
    const bool masked = n0 < all_lo || n0 + BN - 1 > all_hi;
    T* ks = qs + BM * LD + buffer * 2 * BN * LD;
    T* vs = ks + BN * LD;
    if (n0 + BN <= block_hi) {  // the next tile, into the other buffer
      copy_tile(n0 + BN, buffer ^ 1);
      CommitCopies();
      WaitCopies<1>();  // this tile's copies (this thread's) have landed
    } else {
      WaitCopies<0>();
    }
    int nonfinite = 0;
    if (masked) {  // non-finite values in V: this thread checks the chunks it copied
      for (int c = threadIdx.x; c < BN * D / 8; c += kFlashThreads) {
        const uint4 x = *reinterpret_cast<const uint4*>(vs + c / (D / 8) * LD + c % (D / 8) * 8);
        const uint16_t* bits = reinterpret_cast<const uint16_t*>(&x);
#pragma unroll
        for (int e = 0; e < 8; ++e) nonfinite |= Elem<T>::NonFinite(bits[e]);
      }
    }
    // `masked` is the same for the whole block, so both branches are taken by every thread.
    if (masked) {
      nonfinite = __syncthreads_or(nonfinite);
    } else {
      __syncthreads();
    }
    // A warp whose 16 rows are all padding (decode packs few rows) has nothing to compute.
    if (r0 + warp * 16 < rows) {
      float s[BN / 8][4];
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
      // Lane l addresses row l % 16 (Q) or l % 8 (K), column block l / 16 or (l / 8) % 2.
      const T* q_row = qs + (warp * 16 + lane % 16) * LD + lane / 16 * 8;
      const T* k_row = ks + (lane / 16 * 8 + lane % 8) * LD + lane / 8 % 2 * 8;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t a[4];
        LoadMatrices(q_row + kk * 16, a);
#pragma unroll
        for (int j = 0; j < BN / 8; j += 2) {  // B fragments of key groups j and j + 1
          uint32_t b[4];
          LoadMatrices(k_row + j * 8 * LD + kk * 16, b);
          Elem<T>::Mma(s[j], a, b[0], b[1]);
          Elem<T>::Mma(s[j + 1], a, b[2], b[3]);
        }
      }

      // Scores in log2 units; hidden keys -inf whatever q.k was (NaN included).
      float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int rr = e / 2;
          float x = s[j][e];
          x = p.softcap_log2 > 0.0f ? p.softcap_log2 * tanhf(x * p.score_mul) : x * p.score_mul;
          const int64_t key = n0 + j * 8 + 2 * t + (e & 1);
          if (masked && (key < lo[rr] || key > hi[rr])) x = -INFINITY;
          s[j][e] = x;
          tile_max[rr] = fmaxf(tile_max[rr], x);  // ignores NaN: it reaches l and O through p
        }
      }
      float m_ref[2];
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        tile_max[rr] = fmaxf(tile_max[rr], __shfl_xor_sync(0xffffffffu, tile_max[rr], 1));
        tile_max[rr] = fmaxf(tile_max[rr], __shfl_xor_sync(0xffffffffu, tile_max[rr], 2));
        const float m_new = fmaxf(m[rr], tile_max[rr]);
        m_ref[rr] = m_new == -INFINITY ? 0.0f : m_new;  // no key yet: avoid -inf - -inf
        const float alpha = exp2f(m[rr] - m_ref[rr]);   // the one rescale per row per tile
        m[rr] = m_new;
        l[rr] *= alpha;
#pragma unroll
        for (int dn = 0; dn < D / 8; ++dn) {
          o[dn][2 * rr] *= alpha;
          o[dn][2 * rr + 1] *= alpha;
        }
      }
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[j][e] = exp2f(s[j][e] - m_ref[e / 2]);
          l[e / 2] += s[j][e];
        }
      }

      if (nonfinite) {
        // A key hidden from some rows holds a non-finite v: on tensor cores its 0 weight would
        // still give 0 * inf = NaN. Rare, so this tile's P V is summed on the CUDA cores,
        // skipping each row's hidden keys.
        T* pw = ps + warp * 16 * BN;  // this warp's P [16][BN], rounded as the mma path rounds it
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            pw[(g + 8 * (e / 2)) * BN + j * 8 + 2 * t + (e & 1)] = Elem<T>::From(s[j][e]);
          }
        }
        __syncwarp();
        for (int kk = 0; kk < BN; ++kk) {  // the key loop outside: o keeps constant indices
          const int64_t key = n0 + kk;
          const bool seen[2] = {lo[0] <= key && key <= hi[0], lo[1] <= key && key <= hi[1]};
          const float w[2] = {Elem<T>::To(pw[g * BN + kk]), Elem<T>::To(pw[(g + 8) * BN + kk])};
#pragma unroll
          for (int dn = 0; dn < D / 8; ++dn) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const float x = Elem<T>::To(vs[kk * LD + dn * 8 + 2 * t + (e & 1)]);
              if (seen[e / 2]) o[dn][e] += w[e / 2] * x;
            }
          }
        }
      } else {
        // Lane l addresses key row l % 16 (l / 8 % 2 selects the upper 8), dim block l / 16.
        const T* v_row = vs + (lane / 8 % 2 * 8 + lane % 8) * LD + lane / 16 * 8;
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
          const uint32_t a[4] = {Elem<T>::Pack(s[2 * kk][0], s[2 * kk][1]),
                                 Elem<T>::Pack(s[2 * kk][2], s[2 * kk][3]),
                                 Elem<T>::Pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                 Elem<T>::Pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
          for (int dn = 0; dn < D / 8; dn += 2) {  // B fragments of dims dn and dn + 1, transposed
            uint32_t b[4];
            LoadMatricesTrans(v_row + kk * 16 * LD + dn * 8, b);
            Elem<T>::Mma(o[dn], a, b[0], b[1]);
            Elem<T>::Mma(o[dn + 1], a, b[2], b[3]);
          }
        }
      }
    }
    __syncthreads();  // this buffer is free for the copies the next iteration queues
  }
  WaitCopies<0>();  // Q's copies, when no tile was read

  // Epilogue: l is summed over the 4 threads of a row, then one division per row.
  constexpr float kLn2 = 0.69314718055994531f;
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 1);
    l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 2);
    const int64_t row = r0 + warp * 16 + g + 8 * rr;
    if (row >= rows) continue;
    const int64_t i = row / p.pack, h = slot * p.pack + row % p.pack;
    const bool empty = l[rr] == 0.0f;  // no key, or only -inf scores: o = 0, lse = -inf
    const float inv = empty ? 0.0f : 1.0f / l[rr];
    const float m_ref = m[rr] == -INFINITY ? 0.0f : m[rr];
    const float lse = empty ? -INFINITY : (m_ref + log2f(l[rr])) * kLn2;
    if (p.num_splits == 1) {
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t d = dn * 8 + 2 * t + e;
          StoreFromFloat(p.out, p.out_dtype,
                         b * p.out_strides[0] + i * p.out_strides[1] + h * p.out_strides[2] +
                             d * p.out_strides[3],
                         empty ? 0.0f : o[dn][2 * rr + e] * inv);
        }
      }
      if (p.lse != nullptr && t == 0) {
        p.lse[b * p.lse_strides[0] + h * p.lse_strides[1] + i * p.lse_strides[2]] = lse;
      }
    } else {
      float* po = p.part_o + (((split * p.batch + b) * p.seq_q + i) * p.heads_q + h) * D;
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn) {
        po[dn * 8 + 2 * t] = empty ? 0.0f : o[dn][2 * rr] * inv;
        po[dn * 8 + 2 * t + 1] = empty ? 0.0f : o[dn][2 * rr + 1] * inv;
      }
      if (t == 0) p.part_lse[((split * p.batch + b) * p.heads_q + h) * p.seq_q + i] = lse;
    }
  }
}

template <typename T, int D>
cudaError_t LaunchFlash(const FlashParams& p, cudaStream_t stream) {
  constexpr int kShared = FlashSharedBytes<T, D>();
  const cudaError_t error =
      cudaFuncSetAttribute(FlashKernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, kShared);
  if (error != cudaSuccess) return error;
  const int64_t rows = p.seq_q * p.pack;
  const dim3 grid(static_cast<unsigned>((rows + kFlashRows - 1) / kFlashRows),
                  static_cast<unsigned>(p.heads_q / p.pack),
                  static_cast<unsigned>(p.batch * p.num_splits));
  FlashKernel<T, D><<<grid, kFlashThreads, kShared, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace streamattn

#endif  // STREAMATTN_CUDA_FLASH_ATTENTION_KERNEL_CUH_
