// kvattn._C: the nanobind extension behind the `kvattn` Python package.
//
// Tensors cross as DLPack, without copies:
//   - types that publish the DLPack C exchange API (`type(t).__dlpack_c_exchange_api__`,
//     PyTorch >= 2.10) are read in C with `dltensor_from_py_object_no_sync` (no allocation,
//     no Python call); their current stream comes from `current_work_stream`, and outputs
//     and decode workspaces are allocated with the framework's own allocator
//     (`managed_tensor_allocator`, PyTorch's caching allocator: stream-ordered, CUDA-graph aware);
//   - older PyTorch: `torch._C._to_dlpack(t)` capsules, the stream from
//     `torch._C._cuda_getCurrentRawStream`;
//   - anything else with `__dlpack__` (NumPy on the CPU): its capsule; outputs come from a
//     Python allocator the package registers (`_set_fallback_allocator`).
// kvattn::Error becomes kvattn.Error (a RuntimeError and a ValueError) with kvattn's message,
// raised inside the binding (Guarded, run): no C++ exception crosses nanobind's dispatch.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <deque>
#include <string>

#include "dlpack_exchange.h"
#ifdef KVATTN_WITH_CUDA
#include <cuda_runtime_api.h>
#endif
#include "kvattn/core/dlpack.h"
#include "kvattn/kernels/decode_attention.h"
#include "kvattn/kernels/device_faults.h"
#include "kvattn/kernels/prefill_attention.h"
#include "kvattn/kernels/store_kv.h"

namespace nb = nanobind;

