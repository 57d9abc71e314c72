#include "common/credential_files.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace nrtprof {
namespace {

// The whole file, refused if it is not a regular file or larger than `max_bytes`. With
// `private_only`, refused if group or others have any access to it.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path, absl::string_view flag,
                                          size_t max_bytes, bool private_only) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat(flag, ": cannot read ", path, ": ", strerror(errno)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is not a regular file"));
  }
  if (private_only && (st.st_mode & 077) != 0) {
    close(fd);
    return absl::PermissionDeniedError(absl::StrFormat(
        "%s: %s is accessible by group or others (mode %04o); a token must be private: chmod "
        "600 %s",
        flag, path, st.st_mode & 07777, path));
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", path, " is larger than ", max_bytes, " bytes"));
  }
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) text.append(buf, static_cast<size_t>(n));
    if (text.size() > max_bytes) break;
  }
  close(fd);
  if (n < 0) {
    return absl::NotFoundError(absl::StrCat(flag, ": cannot read ", path, ": ", strerror(errno)));
  }
  if (text.size() > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", path, " is larger than ", max_bytes, " bytes"));
  }
  return text;
}

}  // namespace

absl::StatusOr<std::string> ReadPrivateLine(const std::string& path, absl::string_view flag) {
  absl::StatusOr<std::string> text =
      ReadSmallFile(path, flag, kMaxTokenBytes + 2, /*private_only=*/true);
  if (!text.ok()) return text.status();
  std::string line = *std::move(text);
  if (absl::EndsWith(line, "\n")) line.pop_back();
  if (absl::EndsWith(line, "\r")) line.pop_back();
  if (line.find('\n') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " must hold one line"));
  }
  return line;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path, absl::string_view flag) {
  absl::StatusOr<std::string> line = ReadPrivateLine(path, flag);
  if (!line.ok()) return line.status();
  const std::string token = *std::move(line);
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, ": ", path,
          " must hold one line of visible ASCII characters (no spaces, no second line)"));
    }
  }
  if (token.size() < kMinTokenBytes || token.size() > kMaxTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": the token in ", path, " has ", token.size(), " characters; it needs ",
                     kMinTokenBytes, " to ", kMaxTokenBytes, " (e.g. openssl rand -hex 32)"));
  }
  return token;
}

absl::StatusOr<std::string> ReadPemFile(const std::string& path, absl::string_view flag) {
  absl::StatusOr<std::string> text = ReadSmallFile(path, flag, kMaxPemBytes, false);
  if (!text.ok()) return text.status();
  if (!absl::StrContains(*text, "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is not a PEM file"));
  }
  return text;
}

bool ConstantTimeEquals(absl::string_view presented, absl::string_view expected) {
  // Every byte of `expected` is compared, whatever matched before; a length mismatch only
  // sets a bit. volatile keeps the compiler from ending the loop early.
  volatile unsigned char diff = presented.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char got = i < presented.size() ? static_cast<unsigned char>(presented[i]) : 0;
    diff = diff | (got ^ static_cast<unsigned char>(expected[i]));
  }
  return diff == 0;
}

}  // namespace nrtprof
