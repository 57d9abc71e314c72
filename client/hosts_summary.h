// The summary of a capture across hosts, for `nrtprof capture --hosts`: the hosts' own
// summaries (each host's summary.json) added up row by row (by name) into one overall table,
// then each host's table under its name. What a host dropped or could not record stays in its
// own table and is added up in the overall one.
//
// Pure functions: thread-safe.
#ifndef NRTPROF_CLIENT_HOSTS_SUMMARY_H_
#define NRTPROF_CLIENT_HOSTS_SUMMARY_H_

#include <string>
#include <vector>

#include "trace/summary.h"

namespace nrtprof::cli {

struct HostSummary {
  std::string host;  // as the user named it
  daemon::Summary summary;
};

// Every row of the same name summed across hosts, with the totals, drops and notices (each
// notice prefixed with its host), under the header of them all: every host's processes (each
// with the host as the user named it, in place of what its shim said), their events added up,
// and the window from the earliest host's first event to the latest one's last, each on its own
// host's wall clock as that host's summary states it (so that the union can be checked against
// the hosts' own headers). A host that knows no wall clock for its events leaves the start
// unknown (0) and the window the longest of the hosts'.
daemon::Summary MergeSummaries(const std::string& capture_id,
                               const std::vector<HostSummary>& hosts);

// "Overall (N hosts)" and the overall table, then "Host HOST" and its table for each host.
std::string FormatHostsSummary(const daemon::Summary& overall,
                               const std::vector<HostSummary>& hosts);

}  // namespace nrtprof::cli

#endif  // NRTPROF_CLIENT_HOSTS_SUMMARY_H_
