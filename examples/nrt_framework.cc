// nrt_framework: a CPython extension module in the shape of a framework's Neuron backend
// (torch-neuronx's C extension, a JAX plugin). Python imports it with its default RTLD_LOCAL
// dlopen, and the module reaches libnrt.so.1 as its own DT_NEEDED dependency, so libnrt lives
// in that local scope, never in the program's global one: the way real users load the runtime,
// and the shape a profiler has to see through. One file of about 900 lines on purpose: an example
// read whole, whose Python binding, eager ops and async bookkeeping all work on the one Tensor
// object; split, each part would need the others' internals.
//
// The Python API is a tiny eager framework (examples/rmsnorm_py.py uses it):
//   init(core=0, async_depth=0), close(), visible_cores(), synchronize()
//   empty(shape, dtype="bf16"), tensor(values, shape, dtype="bf16") -> Tensor on the device
//   Tensor.shape, Tensor.dtype, Tensor.write(values), Tensor.read() -> flat list of floats
//   mul(a, b), mean(a) (last axis, kept), add(a, b or a Python number), rsqrt(a): each op is
//     a model of its own (examples::EagerOpModelText, compiled on first use and cached by
//     shapes) executed on the device inside an annotation range named as PyTorch names the op
//   round_to_dtype(values, dtype): the values as a tensor of that dtype stores them
//   range_push(name), range_pop(): annotation ranges for the program's own names
//   start_device_timer(events_per_core), stop_device_timer() -> dict: device time from the
//     runtime's system trace (examples::SumSystemTrace)
//   comm_init(rank, ranks): joins the job's collectives group on the runtime's core
//     (nrt_cc_global_comm_init; rank 0's address from NEURON_RT_ROOT_COMM_ID), as
//     torch.distributed.init_process_group does
//   all_reduce(tensor): sums the tensor across the group in place (AllReduce ADD through
//     nrta_cc_prepare/nrta_cc_schedule on collectives queue 0, waited for with
//     nrta_is_completed) inside a range "all_reduce", as torch.distributed.all_reduce
// Runtime failures raise nrt_framework.Error ("nrt_execute (aten::mul) failed with status 1");
// bad arguments raise TypeError or ValueError.
//
// With init(async_depth=N > 0) the module drives the runtime as PyTorch-native Neuron does,
// through the explicit asynchronous API (nrt/nrt_async.h, examples::AsyncRuntime): an op
// schedules its execution (nrta_execute_schedule) and returns at once, a Tensor's write is an
// nrta_tensor_write, up to N requests in flight. Ordering is kept per device tensor: an
// execution is scheduled only once the writes of its tensors have completed (the tensor-op
// queue is not ordered against the compute queue), a write waits for the executions that use
// its tensor (so the caching allocator may hand out a tensor a queued op still reads), and
// Tensor.read() waits for the execution that made the tensor, then reads it back with
// nrta_tensor_read. A failed request raises at the next op, read or synchronize().
//
// Like PyTorch's caching allocator, a tensor's device memory goes back to a free list when the
// Tensor dies and serves the next tensor of the same size, so a steady eager loop allocates
// nothing and reuses its compiled models and tensor sets: per iteration the runtime sees only
// the executions and copies the program asks for, as in rmsnorm.cc's naive variant.
//
// Thread-safety: every entry point runs under the GIL, which guards the module's state; the GIL
// is let go only around nrt_execute, nrt_tensor_read and nrt_tensor_write, and around the
// asynchronous calls and waits (as frameworks do, so other Python threads run while the device
// works). close() must not race another thread's op, as with any framework's shutdown.
//
// Built against the stable ABI (Py_LIMITED_API), hence one file, nrt_framework.abi3.so, for
// every Python 3 from 3.7 on.
#define PY_SSIZE_T_CLEAN
#define Py_LIMITED_API 0x03070000
#include <Python.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "examples/example_util.h"
#include "nrt/nrt.h"
#include "nrt/nrt_async.h"
#include "nrt/nrt_sys_trace.h"
#include "nrtprof/annotate.h"

namespace {

constexpr int kMaxRank = 4;

struct TensorObject {
  PyObject ob_base;      // PyObject_HEAD, spelled out so clang-format reads the struct
  nrt_tensor_t* tensor;  // null once the runtime that made it is closed
  uint64_t generation;   // Runtime::generation when it was made
  size_t bytes;
  int rank;
  int64_t dims[kMaxRank];
  const char* dtype;  // "bf16" or "fp32", a literal
};

using SetKey = std::tuple<nrt_model_t*, nrt_tensor_t*, nrt_tensor_t*, nrt_tensor_t*>;

// A device tensor's last asynchronous requests (0: none).
struct TensorUse {
  nrta_seq_t execution = 0;  // the last execution scheduled that reads or writes it
  nrta_seq_t write = 0;      // the last write to it from the host
};

// Everything the module owns on the runtime's side, between init() and close().
struct Runtime {
  bool initialized = false;
  int core = 0;
  uint64_t generation = 0;  // bumped by close(): Tensors of an earlier runtime are stale
  std::map<std::string, nrt_model_t*> models;  // by model text
  std::map<SetKey, std::pair<nrt_tensor_set_t*, nrt_tensor_set_t*>> sets;
  std::set<nrt_tensor_t*> allocated;                  // every device tensor, live or free
  std::multimap<size_t, nrt_tensor_t*> free_tensors;  // the caching allocator, by bytes
  std::unique_ptr<examples::AsyncRuntime> async;      // null: synchronous calls
  std::map<nrt_tensor_t*, TensorUse> uses;            // asynchronous only
  bool timer_running = false;
  std::unique_ptr<examples::SystemTraceSum> timer_sum;  // what the timer's fetches added up
  int rank = 0, ranks = 0;                              // comm_init's; ranks 0: in no group
};

// Leaked on purpose: the interpreter may call into a Tensor's dealloc during its own teardown,
// after static destructors would have run.
Runtime& State() {
  static Runtime* runtime = new Runtime;
  return *runtime;
}

PyObject* g_error = nullptr;            // nrt_framework.Error
PyTypeObject* g_tensor_type = nullptr;  // nrt_framework.Tensor

// Sets nrt_framework.Error and returns true unless `status` is NRT_SUCCESS.
bool Failed(NRT_STATUS status, const std::string& what) {
  if (status == NRT_SUCCESS) return false;
  PyErr_Format(g_error, "%s failed with status %d", what.c_str(), static_cast<int>(status));
  return true;
}

// Lets other Python threads run while the device works. Nothing of the module's state may be
// touched meanwhile.
class GilReleased {
 public:
  GilReleased() : state_(PyEval_SaveThread()) {}
  ~GilReleased() { PyEval_RestoreThread(state_); }
  GilReleased(const GilReleased&) = delete;
  GilReleased& operator=(const GilReleased&) = delete;

