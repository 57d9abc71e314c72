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

// The input with its header's payload length and checksum made right, so that mutations of
// the payload reach the payload's parser and the validator instead of the checksum test.
std::string WithGoodHeader(const uint8_t* data, size_t size) {
  std::string file(reinterpret_cast<const char*>(data), size);
  constexpr size_t kHeader = 28;
  if (file.size() < kHeader) return file;
  const uint64_t payload = file.size() - kHeader;
  for (int i = 0; i < 8; ++i) file[16 + i] = static_cast<char>(payload >> (8 * i));
  uint32_t crc = nrtsim::Crc32(0, file.data(), 24);
  crc = nrtsim::Crc32(crc, file.data() + kHeader, payload);
  for (int i = 0; i < 4; ++i) file[24 + i] = static_cast<char>(crc >> (8 * i));
  return file;
}

void Check(const std::string& file) {
  absl::StatusOr<nrtsim::Model> model = nrtsim::DecodeModel(file.data(), file.size());
  if (!model.ok()) {
    const std::string message(model.status().message());
    if (message.rfind("model file: ", 0) != 0 || message.find('\n') != std::string::npos) {
      Finding("an error that is not one 'model file: ' line: " + message);
    }
    return;
  }
  const std::string encoded = nrtsim::EncodeModel(*model);
  absl::StatusOr<nrtsim::Model> again = nrtsim::DecodeModel(encoded.data(), encoded.size());
  if (!again.ok()) Finding("an accepted model encodes to a file it refuses: " + again.status().ToString());
  if (nrtsim::EncodeModel(*again) != encoded) Finding("encoding is not stable across a decode");

  const nrtsim::ExecutionCost cost = nrtsim::CostOfExecution(*model, nrtsim::DeviceConfig());
  if (cost.ops.size() != model->ops.size()) Finding("the cost model lost ops");

  size_t total = 0;
  for (const nrtsim::TensorDef& t : model->tensors) total += t.SizeBytes();
  if (total > kMaxRunBytes) return;
  std::vector<std::vector<uint8_t>> in, out;
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
  for (uint32_t i : model->InputIndices()) in.emplace_back(model->tensors[i].SizeBytes(), 0);
  for (uint32_t i : model->OutputIndices()) out.emplace_back(model->tensors[i].SizeBytes(), 0);
  // Exactly SizeBytes() each (never 0: every dimension is at least 1), so that a kernel
  // that steps one element past a tensor is caught.
  for (auto& b : in) inputs.push_back(b.data());
  for (auto& b : out) outputs.push_back(b.data());
  // Collective ops (all_reduce) run as in a group of one rank: the result is the input.
  const nrtsim::CollectiveFn alone = [](uint32_t, const nrtsim::OpDef&, std::vector<uint8_t>*) {
    return absl::OkStatus();
  };
  if (absl::Status s = nrtsim::RunModel(*model, inputs, outputs, alone); !s.ok()) {
    Finding("an accepted model does not run: " + s.ToString());
  }
}

}  // namespace

// The bytes as they are (the header's checks), then with a header that passes them.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Check(std::string(reinterpret_cast<const char*>(data), size));
  Check(WithGoodHeader(data, size));
  return 0;
}
