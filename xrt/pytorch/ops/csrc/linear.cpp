// xrt's linear for eager training on its Triton GEMM, forward and backward in C++: the op
// `xrt_native::linear` is a torch::autograd::Function whose forward launches the GEMM of
// `x @ W.T + b` and whose backward launches those of `dX = g @ W` and `dW = g.T @ x` (db is ATen's
// sum of g's rows), with no Python on the way in or in autograd's backward. Each GEMM is the kept TMA
// launch of a plan worked out in Python once per input signature (xrt/pytorch/ops/native.py encodes
// it; `xrt_native::add_linear_plan` keeps it here under an id for the life of the process), its host
// TMA descriptors encoded here from the tensors' addresses.
//
// It saves what torch's F.linear saves (x's rows and W.T, in addmm's or mm's order), as views made
// with grad mode on; so under create_graph the backward is torch's differentiable GEMMs of them.

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/sum.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <algorithm>

#include "launch.h"

namespace {

using namespace xrt_native;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr const char* kOp = "xrt_native.linear";

// Slots: the forward's tensors are x, weight, bias, y; the backward's g, weight, x, dx, dweight, and
// the fp32 partial products of a weight gradient that splits K (the backward allocates them).
constexpr int64_t kFwdSlots = 4, kBwdSlots = 6;

struct Plan {
  int64_t m = 0, n = 0, k = 0, device = -1;
  int64_t part_dx = 0, part_dw = 0;  // elements of dX's and dW's fp32 partials (0: one launch, no split K)
  bool bias = false;
  std::vector<Launch> fwd, dx, dw;
};

Plans<Plan> plans{kOp};

// The spec: [m, n, k, device, bias, part_dx, part_dw, n_fwd, <launch>..., n_dx, <launch>..., n_dw, <launch>...].
int64_t add_linear_plan(std::vector<int64_t> spec) {
  Reader r{spec, "xrt_native.add_linear_plan"};
  Plan p;
  p.m = r.next("m");
  p.n = r.next("n");
  p.k = r.next("k");
  p.device = r.next("device");
  int64_t bias = r.next("bias");
  p.part_dx = r.next("part_dx");
  p.part_dw = r.next("part_dw");
  TORCH_CHECK(p.m >= 1 && p.n >= 1 && p.k >= 1 && (bias == 0 || bias == 1) && p.part_dx >= 0 && p.part_dw >= 0,
              "xrt_native.add_linear_plan: m=", p.m, ", n=", p.n, ", k=", p.k,
              " must be positive, bias 0 or 1 and the partials not negative (got ", bias, ", ", p.part_dx, ", ",
              p.part_dw, ")");
  p.bias = bias == 1;
  for (int64_t c = r.next("forward launch count"); c > 0; --c) p.fwd.push_back(read_launch(r, kFwdSlots));
  for (int64_t c = r.next("dx launch count"); c > 0; --c) p.dx.push_back(read_launch(r, kBwdSlots));
  for (int64_t c = r.next("dw launch count"); c > 0; --c) p.dw.push_back(read_launch(r, kBwdSlots));
  r.done();
  return plans.add(std::move(p));
}

void check_inputs(const Plan& p, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  TORCH_CHECK(x.dim() >= 1 && x.is_contiguous() && x.size(-1) == p.k && x.numel() == p.m * p.k, kOp,
              ": x must be contiguous with ", p.m, " rows of ", p.k, " (the plan's), got ", shape_of(x));
  TORCH_CHECK(w.dim() == 2 && w.is_contiguous() && w.size(0) == p.n && w.size(1) == p.k, kOp,
              ": weight must be a contiguous [", p.n, ", ", p.k, "], got ", shape_of(w));
  TORCH_CHECK(b.defined() == p.bias, kOp, p.bias ? ": the plan has a bias and none was given"
                                                 : ": a bias was given to a plan without one");
  TORCH_CHECK(!b.defined() || (b.dim() == 1 && b.size(0) == p.n && b.is_contiguous()), kOp,
              ": bias must be a contiguous [", p.n, "], got ", b.defined() ? shape_of(b) : "none");
  TORCH_CHECK(w.scalar_type() == x.scalar_type() && (!b.defined() || b.scalar_type() == x.scalar_type()), kOp,
              ": weight and bias must have x's dtype");
  TORCH_CHECK(tensor_device(x) == p.device && tensor_device(w) == p.device && (!b.defined() || tensor_device(b) == p.device),
              kOp, ": the tensors must be on the plan's device (", p.device, ")");
  TORCH_CHECK(((address(x) | address(w) | address(b)) & 15) == 0, kOp,
              ": x, weight and bias must be 16-byte aligned (the kernels were compiled so)");
}

struct LinearFunction : public torch::autograd::Function<LinearFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const std::optional<at::Tensor>& maybe_bias, int64_t plan, int64_t stream) {
    const Plan& p = plans.at(plan);
    const at::Tensor bias = maybe_bias.has_value() ? *maybe_bias : at::Tensor();
    check_inputs(p, x, weight, bias);
    std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
    shape.back() = p.n;
    at::Tensor y = at::empty(shape, x.options());
    const uint64_t slots[kFwdSlots] = {address(x), address(weight), address(bias), address(y)};
    ensure_context(p.device, kOp);
    for (const Launch& l : p.fwd) run(l, slots, 0.0, stream, kOp);
    // What torch's F.linear saves, in its order: addmm's (x's rows, W.T) with a bias and a 2-D or
    // contiguous x (x is contiguous here), mm's (W.T, x's rows) without. Views made with grad mode on
    // keep their history, for a backward under create_graph.
    // (requires_grad, not ctx->needs_input_grad: under no_grad the node has no edges to ask)
    const bool need_x = x.requires_grad(), need_w = weight.requires_grad();
    at::Tensor rows, wt;
    {
      at::AutoGradMode on(true);
      if (need_w) rows = x.reshape({p.m, p.k});
      if (need_x) wt = weight.t();
    }
    if (p.bias) {
      ctx->save_for_backward({rows, wt});
    } else {
      ctx->save_for_backward({wt, rows});
    }
    ctx->saved_data["plan"] = plan;
    ctx->saved_data["stream"] = stream;  // autograd runs a backward on its forward's stream
    ctx->saved_data["shape"] = x.sizes().vec();
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Plan& p = plans.at(ctx->saved_data["plan"].toInt());
    const int64_t stream = ctx->saved_data["stream"].toInt();
    // (without a bias autograd has no edge 2: the inputs that are no tensors have none)
    const bool need_x = ctx->needs_input_grad(0), need_w = ctx->needs_input_grad(1);
    const bool need_b = p.bias && ctx->needs_input_grad(2);
    at::Tensor rows, wt;
    if (need_x || need_w) {  // (read only when saved: with only the bias to differentiate, a second backward works)
      variable_list saved = ctx->get_saved_variables();
      rows = saved[p.bias ? 0 : 1];
      wt = saved[p.bias ? 1 : 0];
    }
    const std::vector<int64_t> shape = ctx->saved_data["shape"].toIntVector();
    at::Tensor g = grads[0].reshape({p.m, p.n});
    at::Tensor dx, dw, db;
    if (torch::autograd::GradMode::is_enabled()) {  // create_graph: GEMMs autograd records
      if (need_x) dx = at::mm(g, wt.t()).view(shape);
      if (need_w) dw = at::mm(g.t(), rows);
    } else if (need_x || need_w) {
      const at::Tensor& ref = need_x ? wt : rows;
      if (g.scalar_type() != ref.scalar_type()) g = g.to(ref.scalar_type());
      g = aligned(g.contiguous());
      if (need_x) dx = at::empty(shape, g.options());
      if (need_w) dw = at::empty({p.n, p.k}, g.options());
      // The launches read W as stored ([N, K], row-major) and x's rows as [M, K], row-major. Saved-tensor
      // hooks (activation offloading) may hand them back laid out otherwise: then they are re-laid.
      at::Tensor w_rows = need_x ? aligned(wt.t().contiguous()) : at::Tensor();
      at::Tensor x_rows = need_w ? aligned(rows.contiguous()) : at::Tensor();
      // one buffer for the partials of whichever GEMM splits K (dX's launches finish before dW's start)
      const int64_t part_numel = std::max(need_x ? p.part_dx : 0, need_w ? p.part_dw : 0);
      at::Tensor part;
      if (part_numel > 0) part = at::empty({part_numel}, g.options().dtype(at::kFloat));
      const uint64_t slots[kBwdSlots] = {address(g), address(w_rows), address(x_rows), address(dx), address(dw),
                                         address(part)};
      ensure_context(p.device, kOp);
      if (need_x) for (const Launch& l : p.dx) run(l, slots, 0.0, stream, kOp);
      if (need_w) for (const Launch& l : p.dw) run(l, slots, 0.0, stream, kOp);
    }
    if (need_b) db = g.sum(0);
    return {dx, dw, db, at::Tensor(), at::Tensor()};
  }
};

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias, int64_t plan,
                  int64_t stream) {
  return LinearFunction::apply(x, weight, bias, plan, stream);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(xrt_native, m) {
  m.def("linear(Tensor x, Tensor weight, Tensor? bias, int plan, int stream) -> Tensor", &linear);
  m.def("add_linear_plan(int[] spec) -> int", &add_linear_plan);
}
