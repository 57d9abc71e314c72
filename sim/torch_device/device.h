// The simulated Neuron device as the PyTorch backend (nrtsim_torch) sees it: the runtime opened
// once per process, device memory from a caching allocator keyed by size, models compiled from
// their text form and loaded once (cached by text), executions and host<->device transfers.
// Knows nothing of PyTorch; ops.cc builds the aten kernels on it. Every call into libnrt goes
// through the dynamic linker (libnrt.so.1 is a DT_NEEDED of the module), so a profiler that
// interposes libnrt sees them. Errors are thrown as DeviceError with one line naming the call.
// Thread-safe: the caches are guarded by one mutex, the executions in flight by another; the
// runtime's synchronous calls run outside both.
#ifndef NRTPROF_SIM_TORCH_DEVICE_DEVICE_H_
#define NRTPROF_SIM_TORCH_DEVICE_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "nrt/nrt.h"

namespace nrtsim_torch {

class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The one NeuronCore the backend drives (the process's vnc 0).
constexpr int kCore = 0;

// Opens the runtime (nrt_init) on first use. Close() frees everything; later frees are no-ops.
// NRTSIM_TORCH_ASYNC_DEPTH (read then; default 0) > 0 makes executions asynchronous: each
// scheduled on the compute queue (nrta_execute_schedule), at most that many in flight, the
// host waiting for them only before a transfer or a device copy of a tensor one of them uses
// (the runtime does not order those against the queue) and in Synchronize(). A failed
// execution raises at the next wait.
void EnsureOpen();
void Close();
bool IsOpen();
int AsyncDepth();
void Synchronize();

// Device memory of exactly `bytes` (> 0), from the free list of that size when it has one.
nrt_tensor_t* Allocate(size_t bytes);
// Back to the free list (nothing once the runtime is closed).
void Release(nrt_tensor_t* tensor, size_t bytes);

// A byte range of a device tensor.
struct Region {
  nrt_tensor_t* tensor = nullptr;
  size_t offset = 0;
  size_t bytes = 0;
  size_t tensor_bytes = 0;  // the whole device tensor's size
};

void Write(const Region& dst, const void* src);           // nrt_tensor_write
void Read(const Region& src, void* dst);                  // nrt_tensor_read
void CopyOnDevice(const Region& src, const Region& dst);  // nrt_tensor_copy, same size

// The model compiled from `text` (docs/model_format.md), loaded on kCore once and cached.
nrt_model_t* Model(const std::string& text);

// One execution: inputs and outputs bound by the model's tensor names.
using Binding = std::pair<std::string, Region>;
void Execute(nrt_model_t* model, const std::vector<Binding>& inputs,
             const std::vector<Binding>& outputs, const std::string& what);

// What the backend has done so far (for tests and the examples' output).
struct Stats {
  uint64_t models = 0;  // compiled and loaded
  uint64_t executions = 0;
  uint64_t writes = 0;        // host-to-device transfers
  uint64_t reads = 0;         // device-to-host transfers
  uint64_t allocations = 0;   // nrt_tensor_allocate calls (the rest came from the cache)
  uint64_t cached_bytes = 0;  // device memory on the free lists
};
Stats GetStats();

// Device time from the runtime's system trace (executions and host-initiated transfers).
struct DeviceTime {
  uint64_t execution_ns = 0, executions = 0, transfer_ns = 0, transfers = 0, overwritten = 0;
};
// Start opens a capture (a ring of 16384 events per core); Poll fetches what the runtime recorded
// since the last fetch (call it every few ops in a long loop so the ring does not overwrite);
// Stop fetches the rest and ends the capture.
void StartDeviceTimer();
void PollDeviceTimer();
DeviceTime StopDeviceTimer();

}  // namespace nrtsim_torch

#endif  // NRTPROF_SIM_TORCH_DEVICE_DEVICE_H_
