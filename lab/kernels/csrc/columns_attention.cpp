// PyTorch binding of the column attention kernels (columns_kernel.h): two operators,
//
//   fiblab_cpu::forward(q, k, v, dists, fracs, scale) -> [out (B,H,T,D), P (B,H,T,C)]
//   fiblab_cpu::backward(dout, q, k, v, P, dists, fracs, grad_cols, scale)
//       -> [dq, dk, dv, dfracs]       (dfracs for the columns grad_cols marks; empty: none)
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
  TORCH_CHECK(q.scalar_type() == at::kFloat || q.scalar_type() == at::kDouble,
              "the CPU kernel supports float32 and float64; got ", q.scalar_type());
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

}  // namespace

TORCH_LIBRARY(fiblab_cpu, m) {
  m.def("forward(Tensor q, Tensor k, Tensor v, Tensor dists, Tensor fracs, float scale) "
        "-> Tensor[]");
  m.def("backward(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor P, Tensor dists, "
        "Tensor fracs, Tensor grad_cols, float scale) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(fiblab_cpu, CPU, m) {
  m.impl("forward", &forward);
  m.impl("backward", &backward);
}
