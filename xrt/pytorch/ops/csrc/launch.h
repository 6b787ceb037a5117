// What xrt's native ops share: the CUDA driver, opened at the first launch, and a launch of one of
// xrt's compiled kernels (Triton's or CUDA C's) that a plan worked out in Python once
// (xrt/pytorch/ops/native.py encodes it): the function, grid, block, shared memory, and where each
// kernel parameter comes from (a tensor's address, a constant, the call's eps, a host TMA
// descriptor made from a tensor's address).
//
// Included by each op's source (layernorm.cpp, linear.cpp); each keeps its own plans. Needs no CUDA
// headers or libraries at build time, so the ops build, and their autograd plumbing is tested, on
// machines without a GPU.

#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_strided.h>
#include <c10/util/Exception.h>

#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace xrt_native {

// -- the CUDA driver, opened at the first launch -------------------------------------------------

using CUresult = int;
using LaunchKernel = CUresult (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  void*, void**, void**);
using ErrorString = CUresult (*)(CUresult, const char**);
using ModuleLoadData = CUresult (*)(void**, const void*);
using ModuleGetFunction = CUresult (*)(void**, void*, const char*);
using CtxGetCurrent = CUresult (*)(void**);
using CtxSetCurrent = CUresult (*)(void*);
using DeviceGet = CUresult (*)(int*, int);
using PrimaryCtxRetain = CUresult (*)(void**, int);
// cuTensorMapEncodeTiled(map, data type, rank, address, dims, strides (bytes), box, element strides,
// interleave, swizzle, L2 promotion, out-of-bounds fill); the enums are ints.
using EncodeTiled = CUresult (*)(void*, int, uint32_t, void*, const uint64_t*, const uint64_t*, const uint32_t*,
                                 const uint32_t*, int, int, int, int);

struct Driver {
  LaunchKernel launch = nullptr;
  ErrorString error_string = nullptr;
  ModuleLoadData module_load_data = nullptr;
  ModuleGetFunction module_get_function = nullptr;
  CtxGetCurrent ctx_get_current = nullptr;
  CtxSetCurrent ctx_set_current = nullptr;  // (these three: to make a device's primary context current)
  DeviceGet device_get = nullptr;
  PrimaryCtxRetain primary_ctx_retain = nullptr;
  EncodeTiled encode_tiled = nullptr;  // (CUDA 12 and later; a plan with TMA descriptors needs it)
  std::string why;  // why there is no launch, when there is none
};

inline const Driver& driver() {
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
    d.ctx_set_current = reinterpret_cast<CtxSetCurrent>(dlsym(lib, "cuCtxSetCurrent"));
    d.device_get = reinterpret_cast<DeviceGet>(dlsym(lib, "cuDeviceGet"));
    d.primary_ctx_retain = reinterpret_cast<PrimaryCtxRetain>(dlsym(lib, "cuDevicePrimaryCtxRetain"));
    d.encode_tiled = reinterpret_cast<EncodeTiled>(dlsym(lib, "cuTensorMapEncodeTiled"));
    if (d.launch == nullptr || d.module_load_data == nullptr || d.module_get_function == nullptr ||
        d.ctx_get_current == nullptr) {
      d.launch = nullptr;
      d.why = "libcuda.so.1 lacks cuLaunchKernel, cuModuleLoadData, cuModuleGetFunction or cuCtxGetCurrent";
    }
    return d;
  }();
  return d;
}

inline std::string describe(const Driver& d, CUresult rc) {
  const char* what = nullptr;
  if (d.error_string != nullptr) d.error_string(rc, &what);
  return "CUDA error " + std::to_string(rc) + " (" + (what ? what : "no description") + ")";
}

