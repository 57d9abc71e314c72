#include "model_format.h"

#include <cstring>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "zlib.h"

namespace nrtsim {
namespace {

constexpr char kMagic[8] = {'N', 'R', 'T', 'S', 'I', 'M', 'N', 'F'};
// Header field offsets (docs/model_format.md, "Header").
constexpr size_t kMajorOffset = 8;
constexpr size_t kCrcOffset = 24;
constexpr size_t kHeaderSize = 28;

// The fewest payload bytes one tensor or op can take, used to reject a count the remaining
// bytes cannot hold before anything is allocated for it. Tensor: name length (4), kind, dtype,
// rank (1 each). Op: kind, n_inputs (1 each), output (4), scalar (4), axis (4).
constexpr size_t kMinTensorBytes = 7;
constexpr size_t kMinOpBytes = 14;

// ---- Encoding --------------------------------------------------------------------------------

// Appends little-endian fields to a string, whatever the host's byte order.
class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U16(uint16_t v) { Le(v, 2); }
  void U32(uint32_t v) { Le(v, 4); }
  void U64(uint64_t v) { Le(v, 8); }
  void F32(float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    U32(bits);
  }
  void Bytes(const void* data, size_t size) { out_.append(static_cast<const char*>(data), size); }
  void String(const std::string& s) {
    U32(static_cast<uint32_t>(s.size()));
    Bytes(s.data(), s.size());
  }
  std::string& out() { return out_; }

 private:
  void Le(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) U8(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::string out_;
};

void EncodeTensor(const TensorDef& t, Writer* w) {
  w->String(t.name);
  w->U8(static_cast<uint8_t>(t.kind));
  w->U8(static_cast<uint8_t>(t.dtype));
  w->U8(static_cast<uint8_t>(t.shape.size()));
  for (uint32_t d : t.shape) w->U32(d);
  if (t.kind == TensorKind::kConstant) {
    w->U64(t.data.size());
    w->Bytes(t.data.data(), t.data.size());
  }
}

void EncodeOp(const OpDef& op, Writer* w) {
  w->U8(static_cast<uint8_t>(op.kind));
  w->U8(static_cast<uint8_t>(op.inputs.size()));
  for (uint32_t in : op.inputs) w->U32(in);
  w->U32(op.output);
  w->F32(op.scalar);
  w->U32(static_cast<uint32_t>(op.axis));
}

// The stored checksum: everything in the file except the checksum field itself, so a flipped
// version or flags bit is caught as surely as one in the payload.
uint32_t FileCrc(const uint8_t* file, size_t size) {
  const uint32_t crc = Crc32(0, file, kCrcOffset);
  return Crc32(crc, file + kHeaderSize, size - kHeaderSize);
}

// ---- Decoding --------------------------------------------------------------------------------

absl::Status Malformed(absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat("model file: ", reason));
}

// Reads little-endian fields from [data, data + size). Every read checks the remaining length
// first and returns false, consuming nothing, if the field does not fit.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}

  size_t remaining() const { return static_cast<size_t>(end_ - p_); }

  bool U8(uint8_t* v) { return Le(v, 1); }
  bool U16(uint16_t* v) { return Le(v, 2); }
  bool U32(uint32_t* v) { return Le(v, 4); }
  bool U64(uint64_t* v) { return Le(v, 8); }
  bool I32(int32_t* v) {
    uint32_t bits;
    if (!U32(&bits)) return false;
    *v = static_cast<int32_t>(bits);
    return true;
  }
  bool F32(float* v) {
    uint32_t bits;
    if (!U32(&bits)) return false;
    std::memcpy(v, &bits, sizeof(bits));
    return true;
  }
  // Points *bytes at the next `n` bytes, which stay owned by the caller of the constructor.
  bool Bytes(uint64_t n, const uint8_t** bytes) {
    if (n > remaining()) return false;
    *bytes = p_;
    p_ += n;
    return true;
  }

 private:
  template <typename T>
  bool Le(T* v, int bytes) {
    if (remaining() < static_cast<size_t>(bytes)) return false;
    uint64_t x = 0;
    for (int i = 0; i < bytes; ++i) x |= static_cast<uint64_t>(p_[i]) << (8 * i);
    p_ += bytes;
    *v = static_cast<T>(x);
    return true;
  }

