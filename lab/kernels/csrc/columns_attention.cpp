// PyTorch binding of the column attention kernels (columns_kernel.h) and the blur probe's band
// kernels (blur_band.h): four operators,
//
//   fiblab_cpu::forward(q, k, v, dists, fracs, scale) -> [out (B,H,T,D), P (B,H,T,C)]
//   fiblab_cpu::backward(dout, q, k, v, P, dists, fracs, grad_cols, scale)
//       -> [dq, dk, dv, dfracs]       (dfracs for the columns grad_cols marks; empty: none)
//   fiblab_cpu::band_forward(S, W, lo, hi, centres, window_cols) -> [A (B,H,T,T), P (B,H,T,C)]
//   fiblab_cpu::band_backward(S, dA, P, W, lo, hi, centres, window_cols) -> [dS, dW]
//       the retrieval probe's blur gather on dense scores (blur_band.h, used by lab/blur.py)
//
// registered with TORCH_LIBRARY so the build needs only ATen's core headers (no pybind11, no
// torch/extension.h: the compile takes a fraction of the time).  Work runs on PyTorch's intra-op
// thread pool (at::parallel_for: OpenMP in the standard builds, so torch.set_num_threads
// applies), tasks handed out dynamically.  Autograd lives in Python (lab/kernels/cpu.py).
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "blur_band.h"
#include "columns_kernel.h"

namespace {

// Runs fn(task, task + 1) for every task on PyTorch's intra-op pool, handing tasks out one at a
// time from a shared counter: on a busy machine a descheduled thread holds up one task, not a
// fixed share of them.
struct AtenPar {
  template <typename F>
  void operator()(int64_t n, F&& fn) const {
    if (n <= 0) return;
    const int64_t workers = std::min<int64_t>(n, at::get_num_threads());
    if (workers <= 1 || at::in_parallel_region()) {
      fn(int64_t(0), n);
      return;
    }
    std::atomic<int64_t> next{0};
    at::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
      for (int64_t task = next.fetch_add(1); task < n; task = next.fetch_add(1))
        fn(task, task + 1);
    });
  }
};

void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  TORCH_CHECK(q.device().is_cpu() && k.device().is_cpu() && v.device().is_cpu(),
              "the CPU kernel needs CPU tensors");
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "q, k, v must be 4-D");
  TORCH_CHECK(k.sizes() == v.sizes(), "k and v must have the same shape");
  TORCH_CHECK(q.size(0) == k.size(0) && q.size(2) == k.size(2) && q.size(3) == k.size(3),
              "q and k/v differ in batch, length or head_dim");
  TORCH_CHECK(k.size(1) >= 1 && q.size(1) % k.size(1) == 0, "H must be a multiple of KV");
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type(),
              "q, k, v must share a dtype");
  TORCH_CHECK(q.scalar_type() == at::kFloat || q.scalar_type() == at::kDouble ||
                  q.scalar_type() == at::kBFloat16,
              "the CPU kernel supports float32, float64 and bfloat16; got ", q.scalar_type());
}

// bfloat16 runs the float32 kernels on the widened tensors: every product and sum in float32
// (the accuracy of bf16 storage with fp32 accumulation), P kept in float32 for the backward,
// the results rounded back to bfloat16 once.  Widening costs O(B·H·T·D) beside the O(B·H·T·C·D)
// attention, and the sparse models keep the fused path instead of PyTorch's gathers.
bool widened(at::Tensor& q, at::Tensor& k, at::Tensor& v) {
  if (q.scalar_type() != at::kBFloat16) return false;
  q = q.to(at::kFloat);
  k = k.to(at::kFloat);
  v = v.to(at::kFloat);
  return true;
}

