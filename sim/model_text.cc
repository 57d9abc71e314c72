#include "model_text.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace nrtsim {
namespace {

// ValidateModel()'s element limit, checked here as well so that `fill` never sizes a buffer
// from an unchecked shape.
constexpr uint64_t kMaxTensorElements = uint64_t{1} << 28;
constexpr uint64_t kMaxTotalBytes = uint64_t{2} << 30;  // ValidateModel()'s, the device's

using Shape = std::vector<uint32_t>;

// Names start with a letter or '_', and "inf" or "nan" are numbers, so that a positional
// argument is a number exactly when it is not a name.
bool IsName(absl::string_view s) {
  if (s.empty() || !(absl::ascii_isalpha(s[0]) || s[0] == '_')) return false;
  float number;
  if (absl::SimpleAtof(s, &number)) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return absl::ascii_isalnum(c) || c == '_' || c == '.' || c == '-';
  });
}

// The first whitespace-delimited word of `s` and the rest, both trimmed.
std::pair<absl::string_view, absl::string_view> SplitWord(absl::string_view s) {
  s = absl::StripAsciiWhitespace(s);
  const size_t end = std::min(s.find_first_of(" \t"), s.size());
  return {s.substr(0, end), absl::StripAsciiWhitespace(s.substr(end))};
}

bool ParseFinite(absl::string_view s, float* v) {
  return absl::SimpleAtof(s, v) && std::isfinite(*v);
}

// Round to nearest, ties to even: the conversion the hardware uses when storing bf16.
uint16_t ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

void AppendValue(float v, DType dtype, std::vector<uint8_t>* data) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  int bytes = 4;
  if (dtype == DType::kBFloat16) {
    bits = ToBf16(v);
    bytes = 2;
  }
  for (int i = 0; i < bytes; ++i) data->push_back(static_cast<uint8_t>(bits >> (8 * i)));
}

// The shape of an op's output when the text does not declare it. Inputs that do not fit the
// op's shape rule give the first input's shape: ValidateModel() then reports the mismatch,
// with the one wording shared by the text form and the model file.
Shape InferShape(const OpDef& op, const Model& model) {
  const Shape& a = model.tensors[op.inputs[0]].shape;
  const Shape* b = op.inputs.size() > 1 ? &model.tensors[op.inputs[1]].shape : nullptr;
  const int rank = static_cast<int>(a.size());
  Shape out = a;
  switch (op.kind) {
    case OpKind::kMul:
    case OpKind::kAdd:
    case OpKind::kSub:
    case OpKind::kDiv:
      if (!BroadcastShapes(a, *b, &out)) out = a;
      break;
    case OpKind::kMean:
      if (op.axis >= -rank && op.axis < rank) out[op.axis < 0 ? op.axis + rank : op.axis] = 1;
      break;
    case OpKind::kMatmul:
      if (a.size() == 2 && b->size() == 2) out = {a[0], (*b)[1]};
      break;
    case OpKind::kThresholdBackward:
      if (!BroadcastShapes(a, *b, &out)) out = a;
      break;
    case OpKind::kTranspose:
      if (a.size() == 2) out = {a[1], a[0]};
      break;
    default:
      break;
  }
  return out;
}

bool TakesScalar(OpKind kind) {
  return kind == OpKind::kMulScalar || kind == OpKind::kAddScalar || kind == OpKind::kRmsNorm ||
         kind == OpKind::kThresholdBackward;
}

// What an op statement's argument list says, before its tensors are looked up.
struct CallArgs {
  std::vector<absl::string_view> tensors;
  bool has_scalar = false;
  float scalar = 0.0f;
  bool has_axis = false;
  int32_t axis = -1;
  bool has_reduce = false;  // all_reduce's op=add|max|min
  int32_t reduce = 0;
};

class Parser {
 public:
  absl::StatusOr<Model> Run(absl::string_view text);

 private:
  absl::Status Statement(absl::string_view s);
  absl::Status ModelStatement(absl::string_view rest);
  absl::Status Declaration(TensorKind kind, absl::string_view rest);
  absl::Status ParseShape(absl::string_view text, Shape* shape, absl::string_view* after);
  absl::Status ParseValues(absl::string_view text, TensorDef* t);
  absl::Status OpStatement(absl::string_view out, absl::string_view call);
  absl::Status ParseArgs(OpKind kind, absl::string_view text, CallArgs* args);
  absl::Status ParseArg(OpKind kind, absl::string_view arg, CallArgs* args);
  absl::Status ParseKeyword(OpKind kind, absl::string_view key, absl::string_view value,
                            CallArgs* args);
  absl::Status SetOutput(absl::string_view name, OpDef* op);
  absl::Status DefineTensor(TensorDef t);
  absl::Status WithLine(const absl::Status& status) const;

