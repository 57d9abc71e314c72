#include "model_format.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model_text.h"

namespace nrtsim {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kRmsNorm[] = R"(model rmsnorm_compiled
input x bf16 [4,512]
input weight bf16 [512]
const two fp32 [1] = 2.0
output y bf16 [4,512]
sq = mul(x, x)
ms = mean(sq, axis=-1)
ms_eps = add_scalar(ms, 1e-6)
r = rsqrt(ms_eps)
xn = mul(x, r)
y = mul(xn, weight)
)";

constexpr char kAttentionish[] = R"(model attentionish
input q fp32 [8,16]
input k fp32 [16,8]
const scale bf16 [] = 0.25
const bias fp32 [8] = 1, 2, 3, 4, 5, 6, 7, 8
output probs fp32 [8,8]
output act bf16 [8,8]
s = matmul(q, k)
ss = mul(s, scale)
sb = add(ss, bias)
probs = softmax(sb)
g = gelu(probs)
act = copy(g)
)";

constexpr char kLibrary[] = R"(model library_ops
input a fp32 [2,3,4]
input w fp32 [4]
output out fp32 [2,1,4]
n = rms_norm(a, w, 1e-5)
d = div(n, a)
e = sub(d, w)
f = mul_scalar(e, -3)
out = mean(f, axis=1)
)";

// A layer's forward and backward as a framework lowers them: relu, its backward, abs, and the
// transposed operand of a linear layer's backward.
constexpr char kReluLayer[] = R"(model relu_layer
input x bf16 [4,8]
input w bf16 [6,8]
input g fp32 [4,6]
output h bf16 [4,6]
output dx fp32 [4,8]
output n bf16 [4,6]
wt = transpose(w)
z = matmul(x, wt)
h = relu(z)
gz = threshold_backward(g, h, 0)
dx = matmul(gz, w)
n = abs(z)
)";

// A data-parallel step's gradient: summed, then the maximum, across the ranks' group.
constexpr char kCollective[] = R"(model grads
input g fp32 [4,8]
input n bf16 [8]
output avg fp32 [4,8]
output top bf16 [8]
sum = all_reduce(g)
avg = mul_scalar(sum, 0.25)
top = all_reduce(n, op=max)
)";

constexpr char kSmallest[] = R"(model s
input x fp32 []
output y fp32 []
y = copy(x)
)";

// Header offsets as docs/model_format.md documents them.
constexpr size_t kMajor = 8, kMinor = 10, kFlags = 12, kLength = 16, kCrc = 24, kHeader = 28;

Model Parse(const char* text) {
  absl::StatusOr<Model> model = ParseModelText(text);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : Model();
}

std::string Compile(const char* text) { return EncodeModel(Parse(text)); }

absl::Status Decode(const std::string& file) {
  return DecodeModel(file.data(), file.size()).status();
}