fiblab::Plan make_plan(const at::Tensor& dists, const at::Tensor& fracs,
                       const at::Tensor& grad_cols) {
  TORCH_CHECK(dists.dim() == 1 && fracs.dim() == 1 && dists.size(0) == fracs.size(0),
              "dists and fracs must be 1-D of the same length; got ", dists.sizes(), " and ",
              fracs.sizes());
  fiblab::Plan plan;
  plan.C = dists.size(0);
  TORCH_CHECK(plan.C >= 1, "at least one column is needed");
  auto d = dists.to(at::kCPU, at::kLong).contiguous();
  auto f = fracs.detach().to(at::kCPU, at::kDouble).contiguous();
  const int64_t* dp = d.data_ptr<int64_t>();
  const double* fp = f.data_ptr<double>();
  const bool grads = grad_cols.defined() && grad_cols.numel() > 0;
  at::Tensor gc;
  if (grads) {
    TORCH_CHECK(grad_cols.numel() == plan.C, "grad_cols must have one entry per column");
    gc = grad_cols.to(at::kCPU, at::kByte).contiguous();
  }
  for (int64_t c = 0; c < plan.C; ++c) {
    TORCH_CHECK(dp[c] >= 0, "dists must be >= 0; column ", c, " has ", dp[c]);
    TORCH_CHECK(std::isfinite(fp[c]), "fracs must be finite; column ", c, " has ", fp[c]);
    plan.lo.push_back(dp[c]);
    plan.frac.push_back(fp[c]);
    plan.grad.push_back(grads ? gc.data_ptr<uint8_t>()[c] != 0 : 0);
  }
  return plan;
}

fiblab::Dims dims_of(const at::Tensor& q, const at::Tensor& k, int64_t C) {
  return fiblab::make_dims(q.size(0), q.size(1), k.size(1), q.size(2), q.size(3), C);
}

std::vector<at::Tensor> forward(at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor dists,
                                at::Tensor fracs, double scale) {
  check_inputs(q, k, v);
  if (widened(q, k, v)) {
    auto res = forward(q, k, v, dists, fracs, scale);
    return {res[0].to(at::kBFloat16), res[1]};
  }
  q = q.contiguous();
  k = k.contiguous();
  v = v.contiguous();
  const fiblab::Plan plan = make_plan(dists, fracs, at::Tensor());
  const fiblab::Dims s = dims_of(q, k, plan.C);
  auto out = at::empty_like(q);
  auto P = at::empty({s.B, s.H, s.T, s.C}, q.options());
  if (s.B * s.H * s.T * s.D > 0) {
    AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "fiblab_cpu_forward", [&] {
      fiblab::forward<scalar_t>(q.data_ptr<scalar_t>(), k.data_ptr<scalar_t>(),
                                v.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(),
                                P.data_ptr<scalar_t>(), s, plan, scale, AtenPar());
    });
  }
  return {out, P};
}

