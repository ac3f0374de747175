// The retrieval probe's blur gather (lab/blur.py) on dense score matrices: the band kernels.
//
// Per (batch, query head) the caller computes the scaled scores S[t, u] = scale·q_t·k_u with a
// BLAS matmul, and afterwards out = A·V and, in the backward, dA = dout·Vᵀ, dS·K, dSᵀ·Q.  These
// kernels do the part between, which a matmul cannot:
//
//   columns      window d = 0 .. Wc−1: logit = S[t, t−d]                     (valid t ≥ d)
//                rung i (centre c_i, folded Gaussian taps W_i[o] on o ∈ [lo_i, hi_i]):
//                    logit = Σ_o W_i[o] · S[t, max(t−o, 0)]                    (valid t ≥ c_i)
//   softmax      P[t, ·] over the valid columns (the d = 0 column is always valid)
//   A            A[t, u] = Σ_d P_d[t]·[u = t−d] + Σ_i P_i[t]·Σ_{o : max(t−o,0) = u} W_i[o]
//
// so that A·V is the blurred-column attention of lab.blur (a rung's blurred key is
// Σ_o W_i[o]·k[max(t−o, 0)]; "max(·, 0)" is the replicate-row-0 rule).  Backward, given dA:
//
//   dP_j = Σ_u dA[t,u]·∂A[t,u]/∂P_j (the same band sums), dlogit = P ⊙ (dP − Σ P·dP),
//   dS[t, u] = the A pattern with dlogit in place of P,
//   dW_i[o] = Σ_t dlogit_i[t]·S[t, max(t−o,0)] + P_i[t]·dA[t, max(t−o,0)].
//
// Work per query is O(Wc + Σ_i (hi_i − lo_i + 1)): the bands are read as contiguous rows (W is
// used reversed, Wr_i[x] = W_i[T−1−x], so that S[t, t−o]·W_i[o] runs forwards in both).  Rows of
// S, A, dA, dS are (T,) and row-major (float, double or bfloat16, widened per row); entries
// u > t of A and dS are written as zeros.  Tasks
// are (batch·head, block of queries); dW is summed per task in double and reduced in task
// order, so results are deterministic for a thread count.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace fiblab {
namespace band {

constexpr int64_t kRows = 64;     // queries a task

struct Rungs {
  int64_t r = 0, Wc = 1, T = 0;
  std::vector<int64_t> lo, hi, c;
};

// Σ_{o=lo}^{hi} W[o]·row[max(t−o, 0)] with Wr the reversed W (Wr[x] = W[T−1−x])
template <typename T>
inline double band_dot(const T* row, const T* Wr, const double* Wsum, int64_t lo, int64_t hi,
                       int64_t t, int64_t Tn) {
  double acc = 0.0;
  const int64_t e = std::min(hi, t);                       // o ≤ t: row[t−o], u from t−e
  if (lo <= e) {
    const int64_t u0 = t - e, n = e - lo + 1;
    const T* w = Wr + (Tn - 1 - t) + u0;                   // w[j] = W[t − (u0 + j)]
    const T* x = row + u0;
    T part = 0;
#pragma omp simd reduction(+ : part)
    for (int64_t j = 0; j < n; ++j) part += w[j] * x[j];
    acc += part;
  }
  const int64_t a = std::max(lo, t + 1);                   // o > t: all read row[0]
  if (a <= hi) acc += double(row[0]) * (Wsum[hi + 1] - Wsum[a]);
  return acc;
}

// row[max(t−o, 0)] += p·W[o] for o in [lo, hi]
template <typename T>
inline void band_axpy(T* row, T p, const T* Wr, const double* Wsum, int64_t lo, int64_t hi,
                      int64_t t, int64_t Tn) {
  const int64_t e = std::min(hi, t);
  if (lo <= e) {
    const int64_t u0 = t - e, n = e - lo + 1;
    const T* w = Wr + (Tn - 1 - t) + u0;
    T* x = row + u0;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) x[j] += p * w[j];
  }
  const int64_t a = std::max(lo, t + 1);
  if (a <= hi) row[0] += T(double(p) * (Wsum[hi + 1] - Wsum[a]));
}