void PutLe(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
void PutU8(uint8_t v, std::string* out) { PutLe(v, 1, out); }
void PutU32(uint32_t v, std::string* out) { PutLe(v, 4, out); }
void PutU64(uint64_t v, std::string* out) { PutLe(v, 8, out); }
void PutString(const std::string& s, std::string* out) {
  PutU32(static_cast<uint32_t>(s.size()), out);
  out->append(s);
}
void SetLe(uint64_t v, int bytes, size_t offset, std::string* file) {
  for (int i = 0; i < bytes; ++i) (*file)[offset + i] = static_cast<char>(v >> (8 * i));
}

// Makes the length and checksum fields agree with the rest of the file again, so that a test
// reaches the part of the decoder it means to.
void Reseal(std::string* file) {
  SetLe(file->size() - kHeader, 8, kLength, file);
  uint32_t crc = Crc32(0, file->data(), kCrc);
  crc = Crc32(crc, file->data() + kHeader, file->size() - kHeader);
  SetLe(crc, 4, kCrc, file);
}

// A sealed version-1.0 file around a hand-written payload.
std::string FileWithPayload(const std::string& payload) {
  std::string file = "NRTSIMNF";
  PutLe(1, 2, &file);
  PutLe(0, 2, &file);
  PutU32(0, &file);
  PutU64(0, &file);
  PutU32(0, &file);
  file += payload;
  Reseal(&file);
  return file;
}

// The payload of kSmallest, field by field: a hand-written reference for the layout.
std::string SmallestPayload() {
  std::string p;
  PutString("s", &p);
  PutU32(2, &p);  // tensors
  PutString("x", &p);
  PutU8(0, &p), PutU8(NRT_DTYPE_FLOAT32, &p), PutU8(0, &p);  // input, fp32, rank 0
  PutString("y", &p);
  PutU8(1, &p), PutU8(NRT_DTYPE_FLOAT32, &p), PutU8(0, &p);  // output, fp32, rank 0
  PutU32(1, &p);                                             // ops
  PutU8(13, &p), PutU8(1, &p), PutU32(0, &p);                // copy, 1 input: tensor 0
  PutU32(1, &p);                                             // output: tensor 1
  PutU32(0, &p);                                             // scalar 0.0f
  PutU32(0xFFFFFFFFu, &p);                                   // axis -1
  return p;
}

void ExpectSameModel(const Model& a, const Model& b) {
  EXPECT_EQ(a.name, b.name);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    SCOPED_TRACE(a.tensors[i].name);
    EXPECT_EQ(a.tensors[i].name, b.tensors[i].name);
    EXPECT_EQ(a.tensors[i].kind, b.tensors[i].kind);
    EXPECT_EQ(a.tensors[i].dtype, b.tensors[i].dtype);
    EXPECT_EQ(a.tensors[i].shape, b.tensors[i].shape);
    EXPECT_EQ(a.tensors[i].data, b.tensors[i].data);
  }
  ASSERT_EQ(a.ops.size(), b.ops.size());
  for (size_t i = 0; i < a.ops.size(); ++i) {
    EXPECT_EQ(a.ops[i].kind, b.ops[i].kind);
    EXPECT_EQ(a.ops[i].inputs, b.ops[i].inputs);
    EXPECT_EQ(a.ops[i].output, b.ops[i].output);
    EXPECT_EQ(a.ops[i].scalar, b.ops[i].scalar);
    EXPECT_EQ(a.ops[i].axis, b.ops[i].axis);
  }
}

TEST(Crc32Test, IsTheIeeeCrc) {
  EXPECT_EQ(Crc32(0, "", 0), 0u);
  EXPECT_EQ(Crc32(0, "123456789", 9), 0xCBF43926u);
  EXPECT_EQ(Crc32(Crc32(0, "1234", 4), "56789", 5), 0xCBF43926u);
}

TEST(ModelFormatTest, RoundTripsModels) {
  for (const char* text : {kRmsNorm, kAttentionish, kLibrary, kReluLayer, kCollective, kSmallest}) {
    const Model model = Parse(text);
    SCOPED_TRACE(model.name);
    const std::string file = EncodeModel(model);
    absl::StatusOr<Model> decoded = DecodeModel(file.data(), file.size());
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    ExpectSameModel(model, *decoded);
    EXPECT_EQ(EncodeModel(*decoded), file);
  }
}

TEST(ModelFormatTest, WritesTheDocumentedLayout) {
  EXPECT_EQ(Compile(kSmallest), FileWithPayload(SmallestPayload()));
  const std::string file = Compile(kRmsNorm);
  EXPECT_EQ(file.substr(0, 12), std::string("NRTSIMNF\x01\x00\x00\x00", 12));
}

TEST(ModelFormatTest, RejectsEveryTruncation) {
  const std::string file = Compile(kAttentionish);
  for (size_t size = 0; size < file.size(); ++size) {
    absl::Status status = DecodeModel(file.data(), size).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << size << ": " << status;
    EXPECT_THAT(std::string(status.message()), StartsWith("model file: ")) << size;
  }
  EXPECT_THAT(std::string(DecodeModel(nullptr, 0).status().message()),
              HasSubstr("model file: truncated: 0 bytes, the header alone is 28"));
  EXPECT_THAT(std::string(DecodeModel(file.data(), 100).status().message()),
              HasSubstr("model file: header says"));
}