  const uint8_t* p_;
  const uint8_t* end_;
};

absl::Status Truncated(absl::string_view where) {
  return Malformed(absl::StrCat("payload ends inside ", where));
}

// A u32 length then that many bytes. The length is checked against the remaining bytes
// before the string is allocated.
absl::Status ReadString(Reader* r, absl::string_view what, std::string* s) {
  uint32_t size;
  const uint8_t* bytes;
  if (!r->U32(&size)) return Truncated(what);
  if (!r->Bytes(size, &bytes)) {
    return Malformed(
        absl::StrCat(what, " length ", size, " exceeds the remaining ", r->remaining(), " bytes"));
  }
  s->assign(reinterpret_cast<const char*>(bytes), size);
  return absl::OkStatus();
}

absl::Status ReadTensorEnums(Reader* r, const std::string& where, TensorDef* t) {
  uint8_t kind, dtype;
  if (!r->U8(&kind) || !r->U8(&dtype)) return Truncated(where);
  if (kind > static_cast<uint8_t>(TensorKind::kConstant)) {
    return Malformed(absl::StrCat(where, ": unknown tensor kind ", static_cast<int>(kind)));
  }
  if (dtype != static_cast<uint8_t>(DType::kFloat32) &&
      dtype != static_cast<uint8_t>(DType::kBFloat16)) {
    return Malformed(absl::StrCat(where, ": unknown dtype ", static_cast<int>(dtype)));
  }
  t->kind = static_cast<TensorKind>(kind);
  t->dtype = static_cast<DType>(dtype);
  return absl::OkStatus();
}

absl::Status ReadTensor(Reader* r, uint32_t index, TensorDef* t) {
  const std::string where = absl::StrCat("tensor ", index);
  absl::Status status = ReadString(r, absl::StrCat(where, " name"), &t->name);
  if (status.ok()) status = ReadTensorEnums(r, where, t);
  if (!status.ok()) return status;
  uint8_t rank;
  if (!r->U8(&rank) || r->remaining() < rank * sizeof(uint32_t)) return Truncated(where);
  t->shape.resize(rank);
  for (uint32_t& d : t->shape) r->U32(&d);
  if (t->kind != TensorKind::kConstant) return absl::OkStatus();
  uint64_t size;
  const uint8_t* bytes;
  if (!r->U64(&size)) return Truncated(where);
  if (!r->Bytes(size, &bytes)) {
    return Malformed(absl::StrCat(where, ": data length ", size, " exceeds the remaining ",
                                  r->remaining(), " bytes"));
  }
  t->data.assign(bytes, bytes + size);
  return absl::OkStatus();
}

absl::Status ReadOp(Reader* r, uint32_t index, OpDef* op) {
  const std::string where = absl::StrCat("op ", index);
  uint8_t kind, n_inputs;
  if (!r->U8(&kind) || !r->U8(&n_inputs)) return Truncated(where);
  if (OpArity(static_cast<OpKind>(kind)) < 0) {
    return Malformed(absl::StrCat(where, ": unknown op kind ", static_cast<int>(kind)));
  }
  op->kind = static_cast<OpKind>(kind);
  if (r->remaining() < n_inputs * sizeof(uint32_t)) return Truncated(where);
  op->inputs.resize(n_inputs);
  for (uint32_t& in : op->inputs) r->U32(&in);
  if (!r->U32(&op->output) || !r->F32(&op->scalar) || !r->I32(&op->axis)) {
    return Truncated(where);
  }
  return absl::OkStatus();
}

// A u32 count of items each taking at least `min_bytes`: a count the remaining bytes cannot
// hold is rejected here, so a hostile count never sizes an allocation or a loop.
absl::Status ReadCount(Reader* r, absl::string_view what, size_t min_bytes, uint32_t* count) {
  if (!r->U32(count)) return Truncated(absl::StrCat(what, " count"));
  if (*count > r->remaining() / min_bytes) {
    return Malformed(absl::StrCat(what, " count ", *count, " cannot fit in the remaining ",
                                  r->remaining(), " bytes"));
  }
  return absl::OkStatus();
}

