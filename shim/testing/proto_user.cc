// A program that has nrtprof.proto in protobuf's generated pool itself (as the CLI and the
// daemon do) and uses libnrt: under the shim it must run as without it.
#include <cstdio>

#include "nrt/nrt.h"
#include "proto/nrtprof.pb.h"

int main() {
  nrtprof::Event event;
  event.set_kind(nrtprof::EVENT_API_CALL);
  if (nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") != NRT_SUCCESS) return 1;
  nrt_close();
  printf("proto user: %s ok\n", nrtprof::EventKind_Name(event.kind()).c_str());
  return 0;
}
