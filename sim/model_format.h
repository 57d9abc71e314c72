// The simulator's model file (its NEFF): a versioned, checksummed, little-endian encoding of a
// Model. The layout, versioning rules and limits are in docs/model_format.md.
//
// EncodeModel() is what nrt_model_compile writes; DecodeModel() is what nrt_load() reads. The
// bytes given to nrt_load() come from the application, so DecodeModel() treats them as hostile:
// it never reads outside them, allocates at most a small multiple of their size, and runs in
// time linear in their size. All functions are stateless and thread-safe.
//
// Layout in brief: a 28-byte header (magic "NRTSIMNF", u16 major, u16 minor, u32 flags,
// u64 payload length, u32 CRC-32 of the header's first 24 bytes and the payload), then the
// payload (model name, tensors, ops).
#ifndef NRTPROF_SIM_MODEL_FORMAT_H_
#define NRTPROF_SIM_MODEL_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "model.h"

namespace nrtsim {

// The version this code writes. It reads any 1.x file: a minor bump may only append fields
// after the op list, which a 1.0 reader skips (docs/model_format.md, "Versioning").
inline constexpr uint16_t kModelFormatMajor = 1;
inline constexpr uint16_t kModelFormatMinor = 0;

// The file's encoding of `model`, which must be valid (ValidateModel() returns OK).
std::string EncodeModel(const Model& model);

// Decodes a model file and validates the result with ValidateModel().
// Errors, each one line:
//   InvalidArgument("model file: <reason>") for malformed, truncated or corrupt bytes and for a
//     model that fails validation;
//   FailedPrecondition("model file: format version X.Y is not supported (this runtime reads
//     1.x)") for a file of another major version.
absl::StatusOr<Model> DecodeModel(const void* data, size_t size);

// The file's checksum: zlib's crc32() (CRC-32, IEEE 802.3) of [data, data + size), continuing
// from `crc` (0 to start): Crc32(Crc32(0, a), b) is the CRC of a followed by b. Exposed for
// tools and tests that build files by hand, so they need not include zlib themselves.
uint32_t Crc32(uint32_t crc, const void* data, size_t size);

}  // namespace nrtsim

#endif  // NRTPROF_SIM_MODEL_FORMAT_H_
