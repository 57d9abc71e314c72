// ValidateModel(): the one place that decides whether a Model may be executed. The executor,
// the kernels and the cost model index tensors and read shapes without re-checking, so every
// assumption they make is checked here, once, when a model is loaded or compiled.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "model.h"

namespace nrtsim {
namespace {

// Limits of the simulated device (docs/model_format.md, "Limits"). The element limit keeps any
// one kernel's loops and scratch buffers modest; the byte limit is the simulated HBM budget.
constexpr size_t kMaxNameBytes = 255;
constexpr size_t kMaxRank = 8;
constexpr uint64_t kMaxTensorElements = uint64_t{1} << 28;
constexpr uint64_t kMaxTotalBytes = uint64_t{2} << 30;

using Shape = std::vector<uint32_t>;

std::string ShapeString(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

// Only called once every name has passed CheckName, so the name is safe to print on one line.
std::string TensorLabel(const Model& model, uint32_t index) {
  return absl::StrCat("tensor ", index, " (", model.tensors[index].name, ")");
}

absl::Status CheckName(absl::string_view name, absl::string_view what) {
  if (name.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": name is empty"));
  if (name.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": name is ", name.size(), " bytes (at most ", kMaxNameBytes, ")"));
  }
  for (size_t i = 0; i < name.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    if (c <= 0x20 || c >= 0x7f) {
      // The name itself is not printed: it may hold a newline or other control byte.
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": name has a space or non-printable byte at offset ", i));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckNames(const Model& model) {
  absl::Status status = CheckName(model.name, "model");
  if (!status.ok()) return status;
  std::set<absl::string_view> seen;
  for (uint32_t i = 0; i < model.tensors.size(); ++i) {
    status = CheckName(model.tensors[i].name, absl::StrCat("tensor ", i));
    if (!status.ok()) return status;
    if (!seen.insert(model.tensors[i].name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(TensorLabel(model, i), ": name is used by an earlier tensor"));
    }
  }
  return absl::OkStatus();
}

bool IsKnownKind(TensorKind kind) {
  switch (kind) {
    case TensorKind::kInput:
    case TensorKind::kOutput:
    case TensorKind::kIntermediate:
    case TensorKind::kConstant:
      return true;
  }
  return false;
}

bool IsKnownDType(DType dtype) { return dtype == DType::kFloat32 || dtype == DType::kBFloat16; }

// Checks one tensor's enums, shape and data, and adds its size to *total_bytes. Elements are
// counted with an early exit, so a shape like [2^32-1]*8 cannot overflow the count.
absl::Status CheckTensor(const Model& model, uint32_t index, uint64_t* total_bytes) {
  const TensorDef& t = model.tensors[index];
  const std::string label = TensorLabel(model, index);
  if (!IsKnownKind(t.kind)) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": unknown kind ", static_cast<int>(t.kind)));
  }
  if (!IsKnownDType(t.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": unknown dtype ", static_cast<int>(t.dtype)));
  }
  if (t.shape.size() > kMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": rank ", t.shape.size(), " (at most ", kMaxRank, ")"));
  }
  uint64_t elements = 1;
  for (size_t d = 0; d < t.shape.size(); ++d) {
    if (t.shape[d] == 0) {
      return absl::InvalidArgumentError(absl::StrCat(label, ": dimension ", d, " is 0"));
    }
    elements *= t.shape[d];
    if (elements > kMaxTensorElements) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": shape ", ShapeString(t.shape), " has more than 2^28 elements"));
    }
  }
  const uint64_t bytes = elements * DTypeSize(t.dtype);
  if (t.kind == TensorKind::kConstant && t.data.size() != bytes) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": constant has ", t.data.size(),
                                                   " data bytes, its shape needs ", bytes));
  }
  if (t.kind != TensorKind::kConstant && !t.data.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": only constants carry data, this one has ", t.data.size(), " bytes"));
  }
  *total_bytes += bytes;  // At most 2^30 per tensor: the sum cannot overflow 64 bits.
  if (*total_bytes > kMaxTotalBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": tensors up to here need ", *total_bytes, " bytes (at most 2 GiB)"));
  }
  return absl::OkStatus();
}

absl::Status CheckTensors(const Model& model) {
  uint64_t total_bytes = 0;
  for (uint32_t i = 0; i < model.tensors.size(); ++i) {
    absl::Status status = CheckTensor(model, i, &total_bytes);
    if (!status.ok()) return status;
  }
  if (model.InputIndices().empty()) return absl::InvalidArgumentError("model has no inputs");
  if (model.OutputIndices().empty()) return absl::InvalidArgumentError("model has no outputs");
  return absl::OkStatus();
}

bool IsReadOnly(TensorKind kind) {
  return kind == TensorKind::kInput || kind == TensorKind::kConstant;
}

// Checks arity and indices, and that the op reads only tensors available before it runs.
// writer[t] is the op that writes tensor t, or -1; this op's output is recorded last so an op
// reading its own output is rejected.
absl::Status CheckOpWiring(const Model& model, uint32_t k, const std::string& label,
                           std::vector<int64_t>* writer) {
  const OpDef& op = model.ops[k];
  const size_t arity = static_cast<size_t>(OpArity(op.kind));
  if (op.inputs.size() != arity) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": has ", op.inputs.size(), " inputs, expected ", arity));
  }
  const size_t n = model.tensors.size();
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    if (op.inputs[i] >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": input ", i, " is tensor ", op.inputs[i], ", model has ", n));
    }
    const uint32_t in = op.inputs[i];
    if (!IsReadOnly(model.tensors[in].kind) && (*writer)[in] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": reads ", TensorLabel(model, in), ", which no earlier op writes"));
    }
  }
  if (op.output >= n) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": output is tensor ", op.output, ", model has ", n));
  }
  if (IsReadOnly(model.tensors[op.output].kind)) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, ": writes ", TensorLabel(model, op.output), ", which is an input or constant"));
  }
  if ((*writer)[op.output] >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": writes ", TensorLabel(model, op.output), ", already written by op ",
                     (*writer)[op.output]));
  }
  (*writer)[op.output] = k;
  return absl::OkStatus();
}