 private:
  PyThreadState* state_;
};

// Waits (the GIL let go) until these requests have completed; false with nrt_framework.Error
// set when one of them, or any request seen completing before, failed.
bool AsyncWait(std::initializer_list<nrta_seq_t> seqs) {
  examples::AsyncRuntime* async = State().async.get();
  NRT_STATUS status = NRT_SUCCESS;
  {
    GilReleased released;
    for (nrta_seq_t seq : seqs) {
      if (status == NRT_SUCCESS) status = async->Wait(seq);
    }
  }
  return !Failed(status, async->failed_what());
}

// Waits (the GIL let go) until every request scheduled has completed; false with
// nrt_framework.Error set when one failed. True at once when the runtime is synchronous.
bool AsyncWaitAll() {
  examples::AsyncRuntime* async = State().async.get();
  if (async == nullptr) return true;
  NRT_STATUS status;
  {
    GilReleased released;
    status = async->WaitAll();
  }
  return !Failed(status, async->failed_what());
}

bool RequireInit() {
  if (State().initialized) return true;
  PyErr_SetString(g_error, "the runtime is not initialized: call nrt_framework.init() first");
  return false;
}

// A range's name must outlive the range on the profiler's side; names from Python are kept
// here for the life of the process (programs use a handful).
const char* InternName(const char* name) {
  static auto* names = new std::unordered_set<std::string>;
  return names->insert(name).first->c_str();
}

std::string DimsText(const TensorObject* t) {
  return absl::StrCat("[", absl::StrJoin(t->dims, t->dims + t->rank, ","), "]");
}

bool ParseDtype(const char* text, const char** dtype) {
  const std::string s = text;
  if (s == "bf16" || s == "fp32") {
    *dtype = s == "bf16" ? "bf16" : "fp32";
    return true;
  }
  PyErr_Format(PyExc_ValueError, "dtype must be 'bf16' or 'fp32', not '%s'", text);
  return false;
}

bool ParseShape(PyObject* shape, std::vector<int64_t>* dims) {
  PyObject* iter = PyObject_GetIter(shape);
  if (iter == nullptr) return false;
  while (PyObject* item = PyIter_Next(iter)) {
    const long long d = PyLong_AsLongLong(item);
    Py_DECREF(item);
    if (d == -1 && PyErr_Occurred()) break;
    if (d < 1 || d > (1 << 24)) {
      PyErr_Format(PyExc_ValueError, "shape dimensions must be 1..16777216, not %lld", d);
      break;
    }
    dims->push_back(d);
  }
  Py_DECREF(iter);
  if (PyErr_Occurred()) return false;
  if (dims->empty() || dims->size() > kMaxRank) {
    PyErr_Format(PyExc_ValueError, "a shape has 1 to %d dimensions, not %zu", kMaxRank,
                 dims->size());
    return false;
  }
  return true;
}

bool ParseValues(PyObject* values, std::vector<float>* out) {
  PyObject* iter = PyObject_GetIter(values);
  if (iter == nullptr) return false;
  while (PyObject* item = PyIter_Next(iter)) {
    const double v = PyFloat_AsDouble(item);
    Py_DECREF(item);
    if (v == -1.0 && PyErr_Occurred()) break;
    out->push_back(static_cast<float>(v));
  }
  Py_DECREF(iter);
  return !PyErr_Occurred();
}

// The runtime tensor a Tensor stands for, or null with an exception set.
nrt_tensor_t* Live(const TensorObject* t) {
  if (!RequireInit()) return nullptr;
  if (t->tensor == nullptr || t->generation != State().generation) {
    PyErr_SetString(g_error, "the tensor belongs to a runtime that was closed");
    return nullptr;
  }
  return t->tensor;
}

// A new device Tensor; its memory comes from the free list when a tensor of the same size died.
TensorObject* NewTensor(const std::vector<int64_t>& dims, const char* dtype) {
  if (!RequireInit()) return nullptr;
  Runtime& rt = State();
  size_t bytes = examples::ElementSize(dtype);
  for (int64_t d : dims) bytes *= static_cast<size_t>(d);
  nrt_tensor_t* tensor = nullptr;
  // The newest freed first, so a loop keeps meeting the same tensors (and tensor sets).
  auto range = rt.free_tensors.equal_range(bytes);
  if (range.first != range.second) {
    auto newest = std::prev(range.second);
    tensor = newest->second;
    rt.free_tensors.erase(newest);
  } else {
    const std::string name = absl::StrCat("nrt_framework_", rt.allocated.size());
    if (Failed(
            nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, rt.core, bytes, name.c_str(), &tensor),
            absl::StrCat("nrt_tensor_allocate of ", bytes, " bytes"))) {
      return nullptr;
    }
    rt.allocated.insert(tensor);
  }
  auto* t = reinterpret_cast<TensorObject*>(PyType_GenericAlloc(g_tensor_type, 0));
  if (t == nullptr) {
    rt.free_tensors.emplace(bytes, tensor);
    return nullptr;
  }
  t->tensor = tensor;
  t->generation = rt.generation;
  t->bytes = bytes;
  t->rank = static_cast<int>(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) t->dims[i] = dims[i];
  t->dtype = dtype;
  return t;
}