TEST(ModelFormatTest, RejectsAnyFlippedByte) {
  const std::string file = Compile(kAttentionish);
  for (size_t i = 0; i < file.size(); ++i) {
    for (uint8_t mask : {0x01, 0x80, 0xFF}) {
      std::string bad = file;
      bad[i] = static_cast<char>(bad[i] ^ mask);
      EXPECT_FALSE(Decode(bad).ok()) << "byte " << i << " ^ " << int{mask};
    }
  }
  std::string bad = file;
  bad[kHeader + 3] ^= 1;
  EXPECT_EQ(Decode(bad),
            absl::InvalidArgumentError("model file: checksum mismatch: the file is corrupt"));
  bad = file;
  bad[kMinor] ^= 1;  // the header is covered as well as the payload
  EXPECT_EQ(Decode(bad),
            absl::InvalidArgumentError("model file: checksum mismatch: the file is corrupt"));
}

TEST(ModelFormatTest, RejectsBadMagic) {
  std::string file = Compile(kRmsNorm);
  file[0] = 'X';
  EXPECT_EQ(Decode(file),
            absl::InvalidArgumentError("model file: bad magic: not a simulator model file"));
  EXPECT_EQ(Decode("not a model file at all, but long enough to hold a header"),
            absl::InvalidArgumentError("model file: bad magic: not a simulator model file"));
}