// The output shape `op` must have given its inputs' shapes, or an error naming the mismatch.
absl::Status ExpectedShape(const Model& model, const OpDef& op, const std::string& label,
                           Shape* expected) {
  const Shape& a = model.tensors[op.inputs[0]].shape;
  const Shape* b = op.inputs.size() > 1 ? &model.tensors[op.inputs[1]].shape : nullptr;
  const int rank = static_cast<int>(a.size());
  switch (op.kind) {
    case OpKind::kMul:
    case OpKind::kAdd:
    case OpKind::kSub:
    case OpKind::kDiv:
      if (BroadcastShapes(a, *b, expected)) return absl::OkStatus();
      return absl::InvalidArgumentError(absl::StrCat(label, ": shapes ", ShapeString(a), " and ",
                                                     ShapeString(*b), " do not broadcast"));
    case OpKind::kMean:
      if (op.axis < -rank || op.axis >= rank) {
        return absl::InvalidArgumentError(
            absl::StrCat(label, ": axis ", op.axis, " is out of range for shape ", ShapeString(a)));
      }
      *expected = a;
      (*expected)[op.axis < 0 ? op.axis + rank : op.axis] = 1;
      return absl::OkStatus();
    case OpKind::kRmsNorm:
      if (rank == 0 || b->size() != 1 || (*b)[0] != a.back()) {
        return absl::InvalidArgumentError(absl::StrCat(label, ": weight shape ", ShapeString(*b),
                                                       " does not match the last axis of ",
                                                       ShapeString(a)));
      }
      break;
    case OpKind::kMatmul:
      if (a.size() != 2 || b->size() != 2 || a[1] != (*b)[0]) {
        return absl::InvalidArgumentError(
            absl::StrCat(label, ": cannot multiply ", ShapeString(a), " by ", ShapeString(*b)));
      }
      *expected = {a[0], (*b)[1]};
      return absl::OkStatus();
    case OpKind::kThresholdBackward:
      if (BroadcastShapes(a, *b, expected)) return absl::OkStatus();
      return absl::InvalidArgumentError(absl::StrCat(label, ": shapes ", ShapeString(a), " and ",
                                                     ShapeString(*b), " do not broadcast"));
    case OpKind::kTranspose:
      if (a.size() != 2) {
        return absl::InvalidArgumentError(
            absl::StrCat(label, ": transposes 2-D tensors, got ", ShapeString(a)));
      }
      *expected = {a[1], a[0]};
      return absl::OkStatus();
    case OpKind::kSoftmax:
      if (rank == 0) {
        return absl::InvalidArgumentError(absl::StrCat(label, ": input is a scalar"));
      }
      break;
    case OpKind::kMulScalar:
    case OpKind::kAddScalar:
    case OpKind::kRsqrt:
    case OpKind::kGelu:
    case OpKind::kCopy:
    case OpKind::kRelu:
    case OpKind::kAbs:
    case OpKind::kAllReduce:
      break;
  }
  *expected = a;
  return absl::OkStatus();
}

absl::Status CheckOp(const Model& model, uint32_t k, std::vector<int64_t>* writer) {
  const OpDef& op = model.ops[k];
  if (OpArity(op.kind) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("op ", k, ": unknown kind ", static_cast<int>(op.kind)));
  }
  const std::string label = absl::StrCat("op ", k, " (", OpKindName(op.kind), ")");
  absl::Status status = CheckOpWiring(model, k, label, writer);
  if (!status.ok()) return status;
  Shape expected;
  status = ExpectedShape(model, op, label, &expected);
  if (!status.ok()) return status;
  const Shape& out = model.tensors[op.output].shape;
  if (out != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": output ", TensorLabel(model, op.output), " has shape ",
                     ShapeString(out), ", expected ", ShapeString(expected)));
  }
  if (!std::isfinite(op.scalar)) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": scalar is not finite"));
  }
  if (op.kind == OpKind::kAllReduce) {
    // The ranks exchange the tensor's bytes: input and output share a dtype.
    if (ReduceName(op.axis) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          label, ": reduction ", op.axis, " (add 0, max 2 or min 3, as nrt_op_type_t)"));
    }
    const DType in_dtype = model.tensors[op.inputs[0]].dtype;
    if (model.tensors[op.output].dtype != in_dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": output ", TensorLabel(model, op.output), " is ",
                       DTypeName(model.tensors[op.output].dtype), ", its input ",
                       DTypeName(in_dtype), " (a collective keeps the dtype)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckOps(const Model& model) {
  std::vector<int64_t> writer(model.tensors.size(), -1);
  for (uint32_t k = 0; k < model.ops.size(); ++k) {
    absl::Status status = CheckOp(model, k, &writer);
    if (!status.ok()) return status;
  }
  for (uint32_t index : model.OutputIndices()) {
    if (writer[index] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(TensorLabel(model, index), ": output is never written by an op"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool BroadcastShapes(const Shape& a, const Shape& b, Shape* out) {
  const size_t rank = std::max(a.size(), b.size());
  out->assign(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    const uint32_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const uint32_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1) return false;
    (*out)[rank - 1 - i] = std::max(da, db);
  }
  return true;
}

absl::Status ValidateModel(const Model& model) {
  absl::Status status = CheckNames(model);
  if (status.ok()) status = CheckTensors(model);
  if (status.ok()) status = CheckOps(model);
  return status;
}

}  // namespace nrtsim
