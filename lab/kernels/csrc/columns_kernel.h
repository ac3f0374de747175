// Column attention kernels (forward and backward) in plain C++, free of torch headers.
//
// Shapes (GQA, G = H / KV; query head h reads KV head h / G), all row-major and contiguous:
//     q, out, dout, dq     (B, H,  T, D)
//     k, v, dk, dv         (B, KV, T, D)
//     P, dS                (B, H,  T, C)   softmax probabilities and d(loss)/d(logit)
//
// Column c at query t reads distance lo = lo[c] (masked when t < lo).  With f = frac[c] its key
// is k[t−lo] + f·(k[t−lo−1] − k[t−lo]) for t > lo and k[0] at t = lo (the second row clamps at
// position 0); values alike.  A column with f = 0 reads one row.  One softmax over the C columns
// per query; a query with no valid column gets zero probabilities and a zero output.  Nothing of
// size (T, C, D) or (T, T) is built: rows are read in place and blended in registers.
//
// Work is split into tasks handed to a caller's `par(n_tasks, fn(begin, end))`: forward tasks
// are (batch, KV head, block of kBlock queries).  Two implementations of each direction:
//
// * generic (any dtype, head dim and group size; float64 for gradcheck): the backward runs in
//   two passes so that no two tasks write one row — pass 1 (query-centric) gives dS and dq;
//   pass 2 (key-centric) gives dk, dv and d(frac): key row s is read by query s+lo through the
//   lo tap (weight 1−f; 1 at s = 0, where the hi row clamps) and by query s+lo+1 through the hi
//   tap (weight f);
// * vectorised (float, D a multiple of the vector width, G in {1, 2, 4, 8}; GCC / Clang vector
//   extensions): a query's G heads are processed together, keys / values are read once for
//   them and accumulators stay in registers; the backward is one query-centric pass that
//   scatters each column's key / value gradient to the rows it read.  A task owns a chunk of
//   queries [t0, t1) and the dk/dv rows [t0, t1); rows before t0 (at most the largest distance
//   + 1) go to a per-task halo buffer, added in chunk order afterwards — no atomics, no races.
//
// d(frac) is summed per task in double and reduced by the caller in task order, so results are
// deterministic for a given thread count.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace fiblab {

constexpr int64_t kBlock = 64;

struct Plan {
  int64_t C = 0;
  std::vector<int64_t> lo;      // distance of each column
  std::vector<double> frac;     // weight of the second (lo + 1) row
  std::vector<uint8_t> grad;    // pass 2: d/dfrac wanted for this column
};

struct Dims {
  int64_t B, H, KV, G, T, D, C, nblk;
};

inline Dims make_dims(int64_t B, int64_t H, int64_t KV, int64_t T, int64_t D, int64_t C) {
  return Dims{B, H, KV, H / KV, T, D, C, (T + kBlock - 1) / kBlock};
}

// How the fused backward splits each (batch, KV head): n chunks of len queries, about four
// tasks a thread for balance (chunks of at least 2·kBlock queries).  A chunk after the first
// scatters into at most `halo` rows before its first query (the largest distance + 1), kept
// in its own buffer: zeroing and adding it back costs ≈4·halo·D operations against
// ≈8·C·G·D a query of the chunk's own work.
struct Chunks {
  int64_t n, len, halo;
};

inline Chunks make_chunks(const Dims& s, const Plan& plan, int64_t threads) {
  int64_t max_lo = 0;
  for (int64_t c = 0; c < plan.C; ++c)
    if (plan.lo[c] < s.T) max_lo = std::max(max_lo, plan.lo[c]);
  const int64_t halo = std::max<int64_t>(1, std::min(s.T, max_lo + 1));
  const int64_t bkv = std::max<int64_t>(1, s.B * s.KV);
  const int64_t want = (4 * std::max<int64_t>(threads, 1) + bkv - 1) / bkv;
  const int64_t n = std::max<int64_t>(1, std::min(want, s.T / (2 * kBlock)));
  const int64_t len = std::max<int64_t>(1, (s.T + n - 1) / n);
  return Chunks{(s.T + len - 1) / len, len, halo};
}

// size of the halo buffer: chunks after the first, 2 (dk, dv) × halo rows × D each
inline int64_t halo_size(const Dims& s, const Chunks& ch) {
  return s.B * s.KV * (ch.n - 1) * 2 * ch.halo * s.D;
}