  absl::Status Error(absl::string_view reason) const {
    return absl::InvalidArgumentError(absl::StrCat("line ", line_, ": ", reason));
  }

  Model model_;
  int line_ = 0;
  int model_line_ = 0;                                  // 0 until the `model` statement
  std::map<std::string, uint32_t, std::less<>> index_;  // tensor name -> index in model_
  std::vector<int> tensor_line_;                        // where each tensor was defined
  std::vector<int> written_line_;                       // where each was assigned, or 0
  std::vector<int> op_line_;
  uint64_t declared_bytes_ = 0;  // of the tensors declared so far (Declaration)
};

absl::StatusOr<Model> Parser::Run(absl::string_view text) {
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++line_;
    absl::string_view s = raw.substr(0, std::min(raw.find('#'), raw.size()));
    s = absl::StripAsciiWhitespace(s);
    if (s.empty()) continue;
    absl::Status status = Statement(s);
    if (!status.ok()) return status;
  }
  if (model_line_ == 0) {
    return absl::InvalidArgumentError("line 1: missing 'model NAME' statement");
  }
  absl::Status status = WithLine(ValidateModel(model_));
  if (!status.ok()) return status;
  return std::move(model_);
}

absl::Status Parser::Statement(absl::string_view s) {
  // `NAME = op(...)` is told from `const NAME ... = values` by what stands left of the '='.
  const size_t eq = s.find('=');
  if (eq != absl::string_view::npos) {
    absl::string_view lhs = absl::StripAsciiWhitespace(s.substr(0, eq));
    if (IsName(lhs)) {
      if (model_line_ == 0) return Error("expected 'model NAME' before anything else");
      return OpStatement(lhs, absl::StripAsciiWhitespace(s.substr(eq + 1)));
    }
  }
  auto [keyword, rest] = SplitWord(s);
  if (keyword == "model") return ModelStatement(rest);
  if (model_line_ == 0) return Error("expected 'model NAME' before anything else");
  if (keyword == "input") return Declaration(TensorKind::kInput, rest);
  if (keyword == "output") return Declaration(TensorKind::kOutput, rest);
  if (keyword == "const") return Declaration(TensorKind::kConstant, rest);
  return Error(absl::StrCat("unknown statement '", keyword,
                            "' (expected model, input, output, const or NAME = op(...))"));
}

absl::Status Parser::ModelStatement(absl::string_view rest) {
  if (model_line_ != 0) {
    return Error(absl::StrCat("the model is already named on line ", model_line_));
  }
  if (!IsName(rest)) return Error(absl::StrCat("bad model name '", rest, "'"));
  model_.name = std::string(rest);
  model_line_ = line_;
  return absl::OkStatus();
}

absl::Status Parser::Declaration(TensorKind kind, absl::string_view rest) {
  TensorDef t;
  t.kind = kind;
  auto [name, after_name] = SplitWord(rest);
  auto [dtype, shape_text] = SplitWord(after_name);
  t.name = std::string(name);
  if (dtype == "fp32") {
    t.dtype = DType::kFloat32;
  } else if (dtype == "bf16") {
    t.dtype = DType::kBFloat16;
  } else {
    return Error(absl::StrCat("unknown dtype '", dtype, "' (expected fp32 or bf16)"));
  }
  absl::string_view after;
  absl::Status status = ParseShape(shape_text, &t.shape, &after);
  if (!status.ok()) return status;
  // What the tensors declared so far take, as ValidateModel() adds it up, so that constants
  // past the device's 2 GiB are refused before their bytes are made (a few lines of `fill`
  // would otherwise ask for any amount of memory).
  uint64_t elements = 1;
  for (uint32_t d : t.shape) elements = std::min(elements * d, kMaxTensorElements + 1);
  if (elements <= kMaxTensorElements) declared_bytes_ += elements * DTypeSize(t.dtype);
  if (kind == TensorKind::kConstant) {
    if (after.empty() || after[0] != '=') return Error("expected '= values' after the shape");
    if (declared_bytes_ > kMaxTotalBytes) {
      return Error(absl::StrCat("constant ", t.name, ": tensors up to here need ",
                                declared_bytes_, " bytes (at most 2 GiB)"));
    }
    status = ParseValues(absl::StripAsciiWhitespace(after.substr(1)), &t);
    if (!status.ok()) return status;
  } else if (!after.empty()) {
    return Error(absl::StrCat("unexpected '", after, "' after the shape"));
  }
  return DefineTensor(std::move(t));
}

