#include "trace/trace_name.h"

#include <cstdint>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"

namespace nrtprof::daemon {

Name NameTable::Intern(std::string_view text) {
  if (text.empty()) return Name();
  auto it = by_text_.find(text);
  if (it != by_text_.end()) return Name(it->second);
  const std::string* kept = &texts_.emplace_back(text);
  by_text_.emplace(*kept, kept);
  return Name(kept);
}

Name Name::Literal(std::string_view text) {
  // Never destroyed: a Name of a literal may be read by any thread until the process ends.
  static absl::Mutex* const mu = new absl::Mutex();
  static NameTable* const literals = new NameTable();
  absl::MutexLock lock(mu);
  return literals->Intern(text);
}

const std::string& Name::Empty() {
  static const std::string* const empty = new std::string();
  return *empty;
}

std::string ModelHash(absl::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64 offset basis
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;  // FNV-1a 64 prime
  }
  return absl::StrFormat("%016x", h);
}

}  // namespace nrtprof::daemon