// adds each task's halo rows into dk, dv (tasks of one (batch, KV head) in order)
template <typename T, typename Par>
void add_halos(T* dk, T* dv, const T* halo_buf, const Dims& s, const Chunks& ch, Par&& par) {
  const int64_t D = s.D, L = ch.halo, Tn = s.T;
  if (ch.n <= 1) return;
  par(s.B * s.KV, [&](int64_t begin, int64_t end) {
    for (int64_t bkv = begin; bkv < end; ++bkv)
      for (int64_t chunk = 1; chunk < ch.n; ++chunk) {
        const int64_t t0 = chunk * ch.len;
        const T* hk = halo_buf + (bkv * (ch.n - 1) + chunk - 1) * 2 * L * D;
        const T* hv = hk + L * D;
        for (int64_t r = std::max<int64_t>(0, t0 - L); r < t0; ++r) {
          const int64_t i = r - (t0 - L);
          T* dkr = dk + (bkv * Tn + r) * D;
          T* dvr = dv + (bkv * Tn + r) * D;
          for (int64_t d = 0; d < D; ++d) {
            dkr[d] += hk[i * D + d];
            dvr[d] += hv[i * D + d];
          }
        }
      }
  });
}

// exp for x ≤ 0 (softmax arguments): Cephes-style range reduction and a degree-6 polynomial
// (≈1 ulp in float), branch-free; double uses std::exp.
inline float exp_nonpos(float x) {
  x = std::max(x, -87.0f);
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(float));
  return p * scale;
}
inline double exp_nonpos(double x) { return std::exp(x); }

// softmax of one row of C logits (−inf = masked) into p; masked entries get exactly 0
template <typename T>
inline void softmax_row(const T* l, T* p, int64_t C) {
  constexpr T ninf = -std::numeric_limits<T>::infinity();
  T m = ninf;
  for (int64_t c = 0; c < C; ++c) m = std::max(m, l[c]);
  if (m == ninf) m = 0;                                   // every column masked
  T sum = 0;
  for (int64_t c = 0; c < C; ++c) {
    const T pc = l[c] == ninf ? T(0) : exp_nonpos(l[c] - m);
    p[c] = pc;
    sum += pc;
  }
  const T inv = sum > T(0) ? T(1) / sum : T(0);
  for (int64_t c = 0; c < C; ++c) p[c] *= inv;
}

// ============================================================================================
// generic kernels: any dtype, D, G
// ============================================================================================
namespace generic {

template <typename T>
inline T dot(const T* a, const T* b, int64_t D) {
  T s = 0;
  for (int64_t i = 0; i < D; ++i) s += a[i] * b[i];
  return s;
}
template <typename T>
inline void axpy(T* y, T a, const T* x, int64_t D) {
  for (int64_t i = 0; i < D; ++i) y[i] += a * x[i];
}
template <typename T>
inline const T* row_at(const T* base, int64_t t, int64_t lo, T f, int64_t D, T* scratch) {
  const T* r = base + (t - lo) * D;
  if (f == T(0) || t == lo) return r;
  for (int64_t i = 0; i < D; ++i) scratch[i] = r[i] + f * (r[i - D] - r[i]);
  return scratch;
}

template <typename T, typename Par>
void forward(const T* q, const T* k, const T* v, T* out, T* P, const Dims& s, const Plan& plan,
             double scale_d, Par&& par) {
  const int64_t G = s.G, C = s.C, Tn = s.T, D = s.D;
  const T scale = T(scale_d);
  par(s.B * s.KV * s.nblk, [&](int64_t begin, int64_t end) {
    std::vector<T> buf(D), lg(G * C);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bkv = task / s.nblk, blk = task % s.nblk;
      const int64_t head0 = (bkv / s.KV) * s.H + (bkv % s.KV) * G;
      const T *kb = k + bkv * Tn * D, *vb = v + bkv * Tn * D;
      for (int64_t t = blk * kBlock; t < std::min(Tn, (blk + 1) * kBlock); ++t) {
        for (int64_t c = 0; c < C; ++c) {
          const int64_t lo = plan.lo[c];
          if (t < lo) {
            for (int64_t g = 0; g < G; ++g) lg[g * C + c] = -std::numeric_limits<T>::infinity();
            continue;
          }
          const T* key = row_at(kb, t, lo, T(plan.frac[c]), D, buf.data());
          for (int64_t g = 0; g < G; ++g)
            lg[g * C + c] = scale * dot(q + ((head0 + g) * Tn + t) * D, key, D);
        }
        for (int64_t g = 0; g < G; ++g) {
          const int64_t h = (head0 + g) * Tn + t;
          softmax_row(&lg[g * C], P + h * C, C);
          std::fill(out + h * D, out + (h + 1) * D, T(0));
        }
        for (int64_t c = 0; c < C; ++c) {
          const int64_t lo = plan.lo[c];
          if (t < lo) continue;
          const T* val = row_at(vb, t, lo, T(plan.frac[c]), D, buf.data());
          for (int64_t g = 0; g < G; ++g) {
            const int64_t h = (head0 + g) * Tn + t;
            axpy(out + h * D, P[h * C + c], val, D);
          }
        }
      }
    }
  });
}