void TensorDealloc(PyObject* self) {
  auto* t = reinterpret_cast<TensorObject*>(self);
  Runtime& rt = State();
  if (t->tensor != nullptr && rt.initialized && t->generation == rt.generation) {
    rt.free_tensors.emplace(t->bytes, t->tensor);
  }
  PyTypeObject* type = Py_TYPE(self);
  reinterpret_cast<freefunc>(PyType_GetSlot(type, Py_tp_free))(self);
  Py_DECREF(type);  // heap types are referenced by their instances
}

PyObject* TensorNew(PyTypeObject*, PyObject*, PyObject*) {
  PyErr_SetString(PyExc_TypeError,
                  "make tensors with nrt_framework.empty() or nrt_framework.tensor()");
  return nullptr;
}

// Copies the values into the tensor. `range` names the copy's own annotation range; null keeps
// it inside the caller's (aten::add's epsilon is part of aten::add, as in rmsnorm.cc).
bool WriteValues(TensorObject* t, PyObject* values, const char* range) {
  nrt_tensor_t* tensor = Live(t);
  if (tensor == nullptr) return false;
  std::vector<float> floats;
  if (!ParseValues(values, &floats)) return false;
  if (floats.size() * examples::ElementSize(t->dtype) != t->bytes) {
    PyErr_Format(PyExc_ValueError, "%zu values for a tensor of shape %s", floats.size(),
                 DimsText(t).c_str());
    return false;
  }
  std::vector<uint8_t> bytes = examples::Encode(floats, t->dtype);
  Runtime& rt = State();
  if (rt.async != nullptr) {
    // Not into a tensor a queued execution still uses; the request keeps the bytes.
    TensorUse& use = rt.uses[tensor];
    if (range != nullptr) nrtprof_push(range);
    bool ok = AsyncWait({use.execution});
    nrta_seq_t seq = 0;
    if (ok) {
      NRT_STATUS status;
      {
        GilReleased released;
        status = rt.async->Write(tensor, std::move(bytes), "the write of a tensor", &seq);
      }
      ok = !Failed(status, "nrta_tensor_write");
    }
    if (range != nullptr) nrtprof_pop();
    if (ok) use.write = seq;
    return ok;
  }
  if (range != nullptr) nrtprof_push(range);
  NRT_STATUS status;
  {
    GilReleased released;
    status = nrt_tensor_write(tensor, bytes.data(), 0, bytes.size());
  }
  if (range != nullptr) nrtprof_pop();
  return !Failed(status, "nrt_tensor_write");
}

PyObject* TensorWrite(PyObject* self, PyObject* values) {
  if (!WriteValues(reinterpret_cast<TensorObject*>(self), values, "aten::copy_")) return nullptr;
  Py_RETURN_NONE;
}

PyObject* TensorRead(PyObject* self, PyObject*) {
  auto* t = reinterpret_cast<TensorObject*>(self);
  nrt_tensor_t* tensor = Live(t);
  if (tensor == nullptr) return nullptr;
  std::vector<uint8_t> bytes(t->bytes);
  Runtime& rt = State();
  if (rt.async != nullptr) {
    // After the execution that made it (another queue's), then back through the tensor-op queue.
    nrtprof::ScopedRange range("aten::copy_");
    if (!AsyncWait({rt.uses[tensor].execution})) return nullptr;
    nrta_seq_t seq = 0;
    NRT_STATUS status;
    {
      GilReleased released;
      status = rt.async->Read(bytes.data(), tensor, bytes.size(), "the read of a tensor", &seq);
    }
    if (Failed(status, "nrta_tensor_read") || !AsyncWait({seq})) return nullptr;
  } else {
    nrtprof::ScopedRange range("aten::copy_");
    NRT_STATUS status;
    {
      GilReleased released;
      status = nrt_tensor_read(tensor, bytes.data(), 0, bytes.size());
    }
    if (Failed(status, "nrt_tensor_read")) return nullptr;
  }
  const std::vector<float> values = examples::Decode(bytes, t->dtype);
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(values.size()));
  if (list == nullptr) return nullptr;
  for (size_t i = 0; i < values.size(); ++i) {
    PyObject* v = PyFloat_FromDouble(values[i]);
    if (v == nullptr) {
      Py_DECREF(list);
      return nullptr;
    }
    PyList_SetItem(list, static_cast<Py_ssize_t>(i), v);  // steals v
  }
  return list;
}

