// libFuzzer target: the model text compiler (ParseModelText, what nrt_model_compile runs). Any
// text must give one "line N: ..." error or a model that passed validation, and that model's
// file must load: DecodeModel() of EncodeModel() succeeds. A crash, a sanitizer report, a
// multi-line error or a compiled file the runtime refuses is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "sim/model_format.h"
#include "sim/model_text.h"

constexpr size_t kMaxRoundTripBytes = 64 << 20;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<nrtsim::Model> model = nrtsim::ParseModelText(text);
  if (!model.ok()) {
    const std::string message(model.status().message());
    if (message.empty() || message.find('\n') != std::string::npos) {
      fprintf(stderr, "model_text_fuzzer: an error that is not one line: %s\n", message.c_str());
      abort();
    }
    return 0;
  }
  // A model of up to 2 GiB of constants is valid; copying it twice more would only measure the
  // fuzzer's memory limit.
  size_t bytes = 0;
  for (const nrtsim::TensorDef& t : model->tensors) bytes += t.data.size();
  if (bytes > kMaxRoundTripBytes) return 0;
  const std::string file = nrtsim::EncodeModel(*model);
  absl::StatusOr<nrtsim::Model> loaded = nrtsim::DecodeModel(file.data(), file.size());
  if (!loaded.ok()) {
    fprintf(stderr, "model_text_fuzzer: a compiled model the runtime refuses: %s\n",
            loaded.status().ToString().c_str());
    abort();
  }
  return 0;
}