// reversed rung rows and their prefix sums (Wsum[i·(T+1) + o] = Σ_{o' < o} W_i[o'])
template <typename T>
inline void prepare(const T* W, const Rungs& g, std::vector<T>& Wr, std::vector<double>& Wsum) {
  const int64_t Tn = g.T;
  Wr.assign(g.r * Tn, T(0));
  Wsum.assign(g.r * (Tn + 1), 0.0);
  for (int64_t i = 0; i < g.r; ++i)
    for (int64_t o = 0; o < Tn; ++o) {
      Wr[i * Tn + (Tn - 1 - o)] = W[i * Tn + o];
      Wsum[i * (Tn + 1) + o + 1] = Wsum[i * (Tn + 1) + o] + double(W[i * Tn + o]);
    }
}

// S (BH, T, T) → A (BH, T, T), P (BH, T, C).  S and A are stored as TS (float, double or
// bfloat16); each query's row is widened into a T scratch row, worked on and narrowed once.
template <typename TS, typename T, typename Par>
void forward(const TS* S, const T* W, TS* A, T* P, int64_t BH, const Rungs& g, Par&& par) {
  const int64_t Tn = g.T, C = g.Wc + g.r, nblk = (Tn + kRows - 1) / kRows;
  std::vector<T> Wr;
  std::vector<double> Wsum;
  prepare(W, g, Wr, Wsum);
  par(BH * nblk, [&](int64_t begin, int64_t end) {
    std::vector<double> L(C);
    std::vector<T> srow(Tn), arow(Tn);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / nblk, t0 = (task % nblk) * kRows;
      for (int64_t t = t0; t < std::min(Tn, t0 + kRows); ++t) {
        const TS* Sin = S + (bh * Tn + t) * Tn;
        TS* Aout = A + (bh * Tn + t) * Tn;
        T* Prow = P + (bh * Tn + t) * C;
        T* Srow = srow.data();
        T* Arow = arow.data();
        for (int64_t u = 0; u <= t; ++u) Srow[u] = T(Sin[u]);
        const double ninf = -std::numeric_limits<double>::infinity();
        double m = ninf;
        for (int64_t d = 0; d < g.Wc; ++d) {
          L[d] = t >= d ? double(Srow[t - d]) : ninf;
          m = std::max(m, L[d]);
        }
        for (int64_t i = 0; i < g.r; ++i) {
          L[g.Wc + i] = t >= g.c[i] ? band_dot(Srow, Wr.data() + i * Tn,
                                               Wsum.data() + i * (Tn + 1), g.lo[i], g.hi[i], t,
                                               Tn)
                                    : ninf;
          m = std::max(m, L[g.Wc + i]);
        }
        double z = 0.0;
        for (int64_t j = 0; j < C; ++j) {
          L[j] = L[j] == ninf ? 0.0 : std::exp(L[j] - m);
          z += L[j];
        }
        std::fill(Arow, Arow + t + 1, T(0));
        for (int64_t j = 0; j < C; ++j) Prow[j] = T(L[j] / z);
        for (int64_t d = 0; d < g.Wc; ++d)
          if (t >= d) Arow[t - d] += Prow[d];
        for (int64_t i = 0; i < g.r; ++i)
          if (t >= g.c[i])
            band_axpy(Arow, Prow[g.Wc + i], Wr.data() + i * Tn, Wsum.data() + i * (Tn + 1),
                      g.lo[i], g.hi[i], t, Tn);
        for (int64_t u = 0; u <= t; ++u) Aout[u] = TS(Arow[u]);
        std::fill(Aout + t + 1, Aout + Tn, TS(0));
      }
    }
  });
}

