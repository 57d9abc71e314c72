#include "client/capture_stacks.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "client/trace_merge.h"
#include "trace/trace_from_pftrace.h"

namespace nrtprof::cli {

absl::Status AddCaptureStacks(const daemon::ReadTrace& read, const std::string& path,
                              daemon::StackProfile* profile) {
  auto add = [&](const daemon::ReadTrace& part, const std::string& host) -> absl::Status {
    absl::StatusOr<daemon::Trace> trace = daemon::TraceFromPerfetto(part);
    if (!trace.ok()) {
      return absl::DataLossError(absl::StrCat(path, " is not laid out as nrtprof writes it (",
                                              host.empty() ? "" : absl::StrCat("host ", host, ": "),
                                              trace.status().message(), ")"));
    }
    profile->Add(*trace, host);
    return absl::OkStatus();
  };
  const std::vector<MergedHost> parts = SplitMergedTrace(read);
  if (parts.empty()) return add(read, "");
  for (const MergedHost& part : parts) {
    if (absl::Status added = add(part.read, part.host); !added.ok()) return added;
  }
  return absl::OkStatus();
}

}  // namespace nrtprof::cli
