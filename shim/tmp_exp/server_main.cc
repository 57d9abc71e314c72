#include "shim/testing/fake_collector.h"
#include <cstdio>
#include <thread>
int main(int argc, char** argv) {
  nrtprof::shim::testing::FakeCollector c(argv[1], {});
  fprintf(stderr, "listening\n");
  std::this_thread::sleep_for(std::chrono::seconds(atoi(argv[2])));
  for (auto& s : c.streams()) {
    printf("stream pid=%u messages=%zu done=%d final=%d\n", s.hello() ? s.hello()->pid() : 0, s.messages.size(), s.done, s.last_batch() ? s.last_batch()->final() : -1);
  }
}