std::vector<at::Tensor> backward(at::Tensor dout, at::Tensor q, at::Tensor k, at::Tensor v,
                                 at::Tensor P, at::Tensor dists, at::Tensor fracs,
                                 at::Tensor grad_cols, double scale) {
  check_inputs(q, k, v);
  if (widened(q, k, v)) {
    auto res = backward(dout.to(at::kFloat), q, k, v, P, dists, fracs, grad_cols, scale);
    return {res[0].to(at::kBFloat16), res[1].to(at::kBFloat16), res[2].to(at::kBFloat16),
            res[3]};
  }
  q = q.contiguous();
  k = k.contiguous();
  v = v.contiguous();
  dout = dout.to(q.scalar_type()).contiguous();
  P = P.to(q.scalar_type()).contiguous();
  TORCH_CHECK(dout.sizes() == q.sizes(), "dout must have q's shape");
  const fiblab::Plan plan = make_plan(dists, fracs, grad_cols);
  const fiblab::Dims s = dims_of(q, k, plan.C);
  TORCH_CHECK(P.dim() == 4 && P.size(0) == s.B && P.size(1) == s.H && P.size(2) == s.T &&
                  P.size(3) == s.C,
              "P must have shape (B, H, T, C)");
  const fiblab::Chunks ch = fiblab::make_chunks(s, plan, at::get_num_threads());
  auto dq = at::empty_like(q);
  auto dk = at::empty_like(k);
  auto dv = at::empty_like(v);
  auto parts = at::zeros({s.B * s.KV * std::max(s.nblk, ch.n), s.C},
                         q.options().dtype(at::kDouble));
  if (s.B * s.H * s.T * s.D > 0) {
    AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "fiblab_cpu_backward", [&] {
      const bool vec = fiblab::vectorised<scalar_t>(s);
      // scratch: halo rows for the fused (vectorised) pass, dS for the generic two-pass one
      auto dS = vec ? at::empty({0}, q.options()) : at::empty_like(P);
      auto halo = at::empty({vec ? fiblab::halo_size(s, ch) : 0}, q.options());
      fiblab::backward<scalar_t>(
          dout.data_ptr<scalar_t>(), q.data_ptr<scalar_t>(), k.data_ptr<scalar_t>(),
          v.data_ptr<scalar_t>(), P.data_ptr<scalar_t>(), dS.data_ptr<scalar_t>(),
          dq.data_ptr<scalar_t>(), dk.data_ptr<scalar_t>(), dv.data_ptr<scalar_t>(),
          halo.data_ptr<scalar_t>(), parts.data_ptr<double>(), s, plan, ch, scale, AtenPar());
    });
  } else {
    dq.zero_();
    dk.zero_();
    dv.zero_();
  }
  auto dfracs = parts.sum(0).to(fracs.scalar_type());
  return {dq, dk, dv, dfracs};
}