template <typename T, typename Par>
void backward_queries(const T* dout, const T* k, const T* v, const T* P, T* dS, T* dq,
                      const Dims& s, const Plan& plan, double scale_d, Par&& par) {
  const int64_t G = s.G, C = s.C, Tn = s.T, D = s.D;
  const T scale = T(scale_d);
  par(s.B * s.KV * s.nblk, [&](int64_t begin, int64_t end) {
    std::vector<T> buf(D), dp(G * C);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bkv = task / s.nblk, blk = task % s.nblk;
      const int64_t head0 = (bkv / s.KV) * s.H + (bkv % s.KV) * G;
      const T *kb = k + bkv * Tn * D, *vb = v + bkv * Tn * D;
      for (int64_t t = blk * kBlock; t < std::min(Tn, (blk + 1) * kBlock); ++t) {
        for (int64_t c = 0; c < C; ++c) {
          const int64_t lo = plan.lo[c];
          if (t < lo) {
            for (int64_t g = 0; g < G; ++g) dp[g * C + c] = 0;
            continue;
          }
          const T* val = row_at(vb, t, lo, T(plan.frac[c]), D, buf.data());
          for (int64_t g = 0; g < G; ++g)
            dp[g * C + c] = dot(dout + ((head0 + g) * Tn + t) * D, val, D);
        }
        for (int64_t g = 0; g < G; ++g) {
          const int64_t h = (head0 + g) * Tn + t;
          const T* p = P + h * C;
          T sum = 0;
          for (int64_t c = 0; c < C; ++c) sum += p[c] * dp[g * C + c];
          for (int64_t c = 0; c < C; ++c) dS[h * C + c] = p[c] * (dp[g * C + c] - sum);
          std::fill(dq + h * D, dq + (h + 1) * D, T(0));
        }
        for (int64_t c = 0; c < C; ++c) {
          const int64_t lo = plan.lo[c];
          if (t < lo) continue;
          const T* key = row_at(kb, t, lo, T(plan.frac[c]), D, buf.data());
          for (int64_t g = 0; g < G; ++g) {
            const int64_t h = (head0 + g) * Tn + t;
            axpy(dq + h * D, scale * dS[h * C + c], key, D);
          }
        }
      }
    }
  });
}

