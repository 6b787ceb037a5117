// xrt's layernorm for eager training, forward and backward in C++: the op `xrt_native::layernorm`
// is a torch::autograd::Function whose forward and backward allocate their outputs with ATen and
// launch xrt's own compiled kernels (Triton's or CUDA C's) with cuLaunchKernel, so that neither the
// call nor autograd's backward runs any Python. The kernels, their grids and their arguments are
// those of a plan worked out in Python once per input signature (xrt/pytorch/ops/native.py
// encodes it; `xrt_native::add_plan` keeps it here under an id for the life of the process).
//
// Built by xrt/pytorch/ops/native.py with the host's C++ compiler against the installed torch, with
// linear.cpp into one library; launch.h holds what the two share.

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/library.h>


#include "launch.h"

namespace {

using namespace xrt_native;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// -- plans ----------------------------------------------------------------------------------------

// Slots: the forward's tensors are x, weight, bias, y, stats (fp32 [2, M]: mean then rstd); the
// backward's are dy, x, weight, stats, dx, partials (fp32 [2, G, N]), dweight+dbias ([2, N]).
constexpr int64_t kFwdSlots = 5, kBwdSlots = 7;

struct Plan {
  int64_t m = 0, n = 0, groups = 0, device = -1;
  std::vector<Launch> fwd, bwd;
};

Plans<Plan> plans{"xrt_native.layernorm"};

// The spec: [m, n, groups, device, n_fwd, <launch>..., n_bwd, <launch>...] (launch.h's launches).
int64_t add_plan(std::vector<int64_t> spec) {
  Reader r{spec, "xrt_native.add_plan"};
  Plan p;
  p.m = r.next("m");
  p.n = r.next("n");
  p.groups = r.next("groups");
  p.device = r.next("device");
  TORCH_CHECK(p.m >= 1 && p.n >= 1 && p.groups >= 1, "xrt_native.add_plan: m=", p.m, ", n=", p.n,
              ", groups=", p.groups, " must be positive");
  for (int64_t k = r.next("forward launch count"); k > 0; --k) p.fwd.push_back(read_launch(r, kFwdSlots));
  for (int64_t k = r.next("backward launch count"); k > 0; --k) p.bwd.push_back(read_launch(r, kBwdSlots));
  r.done();
  return plans.add(std::move(p));
}

// -- the op ----------------------------------------------------------------------------------------

void check_inputs(const Plan& p, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  TORCH_CHECK(x.is_contiguous() && x.numel() == p.m * p.n, "xrt_native.layernorm: x must be contiguous with ",
              p.m, "x", p.n, " elements (the plan's), got ", shape_of(x));
  TORCH_CHECK(w.is_contiguous() && b.is_contiguous() && w.numel() == p.n && b.numel() == p.n,
              "xrt_native.layernorm: weight and bias must be contiguous with ", p.n, " elements");
  TORCH_CHECK(w.scalar_type() == x.scalar_type() && b.scalar_type() == x.scalar_type(),
              "xrt_native.layernorm: weight and bias must have x's dtype");
  TORCH_CHECK(tensor_device(x) == p.device && tensor_device(w) == p.device && tensor_device(b) == p.device,
              "xrt_native.layernorm: the tensors must be on the plan's device (", p.device, ")");
  TORCH_CHECK(((address(x) | address(w) | address(b)) & 15) == 0,
              "xrt_native.layernorm: x, weight and bias must be 16-byte aligned (the kernels were compiled so)");
}

struct LayerNormFunction : public torch::autograd::Function<LayerNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, double eps, int64_t plan, int64_t stream) {
    const Plan& p = plans.at(plan);
    check_inputs(p, x, weight, bias);
    at::Tensor y = at::empty_like(x);
    at::Tensor stats = at::empty({2, p.m}, x.options().dtype(at::kFloat));
    const uint64_t slots[kFwdSlots] = {address(x), address(weight), address(bias), address(y), address(stats)};
    ensure_context(p.device, "xrt_native.layernorm");
    for (const Launch& l : p.fwd) run(l, slots, eps, stream, "xrt_native.layernorm");
    ctx->save_for_backward({x, weight, stats});
    ctx->saved_data["plan"] = plan;
    ctx->saved_data["stream"] = stream;  // autograd runs a backward on its forward's stream
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Plan& p = plans.at(ctx->saved_data["plan"].toInt());
    const int64_t stream = ctx->saved_data["stream"].toInt();
    variable_list saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& stats = saved[2];
    at::Tensor dy = grads[0].to(x.scalar_type()).contiguous();
    if (address(dy) & 15) dy = dy.clone();  // a view at an odd offset: the kernels assume 16-byte alignment
    at::Tensor dx = at::empty_like(x);
    at::Tensor part = at::empty({2, p.groups, p.n}, x.options().dtype(at::kFloat));
    at::Tensor dwdb = at::empty({2, p.n}, weight.options());
    const uint64_t slots[kBwdSlots] = {address(dy), address(x), address(weight), address(stats),
                                       address(dx), address(part), address(dwdb)};
    ensure_context(p.device, "xrt_native.layernorm");
    for (const Launch& l : p.bwd) run(l, slots, 0.0, stream, "xrt_native.layernorm");
    // dweight and dbias shaped as the weight (normalized_shape may have several dims; bias's is the same)
    variable_list out = {dx, dwdb[0].view(weight.sizes()), dwdb[1].view(weight.sizes()), at::Tensor(), at::Tensor(),
                         at::Tensor()};
    if (torch::autograd::GradMode::is_enabled()) {
      // create_graph=True: as Python's once_differentiable, the gradients carry a node that fails
      // if they are differentiated again (this backward is not itself differentiable).
      variable_list fake;
      for (size_t i = 0; i < 3; ++i) fake.push_back(out[i].detach().requires_grad_(true));
      auto error = std::make_shared<torch::autograd::DelayedError>(
          "xrt_native.layernorm: its backward is not differentiable (trying to differentiate twice)", 3);
      variable_list wrapped = (*error)(std::move(fake));
      for (size_t i = 0; i < 3; ++i) out[i] = wrapped[i];
    }
    return out;
  }
};

at::Tensor layernorm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps,
                     int64_t plan, int64_t stream) {
  return LayerNormFunction::apply(x, weight, bias, eps, plan, stream);
}

}  // namespace

TORCH_LIBRARY(xrt_native, m) {
  m.def("layernorm(Tensor x, Tensor weight, Tensor bias, float eps, int plan, int stream) -> Tensor",
        &layernorm);
  m.def("add_plan(int[] spec) -> int", &add_plan);
  m.def("load_function(str path, str name) -> int", &load_function);
}