PyObject* TensorShape(PyObject* self, void*) {
  auto* t = reinterpret_cast<TensorObject*>(self);
  PyObject* shape = PyTuple_New(t->rank);
  if (shape == nullptr) return nullptr;
  for (int i = 0; i < t->rank; ++i) {
    PyObject* d = PyLong_FromLongLong(t->dims[i]);
    if (d == nullptr) {
      Py_DECREF(shape);
      return nullptr;
    }
    PyTuple_SetItem(shape, i, d);  // steals d
  }
  return shape;
}

PyObject* TensorDtype(PyObject* self, void*) {
  return PyUnicode_FromString(reinterpret_cast<TensorObject*>(self)->dtype);
}

PyObject* TensorRepr(PyObject* self) {
  auto* t = reinterpret_cast<TensorObject*>(self);
  return PyUnicode_FromFormat("nrt_framework.Tensor(shape=%s, dtype=%s)", DimsText(t).c_str(),
                              t->dtype);
}

TensorObject* AsTensor(PyObject* object, const char* op) {
  if (PyObject_TypeCheck(object, g_tensor_type)) return reinterpret_cast<TensorObject*>(object);
  PyErr_Format(PyExc_TypeError, "%s takes nrt_framework.Tensor operands", op);
  return nullptr;
}

// The loaded model that runs `op` on inputs of these shapes, compiled and loaded on first use
// (as an eager framework compiles each op once per shape).
nrt_model_t* OpModel(const char* op, const char* aten_name,
                     const std::vector<const TensorObject*>& inputs, const std::string& out_dims,
                     const char* attrs) {
  std::vector<std::string> shapes;
  std::string name = absl::StrCat("aten_", op);
  for (const TensorObject* t : inputs) {
    shapes.push_back(DimsText(t));
    absl::StrAppend(&name, "_", absl::StrJoin(t->dims, t->dims + t->rank, "x"));
  }
  const std::string text =
      examples::EagerOpModelText(name, op, inputs[0]->dtype, shapes, out_dims, attrs);
  Runtime& rt = State();
  auto it = rt.models.find(text);
  if (it != rt.models.end()) return it->second;
  absl::StatusOr<std::string> bytes = examples::CompileModelText(text);
  if (!bytes.ok()) {
    PyErr_Format(PyExc_ValueError, "%s of %s: %s", aten_name,
                 absl::StrJoin(shapes, " and ").c_str(),
                 std::string(bytes.status().message()).c_str());
    return nullptr;
  }
  nrt_model_t* model = nullptr;
  if (Failed(nrt_load(bytes->data(), bytes->size(), rt.core, -1, &model),
             absl::StrCat("nrt_load (", aten_name, ")"))) {
    return nullptr;
  }
  rt.models.emplace(text, model);
  return model;
}

// The input and output tensor sets of one execution, made once per combination of tensors.
bool OpSets(nrt_model_t* model, const std::vector<nrt_tensor_t*>& inputs, nrt_tensor_t* out,
            std::pair<nrt_tensor_set_t*, nrt_tensor_set_t*>* sets) {
  Runtime& rt = State();
  const SetKey key{model, inputs[0], inputs.size() > 1 ? inputs[1] : nullptr, out};
  auto it = rt.sets.find(key);
  if (it != rt.sets.end()) {
    *sets = it->second;
    return true;
  }
  nrt_tensor_set_t *in_set = nullptr, *out_set = nullptr;
  static constexpr const char* kInputNames[] = {"a", "b"};
  bool ok = !Failed(nrt_allocate_tensor_set(&in_set), "nrt_allocate_tensor_set") &&
            !Failed(nrt_allocate_tensor_set(&out_set), "nrt_allocate_tensor_set");
  for (size_t i = 0; ok && i < inputs.size(); ++i) {
    ok = !Failed(nrt_add_tensor_to_tensor_set(in_set, kInputNames[i], inputs[i]),
                 "nrt_add_tensor_to_tensor_set");
  }
  ok = ok &&
       !Failed(nrt_add_tensor_to_tensor_set(out_set, "out", out), "nrt_add_tensor_to_tensor_set");
  if (!ok) {
    if (in_set != nullptr) nrt_destroy_tensor_set(&in_set);
    if (out_set != nullptr) nrt_destroy_tensor_set(&out_set);
    return false;
  }
  *sets = {in_set, out_set};
  rt.sets.emplace(key, *sets);
  return true;
}

// Runs `op` on `inputs` into a new Tensor of `out_dims`. The caller holds the op's range.
PyObject* Dispatch(const char* op, const char* aten_name,
                   const std::vector<const TensorObject*>& inputs,
                   const std::vector<int64_t>& out_dims, const char* attrs = "") {
  std::vector<nrt_tensor_t*> tensors;
  for (const TensorObject* t : inputs) {
    if (t->dtype != inputs[0]->dtype) {
      PyErr_Format(PyExc_ValueError, "%s of a %s and a %s tensor: convert one first", aten_name,
                   inputs[0]->dtype, t->dtype);
      return nullptr;
    }
    tensors.push_back(Live(t));
    if (tensors.back() == nullptr) return nullptr;
  }
  const std::string out_text = absl::StrCat("[", absl::StrJoin(out_dims, ","), "]");
  nrt_model_t* model = OpModel(op, aten_name, inputs, out_text, attrs);
  if (model == nullptr) return nullptr;
  TensorObject* out = NewTensor(out_dims, inputs[0]->dtype);
  if (out == nullptr) return nullptr;
  std::pair<nrt_tensor_set_t*, nrt_tensor_set_t*> sets;
  if (!OpSets(model, tensors, out->tensor, &sets)) {
    Py_DECREF(out);
    return nullptr;
  }
  Runtime& rt = State();
  if (rt.async != nullptr) {
    // Its tensors' writes from the host complete first: the compute queue is not ordered
    // against the tensor-op queue. Executions on the one compute queue are ordered already.
    const nrta_seq_t a = rt.uses[tensors[0]].write;
    const nrta_seq_t b = tensors.size() > 1 ? rt.uses[tensors[1]].write : 0;
    const nrta_seq_t o = rt.uses[out->tensor].write;
    nrta_seq_t seq = 0;
    bool ok = AsyncWait({a, b, o});
    if (ok) {
      NRT_STATUS status;
      {
        GilReleased released;
        status = rt.async->Execute(model, sets.first, sets.second,
                                   absl::StrCat("the execution of ", aten_name), &seq);
      }
      ok = !Failed(status, absl::StrCat("nrta_execute_schedule (", aten_name, ")"));
    }
    if (!ok) {
      Py_DECREF(out);
      return nullptr;
    }
    for (nrt_tensor_t* t : tensors) rt.uses[t].execution = seq;
    rt.uses[out->tensor].execution = seq;
    return reinterpret_cast<PyObject*>(out);
  }
  NRT_STATUS status;
  {
    GilReleased released;
    status = nrt_execute(model, sets.first, sets.second);
  }
  if (Failed(status, absl::StrCat("nrt_execute (", aten_name, ")"))) {
    Py_DECREF(out);
    return nullptr;
  }
  return reinterpret_cast<PyObject*>(out);
}

