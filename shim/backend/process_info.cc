#include "shim/backend/process_info.h"

#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/clock.h"
#include "shim/preload/core_state.h"
#include "shim/backend/utf8.h"

namespace nrtprof::shim {
namespace {

std::string ReadFile(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

std::vector<std::string> SplitCommandLine(const std::string& cmdline) {
  std::vector<std::string> args;
  size_t start = 0;
  while (start < cmdline.size()) {
    size_t end = cmdline.find('\0', start);
    if (end == std::string::npos) end = cmdline.size();
    args.push_back(SanitizeUtf8(std::string_view(cmdline).substr(start, end - start)));
    start = end + 1;
  }
  return args;
}

std::string TruncateForHello(std::string s, size_t max_bytes) {
  if (s.size() <= max_bytes) return s;
  constexpr size_t kMarkerBytes = sizeof(kTruncatedMarker) - 1;
  if (max_bytes < kMarkerBytes) return std::string(kTruncatedMarker, 0, max_bytes);
  s.resize(TrimIncompleteUtf8Tail(std::string_view(s).substr(0, max_bytes - kMarkerBytes)).size());
  s += kTruncatedMarker;
  return s;
}

std::vector<std::string> FitCommandLine(std::vector<std::string> args) {
  size_t bytes = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    if (bytes + args[i].size() + 1 <= kMaxCommandLineBytes) {
      bytes += args[i].size() + 1;
      continue;
    }
    // This argument is cut to what is left (at least the marker, in place of a kept one if
    // need be) and the rest go.
    size_t keep = i;
    while (keep > 0 && kMaxCommandLineBytes - bytes < sizeof(kTruncatedMarker)) {
      bytes -= args[--keep].size() + 1;
    }
    args[keep] = TruncateForHello(std::move(args[keep]), kMaxCommandLineBytes - bytes - 1);
    args.resize(keep + 1);
    break;
  }
  return args;
}

uint64_t ProcessStartRealtimeNs(const std::string& proc_stat, long clock_ticks_per_second,
                                uint64_t realtime_now_ns, uint64_t boottime_now_ns) {
  // Field 2 (comm) is in parentheses and may hold spaces: count fields after the last ')'.
  const size_t paren = proc_stat.rfind(')');
  if (paren == std::string::npos || clock_ticks_per_second <= 0) return 0;
  std::istringstream fields(proc_stat.substr(paren + 1));
  std::string field;
  // After comm: state is field 3, starttime is field 22.
  for (int i = 3; i <= 22; ++i) {
    if (!(fields >> field)) return 0;
  }
  const uint64_t ticks = strtoull(field.c_str(), nullptr, 10);
  const uint64_t since_boot_ns =
      ticks / static_cast<uint64_t>(clock_ticks_per_second) * 1000000000ull +
      ticks % static_cast<uint64_t>(clock_ticks_per_second) * 1000000000ull /
          static_cast<uint64_t>(clock_ticks_per_second);
  if (realtime_now_ns < boottime_now_ns) return 0;
  return realtime_now_ns - boottime_now_ns + since_boot_ns;
}

nrtprof::Hello BuildHello(const Config& config) {
  nrtprof::Hello hello;
  char host[HOST_NAME_MAX + 1] = {};
  // Sanitizing may lengthen a string (U+FFFD for each invalid byte): cut after it.
  auto fit = [](std::string_view s) {
    return TruncateForHello(SanitizeUtf8(s), kMaxHelloStringBytes);
  };
  if (gethostname(host, sizeof(host) - 1) == 0) hello.set_host(fit(host));
  hello.set_boot_id(fit(Trim(ReadFile("/proc/sys/kernel/random/boot_id"))));
  hello.set_pid(static_cast<uint32_t>(getpid()));
  hello.set_ppid(static_cast<uint32_t>(getppid()));
  hello.set_process_start_ns(ProcessStartRealtimeNs(ReadFile("/proc/self/stat"),
                                                    sysconf(_SC_CLK_TCK), RealtimeNs(),
                                                    ClockNs(CLOCK_BOOTTIME)));
  char exe[PATH_MAX + 1] = {};
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) hello.set_executable(fit(std::string_view(exe, static_cast<size_t>(n))));
  for (std::string& arg : FitCommandLine(SplitCommandLine(ReadFile("/proc/self/cmdline")))) {
    hello.add_command_line(std::move(arg));
  }
  hello.set_shim_version(kShimVersion);
  hello.mutable_clock()->set_monotonic_ns(MonotonicNs());
  hello.mutable_clock()->set_realtime_ns(RealtimeNs());
  hello.set_capture_id(fit(config.capture_id));
  hello.set_job(config.job);  // printable ASCII, at most kMaxJobBytes (config.h)
  if (config.rank >= 0) hello.set_rank(config.rank);
  hello.set_batch_age_ms(std::max(config.batch_ms, config.recorder_batch_ms));
  // The flusher says best effort instead if the spool file could not be made.
  hello.set_mode(config.requested_mode == ShimMode::kLossless ? nrtprof::MODE_LOSSLESS
                                                              : nrtprof::MODE_BEST_EFFORT);
  return hello;
}

}  // namespace nrtprof::shim
