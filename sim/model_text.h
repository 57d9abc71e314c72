// The model text form: the small language the examples and nrt_model_compile describe models
// in, standing in for a framework plus neuronx-cc. One statement per line:
//
//   model rmsnorm_compiled
//   input x bf16 [4,512]
//   const two fp32 [1] = 2.0
//   output y bf16 [4,512]
//   sq = mul(x, x)
//   ...
//
// The full syntax is in docs/model_format.md, "Text form". Stateless and thread-safe.
#ifndef NRTPROF_SIM_MODEL_TEXT_H_
#define NRTPROF_SIM_MODEL_TEXT_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model.h"

namespace nrtsim {

// Parses a text description into a Model that passes ValidateModel(). Tensors appear in the
// Model in the order they are declared or first assigned; ops in statement order.
// Errors are InvalidArgument("line N: <reason>"), or ValidateModel()'s message prefixed with
// the line of the op or tensor it names (unprefixed if it names neither, e.g. "model has no
// outputs").
absl::StatusOr<Model> ParseModelText(absl::string_view text);

}  // namespace nrtsim

#endif  // NRTPROF_SIM_MODEL_TEXT_H_
