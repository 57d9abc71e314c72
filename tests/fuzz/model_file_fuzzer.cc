// libFuzzer target: the simulated runtime's model file parser, as nrt_load() uses it. The
// bytes are hostile (docs/model_format.md, "Decoding rules"): DecodeModel() must refuse them
// with one line or return a model that passed ValidateModel(). A model it accepts must then be
// safe to use as the runtime does: encoded again it decodes to the same file, the device cost
// model prices it, and (when small) the kernels run it, on zeroed inputs. A crash, a sanitizer
// report, a multi-line error or a model that does not survive that is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "sim/cost_model.h"
#include "sim/device_config.h"
#include "sim/kernels.h"
#include "sim/model_format.h"

namespace {

// Models whose tensors together hold more than this are decoded and priced, not run: the
// kernels' time is linear in the elements, and the fuzzer needs thousands of runs a second.
constexpr size_t kMaxRunBytes = 1 << 20;

[[noreturn]] void Finding(const std::string& what) {
  fprintf(stderr, "model_file_fuzzer: %s\n", what.c_str());
  abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<nrtsim::Model> model = nrtsim::DecodeModel(data, size);
  if (!model.ok()) {
    const std::string message(model.status().message());
    if (message.rfind("model file: ", 0) != 0 || message.find('\n') != std::string::npos) {
      Finding("an error that is not one 'model file: ' line: " + message);
    }
    return 0;
  }
  const std::string encoded = nrtsim::EncodeModel(*model);
  absl::StatusOr<nrtsim::Model> again = nrtsim::DecodeModel(encoded.data(), encoded.size());
  if (!again.ok()) Finding("an accepted model encodes to a file it refuses: " + again.status().ToString());
  if (nrtsim::EncodeModel(*again) != encoded) Finding("encoding is not stable across a decode");

  const nrtsim::ExecutionCost cost = nrtsim::CostOfExecution(*model, nrtsim::DeviceConfig());
  if (cost.ops.size() != model->ops.size()) Finding("the cost model lost ops");

  size_t total = 0;
  for (const nrtsim::TensorDef& t : model->tensors) total += t.SizeBytes();
  if (total > kMaxRunBytes) return 0;
  std::vector<std::vector<uint8_t>> in, out;
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
  for (uint32_t i : model->InputIndices()) in.emplace_back(model->tensors[i].SizeBytes(), 0);
  for (uint32_t i : model->OutputIndices()) out.emplace_back(model->tensors[i].SizeBytes(), 0);
  // Exactly SizeBytes() each (never 0: every dimension is at least 1), so that a kernel
  // that steps one element past a tensor is caught.
  for (auto& b : in) inputs.push_back(b.data());
  for (auto& b : out) outputs.push_back(b.data());
  if (absl::Status s = nrtsim::RunModel(*model, inputs, outputs); !s.ok()) {
    Finding("an accepted model does not run: " + s.ToString());
  }
  return 0;
}
