// The objects behind the runtime's opaque handles (nrt_model_t, nrt_tensor_t, tensor sets).
// Internal to libnrt. Handles are checked against the runtime's registry before use, so a
// stale or foreign pointer yields NRT_INVALID_HANDLE instead of a crash.
#ifndef NRTPROF_SIM_RUNTIME_OBJECTS_H_
#define NRTPROF_SIM_RUNTIME_OBJECTS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include <vector>

#include "cc_comm.h"
#include "model.h"
#include "nrt/nrt.h"

namespace nrtsim {

// Bytes a tensor reads and writes. Shared by a tensor and its slices; owned unless a caller
// attached its own buffer.
struct Storage {
  std::unique_ptr<uint8_t[]> owned;
  uint8_t* data = nullptr;
  size_t size = 0;
  int vnc = -1;  // the core whose device memory holds it; -1 host memory
};

struct TensorSet {
  std::map<std::string, nrt_tensor_t*> tensors;
};

}  // namespace nrtsim

struct nrt_tensor {
  std::string name;
  nrt_tensor_placement_t placement = NRT_TENSOR_PLACEMENT_HOST;
  std::shared_ptr<nrtsim::Storage> storage;  // null: allocated empty, nothing attached yet
  size_t offset = 0;                         // into storage (slices)
  size_t size = 0;

  uint8_t* data() const { return storage ? storage->data + offset : nullptr; }
  int vnc() const { return storage ? storage->vnc : -1; }
  bool on_device() const { return vnc() >= 0; }
};

struct nrt_model {
  uint64_t id = 0;
  uint32_t vnc = 0;
  size_t file_size = 0;
  nrtsim::Model model;
  const std::string* trace_name = nullptr;  // model.name, as the system trace keeps it
  // Its first collective op (-1: none) and, loaded by nrt_load_collectives, the rank it was
  // loaded for (ctx_device_id of ctx_device_count; 0 ranks: loaded by nrt_load).
  int cc_op = -1;
  uint32_t cc_rank = 0;
  uint32_t cc_ranks = 0;
};

// A collective prepared by nrta_cc_prepare, consumed by nrta_cc_schedule: the operation and,
// per pair of input and output tensors, their memory (kept alive until the request is done).
struct nrt_cc_context {
  struct Buffer {
    std::shared_ptr<nrtsim::Storage> storage;
    size_t offset = 0;
    size_t size = 0;
    uint8_t* data() const { return storage->data + offset; }
  };
  uint32_t vnc = 0;
  nrtsim::CcOp op;  // in_bytes and out_bytes: of each pair
  std::vector<Buffer> inputs;
  std::vector<Buffer> outputs;
};

#endif  // NRTPROF_SIM_RUNTIME_OBJECTS_H_