// (S, dA, P) → dS (BH, T, T), dW (r, T) (double); S, dA, dS stored as TS like the forward
template <typename TS, typename T, typename Par>
void backward(const TS* S, const TS* dA, const T* P, const T* W, TS* dS, double* dW, int64_t BH,
              const Rungs& g, Par&& par) {
  const int64_t Tn = g.T, C = g.Wc + g.r, nblk = (Tn + kRows - 1) / kRows;
  std::vector<T> Wr;
  std::vector<double> Wsum;
  prepare(W, g, Wr, Wsum);
  const int64_t ntask = BH * nblk;
  std::vector<double> parts(g.r > 0 ? ntask * g.r * Tn : 0, 0.0);   // reversed index, per task
  par(ntask, [&](int64_t begin, int64_t end) {
    std::vector<double> dl(C);
    std::vector<T> srow(Tn), darow(Tn), dsrow(Tn);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / nblk, t0 = (task % nblk) * kRows;
      double* part = g.r > 0 ? parts.data() + task * g.r * Tn : nullptr;
      for (int64_t t = t0; t < std::min(Tn, t0 + kRows); ++t) {
        const TS* Sin = S + (bh * Tn + t) * Tn;
        const TS* dAin = dA + (bh * Tn + t) * Tn;
        const T* Prow = P + (bh * Tn + t) * C;
        TS* dSout = dS + (bh * Tn + t) * Tn;
        T* Srow = srow.data();
        T* dArow = darow.data();
        T* dSrow = dsrow.data();
        for (int64_t u = 0; u <= t; ++u) {
          Srow[u] = T(Sin[u]);
          dArow[u] = T(dAin[u]);
        }
        double dot = 0.0;
        for (int64_t d = 0; d < g.Wc; ++d) {
          dl[d] = t >= d ? double(dArow[t - d]) : 0.0;
          dot += double(Prow[d]) * dl[d];
        }
        for (int64_t i = 0; i < g.r; ++i) {
          dl[g.Wc + i] = t >= g.c[i] ? band_dot(dArow, Wr.data() + i * Tn,
                                                Wsum.data() + i * (Tn + 1), g.lo[i], g.hi[i],
                                                t, Tn)
                                     : 0.0;
          dot += double(Prow[g.Wc + i]) * dl[g.Wc + i];
        }
        for (int64_t j = 0; j < C; ++j) dl[j] = double(Prow[j]) * (dl[j] - dot);
        std::fill(dSrow, dSrow + t + 1, T(0));
        for (int64_t d = 0; d < g.Wc; ++d)
          if (t >= d) dSrow[t - d] += T(dl[d]);
        for (int64_t i = 0; i < g.r; ++i) {
          if (t < g.c[i]) continue;
          const double a = dl[g.Wc + i], p = double(Prow[g.Wc + i]);
          band_axpy(dSrow, T(a), Wr.data() + i * Tn, Wsum.data() + i * (Tn + 1), g.lo[i],
                    g.hi[i], t, Tn);
          // dW_i[o] += a·S[t, max(t−o,0)] + p·dA[t, max(t−o,0)], stored reversed (x = T−1−o)
          double* pw = part + i * Tn;
          const int64_t e = std::min(g.hi[i], t);
          if (g.lo[i] <= e) {
            const int64_t u0 = t - e, n = e - g.lo[i] + 1;
            double* w = pw + (Tn - 1 - t) + u0;
            const T* xs = Srow + u0;
            const T* xa = dArow + u0;
#pragma omp simd
            for (int64_t j = 0; j < n; ++j) w[j] += a * double(xs[j]) + p * double(xa[j]);
          }
          const double edge = a * double(Srow[0]) + p * double(dArow[0]);
          for (int64_t o = std::max(g.lo[i], t + 1); o <= g.hi[i]; ++o) pw[Tn - 1 - o] += edge;
        }
        for (int64_t u = 0; u <= t; ++u) dSout[u] = TS(dSrow[u]);
        std::fill(dSout + t + 1, dSout + Tn, TS(0));
      }
    }
  });
  std::fill(dW, dW + g.r * Tn, 0.0);
  for (int64_t task = 0; task < ntask; ++task)
    for (int64_t i = 0; i < g.r; ++i)
      for (int64_t o = 0; o < Tn; ++o)
        dW[i * Tn + o] += parts[(task * g.r + i) * Tn + (Tn - 1 - o)];
}

}  // namespace band
}  // namespace fiblab