template <typename T, typename Par>
void backward_keys(const T* dout, const T* q, const T* k, const T* v, const T* P, const T* dS,
                   T* dk, T* dv, double* dfrac_parts, const Dims& s, const Plan& plan,
                   double scale_d, Par&& par) {
  const int64_t G = s.G, C = s.C, Tn = s.T, D = s.D;
  const T scale = T(scale_d);
  par(s.B * s.KV * s.nblk, [&](int64_t begin, int64_t end) {
    std::vector<T> u(D), w(D);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bkv = task / s.nblk, blk = task % s.nblk;
      const int64_t head0 = (bkv / s.KV) * s.H + (bkv % s.KV) * G;
      const T *kb = k + bkv * Tn * D, *vb = v + bkv * Tn * D;
      double* part = dfrac_parts + task * C;
      for (int64_t sk = blk * kBlock; sk < std::min(Tn, (blk + 1) * kBlock); ++sk) {
        T* dkr = dk + (bkv * Tn + sk) * D;
        T* dvr = dv + (bkv * Tn + sk) * D;
        std::fill(dkr, dkr + D, T(0));
        std::fill(dvr, dvr + D, T(0));
        for (int64_t c = 0; c < C; ++c) {
          const int64_t lo = plan.lo[c], t = sk + lo;
          if (t >= Tn) continue;
          const T f = T(plan.frac[c]);
          const T w_lo = (f == T(0) || sk == 0) ? T(1) : T(1) - f;
          for (int64_t g = 0; g < G; ++g) {                       // lo tap: query t
            const int64_t h = (head0 + g) * Tn + t;
            axpy(dkr, w_lo * scale * dS[h * C + c], q + h * D, D);
            axpy(dvr, w_lo * P[h * C + c], dout + h * D, D);
          }
          if ((f == T(0) && !plan.grad[c]) || t + 1 >= Tn) continue;
          std::fill(u.begin(), u.end(), T(0));                   // hi tap: query t+1
          std::fill(w.begin(), w.end(), T(0));
          for (int64_t g = 0; g < G; ++g) {
            const int64_t h = (head0 + g) * Tn + t + 1;
            axpy(u.data(), scale * dS[h * C + c], q + h * D, D);
            axpy(w.data(), P[h * C + c], dout + h * D, D);
          }
          axpy(dkr, f, u.data(), D);
          axpy(dvr, f, w.data(), D);
          if (plan.grad[c]) {                    // query t+1 reads lo row sk+1 and hi row sk
            T acc = 0;
            for (int64_t i = 0; i < D; ++i)
              acc += u[i] * (kb[sk * D + i] - kb[(sk + 1) * D + i]) +
                     w[i] * (vb[sk * D + i] - vb[(sk + 1) * D + i]);
            part[c] += double(acc);
          }
        }
      }
    }
  });
}

}  // namespace generic

