// nrtsim_torch: the CPython extension module that puts the simulated Neuron device under
// PyTorch 1.13 (Debian's) as the 'privateuseone' device. Importing it (after `import torch`)
// loads the backend (ops.cc registers itself with PyTorch's dispatcher when the module is
// loaded) and opens the runtime (nrt_init), as a framework's device extension does. Its
// Python API is small, the rest is torch's own:
//   nrtsim_torch.device                   'privateuseone:0'
//   start_device_timer(), poll_device_timer(), stop_device_timer() -> dict: device time from
//     the runtime's system trace (execution_ns, executions, transfer_ns, transfers, overwritten)
//   stats() -> dict: async depth, models compiled, executions, transfers, allocations, cached
//     bytes
//   synchronize(): waits for the executions in flight (NRTSIM_TORCH_ASYNC_DEPTH > 0, device.h)
//   close(): nrt_close (also at interpreter exit); the device is unusable after it
// Runtime failures raise RuntimeError with the runtime call and its status (an asynchronous
// execution's at the next transfer or synchronize()). Built on the stable
// ABI (Py_LIMITED_API): the torch calls are all C++, through libtorch.
#define PY_SSIZE_T_CLEAN
#define Py_LIMITED_API 0x03070000
#include <Python.h>

#include <string>

#include "sim/torch_device/device.h"

namespace {

using nrtsim_torch::DeviceError;

PyObject* Raise(const DeviceError& e) {
  PyErr_SetString(PyExc_RuntimeError, e.what());
  return nullptr;
}

// dict from (name, value) pairs of unsigned 64-bit counters.
PyObject* Dict(std::initializer_list<std::pair<const char*, unsigned long long>> items) {
  PyObject* d = PyDict_New();
  if (d == nullptr) return nullptr;
  for (const auto& [name, value] : items) {
    PyObject* v = PyLong_FromUnsignedLongLong(value);
    if (v == nullptr || PyDict_SetItemString(d, name, v) != 0) {
      Py_XDECREF(v);
      Py_DECREF(d);
      return nullptr;
    }
    Py_DECREF(v);
  }
  return d;
}

PyObject* StartDeviceTimer(PyObject*, PyObject*) {
  try {
    nrtsim_torch::StartDeviceTimer();
  } catch (const DeviceError& e) {
    return Raise(e);
  }
  Py_RETURN_NONE;
}

PyObject* PollDeviceTimer(PyObject*, PyObject*) {
  try {
    nrtsim_torch::PollDeviceTimer();
  } catch (const DeviceError& e) {
    return Raise(e);
  }
  Py_RETURN_NONE;
}

PyObject* StopDeviceTimer(PyObject*, PyObject*) {
  nrtsim_torch::DeviceTime t;
  try {
    t = nrtsim_torch::StopDeviceTimer();
  } catch (const DeviceError& e) {
    return Raise(e);
  }
  return Dict({{"execution_ns", t.execution_ns},
               {"executions", t.executions},
               {"transfer_ns", t.transfer_ns},
               {"transfers", t.transfers},
               {"overwritten", t.overwritten}});
}

PyObject* Stats(PyObject*, PyObject*) {
  const nrtsim_torch::Stats s = nrtsim_torch::GetStats();
  return Dict({{"async_depth", static_cast<unsigned long long>(nrtsim_torch::AsyncDepth())},
               {"models", s.models},
               {"executions", s.executions},
               {"writes", s.writes},
               {"reads", s.reads},
               {"allocations", s.allocations},
               {"cached_bytes", s.cached_bytes}});
}

PyObject* Synchronize(PyObject*, PyObject*) {
  try {
    nrtsim_torch::Synchronize();
  } catch (const DeviceError& e) {
    return Raise(e);
  }
  Py_RETURN_NONE;
}

PyObject* Close(PyObject*, PyObject*) {
  nrtsim_torch::Close();
  Py_RETURN_NONE;
}

PyMethodDef kMethods[] = {
    {"start_device_timer", StartDeviceTimer, METH_NOARGS,
     "Starts summing the device time of executions and transfers (the runtime's system trace)."},
    {"poll_device_timer", PollDeviceTimer, METH_NOARGS,
     "Fetches the events recorded so far (call every few iterations of a long loop)."},
    {"stop_device_timer", StopDeviceTimer, METH_NOARGS,
     "Stops the device timer; returns a dict of execution_ns, executions, transfer_ns, "
     "transfers, overwritten."},
    {"stats", Stats, METH_NOARGS, "The backend's counters, as a dict."},
    {"synchronize", Synchronize, METH_NOARGS,
     "Waits for the executions in flight (asynchronous mode); raises if one failed."},
    {"close", Close, METH_NOARGS, "Closes the runtime (nrt_close); the device is unusable after."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {
    PyModuleDef_HEAD_INIT,
    "nrtsim_torch",
    "PyTorch's 'privateuseone' device on nrtprof's simulated Neuron runtime (libnrt.so.1).",
    -1,
    kMethods,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) PyObject* PyInit_nrtsim_torch() {
  // torch first: its Python bindings must be set up before tensors reach the device.
  PyObject* torch = PyImport_ImportModule("torch");
  if (torch == nullptr) return nullptr;
  Py_DECREF(torch);
  try {
    nrtsim_torch::EnsureOpen();
  } catch (const DeviceError& e) {
    return Raise(e);
  }
  PyObject* module = PyModule_Create(&kModule);
  if (module == nullptr) return nullptr;
  if (PyModule_AddStringConstant(module, "device", "privateuseone:0") != 0) {
    Py_DECREF(module);
    return nullptr;
  }
  // nrt_close at exit, before the interpreter tears down (tensors freed later are let go).
  PyObject* atexit = PyImport_ImportModule("atexit");
  PyObject* close = atexit ? PyObject_GetAttrString(module, "close") : nullptr;
  PyObject* done = close ? PyObject_CallMethod(atexit, "register", "O", close) : nullptr;
  Py_XDECREF(done);
  Py_XDECREF(close);
  Py_XDECREF(atexit);
  if (done == nullptr) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