// The function `name` of the cubin at `path`, loaded into the calling thread's current context (the plan's
// device's primary context: the caller makes that device current). Modules stay loaded for the
// life of the process, as the plans that name their functions do.
inline int64_t load_function(std::string path, std::string name) {
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

// Make `device`'s primary context current on this thread where none is (as Triton's launcher does
// before a launch): a thread that has not touched CUDA through the runtime yet, such as autograd's
// device thread before its first backward, has none, and a launch there fails. A CPU plan (device
// -1) launches nothing.
inline void ensure_context(int64_t device, const char* op) {
  if (device < 0) return;
  const Driver& d = driver();
  if (d.launch == nullptr || d.ctx_set_current == nullptr || d.device_get == nullptr ||
      d.primary_ctx_retain == nullptr)
    return;  // (run() says why it cannot launch)
  void* ctx = nullptr;
  if (d.ctx_get_current(&ctx) == 0 && ctx != nullptr) return;
  int dev = 0;
  CUresult rc = d.device_get(&dev, static_cast<int>(device));
  if (rc == 0) rc = d.primary_ctx_retain(&ctx, dev);
  if (rc == 0) rc = d.ctx_set_current(ctx);
  TORCH_CHECK(rc == 0, op, ": cannot make device ", device, "'s context current: ", describe(d, rc));
}

// Counts and shapes in messages, as int64_t and text.
inline int64_t count_of(size_t n) { return static_cast<int64_t>(n); }

inline std::string shape_of(const at::Tensor& t) {
  std::string out = "[";
  for (int64_t d = 0; d < t.dim(); ++d) out += (d ? ", " : "") + std::to_string(t.size(d));
  return out + "]";
}

inline uint64_t address(const at::Tensor& t) {
  return t.defined() ? reinterpret_cast<uint64_t>(t.data_ptr()) : 0;
}

inline int64_t tensor_device(const at::Tensor& t) { return t.is_cuda() ? t.device().index() : -1; }

// `t`, or a copy of it at a 16-byte-aligned address (a view at an odd offset): the kernels were
// compiled for aligned pointers.
inline at::Tensor aligned(const at::Tensor& t) { return (address(t) & 15) ? t.clone() : t; }

// `t` with `strides` (the layout a launch was planned for), copied into that layout where it has
// another or is not 16-byte aligned.
inline at::Tensor laid(const at::Tensor& t, const std::vector<int64_t>& strides) {
  if (t.strides() == at::IntArrayRef(strides) && (address(t) & 15) == 0) return t;
  at::Tensor out = at::empty_strided(t.sizes(), strides, t.options());
  out.copy_(t);
  return out;
}

// An op's plans, each kept under its id for the life of the process (the list never shrinks, so an
// id a graph still holds stays valid).
template <typename Plan>
struct Plans {
  const char* op;
  std::mutex mutex;
  std::deque<Plan> list;  // (a deque: adding a plan moves none of the others)

  const Plan& at(int64_t id) {
    std::lock_guard<std::mutex> lock(mutex);
    TORCH_CHECK(id >= 0 && id < static_cast<int64_t>(list.size()), op, ": no plan ", id, " (",
                count_of(list.size()), " added)");
    return list[static_cast<size_t>(id)];
  }

  int64_t add(Plan&& p) {
    std::lock_guard<std::mutex> lock(mutex);
    list.push_back(std::move(p));
    return static_cast<int64_t>(list.size()) - 1;
  }
};

// -- launches ---------------------------------------------------------------------------------------

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
  TMA = 9,  // the launch's host TMA descriptor a (a CUtensorMap, 128 bytes, passed by value)
};
constexpr int64_t kKinds = 10;
constexpr size_t kMaxParams = 64;
constexpr size_t kMaxDescs = 8;
constexpr size_t kMaxRank = 5;
constexpr size_t kKeptMaps = 256;  // encoded descriptors kept per descriptor (beyond: all dropped)

struct Param {
  int64_t kind, a, b;
};

struct alignas(64) TensorMap {
  uint64_t bits[16];
};

// A host TMA descriptor of a launch, as Triton's launcher encodes it (fill_tma_descriptor): the
// tensor at slot + offset bytes, innermost dimension first. Encodings are kept per address: a
// model's steps hand the same addresses back.
struct Desc {
  int64_t slot = 0, offset = 0, elem_type = 0, swizzle = 0, fill = 0;
  uint32_t rank = 0;
  uint64_t dims[kMaxRank] = {}, strides[kMaxRank] = {};  // strides in bytes, rank - 1 of them
  uint32_t box[kMaxRank] = {};
  struct Kept {
    std::mutex mutex;
    std::unordered_map<uint64_t, TensorMap> maps;
  };
  std::shared_ptr<Kept> kept = std::make_shared<Kept>();
};

