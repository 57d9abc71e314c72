// nrt_model_compile: compiles a model text description (docs/model_format.md, "Text form") into
// a model file that nrt_load() accepts, as neuronx-cc would produce a NEFF.
//
//   nrt_model_compile IN.txt OUT.neff     (IN may be '-' for stdin)
//
// The output appears atomically: it is written to OUT.tmp.PID and renamed, so a reader never
// sees half a file and a failed run leaves any previous OUT in place. Exit status: 0 on
// success, 1 on an error (one line on stderr), 2 on a usage error.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "sim/model_format.h"
#include "sim/model_text.h"

namespace nrtsim {
namespace {

constexpr char kUsage[] =
    "usage: nrt_model_compile IN.txt OUT.neff\n"
    "Compiles a model text description into a simulator model file.\n"
    "IN may be '-' to read standard input. See docs/model_format.md.\n";

absl::StatusOr<std::string> ReadInput(const std::string& path) {
  std::ostringstream text;
  if (path == "-") {
    text << std::cin.rdbuf();
    if (std::cin.bad()) return absl::UnavailableError("cannot read standard input");
    return text.str();
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": ", std::strerror(errno)));
  text << in.rdbuf();
  if (in.bad()) return absl::UnavailableError(absl::StrCat(path, ": read failed"));
  return text.str();
}

absl::Status WriteAll(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::UnavailableError(std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// Writes `bytes` to a temporary file beside `path` and renames it over `path`.
absl::Status WriteAtomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::UnavailableError(absl::StrCat(tmp, ": ", std::strerror(errno)));
  absl::Status status = WriteAll(fd, bytes);
  if (status.ok() && fsync(fd) != 0) status = absl::UnavailableError(std::strerror(errno));
  if (close(fd) != 0 && status.ok()) status = absl::UnavailableError(std::strerror(errno));
  if (status.ok() && rename(tmp.c_str(), path.c_str()) != 0) {
    status = absl::UnavailableError(std::strerror(errno));
  }
  if (!status.ok()) {
    unlink(tmp.c_str());
    return absl::UnavailableError(absl::StrCat(path, ": ", status.message()));
  }
  return absl::OkStatus();
}

std::string Plural(size_t n, const char* noun) {
  return absl::StrCat(n, " ", noun, n == 1 ? "" : "s");
}

// Compiles `in` to `out` and returns the one-line summary to print.
absl::StatusOr<std::string> Compile(const std::string& in, const std::string& out) {
  absl::StatusOr<std::string> text = ReadInput(in);
  if (!text.ok()) return text.status();
  absl::StatusOr<Model> model = ParseModelText(*text);
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        absl::StrCat(in == "-" ? "<stdin>" : in, ": ", model.status().message()));
  }
  const std::string bytes = EncodeModel(*model);
  absl::Status status = WriteAtomically(out, bytes);
  if (!status.ok()) return status;
  return absl::StrCat("wrote ", out, ": model ", model->name, ", ",
                      Plural(model->InputIndices().size(), "input"), ", ",
                      Plural(model->OutputIndices().size(), "output"), ", ",
                      Plural(model->ops.size(), "op"), ", ", bytes.size(), " bytes");
}

int CompileMain(int argc, char** argv) {
  if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::cout << kUsage;
    return 0;
  }
  if (argc != 3) {
    std::cerr << kUsage;
    return 2;
  }
  absl::StatusOr<std::string> summary = Compile(argv[1], argv[2]);
  if (!summary.ok()) {
    std::cerr << "nrt_model_compile: " << summary.status().message() << "\n";
    return 1;
  }
  std::cout << *summary << "\n";
  return 0;
}

}  // namespace
}  // namespace nrtsim

int main(int argc, char** argv) { return nrtsim::CompileMain(argc, argv); }