// NumPy's broadcasting of two shapes, aligned on their last dimension.
bool Broadcast(const TensorObject* a, const TensorObject* b, const char* aten_name,
               std::vector<int64_t>* dims) {
  const int rank = std::max(a->rank, b->rank);
  dims->assign(rank, 1);
  for (int i = 0; i < rank; ++i) {
    const int ia = a->rank - rank + i, ib = b->rank - rank + i;
    const int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      PyErr_Format(PyExc_ValueError, "%s: shapes %s and %s do not broadcast", aten_name,
                   DimsText(a).c_str(), DimsText(b).c_str());
      return false;
    }
    (*dims)[i] = std::max(da, db);
  }
  return true;
}

PyObject* Binary(PyObject* args, const char* op, const char* aten_name) {
  PyObject *a_object, *b_object;
  if (!PyArg_ParseTuple(args, "OO", &a_object, &b_object)) return nullptr;
  const TensorObject* a = AsTensor(a_object, aten_name);
  const TensorObject* b = a == nullptr ? nullptr : AsTensor(b_object, aten_name);
  std::vector<int64_t> dims;
  if (b == nullptr || !Broadcast(a, b, aten_name, &dims)) return nullptr;
  nrtprof::ScopedRange range(aten_name);
  return Dispatch(op, aten_name, {a, b}, dims);
}

PyObject* Mul(PyObject*, PyObject* args) { return Binary(args, "mul", "aten::mul"); }

// add(a, b): b a Tensor, or a Python number that, as in eager PyTorch, first becomes a
// one-element device tensor: a host-to-device copy inside the op.
PyObject* Add(PyObject*, PyObject* args) {
  PyObject *a_object, *b_object;
  if (!PyArg_ParseTuple(args, "OO", &a_object, &b_object)) return nullptr;
  if (!PyFloat_Check(b_object) && !PyLong_Check(b_object)) {
    return Binary(args, "add", "aten::add");
  }
  const TensorObject* a = AsTensor(a_object, "aten::add");
  if (a == nullptr || Live(a) == nullptr) return nullptr;
  nrtprof::ScopedRange range("aten::add");
  TensorObject* scalar = NewTensor({1}, a->dtype);
  if (scalar == nullptr) return nullptr;
  PyObject* values = PyTuple_Pack(1, b_object);
  PyObject* result = nullptr;
  if (values != nullptr && WriteValues(scalar, values, /*range=*/nullptr)) {
    std::vector<int64_t> dims(a->dims, a->dims + a->rank);
    result = Dispatch("add", "aten::add", {a, scalar}, dims);
  }
  Py_XDECREF(values);
  Py_DECREF(scalar);
  return result;
}

PyObject* Unary(PyObject* arg, const char* op, const char* aten_name, bool reduce_last,
                const char* attrs) {
  const TensorObject* a = AsTensor(arg, aten_name);
  if (a == nullptr) return nullptr;
  std::vector<int64_t> dims(a->dims, a->dims + a->rank);
  if (reduce_last) dims.back() = 1;  // keepdim=True
  nrtprof::ScopedRange range(aten_name);
  return Dispatch(op, aten_name, {a}, dims, attrs);
}

PyObject* Mean(PyObject*, PyObject* arg) {
  return Unary(arg, "mean", "aten::mean", /*reduce_last=*/true, "axis=-1");
}

PyObject* Rsqrt(PyObject*, PyObject* arg) {
  return Unary(arg, "rsqrt", "aten::rsqrt", /*reduce_last=*/false, "");
}

PyObject* Empty(PyObject*, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {"shape", "dtype", nullptr};
  PyObject* shape;
  const char* dtype_text = "bf16";
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|s", const_cast<char**>(keywords), &shape,
                                   &dtype_text)) {
    return nullptr;
  }
  std::vector<int64_t> dims;
  const char* dtype;
  if (!ParseDtype(dtype_text, &dtype) || !ParseShape(shape, &dims)) return nullptr;
  return reinterpret_cast<PyObject*>(NewTensor(dims, dtype));
}

