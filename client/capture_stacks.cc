#include "client/capture_stacks.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/trace_merge.h"
#include "trace/trace_from_pftrace.h"

namespace nrtprof::cli {
namespace {

// Both forms: `owned` is `read` when the caller gives its packets up, each part's packets then
// given back as soon as its Trace is rebuilt (TraceFromPerfetto(ReadTrace&&)).
absl::Status AddStacks(const daemon::ReadTrace& read, daemon::ReadTrace* owned,
                       const std::string& path, daemon::StackProfile* profile) {
  auto add = [&](const daemon::ReadTrace& part, daemon::ReadTrace* owned_part,
                 const std::string& host) -> absl::Status {
    absl::StatusOr<daemon::Trace> trace = owned_part != nullptr
                                              ? daemon::TraceFromPerfetto(std::move(*owned_part))
                                              : daemon::TraceFromPerfetto(part);
    if (!trace.ok()) {
      return absl::DataLossError(absl::StrCat(path, " is not laid out as nrtprof writes it (",
                                              host.empty() ? "" : absl::StrCat("host ", host, ": "),
                                              trace.status().message(), ")"));
    }
    // What is left of the packets (the counters) is not needed for the stacks either.
    if (owned_part != nullptr) *owned_part = daemon::ReadTrace();
    profile->Add(*trace, host);
    return absl::OkStatus();
  };
  std::vector<MergedHost> parts = SplitMergedTrace(read);
  if (parts.empty()) return add(read, owned, "");
  if (owned != nullptr) *owned = daemon::ReadTrace();  // the parts hold what they need
  for (MergedHost& part : parts) {
    if (absl::Status added = add(part.read, owned != nullptr ? &part.read : nullptr, part.host);
        !added.ok()) {
      return added;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AddCaptureStacks(const daemon::ReadTrace& read, const std::string& path,
                              daemon::StackProfile* profile) {
  return AddStacks(read, nullptr, path, profile);
}

absl::Status AddCaptureStacks(daemon::ReadTrace&& read, const std::string& path,
                              daemon::StackProfile* profile) {
  return AddStacks(read, &read, path, profile);
}

}  // namespace nrtprof::cli