// the band kernels work in float64 for float64 scores, else float32 (bfloat16 is widened)
at::ScalarType compute_type(const at::Tensor& S) {
  return S.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// runs fn.template operator()<TS, T>() for S's storage type TS and compute type T
template <typename F>
void dispatch_band(const at::Tensor& S, F&& fn) {
  switch (S.scalar_type()) {
    case at::kDouble: fn(double(), double()); break;
    case at::kFloat: fn(float(), float()); break;
    case at::kBFloat16: fn(at::BFloat16(), float()); break;
    default: TORCH_CHECK(false, "unsupported dtype ", S.scalar_type());
  }
}

fiblab::band::Rungs make_rungs(const at::Tensor& S, const at::Tensor& W,
                               const std::vector<int64_t>& lo, const std::vector<int64_t>& hi,
                               const std::vector<int64_t>& centres, int64_t window_cols) {
  TORCH_CHECK(S.device().is_cpu() && W.device().is_cpu(), "the band kernel needs CPU tensors");
  TORCH_CHECK(S.dim() == 4 && S.size(2) == S.size(3), "S must be (B, H, T, T); got ", S.sizes());
  TORCH_CHECK(S.scalar_type() == at::kFloat || S.scalar_type() == at::kDouble ||
                  S.scalar_type() == at::kBFloat16,
              "the band kernel supports float32, float64 and bfloat16; got ", S.scalar_type());
  TORCH_CHECK(W.scalar_type() == compute_type(S), "W must be ", compute_type(S), " for S of ",
              S.scalar_type());
  fiblab::band::Rungs g;
  g.T = S.size(2);
  g.r = static_cast<int64_t>(centres.size());
  g.Wc = window_cols;
  TORCH_CHECK(g.Wc >= 1 && g.Wc <= std::max<int64_t>(g.T, 1), "window_cols must be in [1, T]");
  TORCH_CHECK(W.dim() == 2 && W.size(0) == g.r && W.size(1) == g.T, "W must be (r, T)");
  TORCH_CHECK(lo.size() == centres.size() && hi.size() == centres.size(),
              "lo, hi and centres must have one entry per rung");
  for (int64_t i = 0; i < g.r; ++i) {
    TORCH_CHECK(1 <= lo[i] && lo[i] <= hi[i] && hi[i] < g.T && centres[i] < g.T,
                "rung ", i, ": need 1 <= lo <= hi < T and centre < T; got lo=", lo[i],
                " hi=", hi[i], " centre=", centres[i]);
  }
  g.lo = lo;
  g.hi = hi;
  g.c = centres;
  return g;
}

std::vector<at::Tensor> band_forward(at::Tensor S, at::Tensor W, std::vector<int64_t> lo,
                                     std::vector<int64_t> hi, std::vector<int64_t> centres,
                                     int64_t window_cols) {
  S = S.contiguous();
  W = W.contiguous();
  const auto g = make_rungs(S, W, lo, hi, centres, window_cols);
  const int64_t BH = S.size(0) * S.size(1);
  auto A = at::empty_like(S);
  auto P = at::empty({S.size(0), S.size(1), g.T, g.Wc + g.r},
                     S.options().dtype(compute_type(S)));
  if (BH * g.T > 0) {
    dispatch_band(S, [&](auto ts, auto tc) {
      using TS = decltype(ts);
      using TC = decltype(tc);
      fiblab::band::forward<TS, TC>(S.data_ptr<TS>(), W.data_ptr<TC>(), A.data_ptr<TS>(),
                                    P.data_ptr<TC>(), BH, g, AtenPar());
    });
  }
  return {A, P};
}

std::vector<at::Tensor> band_backward(at::Tensor S, at::Tensor dA, at::Tensor P, at::Tensor W,
                                      std::vector<int64_t> lo, std::vector<int64_t> hi,
                                      std::vector<int64_t> centres, int64_t window_cols) {
  S = S.contiguous();
  W = W.contiguous();
  dA = dA.to(S.scalar_type()).contiguous();
  P = P.to(compute_type(S)).contiguous();
  const auto g = make_rungs(S, W, lo, hi, centres, window_cols);
  TORCH_CHECK(dA.sizes() == S.sizes(), "dA must have S's shape");
  TORCH_CHECK(P.dim() == 4 && P.size(0) == S.size(0) && P.size(1) == S.size(1) &&
                  P.size(2) == g.T && P.size(3) == g.Wc + g.r,
              "P must be (B, H, T, window_cols + r)");
  const int64_t BH = S.size(0) * S.size(1);
  auto dS = at::empty_like(S);
  auto dW = at::zeros({g.r, g.T}, S.options().dtype(at::kDouble));
  if (BH * g.T > 0) {
    dispatch_band(S, [&](auto ts, auto tc) {
      using TS = decltype(ts);
      using TC = decltype(tc);
      fiblab::band::backward<TS, TC>(S.data_ptr<TS>(), dA.data_ptr<TS>(), P.data_ptr<TC>(),
                                     W.data_ptr<TC>(), dS.data_ptr<TS>(), dW.data_ptr<double>(),
                                     BH, g, AtenPar());
    });
  }
  return {dS, dW.to(W.scalar_type())};
}

}  // namespace

TORCH_LIBRARY(fiblab_cpu, m) {
  m.def("band_forward(Tensor S, Tensor W, int[] lo, int[] hi, int[] centres, int window_cols) "
        "-> Tensor[]");
  m.def("band_backward(Tensor S, Tensor dA, Tensor P, Tensor W, int[] lo, int[] hi, "
        "int[] centres, int window_cols) -> Tensor[]");
  m.def("forward(Tensor q, Tensor k, Tensor v, Tensor dists, Tensor fracs, float scale) "
        "-> Tensor[]");
  m.def("backward(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor P, Tensor dists, "
        "Tensor fracs, Tensor grad_cols, float scale) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(fiblab_cpu, CPU, m) {
  m.impl("forward", &forward);
  m.impl("backward", &backward);
  m.impl("band_forward", &band_forward);
  m.impl("band_backward", &band_backward);
}