absl::Status ReadPayload(Reader* r, uint16_t minor, Model* model) {
  absl::Status status = ReadString(r, "model name", &model->name);
  uint32_t count = 0;
  if (status.ok()) status = ReadCount(r, "tensor", kMinTensorBytes, &count);
  if (!status.ok()) return status;
  model->tensors.resize(count);
  for (uint32_t i = 0; i < count && status.ok(); ++i) {
    status = ReadTensor(r, i, &model->tensors[i]);
  }
  if (status.ok()) status = ReadCount(r, "op", kMinOpBytes, &count);
  if (!status.ok()) return status;
  model->ops.resize(count);
  for (uint32_t i = 0; i < count && status.ok(); ++i) status = ReadOp(r, i, &model->ops[i]);
  if (!status.ok()) return status;
  // Bytes after the op list are fields appended by a newer minor version, which we may skip;
  // in a file of our own version or older they can only be corruption.
  if (r->remaining() > 0 && minor <= kModelFormatMinor) {
    return Malformed(absl::StrCat(r->remaining(), " unexpected bytes after the op list"));
  }
  return absl::OkStatus();
}

// Checks the header and returns the file's minor version. The magic and the major version are
// checked before anything else, so a file of another major version is reported as such even
// if the rest of its header is laid out differently.
absl::Status ReadHeader(const uint8_t* file, size_t size, uint16_t* minor) {
  const std::string truncated =
      absl::StrCat("truncated: ", size, " bytes, the header alone is ", kHeaderSize);
  if (size < sizeof(kMagic)) return Malformed(truncated);
  if (std::memcmp(file, kMagic, sizeof(kMagic)) != 0) {
    return Malformed("bad magic: not a simulator model file");
  }
  Reader r(file + kMajorOffset, size - kMajorOffset);
  uint16_t major;
  if (!r.U16(&major) || !r.U16(minor)) return Malformed(truncated);
  if (major != kModelFormatMajor) {
    return absl::FailedPreconditionError(
        absl::StrCat("model file: format version ", major, ".", *minor,
                     " is not supported (this runtime reads ", kModelFormatMajor, ".x)"));
  }
  uint32_t flags, crc;
  uint64_t payload_size;
  if (!r.U32(&flags) || !r.U64(&payload_size) || !r.U32(&crc)) return Malformed(truncated);
  if (flags != 0) return Malformed(absl::StrCat("unknown flags 0x", absl::Hex(flags)));
  if (payload_size != size - kHeaderSize) {
    return Malformed(absl::StrCat("header says ", payload_size, " payload bytes, the file has ",
                                  size - kHeaderSize, " after the header"));
  }
  if (FileCrc(file, size) != crc) {
    return Malformed("checksum mismatch: the file is corrupt");
  }
  return absl::OkStatus();
}

}  // namespace

uint32_t Crc32(uint32_t crc, const void* data, size_t size) {
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), size));
}

std::string EncodeModel(const Model& model) {
  Writer payload;
  payload.String(model.name);
  payload.U32(static_cast<uint32_t>(model.tensors.size()));
  for (const TensorDef& t : model.tensors) EncodeTensor(t, &payload);
  payload.U32(static_cast<uint32_t>(model.ops.size()));
  for (const OpDef& op : model.ops) EncodeOp(op, &payload);

  Writer file;
  file.Bytes(kMagic, sizeof(kMagic));
  file.U16(kModelFormatMajor);
  file.U16(kModelFormatMinor);
  file.U32(0);  // flags
  file.U64(payload.out().size());
  file.U32(0);  // the checksum, filled in below once everything it covers is in place
  file.Bytes(payload.out().data(), payload.out().size());
  std::string& out = file.out();
  const uint32_t crc = FileCrc(reinterpret_cast<const uint8_t*>(out.data()), out.size());
  for (int i = 0; i < 4; ++i) out[kCrcOffset + i] = static_cast<char>(crc >> (8 * i));
  return std::move(out);
}

absl::StatusOr<Model> DecodeModel(const void* data, size_t size) {
  const uint8_t* file = static_cast<const uint8_t*>(data);
  uint16_t minor = 0;
  absl::Status status = ReadHeader(file, size, &minor);
  if (!status.ok()) return status;
  Model model;
  Reader payload(file + kHeaderSize, size - kHeaderSize);
  status = ReadPayload(&payload, minor, &model);
  if (!status.ok()) return status;
  status = ValidateModel(model);
  if (!status.ok()) return Malformed(status.message());
  return model;
}

}  // namespace nrtsim
