// The files TCP collection is secured with, read the same way by the daemon, the shim and the
// CLI: the bearer token every RPC on TCP carries, and the PEM files of TLS.
//
// A token file is refused when its group or others have any access to it (the rule ssh applies
// to private keys): a token others can read is no secret. Thread-safe; no state.
#ifndef NRTPROF_COMMON_CREDENTIAL_FILES_H_
#define NRTPROF_COMMON_CREDENTIAL_FILES_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace nrtprof {

inline constexpr size_t kMinTokenBytes = 16;
inline constexpr size_t kMaxTokenBytes = 4096;
inline constexpr size_t kMaxPemBytes = 1 << 20;

// A regular file of one line of at most 4096 bytes (a final "\n" or "\r\n" is allowed, and
// cut), mode 0600 or stricter: a password.
absl::StatusOr<std::string> ReadPrivateLine(const std::string& path, absl::string_view flag);

// A regular file of one line, 16 to 4096 visible ASCII characters (a final "\n" or "\r\n" is
// allowed), mode 0600 or stricter. `flag` names the setting in errors ("--token_file").
absl::StatusOr<std::string> ReadTokenFile(const std::string& path, absl::string_view flag);

// A PEM file (certificate chain, private key or CA bundle) of at most 1 MiB that holds a
// "-----BEGIN " block.
absl::StatusOr<std::string> ReadPemFile(const std::string& path, absl::string_view flag);

// Whether `presented` equals `expected`; how long it takes depends on expected's length only,
// so a caller that guesses learns nothing from the time a refusal takes.
bool ConstantTimeEquals(absl::string_view presented, absl::string_view expected);

}  // namespace nrtprof

#endif  // NRTPROF_COMMON_CREDENTIAL_FILES_H_
