"""A Python program that drives libnrt through ctypes, as framework bindings do.

Usage: ctypes_client.py LIBNRT MODEL N. The model adds inputs a and b (fp32 [4]) into out.
"""
import ctypes
import sys


def main():
    lib = ctypes.CDLL(sys.argv[1])  # RTLD_LOCAL, like any ctypes user
    with open(sys.argv[2], "rb") as f:
        neff = f.read()
    n = int(sys.argv[3])
    check = lambda status, what: status == 0 or sys.exit(f"ctypes_client: {what} -> {status}")
    p = ctypes.c_void_p
    check(lib.nrt_init(1, b"", b""), "nrt_init")
    model = p()
    check(lib.nrt_load(neff, ctypes.c_size_t(len(neff)), 0, -1, ctypes.byref(model)), "nrt_load")
    tensors = {}
    for name in (b"a", b"b", b"out"):
        t = p()
        check(lib.nrt_tensor_allocate(0, 0, ctypes.c_size_t(16), name, ctypes.byref(t)), "alloc")
        tensors[name] = t
    values = (ctypes.c_float * 4)(1, 2, 3, 4)
    check(lib.nrt_tensor_write(tensors[b"a"], values, ctypes.c_size_t(0), ctypes.c_size_t(16)), "write")
    check(lib.nrt_tensor_write(tensors[b"b"], values, ctypes.c_size_t(0), ctypes.c_size_t(16)), "write")
    ins, outs = p(), p()
    check(lib.nrt_allocate_tensor_set(ctypes.byref(ins)), "set")
    check(lib.nrt_allocate_tensor_set(ctypes.byref(outs)), "set")
    check(lib.nrt_add_tensor_to_tensor_set(ins, b"a", tensors[b"a"]), "add")
    check(lib.nrt_add_tensor_to_tensor_set(ins, b"b", tensors[b"b"]), "add")
    check(lib.nrt_add_tensor_to_tensor_set(outs, b"out", tensors[b"out"]), "add")
    for _ in range(n):
        check(lib.nrt_execute(model, ins, outs), "nrt_execute")
    result = (ctypes.c_float * 4)()
    check(lib.nrt_tensor_read(tensors[b"out"], result, ctypes.c_size_t(0), ctypes.c_size_t(16)), "read")
    print("out:", " ".join(f"{v:g}" for v in result))
    lib.nrt_close()


if __name__ == "__main__":
    main()
