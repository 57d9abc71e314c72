#include "device_config.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace nrtsim {
namespace {

// A process drives at most this many cores (its asynchronous queues and the system trace's
// core filters are sized for it); the machine may have more (NRT_SIM_NUM_CORES up to 128).
constexpr uint32_t kMaxProcessCores = 64;
constexpr uint32_t kMaxMachineCores = 128;

// "0-3", "5", "4,6", "0-1,4": the machine's cores, in increasing order, each once.
absl::Status ParseVisibleCores(const char* value, uint32_t machine_cores,
                               std::vector<uint32_t>* cores) {
  const auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("NEURON_RT_VISIBLE_CORES='", value, "' ",
                                                   why, " (the machine has ", machine_cores,
                                                   " NeuronCores, NRT_SIM_NUM_CORES)"));
  };
  std::vector<bool> seen(machine_cores, false);
  cores->clear();
  for (absl::string_view part : absl::StrSplit(value, ',')) {
    std::vector<absl::string_view> ends = absl::StrSplit(part, absl::MaxSplits('-', 1));
    uint32_t first = 0, last = 0;
    if (!absl::SimpleAtoi(ends[0], &first) ||
        !absl::SimpleAtoi(ends.size() == 2 ? ends[1] : ends[0], &last) || last < first) {
      return bad("is not a list of core numbers and ranges such as 0-3,5");
    }
    if (last >= machine_cores) return bad(absl::StrCat("names core ", last));
    for (uint32_t c = first; c <= last; ++c) {
      if (seen[c]) return bad(absl::StrCat("names core ", c, " twice"));
      seen[c] = true;
    }
  }
  for (uint32_t c = 0; c < machine_cores; ++c) {
    if (seen[c]) cores->push_back(c);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DeviceConfig> DeviceConfig::FromEnvironment() {
  DeviceConfig config;
  if (const char* cores = std::getenv("NRT_SIM_NUM_CORES"); cores != nullptr) {
    uint32_t n = 0;
    if (!absl::SimpleAtoi(cores, &n) || n < 1 || n > kMaxMachineCores) {
      return absl::InvalidArgumentError(absl::StrCat(
          "NRT_SIM_NUM_CORES='", cores, "' is not a whole number from 1 to ", kMaxMachineCores));
    }
    config.machine_cores = n;
  }
  config.visible_cores.clear();
  if (const char* visible = std::getenv("NEURON_RT_VISIBLE_CORES");
      visible != nullptr && visible[0] != '\0') {
    absl::Status s = ParseVisibleCores(visible, config.machine_cores, &config.visible_cores);
    if (!s.ok()) return s;
  } else {
    for (uint32_t c = 0; c < config.machine_cores; ++c) config.visible_cores.push_back(c);
  }
  if (const char* num = std::getenv("NEURON_RT_NUM_CORES"); num != nullptr && num[0] != '\0') {
    uint32_t n = 0;
    if (!absl::SimpleAtoi(num, &n) || n < 1 || n > config.visible_cores.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("NEURON_RT_NUM_CORES='", num, "' is not a whole number from 1 to ",
                       config.visible_cores.size(), " (the NeuronCores visible)"));
    }
    config.visible_cores.resize(n);
  }
  if (config.visible_cores.size() > kMaxProcessCores) {
    return absl::InvalidArgumentError(absl::StrCat(
        config.visible_cores.size(), " NeuronCores visible: a process of the simulated runtime "
        "drives at most ", kMaxProcessCores, "; set NEURON_RT_VISIBLE_CORES or "
        "NEURON_RT_NUM_CORES"));
  }
  config.num_cores = static_cast<uint32_t>(config.visible_cores.size());
  if (const char* scale = std::getenv("NRT_SIM_TIME_SCALE"); scale != nullptr) {
    double s = 0;
    if (!absl::SimpleAtod(scale, &s) || !std::isfinite(s) || s < 0 || s > 1000) {
      return absl::InvalidArgumentError(
          absl::StrCat("NRT_SIM_TIME_SCALE='", scale, "' is not a number from 0 to 1000"));
    }
    config.time_scale = s;
  }
  return config;
}

}  // namespace nrtsim
