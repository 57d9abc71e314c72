// A streaming reader of the simulated runtime's device profile: the JSON file that
// nrt_profile_stop(filename) writes for one model (sim/README.md, "Device profile"):
//
//   {"model":"mlp","model_id":3,"nc_idx":0,"executions":[
//     {"exec_id":5,"start_ns":1000,"duration_ns":140,
//      "ops":[{"name":"mul","engine":"vector","start_ns":1010,"duration_ns":40}, ...],
//      "dma":[{"name":"dma_hbm_to_sbuf","tensor":"x","bytes":4096,"start_ns":1001,
//              "duration_ns":3}, ...]}, ...]}
//
// Times are the NeuronCore's clock, as the system trace's device_exec; exec_id is the one the
// system trace gives that execution. The real runtime writes NTFF (binary) there instead:
// LooksLikeJson() tells the two apart before reading.
//
// One pass over the text, no tree (json_scanner.h): each op and each transfer is handed to the
// caller as a flat record as soon as it is read. Members the reader does not know are counted
// and skipped; anything else — not JSON, a required member missing or mistyped, a core past
// 4095 — fails the whole document with a one-line reason, and the caller keeps none of it.
//
// Thread-compatible: a reader holds no state between documents.
#ifndef NRTPROF_SHIM_BACKEND_DEVICE_PROFILE_READER_H_
#define NRTPROF_SHIM_BACKEND_DEVICE_PROFILE_READER_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"

namespace nrtprof::shim {

// One engine op or one transfer of an execution's inputs and outputs.
struct DeviceProfileEntry {
  enum class Kind : uint8_t { kOp, kDma };
  Kind kind = Kind::kOp;
  std::string_view model;  // the profile's model name
  uint32_t nc_idx = 0;
  uint64_t exec_id = 0;
  std::string_view name;    // "mul", "matmul"; "dma_hbm_to_sbuf", "dma_sbuf_to_hbm"
  std::string_view engine;  // ops: "tensor", "vector", "scalar", "gpsimd"
  std::string_view tensor;  // transfers: the model's tensor
  uint64_t bytes = 0;       // transfers
  uint64_t start_ns = 0;    // device clock
  uint64_t duration_ns = 0;
};

struct DeviceProfileReadStats {
  uint64_t executions = 0;
  uint64_t entries = 0;          // ops and transfers read
  uint64_t unknown_members = 0;  // members the reader does not know, at any level
};

// True if `text` starts (after white space) like a JSON object: the simulator's profile and
// not, say, the real runtime's binary NTFF.
bool LooksLikeJson(std::string_view text);

// Reads `json` and calls `on_entry` for each op and transfer, in document order. The entry
// (and its string_views) is valid during the call only. False with a one-line *error if the
// document is not a device profile of this shape; entries already handed out then belong to a
// document the caller should discard.
bool ReadDeviceProfile(std::string_view json,
                       absl::FunctionRef<void(const DeviceProfileEntry&)> on_entry,
                       DeviceProfileReadStats* stats, std::string* error);

// Roughly how many ops and transfers a document that could not be read held (at least 1), for
// what is counted as dropped.
uint64_t CountProfileEntries(std::string_view text);

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_BACKEND_DEVICE_PROFILE_READER_H_