PyObject* MakeTensor(PyObject* module, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {"values", "shape", "dtype", nullptr};
  PyObject *values, *shape;
  const char* dtype_text = "bf16";
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|s", const_cast<char**>(keywords), &values,
                                   &shape, &dtype_text)) {
    return nullptr;
  }
  std::vector<int64_t> dims;
  const char* dtype;
  if (!ParseDtype(dtype_text, &dtype) || !ParseShape(shape, &dims)) return nullptr;
  TensorObject* t = NewTensor(dims, dtype);
  if (t != nullptr && !WriteValues(t, values, "aten::copy_")) Py_CLEAR(t);
  return reinterpret_cast<PyObject*>(t);
}

PyObject* RoundToDtype(PyObject*, PyObject* args) {
  PyObject* values;
  const char* dtype_text;
  const char* dtype;
  if (!PyArg_ParseTuple(args, "Os", &values, &dtype_text) || !ParseDtype(dtype_text, &dtype)) {
    return nullptr;
  }
  std::vector<float> floats;
  if (!ParseValues(values, &floats)) return nullptr;
  const std::vector<float> rounded = examples::Decode(examples::Encode(floats, dtype), dtype);
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(rounded.size()));
  for (size_t i = 0; list != nullptr && i < rounded.size(); ++i) {
    PyObject* v = PyFloat_FromDouble(rounded[i]);
    if (v == nullptr) Py_CLEAR(list);
    if (list != nullptr) PyList_SetItem(list, static_cast<Py_ssize_t>(i), v);
  }
  return list;
}

PyObject* VisibleCores(PyObject*, PyObject*) {
  uint32_t visible = 0;
  if (Failed(nrt_get_visible_nc_count(&visible), "nrt_get_visible_nc_count")) return nullptr;
  return PyLong_FromUnsignedLong(visible);
}

PyObject* Init(PyObject*, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {"core", "async_depth", nullptr};
  int core = 0, async_depth = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|ii", const_cast<char**>(keywords), &core,
                                   &async_depth)) {
    return nullptr;
  }
  if (async_depth < 0 || async_depth > examples::kMaxAsyncDepth) {
    PyErr_Format(PyExc_ValueError, "async_depth must be 0 (synchronous) to %d, not %d",
                 examples::kMaxAsyncDepth, async_depth);
    return nullptr;
  }
  Runtime& rt = State();
  if (rt.initialized) {
    PyErr_SetString(g_error, "the runtime is already initialized");
    return nullptr;
  }
  uint32_t visible = 0;
  if (Failed(nrt_get_visible_nc_count(&visible), "nrt_get_visible_nc_count")) return nullptr;
  if (core < 0 || static_cast<uint32_t>(core) >= visible) {
    PyErr_Format(PyExc_ValueError, "NeuronCore %d does not exist: %u NeuronCores are visible", core,
                 visible);
    return nullptr;
  }
  if (Failed(nrt_init(NRT_FRAMEWORK_TYPE_PYTORCH, "", ""), "nrt_init")) return nullptr;
  rt.initialized = true;
  rt.core = core;
  if (async_depth > 0) rt.async = std::make_unique<examples::AsyncRuntime>(core, async_depth);
  Py_RETURN_NONE;
}

PyObject* Synchronize(PyObject*, PyObject*) {
  if (!RequireInit() || !AsyncWaitAll()) return nullptr;
  Py_RETURN_NONE;
}

PyObject* Close(PyObject*, PyObject*) {
  Runtime& rt = State();
  if (!rt.initialized) Py_RETURN_NONE;
  // What is in flight completes first (its buffers are the module's); a failure is past caring.
  if (rt.async != nullptr) {
    GilReleased released;
    rt.async->WaitAll();
  }
  rt.async.reset();
  if (rt.timer_running) nrt_sys_trace_stop();
  for (auto& [key, sets] : rt.sets) {
    nrt_destroy_tensor_set(&sets.first);
    nrt_destroy_tensor_set(&sets.second);
  }
  for (auto& [text, model] : rt.models) nrt_unload(model);
  for (nrt_tensor_t* tensor : rt.allocated) nrt_tensor_free(&tensor);
  nrt_close();
  const uint64_t generation = rt.generation + 1;
  rt = Runtime();
  rt.generation = generation;
  Py_RETURN_NONE;
}

PyObject* CommInit(PyObject*, PyObject* args) {
  int rank = 0, ranks = 0;
  if (!PyArg_ParseTuple(args, "ii", &rank, &ranks) || !RequireInit()) return nullptr;
  if (ranks < 1 || ranks > 128 || rank < 0 || rank >= ranks) {
    PyErr_Format(PyExc_ValueError, "rank %d of %d: ranks must be 1 to 128, rank below them", rank,
                 ranks);
    return nullptr;
  }
  Runtime& rt = State();
  if (rt.ranks != 0) {
    PyErr_SetString(g_error, "this process is already in a collectives group");
    return nullptr;
  }
  NRT_STATUS status;
  {
    GilReleased released;  // the group forms when every rank has come
    status = nrt_cc_global_comm_init(static_cast<uint32_t>(rt.core), static_cast<uint32_t>(rank),
                                     static_cast<uint32_t>(ranks));
  }
  if (Failed(status, "nrt_cc_global_comm_init")) return nullptr;
  rt.rank = rank;
  rt.ranks = ranks;
  Py_RETURN_NONE;
}

