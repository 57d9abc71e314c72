// libFuzzer target: the shim's reader of the runtime's device profile
// (shim/backend/device_profile_reader.h). Any bytes must be refused with a one-line reason, or read
// into ops and transfers that make sense: a name, an engine for an op, a tensor for a
// transfer, a core the wire can carry. A crash, a sanitizer report, or an output breaking
// those rules is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "shim/backend/device_profile_reader.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "device_profile_fuzzer: %s\n", what);
    abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using nrtprof::shim::DeviceProfileEntry;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  nrtprof::shim::DeviceProfileReadStats stats;
  std::string error;
  uint64_t entries = 0;
  const bool ok = nrtprof::shim::ReadDeviceProfile(
      text,
      [&](const DeviceProfileEntry& e) {
        ++entries;
        Check(!e.name.empty(), "an entry without a name");
        Check(e.nc_idx < 4096, "a core out of the wire's range");
        if (e.kind == DeviceProfileEntry::Kind::kOp) {
          Check(e.tensor.empty() && e.bytes == 0, "an op with a transfer's members");
        } else {
          Check(e.engine.empty(), "a transfer with an engine");
        }
      },
      &stats, &error);
  Check(entries == stats.entries, "entries handed out and counted differ");
  if (!ok) {
    Check(!error.empty() && error.find('\n') == std::string::npos, "refused without one line");
    Check(nrtprof::shim::CountProfileEntries(text) >= 1, "a refused profile counted nothing");
  } else {
    Check(nrtprof::shim::LooksLikeJson(text), "read what does not look like JSON");
  }
  return 0;
}
