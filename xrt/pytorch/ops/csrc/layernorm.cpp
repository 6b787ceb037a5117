// xrt's layernorm for eager training, forward and backward in C++: the op `xrt_native::layernorm`
// is a torch::autograd::Function whose forward and backward allocate their outputs with ATen and
// launch xrt's own compiled kernels (Triton's or CUDA C's) with cuLaunchKernel, so that neither the
// call nor autograd's backward runs any Python. The kernels, their grids and their arguments are
// those of a plan worked out in Python once per input signature (xrt/pytorch/ops/native.py
// encodes it; `xrt_native::add_plan` keeps it here under an id for the life of the process).
//
// Built by xrt/pytorch/ops/native.py with the host's C++ compiler against the installed torch; it
// needs no CUDA headers or libraries at build time (the driver is opened with dlopen at the first
// launch), so it builds and its autograd plumbing is tested on machines without a GPU.

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/library.h>

#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// -- the CUDA driver, opened at the first launch -------------------------------------------------

using CUresult = int;
using LaunchKernel = CUresult (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  void*, void**, void**);
using ErrorString = CUresult (*)(CUresult, const char**);
using ModuleLoadData = CUresult (*)(void**, const void*);
using ModuleGetFunction = CUresult (*)(void**, void*, const char*);
using CtxGetCurrent = CUresult (*)(void**);

struct Driver {
  LaunchKernel launch = nullptr;
  ErrorString error_string = nullptr;
  ModuleLoadData module_load_data = nullptr;
  ModuleGetFunction module_get_function = nullptr;
  CtxGetCurrent ctx_get_current = nullptr;
  std::string why;  // why there is no launch, when there is none
};

const Driver& driver() {
  static const Driver d = [] {
    Driver d;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = dlerror();
      d.why = std::string("libcuda.so.1 could not be opened: ") + (e ? e : "unknown error");
      return d;
    }
    d.launch = reinterpret_cast<LaunchKernel>(dlsym(lib, "cuLaunchKernel"));
    d.error_string = reinterpret_cast<ErrorString>(dlsym(lib, "cuGetErrorString"));
    d.module_load_data = reinterpret_cast<ModuleLoadData>(dlsym(lib, "cuModuleLoadData"));
    d.module_get_function = reinterpret_cast<ModuleGetFunction>(dlsym(lib, "cuModuleGetFunction"));
    d.ctx_get_current = reinterpret_cast<CtxGetCurrent>(dlsym(lib, "cuCtxGetCurrent"));
    if (d.launch == nullptr || d.module_load_data == nullptr || d.module_get_function == nullptr ||
        d.ctx_get_current == nullptr) {
      d.launch = nullptr;
      d.why = "libcuda.so.1 lacks cuLaunchKernel, cuModuleLoadData, cuModuleGetFunction or cuCtxGetCurrent";
    }
    return d;
  }();
  return d;
}

std::string describe(const Driver& d, CUresult rc) {
  const char* what = nullptr;
  if (d.error_string != nullptr) d.error_string(rc, &what);
  return "CUDA error " + std::to_string(rc) + " (" + (what ? what : "no description") + ")";
}

