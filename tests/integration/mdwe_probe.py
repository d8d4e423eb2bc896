"""Run the agent's ctypes paths with MemoryDenyWriteExecute applied, the way systemd does.

Usage: python mdwe_probe.py {seccomp|prctl} [bundle-dir]
seccomp: systemd's own rules (src/shared/seccomp-util.c, seccomp_memory_deny_write_execute):
EPERM for mmap with PROT_WRITE|PROT_EXEC, mprotect/pkey_mprotect adding PROT_EXEC, shmat with
SHM_EXEC; installed through libseccomp (the library systemd uses), via ctypes.
prctl: the kernel's PR_SET_MDWE (Linux 6.3+), which systemd >= 253 prefers when available.
The filter is inherited by the NVML worker subprocess. Prints one line per probe; exit 0 only
when the restriction is demonstrably active and every agent path still works.
"""
import ctypes
import ctypes.util
import os
import sys

PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
MAP_PRIVATE, MAP_ANONYMOUS = 0x02, 0x20
SHM_EXEC = 0o100000
libc = ctypes.CDLL(None, use_errno=True)


class ScmpArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


def apply_seccomp() -> None:
    lib = ctypes.CDLL(ctypes.util.find_library("seccomp") or "libseccomp.so.2", use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                           ctypes.c_uint, ctypes.POINTER(ScmpArgCmp)]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    scmp_act_allow, scmp_cmp_masked_eq = 0x7FFF0000, 7
    errno_eperm = 0x00050000 | 1
    ctx = lib.seccomp_init(scmp_act_allow)
    rules = [("mmap", PROT_WRITE | PROT_EXEC, PROT_WRITE | PROT_EXEC),
             ("mprotect", PROT_EXEC, PROT_EXEC), ("pkey_mprotect", PROT_EXEC, PROT_EXEC),
             ("shmat", SHM_EXEC, SHM_EXEC)]
    for name, mask, value in rules:
        nr = lib.seccomp_syscall_resolve_name(name.encode())
        cmp = ScmpArgCmp(2, scmp_cmp_masked_eq, mask, value)
        rc = lib.seccomp_rule_add_array(ctx, errno_eperm, nr, 1, ctypes.byref(cmp))
        assert rc == 0, (name, rc)
    assert lib.seccomp_load(ctx) == 0, "seccomp_load failed"


def apply_prctl() -> None:
    pr_set_mdwe, pr_mdwe_refuse_exec_gain = 65, 1
    if libc.prctl(pr_set_mdwe, pr_mdwe_refuse_exec_gain, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_MDWE")


def wx_mapping_refused() -> bool:
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    addr = libc.mmap(None, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
    return addr in (None, ctypes.c_void_p(-1).value)


def main() -> int:
    mode = sys.argv[1]
    (apply_seccomp if mode == "seccomp" else apply_prctl)()
    assert wx_mapping_refused(), "W+X mmap still allowed: the restriction is not active"
    print("restriction active: mmap(PROT_WRITE|PROT_EXEC) refused")
    # 1. a ctypes callback (libffi closure): the classic MemoryDenyWriteExecute casualty
    cmp_t = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
    arr = (ctypes.c_int * 4)(3, 1, 2, 0)
    cb = cmp_t(lambda a, b: ctypes.cast(a, ctypes.POINTER(ctypes.c_int))[0]
               - ctypes.cast(b, ctypes.POINTER(ctypes.c_int))[0])
    libc.qsort(arr, 4, ctypes.sizeof(ctypes.c_int), cb)
    assert list(arr) == [0, 1, 2, 3]
    print("ctypes callback ok")
    # 2. the time check's read-only adjtimex (agent/host/live.py, ctypes)
    from agent.host.live import LiveFacts

    print("adjtimex ok:", sorted((LiveFacts().fact("adjtimex") or {}).keys())[:3])
    # 3. pyudev's libudev (ctypes)
    import pyudev

    print("pyudev ok:", sum(1 for _ in pyudev.Context().list_devices(subsystem="mem")) >= 0)
    # 4. the NVML worker (pynvml, ctypes) against whatever libnvidia-ml LD_LIBRARY_PATH gives
    if os.environ.get("NVML_SIM_SCENARIO"):
        from agent.nvml.client import NvmlClient

        client = NvmlClient(deadline_s=20, first_deadline_s=30)
        try:
            snap = client.snapshot()
        finally:
            client.close()
        assert snap.get("error") is None and snap["gpus"], snap.get("error")
        print("nvml worker ok:", len(snap["gpus"]), "GPUs")
    # 5. a whole check run on a bundle (the engine, the config and policy records, YAML)
    if len(sys.argv) > 2:
        from agent.cli import main as cli_main

        rc = cli_main(["check", "--bundle", sys.argv[2], "--format", "json"])
        assert rc in (0, 1), rc
        print("check ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
