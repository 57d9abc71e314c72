/* A program that closes descriptors it does not own, as servers that daemonize do: 1,000
 * libnrt calls, then it closes every descriptor above 2 (HOW: `loop` closes 3..1023 one by one,
 * `closefrom` calls closefrom(3), `close_range` calls close_range(3, ~0U, 0), `takeover`
 * closes each descriptor above 2 it finds open and opens a file of its own in its place), opens
 * files of its own in DIR and writes a line to each, then makes 1,000 more calls.
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
  const int len = snprintf(line, sizeof(line), "line of file %d\n", k);
  return write(fd, line, (size_t)len) == len ? fd : -1;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: closed_fds_client loop|closefrom|close_range|takeover DIR\n");
    return 2;
  }
  const char *how = argv[1], *dir = argv[2];
  nrt_tensor_t *tensor = NULL;
  if (nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") != NRT_SUCCESS ||
      nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 16, "t", &tensor) != NRT_SUCCESS ||
      Writes(tensor, 1000) != 0) {
    return 1;
  }
  int files = 0;
  if (strcmp(how, "takeover") == 0) {
    /* Every descriptor above 2 that is open now, closed and replaced by a file of its own. */
    int fds[1024], n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL) return 1;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
      const int fd = atoi(e->d_name);
      if (fd > 2 && fd != dirfd(d) && n < 1024) fds[n++] = fd;
    }
    closedir(d);
    for (int i = 0; i < n; ++i) {
      close(fds[i]);
      if (OpenOwnFile(dir, files++) < 0) return 1;
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
      if (OpenOwnFile(dir, files) < 0) return 1;
    }
  }
  if (Writes(tensor, 1000) != 0) return 1;
  printf("%s: 2000 writes, files of its own written\n", how);
  nrt_tensor_free(&tensor);
  nrt_close();
  return 0;
}