// ============================================================================================
// vectorised float kernels (GCC / Clang vector extensions)
// ============================================================================================
#if defined(__GNUC__) && (defined(__clang__) || __GNUC__ >= 12)
#define FIBLAB_HAVE_VEC 1
namespace vec {

#if defined(__AVX512F__)
#define FIBLAB_VW 16
#elif defined(__AVX__)
#define FIBLAB_VW 8
#else
#define FIBLAB_VW 4
#endif
constexpr int VW = FIBLAB_VW;
typedef float vf __attribute__((vector_size(VW * sizeof(float))));
typedef float vf_u __attribute__((vector_size(VW * sizeof(float)), aligned(alignof(float))));
typedef int32_t vi __attribute__((vector_size(VW * sizeof(int32_t))));

inline vf load(const float* p) { return *reinterpret_cast<const vf_u*>(p); }
inline void store(float* p, vf x) { *reinterpret_cast<vf_u*>(p) = x; }
inline vf splat(float a) { return vf{} + a; }

inline float hsum(vf x) {
#if FIBLAB_VW == 16
  x += __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
  x += __builtin_shufflevector(x, x, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
#elif FIBLAB_VW == 8
  x += __builtin_shufflevector(x, x, 4, 5, 6, 7, 0, 1, 2, 3);
#endif
  float s = 0;
  for (int l = 0; l < 4; ++l) s += x[l];
  return s;
}

inline vf vmax(vf a, vf b) { return a > b ? a : b; }

inline float hmax(vf x) {
#if FIBLAB_VW == 16
  x = vmax(x, __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
  x = vmax(x, __builtin_shufflevector(x, x, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11));
#elif FIBLAB_VW == 8
  x = vmax(x, __builtin_shufflevector(x, x, 4, 5, 6, 7, 0, 1, 2, 3));
#endif
  float m = x[0];
  for (int l = 1; l < 4; ++l) m = std::max(m, x[l]);
  return m;
}

// exp_nonpos, lane-wise (the same polynomial as the scalar one)
inline vf vexp_nonpos(vf x) {
  const vf lower = splat(-87.0f);
  x = x < lower ? lower : x;
  const vf magic = splat(12582912.0f);                    // 1.5·2^23: round to nearest
  const vf n = (x * splat(1.44269504088896341f) + magic) - magic;
  vf r = x - n * splat(0.693359375f);
  r = r + n * splat(2.12194440e-4f);
  vf p = splat(1.9875691500e-4f);
  p = p * r + splat(1.3981999507e-3f);
  p = p * r + splat(8.3334519073e-3f);
  p = p * r + splat(4.1665795894e-2f);
  p = p * r + splat(1.6666665459e-1f);
  p = p * r + splat(5.0000001201e-1f);
  p = p * r * r + r + splat(1.0f);
  const vi e = (__builtin_convertvector(n, vi) + 127) << 23;
  return p * reinterpret_cast<const vf&>(e);
}

// softmax of G rows of Cp logits (Cp a multiple of VW, −inf = masked or padding) in place
template <int G>
inline void softmax_rows(float* l, int64_t Cp) {
  const vf ninf = splat(-std::numeric_limits<float>::infinity());
  for (int g = 0; g < G; ++g) {
    float* row = l + g * Cp;
    vf mv = ninf;
    for (int64_t c = 0; c < Cp; c += VW) mv = vmax(mv, load(row + c));
    float m = hmax(mv);
    if (m == -std::numeric_limits<float>::infinity()) m = 0;   // every column masked
    const vf msp = splat(m);
    vf sv = {};
    for (int64_t c = 0; c < Cp; c += VW) {
      const vf x = load(row + c);
      const vf e = vexp_nonpos(x - msp);
      const vi keep = x != ninf;
      const vi ebits = reinterpret_cast<const vi&>(e) & keep;
      const vf p = reinterpret_cast<const vf&>(ebits);
      store(row + c, p);
      sv += p;
    }
    const float sum = hsum(sv);
    const vf inv = splat(sum > 0.0f ? 1.0f / sum : 0.0f);
    for (int64_t c = 0; c < Cp; c += VW) store(row + c, load(row + c) * inv);
  }
}

// out[g] = scale · (sum of the lanes of acc[g]), g < G; with 16 lanes, G ≥ 2 accumulators are
// reduced together by a transposing tree (≈3 shuffles a sum instead of ≈8)
template <int G>
inline void hsums(const vf* acc, float* out, float scale) {
#if FIBLAB_VW == 16
  if constexpr (G % 4 == 0) {
    for (int g0 = 0; g0 < G; g0 += 4) {
      const vf* a = acc + g0;
      const vf p01 = __builtin_shufflevector(a[0], a[1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19,
                                             20, 21, 22, 23) +
                     __builtin_shufflevector(a[0], a[1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25,
                                             26, 27, 28, 29, 30, 31);
      const vf p23 = __builtin_shufflevector(a[2], a[3], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19,
                                             20, 21, 22, 23) +
                     __builtin_shufflevector(a[2], a[3], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25,
                                             26, 27, 28, 29, 30, 31);
      vf r = __builtin_shufflevector(p01, p23, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25,
                                     26, 27) +
             __builtin_shufflevector(p01, p23, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29,
                                     30, 31);
      r += __builtin_shufflevector(r, r, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
      r += __builtin_shufflevector(r, r, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
      for (int g = 0; g < 4; ++g) out[g0 + g] = scale * r[4 * g];
    }
    return;
  } else if constexpr (G == 2) {
    vf r = __builtin_shufflevector(acc[0], acc[1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20,
                                   21, 22, 23) +
           __builtin_shufflevector(acc[0], acc[1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27,
                                   28, 29, 30, 31);
    r += __builtin_shufflevector(r, r, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
    r += __builtin_shufflevector(r, r, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
    r += __builtin_shufflevector(r, r, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
    out[0] = scale * r[0];
    out[1] = scale * r[8];
    return;
  }
#endif
  for (int g = 0; g < G; ++g) out[g] = scale * hsum(acc[g]);
}

// the rows a column reads at query t, as NV vectors: one row, or the blend with the row before
template <int NV>
inline void read_row(vf* r, const float* base, int64_t t, int64_t lo, float f, bool two) {
  const float* p = base + (t - lo) * (NV * VW);
  if (two && t > lo) {
    const vf fv = splat(f);
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) {
      const vf a = load(p + j * VW);
      r[j] = a + fv * (load(p - NV * VW + j * VW) - a);
    }
  } else {
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) r[j] = load(p + j * VW);
  }
}

template <int G, int NV, typename Par>
void forward(const float* q, const float* k, const float* v, float* out, float* P,
             const Dims& s, const Plan& plan, double scale_d, Par&& par) {
  constexpr int64_t D = NV * VW;
  const int64_t C = s.C, Tn = s.T;
  const float scale = float(scale_d);
  const int64_t Cp = (C + VW - 1) / VW * VW;
  par(s.B * s.KV * s.nblk, [&](int64_t begin, int64_t end) {
    std::vector<float> lg(G * Cp, -std::numeric_limits<float>::infinity());
    float sc[G];
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bkv = task / s.nblk, blk = task % s.nblk;
      const int64_t head0 = (bkv / s.KV) * s.H + (bkv % s.KV) * G;
      const float *kb = k + bkv * Tn * D, *vb = v + bkv * Tn * D;
      for (int64_t t = blk * kBlock; t < std::min(Tn, (blk + 1) * kBlock); ++t) {
        const float* qt[G];
        for (int g = 0; g < G; ++g) qt[g] = q + ((head0 + g) * Tn + t) * D;
        for (int64_t c = 0; c < C; ++c) {
          const int64_t lo = plan.lo[c];
          if (t < lo) {
            for (int g = 0; g < G; ++g) lg[g * Cp + c] = -std::numeric_limits<float>::infinity();
            continue;
          }
          vf key[NV];
          read_row<NV>(key, kb, t, lo, float(plan.frac[c]), plan.frac[c] != 0);
          vf acc[G];
#pragma GCC unroll 8
          for (int g = 0; g < G; ++g) {
            acc[g] = load(qt[g]) * key[0];
#pragma GCC unroll 16
            for (int j = 1; j < NV; ++j) acc[g] += load(qt[g] + j * VW) * key[j];
          }
          hsums<G>(acc, sc, scale);
          for (int g = 0; g < G; ++g) lg[g * Cp + c] = sc[g];
        }
        for (int g = 0; g < G; ++g)                         // padding: masked
          for (int64_t c = C; c < Cp; ++c) lg[g * Cp + c] = -std::numeric_limits<float>::infinity();
        softmax_rows<G>(lg.data(), Cp);
        for (int g = 0; g < G; ++g)
          std::memcpy(P + ((head0 + g) * Tn + t) * C, &lg[g * Cp], sizeof(float) * C);
        vf o[G][NV] = {};
        for (int64_t c = 0; c < C; ++c) {
          const int64_t lo = plan.lo[c];
          if (t < lo) continue;
          vf val[NV];
          read_row<NV>(val, vb, t, lo, float(plan.frac[c]), plan.frac[c] != 0);
#pragma GCC unroll 8
          for (int g = 0; g < G; ++g) {
            const vf pg = splat(lg[g * Cp + c]);
#pragma GCC unroll 16
            for (int j = 0; j < NV; ++j) o[g][j] += pg * val[j];
          }
        }
        for (int g = 0; g < G; ++g)
          for (int j = 0; j < NV; ++j) store(out + ((head0 + g) * Tn + t) * D + j * VW, o[g][j]);
      }
    }
  });
}

// Backward in one query-centric pass.  Per query t (all G heads of one KV head at once):
// dP = dO·value_c, dS = P ⊙ (dP − Σ P·dP), dq = scale·Σ_c dS_c·key_c, and each column's key and
// value gradients u = scale·Σ_g dS_gc·q_g(t), w = Σ_g P_gc·dO_g(t) are scattered to the rows
// the column read: row t−lo with weight 1−f and row t−lo−1 with weight f (row 0 takes both at
// t = lo), with d/df_c += u·(k[t−lo−1] − k[t−lo]) + w·(v[t−lo−1] − v[t−lo]).  A task owns the
// queries [t0, t1) of one (batch, KV head) and the dk/dv rows [t0, t1); rows before t0 (at
// most `halo` of them) go to the task's private halo buffer, added in task order afterwards.
template <int G, int NV, typename Par>
void backward(const float* dout, const float* q, const float* k, const float* v, const float* P,
              float* dq, float* dk, float* dv, float* halo_buf, double* dfrac_parts,
              const Dims& s, const Plan& plan, const Chunks& ch, double scale_d, Par&& par) {
  constexpr int64_t D = NV * VW;
  const int64_t C = s.C, Tn = s.T, L = ch.halo;
  const float scale = float(scale_d);
  par(s.B * s.KV * ch.n, [&](int64_t begin, int64_t end) {
    std::vector<float> dp(G * C), ds(G * C);
    float sc[G];
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bkv = task / ch.n, chunk = task % ch.n;
      const int64_t head0 = (bkv / s.KV) * s.H + (bkv % s.KV) * G;
      const float *kb = k + bkv * Tn * D, *vb = v + bkv * Tn * D;
      const int64_t t0 = chunk * ch.len, t1 = std::min(Tn, t0 + ch.len);
      float* hk = chunk ? halo_buf + (bkv * (ch.n - 1) + chunk - 1) * 2 * L * D : nullptr;
      float* hv = chunk ? hk + L * D : nullptr;              // rows [t0 − L, t0)
      double* part = dfrac_parts + task * C;
      std::memset(dk + (bkv * Tn + t0) * D, 0, sizeof(float) * (t1 - t0) * D);
      std::memset(dv + (bkv * Tn + t0) * D, 0, sizeof(float) * (t1 - t0) * D);
      if (chunk) std::memset(hk, 0, sizeof(float) * 2 * L * D);
      auto dk_row = [&](int64_t r) {
        return r >= t0 ? dk + (bkv * Tn + r) * D : hk + (r - (t0 - L)) * D;
      };
      auto dv_row = [&](int64_t r) {
        return r >= t0 ? dv + (bkv * Tn + r) * D : hv + (r - (t0 - L)) * D;
      };
      for (int64_t t = t0; t < t1; ++t) {
        const float *qt[G], *ot[G];
        for (int g = 0; g < G; ++g) {
          qt[g] = q + ((head0 + g) * Tn + t) * D;
          ot[g] = dout + ((head0 + g) * Tn + t) * D;
        }
        for (int64_t c = 0; c < C; ++c) {                    // dP
          const int64_t lo = plan.lo[c];
          if (t < lo) {
            for (int g = 0; g < G; ++g) dp[g * C + c] = 0;
            continue;
          }
          vf val[NV];
          read_row<NV>(val, vb, t, lo, float(plan.frac[c]), plan.frac[c] != 0);
          vf acc[G];
#pragma GCC unroll 8
          for (int g = 0; g < G; ++g) {
            acc[g] = load(ot[g]) * val[0];
#pragma GCC unroll 16
            for (int j = 1; j < NV; ++j) acc[g] += load(ot[g] + j * VW) * val[j];
          }
          hsums<G>(acc, sc, 1.0f);
          for (int g = 0; g < G; ++g) dp[g * C + c] = sc[g];
        }
        for (int g = 0; g < G; ++g) {                        // dS
          const float* p = P + ((head0 + g) * Tn + t) * C;
          float sum = 0;
          for (int64_t c = 0; c < C; ++c) sum += p[c] * dp[g * C + c];
          for (int64_t c = 0; c < C; ++c) ds[g * C + c] = p[c] * (dp[g * C + c] - sum);
        }
        vf a[G][NV] = {};
        for (int64_t c = 0; c < C; ++c) {                    // dq, and the scatter to dk, dv
          const int64_t lo = plan.lo[c];
          if (t < lo) continue;
          const float f = float(plan.frac[c]);
          const bool two = t > lo && (f != 0.0f || plan.grad[c]);
          const float* klo = kb + (t - lo) * D;
          const float* vlo = vb + (t - lo) * D;
          vf key[NV];
          read_row<NV>(key, kb, t, lo, f, f != 0.0f);
          vf u[NV] = {}, w[NV] = {};
#pragma GCC unroll 8
          for (int g = 0; g < G; ++g) {
            const vf dsg = splat(scale * ds[g * C + c]);
            const vf pg = splat(P[((head0 + g) * Tn + t) * C + c]);
#pragma GCC unroll 16
            for (int j = 0; j < NV; ++j) {
              a[g][j] += dsg * key[j];
              u[j] += dsg * load(qt[g] + j * VW);
              w[j] += pg * load(ot[g] + j * VW);
            }
          }
          float* dkl = dk_row(t - lo);
          float* dvl = dv_row(t - lo);
          if (!two) {
#pragma GCC unroll 16
            for (int j = 0; j < NV; ++j) {
              store(dkl + j * VW, load(dkl + j * VW) + u[j]);
              store(dvl + j * VW, load(dvl + j * VW) + w[j]);
            }
            continue;
          }
          vf dfr = {};
          if (f == 0.0f) {                                   // d/df only: one row to scatter
#pragma GCC unroll 16
            for (int j = 0; j < NV; ++j) {
              store(dkl + j * VW, load(dkl + j * VW) + u[j]);
              store(dvl + j * VW, load(dvl + j * VW) + w[j]);
              dfr += u[j] * (load(klo - D + j * VW) - load(klo + j * VW)) +
                     w[j] * (load(vlo - D + j * VW) - load(vlo + j * VW));
            }
          } else {
            float* dkh = dk_row(t - lo - 1);
            float* dvh = dv_row(t - lo - 1);
            const vf fv = splat(f), gv = splat(1.0f - f);
#pragma GCC unroll 16
            for (int j = 0; j < NV; ++j) {
              store(dkl + j * VW, load(dkl + j * VW) + gv * u[j]);
              store(dvl + j * VW, load(dvl + j * VW) + gv * w[j]);
              store(dkh + j * VW, load(dkh + j * VW) + fv * u[j]);
              store(dvh + j * VW, load(dvh + j * VW) + fv * w[j]);
              dfr += u[j] * (load(klo - D + j * VW) - load(klo + j * VW)) +
                     w[j] * (load(vlo - D + j * VW) - load(vlo + j * VW));
            }
          }
          if (plan.grad[c]) part[c] += double(hsum(dfr));
        }
        for (int g = 0; g < G; ++g)
          for (int j = 0; j < NV; ++j) store(dq + ((head0 + g) * Tn + t) * D + j * VW, a[g][j]);
      }
    }
  });
  add_halos(dk, dv, halo_buf, s, ch, par);
}

}  // namespace vec
#endif  // vector extensions

// ============================================================================================
// dispatch: the vectorised kernels where they apply, else the generic ones
// ============================================================================================
template <typename Fn>
inline bool with_vec_shape(int64_t G, int64_t D, Fn&& fn) {
#ifdef FIBLAB_HAVE_VEC
  if (D % vec::VW != 0) return false;
  const int64_t NV = D / vec::VW;
#define FIBLAB_NV(g)                                                       \
  switch (NV) {                                                            \
    case 1: fn(std::integral_constant<int, g>(), std::integral_constant<int, 1>()); return true; \
    case 2: fn(std::integral_constant<int, g>(), std::integral_constant<int, 2>()); return true; \
    case 4: fn(std::integral_constant<int, g>(), std::integral_constant<int, 4>()); return true; \
    case 8: fn(std::integral_constant<int, g>(), std::integral_constant<int, 8>()); return true; \
    default: return false;                                                 \
  }
  switch (G) {
    case 1: FIBLAB_NV(1)
    case 2: FIBLAB_NV(2)
    case 4: FIBLAB_NV(4)
    case 8: FIBLAB_NV(8)
    default: return false;
  }
#undef FIBLAB_NV
#else
  (void)G;
  (void)D;
  (void)fn;
  return false;
#endif
}

template <typename T, typename Par>
void forward(const T* q, const T* k, const T* v, T* out, T* P, const Dims& s, const Plan& plan,
             double scale, Par&& par) {
  if constexpr (std::is_same_v<T, float>) {
    if (with_vec_shape(s.G, s.D, [&](auto g, auto nv) {
          vec::forward<decltype(g)::value, decltype(nv)::value>(q, k, v, out, P, s, plan, scale,
                                                                 par);
        }))
      return;
  }
  generic::forward(q, k, v, out, P, s, plan, scale, par);
}

// Backward.  dS (B,H,T,C) is scratch for the generic kernels; halo_buf must hold
// halo_size(s, ch) values (vectorised kernels); dfrac_parts B·KV·max(nblk, ch.n)·C
// doubles, zeroed.  Returns whether the vectorised kernels ran.
template <typename T, typename Par>
bool backward(const T* dout, const T* q, const T* k, const T* v, const T* P, T* dS, T* dq, T* dk,
              T* dv, T* halo_buf, double* dfrac_parts, const Dims& s, const Plan& plan,
              const Chunks& ch, double scale, Par&& par) {
  if constexpr (std::is_same_v<T, float>) {
    if (with_vec_shape(s.G, s.D, [&](auto g, auto nv) {
          vec::backward<decltype(g)::value, decltype(nv)::value>(
              dout, q, k, v, P, dq, dk, dv, halo_buf, dfrac_parts, s, plan, ch, scale, par);
        }))
      return true;
  }
  generic::backward_queries(dout, k, v, P, dS, dq, s, plan, scale, par);
  generic::backward_keys(dout, q, k, v, P, dS, dk, dv, dfrac_parts, s, plan, scale, par);
  return false;
}

// whether the vectorised kernels handle this dtype / shape (the caller sizes scratch by it)
template <typename T>
bool vectorised(const Dims& s) {
  if constexpr (std::is_same_v<T, float>) {
    return with_vec_shape(s.G, s.D, [](auto, auto) {});
  }
  return false;
}

}  // namespace fiblab
