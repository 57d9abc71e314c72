/* A program that closes descriptors it does not own, as servers that daemonize do: 1,000
 * libnrt calls, then it closes every descriptor above 2 (HOW: `loop` closes 3..1023 one by one,
 * `closefrom` calls closefrom(3), `close_range` calls close_range(3, ~0U, 0)) and opens three
 * files of its own in DIR, whose numbers it prints, or (`takeover`) closes each socket, eventfd
 * and epoll set it finds open, which it never made (under LD_PRELOAD it waits up to 10 s for a
 * socket), and opens a file of its own in the place of each. It first prints how many
 * descriptors above 2 it was started with. It writes a line to each file, makes 1,000
 * more calls, and writes a second line to each file it still has open.
 * Usage: closed_fds_client HOW DIR. Prints what it did; exits 1 if anything failed. Linked
 * against libnrt. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nrt/nrt.h>

static int Writes(nrt_tensor_t *tensor, int n) {
  float data[4] = {1, 2, 3, 4};
  for (int i = 0; i < n; ++i) {
    if (nrt_tensor_write(tensor, data, 0, sizeof(data)) != NRT_SUCCESS) return 1;
  }
  return 0;
}

/* Opens DIR/file<k>, writes one line and keeps it open; -1 on failure. */
static int OpenOwnFile(const char *dir, int k) {
  char path[4096], line[64];
  snprintf(path, sizeof(path), "%s/file%d", dir, k);
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return -1;
  const int len = snprintf(line, sizeof(line), "first line of file %d\n", k);
  return write(fd, line, (size_t)len) == len ? fd : -1;
}

/* What /proc says fd is, starting with `prefix`. */
static int Is(int fd, const char *prefix) {
  char path[64], target[256];
  snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(path, target, sizeof(target) - 1);
  return n > 0 && strncmp(target, prefix, strlen(prefix)) == 0;
}

/* How many descriptors above 2 are open, the listing's own aside; -1 if it cannot tell. */
static int OpenAbove2(void) {
  DIR *d = opendir("/proc/self/fd");
  if (d == NULL) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    const int fd = atoi(e->d_name);
    n += fd > 2 && fd != dirfd(d);
  }
  closedir(d);
  return n;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: closed_fds_client loop|closefrom|close_range|takeover DIR\n");
    return 2;
  }
  const char *how = argv[1], *dir = argv[2];
  /* What its parent left it: the same bare as under a profiler, which passes none of its own. */
  printf("%s: %d descriptors above 2 at its start\n", how, OpenAbove2());
  nrt_tensor_t *tensor = NULL;
  if (nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") != NRT_SUCCESS ||
      nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 16, "t", &tensor) != NRT_SUCCESS ||
      Writes(tensor, 1000) != 0) {
    return 1;
  }
  int files = 0, own[1024];
  if (strcmp(how, "takeover") == 0) {
    /* A profiler's connection may take a moment to appear; without one there is none. */
    const char *preload = getenv("LD_PRELOAD");
    const int tries = preload != NULL && preload[0] != '\0' ? 1000 : 1;
    int taken[1024], n = 0, sockets = 0;
    for (int t = 0; t < tries && sockets == 0; ++t) {
      if (t > 0) usleep(10000);
      DIR *d = opendir("/proc/self/fd");
      if (d == NULL) return 1;
      n = 0;
      for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const int fd = atoi(e->d_name);
        if (fd <= 2 || fd == dirfd(d) || n == 1024) continue;
        if (Is(fd, "socket:")) ++sockets;
        if (Is(fd, "socket:") || Is(fd, "anon_inode:")) taken[n++] = fd;
      }
      closedir(d);
    }
    for (int i = 0; i < n; ++i) {
      close(taken[i]);
      if ((own[files] = OpenOwnFile(dir, files)) < 0) return 1;
      ++files;
    }
  } else {
    if (strcmp(how, "loop") == 0) {
      for (int fd = 3; fd < 1024; ++fd) close(fd);
    } else if (strcmp(how, "closefrom") == 0) {
      closefrom(3);
    } else if (strcmp(how, "close_range") == 0) {
      if (close_range(3, ~0U, 0) != 0) return 1;
    } else {
      return 2;
    }
    for (; files < 3; ++files) {
      if ((own[files] = OpenOwnFile(dir, files)) < 0) return 1;
    }
    /* The lowest free numbers: 3, 4 and 5, with or without a profiler. */
    printf("%s: its files at %d, %d, %d\n", how, own[0], own[1], own[2]);
  }
  if (Writes(tensor, 1000) != 0) return 1;
  for (int k = 0; k < files; ++k) {
    char line[64];
    const int len = snprintf(line, sizeof(line), "last line of file %d\n", k);
    if (write(own[k], line, (size_t)len) != len) return 1;
  }
  printf("%s: 2000 writes, files of its own written\n", how);
  nrt_tensor_free(&tensor);
  nrt_close();
  return 0;
}
