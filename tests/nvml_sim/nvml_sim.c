/* A simulated libnvidia-ml.so.1 for the test suite (never shipped).
 *
 * Built by the tests with gcc against NVIDIA's nvml.h (the nvidia-nvml-dev wheel), so every
 * exported function has NVML's real prototype and the unmodified pynvml (nvidia-ml-py)
 * loads it through LD_LIBRARY_PATH. Behaviour comes from a scenario file (JSON) named by
 * NVML_SIM_SCENARIO, re-read whenever it changes (inode, size or mtime), so a test can
 * change the GPUs' state under a running worker. Scenario keys: see scenarios/README.md.
 *
 * NVML_SIM_CALL_LOG (optional): every exported function called, one name per line.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "nvml.h"
#include "json_mini.h"

#define MAX_GPUS 64
#define MAX_MIG 16

/* mig: 0 = the GPU itself; k > 0 = the MIG device in slot k - 1 of GPU `index` (a static
 * array's zero is a GPU handle). */
struct nvmlDevice_st { unsigned int index; unsigned int mig; };
struct nvmlEventSet_st { unsigned long long mask[MAX_GPUS]; };
struct nvmlGpuInstance_st { unsigned int gpu; unsigned int id; };

static struct nvmlDevice_st g_devices[MAX_GPUS];
static struct nvmlDevice_st g_mig_devices[MAX_GPUS][MAX_MIG];
static struct nvmlGpuInstance_st g_gpu_instances[MAX_GPUS][MAX_MIG];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static jm_node *g_scn;
static struct stat g_scn_stat;
static int g_init_count;
static int g_event_cursor;

/* -- scenario ------------------------------------------------------------------------ */
static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    if (buf) buf[n] = 0;
    fclose(f);
    return buf;
}

static void maybe_reload(void) {
    const char *path = getenv("NVML_SIM_SCENARIO");
    struct stat st;
    if (!path || stat(path, &st) != 0) return;
    pthread_mutex_lock(&g_lock);
    if (!g_scn || st.st_ino != g_scn_stat.st_ino || st.st_size != g_scn_stat.st_size ||
        st.st_mtim.tv_sec != g_scn_stat.st_mtim.tv_sec ||
        st.st_mtim.tv_nsec != g_scn_stat.st_mtim.tv_nsec) {
        char *text = slurp(path);
        jm_node *parsed = text ? jm_parse(text) : NULL;
        free(text);
        if (parsed) {
            jm_free(g_scn);
            g_scn = parsed;
            g_scn_stat = st;
        } else if (!g_scn) {
            fprintf(stderr, "nvml_sim: cannot parse scenario %s\n", path);
        }
    }
    pthread_mutex_unlock(&g_lock);
}

static void log_call(const char *name) {
    const char *path = getenv("NVML_SIM_CALL_LOG");
    if (!path) return;
    FILE *f = fopen(path, "a");
    if (f) { fprintf(f, "%s\n", name); fclose(f); }
}

static unsigned int gpu_count(void) {
    int n = jm_len(jm_get(g_scn, "gpus"));
    return (unsigned int)(n > MAX_GPUS ? MAX_GPUS : n);
}

/* A GPU field: the GPU's own value, else the scenario's "defaults". */
static jm_node *field(unsigned int gpu, const char *key) {
    jm_node *own = jm_get(jm_at(jm_get(g_scn, "gpus"), (int)gpu), key);
    return own ? own : jm_get(jm_get(g_scn, "defaults"), key);
}

static double num(unsigned int gpu, const char *key, double dflt) {
    jm_node *n = field(gpu, key);
    return n && (n->type == JM_NUM || n->type == JM_BOOL) ? n->num : dflt;
}

static const char *str(unsigned int gpu, const char *key, const char *dflt) {
    jm_node *n = field(gpu, key);
    return n && n->type == JM_STR ? n->str : dflt;
}

