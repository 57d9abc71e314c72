#include "trace/api_function.h"

#include <string>
#include <unordered_map>

#include "common/api_functions.h"

namespace nrtprof::daemon {

nrtprof::ApiFunction CallFunction(nrtprof::ApiFunction wire, const std::string& name) {
  if (wire != nrtprof::API_FUNCTION_UNSPECIFIED) return wire;
#define NRTPROF_BY_NAME(enumerator, function, wire_enumerator, number) \
  {#function, nrtprof::wire_enumerator},
  static const auto* const kByName =
      new std::unordered_map<std::string, nrtprof::ApiFunction>{
          NRTPROF_RECORDED_API_FUNCTIONS(NRTPROF_BY_NAME)};
#undef NRTPROF_BY_NAME
  auto it = kByName->find(name);
  return it == kByName->end() ? nrtprof::API_FUNCTION_UNSPECIFIED : it->second;
}

}  // namespace nrtprof::daemon