// `[d0,d1,...]` or `[]`; *after is what follows the ']', trimmed.
absl::Status Parser::ParseShape(absl::string_view text, Shape* shape, absl::string_view* after) {
  const size_t close = text.find(']');
  if (text.empty() || text[0] != '[' || close == absl::string_view::npos) {
    return Error(absl::StrCat("expected a shape like [4,512], got '", text, "'"));
  }
  *after = absl::StripAsciiWhitespace(text.substr(close + 1));
  absl::string_view dims = absl::StripAsciiWhitespace(text.substr(1, close - 1));
  if (dims.empty()) return absl::OkStatus();
  for (absl::string_view d : absl::StrSplit(dims, ',')) {
    uint32_t value;
    if (!absl::SimpleAtoi(d, &value) || value == 0) {
      return Error(absl::StrCat("bad dimension '", absl::StripAsciiWhitespace(d),
                                "' (expected a positive integer)"));
    }
    shape->push_back(value);
  }
  return absl::OkStatus();
}

// `fill V` or a comma list of exactly NumElements() numbers, stored in t->dtype.
absl::Status Parser::ParseValues(absl::string_view text, TensorDef* t) {
  uint64_t count = 1;
  for (uint32_t d : t->shape) {
    count *= d;
    if (count > kMaxTensorElements) {
      return Error(absl::StrCat("constant ", t->name, " has more than 2^28 elements"));
    }
  }
  t->data.reserve(count * DTypeSize(t->dtype));
  float v;
  auto [first, fill_value] = SplitWord(text);
  if (first == "fill") {
    if (!ParseFinite(fill_value, &v)) return Error(absl::StrCat("bad number '", fill_value, "'"));
    // One element, then doubling copies: a 2^28-element fill is a few large memcpys.
    AppendValue(v, t->dtype, &t->data);
    const size_t element = t->data.size();
    t->data.resize(count * element);
    for (size_t filled = element; filled < t->data.size(); filled *= 2) {
      std::memcpy(t->data.data() + filled, t->data.data(),
                  std::min(filled, t->data.size() - filled));
    }
    return absl::OkStatus();
  }
  std::vector<absl::string_view> items = absl::StrSplit(text, ',');
  if (items.size() != count) {
    return Error(
        absl::StrCat("constant ", t->name, " needs ", count, " values, got ", items.size()));
  }
  for (absl::string_view item : items) {
    if (!ParseFinite(item, &v)) {
      return Error(absl::StrCat("bad number '", absl::StripAsciiWhitespace(item), "'"));
    }
    AppendValue(v, t->dtype, &t->data);
  }
  return absl::OkStatus();
}

absl::Status Parser::DefineTensor(TensorDef t) {
  if (!IsName(t.name)) return Error(absl::StrCat("bad tensor name '", t.name, "'"));
  auto it = index_.find(t.name);
  if (it != index_.end()) {
    return Error(absl::StrCat("redefinition of '", t.name, "' (first defined on line ",
                              tensor_line_[it->second], ")"));
  }
  index_.emplace(t.name, static_cast<uint32_t>(model_.tensors.size()));
  model_.tensors.push_back(std::move(t));
  tensor_line_.push_back(line_);
  written_line_.push_back(0);
  return absl::OkStatus();
}

absl::Status Parser::OpStatement(absl::string_view out, absl::string_view call) {
  const size_t open = call.find('(');
  if (open == absl::string_view::npos || call.back() != ')') {
    return Error(absl::StrCat("expected op(args) after '=', got '", call, "'"));
  }
  const std::string op_name(absl::StripAsciiWhitespace(call.substr(0, open)));
  OpDef op;
  if (!OpKindFromName(op_name, &op.kind)) {
    return Error(absl::StrCat("unknown op '", op_name, "'"));
  }
  CallArgs args;
  absl::Status status = ParseArgs(op.kind, call.substr(open + 1, call.size() - open - 2), &args);
  if (!status.ok()) return status;
  for (absl::string_view name : args.tensors) {
    auto it = index_.find(name);
    if (it == index_.end()) return Error(absl::StrCat("unknown tensor '", name, "'"));
    op.inputs.push_back(it->second);
  }
  op.scalar = args.scalar;
  op.axis = args.axis;
  if (op.kind == OpKind::kAllReduce) op.axis = args.has_reduce ? args.reduce : NRT_OP_ADD;
  status = SetOutput(out, &op);
  if (!status.ok()) return status;
  model_.ops.push_back(std::move(op));
  op_line_.push_back(line_);
  return absl::OkStatus();
}

absl::Status Parser::ParseArgs(OpKind kind, absl::string_view text, CallArgs* args) {
  if (!absl::StripAsciiWhitespace(text).empty()) {
    for (absl::string_view arg : absl::StrSplit(text, ',')) {
      absl::Status status = ParseArg(kind, absl::StripAsciiWhitespace(arg), args);
      if (!status.ok()) return status;
    }
  }
  const char* name = OpKindName(kind);
  if (args->tensors.size() != static_cast<size_t>(OpArity(kind))) {
    return Error(absl::StrCat(name, " takes ", OpArity(kind), " tensor argument",
                              OpArity(kind) == 1 ? "" : "s", ", got ", args->tensors.size()));
  }
  if (TakesScalar(kind) && !args->has_scalar) {
    return Error(absl::StrCat(name, " needs a scalar, e.g. ", name,
                              kind == OpKind::kRmsNorm              ? "(x, weight, 1e-6)"
                              : kind == OpKind::kThresholdBackward ? "(grad, x, 0)"
                                                                   : "(x, 2.0)"));
  }
  return absl::OkStatus();
}