static int rule_matches(jm_node *rule, const char *call, int gpu) {
    jm_node *c = jm_get(rule, "call"), *g = jm_get(rule, "gpu");
    if (!c || c->type != JM_STR) return 0;
    if (strcmp(c->str, "*") != 0 && strcmp(c->str, call) != 0) return 0;
    if (g && g->type == JM_NUM && (int)g->num != gpu) return 0;
    if (g && g->type == JM_NUM && gpu < 0) return 0;
    return 1;
}

/* Block for the scenario's "block" rules, then return its "errors" code (0 = none). */
static nvmlReturn_t scripted(const char *call, int gpu) {
    log_call(call);
    for (jm_node *r = jm_get(g_scn, "block") ? jm_get(g_scn, "block")->child : NULL; r; r = r->next) {
        if (rule_matches(r, call, gpu)) {
            double ms = jm_get(r, "ms") ? jm_get(r, "ms")->num : 0;
            struct timespec ts = {(time_t)(ms / 1000), (long)((long long)ms % 1000) * 1000000L};
            while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
        }
    }
    for (jm_node *r = jm_get(g_scn, "errors") ? jm_get(g_scn, "errors")->child : NULL; r; r = r->next) {
        if (rule_matches(r, call, gpu)) {
            jm_node *code = jm_get(r, "code");
            return code ? (nvmlReturn_t)code->num : NVML_ERROR_UNKNOWN;
        }
    }
    return NVML_SUCCESS;
}

#define SYS_CALL(name)                                             \
    nvmlReturn_t _r;                                               \
    if (!g_init_count) { log_call(name); return NVML_ERROR_UNINITIALIZED; } \
    if ((_r = scripted(name, -1)) != NVML_SUCCESS) return _r

#define DEV_CALL(name, dev)                                        \
    nvmlReturn_t _r;                                               \
    if (!g_init_count) { log_call(name); return NVML_ERROR_UNINITIALIZED; } \
    if (!(dev) || (dev)->index >= gpu_count()) return NVML_ERROR_INVALID_ARGUMENT; \
    unsigned int gi = (dev)->index;                                \
    if ((_r = scripted(name, (int)gi)) != NVML_SUCCESS) return _r

static nvmlReturn_t copy_str(char *dst, unsigned int len, const char *src) {
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

/* -- init, system -------------------------------------------------------------------- */
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    maybe_reload();
    nvmlReturn_t r = scripted("nvmlInitWithFlags", -1);
    if (r != NVML_SUCCESS) return r;
    jm_node *e = jm_get(g_scn, "init_error");
    if (e && e->type == JM_NUM && e->num != 0) return (nvmlReturn_t)e->num;
    __atomic_add_fetch(&g_init_count, 1, __ATOMIC_SEQ_CST);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    log_call("nvmlShutdown");
    if (!g_init_count) return NVML_ERROR_UNINITIALIZED;
    __atomic_sub_fetch(&g_init_count, 1, __ATOMIC_SEQ_CST);
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    SYS_CALL("nvmlSystemGetDriverVersion");
    jm_node *v = jm_get(g_scn, "driver_version");
    return copy_str(version, length, v && v->str ? v->str : "999.88.77");
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    SYS_CALL("nvmlSystemGetNVMLVersion");
    jm_node *v = jm_get(g_scn, "nvml_version");
    return copy_str(version, length, v && v->str ? v->str : "12.999.88.77");
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion) {
    SYS_CALL("nvmlSystemGetCudaDriverVersion");
    jm_node *v = jm_get(g_scn, "cuda_driver_version");
    *cudaDriverVersion = v ? (int)v->num : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion) {
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
    maybe_reload();
    SYS_CALL("nvmlDeviceGetCount_v2");
    *deviceCount = gpu_count();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    maybe_reload();
    if (!g_init_count) return NVML_ERROR_UNINITIALIZED;
    if (index >= gpu_count()) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = scripted("nvmlDeviceGetHandleByIndex_v2", (int)index);
    if (r != NVML_SUCCESS) return r;
    g_devices[index].index = index;
    *device = &g_devices[index];
    return NVML_SUCCESS;
}

