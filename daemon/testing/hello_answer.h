// What nrtprofd answers a shim's Hello with, checked the same way by every daemon test that
// speaks the Collector protocol by hand. Test-only.
#ifndef NRTPROF_DAEMON_TESTING_HELLO_ANSWER_H_
#define NRTPROF_DAEMON_TESTING_HELLO_ANSWER_H_

#include <cstdint>

#include "gtest/gtest.h"
#include "proto/nrtprof.pb.h"

namespace nrtprof::daemon::testing {

// Reads the answer to a Hello from `stream` (a gRPC client reader-writer): the CaptureControl,
// left in *reply, then an Ack of how far the daemon has the process (`stored`: 0 for a process
// it has not seen).
template <typename Stream>
void ReadHelloAnswer(Stream* stream, nrtprof::DaemonMessage* reply, uint64_t stored = 0) {
  nrtprof::DaemonMessage ack;
  ASSERT_TRUE(stream->Read(reply));
  ASSERT_TRUE(reply->has_control());
  ASSERT_TRUE(stream->Read(&ack));
  ASSERT_TRUE(ack.has_ack());
  EXPECT_EQ(ack.ack().sequence(), stored);
}

}  // namespace nrtprof::daemon::testing

#endif  // NRTPROF_DAEMON_TESTING_HELLO_ANSWER_H_
