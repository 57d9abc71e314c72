#include "device_config.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace nrtsim {

absl::StatusOr<DeviceConfig> DeviceConfig::FromEnvironment() {
  DeviceConfig config;
  if (const char* cores = std::getenv("NRT_SIM_NUM_CORES"); cores != nullptr) {
    uint32_t n = 0;
    if (!absl::SimpleAtoi(cores, &n) || n < 1 || n > 64) {
      return absl::InvalidArgumentError(
          absl::StrCat("NRT_SIM_NUM_CORES='", cores, "' is not a whole number from 1 to 64"));
    }
    config.num_cores = n;
  }
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