/* -- identity ------------------------------------------------------------------------ */
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    DEV_CALL("nvmlDeviceGetIndex", device);
    *index = gi;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber) {
    DEV_CALL("nvmlDeviceGetMinorNumber", device);
    *minorNumber = (unsigned int)num(gi, "minor_number", gi);
    return NVML_SUCCESS;
}

static jm_node *mig_entry(unsigned int gpu, unsigned int slot);

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    DEV_CALL("nvmlDeviceGetUUID", device);
    if (device->mig) {  /* a MIG device's own UUID (MIG-...) */
        jm_node *u = jm_get(mig_entry(gi, device->mig - 1), "uuid");
        return copy_str(uuid, length, u && u->type == JM_STR ? u->str : "MIG-00000000-0000-0000-0000-000000000000");
    }
    return copy_str(uuid, length, str(gi, "uuid", "GPU-00000000-0000-0000-0000-000000000000"));
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    DEV_CALL("nvmlDeviceGetName", device);
    return copy_str(name, length, str(gi, "name", "NVIDIA Simulated GPU"));
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    DEV_CALL("nvmlDeviceGetPciInfo_v3", device);
    memset(pci, 0, sizeof *pci);
    const char *bus_id = str(gi, "pci_bus_id", "00000000:00:00.0");
    snprintf(pci->busId, sizeof pci->busId, "%s", bus_id);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%.15s", bus_id);
    unsigned int dom = 0, bus = 0, dev = 0;
    if (sscanf(bus_id, "%x:%x:%x", &dom, &bus, &dev) == 3) {
        pci->domain = dom; pci->bus = bus; pci->device = dev;
    }
    pci->pciDeviceId = (unsigned int)num(gi, "pci_device_id", 0);
    pci->pciSubSystemId = (unsigned int)num(gi, "pci_subsystem_id", 0);
    return NVML_SUCCESS;
}

/* Board identity and firmware (nvml.h "Device Queries"): a field the scenario leaves out
 * answers NOT_SUPPORTED, as nvml.h says for a device without an infoROM or an unfilled VBIOS
 * field; the buffers are NVML_DEVICE_*_BUFFER_SIZE long (INSUFFICIENT_SIZE below that). */
static nvmlReturn_t copy_field(unsigned int gpu, const char *key, char *dst, unsigned int len) {
    jm_node *n = field(gpu, key);
    if (!n || n->type != JM_STR) return NVML_ERROR_NOT_SUPPORTED;
    return copy_str(dst, len, n->str);
}

nvmlReturn_t nvmlDeviceGetBoardPartNumber(nvmlDevice_t device, char *partNumber, unsigned int length) {
    DEV_CALL("nvmlDeviceGetBoardPartNumber", device);
    return copy_field(gi, "board_part_number", partNumber, length);
}

nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version, unsigned int length) {
    DEV_CALL("nvmlDeviceGetVbiosVersion", device);
    return copy_field(gi, "vbios_version", version, length);
}

nvmlReturn_t nvmlDeviceGetInforomImageVersion(nvmlDevice_t device, char *version, unsigned int length) {
    DEV_CALL("nvmlDeviceGetInforomImageVersion", device);
    return copy_field(gi, "inforom_image_version", version, length);
}

/* Power limits in milliwatts; absent = NOT_SUPPORTED (nvml.h: power management not supported). */
static nvmlReturn_t uint_field(unsigned int gpu, const char *key, unsigned int *out) {
    jm_node *n = field(gpu, key);
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (!n || n->type != JM_NUM) return NVML_ERROR_NOT_SUPPORTED;
    *out = (unsigned int)n->num;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit) {
    DEV_CALL("nvmlDeviceGetPowerManagementLimit", device);
    return uint_field(gi, "power_limit_mw", limit);
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit) {
    DEV_CALL("nvmlDeviceGetEnforcedPowerLimit", device);
    return uint_field(gi, field(gi, "power_enforced_mw") ? "power_enforced_mw" : "power_limit_mw", limit);
}

nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t device, nvmlClockType_t clockType,
                                            unsigned int *clockMHz) {
    DEV_CALL("nvmlDeviceGetApplicationsClock", device);
    const char *key = clockType == NVML_CLOCK_GRAPHICS ? "app_clock_graphics_mhz"
                    : clockType == NVML_CLOCK_MEM ? "app_clock_memory_mhz" : NULL;
    if (!key) return NVML_ERROR_NOT_SUPPORTED;  /* SM and video: not simulated */
    return uint_field(gi, key, clockMHz);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    DEV_CALL("nvmlDeviceGetMemoryInfo", device);
    memory->total = (unsigned long long)num(gi, "memory_total_bytes", 0);
    memory->used = (unsigned long long)num(gi, "memory_used_bytes", 0);
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode) {
    DEV_CALL("nvmlDeviceGetPersistenceMode", device);
    *mode = num(gi, "persistence_mode", 0) ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

/* -- thermal, clocks ----------------------------------------------------------------- */
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                      unsigned int *temp) {
    DEV_CALL("nvmlDeviceGetTemperature", device);
    if (sensorType != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    *temp = (unsigned int)num(gi, "temperature_gpu_c", 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device,
                                               nvmlTemperatureThresholds_t thresholdType,
                                               unsigned int *temp) {
    DEV_CALL("nvmlDeviceGetTemperatureThreshold", device);
    const char *key = thresholdType == NVML_TEMPERATURE_THRESHOLD_SHUTDOWN ? "shutdown_threshold_c"
                    : thresholdType == NVML_TEMPERATURE_THRESHOLD_SLOWDOWN ? "slowdown_threshold_c"
                    : thresholdType == NVML_TEMPERATURE_THRESHOLD_GPU_MAX ? "max_operating_c"
                    : NULL;
    if (!key || !field(gi, key)) return NVML_ERROR_NOT_SUPPORTED;
    *temp = (unsigned int)num(gi, key, 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                    unsigned long long *clocksEventReasons) {
    DEV_CALL("nvmlDeviceGetCurrentClocksEventReasons", device);
    *clocksEventReasons = (unsigned long long)num(gi, "clock_event_reasons", 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                       unsigned long long *reasons) {
    DEV_CALL("nvmlDeviceGetCurrentClocksThrottleReasons", device);
    *reasons = (unsigned long long)num(gi, "clock_event_reasons", 0);
    return NVML_SUCCESS;
}

/* -- ECC, row remapping -------------------------------------------------------------- */
nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current,
                                  nvmlEnableState_t *pending) {
    DEV_CALL("nvmlDeviceGetEccMode", device);
    *current = num(gi, "ecc_mode_current", 0) ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    *pending = num(gi, "ecc_mode_pending", 0) ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                         nvmlEccCounterType_t counterType,
                                         unsigned long long *eccCounts) {
    DEV_CALL("nvmlDeviceGetTotalEccErrors", device);
    const char *key =
        counterType == NVML_VOLATILE_ECC
            ? (errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED ? "ecc_volatile_corrected" : "ecc_volatile_uncorrected")
            : (errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED ? "ecc_aggregate_corrected" : "ecc_aggregate_uncorrected");
    *eccCounts = (unsigned long long)num(gi, key, 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows,
                                       unsigned int *uncRows, unsigned int *isPending,
                                       unsigned int *failureOccurred) {
    DEV_CALL("nvmlDeviceGetRemappedRows", device);
    *corrRows = (unsigned int)num(gi, "remapped_rows_correctable", 0);
    *uncRows = (unsigned int)num(gi, "remapped_rows_uncorrectable", 0);
    *isPending = (unsigned int)num(gi, "remapped_rows_pending", 0);
    *failureOccurred = (unsigned int)num(gi, "remapped_rows_failure", 0);
    return NVML_SUCCESS;
}

/* -- PCIe, NVLink -------------------------------------------------------------------- */
#define PCIE_GETTER(fn, key)                                             \
    nvmlReturn_t fn(nvmlDevice_t device, unsigned int *value) {          \
        DEV_CALL(#fn, device);                                           \
        *value = (unsigned int)num(gi, key, 0);                          \
        return NVML_SUCCESS;                                             \
    }
PCIE_GETTER(nvmlDeviceGetCurrPcieLinkGeneration, "pcie_gen_current")
PCIE_GETTER(nvmlDeviceGetMaxPcieLinkGeneration, "pcie_gen_max")
PCIE_GETTER(nvmlDeviceGetCurrPcieLinkWidth, "pcie_width_current")
PCIE_GETTER(nvmlDeviceGetMaxPcieLinkWidth, "pcie_width_max")

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                      nvmlEnableState_t *isActive) {
    DEV_CALL("nvmlDeviceGetNvLinkState", device);
    unsigned int links = (unsigned int)num(gi, "nvlink_links", 0);
    if (links == 0) return NVML_ERROR_NOT_SUPPORTED;
    if (link >= links) return NVML_ERROR_INVALID_ARGUMENT;
    *isActive = NVML_FEATURE_ENABLED;
    jm_node *down = field(gi, "nvlink_down");
    for (int i = 0; i < jm_len(down); i++)
        if ((unsigned int)jm_at(down, i)->num == link) *isActive = NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

/* -- MIG, fabric --------------------------------------------------------------------- */
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                  unsigned int *pendingMode) {
    DEV_CALL("nvmlDeviceGetMigMode", device);
    if (!field(gi, "mig_current")) return NVML_ERROR_NOT_SUPPORTED;
    *currentMode = (unsigned int)num(gi, "mig_current", 0);
    *pendingMode = (unsigned int)num(gi, "mig_pending", *currentMode);
    return NVML_SUCCESS;
}

/* MIG devices and GPU instances (nvml.h "Multi Instance GPU Management"). Per GPU:
 * "mig_devices": [{"uuid", "gi", "ci", "profile_id", "slot" (optional, default its position)}]
 * (one per compute instance), "mig_profiles": [{"index" (NVML_GPU_INSTANCE_PROFILE_*), "id",
 * "name", "slices", "memory_mb", "instances"}], "mig_max_devices" (default 7 with MIG on).
 * Only read while mig_current is 1; with MIG off the calls answer as nvml.h says. */
static int mig_on(unsigned int gpu) {
    return field(gpu, "mig_current") && num(gpu, "mig_current", 0) == NVML_DEVICE_MIG_ENABLE;
}

static unsigned int mig_max(unsigned int gpu) {
    unsigned int n = mig_on(gpu) ? (unsigned int)num(gpu, "mig_max_devices", 7) : 0;
    return n > MAX_MIG ? MAX_MIG : n;
}

static jm_node *mig_entry(unsigned int gpu, unsigned int slot) {
    jm_node *list = field(gpu, "mig_devices");
    for (int i = 0; i < jm_len(list); i++) {
        jm_node *e = jm_at(list, i), *s = jm_get(e, "slot");
        if ((s && s->type == JM_NUM ? (unsigned int)s->num : (unsigned int)i) == slot) return e;
    }
    return NULL;
}

static unsigned int entry_num(jm_node *e, const char *key) {
    jm_node *n = jm_get(e, key);
    return n && n->type == JM_NUM ? (unsigned int)n->num : 0;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    DEV_CALL("nvmlDeviceGetMaxMigDeviceCount", device);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = device->mig ? 0 : mig_max(gi);  /* zero when MIG is not supported or enabled */
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t *migDevice) {
    DEV_CALL("nvmlDeviceGetMigDeviceHandleByIndex", device);
    if (!migDevice || device->mig) return NVML_ERROR_INVALID_ARGUMENT;
    if (!mig_on(gi)) return NVML_ERROR_NOT_SUPPORTED;
    if (index >= mig_max(gi)) return NVML_ERROR_INVALID_ARGUMENT;
    if (!mig_entry(gi, index)) return NVML_ERROR_NOT_FOUND;
    g_mig_devices[gi][index].index = gi;
    g_mig_devices[gi][index].mig = index + 1;
    *migDevice = &g_mig_devices[gi][index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
    DEV_CALL("nvmlDeviceIsMigDeviceHandle", device);
    if (!isMigDevice) return NVML_ERROR_INVALID_ARGUMENT;
    *isMigDevice = device->mig ? 1 : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device) {
    DEV_CALL("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", migDevice);
    if (!device || !migDevice->mig) return NVML_ERROR_INVALID_ARGUMENT;
    g_devices[gi].index = gi;
    *device = &g_devices[gi];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    DEV_CALL("nvmlDeviceGetGpuInstanceId", device);
    if (!id) return NVML_ERROR_INVALID_ARGUMENT;
    if (!device->mig) return NVML_ERROR_NOT_SUPPORTED;  /* a GPU handle has no instance */
    *id = entry_num(mig_entry(gi, device->mig - 1), "gi");
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
    DEV_CALL("nvmlDeviceGetComputeInstanceId", device);
    if (!id) return NVML_ERROR_INVALID_ARGUMENT;
    if (!device->mig) return NVML_ERROR_NOT_SUPPORTED;
    *id = entry_num(mig_entry(gi, device->mig - 1), "ci");
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                          nvmlGpuInstance_t *gpuInstance) {
    DEV_CALL("nvmlDeviceGetGpuInstanceById", device);
    if (!gpuInstance || device->mig) return NVML_ERROR_INVALID_ARGUMENT;
    if (!mig_on(gi)) return NVML_ERROR_NOT_SUPPORTED;
    jm_node *list = field(gi, "mig_devices");
    for (int i = 0; i < jm_len(list) && i < MAX_MIG; i++) {
        if (entry_num(jm_at(list, i), "gi") != id) continue;
        g_gpu_instances[gi][i].gpu = gi;
        g_gpu_instances[gi][i].id = id;
        *gpuInstance = &g_gpu_instances[gi][i];
        return NVML_SUCCESS;
    }
    return NVML_ERROR_NOT_FOUND;
}

static jm_node *gi_profile(unsigned int gpu, const char *key, unsigned int value) {
    jm_node *list = field(gpu, "mig_profiles");
    for (int i = 0; i < jm_len(list); i++)
        if (jm_get(jm_at(list, i), key) && entry_num(jm_at(list, i), key) == value) return jm_at(list, i);
    return NULL;
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info) {
    maybe_reload();
    if (!g_init_count) { log_call("nvmlGpuInstanceGetInfo"); return NVML_ERROR_UNINITIALIZED; }
    if (!gpuInstance || !info || gpuInstance->gpu >= gpu_count()) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int gpu = gpuInstance->gpu;
    nvmlReturn_t r = scripted("nvmlGpuInstanceGetInfo", (int)gpu);
    if (r != NVML_SUCCESS) return r;
    jm_node *list = field(gpu, "mig_devices"), *found = NULL;
    for (int i = 0; i < jm_len(list) && !found; i++)
        if (entry_num(jm_at(list, i), "gi") == gpuInstance->id) found = jm_at(list, i);
    if (!found) return NVML_ERROR_INVALID_ARGUMENT;  /* destroyed since the handle was had */
    memset(info, 0, sizeof *info);
    g_devices[gpu].index = gpu;
    info->device = &g_devices[gpu];
    info->id = gpuInstance->id;
    info->profileId = entry_num(found, "profile_id");
    jm_node *profile = gi_profile(gpu, "id", info->profileId);
    info->placement.size = profile ? entry_num(profile, "slices") : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t *info) {
    DEV_CALL("nvmlDeviceGetGpuInstanceProfileInfoV", device);
    if (!info || device->mig || profile >= NVML_GPU_INSTANCE_PROFILE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != nvmlGpuInstanceProfileInfo_v2) return NVML_ERROR_INVALID_ARGUMENT;
    if (!mig_on(gi)) return NVML_ERROR_NOT_SUPPORTED;
    jm_node *p = gi_profile(gi, "index", profile);
    if (!p) return NVML_ERROR_NOT_SUPPORTED;  /* a profile this GPU does not offer */
    unsigned int version = info->version;
    memset(info, 0, sizeof *info);
    info->version = version;
    info->id = entry_num(p, "id");
    info->sliceCount = entry_num(p, "slices");
    info->instanceCount = entry_num(p, "instances");
    info->memorySizeMB = entry_num(p, "memory_mb");
    jm_node *name = jm_get(p, "name");
    snprintf(info->name, sizeof info->name, "%s", name && name->type == JM_STR ? name->str : "");
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *info) {
    DEV_CALL("nvmlDeviceGetGpuFabricInfo", device);
    memset(info, 0, sizeof *info);
    info->state = (nvmlGpuFabricState_t)num(gi, "fabric_state", NVML_GPU_FABRIC_STATE_NOT_SUPPORTED);
    info->status = (nvmlReturn_t)num(gi, "fabric_status", NVML_SUCCESS);
    info->cliqueId = (unsigned int)num(gi, "fabric_clique_id", 0);
    return NVML_SUCCESS;
}

/* -- events (XID streaming, docs/xid.md) -----------------------------------------------
 * "events": [{"gpu": 0, "xid": 48}, ...] are delivered once each, in order, to
 * nvmlEventSetWait_v2; with none left it waits timeoutms and returns NVML_ERROR_TIMEOUT, or
 * returns it sooner when a signal interrupts the wait (nvml.h: NVML_ERROR_TIMEOUT "if no event
 * arrived in specified timeout or interrupt arrived").
 * Events added to a rewritten scenario are delivered too (the cursor survives reloads). */
nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    SYS_CALL("nvmlEventSetCreate");
    *set = calloc(1, sizeof **set);
    return *set ? NVML_SUCCESS : NVML_ERROR_MEMORY;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    log_call("nvmlEventSetFree");
    free(set);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes) {
    DEV_CALL("nvmlDeviceGetSupportedEventTypes", device);
    *eventTypes = nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError |
                  nvmlEventTypeSingleBitEccError;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                      nvmlEventSet_t set) {
    DEV_CALL("nvmlDeviceRegisterEvents", device);
    set->mask[gi] |= eventTypes;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    maybe_reload();
    SYS_CALL("nvmlEventSetWait_v2");
    jm_node *events = jm_get(g_scn, "events");
    while (g_event_cursor < jm_len(events)) {
        jm_node *ev = jm_at(events, g_event_cursor++);
        unsigned int gpu = jm_get(ev, "gpu") ? (unsigned int)jm_get(ev, "gpu")->num : 0;
        if (gpu >= gpu_count() || !(set->mask[gpu] & nvmlEventTypeXidCriticalError)) continue;
        memset(data, 0, sizeof *data);
        data->device = &g_devices[gpu];
        g_devices[gpu].index = gpu;
        data->eventType = nvmlEventTypeXidCriticalError;
        data->eventData = jm_get(ev, "xid") ? (unsigned long long)jm_get(ev, "xid")->num : 999;
        data->gpuInstanceId = 0xFFFFFFFFu;
        data->computeInstanceId = 0xFFFFFFFFu;
        return NVML_SUCCESS;
    }
    struct timespec ts = {(time_t)(timeoutms / 1000), (long)(timeoutms % 1000) * 1000000L};
    nanosleep(&ts, &ts);  /* EINTR: an interrupt ends the wait early */
    return NVML_ERROR_TIMEOUT;
}
