// The room left under a process's limit on its address space (ulimit -v), read without
// allocating (the core calls it on a program thread's first libnrt call). Header-only: shared
// by the core and the backend.
#ifndef NRTPROF_SHIM_PRELOAD_ADDRESS_SPACE_H_
#define NRTPROF_SHIM_PRELOAD_ADDRESS_SPACE_H_

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>

namespace nrtprof::shim {

// False if the address space has no limit. Else true, with the limit and what it leaves free
// beside the mappings the process has now (VmSize in /proc/self/status; all of it if that cannot
// be read), in bytes.
inline bool AddressSpaceLimited(uint64_t* limit, uint64_t* free) {
  rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return false;
  *limit = rl.rlim_cur;
  uint64_t used = 0;
  char status[4096];
  const int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    const ssize_t n = read(fd, status, sizeof(status) - 1);
    close(fd);
    if (n > 0) {
      status[n] = '\0';
      if (const char* at = strstr(status, "VmSize:")) {
        used = strtoull(at + strlen("VmSize:"), nullptr, 10) * 1024;
      }
    }
  }
  *free = *limit > used ? *limit - used : 0;
  return true;
}

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_PRELOAD_ADDRESS_SPACE_H_