TEST(ModelFormatTest, RejectsOtherMajorVersions) {
  std::string file = Compile(kRmsNorm);
  SetLe(2, 2, kMajor, &file);
  SetLe(7, 2, kMinor, &file);
  EXPECT_EQ(Decode(file), absl::FailedPreconditionError(
                              "model file: format version 2.7 is not supported (this runtime "
                              "reads 1.x)"));
  SetLe(0, 2, kMajor, &file);
  EXPECT_EQ(Decode(file).code(), absl::StatusCode::kFailedPrecondition);
  // The version is judged before the rest of the header, which a new major may change.
  EXPECT_EQ(Decode(file.substr(0, 12)).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ModelFormatTest, NewerMinorVersionsMayAppendAfterTheOpList) {
  std::string file = Compile(kRmsNorm);
  file += "future fields";
  SetLe(1, 2, kMinor, &file);
  Reseal(&file);
  absl::StatusOr<Model> model = DecodeModel(file.data(), file.size());
  ASSERT_TRUE(model.ok()) << model.status();
  ExpectSameModel(*model, Parse(kRmsNorm));

  SetLe(0, 2, kMinor, &file);  // a 1.0 file has nothing after the op list
  Reseal(&file);
  EXPECT_EQ(Decode(file),
            absl::InvalidArgumentError("model file: 13 unexpected bytes after the op list"));
}

TEST(ModelFormatTest, RejectsBytesAfterThePayload) {
  const std::string file = Compile(kRmsNorm) + "x";
  EXPECT_THAT(std::string(Decode(file).message()), HasSubstr("payload bytes, the file has"));
}

TEST(ModelFormatTest, RejectsFlags) {
  std::string file = Compile(kRmsNorm);
  SetLe(0x10, 4, kFlags, &file);
  Reseal(&file);
  EXPECT_EQ(Decode(file), absl::InvalidArgumentError("model file: unknown flags 0x10"));
}

// Counts and lengths that claim more than the file holds, with a correct checksum: each is
// refused before it sizes an allocation (under ASan a gigabyte allocation would also show).
TEST(ModelFormatTest, RejectsHostileCountsQuickly) {
  std::string p;
  PutString("s", &p);
  PutU32(0xFFFFFFFFu, &p);
  EXPECT_EQ(Decode(FileWithPayload(p)),
            absl::InvalidArgumentError(
                "model file: tensor count 4294967295 cannot fit in the remaining 0 bytes"));

  p.clear();
  PutU32(0xFFFFFFFFu, &p);
  p += "s";
  EXPECT_EQ(Decode(FileWithPayload(p)),
            absl::InvalidArgumentError(
                "model file: model name length 4294967295 exceeds the remaining 1 bytes"));

  p = SmallestPayload();
  p.resize(p.size() - 22);  // drop the op count and the op
  PutU32(0x7FFFFFFFu, &p);
  PutU8(13, &p);
  EXPECT_THAT(std::string(Decode(FileWithPayload(p)).message()),
              HasSubstr("op count 2147483647 cannot fit in the remaining 1 bytes"));

  p.clear();
  PutString("s", &p);
  PutU32(1, &p);
  PutString("c", &p);
  PutU8(3, &p), PutU8(NRT_DTYPE_FLOAT32, &p), PutU8(0, &p);  // constant, fp32, scalar
  PutU64(uint64_t{1} << 62, &p);
  PutU32(0, &p);
  EXPECT_THAT(std::string(Decode(FileWithPayload(p)).message()),
              HasSubstr("tensor 0: data length 4611686018427387904 exceeds the remaining 4"));
}

TEST(ModelFormatTest, RejectsTruncatedFieldsInsideTheTensorsAndOps) {
  std::string p;
  PutString("s", &p);
  PutU32(1, &p);
  PutString("x", &p);
  PutU8(0, &p), PutU8(NRT_DTYPE_FLOAT32, &p), PutU8(255, &p);  // rank 255, no dims
  EXPECT_EQ(Decode(FileWithPayload(p)),
            absl::InvalidArgumentError("model file: payload ends inside tensor 0"));

  p = SmallestPayload();
  p.resize(p.size() - 12);  // the op stops after its first input
  PutU8(0, &p), PutU8(0, &p), PutU8(0, &p), PutU8(0, &p);
  PutU8(0, &p), PutU8(0, &p), PutU8(0, &p), PutU8(0, &p);
  PutU8(0, &p), PutU8(0, &p), PutU8(0, &p);
  EXPECT_EQ(Decode(FileWithPayload(p)),
            absl::InvalidArgumentError("model file: payload ends inside op 0"));
}

TEST(ModelFormatTest, RejectsUnknownEnumValues) {
  const std::string good = SmallestPayload();
  const size_t x_kind = 4 + 1 + 4 + 4 + 1;  // name "s", tensor count, name "x"
  std::string p = good;
  p[x_kind] = 4;
  EXPECT_EQ(Decode(FileWithPayload(p)),
            absl::InvalidArgumentError("model file: tensor 0: unknown tensor kind 4"));
  p = good;
  p[x_kind + 1] = NRT_DTYPE_FLOAT16;
  EXPECT_EQ(Decode(FileWithPayload(p)),
            absl::InvalidArgumentError("model file: tensor 0: unknown dtype 7"));
  p = good;
  p[p.size() - 18] = 0;
  EXPECT_EQ(Decode(FileWithPayload(p)),
            absl::InvalidArgumentError("model file: op 0: unknown op kind 0"));
  p[p.size() - 18] = 19;  // one past the last op of the library (all_reduce, 18)
  EXPECT_EQ(Decode(FileWithPayload(p)),
            absl::InvalidArgumentError("model file: op 0: unknown op kind 19"));
}

TEST(ModelFormatTest, RejectsModelsThatFailValidation) {
  Model model = Parse(kRmsNorm);
  model.tensors[1].shape = {3};  // weight no longer broadcasts against [4,512]
  EXPECT_EQ(Decode(EncodeModel(model)),
            absl::InvalidArgumentError(
                "model file: op 5 (mul): shapes [4,512] and [3] do not broadcast"));

  std::string p = SmallestPayload();
  p[p.size() - 12] = 5;  // copy's output is now tensor 5 of 2
  EXPECT_EQ(Decode(FileWithPayload(p)),
            absl::InvalidArgumentError("model file: op 0 (copy): output is tensor 5, model has 2"));
}

}  // namespace
}  // namespace nrtsim