namespace kvattn::py {
namespace {

// ---- module state (guarded by the GIL) ----------------------------------------------------

PyObject* g_error = nullptr;             // kvattn.Error
PyObject* g_needs_grad = nullptr;        // kvattn._C.NeedsGrad (a NotImplementedError)
PyObject* g_fallback_alloc = nullptr;    // f(shape: tuple, dtype: str, like) -> array
PyObject* g_torch_to_dlpack = nullptr;   // torch._C._to_dlpack (legacy PyTorch)
PyObject* g_torch_raw_stream = nullptr;  // torch._C._cuda_getCurrentRawStream
PyObject* g_torch_grad_enabled = nullptr;  // torch.is_grad_enabled
PyObject* g_torch_empty_like = nullptr;    // torch.empty_like
PyObject* g_str_dlpack = nullptr;        // "__dlpack__"
PyObject* g_str_requires_grad = nullptr; // "requires_grad"

// What kvattn knows about one Python tensor type.
struct TypeInfo {
  PyTypeObject* type = nullptr;
  const DLPackExchangeAPI* api = nullptr;  // DLPack C exchange API (major version 1) or null
  bool torch = false;                      // a torch.Tensor (sub)class
};
std::deque<TypeInfo> g_types;  // a deque: references stay valid as it grows

PyObject* import_attr(const char* module, const char* attr) {
  PyObject* mod = PyImport_ImportModule(module);
  if (mod == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  PyObject* f = PyObject_GetAttrString(mod, attr);
  Py_DECREF(mod);
  if (f == nullptr) PyErr_Clear();
  return f;
}

bool is_torch_type(PyTypeObject* tp) {
  for (PyTypeObject* t = tp; t != nullptr; t = t->tp_base) {
    if (std::strcmp(t->tp_name, "torch._C.TensorBase") == 0 ||
        std::strcmp(t->tp_name, "torch._C._TensorBase") == 0) {
      return true;
    }
  }
  return false;
}

const TypeInfo& type_info(PyTypeObject* tp) {
  for (const TypeInfo& t : g_types) {
    if (t.type == tp) return t;
  }
  TypeInfo info;
  info.type = tp;
  Py_INCREF(reinterpret_cast<PyObject*>(tp));  // the cache holds the type
  PyObject* cap = PyObject_GetAttrString(reinterpret_cast<PyObject*>(tp), "__dlpack_c_exchange_api__");
  if (cap != nullptr) {
    const DLPackExchangeAPIHeader* h = nullptr;
    if (PyCapsule_IsValid(cap, "dlpack_exchange_api")) {
      h = static_cast<const DLPackExchangeAPIHeader*>(
          PyCapsule_GetPointer(cap, "dlpack_exchange_api"));
    } else if (PyLong_Check(cap)) {  // early producers published the table's address as an int
      h = static_cast<const DLPackExchangeAPIHeader*>(PyLong_AsVoidPtr(cap));
      if (PyErr_Occurred()) {
        PyErr_Clear();
        h = nullptr;
      }
    }
    {
      while (h != nullptr && h->version.major != 1) h = h->prev_api;
      // Major 1, minor >= 2: the table layout this binding knows (the API appeared in 1.2).
      if (h != nullptr && h->version.minor >= 2) {
        info.api = reinterpret_cast<const DLPackExchangeAPI*>(h);
      }
    }
    Py_DECREF(cap);  // the table itself lives as long as the process
  } else {
    PyErr_Clear();
  }
  info.torch = is_torch_type(tp);
  if (info.torch) {
    if (g_torch_to_dlpack == nullptr) g_torch_to_dlpack = import_attr("torch._C", "_to_dlpack");
    if (g_torch_raw_stream == nullptr) {
      g_torch_raw_stream = import_attr("torch._C", "_cuda_getCurrentRawStream");
    }
    if (g_torch_grad_enabled == nullptr) {
      g_torch_grad_enabled = import_attr("torch", "is_grad_enabled");
    }
    if (g_torch_empty_like == nullptr) g_torch_empty_like = import_attr("torch", "empty_like");
  }
  g_types.push_back(info);
  return g_types.back();
}

[[noreturn]] void raise_python() { throw nb::python_error(); }

[[noreturn]] void raise_type(const std::string& msg) {
  PyErr_SetString(PyExc_TypeError, msg.c_str());
  raise_python();
}

// The producer's `__dlpack__()` raised (NumPy refuses read-only, broadcast and non-native
// byte order arrays there: the legacy protocol cannot say "read-only"): a TypeError naming
// the argument and what to pass instead, chained onto the producer's error (its cause).
[[noreturn]] void raise_export_failure(const char* name) {
  nb::chain_error(PyExc_TypeError,
                  "kvattn: %s could not be exported through DLPack (NumPy refuses read-only, "
                  "broadcast and non-native byte order arrays); pass a writable, native-byte-"
                  "order array, e.g. numpy.array(%s) or %s.copy()",
                  name, name, name);
  raise_python();
}

// ---- one call's imported tensors ----------------------------------------------------------

// Keeps what the views of one call point into alive until the call returns: legacy capsules
// (their destructors run the producer's deleter) and managed tensors (workspaces).
class CallScope {
 public:
  CallScope() = default;
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;
  ~CallScope() {
    for (int i = 0; i < n_caps_; ++i) Py_DECREF(caps_[i]);
    for (int i = 0; i < n_managed_; ++i) {
      if (managed_[i]->deleter != nullptr) managed_[i]->deleter(managed_[i]);
    }
  }
  void keep(PyObject* capsule) {
    if (n_caps_ == kMax) {
      Py_DECREF(capsule);
      raise_type("kvattn: too many tensor arguments");
    }
    caps_[n_caps_++] = capsule;
  }
  void keep(DLManagedTensorVersioned* m) {
    if (n_managed_ == kMax) {
      if (m->deleter != nullptr) m->deleter(m);
      raise_type("kvattn: too many tensor arguments");
    }
    managed_[n_managed_++] = m;
  }

 private:
  static constexpr int kMax = 16;
  std::array<PyObject*, kMax> caps_{};
  std::array<DLManagedTensorVersioned*, kMax> managed_{};
  int n_caps_ = 0;
  int n_managed_ = 0;
};

// The kvattn view of a DLTensor (kvattn::from_dltensor: no heap allocation), its errors
// prefixed with the argument's name.
TensorView view_of(const DLTensor& t, const char* name) {
  try {
    return from_dltensor(t);
  } catch (const Error& e) {
    throw Error(std::string("kvattn: ") + name + ": " + e.what());
  }
}

// The kvattn view of `obj` (None => an empty view, "not given").
TensorView import_tensor(PyObject* obj, const char* name, CallScope& scope,
                         const TypeInfo** info_out = nullptr) {
  if (obj == Py_None) return TensorView{};
  const TypeInfo& info = type_info(Py_TYPE(obj));
  if (info_out != nullptr) *info_out = &info;
  if (info.api != nullptr && info.api->dltensor_from_py_object_no_sync != nullptr) {
    DLTensor t{};
    if (info.api->dltensor_from_py_object_no_sync(obj, &t) != 0) raise_python();
    return view_of(t, name);
  }
  if (info.api != nullptr) {
    DLManagedTensorVersioned* m = nullptr;
    if (info.api->managed_tensor_from_py_object_no_sync(obj, &m) != 0) raise_python();
    scope.keep(m);
    return view_of(m->dl_tensor, name);
  }
  PyObject* cap = nullptr;
  if (info.torch && g_torch_to_dlpack != nullptr) {
    cap = PyObject_CallOneArg(g_torch_to_dlpack, obj);
  } else if (PyObject_HasAttr(obj, g_str_dlpack)) {
    cap = PyObject_CallMethodNoArgs(obj, g_str_dlpack);
    if (cap == nullptr) raise_export_failure(name);
  } else {
    raise_type(std::string("kvattn: ") + name + " must be a tensor or array that supports DLPack " +
               "(torch.Tensor, numpy.ndarray, ...) but is " + Py_TYPE(obj)->tp_name);
  }
  if (cap == nullptr) raise_python();
  scope.keep(cap);
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
  if (m == nullptr) raise_python();
  return view_of(m->dl_tensor, name);
}

// The stream a call on `device` runs on: the framework's current stream of that device.
Stream current_stream(const TypeInfo* info, Device device) {
  if (!device.is_cuda() || info == nullptr) return Stream{};
  if (info->api != nullptr) {
    void* s = nullptr;
    if (info->api->current_work_stream(kDLCUDA, device.index, &s) != 0) raise_python();
    return Stream{s};
  }
  if (info->torch && g_torch_raw_stream != nullptr) {
    PyObject* idx = PyLong_FromLong(device.index);
    if (idx == nullptr) raise_python();
    PyObject* r = PyObject_CallOneArg(g_torch_raw_stream, idx);
    Py_DECREF(idx);
    if (r == nullptr) raise_python();
    void* s = PyLong_AsVoidPtr(r);
    Py_DECREF(r);
    if (s == nullptr && PyErr_Occurred()) raise_python();
    return Stream{s};
  }
  return Stream{};  // unknown framework: the legacy default stream
}

// PyTorch autograd: kvattn has no backward. An input that would need one raises
// kvattn._C.NeedsGrad (a NotImplementedError) before anything runs; the package catches it
// and runs the forward on detached views under a torch.autograd.Function whose backward
// raises (interface.py: _forward_only), so the hot path pays nothing for it.
void check_no_grad(PyObject* obj, const char* name) {
  if (obj == Py_None || !type_info(Py_TYPE(obj)).torch) return;
  PyObject* rg = PyObject_GetAttr(obj, g_str_requires_grad);
  if (rg == nullptr) {
    PyErr_Clear();
    return;
  }
  const bool needs_grad = rg == Py_True;
  Py_DECREF(rg);
  if (!needs_grad || g_torch_grad_enabled == nullptr) return;
  PyObject* en = PyObject_CallNoArgs(g_torch_grad_enabled);
  if (en == nullptr) raise_python();
  const bool enabled = en == Py_True;
  Py_DECREF(en);
  if (enabled) {
    PyErr_Format(g_needs_grad,
                 "kvattn: %s requires grad, but kvattn has no backward pass; run under "
                 "torch.no_grad() or torch.inference_mode(), or pass %s.detach()",
                 name, name);
    raise_python();
  }
}

struct AllocError {
  std::string message;
};
void set_alloc_error(void* ctx, const char* kind, const char* message) {
  static_cast<AllocError*>(ctx)->message =
      std::string(kind != nullptr ? kind : "Error") + ": " + (message != nullptr ? message : "");
}

// A new contiguous tensor of the framework of `like` (a new reference) and its view.
// `like_view` (optional) is like's view: when the output has its shape and dtype and it is
// contiguous, a torch output is torch.empty_like(like) (one vectorcall into ATen: about half
// the host time of the DLPack allocator, which wraps the new tensor in a DLPack capsule and
// back).
nb::object allocate(const TypeInfo* like, PyObject* like_obj, Device device, DType dtype,
                    std::initializer_list<int64_t> shape_list, TensorView& view,
                    CallScope& scope, const TensorView* like_view = nullptr) {
  std::array<int64_t, kMaxDims> shape{};
  int ndim = 0;
  for (int64_t s : shape_list) shape[ndim++] = s;
  if (like != nullptr && like->torch && g_torch_empty_like != nullptr && like_view != nullptr &&
      like_view->dtype == dtype && like_view->ndim == ndim && like_view->device == device &&
      std::equal(shape.begin(), shape.begin() + ndim, like_view->shape.begin()) &&
      like_view->is_contiguous()) {
    nb::object result = nb::steal(PyObject_CallOneArg(g_torch_empty_like, like_obj));
    if (!result.is_valid()) raise_python();
    view = import_tensor(result.ptr(), "output", scope);
    return result;
  }
  if (like != nullptr && like->api != nullptr) {
    DLTensor proto{};
    proto.device = {device.is_cuda() ? kDLCUDA : kDLCPU, device.index};
    proto.ndim = ndim;
    proto.dtype = to_dlpack_dtype(dtype);
    proto.shape = shape.data();
    DLManagedTensorVersioned* m = nullptr;
    AllocError err;
    if (like->api->managed_tensor_allocator(&proto, &m, &err, set_alloc_error) != 0 || m == nullptr) {
      if (PyErr_Occurred()) raise_python();
      PyErr_Format(PyExc_MemoryError, "kvattn: allocating an output failed: %s", err.message.c_str());
      raise_python();
    }
    try {
      view = view_of(m->dl_tensor, "output");
    } catch (...) {
      if (m->deleter != nullptr) m->deleter(m);
      throw;
    }
    void* obj = nullptr;
    if (like->api->managed_tensor_to_py_object_no_sync(m, &obj) != 0) raise_python();
    return nb::steal(static_cast<PyObject*>(obj));
  }
  if (g_fallback_alloc == nullptr) raise_type("kvattn: no allocator registered (import kvattn)");
  PyObject* tup = PyTuple_New(ndim);
  if (tup == nullptr) raise_python();
  for (int d = 0; d < ndim; ++d) PyTuple_SET_ITEM(tup, d, PyLong_FromLongLong(shape[d]));
  const std::string dt(dtype_name(dtype));
  nb::object result =
      nb::steal(PyObject_CallFunction(g_fallback_alloc, "OsO", tup, dt.c_str(), like_obj));
  Py_DECREF(tup);
  if (!result.is_valid()) raise_python();
  view = import_tensor(result.ptr(), "output", scope);
  return result;
}

// A [d0 * d1, d2, d3] view of a 4-D [d0, d1, d2, d3] view whose first two dims collapse.
TensorView collapse01(const TensorView& t, const char* name) {
  if (t.ndim != 4) {
    throw Error(std::string("kvattn: ") + name + " must have rank 4 ([batch, seqlen, heads, " +
                "head_dim]) but has shape " + t.shape_str());
  }
  int64_t token_stride;
  if (t.shape[1] == 1) {
    token_stride = t.strides[0];
  } else if (t.shape[0] == 1 || t.strides[0] == t.shape[1] * t.strides[1]) {
    token_stride = t.strides[1];
  } else {
    throw Error(std::string("kvattn: ") + name + " of shape " + t.shape_str() +
                " must have its batch and seqlen dims collapsible (stride(0) == seqlen * "
                "stride(1)); pass " + name + ".contiguous()");
  }
  TensorView v = t;  // filled in place: no heap allocation on the hot path
  v.ndim = 3;
  v.shape = {t.shape[0] * t.shape[1], t.shape[2], t.shape[3], 0, 0, 0};
  v.strides = {token_stride, t.strides[2], t.strides[3], 0, 0, 0};
  return v;
}

// An int argument: a Python int or anything with __index__ (NumPy integers, ...).
int64_t as_int(nb::handle obj, const char* name) {
  const Py_ssize_t v = PyNumber_AsSsize_t(obj.ptr(), PyExc_OverflowError);
  if (v == -1 && PyErr_Occurred()) {
    if (PyErr_ExceptionMatches(PyExc_TypeError)) {
      PyErr_Clear();
      raise_type(std::string("kvattn: ") + name + " must be an int but is " +
                 Py_TYPE(obj.ptr())->tp_name);
    }
    raise_python();
  }
  return static_cast<int64_t>(v);
}

// kvattn::Error (and any other C++ exception) from the library never leaves the binding as a
// C++ exception: it is caught right where the library is called and turned into the Python
// error here, and the binding raises it as nb::python_error (the path nanobind handles itself,
// without exception_ptr/rethrow in a translator). The CPU kernels run with the GIL released;
// the exception is caught inside that region, before the GIL is taken back, so no unwinding
// ever crosses the release/acquire.
enum class Failure { kNone, kKvattn, kNoMemory, kOther };

void raise_failure(Failure f, const std::string& message) {
  switch (f) {
    case Failure::kNone: return;
    case Failure::kKvattn: PyErr_SetString(g_error, message.c_str()); break;
    case Failure::kNoMemory: PyErr_NoMemory(); break;
    case Failure::kOther: PyErr_SetString(PyExc_RuntimeError, message.c_str()); break;
  }
  raise_python();
}

template <typename Fn>
Failure catch_failure(Fn&& fn, std::string& message) noexcept {
  try {
    fn();
    return Failure::kNone;
  } catch (const Error& e) {
    try { message = e.what(); } catch (...) { return Failure::kNoMemory; }
    return Failure::kKvattn;
  } catch (const std::bad_alloc&) {
    return Failure::kNoMemory;
  } catch (const std::exception& e) {
    try { message = e.what(); } catch (...) { return Failure::kNoMemory; }
    return Failure::kOther;
  } catch (...) {
    message = "kvattn: unknown C++ exception";
    return Failure::kOther;
  }
}

// Runs the library call `fn`, with the GIL released when the work is on the CPU (the GPU only
// enqueues), and raises what it threw as a Python exception.
template <typename Fn>
void run(Device device, Fn&& fn) {
  std::string message;
  Failure f;
  if (device.is_cpu()) {
    nb::gil_scoped_release release;
    f = catch_failure(fn, message);
  } else {
    f = catch_failure(fn, message);
  }
  raise_failure(f, message);
}

// The module's functions: a kvattn::Error thrown by the binding's own checks (GIL held) is
// raised as kvattn.Error the same way. nb::python_error passes through untouched.
template <auto Fn>
struct Guarded;
template <typename R, typename... Args, R (*Fn)(Args...)>
struct Guarded<Fn> {
  static R call(Args... args) {
    std::string message;
    Failure f;
    try {
      return Fn(args...);
    } catch (const nb::python_error&) {
      throw;
    } catch (const Error& e) {
      message = e.what();
      f = Failure::kKvattn;
    } catch (const std::bad_alloc&) {
      f = Failure::kNoMemory;
    }
    raise_failure(f, message);
    throw nb::python_error();  // not reached: raise_failure raised
  }
};

// ---- decode workspaces ---------------------------------------------------------------------

// `bytes` of device memory from the framework's allocator (PyTorch: the caching allocator, on
// the device's current stream; inside a graph capture, the graph's private pool).
DLManagedTensorVersioned* framework_alloc_bytes(const DLPackExchangeAPI* api, int device,
                                                int64_t bytes) {
  DLTensor proto{};
  proto.device = {kDLCUDA, device};
  proto.ndim = 1;
  proto.dtype = {kDLUInt, 8, 1};
  proto.shape = &bytes;
  DLManagedTensorVersioned* m = nullptr;
  AllocError err;
  if (api->managed_tensor_allocator(&proto, &m, &err, set_alloc_error) != 0 || m == nullptr) {
    if (PyErr_Occurred()) raise_python();
    PyErr_Format(PyExc_MemoryError, "kvattn: allocating the decode workspace failed: %s",
                 err.message.c_str());
    raise_python();
  }
  return m;
}

// True when `stream` is being captured into a CUDA graph (or when that cannot be told).
bool stream_capturing(Stream stream) {
#ifdef KVATTN_WITH_CUDA
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(static_cast<cudaStream_t>(stream.handle), &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
#else
  (void)stream;
  return false;
#endif
}

// One workspace per (device, stream), grown on demand. Kernels on one stream run in order, so
// reusing it across calls needs no synchronization; freeing a smaller one on growth is
// stream-ordered by the allocator.
struct StreamWorkspace {
  int device = 0;
  void* stream = nullptr;
  DLManagedTensorVersioned* managed = nullptr;
  int64_t bytes = 0;
  TensorView view;
};
std::vector<StreamWorkspace> g_workspaces;

TensorView stream_workspace(const DLPackExchangeAPI* api, int device, Stream stream,
                            int64_t bytes) {
  int64_t size = std::max<int64_t>(bytes, int64_t{1} << 20);
  for (size_t i = 0; i < g_workspaces.size(); ++i) {
    StreamWorkspace& w = g_workspaces[i];
    if (w.device == device && w.stream == stream.handle) {
      if (w.bytes >= bytes) return w.view;
      size = std::max(size, 2 * w.bytes);
      DLManagedTensorVersioned* old = w.managed;
      g_workspaces.erase(g_workspaces.begin() + static_cast<std::ptrdiff_t>(i));
      if (old->deleter != nullptr) old->deleter(old);
      break;
    }
  }
  StreamWorkspace w;
  w.device = device;
  w.stream = stream.handle;
  w.managed = framework_alloc_bytes(api, device, size);
  w.bytes = size;
  w.view = view_of(w.managed->dl_tensor, "workspace");
  g_workspaces.push_back(w);
  return w.view;
}

// Frees the cached per-stream workspaces (e.g. before torch.cuda.empty_cache()). Not while a
// decode that uses them may still run: call after synchronizing.
int release_workspaces() {
  const int n = static_cast<int>(g_workspaces.size());
  for (StreamWorkspace& w : g_workspaces) {
    if (w.managed != nullptr && w.managed->deleter != nullptr) w.managed->deleter(w.managed);
  }
  g_workspaces.clear();
  return n;
}

// plan_decode's result for the last shapes seen (a decode loop calls with one shape per batch
// size): the plan depends only on these sizes and the device, so it is computed once.
struct PlanEntry {
  std::array<int64_t, 8> key{};
  DecodePlan plan;
  bool valid = false;
};
std::array<PlanEntry, 16> g_plans;
size_t g_plan_next = 0;

// uniform: every sequence holds exactly max_seqlen_k keys (DecodePlan::uniform_lengths).
DecodePlan cached_plan(int64_t num_seqs, int64_t num_heads, int64_t num_kv_heads,
                       int64_t head_dim, int64_t q_len, int64_t max_seqlen_k, Device device,
                       bool uniform) {
  const std::array<int64_t, 8> key{num_seqs,     num_heads,    num_kv_heads, head_dim,
                                   q_len,        max_seqlen_k, device.index, uniform ? 1 : 0};
  for (const PlanEntry& e : g_plans) {
    if (e.valid && e.key == key) return e.plan;
  }
  const DecodePlan plan = plan_decode(num_seqs, num_heads, num_kv_heads, head_dim, q_len,
                                      max_seqlen_k, device, uniform);
  PlanEntry& e = g_plans[g_plan_next];
  g_plan_next = (g_plan_next + 1) % g_plans.size();
  e.key = key;
  e.plan = plan;
  e.valid = true;
  return plan;
}

// Profiling hook (_C._set_dry_run): when set, the ops do everything but the library call
// (import, checks of the binding, allocation, planning, stream lookup), so the binding's own
// host cost can be timed without a GPU (bench/python_overhead.py --binding-only).
bool g_dry_run = false;

// A KV cache as kvattn reads it: uint8 caches hold float8_e4m3 bytes (NumPy has no fp8
// dtype; the package passes torch.float8_e4m3fn caches as their uint8 view), as in vLLM.
TensorView import_cache(PyObject* obj, const char* name, CallScope& scope) {
  TensorView t = import_tensor(obj, name, scope);
  if (t.dtype == DType::kU8) t.dtype = DType::kF8E4M3;
  return t;
}

// ---- the ops --------------------------------------------------------------------------------

void store_kvcache(nb::handle key, nb::handle value, nb::handle k_cache, nb::handle v_cache,
                   nb::handle slot_mapping, nb::handle k_scale, nb::handle v_scale) {
  CallScope scope;
  const TypeInfo* info = nullptr;
  check_no_grad(key.ptr(), "key");
  check_no_grad(value.ptr(), "value");
  check_no_grad(k_cache.ptr(), "k_cache");
  check_no_grad(v_cache.ptr(), "v_cache");
  const TensorView k = import_tensor(key.ptr(), "key", scope, &info);
  const TensorView v = import_tensor(value.ptr(), "value", scope);
  const TensorView kc = import_cache(k_cache.ptr(), "k_cache", scope);
  const TensorView vc = import_cache(v_cache.ptr(), "v_cache", scope);
  const TensorView sm = import_tensor(slot_mapping.ptr(), "slot_mapping", scope);
  const TensorView ks = import_tensor(k_scale.ptr(), "k_scale", scope);
  const TensorView vs = import_tensor(v_scale.ptr(), "v_scale", scope);
  const Stream stream = current_stream(info, k.device);
  if (!g_dry_run) run(k.device, [&] { store_kv(k, v, kc, vc, sm, ks, vs, stream); });
}

// Returns out, or (out, lse) when want_lse.
nb::object varlen(nb::handle q, nb::handle k, nb::handle v, nb::handle cu_seqlens_q,
                 nb::handle cu_seqlens_k, nb::handle max_seqlen_q, nb::handle max_seqlen_k,
                 double softmax_scale, bool causal, nb::handle block_table, nb::handle out,
                 bool want_lse, nb::handle k_scale, nb::handle v_scale, int64_t window_left,
                 int64_t window_right, double softcap, nb::handle alibi_slopes) {
  CallScope scope;
  const TypeInfo* info = nullptr;
  PrefillArgs a;
  a.window_left = window_left;
  a.window_right = window_right;
  a.softcap = static_cast<float>(softcap);
  // Autograd first: some producers refuse to export tensors that require grad.
  check_no_grad(q.ptr(), "q");
  check_no_grad(k.ptr(), "k");
  check_no_grad(v.ptr(), "v");
  check_no_grad(alibi_slopes.ptr(), "alibi_slopes");
  a.q = import_tensor(q.ptr(), "q", scope, &info);
  const bool paged = !block_table.is_none();
  a.k = paged ? import_cache(k.ptr(), "k", scope) : import_tensor(k.ptr(), "k", scope);
  a.v = paged ? import_cache(v.ptr(), "v", scope) : import_tensor(v.ptr(), "v", scope);
  a.k_scale = import_tensor(k_scale.ptr(), "k_scale", scope);
  a.v_scale = import_tensor(v_scale.ptr(), "v_scale", scope);
  a.alibi_slopes = import_tensor(alibi_slopes.ptr(), "alibi_slopes", scope);
  a.cu_seqlens_q = import_tensor(cu_seqlens_q.ptr(), "cu_seqlens_q", scope);
  a.cu_seqlens_k = import_tensor(cu_seqlens_k.ptr(), "cu_seqlens_k", scope);
  a.block_table = import_tensor(block_table.ptr(), "block_table", scope);
  a.max_seqlen_q = as_int(max_seqlen_q, "max_seqlen_q");
  a.max_seqlen_k = as_int(max_seqlen_k, "max_seqlen_k");
  a.softmax_scale = static_cast<float>(softmax_scale);
  a.causal = causal;
  if (a.q.ndim != 3) {
    throw Error("kvattn: q must have rank 3 ([total_q, num_heads, head_dim]) but has shape " +
                a.q.shape_str());
  }
  nb::object out_obj;
  if (out.is_none()) {
    out_obj = allocate(info, q.ptr(), a.q.device, a.q.dtype, {a.q.shape[0], a.q.shape[1], a.q.shape[2]},
                       a.out, scope, &a.q);
  } else {
    out_obj = nb::borrow(out);
    a.out = import_tensor(out.ptr(), "out", scope);
  }
  nb::object lse_obj = nb::none();
  if (want_lse) {
    lse_obj = allocate(info, q.ptr(), a.q.device, DType::kF32, {a.q.shape[1], a.q.shape[0]}, a.lse,
                       scope);
  }
  a.stream = current_stream(info, a.q.device);
  if (!g_dry_run) run(a.q.device, [&] { prefill_attention(a); });
  if (!want_lse) return out_obj;
  return nb::make_tuple(out_obj, lse_obj);
}

// q: [batch, seqlen_q, heads, dim]. Returns out [batch, seqlen_q, heads, dim], or (out, lse)
// when want_lse, lse float32 [heads, batch * seqlen_q] (kvattn's layout; the package reorders it).
nb::object kvcache(nb::handle q, nb::handle k_cache, nb::handle v_cache, nb::handle block_table,
                  nb::handle cache_seqlens, double softmax_scale, bool causal, int num_splits,
                  nb::handle out, bool want_lse, nb::handle k_scale, nb::handle v_scale,
                  int64_t window_left, int64_t window_right, double softcap,
                  nb::handle alibi_slopes, nb::handle cache_leftpad, int64_t uniform_seqlen_k) {
  CallScope scope;
  const TypeInfo* info = nullptr;
  DecodeArgs a;
  a.window_left = window_left;
  a.window_right = window_right;
  a.softcap = static_cast<float>(softcap);
  check_no_grad(q.ptr(), "q");
  check_no_grad(k_cache.ptr(), "k_cache");
  check_no_grad(v_cache.ptr(), "v_cache");
  check_no_grad(alibi_slopes.ptr(), "alibi_slopes");
  const TensorView q4 = import_tensor(q.ptr(), "q", scope, &info);
  a.q = collapse01(q4, "q");
  a.k_cache = import_cache(k_cache.ptr(), "k_cache", scope);
  a.v_cache = import_cache(v_cache.ptr(), "v_cache", scope);
  a.k_scale = import_tensor(k_scale.ptr(), "k_scale", scope);
  a.v_scale = import_tensor(v_scale.ptr(), "v_scale", scope);
  a.block_table = import_tensor(block_table.ptr(), "block_table", scope);
  a.cache_seqlens = import_tensor(cache_seqlens.ptr(), "cache_seqlens", scope);
  a.alibi_slopes = import_tensor(alibi_slopes.ptr(), "alibi_slopes", scope);
  a.cache_leftpad = import_tensor(cache_leftpad.ptr(), "cache_leftpad", scope);
  a.q_len = q4.shape[1];
  // Named here: the kernel would count sequences by cache_seqlens and blame q's token count.
  if (a.cache_seqlens.ndim != 1 || (q4.ndim == 4 && a.cache_seqlens.shape[0] != q4.shape[0])) {
    throw Error("kvattn: cache_seqlens must have shape [batch = " +
                std::to_string(q4.ndim == 4 ? q4.shape[0] : -1) + "] (q's batch) but has shape " +
                a.cache_seqlens.shape_str());
  }
  a.softmax_scale = static_cast<float>(softmax_scale);
  a.causal = causal;
  nb::object out_obj;
  if (out.is_none()) {
    TensorView o4;
    out_obj = allocate(info, q.ptr(), q4.device, q4.dtype,
                       {q4.shape[0], q4.shape[1], q4.shape[2], q4.shape[3]}, o4, scope, &q4);
    a.out = collapse01(o4, "out");
  } else {
    out_obj = nb::borrow(out);
    a.out = collapse01(import_tensor(out.ptr(), "out", scope), "out");
  }
  nb::object lse_obj = nb::none();
  if (want_lse) {
    lse_obj = allocate(info, q.ptr(), q4.device, DType::kF32,
                       {q4.shape[2], q4.shape[0] * q4.shape[1]}, a.lse, scope);
  }
  const Device device = q4.device;
  a.stream = current_stream(info, device);
  if (num_splits == 1) {
    a.plan = DecodePlan{1, 0};
  } else if (num_splits != 0) {
    throw Error("kvattn: num_splits must be 0 (kvattn plans) or 1 (no split) but is " +
                std::to_string(num_splits));
  } else if (device.is_cuda() && info != nullptr && info->api != nullptr &&
             a.block_table.ndim == 2 && a.k_cache.ndim == 4 && a.k_cache.shape[2] > 0 &&
             q4.shape[2] % a.k_cache.shape[2] == 0 && a.cache_seqlens.ndim == 1) {
    // Plan here and take the workspace from the framework's allocator (stream-ordered, safe
    // with concurrent streams, CUDA-graph aware) instead of the library's one shared scratch:
    // a buffer kept per stream, or, while the stream is being captured, a fresh one from the
    // graph's pool.
    // uniform_seqlen_k >= 0: every sequence holds that many keys (the package's int
    // cache_seqlens), so the plan may promise uniform lengths; else it bounds by the capacity.
    const int64_t capacity = a.block_table.shape[1] * a.k_cache.shape[1];
    const bool uniform = uniform_seqlen_k >= 0 && uniform_seqlen_k <= capacity;
    a.plan = cached_plan(a.cache_seqlens.shape[0], q4.shape[2], a.k_cache.shape[2], q4.shape[3],
                         a.q_len, uniform ? uniform_seqlen_k : capacity, device, uniform);
    if (a.plan.workspace_bytes > 0) {
      if (stream_capturing(a.stream)) {
        DLManagedTensorVersioned* m =
            framework_alloc_bytes(info->api, device.index, a.plan.workspace_bytes);
        scope.keep(m);  // freed when the call returns; the graph's pool keeps it for replays
        a.workspace = view_of(m->dl_tensor, "workspace");
      } else {
        a.workspace = stream_workspace(info->api, device.index, a.stream, a.plan.workspace_bytes);
      }
    }
  }
  if (!g_dry_run) run(device, [&] { decode_attention(a); });
  if (!want_lse) return out_obj;
  return nb::make_tuple(out_obj, lse_obj);
}

// Zero-copy view test hook: (data pointer, dtype, device, shape, strides) of what kvattn sees.
nb::tuple inspect(nb::handle obj) {
  CallScope scope;
  const TypeInfo* info = nullptr;
  const TensorView t = import_tensor(obj.ptr(), "tensor", scope, &info);
  nb::list shape, strides;
  for (int d = 0; d < t.ndim; ++d) {
    shape.append(t.shape[d]);
    strides.append(t.strides[d]);
  }
  const Stream s = current_stream(info, t.device);
  std::string dev = t.device.is_cuda() ? "cuda:" + std::to_string(t.device.index) : "cpu";
  return nb::make_tuple(reinterpret_cast<uintptr_t>(t.data), std::string(dtype_name(t.dtype)),
                        dev, nb::steal(PyList_AsTuple(shape.ptr())),
                        nb::steal(PyList_AsTuple(strides.ptr())),
                        reinterpret_cast<uintptr_t>(s.handle),
                        info != nullptr && info->api != nullptr);
}

uint32_t device_faults(int device_index, bool clear) {
  return read_device_faults(device_index < 0 ? Device::cpu() : Device::cuda(device_index), clear);
}

void set_fallback_allocator(nb::handle fn) {
  Py_XDECREF(g_fallback_alloc);
  g_fallback_alloc = fn.is_none() ? nullptr : fn.inc_ref().ptr();
}

}  // namespace
}  // namespace kvattn::py

NB_MODULE(_C, m) {
  using namespace kvattn::py;
  PyObject* bases = PyTuple_Pack(2, PyExc_RuntimeError, PyExc_ValueError);
  g_error = PyErr_NewExceptionWithDoc(
      "kvattn.Error",
      "An argument kvattn rejected (shape, stride, dtype, device or value), or a backend "
      "failure; the message names the argument, the expected and the actual value.",
      bases, nullptr);
  Py_DECREF(bases);
  m.attr("Error") = nb::borrow(g_error);
  g_needs_grad = PyErr_NewExceptionWithDoc(
      "kvattn._C.NeedsGrad",
      "An input requires grad while grad mode is on (kvattn has no backward pass).",
      PyExc_NotImplementedError, nullptr);
  m.attr("NeedsGrad") = nb::borrow(g_needs_grad);
  g_str_dlpack = PyUnicode_InternFromString("__dlpack__");
  g_str_requires_grad = PyUnicode_InternFromString("requires_grad");

  // No exception translator: every function is wrapped in Guarded (errors become Python
  // errors inside the binding), so no C++ exception reaches nanobind's translator chain.

  m.def("store_kvcache", &Guarded<&store_kvcache>::call, nb::arg("key"), nb::arg("value"), nb::arg("k_cache"),
        nb::arg("v_cache"), nb::arg("slot_mapping"), nb::arg("k_scale").none() = nb::none(),
        nb::arg("v_scale").none() = nb::none(),
        "Writes key/value [tokens, kv_heads, dim] into the paged caches at slot_mapping "
        "(negative slots are skipped), on the caller's current stream. uint8 caches hold "
        "float8_e4m3 bytes, quantised with k_scale/v_scale (float32 [kv_heads]; None: 1.0).");
  // Positional only, as the package calls them; tensor slots accept None (not given).
  m.def("varlen", &Guarded<&varlen>::call, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("cu_seqlens_q"),
        nb::arg("cu_seqlens_k"), nb::arg("max_seqlen_q"), nb::arg("max_seqlen_k"),
        nb::arg("softmax_scale"), nb::arg("causal"), nb::arg("block_table").none(),
        nb::arg("out").none(), nb::arg("want_lse"), nb::arg("k_scale").none() = nb::none(),
        nb::arg("v_scale").none() = nb::none(), nb::arg("window_left") = -1,
        nb::arg("window_right") = -1, nb::arg("softcap") = 0.0,
        nb::arg("alibi_slopes").none() = nb::none());
  m.def("kvcache", &Guarded<&kvcache>::call, nb::arg("q"), nb::arg("k_cache"), nb::arg("v_cache"),
        nb::arg("block_table"), nb::arg("cache_seqlens"), nb::arg("softmax_scale"),
        nb::arg("causal"), nb::arg("num_splits"), nb::arg("out").none(), nb::arg("want_lse"),
        nb::arg("k_scale").none() = nb::none(), nb::arg("v_scale").none() = nb::none(),
        nb::arg("window_left") = -1, nb::arg("window_right") = -1, nb::arg("softcap") = 0.0,
        nb::arg("alibi_slopes").none() = nb::none(), nb::arg("cache_leftpad").none() = nb::none(),
        nb::arg("uniform_seqlen_k") = -1);
  m.def("inspect", &Guarded<&inspect>::call, nb::arg("tensor"));
  m.def("device_faults", &Guarded<&device_faults>::call, nb::arg("device_index"), nb::arg("clear") = true);
  m.def("cuda_available", [] { return kvattn::cuda_available(); });
  m.def("release_workspaces", &Guarded<&release_workspaces>::call,
        "Frees the decode workspaces kept per CUDA stream; returns how many were freed.");
  m.def("_set_dry_run", [](bool on) { g_dry_run = on; }, nb::arg("on"));
  m.def("_set_fallback_allocator", &set_fallback_allocator, nb::arg("fn").none());
#ifdef KVATTN_WITH_CUDA
  m.attr("with_cuda") = true;
#else
  m.attr("with_cuda") = false;
#endif
}