struct Launch {
  uint64_t function;  // a CUfunction of the plan's device
  unsigned grid[3], block[3], shared;
  std::vector<Param> params;
  std::vector<Desc> descs;
};

// A plan's spec is read as a list of int64: a launch is
// [function, gx, gy, gz, bx, by, bz, shared, n_params, (kind, a, b)..., n_descs, <desc>...], a desc
// [slot, offset, elem_type, swizzle, fill, rank, dims (innermost first)..., strides (bytes, rank - 1)...,
// box (innermost first)...].
struct Reader {
  const std::vector<int64_t>& v;
  const char* op;
  size_t i = 0;
  int64_t next(const char* what) {
    TORCH_CHECK(i < v.size(), op, ": the spec ends before its ", what, " (", count_of(v.size()), " values)");
    return v[i++];
  }
  void done() {
    TORCH_CHECK(i == v.size(), op, ": ", count_of(v.size() - i), " values after the spec's end");
  }
};

inline Desc read_desc(Reader& r, int64_t slots) {
  Desc d;
  d.slot = r.next("descriptor slot");
  TORCH_CHECK(d.slot >= 0 && d.slot < slots, r.op, ": slot ", d.slot, " does not exist (", slots, " slots)");
  d.offset = r.next("descriptor offset");
  d.elem_type = r.next("descriptor element type");
  d.swizzle = r.next("descriptor swizzle");
  d.fill = r.next("descriptor fill");
  int64_t rank = r.next("descriptor rank");
  TORCH_CHECK(rank >= 1 && rank <= static_cast<int64_t>(kMaxRank), r.op, ": descriptor rank ", rank,
              " (1 to 5)");
  d.rank = static_cast<uint32_t>(rank);
  for (uint32_t k = 0; k < d.rank; ++k) {
    int64_t x = r.next("descriptor dims");
    TORCH_CHECK(x >= 1, r.op, ": descriptor dimension ", x, " is not positive");
    d.dims[k] = static_cast<uint64_t>(x);
  }
  for (uint32_t k = 0; k + 1 < d.rank; ++k) {
    int64_t x = r.next("descriptor strides");
    TORCH_CHECK(x >= 16 && x % 16 == 0, r.op, ": descriptor stride ", x, " bytes (a multiple of 16 is needed)");
    d.strides[k] = static_cast<uint64_t>(x);
  }
  for (uint32_t k = 0; k < d.rank; ++k) {
    int64_t x = r.next("descriptor box");
    TORCH_CHECK(x >= 1 && x <= 256, r.op, ": descriptor box ", x, " is out of range (1 to 256)");
    d.box[k] = static_cast<uint32_t>(x);
  }
  return d;
}

inline Launch read_launch(Reader& r, int64_t slots) {
  Launch l;
  l.function = static_cast<uint64_t>(r.next("function"));
  TORCH_CHECK(l.function != 0, r.op, ": a launch has no function");
  for (unsigned& g : l.grid) {
    int64_t x = r.next("grid");
    TORCH_CHECK(x >= 1 && x <= INT32_MAX, r.op, ": grid dimension ", x, " is out of range");
    g = static_cast<unsigned>(x);
  }
  for (unsigned& b : l.block) {
    int64_t x = r.next("block");
    TORCH_CHECK(x >= 1 && x <= 1024, r.op, ": block dimension ", x, " is out of range");
    b = static_cast<unsigned>(x);
  }
  int64_t shared = r.next("shared memory");
  TORCH_CHECK(shared >= 0 && shared <= INT32_MAX, r.op, ": shared memory ", shared, " is out of range");
  l.shared = static_cast<unsigned>(shared);
  int64_t count = r.next("parameter count");
  TORCH_CHECK(count >= 0 && count <= static_cast<int64_t>(kMaxParams), r.op, ": ", count,
              " parameters (at most ", count_of(kMaxParams), ")");
  for (int64_t k = 0; k < count; ++k) {
    Param p{r.next("parameter kind"), r.next("parameter"), r.next("parameter")};
    TORCH_CHECK(p.kind >= 0 && p.kind < kKinds, r.op, ": unknown parameter kind ", p.kind);
    TORCH_CHECK(p.kind != PTR || (p.a >= 0 && p.a < slots), r.op, ": slot ", p.a, " does not exist (", slots,
                " slots)");
    l.params.push_back(p);
  }
  int64_t descs = r.next("descriptor count");
  TORCH_CHECK(descs >= 0 && descs <= static_cast<int64_t>(kMaxDescs), r.op, ": ", descs,
              " descriptors (at most ", count_of(kMaxDescs), ")");
  for (int64_t k = 0; k < descs; ++k) l.descs.push_back(read_desc(r, slots));
  for (const Param& p : l.params) {
    TORCH_CHECK(p.kind != TMA || (p.a >= 0 && p.a < descs), r.op, ": descriptor ", p.a, " does not exist (",
                descs, " descriptors)");
  }
  return l;
}