PyObject* AllReduce(PyObject*, PyObject* arg) {
  if (!RequireInit()) return nullptr;
  Runtime& rt = State();
  if (rt.ranks == 0) {
    PyErr_SetString(g_error, "all_reduce needs a collectives group: call comm_init() first");
    return nullptr;
  }
  TensorObject* t = AsTensor(arg, "all_reduce");
  if (t == nullptr) return nullptr;
  nrt_tensor_t* tensor = Live(t);
  // What the program queued before (the tensor's write among it) completes first.
  if (tensor == nullptr || !AsyncWaitAll()) return nullptr;
  std::vector<uint32_t> group(rt.ranks);
  for (int i = 0; i < rt.ranks; ++i) group[i] = static_cast<uint32_t>(i);
  nrt_cc_comm_t comm{};
  comm.replica_group = group.data();
  comm.rank = static_cast<uint32_t>(rt.rank);
  comm.rank_n = static_cast<uint32_t>(rt.ranks);
  comm.ctx_device_id = static_cast<uint32_t>(rt.rank);
  comm.ctx_device_count = static_cast<uint32_t>(rt.ranks);
  comm.vnc = static_cast<uint32_t>(rt.core);
  const nrt_dtype_t dtype =
      std::string(t->dtype) == "bf16" ? NRT_DTYPE_BFLOAT16 : NRT_DTYPE_FLOAT32;
  nrtprof_push("all_reduce");
  NRT_STATUS status, ret = NRT_SUCCESS;
  {
    GilReleased released;
    nrt_tensor_list_t input{&tensor, 1}, output{&tensor, 1};
    nrt_cc_context_t* ctx = nullptr;
    nrta_seq_t seq = 0;
    status = nrta_cc_prepare(&comm, &input, &output, dtype, NRT_OP_ADD, NRT_CC_ALLREDUCE, &ctx);
    if (status == NRT_SUCCESS) status = nrta_cc_schedule(&ctx, 0, &ret, &seq);
    for (bool done = false; status == NRT_SUCCESS && !done;) {
      status = nrta_is_completed(seq, &done);
      if (status == NRT_SUCCESS && !done)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  nrtprof_pop();
  if (Failed(status, "all_reduce") || Failed(ret, "all_reduce")) return nullptr;
  Py_RETURN_NONE;
}

PyObject* Step(PyObject*, PyObject*) {
  nrtprof_step();
  Py_RETURN_NONE;
}

PyObject* RangePush(PyObject*, PyObject* args) {
  const char* name;
  if (!PyArg_ParseTuple(args, "s", &name)) return nullptr;
  nrtprof_push(InternName(name));
  Py_RETURN_NONE;
}

PyObject* RangePop(PyObject*, PyObject*) {
  nrtprof_pop();
  Py_RETURN_NONE;
}

// Fetches what the runtime recorded since the last fetch and adds it to the timer's sums.
bool FetchIntoTimer(Runtime& rt) {
  char* buffer = nullptr;
  size_t size = 0;
  if (Failed(nrt_sys_trace_fetch_events(&buffer, &size, nullptr), "nrt_sys_trace_fetch_events")) {
    return false;
  }
  const absl::Status added = rt.timer_sum->Add(absl::string_view(buffer, size));
  nrt_sys_trace_buffer_free(buffer);
  if (!added.ok()) {
    PyErr_SetString(g_error, std::string(added.message()).c_str());
    return false;
  }
  return true;
}

PyObject* StartDeviceTimer(PyObject*, PyObject* args) {
  unsigned long long events_per_core;
  if (!PyArg_ParseTuple(args, "K", &events_per_core) || !RequireInit()) return nullptr;
  // Requests in flight would count as the timer's: they complete first.
  if (!AsyncWaitAll()) return nullptr;
  Runtime& rt = State();
  if (rt.timer_running) {
    PyErr_SetString(g_error, "the device timer is already running");
    return nullptr;
  }
  nrt_sys_trace_config_t* config = nullptr;
  if (Failed(nrt_sys_trace_config_allocate(&config), "nrt_sys_trace_config_allocate")) {
    return nullptr;
  }
  nrt_sys_trace_config_set_max_events_per_nc(config, events_per_core);
  const NRT_STATUS status = nrt_sys_trace_start(config);
  nrt_sys_trace_config_free(config);
  if (Failed(status, "nrt_sys_trace_start")) return nullptr;
  rt.timer_running = true;
  rt.timer_sum = std::make_unique<examples::SystemTraceSum>();
  // The first fetch and parse pay one-time costs, here rather than in what the program times.
  if (!FetchIntoTimer(rt)) return nullptr;
  Py_RETURN_NONE;
}

PyObject* PollDeviceTimer(PyObject*, PyObject*) {
  if (!RequireInit()) return nullptr;
  Runtime& rt = State();
  if (!rt.timer_running) {
    PyErr_SetString(g_error, "the device timer is not running");
    return nullptr;
  }
  if (!FetchIntoTimer(rt)) return nullptr;
  Py_RETURN_NONE;
}

PyObject* StopDeviceTimer(PyObject*, PyObject*) {
  if (!RequireInit()) return nullptr;
  Runtime& rt = State();
  if (!rt.timer_running) {
    PyErr_SetString(g_error, "the device timer is not running");
    return nullptr;
  }
  // What was scheduled while the timer ran is the timer's: it completes first.
  const bool waited = AsyncWaitAll();
  rt.timer_running = false;
  const bool fetched = waited && FetchIntoTimer(rt);
  const NRT_STATUS stopped = nrt_sys_trace_stop();
  if (!fetched) return nullptr;
  if (Failed(stopped, "nrt_sys_trace_stop")) return nullptr;
  const examples::DeviceTime* time = &rt.timer_sum->total();
  using ull = unsigned long long;  // Py_BuildValue's "K"
  return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K}", "execution_ns", ull{time->execution_ns},
                       "executions", ull{time->executions}, "transfer_ns", ull{time->transfer_ns},
                       "transfers", ull{time->transfers}, "overwritten", ull{time->overwritten});
}