// One argument: a tensor name, a positional scalar (after the tensors) or key=value.
absl::Status Parser::ParseArg(OpKind kind, absl::string_view arg, CallArgs* args) {
  const size_t eq = arg.find('=');
  if (eq != absl::string_view::npos) {
    return ParseKeyword(kind, absl::StripAsciiWhitespace(arg.substr(0, eq)),
                        absl::StripAsciiWhitespace(arg.substr(eq + 1)), args);
  }
  if (arg.empty()) return Error("empty argument");
  if (IsName(arg)) {
    if (args->has_scalar) return Error(absl::StrCat("tensor '", arg, "' after the scalar"));
    args->tensors.push_back(arg);
    return absl::OkStatus();
  }
  return ParseKeyword(kind, "scalar", arg, args);
}

absl::Status Parser::ParseKeyword(OpKind kind, absl::string_view key, absl::string_view value,
                                  CallArgs* args) {
  const char* op = OpKindName(kind);
  if (key == "axis" && kind == OpKind::kMean) {
    if (args->has_axis) return Error("axis given twice");
    if (!absl::SimpleAtoi(value, &args->axis)) {
      return Error(absl::StrCat("bad axis '", value, "'"));
    }
    args->has_axis = true;
    return absl::OkStatus();
  }
  if (key == "op" && kind == OpKind::kAllReduce) {
    if (args->has_reduce) return Error("op given twice");
    if (!ReduceFromName(std::string(value), &args->reduce)) {
      return Error(absl::StrCat("bad reduction '", value, "' (add, max or min)"));
    }
    args->has_reduce = true;
    return absl::OkStatus();
  }
  if ((key == "scalar" || key == "eps" ||
       (key == "threshold" && kind == OpKind::kThresholdBackward)) &&
      TakesScalar(kind)) {
    if (args->has_scalar) return Error(absl::StrCat(op, " takes one scalar"));
    if (!ParseFinite(value, &args->scalar)) {
      return Error(absl::StrCat("bad number '", value, "'"));
    }
    args->has_scalar = true;
    return absl::OkStatus();
  }
  if (key == "scalar") return Error(absl::StrCat(op, " takes no scalar, got '", value, "'"));
  return Error(absl::StrCat(op, " has no argument '", key, "'"));
}

// The op's output: a declared output not yet assigned, or a new intermediate.
absl::Status Parser::SetOutput(absl::string_view name, OpDef* op) {
  auto it = index_.find(name);
  if (it == index_.end()) {
    TensorDef t;
    t.name = std::string(name);
    t.dtype = model_.tensors[op->inputs[0]].dtype;
    t.shape = InferShape(*op, model_);
    absl::Status status = DefineTensor(std::move(t));
    if (!status.ok()) return status;
    it = index_.find(name);
  } else if (model_.tensors[it->second].kind != TensorKind::kOutput) {
    return Error(absl::StrCat("cannot assign to '", name, "', defined on line ",
                              tensor_line_[it->second],
                              " (only outputs are declared before they are assigned)"));
  } else if (written_line_[it->second] != 0) {
    return Error(absl::StrCat("output '", name, "' is already assigned on line ",
                              written_line_[it->second]));
  }
  op->output = it->second;
  written_line_[it->second] = line_;
  return absl::OkStatus();
}

// Points a validation error at the statement it is about: "op K ..." at the op's line,
// "tensor K ..." at the tensor's, "model: ..." at the model statement.
absl::Status Parser::WithLine(const absl::Status& status) const {
  if (status.ok()) return status;
  const absl::string_view message = status.message();
  auto [what, rest] = SplitWord(message);
  absl::string_view number = rest.substr(0, std::min(rest.find_first_of(" :"), rest.size()));
  size_t index = 0;
  int line = 0;
  if (what == "model:") {
    line = model_line_;
  } else if (what == "op" && absl::SimpleAtoi(number, &index) && index < op_line_.size()) {
    line = op_line_[index];
  } else if (what == "tensor" && absl::SimpleAtoi(number, &index) && index < tensor_line_.size()) {
    line = tensor_line_[index];
  }
  if (line == 0) return status;
  return absl::InvalidArgumentError(absl::StrCat("line ", line, ": ", message));
}

}  // namespace

absl::StatusOr<Model> ParseModelText(absl::string_view text) {
  Parser parser;
  return parser.Run(text);
}

}  // namespace nrtsim