template <typename T>
void put(uint64_t& cell, T value) {
  static_assert(sizeof(T) <= sizeof(uint64_t));
  std::memcpy(&cell, &value, sizeof(T));
}

// The descriptor `d` of the tensor at `base` (kept per address).
inline void encode(const Driver& drv, const Desc& d, uint64_t base, TensorMap& out, const char* op) {
  {
    std::lock_guard<std::mutex> lock(d.kept->mutex);
    auto hit = d.kept->maps.find(base);
    if (hit != d.kept->maps.end()) {
      out = hit->second;
      return;
    }
  }
  TORCH_CHECK(drv.encode_tiled != nullptr, op, ": libcuda.so.1 lacks cuTensorMapEncodeTiled");
  TORCH_CHECK((base & 15) == 0, op, ": a TMA descriptor's base ", base, " is not 16-byte aligned");
  const uint32_t element_strides[kMaxRank] = {1, 1, 1, 1, 1};
  // interleave none (0), L2 promotion 128B (2), as Triton's launcher encodes
  CUresult rc = drv.encode_tiled(&out, static_cast<int>(d.elem_type), d.rank, reinterpret_cast<void*>(base), d.dims,
                                 d.strides, d.box, element_strides, 0, static_cast<int>(d.swizzle), 2,
                                 static_cast<int>(d.fill));
  TORCH_CHECK(rc == 0, op, ": cuTensorMapEncodeTiled failed: ", describe(drv, rc));
  std::lock_guard<std::mutex> lock(d.kept->mutex);
  if (d.kept->maps.size() >= kKeptMaps) d.kept->maps.clear();
  d.kept->maps.emplace(base, out);
}

// Launch `l` on `stream`, its pointers from `slots` (tensors' addresses), `eps` for an EPS parameter.
inline void run(const Launch& l, const uint64_t* slots, double eps, int64_t stream, const char* op) {
  uint64_t cells[kMaxParams];
  TensorMap maps[kMaxDescs];
  void* args[kMaxParams];
  const Driver& d = driver();
  TORCH_CHECK(d.launch != nullptr, op, ": cannot launch: ", d.why);
  const size_t count = l.params.size();
  for (size_t i = 0; i < count; ++i) {
    const Param& p = l.params[i];
    cells[i] = 0;
    args[i] = &cells[i];
    switch (p.kind) {
      case PTR: put(cells[i], slots[p.a] + static_cast<uint64_t>(p.b)); break;
      case I32: put(cells[i], static_cast<int32_t>(p.a)); break;
      case I64: put(cells[i], p.a); break;
      case F32: put(cells[i], static_cast<uint32_t>(p.a)); break;
      case EPS: put(cells[i], static_cast<float>(eps)); break;
      case I8: put(cells[i], static_cast<int8_t>(p.a)); break;
      case U32: put(cells[i], static_cast<uint32_t>(p.a)); break;
      case U64: put(cells[i], static_cast<uint64_t>(p.a)); break;
      case TMA: {
        const Desc& desc = l.descs[static_cast<size_t>(p.a)];
        encode(d, desc, slots[desc.slot] + static_cast<uint64_t>(desc.offset), maps[p.a], op);
        args[i] = &maps[p.a];
        break;
      }
      default: put(cells[i], p.a); break;  // F64: the bits
    }
  }
  CUresult rc = d.launch(reinterpret_cast<void*>(l.function), l.grid[0], l.grid[1], l.grid[2], l.block[0],
                         l.block[1], l.block[2], l.shared, reinterpret_cast<void*>(stream), args, nullptr);
  TORCH_CHECK(rc == 0, op, ": cuLaunchKernel failed: ", describe(d, rc));
}

}  // namespace xrt_native