// PyMethodDef stores every function as a PyCFunction; going through void(*)() keeps GCC's
// -Wcast-function-type quiet about the ones that take keywords.
template <typename F>
PyCFunction AsMethod(F f) {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(f));
}

PyMethodDef g_tensor_methods[] = {
    {"write", TensorWrite, METH_O, "write(values): copies the values (flat, row-major) in."},
    {"read", TensorRead, METH_NOARGS, "read() -> the values, flat and row-major."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef g_tensor_getset[] = {
    {"shape", TensorShape, nullptr, "the dimensions, a tuple", nullptr},
    {"dtype", TensorDtype, nullptr, "'bf16' or 'fp32'", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyType_Slot g_tensor_slots[] = {
    {Py_tp_doc, const_cast<char*>("A tensor in NeuronCore memory.")},
    {Py_tp_new, reinterpret_cast<void*>(TensorNew)},
    {Py_tp_dealloc, reinterpret_cast<void*>(TensorDealloc)},
    {Py_tp_repr, reinterpret_cast<void*>(TensorRepr)},
    {Py_tp_methods, g_tensor_methods},
    {Py_tp_getset, g_tensor_getset},
    {0, nullptr},
};

PyType_Spec g_tensor_spec = {"nrt_framework.Tensor", sizeof(TensorObject), 0, Py_TPFLAGS_DEFAULT,
                             g_tensor_slots};

PyMethodDef g_methods[] = {
    {"init", AsMethod(Init), METH_VARARGS | METH_KEYWORDS,
     "init(core=0, async_depth=0): starts the runtime; tensors and ops go to NeuronCore `core`,"
     " through the asynchronous API with up to `async_depth` requests in flight when not 0."},
    {"synchronize", Synchronize, METH_NOARGS,
     "synchronize(): waits until every op and copy scheduled has completed (at once when"
     " synchronous)."},
    {"close", Close, METH_NOARGS, "close(): frees everything and closes the runtime."},
    {"visible_cores", VisibleCores, METH_NOARGS, "visible_cores() -> NeuronCores visible."},
    {"empty", AsMethod(Empty), METH_VARARGS | METH_KEYWORDS,
     "empty(shape, dtype='bf16') -> an uninitialized device Tensor."},
    {"tensor", AsMethod(MakeTensor), METH_VARARGS | METH_KEYWORDS,
     "tensor(values, shape, dtype='bf16') -> a device Tensor holding the values."},
    {"mul", Mul, METH_VARARGS, "mul(a, b) -> a * b, broadcast (aten::mul)."},
    {"add", Add, METH_VARARGS, "add(a, b) -> a + b; b a Tensor or a number (aten::add)."},
    {"mean", Mean, METH_O, "mean(a) -> the mean over the last axis, kept (aten::mean)."},
    {"rsqrt", Rsqrt, METH_O, "rsqrt(a) -> 1 / sqrt(a) (aten::rsqrt)."},
    {"round_to_dtype", RoundToDtype, METH_VARARGS,
     "round_to_dtype(values, dtype) -> the values as a tensor of dtype stores them."},
    {"comm_init", CommInit, METH_VARARGS,
     "comm_init(rank, ranks): joins the job's collectives group (NEURON_RT_ROOT_COMM_ID)."},
    {"all_reduce", AllReduce, METH_O,
     "all_reduce(tensor): sums the tensor across the group's ranks, in place."},
    {"step", Step, METH_NOARGS,
     "step(): one training step ends and the next begins (as prof.step() in PyTorch)."},
    {"range_push", RangePush, METH_VARARGS,
     "range_push(name): opens an annotation range on this thread."},
    {"range_pop", RangePop, METH_NOARGS, "range_pop(): closes the innermost range."},
    {"start_device_timer", StartDeviceTimer, METH_VARARGS,
     "start_device_timer(events_per_core): starts the runtime's system trace (after what is in"
     " flight has completed)."},
    {"poll_device_timer", PollDeviceTimer, METH_NOARGS,
     "poll_device_timer(): fetches what the runtime recorded so far into the timer's sums (call "
     "it now and then: the ring then stays small)."},
    {"stop_device_timer", StopDeviceTimer, METH_NOARGS,
     "stop_device_timer() -> dict of device time since the start (once what is in flight has"
     " completed): execution_ns, executions, transfer_ns, transfers, overwritten (events the"
     " trace lost)."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef g_module = {
    PyModuleDef_HEAD_INIT,
    "nrt_framework",
    "A tiny eager framework on the Neuron runtime, loaded as frameworks load it.",
    -1,
    g_methods,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
};

}  // namespace

PyMODINIT_FUNC PyInit_nrt_framework() {
  PyObject* module = PyModule_Create(&g_module);
  if (module == nullptr) return nullptr;
  g_error = PyErr_NewException("nrt_framework.Error", PyExc_RuntimeError, nullptr);
  g_tensor_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&g_tensor_spec));
  if (g_error == nullptr || g_tensor_type == nullptr ||
      PyModule_AddObject(module, "Error", g_error) != 0 ||
      PyModule_AddObject(module, "Tensor", reinterpret_cast<PyObject*>(g_tensor_type)) != 0) {
    Py_DECREF(module);
    return nullptr;
  }
  // PyModule_AddObject stole a reference to each; the module's globals keep their own.
  Py_INCREF(g_error);
  Py_INCREF(g_tensor_type);
  return module;
}
