/* LD_PRELOAD shim for the NVML tests: logs every NVML symbol a dlsym() lookup could not find.
 *
 * pynvml resolves each NVML function lazily (ctypes getattr -> dlsym) the first time it is
 * called, and turns a miss into NVMLError_FunctionNotFound. A simulated library that lacks
 * a function the worker uses would then look like an "old driver" instead of a test bug,
 * so the healthy-scenario tests assert that this log (NVML_SIM_SYMBOL_LOG) stays empty.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void *(*dlsym_fn)(void *, const char *);

static dlsym_fn real_dlsym(void) {
    static dlsym_fn real;
    if (!real) {
        /* dlvsym is not interposed; the version names glibc's dlsym across releases:
         * GLIBC_2.34 (libdl merged into libc), else the architecture's base version. */
        static const char *versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", NULL};
        for (int i = 0; versions[i] && !real; i++)
            real = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    }
    return real;
}

void *dlsym(void *handle, const char *symbol) {
    void *found = real_dlsym()(handle, symbol);
    if (!found && strncmp(symbol, "nvml", 4) == 0) {
        const char *path = getenv("NVML_SIM_SYMBOL_LOG");
        FILE *f = path ? fopen(path, "a") : NULL;
        if (f) {
            fprintf(f, "%s\n", symbol);
            fclose(f);
        }
    }
    return found;
}