// The function `name` of the cubin at `path`, loaded into the calling thread's current context (the plan's
// device's primary context: the caller makes that device current). Modules stay loaded for the
// life of the process, as the plans that name their functions do.
int64_t load_function(std::string path, std::string name) {
  std::ifstream file(path, std::ios::binary);
  TORCH_CHECK(file.good(), "xrt_native.load_function: cannot read ", path);
  std::string cubin((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const Driver& d = driver();
  TORCH_CHECK(d.launch != nullptr, "xrt_native.load_function: ", d.why);
  void* ctx = nullptr;
  CUresult rc = d.ctx_get_current(&ctx);
  TORCH_CHECK(rc == 0 && ctx != nullptr, "xrt_native.load_function: no current CUDA context on this thread");
  void* module = nullptr;
  rc = d.module_load_data(&module, cubin.data());
  TORCH_CHECK(rc == 0, "xrt_native.load_function: cuModuleLoadData failed: ", describe(d, rc));
  void* function = nullptr;
  rc = d.module_get_function(&function, module, name.c_str());
  TORCH_CHECK(rc == 0, "xrt_native.load_function: the cubin has no kernel ", name, ": ", describe(d, rc));
  return static_cast<int64_t>(reinterpret_cast<uintptr_t>(function));
}

// Counts and shapes in messages, as int64_t and text.
int64_t count_of(size_t n) { return static_cast<int64_t>(n); }

std::string shape_of(const at::Tensor& t) {
  std::string out = "[";
  for (int64_t d = 0; d < t.dim(); ++d) out += (d ? ", " : "") + std::to_string(t.size(d));
  return out + "]";
}

// -- plans ----------------------------------------------------------------------------------------

// A kernel parameter: where its value comes from. Kinds and their fields (a, b):
enum Kind : int64_t {
  PTR = 0,  // a tensor's address: slot a, plus b bytes
  I32 = 1,  // the constant a, as int32
  I64 = 2,  // the constant a, as int64
  F32 = 3,  // the float32 whose bits are a
  EPS = 4,  // the call's eps, as float32
  I8 = 5,   // the constant a, as int8
  U32 = 6,  // the constant a, as uint32
  U64 = 7,  // the constant a, as uint64
  F64 = 8,  // the float64 whose bits are a
};
constexpr int64_t kKinds = 9;
constexpr size_t kMaxParams = 40;

struct Param {
  int64_t kind, a, b;
};

struct Launch {
  uint64_t function;  // a CUfunction of the plan's device
  unsigned grid[3], block[3], shared;
  std::vector<Param> params;
};

// Slots: the forward's tensors are x, weight, bias, y, stats (fp32 [2, M]: mean then rstd); the
// backward's are dy, x, weight, stats, dx, partials (fp32 [2, G, N]), dweight+dbias ([2, N]).
constexpr int64_t kFwdSlots = 5, kBwdSlots = 7;

struct Plan {
  int64_t m = 0, n = 0, groups = 0, device = -1;
  std::vector<Launch> fwd, bwd;
};

std::mutex plans_mutex;
std::deque<Plan> plans;  // never shrinks: an id stays valid for the life of the process

const Plan& plan_at(int64_t id) {
  std::lock_guard<std::mutex> lock(plans_mutex);
  TORCH_CHECK(id >= 0 && id < static_cast<int64_t>(plans.size()), "xrt_native.layernorm: no plan ", id,
              " (", count_of(plans.size()), " added)");
  return plans[static_cast<size_t>(id)];
}

// The spec: [m, n, groups, device, n_fwd, <launch>..., n_bwd, <launch>...], a launch being
// [function, gx, gy, gz, bx, by, bz, shared, n_params, (kind, a, b)...].
struct Reader {
  const std::vector<int64_t>& v;
  size_t i = 0;
  int64_t next(const char* what) {
    TORCH_CHECK(i < v.size(), "xrt_native.add_plan: the spec ends before its ", what, " (", count_of(v.size()),
                " values)");
    return v[i++];
  }
};

Launch read_launch(Reader& r, int64_t slots) {
  Launch l;
  l.function = static_cast<uint64_t>(r.next("function"));
  TORCH_CHECK(l.function != 0, "xrt_native.add_plan: a launch has no function");
  for (unsigned& g : l.grid) {
    int64_t x = r.next("grid");
    TORCH_CHECK(x >= 1 && x <= INT32_MAX, "xrt_native.add_plan: grid dimension ", x, " is out of range");
    g = static_cast<unsigned>(x);
  }
  for (unsigned& b : l.block) {
    int64_t x = r.next("block");
    TORCH_CHECK(x >= 1 && x <= 1024, "xrt_native.add_plan: block dimension ", x, " is out of range");
    b = static_cast<unsigned>(x);
  }
  int64_t shared = r.next("shared memory");
  TORCH_CHECK(shared >= 0 && shared <= INT32_MAX, "xrt_native.add_plan: shared memory ", shared, " is out of range");
  l.shared = static_cast<unsigned>(shared);
  int64_t count = r.next("parameter count");
  TORCH_CHECK(count >= 0 && count <= static_cast<int64_t>(kMaxParams), "xrt_native.add_plan: ", count,
              " parameters (at most ", count_of(kMaxParams), ")");
  for (int64_t k = 0; k < count; ++k) {
    Param p{r.next("parameter kind"), r.next("parameter"), r.next("parameter")};
    TORCH_CHECK(p.kind >= 0 && p.kind < kKinds, "xrt_native.add_plan: unknown parameter kind ", p.kind);
    TORCH_CHECK(p.kind != PTR || (p.a >= 0 && p.a < slots), "xrt_native.add_plan: slot ", p.a,
                " does not exist (", slots, " slots)");
    l.params.push_back(p);
  }
  return l;
}

int64_t add_plan(std::vector<int64_t> spec) {
  Reader r{spec};
  Plan p;
  p.m = r.next("m");
  p.n = r.next("n");
  p.groups = r.next("groups");
  p.device = r.next("device");
  TORCH_CHECK(p.m >= 1 && p.n >= 1 && p.groups >= 1, "xrt_native.add_plan: m=", p.m, ", n=", p.n,
              ", groups=", p.groups, " must be positive");
  for (int64_t k = r.next("forward launch count"); k > 0; --k) p.fwd.push_back(read_launch(r, kFwdSlots));
  for (int64_t k = r.next("backward launch count"); k > 0; --k) p.bwd.push_back(read_launch(r, kBwdSlots));
  TORCH_CHECK(r.i == spec.size(), "xrt_native.add_plan: ",
              count_of(spec.size() - r.i), " values after the spec's end");
  std::lock_guard<std::mutex> lock(plans_mutex);
  plans.push_back(std::move(p));
  return static_cast<int64_t>(plans.size()) - 1;
}

// -- launching --------------------------------------------------------------------------------------

template <typename T>
void put(uint64_t& cell, T value) {
  static_assert(sizeof(T) <= sizeof(uint64_t));
  std::memcpy(&cell, &value, sizeof(T));
}

void run(const Launch& l, const uint64_t* slots, double eps, int64_t stream) {
  uint64_t cells[kMaxParams];
  void* args[kMaxParams];
  const size_t count = l.params.size();
  for (size_t i = 0; i < count; ++i) {
    const Param& p = l.params[i];
    cells[i] = 0;
    switch (p.kind) {
      case PTR: put(cells[i], slots[p.a] + static_cast<uint64_t>(p.b)); break;
      case I32: put(cells[i], static_cast<int32_t>(p.a)); break;
      case I64: put(cells[i], p.a); break;
      case F32: put(cells[i], static_cast<uint32_t>(p.a)); break;
      case EPS: put(cells[i], static_cast<float>(eps)); break;
      case I8: put(cells[i], static_cast<int8_t>(p.a)); break;
      case U32: put(cells[i], static_cast<uint32_t>(p.a)); break;
      case U64: put(cells[i], static_cast<uint64_t>(p.a)); break;
      default: put(cells[i], p.a); break;  // F64: the bits
    }
    args[i] = &cells[i];
  }
  const Driver& d = driver();
  TORCH_CHECK(d.launch != nullptr, "xrt_native.layernorm: cannot launch: ", d.why);
  CUresult rc = d.launch(reinterpret_cast<void*>(l.function), l.grid[0], l.grid[1], l.grid[2], l.block[0],
                         l.block[1], l.block[2], l.shared, reinterpret_cast<void*>(stream), args, nullptr);
  TORCH_CHECK(rc == 0, "xrt_native.layernorm: cuLaunchKernel failed: ", describe(d, rc));
}

uint64_t address(const at::Tensor& t) { return reinterpret_cast<uint64_t>(t.data_ptr()); }

int64_t tensor_device(const at::Tensor& t) { return t.is_cuda() ? t.device().index() : -1; }

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
    const Plan& p = plan_at(plan);
    check_inputs(p, x, weight, bias);
    at::Tensor y = at::empty_like(x);
    at::Tensor stats = at::empty({2, p.m}, x.options().dtype(at::kFloat));
    const uint64_t slots[kFwdSlots] = {address(x), address(weight), address(bias), address(y), address(stats)};
    for (const Launch& l : p.fwd) run(l, slots, eps, stream);
    ctx->save_for_backward({x, weight, stats});
    ctx->saved_data["plan"] = plan;
    ctx->saved_data["stream"] = stream;  // autograd runs a backward on its forward's stream
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Plan& p = plan_at(ctx->saved_data["plan"].toInt());
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
    for (const Launch& l : p.bwd) run(l, slots, 0.0, stream);
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
