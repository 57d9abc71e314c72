"""Opens N shared libraries of the system with ctypes, each followed by a dlsym() through its
handle, as an interpreter importing extension modules does, and prints the time it took.

What it measures under the shim: the scan of newly loaded objects that every dlsym() through a
library handle triggers (shim/preload/loaded_objects.cc). Run by run_open_libraries.sh.

Usage: open_libraries.py N
"""
import ctypes
import glob
import sys
import time

# libc's own parts and libraries that misbehave when merely loaded.
SKIP = ('libc.so', 'libpthread', 'libdl', 'librt', 'libm.so', 'ld-linux', 'libnss',
        'libmemusage', 'libpcprofile', 'libSegFault', 'libBrokenLocale', 'libthread_db',
        'libc_malloc_debug')


def main():
    wanted = int(sys.argv[1])
    opened = 0
    start = time.perf_counter()
    for path in sorted(glob.glob('/usr/lib/x86_64-linux-gnu/lib*.so.*')):
        if any(s in path for s in SKIP):
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        try:
            getattr(lib, 'nrtprof_no_such_symbol')  # one dlsym() through the handle
        except AttributeError:
            pass
        opened += 1
        if opened == wanted:
            break
    elapsed_ms = 1000 * (time.perf_counter() - start)
    objects = sum(1 for line in open('/proc/self/maps') if '.so' in line)
    print(f"{opened} libraries opened and looked up in {elapsed_ms:.1f} ms "
          f"({objects} mappings of shared objects)")


if __name__ == '__main__':
    main()
