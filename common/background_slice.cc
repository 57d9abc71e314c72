#include "common/background_slice.h"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace nrtprof {
namespace {

// struct sched_attr of <linux/sched/types.h> as of SCHED_ATTR_SIZE_VER0 (48 bytes); glibc
// before 2.41 declares neither it nor the system calls.
struct SchedAttr {
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime;  // for SCHED_OTHER and SCHED_BATCH: the custom slice (Linux 6.12+)
  uint64_t sched_deadline;
  uint64_t sched_period;
};
static_assert(sizeof(SchedAttr) == 48, "SCHED_ATTR_SIZE_VER0");

}  // namespace

bool UseBackgroundSlice() {
  SchedAttr attr = {};
  if (syscall(SYS_sched_getattr, 0, &attr, sizeof(attr), 0) != 0) return false;
  if (attr.sched_policy != SCHED_OTHER && attr.sched_policy != SCHED_BATCH) return false;
  // The same policy and nice value, read just now; only the slice changes.
  attr.size = sizeof(attr);
  attr.sched_flags = 0;
  attr.sched_runtime = kBackgroundSliceNs;
  return syscall(SYS_sched_setattr, 0, &attr, 0) == 0;
}

}  // namespace nrtprof
