// xrt's attention for eager training on its Triton kernels, forward and backward in C++: the op
// `xrt_native::attention` is a torch::autograd::Function whose forward launches the kept forward
// kernel (out and lse) and whose backward launches the kept dQ and dK/dV kernels (and the
// preprocess kernel where delta is not fused), with no Python on the way in or in autograd's
// backward. The launches are those of the forward's and backward's launch plans
// (xrt/kernels/triton/attention.py), encoded once per signature by xrt/pytorch/ops/native.py and
// kept here under an id (`xrt_native::add_attention_plan`); their host TMA descriptors are encoded
// here from the tensors' addresses (launch.h).

#include <ATen/ops/empty.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/library.h>


#include "launch.h"

namespace {

using namespace xrt_native;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr const char* kOp = "xrt_native.attention";

// Slots: the forward's tensors are q, k, v, out, lse; the backward's do, q, k, v, out, lse, delta,
// dq, dk, dv (the order of the backward plan's names).
constexpr int64_t kFwdSlots = 5, kBwdSlots = 10;

struct Plan {
  int64_t b = 0, h = 0, s_q = 0, s_k = 0, d = 0, device = -1;
  bool heads_inside = false;  // out's memory is [B, S_q, H, D], seen per head (q's layout)
  // the strides of q, k, v, out and the gradient that the backward's launches were planned for
  std::vector<int64_t> q_strides, k_strides, v_strides, o_strides, do_strides;
  std::vector<Launch> fwd, bwd;
};

Plans<Plan> plans{kOp};

// The spec: [b, h, s_q, s_k, d, device, heads_inside, the 4 strides of q, k, v, out and the gradient,
// n_fwd, <launch>..., n_bwd, <launch>...].
int64_t add_attention_plan(std::vector<int64_t> spec) {
  Reader r{spec, "xrt_native.add_attention_plan"};
  Plan p;
  p.b = r.next("b");
  p.h = r.next("h");
  p.s_q = r.next("s_q");
  p.s_k = r.next("s_k");
  p.d = r.next("d");
  p.device = r.next("device");
  int64_t inside = r.next("heads_inside");
  TORCH_CHECK(p.b >= 1 && p.h >= 1 && p.s_q >= 1 && p.s_k >= 1 && p.d >= 1 && (inside == 0 || inside == 1),
              "xrt_native.add_attention_plan: b=", p.b, ", h=", p.h, ", s_q=", p.s_q, ", s_k=", p.s_k, ", d=", p.d,
              " must be positive and heads_inside 0 or 1 (got ", inside, ")");
  p.heads_inside = inside == 1;
  for (std::vector<int64_t>* strides : {&p.q_strides, &p.k_strides, &p.v_strides, &p.o_strides, &p.do_strides})
    for (int i = 0; i < 4; ++i) strides->push_back(r.next("strides"));
  for (int64_t c = r.next("forward launch count"); c > 0; --c) p.fwd.push_back(read_launch(r, kFwdSlots));
  for (int64_t c = r.next("backward launch count"); c > 0; --c) p.bwd.push_back(read_launch(r, kBwdSlots));
  r.done();
  return plans.add(std::move(p));
}

void check_inputs(const Plan& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const std::vector<int64_t> qs = {p.b, p.h, p.s_q, p.d}, ks = {p.b, p.h, p.s_k, p.d};
  TORCH_CHECK(q.sizes() == at::IntArrayRef(qs) && k.sizes() == at::IntArrayRef(ks) && v.sizes() == at::IntArrayRef(ks),
              kOp, ": q must be [", p.b, ", ", p.h, ", ", p.s_q, ", ", p.d, "] and k, v [", p.b, ", ", p.h, ", ",
              p.s_k, ", ", p.d, "] (the plan's), got ", shape_of(q), ", ", shape_of(k), ", ", shape_of(v));
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(), kOp,
              ": k and v must have q's dtype");
  TORCH_CHECK(tensor_device(q) == p.device && tensor_device(k) == p.device && tensor_device(v) == p.device, kOp,
              ": the tensors must be on the plan's device (", p.device, ")");
  TORCH_CHECK(((address(q) | address(k) | address(v)) & 15) == 0, kOp,
              ": q, k and v must be 16-byte aligned (the kernels were compiled so)");
}

struct AttentionFunction : public torch::autograd::Function<AttentionFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            int64_t plan, int64_t stream) {
    const Plan& p = plans.at(plan);
    check_inputs(p, q, k, v);
    at::Tensor out = p.heads_inside ? at::empty({p.b, p.s_q, p.h, p.d}, q.options()).transpose(1, 2)
                                    : at::empty({p.b, p.h, p.s_q, p.d}, q.options());
    at::Tensor lse = at::empty({p.b, p.h, p.s_q}, q.options().dtype(at::kFloat));
    const uint64_t slots[kFwdSlots] = {address(q), address(k), address(v), address(out), address(lse)};
    ensure_context(p.device, kOp);
    for (const Launch& l : p.fwd) run(l, slots, 0.0, stream, kOp);
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["plan"] = plan;
    ctx->saved_data["stream"] = stream;  // autograd runs a backward on its forward's stream
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Plan& p = plans.at(ctx->saved_data["plan"].toInt());
    const int64_t stream = ctx->saved_data["stream"].toInt();
    variable_list saved = ctx->get_saved_variables();
    // The launches were planned for one layout of each tensor: a gradient laid out otherwise, or saved
    // tensors that saved-tensor hooks (activation offloading) hand back laid out otherwise, are copied
    // into it.
    const at::Tensor q = laid(saved[0], p.q_strides), k = laid(saved[1], p.k_strides),
                     v = laid(saved[2], p.v_strides), out = laid(saved[3], p.o_strides);
    const at::Tensor lse = aligned(saved[4].contiguous());
    at::Tensor d_out = laid(grads[0].to(q.scalar_type()), p.do_strides);
    at::Tensor dq = at::empty(q.sizes(), q.options()), dk = at::empty(k.sizes(), k.options()),
               dv = at::empty(v.sizes(), v.options());
    at::Tensor delta = at::empty({p.b, p.h, p.s_q}, q.options().dtype(at::kFloat));
    const uint64_t slots[kBwdSlots] = {address(d_out), address(q), address(k), address(v), address(out),
                                       address(lse), address(delta), address(dq), address(dk), address(dv)};
    ensure_context(p.device, kOp);
    for (const Launch& l : p.bwd) run(l, slots, 0.0, stream, kOp);
    variable_list result = {dq, dk, dv, at::Tensor(), at::Tensor()};
    if (torch::autograd::GradMode::is_enabled()) {
      // create_graph=True: as Python's once_differentiable, the gradients carry a node that fails
      // if they are differentiated again (this backward is not itself differentiable).
      variable_list fake;
      for (size_t i = 0; i < 3; ++i) fake.push_back(result[i].detach().requires_grad_(true));
      auto error = std::make_shared<torch::autograd::DelayedError>(
          "xrt_native.attention: its backward is not differentiable (trying to differentiate twice)", 3);
      variable_list wrapped = (*error)(std::move(fake));
      for (size_t i = 0; i < 3; ++i) result[i] = wrapped[i];
    }
    return result;
  }
};

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t plan, int64_t stream) {
  return AttentionFunction::apply(q, k, v, plan, stream);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(xrt_native, m) {
  m.def("attention(Tensor q, Tensor k, Tensor v, int plan, int stream) -> Tensor", &attention);
  m.def("add_attention_plan(int[] spec) -> int", &add_attention_plan);
}
