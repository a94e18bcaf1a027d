/*
 * A fake libnvidia-ml.so.1 for tests and demos on machines without a GPU.
 *
 * It exports the NVML entry points that nvml-wrapper 0.13 calls for
 * initialisation, device discovery, memory, utilisation and process queries,
 * with the C ABI of nvml-wrapper-sys 0.10 (NVML 11/12 headers). The state it
 * reports lives in static globals, so every copy of the .so file that is
 * dlopen()ed under its own path has its own state.
 *
 * The state is controlled in two ways:
 *
 *  - exported control functions named fake_nvml_*, callable at any time
 *    (no nvmlInit needed), e.g. through libloading from the same path;
 *  - environment variables, read once, at the first nvmlInit of this copy,
 *    and only if no control function has changed the state before:
 *      FAKE_NVML_DEVICES       device count (default 1, at most 16)
 *      FAKE_NVML_TOTAL_MIB     total memory per device (default 143771)
 *      FAKE_NVML_USED_MIB      used memory per device (default 1024)
 *      FAKE_NVML_TIMELINE      file with lines "at_ms device used_bytes";
 *                              its clock starts at that nvmlInit
 *      FAKE_NVML_PROCESS_MIB   mib[:device]: that device (default 0) reports
 *                              one compute process, pid getpid(), using
 *                              that many MiB
 *      FAKE_NVML_FAIL          name:code[:device][,name:code[:device]...]
 *      FAKE_NVML_FOLLOW_RSS    1: device 0 used = FAKE_NVML_USED_MIB plus
 *                              the resident set size of the calling process
 *      GPUSPAN_TEST_FAKE_LATENCY  realistic: a real driver's latencies
 *                              (k_realistic), before FAKE_NVML_LATENCY_US
 *      FAKE_NVML_LATENCY_US    name:us[,name:us...]: every call of that
 *                              device entry point takes that long, as a
 *                              real driver's does (see "Latency" below)
 *      FAKE_NVML_LIVE_FILE     a file read again at every device query, so
 *                              another process can script memory as it runs:
 *                              lines "used <device> <bytes>" set a device's
 *                              used memory, lines "process <pid> <device>
 *                              <bytes>" are the compute processes listed
 *                              (all of them: the lists are replaced)
 *      FAKE_NVML_ACCOUNTING    1: every device keeps per-process accounting
 *                              (see "Accounting" below)
 *      FAKE_NVML_MIG           gpu:count[:total_mib][,...]: that GPU is in MIG
 *                              mode with count instances of total_mib each
 *                              (default 16384); see "MIG" below
 *      FAKE_NVML_POWER_W       every GPU draws that many watts (default 300)
 *      FAKE_NVML_ACCOUNTED_PEAK_MIB  the driver's accounted peak of the calling
 *                              process on device 0, as if it had held that
 *                              much between two process lists
 *
 * Latency: by default every call answers at once. A latency set for a
 * per-device entry point (fake_nvml_set_latency or FAKE_NVML_LATENCY_US) is
 * paid inside every call of it, outside the state's mutex: latencies under
 * 200 us are spun (a sleep would overshoot them), longer ones slept. The two
 * process-list calls hold a "driver lock" while they pay it, as NVML holds
 * the driver's lock to list processes: they queue behind each other (never
 * behind memory reads), and fake_nvml_driver_lock_held_ns says how long the
 * lock was held in all. A real driver costs about 12 us per
 * nvmlDeviceGetMemoryInfo_v2 and 4.5 ms per process list.
 *
 * Accounting: a device with accounting on (FAKE_NVML_ACCOUNTING,
 * fake_nvml_set_accounting) keeps, per pid, the most memory any of its compute
 * process lists ever held (as set, or read from the live file), and answers
 * nvmlDeviceGetAccountingStats with it as maxMemoryUsage. A real driver sees
 * every allocation, the fake only the values it was given:
 * fake_nvml_set_accounted_peak scripts the driver's figure directly. With
 * accounting off, the stats call fails with NOT_SUPPORTED, as NVML's does.
 * A GPU in MIG mode and its instances keep none: NVML documents accounting as
 * disabled in MIG mode, with no way to turn it on.
 *
 * MIG: a GPU in MIG mode lists its instances through
 * nvmlDeviceGetMigDeviceHandleByIndex. Instance m of GPU g is the device slot
 * 16 + 7g + m (fake_nvml_mig_slot) wherever a device number is taken: control
 * functions, FAKE_NVML_FAIL, FAKE_NVML_TIMELINE and the live file's lines. An
 * instance has its own memory and processes, UUID MIG-...-<g>-<m>, and no
 * utilization counters (NOT_SUPPORTED, as NVML).
 *
 * Energy and power: each GPU draws a scripted power (fake_nvml_set_power, a
 * timeline of milliwatts on the power clock, fake_nvml_set_power_timeline, or
 * FAKE_NVML_POWER_W; 300 W by default), which nvmlDeviceGetPowerUsage reports
 * as it is now. nvmlDeviceGetTotalEnergyConsumption reports the millijoules
 * since the driver loaded: its base (5,000,000 mJ) plus the power integrated
 * up to the last whole quantum (100 ms) of the power clock, so the counter
 * moves in steps, as a real one that updates every 20 to 100 ms.
 * fake_nvml_reload_driver starts every counter again from zero, as a driver
 * reload does. The power clock starts with the library's state and is never
 * restarted by fake_nvml_start_timeline; fake_nvml_power_clock_ns reads it.
 * A MIG instance answers NOT_SUPPORTED for both: the counter is the GPU's.
 *
 * Clock event reasons: nvmlDeviceGetCurrentClocksEventReasons (and the older
 * nvmlDeviceGetCurrentClocksThrottleReasons) report the bits set by
 * fake_nvml_set_clocks_event_reasons (none by default), and
 * nvmlDeviceGetClockInfo(NVML_CLOCK_SM) the SM clock of fake_nvml_set_sm_clock
 * (1980 MHz by default). The live file scripts them too: lines "power <device>
 * <milliwatts>", "reasons <device> <bits>" and "sm_clock <device> <mhz>".
 *
 * Build with -DFAKE_NVML_NO_PROCESS_QUERIES to leave out the two process
 * query symbols, as a driver that lacks them would.
 *
 * Every function is safe to call from several threads; one mutex guards the
 * state. NULL output pointers give NVML_ERROR_INVALID_ARGUMENT.
 */

#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FAKE_EXPORT __attribute__((visibility("default")))

/* ---- NVML ABI (matches nvml-wrapper-sys 0.10 bindings.rs) ---- */

typedef int nvmlReturn_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NO_PERMISSION 4
#define NVML_ERROR_ALREADY_INITIALIZED 5
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_INSUFFICIENT_POWER 8
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_TIMEOUT 10
#define NVML_ERROR_IRQ_ISSUE 11
#define NVML_ERROR_LIBRARY_NOT_FOUND 12
#define NVML_ERROR_FUNCTION_NOT_FOUND 13
#define NVML_ERROR_CORRUPTED_INFOROM 14
#define NVML_ERROR_GPU_IS_LOST 15
#define NVML_ERROR_RESET_REQUIRED 16
#define NVML_ERROR_OPERATING_SYSTEM 17
#define NVML_ERROR_LIB_RM_VERSION_MISMATCH 18
#define NVML_ERROR_IN_USE 19
#define NVML_ERROR_MEMORY 20
#define NVML_ERROR_NO_DATA 21
#define NVML_ERROR_VGPU_ECC_NOT_SUPPORTED 22
#define NVML_ERROR_INSUFFICIENT_RESOURCES 23
#define NVML_ERROR_FREQ_NOT_SUPPORTED 24
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25
#define NVML_ERROR_DEPRECATED 26
#define NVML_ERROR_NOT_READY 27
#define NVML_ERROR_GPU_NOT_FOUND 28
#define NVML_ERROR_INVALID_STATE 29
#define NVML_ERROR_UNKNOWN 999

typedef struct nvmlMemory_st {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

/* NVML_STRUCT_VERSION(Memory, 2) */
#define nvmlMemory_v2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

typedef struct nvmlUtilization_st {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

/* nvmlProcessInfo_t as used by the *_v3 process queries (nvmlProcessInfo_v2_st). */
typedef struct nvmlProcessInfo_st {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

#define FAKE_NO_INSTANCE_ID 0xFFFFFFFFu

/* Buffer sizes from nvml.h */
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96

/* ---- fake state ---- */

#define FAKE_MAX_DEVICES 16u
/* MIG instances per GPU, as an A100 or H100 has at most. Instance m of GPU g is
 * the device slot FAKE_MAX_DEVICES + g * FAKE_MAX_MIG + m (fake_nvml_mig_slot):
 * every per-device control function, error and latency takes such a slot. */
#define FAKE_MAX_MIG 7u
#define FAKE_SLOTS (FAKE_MAX_DEVICES + FAKE_MAX_DEVICES * FAKE_MAX_MIG)
#define FAKE_MAX_PROCESSES 256u
#define FAKE_MAX_ERRORS 64u
#define FAKE_FN_NAME_MAX 64

#define FAKE_MIB (1024ull * 1024ull)
#define FAKE_DEFAULT_TOTAL_MIB 143771ull
#define FAKE_DEFAULT_USED_MIB 1024ull

#define FAKE_DRIVER_VERSION "570.86.15"
#define FAKE_NVML_VERSION "12.570.86.15"
#define FAKE_CUDA_DRIVER_VERSION 12080
#define FAKE_DEFAULT_NAME "NVIDIA H200 (fake)"

#define FAKE_DEFAULT_POWER_MW 300000ull
#define FAKE_DEFAULT_ENERGY_BASE_MJ 5000000ull
#define FAKE_DEFAULT_SM_MHZ 1980u
/* How often the energy counter moves: it holds the integral up to the last quantum. */
#define FAKE_ENERGY_QUANTUM_NS 100000000ull
#define NVML_CLOCK_SM 1

typedef struct fake_process {
    unsigned int pid;
    unsigned long long used;
} fake_process;

typedef struct fake_point {
    unsigned long long at_ns;
    unsigned long long used;
} fake_point;

/* The opaque nvmlDevice_t handed out is a pointer to one of these. */
typedef struct nvmlDevice_st {
    unsigned int index; /* a MIG instance: its GPU's */
    int is_mig;         /* this slot is a MIG instance */
    unsigned int mig;   /* its index on the GPU */
    int mig_mode;       /* a GPU: MIG mode on */
    unsigned int mig_count; /* a GPU in MIG mode: instances 0..mig_count-1 */
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    unsigned long long total;
    unsigned long long used;
    unsigned int util_gpu;
    unsigned int util_memory;
    int follow_rss;
    fake_process compute[FAKE_MAX_PROCESSES];
    unsigned int compute_count;
    fake_process graphics[FAKE_MAX_PROCESSES];
    unsigned int graphics_count;
    fake_point *timeline;
    unsigned int timeline_count;
    int accounting;
    fake_process accounted[FAKE_MAX_PROCESSES]; /* pid and its highest usage */
    unsigned int accounted_count;
    unsigned long long power_mw; /* before the power timeline's first point */
    fake_point *power;           /* at_ns on the power clock, used = milliwatts */
    unsigned int power_count;
    unsigned long long energy_base_mj; /* the counter at energy_origin_ns */
    unsigned long long energy_origin_ns; /* on the power clock: load or last reload */
    unsigned long long clock_reasons;
    unsigned int sm_mhz;
} *nvmlDevice_t;

/* nvmlAccountingStats_t (nvmlAccountingStats_st). */
typedef struct nvmlAccountingStats_st {
    unsigned int gpuUtilization;
    unsigned int memoryUtilization;
    unsigned long long maxMemoryUsage;
    unsigned long long time;
    unsigned long long startTime;
    unsigned int isRunning;
    unsigned int reserved[5];
} nvmlAccountingStats_t;

typedef struct fake_error {
    char name[FAKE_FN_NAME_MAX];
    int dev;
    int code;
} fake_error;

/* Every function that counts its calls and accepts injected errors. */
enum {
    F_nvmlInit_v2,
    F_nvmlInitWithFlags,
    F_nvmlShutdown,
    F_nvmlErrorString,
    F_nvmlSystemGetDriverVersion,
    F_nvmlSystemGetNVMLVersion,
    F_nvmlSystemGetCudaDriverVersion,
    F_nvmlSystemGetCudaDriverVersion_v2,
    F_nvmlDeviceGetCount_v2,
    F_nvmlDeviceGetHandleByIndex_v2,
    F_nvmlDeviceGetHandleByUUID,
    F_nvmlDeviceGetName,
    F_nvmlDeviceGetUUID,
    F_nvmlDeviceGetIndex,
    F_nvmlDeviceGetMemoryInfo,
    F_nvmlDeviceGetMemoryInfo_v2,
    F_nvmlDeviceGetUtilizationRates,
    F_nvmlDeviceGetComputeRunningProcesses_v3,
    F_nvmlDeviceGetGraphicsRunningProcesses_v3,
    F_nvmlDeviceGetAccountingMode,
    F_nvmlDeviceGetAccountingStats,
    F_nvmlDeviceGetMigMode,
    F_nvmlDeviceGetMaxMigDeviceCount,
    F_nvmlDeviceGetMigDeviceHandleByIndex,
    F_nvmlDeviceIsMigDeviceHandle,
    F_nvmlDeviceGetDeviceHandleFromMigDeviceHandle,
    F_nvmlDeviceGetTotalEnergyConsumption,
    F_nvmlDeviceGetPowerUsage,
    F_nvmlDeviceGetCurrentClocksEventReasons,
    F_nvmlDeviceGetCurrentClocksThrottleReasons,
    F_nvmlDeviceGetClockInfo,
    F_COUNT
};

static const char *const fn_names[F_COUNT] = {
    "nvmlInit_v2",
    "nvmlInitWithFlags",
    "nvmlShutdown",
    "nvmlErrorString",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetNVMLVersion",
    "nvmlSystemGetCudaDriverVersion",
    "nvmlSystemGetCudaDriverVersion_v2",
    "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetAccountingMode",
    "nvmlDeviceGetAccountingStats",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceIsMigDeviceHandle",
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetClockInfo",
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_defaults_done;   /* state holds its defaults */
static int g_controlled;      /* a control function changed the state */
static int g_env_applied;     /* the environment has been read */
static unsigned int g_init_count;
static unsigned int g_device_count;
static struct nvmlDevice_st g_devices[FAKE_SLOTS];
static fake_error g_errors[FAKE_MAX_ERRORS];
static unsigned int g_error_count;
static unsigned long long g_calls[F_COUNT];
static unsigned long long g_timeline_start_ns;
static unsigned long long g_power_start_ns; /* the power clock's zero */
static char g_live_file[4096]; /* FAKE_NVML_LIVE_FILE, empty when unset */
/* Per-call latency of each entry point, in us; read without the state mutex. */
static volatile unsigned int g_latency_us[F_COUNT];
/* The "driver lock" the process-list calls hold while they pay their latency. */
static pthread_mutex_t g_driver_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long g_driver_lock_held_ns; /* __atomic access only */

static unsigned long long now_ns(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) {
        return 0;
    }
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

static void copy_str(char *dst, size_t cap, const char *src) {
    size_t n = strlen(src);
    if (n >= cap) {
        n = cap - 1;
    }
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* The default size of one MIG instance: a 1g.18gb slice of an H200. */
#define FAKE_DEFAULT_MIG_TOTAL_MIB 16384ull

static void reset_device_locked(unsigned int i) {
    struct nvmlDevice_st *d = &g_devices[i];
    free(d->timeline);
    free(d->power);
    memset(d, 0, sizeof(*d));
    d->power_mw = FAKE_DEFAULT_POWER_MW;
    d->energy_base_mj = FAKE_DEFAULT_ENERGY_BASE_MJ;
    d->sm_mhz = FAKE_DEFAULT_SM_MHZ;
    if (i < FAKE_MAX_DEVICES) {
        d->index = i;
        copy_str(d->name, sizeof(d->name), FAKE_DEFAULT_NAME);
        snprintf(d->uuid, sizeof(d->uuid), "GPU-00000000-0000-0000-0000-%012u", i);
        d->total = FAKE_DEFAULT_TOTAL_MIB * FAKE_MIB;
    } else {
        unsigned int gpu = (i - FAKE_MAX_DEVICES) / FAKE_MAX_MIG;
        d->is_mig = 1;
        d->index = gpu;
        d->mig = (i - FAKE_MAX_DEVICES) % FAKE_MAX_MIG;
        snprintf(d->name, sizeof(d->name), "%s MIG 1g.18gb", FAKE_DEFAULT_NAME);
        snprintf(d->uuid, sizeof(d->uuid), "MIG-00000000-0000-0000-%04u-%012u", gpu, d->mig);
        d->total = FAKE_DEFAULT_MIG_TOTAL_MIB * FAKE_MIB;
    }
    d->used = FAKE_DEFAULT_USED_MIB * FAKE_MIB;
}

static unsigned int mig_slot(unsigned int gpu, unsigned int mig) {
    return FAKE_MAX_DEVICES + gpu * FAKE_MAX_MIG + mig;
}

/* GPU dev in MIG mode with count instances of total bytes each (count -1: out of it). */
static void set_mig_locked(unsigned int dev, int count, unsigned long long total) {
    g_devices[dev].mig_mode = count >= 0;
    g_devices[dev].mig_count = count > 0 ? (unsigned int)count : 0;
    for (unsigned int m = 0; m < FAKE_MAX_MIG; m++) {
        g_devices[mig_slot(dev, m)].total = total;
    }
}

static void reset_locked(void) {
    for (unsigned int i = 0; i < FAKE_SLOTS; i++) {
        reset_device_locked(i);
    }
    g_device_count = 1;
    g_error_count = 0;
    memset(g_calls, 0, sizeof(g_calls));
    for (int f = 0; f < F_COUNT; f++) {
        g_latency_us[f] = 0;
    }
    __atomic_store_n(&g_driver_lock_held_ns, 0ull, __ATOMIC_RELAXED);
    g_timeline_start_ns = now_ns();
    g_power_start_ns = g_timeline_start_ns;
    g_live_file[0] = '\0';
    g_defaults_done = 1;
}

/* The accounting entry of pid on d, made when missing; NULL when the table is full. */
static fake_process *accounted_locked(struct nvmlDevice_st *d, unsigned int pid) {
    for (unsigned int i = 0; i < d->accounted_count; i++) {
        if (d->accounted[i].pid == pid) {
            return &d->accounted[i];
        }
    }
    if (d->accounted_count == FAKE_MAX_PROCESSES) {
        return NULL;
    }
    fake_process *p = &d->accounted[d->accounted_count++];
    p->pid = pid;
    p->used = 0;
    return p;
}

/* Raises each compute process's accounted peak on d to what it holds now. */
static void account_locked(struct nvmlDevice_st *d) {
    for (unsigned int i = 0; i < d->compute_count; i++) {
        fake_process *p = accounted_locked(d, d->compute[i].pid);
        if (p != NULL && d->compute[i].used != ~0ull && d->compute[i].used > p->used) {
            p->used = d->compute[i].used;
        }
    }
}

/* Applies FAKE_NVML_LIVE_FILE, when set and readable (a file being replaced is
 * skipped this time, keeping the state of the last read). */
static void live_apply_locked(void) {
    if (g_live_file[0] == '\0') {
        return;
    }
    FILE *f = fopen(g_live_file, "r");
    if (f == NULL) {
        return;
    }
    for (unsigned int i = 0; i < FAKE_SLOTS; i++) {
        g_devices[i].compute_count = 0;
    }
    char line[256];
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long long bytes = 0;
        unsigned int dev = 0, pid = 0;
        if (sscanf(line, "used %u %llu", &dev, &bytes) == 2 && dev < FAKE_SLOTS) {
            g_devices[dev].used = bytes;
        } else if (sscanf(line, "power %u %llu", &dev, &bytes) == 2 && dev < FAKE_SLOTS) {
            g_devices[dev].power_mw = bytes;
        } else if (sscanf(line, "reasons %u %llu", &dev, &bytes) == 2 && dev < FAKE_SLOTS) {
            g_devices[dev].clock_reasons = bytes;
        } else if (sscanf(line, "sm_clock %u %llu", &dev, &bytes) == 2 && dev < FAKE_SLOTS) {
            g_devices[dev].sm_mhz = (unsigned int)bytes;
        } else if (sscanf(line, "process %u %u %llu", &pid, &dev, &bytes) == 3 &&
                   dev < FAKE_SLOTS && g_devices[dev].compute_count < FAKE_MAX_PROCESSES) {
            fake_process *p = &g_devices[dev].compute[g_devices[dev].compute_count++];
            p->pid = pid;
            p->used = bytes;
        }
    }
    fclose(f);
    for (unsigned int i = 0; i < FAKE_SLOTS; i++) {
        account_locked(&g_devices[i]);
    }
}

/* Takes the lock and makes sure the defaults are in place. */
static void lock_state(void) {
    pthread_mutex_lock(&g_lock);
    if (!g_defaults_done) {
        reset_locked();
    }
}

static void unlock_state(void) {
    pthread_mutex_unlock(&g_lock);
}

/* Called with the lock held by every control function that changes state. */
static void lock_control(void) {
    lock_state();
    g_controlled = 1;
}

static int fn_index(const char *name) {
    if (name == NULL) {
        return -1;
    }
    for (int i = 0; i < F_COUNT; i++) {
        if (strcmp(fn_names[i], name) == 0) {
            return i;
        }
    }
    return -1;
}

static int set_error_locked(const char *name, int dev, int code) {
    if (fn_index(name) < 0 || dev < -1) {
        return -1;
    }
    for (unsigned int i = 0; i < g_error_count; i++) {
        if (g_errors[i].dev == dev && strcmp(g_errors[i].name, name) == 0) {
            if (code == NVML_SUCCESS) {
                g_errors[i] = g_errors[g_error_count - 1];
                g_error_count--;
            } else {
                g_errors[i].code = code;
            }
            return 0;
        }
    }
    if (code == NVML_SUCCESS) {
        return 0;
    }
    if (g_error_count >= FAKE_MAX_ERRORS) {
        return -1;
    }
    copy_str(g_errors[g_error_count].name, FAKE_FN_NAME_MAX, name);
    g_errors[g_error_count].dev = dev;
    g_errors[g_error_count].code = code;
    g_error_count++;
    return 0;
}

/* The injected error for a call of function f on device dev (-1: none). */
static int injected_one_locked(int f, int dev) {
    const char *name = fn_names[f];
    int all = NVML_SUCCESS;
    for (unsigned int i = 0; i < g_error_count; i++) {
        if (strcmp(g_errors[i].name, name) != 0) {
            continue;
        }
        if (dev >= 0 && g_errors[i].dev == dev) {
            return g_errors[i].code;
        }
        if (g_errors[i].dev == -1) {
            all = g_errors[i].code;
        }
    }
    return all;
}

/*
 * A versioned entry point also fails with the errors set for its base
 * function: nvmlInitWithFlags with those of nvmlInit_v2, and
 * nvmlDeviceGetMemoryInfo_v2 (what nvml-wrapper calls) with those of
 * nvmlDeviceGetMemoryInfo. Errors set for the exact name win.
 */
static int injected_locked(int f, int dev) {
    int rc = injected_one_locked(f, dev);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (f == F_nvmlInitWithFlags) {
        return injected_one_locked(F_nvmlInit_v2, dev);
    }
    if (f == F_nvmlDeviceGetMemoryInfo_v2) {
        return injected_one_locked(F_nvmlDeviceGetMemoryInfo, dev);
    }
    return NVML_SUCCESS;
}

static int set_points_locked(unsigned int dev, const fake_point *points, unsigned int count) {
    struct nvmlDevice_st *d = &g_devices[dev];
    fake_point *copy = NULL;
    if (count > 0) {
        copy = malloc(sizeof(fake_point) * count);
        if (copy == NULL) {
            return -1;
        }
        memcpy(copy, points, sizeof(fake_point) * count);
    }
    free(d->timeline);
    d->timeline = copy;
    d->timeline_count = count;
    return 0;
}

static unsigned long long rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size = 0, resident = 0;
    if (f == NULL) {
        return 0;
    }
    if (fscanf(f, "%llu %llu", &size, &resident) != 2) {
        resident = 0;
    }
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) {
        page = 4096;
    }
    return resident * (unsigned long long)page;
}

/* Used memory of a device as a read at this moment sees it. */
static unsigned long long used_now_locked(const struct nvmlDevice_st *d) {
    if (d->timeline_count > 0) {
        unsigned long long now = now_ns();
        unsigned long long elapsed = now >= g_timeline_start_ns ? now - g_timeline_start_ns : 0;
        int found = 0;
        unsigned long long best_at = 0, best_used = 0;
        for (unsigned int i = 0; i < d->timeline_count; i++) {
            const fake_point *p = &d->timeline[i];
            if (p->at_ns <= elapsed && (!found || p->at_ns >= best_at)) {
                found = 1;
                best_at = p->at_ns;
                best_used = p->used;
            }
        }
        if (found) {
            return best_used;
        }
    }
    if (d->follow_rss) {
        return d->used + rss_bytes();
    }
    return d->used;
}

/* Nanoseconds on the power clock now. */
static unsigned long long power_clock_locked(void) {
    unsigned long long now = now_ns();
    return now >= g_power_start_ns ? now - g_power_start_ns : 0;
}

/* The power d draws at `at` on the power clock, in mW: the timeline's latest
 * point at or before it, else the set power. */
static unsigned long long power_at_locked(const struct nvmlDevice_st *d, unsigned long long at) {
    int found = 0;
    unsigned long long best_at = 0, best = d->power_mw;
    for (unsigned int i = 0; i < d->power_count; i++) {
        const fake_point *p = &d->power[i];
        if (p->at_ns <= at && (!found || p->at_ns >= best_at)) {
            found = 1;
            best_at = p->at_ns;
            best = p->used;
        }
    }
    return best;
}

/* The first timeline point of d after `at`, or `limit` when none comes before it. */
static unsigned long long next_power_change_locked(const struct nvmlDevice_st *d, unsigned long long at,
                                                   unsigned long long limit) {
    unsigned long long next = limit;
    for (unsigned int i = 0; i < d->power_count; i++) {
        if (d->power[i].at_ns > at && d->power[i].at_ns < next) {
            next = d->power[i].at_ns;
        }
    }
    return next;
}

/* The energy d drew from `from` to `to` on the power clock, in mW x ns. */
static unsigned __int128 power_integral_locked(const struct nvmlDevice_st *d, unsigned long long from,
                                               unsigned long long to) {
    unsigned __int128 sum = 0;
    unsigned long long at = from;
    while (at < to) {
        unsigned long long next = next_power_change_locked(d, at, to);
        sum += (unsigned __int128)power_at_locked(d, at) * (next - at);
        at = next;
    }
    return sum;
}

/* The energy counter of d as a read now sees it, in mJ: it moves once a quantum. */
static unsigned long long energy_now_locked(const struct nvmlDevice_st *d) {
    unsigned long long quantum = power_clock_locked() / FAKE_ENERGY_QUANTUM_NS * FAKE_ENERGY_QUANTUM_NS;
    if (quantum <= d->energy_origin_ns) {
        return d->energy_base_mj;
    }
    return d->energy_base_mj +
           (unsigned long long)(power_integral_locked(d, d->energy_origin_ns, quantum) / 1000000000u);
}

/* ---- environment ---- */

static int env_ull(const char *name, unsigned long long *out) {
    const char *v = getenv(name);
    char *end = NULL;
    if (v == NULL || *v == '\0') {
        return 0;
    }
    unsigned long long x = strtoull(v, &end, 10);
    if (end == v) {
        return 0;
    }
    *out = x;
    return 1;
}

static void env_timeline_locked(const char *path) {
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "fake libnvidia-ml: cannot read FAKE_NVML_TIMELINE file %s\n", path);
        return;
    }
    fake_point *points[FAKE_SLOTS] = {0};
    unsigned int counts[FAKE_SLOTS] = {0};
    unsigned int caps[FAKE_SLOTS] = {0};
    char line[512];
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long long at_ms = 0, used = 0;
        unsigned int dev = 0;
        char *p = line;
        while (*p == ' ' || *p == '\t') {
            p++;
        }
        if (*p == '#' || *p == '\n' || *p == '\r' || *p == '\0') {
            continue;
        }
        if (sscanf(p, "%llu %u %llu", &at_ms, &dev, &used) != 3 || dev >= FAKE_SLOTS) {
            continue;
        }
        if (counts[dev] == caps[dev]) {
            unsigned int cap = caps[dev] ? caps[dev] * 2 : 64;
            fake_point *grown = realloc(points[dev], sizeof(fake_point) * cap);
            if (grown == NULL) {
                continue;
            }
            points[dev] = grown;
            caps[dev] = cap;
        }
        points[dev][counts[dev]].at_ns = at_ms * 1000000ull;
        points[dev][counts[dev]].used = used;
        counts[dev]++;
    }
    fclose(f);
    for (unsigned int dev = 0; dev < FAKE_SLOTS; dev++) {
        if (counts[dev] > 0) {
            set_points_locked(dev, points[dev], counts[dev]);
        }
        free(points[dev]);
    }
}

/* Applies every "name:value" entry of spec, a comma-separated list in the
 * variable var, with apply(name, value); says which entry is malformed. */
static void env_entries_locked(const char *var, const char *spec, void (*apply)(const char *, char *)) {
    char *copy = strdup(spec);
    char *save = NULL;
    if (copy == NULL) {
        return;
    }
    for (char *item = strtok_r(copy, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save)) {
        while (*item == ' ') {
            item++;
        }
        char *colon = strchr(item, ':');
        if (colon == NULL) {
            fprintf(stderr, "fake libnvidia-ml: %s entry '%s' is not name:value\n", var, item);
            continue;
        }
        *colon = '\0';
        apply(item, colon + 1);
    }
    free(copy);
}

/* FAKE_NVML_FAIL's "name:code[:device]". */
static void env_fail_entry(const char *name, char *rest) {
    int dev = -1;
    char *colon = strchr(rest, ':');
    if (colon != NULL) {
        *colon = '\0';
        dev = atoi(colon + 1);
    }
    if (set_error_locked(name, dev, atoi(rest)) != 0) {
        fprintf(stderr, "fake libnvidia-ml: FAKE_NVML_FAIL names unknown function '%s'\n", name);
    }
}

/* FAKE_NVML_MIG's "gpu:count[:total_mib]". */
static void env_mig_entry(const char *gpu, char *rest) {
    unsigned int dev = (unsigned int)strtoul(gpu, NULL, 10);
    char *colon = strchr(rest, ':');
    unsigned long long total = FAKE_DEFAULT_MIG_TOTAL_MIB;
    if (colon != NULL) {
        *colon = '\0';
        total = strtoull(colon + 1, NULL, 10);
    }
    unsigned int count = (unsigned int)strtoul(rest, NULL, 10);
    if (dev >= FAKE_MAX_DEVICES || count > FAKE_MAX_MIG) {
        fprintf(stderr, "fake libnvidia-ml: FAKE_NVML_MIG entry '%s:%s' is out of range\n", gpu, rest);
        return;
    }
    set_mig_locked(dev, (int)count, total * FAKE_MIB);
}

/* FAKE_NVML_LATENCY_US's "name:us". */
static void env_latency_entry(const char *name, char *us) {
    int f = fn_index(name);
    if (f < 0) {
        fprintf(stderr, "fake libnvidia-ml: FAKE_NVML_LATENCY_US names unknown function '%s'\n", name);
        return;
    }
    g_latency_us[f] = (unsigned int)strtoul(us, NULL, 10);
}

/* What a real driver's calls cost, in us: a memory read about 12, utilization about 20,
 * a process list 4.5 ms (holding the driver's lock). fake_nvml_set_realistic_latencies
 * sets them, and so does GPUSPAN_TEST_FAKE_LATENCY=realistic at the first nvmlInit, so
 * that the test suite can run every fake, its child processes' included, at these costs. */
static const struct {
    int f;
    unsigned int us;
} k_realistic[] = {
    {F_nvmlDeviceGetMemoryInfo_v2, 12},
    {F_nvmlDeviceGetUtilizationRates, 20},
    {F_nvmlDeviceGetComputeRunningProcesses_v3, 4500},
    {F_nvmlDeviceGetGraphicsRunningProcesses_v3, 4500},
};

static void realistic_latencies(void) {
    for (size_t i = 0; i < sizeof(k_realistic) / sizeof(k_realistic[0]); i++) {
        g_latency_us[k_realistic[i].f] = k_realistic[i].us;
    }
}

static void apply_env_locked(void) {
    unsigned long long x = 0;
    const char *s;
    g_env_applied = 1;
    if (env_ull("FAKE_NVML_DEVICES", &x)) {
        g_device_count = x > FAKE_MAX_DEVICES ? FAKE_MAX_DEVICES : (unsigned int)x;
    }
    if (env_ull("FAKE_NVML_TOTAL_MIB", &x)) {
        for (unsigned int i = 0; i < FAKE_MAX_DEVICES; i++) {
            g_devices[i].total = x * FAKE_MIB;
        }
    }
    if (env_ull("FAKE_NVML_USED_MIB", &x)) {
        for (unsigned int i = 0; i < FAKE_SLOTS; i++) {
            g_devices[i].used = x * FAKE_MIB;
        }
    }
    if (env_ull("FAKE_NVML_PROCESS_MIB", &x)) {
        const char *slot_text = strchr(getenv("FAKE_NVML_PROCESS_MIB"), ':');
        unsigned long slot = slot_text != NULL ? strtoul(slot_text + 1, NULL, 10) : 0;
        struct nvmlDevice_st *d = &g_devices[slot < FAKE_SLOTS ? slot : 0];
        d->compute[0].pid = (unsigned int)getpid();
        d->compute[0].used = x * FAKE_MIB;
        d->compute_count = 1;
        account_locked(d);
    }
    s = getenv("FAKE_NVML_ACCOUNTING");
    if (s != NULL && strcmp(s, "1") == 0) {
        for (unsigned int i = 0; i < FAKE_MAX_DEVICES; i++) {
            g_devices[i].accounting = 1;
        }
    }
    if (env_ull("FAKE_NVML_ACCOUNTED_PEAK_MIB", &x)) {
        fake_process *p = accounted_locked(&g_devices[0], (unsigned int)getpid());
        if (p != NULL && x * FAKE_MIB > p->used) {
            p->used = x * FAKE_MIB;
        }
    }
    if (env_ull("FAKE_NVML_POWER_W", &x)) {
        for (unsigned int i = 0; i < FAKE_SLOTS; i++) {
            g_devices[i].power_mw = x * 1000ull;
        }
    }
    s = getenv("FAKE_NVML_FOLLOW_RSS");
    if (s != NULL && strcmp(s, "1") == 0) {
        g_devices[0].follow_rss = 1;
    }
    s = getenv("FAKE_NVML_MIG");
    if (s != NULL && *s != '\0') {
        env_entries_locked("FAKE_NVML_MIG", s, env_mig_entry);
    }
    s = getenv("FAKE_NVML_FAIL");
    if (s != NULL && *s != '\0') {
        env_entries_locked("FAKE_NVML_FAIL", s, env_fail_entry);
    }
    s = getenv("FAKE_NVML_TIMELINE");
    if (s != NULL && *s != '\0') {
        env_timeline_locked(s);
    }
    s = getenv("GPUSPAN_TEST_FAKE_LATENCY");
    if (s != NULL && strcmp(s, "realistic") == 0) {
        realistic_latencies();
    }
    s = getenv("FAKE_NVML_LATENCY_US");
    if (s != NULL && *s != '\0') {
        env_entries_locked("FAKE_NVML_LATENCY_US", s, env_latency_entry);
    }
    s = getenv("FAKE_NVML_LIVE_FILE");
    if (s != NULL && strlen(s) < sizeof(g_live_file)) {
        strcpy(g_live_file, s);
    }
    g_timeline_start_ns = now_ns();
}

/* ---- NVML entry points ---- */

static nvmlReturn_t do_init(int f) {
    lock_state();
    g_calls[f]++;
    if (!g_env_applied && !g_controlled) {
        apply_env_locked();
    }
    int rc = injected_locked(f, -1);
    if (rc == NVML_SUCCESS) {
        g_init_count++;
    }
    unlock_state();
    return rc;
}

FAKE_EXPORT nvmlReturn_t nvmlInit_v2(void) {
    return do_init(F_nvmlInit_v2);
}

FAKE_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return do_init(F_nvmlInitWithFlags);
}

FAKE_EXPORT nvmlReturn_t nvmlShutdown(void) {
    lock_state();
    g_calls[F_nvmlShutdown]++;
    int rc = injected_locked(F_nvmlShutdown, -1);
    if (rc == NVML_SUCCESS) {
        if (g_init_count == 0) {
            rc = NVML_ERROR_UNINITIALIZED;
        } else {
            g_init_count--;
        }
    }
    unlock_state();
    return rc;
}

FAKE_EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    lock_state();
    g_calls[F_nvmlErrorString]++;
    unlock_state();
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED: return "Not supported when ECC is enabled";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient resources";
    case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Frequency not supported";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED: return "Deprecated";
    case NVML_ERROR_NOT_READY: return "Not ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    case NVML_ERROR_INVALID_STATE: return "Invalid state";
    default: return "Unknown Error";
    }
}

/* Counts the call, then checks injected errors and initialisation. */
static int enter_locked(int f, int dev) {
    g_calls[f]++;
    int rc = injected_locked(f, dev);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (g_init_count == 0) {
        return NVML_ERROR_UNINITIALIZED;
    }
    return NVML_SUCCESS;
}

static nvmlReturn_t put_string(char *buf, unsigned int length, const char *value) {
    if (buf == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if ((size_t)length < strlen(value) + 1) {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memcpy(buf, value, strlen(value) + 1);
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    lock_state();
    int rc = enter_locked(F_nvmlSystemGetDriverVersion, -1);
    if (rc == NVML_SUCCESS) {
        rc = put_string(version, length, FAKE_DRIVER_VERSION);
    }
    unlock_state();
    return rc;
}

FAKE_EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    lock_state();
    /* Real NVML answers this one without nvmlInit. */
    g_calls[F_nvmlSystemGetNVMLVersion]++;
    int rc = injected_locked(F_nvmlSystemGetNVMLVersion, -1);
    if (rc == NVML_SUCCESS) {
        rc = put_string(version, length, FAKE_NVML_VERSION);
    }
    unlock_state();
    return rc;
}

static nvmlReturn_t cuda_version(int f, int *out) {
    lock_state();
    g_calls[f]++;
    int rc = injected_locked(f, -1);
    if (rc == NVML_SUCCESS) {
        if (out == NULL) {
            rc = NVML_ERROR_INVALID_ARGUMENT;
        } else {
            *out = FAKE_CUDA_DRIVER_VERSION;
        }
    }
    unlock_state();
    return rc;
}

FAKE_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion) {
    return cuda_version(F_nvmlSystemGetCudaDriverVersion, cudaDriverVersion);
}

FAKE_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion) {
    return cuda_version(F_nvmlSystemGetCudaDriverVersion_v2, cudaDriverVersion);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
    lock_state();
    int rc = enter_locked(F_nvmlDeviceGetCount_v2, -1);
    if (rc == NVML_SUCCESS) {
        if (deviceCount == NULL) {
            rc = NVML_ERROR_INVALID_ARGUMENT;
        } else {
            *deviceCount = g_device_count;
        }
    }
    unlock_state();
    return rc;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    lock_state();
    int rc = enter_locked(F_nvmlDeviceGetHandleByIndex_v2, index < FAKE_MAX_DEVICES ? (int)index : -1);
    if (rc == NVML_SUCCESS) {
        if (device == NULL || index >= g_device_count) {
            rc = NVML_ERROR_INVALID_ARGUMENT;
        } else {
            *device = &g_devices[index];
        }
    }
    unlock_state();
    return rc;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    lock_state();
    int found = -1;
    if (uuid != NULL) {
        for (unsigned int i = 0; i < g_device_count; i++) {
            if (strcmp(g_devices[i].uuid, uuid) == 0) {
                found = (int)i;
                break;
            }
        }
    }
    int rc = enter_locked(F_nvmlDeviceGetHandleByUUID, found);
    if (rc == NVML_SUCCESS) {
        if (uuid == NULL || device == NULL) {
            rc = NVML_ERROR_INVALID_ARGUMENT;
        } else if (found < 0) {
            rc = NVML_ERROR_NOT_FOUND;
        } else {
            *device = &g_devices[found];
        }
    }
    unlock_state();
    return rc;
}

/* Takes as long as a call of f is set to take (see "Latency" at the top). */
static void pay_latency(int f) {
    unsigned int us = g_latency_us[f];
    if (us == 0) {
        return;
    }
    unsigned long long until = now_ns() + (unsigned long long)us * 1000ull;
    if (us >= 200) {
        struct timespec ts = {(time_t)(us / 1000000u), (long)(us % 1000000u) * 1000l};
        while (nanosleep(&ts, &ts) != 0) {
        }
    }
    while (now_ns() < until) {
    }
}

/* Slot of a handle that this library handed out and that is valid now, or -1:
 * a GPU within the device count, or an instance of such a GPU in MIG mode. */
static int handle_index_locked(nvmlDevice_t device) {
    if (device < &g_devices[0] || device >= &g_devices[FAKE_SLOTS]) {
        return -1;
    }
    unsigned int i = (unsigned int)(device - &g_devices[0]);
    if (i < FAKE_MAX_DEVICES) {
        return i < g_device_count ? (int)i : -1;
    }
    const struct nvmlDevice_st *gpu = &g_devices[device->index];
    if (device->index >= g_device_count || !gpu->mig_mode || device->mig >= gpu->mig_count) {
        return -1;
    }
    return (int)i;
}

/*
 * Common prologue of the per-device queries: lock, count, injected error,
 * initialisation, handle check, and the call's output `out` given. On
 * NVML_SUCCESS the lock is still held and *dev holds the device; otherwise the
 * lock has been released.
 */
static nvmlReturn_t enter_device(int f, nvmlDevice_t device, const void *out, struct nvmlDevice_st **dev) {
    pay_latency(f);
    lock_state();
    int idx = handle_index_locked(device);
    int rc = enter_locked(f, idx);
    if (rc == NVML_SUCCESS && (idx < 0 || out == NULL)) {
        rc = NVML_ERROR_INVALID_ARGUMENT;
    }
    if (rc != NVML_SUCCESS) {
        unlock_state();
        return rc;
    }
    live_apply_locked();
    *dev = &g_devices[idx];
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    struct nvmlDevice_st *d = NULL;
    int rc = enter_device(F_nvmlDeviceGetName, device, name, &d);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    rc = put_string(name, length, d->name);
    unlock_state();
    return rc;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    struct nvmlDevice_st *d = NULL;
    int rc = enter_device(F_nvmlDeviceGetUUID, device, uuid, &d);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    rc = put_string(uuid, length, d->uuid);
    unlock_state();
    return rc;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    struct nvmlDevice_st *d = NULL;
    int rc = enter_device(F_nvmlDeviceGetIndex, device, index, &d);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    *index = d->index;
    unlock_state();
    return rc;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    struct nvmlDevice_st *d = NULL;
    int rc = enter_device(F_nvmlDeviceGetMemoryInfo, device, memory, &d);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    unsigned long long used = used_now_locked(d);
    memory->total = d->total;
    memory->used = used;
    memory->free = d->total > used ? d->total - used : 0;
    unlock_state();
    return rc;
}

/* Milliseconds every memory read blocks for before it starts, as a driver call on a GPU
 * that fell off the bus can: 0 (the default) for none. Read without the lock on purpose. */
static volatile unsigned int g_hang_ms;

FAKE_EXPORT void fake_nvml_set_hang(unsigned int ms) {
    g_hang_ms = ms;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    struct nvmlDevice_st *d = NULL;
    if (g_hang_ms > 0) {
        usleep((useconds_t)g_hang_ms * 1000u);
    }
    int rc = enter_device(F_nvmlDeviceGetMemoryInfo_v2, device, memory, &d);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (memory->version != nvmlMemory_v2) {
        rc = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    } else {
        unsigned long long used = used_now_locked(d);
        memory->total = d->total;
        memory->reserved = 0;
        memory->used = used;
        memory->free = d->total > used ? d->total - used : 0;
    }
    unlock_state();
    return rc;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    struct nvmlDevice_st *d = NULL;
    int rc = enter_device(F_nvmlDeviceGetUtilizationRates, device, utilization, &d);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (d->is_mig) {
        /* NVML has no utilization counters per MIG instance. */
        unlock_state();
        return NVML_ERROR_NOT_SUPPORTED;
    }
    utilization->gpu = d->util_gpu;
    utilization->memory = d->util_memory;
    unlock_state();
    return rc;
}

/* Whether d keeps accounting: as NVML, never on a GPU in MIG mode or its
 * instances, whatever was asked. */
static int accounting_locked(const struct nvmlDevice_st *d) {
    return d->accounting && !d->mig_mode && d < &g_devices[FAKE_MAX_DEVICES];
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetAccountingMode(nvmlDevice_t device, int *mode) {
    struct nvmlDevice_st *d = NULL;
    int rc = enter_device(F_nvmlDeviceGetAccountingMode, device, mode, &d);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    *mode = accounting_locked(d); /* NVML_FEATURE_ENABLED is 1, DISABLED 0 */
    unlock_state();
    return rc;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetAccountingStats(nvmlDevice_t device, unsigned int pid,
                                                      nvmlAccountingStats_t *stats) {
    struct nvmlDevice_st *d = NULL;
    int rc = enter_device(F_nvmlDeviceGetAccountingStats, device, stats, &d);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    fake_process *found = NULL;
    for (unsigned int i = 0; i < d->accounted_count; i++) {
        if (d->accounted[i].pid == pid) {
            found = &d->accounted[i];
        }
    }
    if (!accounting_locked(d)) {
        rc = NVML_ERROR_NOT_SUPPORTED;
    } else if (found == NULL) {
        rc = NVML_ERROR_NOT_FOUND;
    } else {
        memset(stats, 0, sizeof(*stats));
        stats->gpuUtilization = d->util_gpu;
        stats->memoryUtilization = d->util_memory;
        stats->maxMemoryUsage = found->used;
        for (unsigned int i = 0; i < d->compute_count; i++) {
            if (d->compute[i].pid == pid) {
                stats->isRunning = 1;
            }
        }
    }
    unlock_state();
    return rc;
}

/* ---- MIG ----
 * A GPU in MIG mode (fake_nvml_set_mig, FAKE_NVML_MIG) has instances
 * 0..count-1, each a device of its own with its own memory, processes and
 * UUID (MIG-...). Asked of a MIG handle, the mode queries fail with
 * INVALID_ARGUMENT, as NVML's do. */

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                              unsigned int *pendingMode) {
    struct nvmlDevice_st *d = NULL;
    int rc = enter_device(F_nvmlDeviceGetMigMode, device, currentMode, &d);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (d->is_mig || pendingMode == NULL) {
        rc = NVML_ERROR_INVALID_ARGUMENT;
    } else {
        *currentMode = d->mig_mode ? 1u : 0u;
        *pendingMode = *currentMode;
    }
    unlock_state();
    return rc;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    struct nvmlDevice_st *d = NULL;
    int rc = enter_device(F_nvmlDeviceGetMaxMigDeviceCount, device, count, &d);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (d->is_mig) {
        rc = NVML_ERROR_INVALID_ARGUMENT;
    } else {
        *count = FAKE_MAX_MIG;
    }
    unlock_state();
    return rc;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                             nvmlDevice_t *migDevice) {
    struct nvmlDevice_st *d = NULL;
    int rc = enter_device(F_nvmlDeviceGetMigDeviceHandleByIndex, device, migDevice, &d);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (d->is_mig || index >= FAKE_MAX_MIG) {
        rc = NVML_ERROR_INVALID_ARGUMENT;
    } else if (!d->mig_mode) {
        rc = NVML_ERROR_NOT_SUPPORTED;
    } else if (index >= d->mig_count) {
        rc = NVML_ERROR_NOT_FOUND;
    } else {
        *migDevice = &g_devices[mig_slot(d->index, index)];
    }
    unlock_state();
    return rc;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
    struct nvmlDevice_st *d = NULL;
    int rc = enter_device(F_nvmlDeviceIsMigDeviceHandle, device, isMigDevice, &d);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    *isMigDevice = d->is_mig ? 1u : 0u;
    unlock_state();
    return rc;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                                      nvmlDevice_t *device) {
    struct nvmlDevice_st *d = NULL;
    int rc = enter_device(F_nvmlDeviceGetDeviceHandleFromMigDeviceHandle, migDevice, device, &d);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (!d->is_mig) {
        rc = NVML_ERROR_INVALID_ARGUMENT;
    } else {
        *device = &g_devices[d->index];
    }
    unlock_state();
    return rc;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy) {
    struct nvmlDevice_st *d = NULL;
    int rc = enter_device(F_nvmlDeviceGetTotalEnergyConsumption, device, energy, &d);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (d->is_mig) {
        rc = NVML_ERROR_NOT_SUPPORTED;
    } else {
        *energy = energy_now_locked(d);
    }
    unlock_state();
    return rc;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    struct nvmlDevice_st *d = NULL;
    int rc = enter_device(F_nvmlDeviceGetPowerUsage, device, power, &d);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (d->is_mig) {
        rc = NVML_ERROR_NOT_SUPPORTED;
    } else {
        *power = (unsigned int)power_at_locked(d, power_clock_locked());
    }
    unlock_state();
    return rc;
}

static nvmlReturn_t clocks_event_reasons(int f, nvmlDevice_t device, unsigned long long *reasons) {
    struct nvmlDevice_st *d = NULL;
    int rc = enter_device(f, device, reasons, &d);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    *reasons = d->clock_reasons;
    unlock_state();
    return rc;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons) {
    return clocks_event_reasons(F_nvmlDeviceGetCurrentClocksEventReasons, device, reasons);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                                   unsigned long long *reasons) {
    return clocks_event_reasons(F_nvmlDeviceGetCurrentClocksThrottleReasons, device, reasons);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int *clock) {
    struct nvmlDevice_st *d = NULL;
    int rc = enter_device(F_nvmlDeviceGetClockInfo, device, clock, &d);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (type != NVML_CLOCK_SM) {
        rc = NVML_ERROR_NOT_SUPPORTED;
    } else {
        *clock = d->sm_mhz;
    }
    unlock_state();
    return rc;
}

#ifndef FAKE_NVML_NO_PROCESS_QUERIES
/*
 * The NVML sizing protocol: when *infoCount is smaller than the number of
 * processes (a call with *infoCount == 0 and infos == NULL asks the count),
 * *infoCount becomes that number and the call fails with INSUFFICIENT_SIZE.
 */
static nvmlReturn_t list_processes_held(int f, nvmlDevice_t device, unsigned int *infoCount,
                                        nvmlProcessInfo_t *infos, int graphics);

/* A process list holds the driver lock for the whole call, latency included. */
static nvmlReturn_t list_processes(int f, nvmlDevice_t device, unsigned int *infoCount,
                                   nvmlProcessInfo_t *infos, int graphics) {
    pthread_mutex_lock(&g_driver_lock);
    unsigned long long since = now_ns();
    nvmlReturn_t rc = list_processes_held(f, device, infoCount, infos, graphics);
    __atomic_add_fetch(&g_driver_lock_held_ns, now_ns() - since, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&g_driver_lock);
    return rc;
}

static nvmlReturn_t list_processes_held(int f, nvmlDevice_t device, unsigned int *infoCount,
                                        nvmlProcessInfo_t *infos, int graphics) {
    struct nvmlDevice_st *d = NULL;
    int rc = enter_device(f, device, infoCount, &d);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    const fake_process *list = graphics ? d->graphics : d->compute;
    unsigned int n = graphics ? d->graphics_count : d->compute_count;
    if (*infoCount < n) {
        *infoCount = n;
        rc = NVML_ERROR_INSUFFICIENT_SIZE;
    } else if (n > 0 && infos == NULL) {
        rc = NVML_ERROR_INVALID_ARGUMENT;
    } else {
        for (unsigned int i = 0; i < n; i++) {
            infos[i].pid = list[i].pid;
            infos[i].usedGpuMemory = list[i].used;
            infos[i].gpuInstanceId = d->is_mig ? d->mig : FAKE_NO_INSTANCE_ID;
            infos[i].computeInstanceId = d->is_mig ? 0 : FAKE_NO_INSTANCE_ID;
        }
        *infoCount = n;
    }
    unlock_state();
    return rc;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                                 nvmlProcessInfo_t *infos) {
    return list_processes(F_nvmlDeviceGetComputeRunningProcesses_v3, device, infoCount, infos, 0);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                                  nvmlProcessInfo_t *infos) {
    return list_processes(F_nvmlDeviceGetGraphicsRunningProcesses_v3, device, infoCount, infos, 1);
}
#endif

/* ---- control functions ---- */
/* Functions returning int give 0 on success and -1 on a bad argument. */

/* Back to the defaults: 1 device, 143771 MiB total, 1024 MiB used, no
 * processes, errors, timelines or call counts. Env vars are then ignored
 * unless fake_nvml_load_env() is called. */
FAKE_EXPORT void fake_nvml_reset(void) {
    lock_control();
    reset_locked();
    unlock_state();
}

/* Reads the FAKE_NVML_* environment variables now, over the current state. */
FAKE_EXPORT void fake_nvml_load_env(void) {
    lock_control();
    apply_env_locked();
    unlock_state();
}

FAKE_EXPORT unsigned int fake_nvml_max_devices(void) {
    return FAKE_MAX_DEVICES;
}

FAKE_EXPORT int fake_nvml_set_device_count(unsigned int count) {
    if (count > FAKE_MAX_DEVICES) {
        return -1;
    }
    lock_control();
    g_device_count = count;
    unlock_state();
    return 0;
}

FAKE_EXPORT int fake_nvml_set_memory(unsigned int dev, unsigned long long used, unsigned long long total) {
    if (dev >= FAKE_SLOTS) {
        return -1;
    }
    lock_control();
    g_devices[dev].used = used;
    g_devices[dev].total = total;
    unlock_state();
    return 0;
}

FAKE_EXPORT int fake_nvml_set_utilization(unsigned int dev, unsigned int gpu, unsigned int memory) {
    if (dev >= FAKE_SLOTS) {
        return -1;
    }
    lock_control();
    g_devices[dev].util_gpu = gpu;
    g_devices[dev].util_memory = memory;
    unlock_state();
    return 0;
}

FAKE_EXPORT int fake_nvml_set_name(unsigned int dev, const char *name) {
    if (dev >= FAKE_SLOTS || name == NULL || strlen(name) >= NVML_DEVICE_NAME_V2_BUFFER_SIZE) {
        return -1;
    }
    lock_control();
    copy_str(g_devices[dev].name, sizeof(g_devices[dev].name), name);
    unlock_state();
    return 0;
}

static int set_process_list(unsigned int dev, const unsigned int *pids, const unsigned long long *used,
                            unsigned int count, int graphics) {
    if (dev >= FAKE_SLOTS || count > FAKE_MAX_PROCESSES || (count > 0 && (pids == NULL || used == NULL))) {
        return -1;
    }
    lock_control();
    fake_process *list = graphics ? g_devices[dev].graphics : g_devices[dev].compute;
    for (unsigned int i = 0; i < count; i++) {
        list[i].pid = pids[i];
        list[i].used = used[i];
    }
    if (graphics) {
        g_devices[dev].graphics_count = count;
    } else {
        g_devices[dev].compute_count = count;
        account_locked(&g_devices[dev]);
    }
    unlock_state();
    return 0;
}

/* Turns per-process accounting of dev on (1) or off (0). */
FAKE_EXPORT int fake_nvml_set_accounting(unsigned int dev, int enabled) {
    if (dev >= FAKE_SLOTS) {
        return -1;
    }
    lock_control();
    g_devices[dev].accounting = enabled != 0;
    unlock_state();
    return 0;
}

/* Sets the peak the driver's accounting reports for pid on dev, as a driver
 * that saw an allocation between two process lists would. */
FAKE_EXPORT int fake_nvml_set_accounted_peak(unsigned int dev, unsigned int pid, unsigned long long bytes) {
    if (dev >= FAKE_SLOTS) {
        return -1;
    }
    lock_control();
    fake_process *p = accounted_locked(&g_devices[dev], pid);
    if (p != NULL) {
        p->used = bytes;
    }
    unlock_state();
    return p != NULL ? 0 : -1;
}

/* Compute processes of a device (count 0 clears). used[i] = ~0ull reads as
 * "not available". */
FAKE_EXPORT int fake_nvml_set_processes(unsigned int dev, const unsigned int *pids, const unsigned long long *used,
                                        unsigned int count) {
    return set_process_list(dev, pids, used, count, 0);
}

FAKE_EXPORT int fake_nvml_set_graphics_processes(unsigned int dev, const unsigned int *pids,
                                                 const unsigned long long *used, unsigned int count) {
    return set_process_list(dev, pids, used, count, 1);
}

/* Makes function_name return code on device dev (-1: every device, and the
 * calls that take no device). Code 0 removes the entry. An error set for
 * nvmlInit_v2 also fails nvmlInitWithFlags, one set for
 * nvmlDeviceGetMemoryInfo also fails nvmlDeviceGetMemoryInfo_v2.
 * -1 for an unknown name or a full error table. */
FAKE_EXPORT int fake_nvml_set_error(const char *function_name, int dev, int nvml_return_code) {
    lock_control();
    int rc = set_error_locked(function_name, dev, nvml_return_code);
    unlock_state();
    return rc;
}

FAKE_EXPORT void fake_nvml_clear_errors(void) {
    lock_control();
    g_error_count = 0;
    unlock_state();
}

/* 1 if function_name is a function this library counts and can fail. */
FAKE_EXPORT int fake_nvml_knows_function(const char *function_name) {
    return fn_index(function_name) >= 0;
}

/* Calls of function_name so far, failed ones included (0 for unknown names). */
FAKE_EXPORT unsigned long long fake_nvml_call_count(const char *function_name) {
    int f = fn_index(function_name);
    if (f < 0) {
        return 0;
    }
    lock_state();
    unsigned long long n = g_calls[f];
    unlock_state();
    return n;
}

/* Every call of function_name (a per-device entry point) takes us microseconds
 * from now on; 0 answers at once. -1 for an unknown name. */
FAKE_EXPORT int fake_nvml_set_latency(const char *function_name, unsigned int us) {
    int f = fn_index(function_name);
    if (f < 0) {
        return -1;
    }
    g_latency_us[f] = us;
    return 0;
}

/* Every call costs what it costs on a real driver (k_realistic). */
FAKE_EXPORT void fake_nvml_set_realistic_latencies(void) {
    realistic_latencies();
}

/* Nanoseconds the process-list calls have held the driver lock, in all. */
FAKE_EXPORT unsigned long long fake_nvml_driver_lock_held_ns(void) {
    return __atomic_load_n(&g_driver_lock_held_ns, __ATOMIC_RELAXED);
}

FAKE_EXPORT void fake_nvml_reset_call_counts(void) {
    lock_state();
    memset(g_calls, 0, sizeof(g_calls));
    unlock_state();
}

/* Used memory of dev follows the entry with the largest at_ns <= the time
 * since the timeline clock started; before the first entry, and with
 * count 0 (which clears), the value of fake_nvml_set_memory applies. */
FAKE_EXPORT int fake_nvml_set_timeline(unsigned int dev, const unsigned long long *at_ns,
                                       const unsigned long long *used, unsigned int count) {
    if (dev >= FAKE_SLOTS || (count > 0 && (at_ns == NULL || used == NULL))) {
        return -1;
    }
    fake_point *points = NULL;
    if (count > 0) {
        points = malloc(sizeof(fake_point) * count);
        if (points == NULL) {
            return -1;
        }
        for (unsigned int i = 0; i < count; i++) {
            points[i].at_ns = at_ns[i];
            points[i].used = used[i];
        }
    }
    lock_control();
    int rc = set_points_locked(dev, points, count);
    unlock_state();
    free(points);
    return rc;
}

/* (Re)starts the clock shared by the timelines of all devices. */
FAKE_EXPORT void fake_nvml_start_timeline(void) {
    lock_control();
    g_timeline_start_ns = now_ns();
    unlock_state();
}

/* Used memory of dev = its set used memory + this process's resident set. */
FAKE_EXPORT int fake_nvml_set_follow_rss(unsigned int dev, int enabled) {
    if (dev >= FAKE_SLOTS) {
        return -1;
    }
    lock_control();
    g_devices[dev].follow_rss = enabled != 0;
    unlock_state();
    return 0;
}

/* Puts GPU dev in MIG mode with count instances (0 to FAKE_MAX_MIG) of total
 * bytes each, or takes it out of MIG mode (count -1). Instance m is then the
 * device slot fake_nvml_mig_slot(dev, m) for every per-device function. */
FAKE_EXPORT int fake_nvml_set_mig(unsigned int dev, int count, unsigned long long total) {
    if (dev >= FAKE_MAX_DEVICES || count < -1 || count > (int)FAKE_MAX_MIG) {
        return -1;
    }
    lock_control();
    set_mig_locked(dev, count, total);
    unlock_state();
    return 0;
}

/* The device slot of MIG instance mig of GPU dev. */
FAKE_EXPORT unsigned int fake_nvml_mig_slot(unsigned int dev, unsigned int mig) {
    return mig_slot(dev, mig);
}

/* dev draws mw milliwatts from now on (and before its power timeline's first point). */
FAKE_EXPORT int fake_nvml_set_power(unsigned int dev, unsigned long long mw) {
    if (dev >= FAKE_SLOTS) {
        return -1;
    }
    lock_control();
    g_devices[dev].power_mw = mw;
    unlock_state();
    return 0;
}

/* The power of dev follows the point with the largest at_ns <= the power clock
 * (fake_nvml_power_clock_ns); count 0 clears the timeline. */
FAKE_EXPORT int fake_nvml_set_power_timeline(unsigned int dev, const unsigned long long *at_ns,
                                             const unsigned long long *mw, unsigned int count) {
    if (dev >= FAKE_SLOTS || (count > 0 && (at_ns == NULL || mw == NULL))) {
        return -1;
    }
    fake_point *points = NULL;
    if (count > 0) {
        points = malloc(sizeof(fake_point) * count);
        if (points == NULL) {
            return -1;
        }
        for (unsigned int i = 0; i < count; i++) {
            points[i].at_ns = at_ns[i];
            points[i].used = mw[i];
        }
    }
    lock_control();
    free(g_devices[dev].power);
    g_devices[dev].power = points;
    g_devices[dev].power_count = count;
    unlock_state();
    return 0;
}

/* Nanoseconds on the power clock, which the power timelines and quanta follow. */
FAKE_EXPORT unsigned long long fake_nvml_power_clock_ns(void) {
    lock_state();
    unsigned long long at = power_clock_locked();
    unlock_state();
    return at;
}

/* What nvmlDeviceGetTotalEnergyConsumption of dev reports now, without counting a call. */
FAKE_EXPORT unsigned long long fake_nvml_current_energy(unsigned int dev) {
    if (dev >= FAKE_SLOTS) {
        return 0;
    }
    lock_state();
    unsigned long long energy = energy_now_locked(&g_devices[dev]);
    unlock_state();
    return energy;
}

/* A driver reload: every GPU's energy counter starts again from zero now. */
FAKE_EXPORT void fake_nvml_reload_driver(void) {
    lock_control();
    unsigned long long at = power_clock_locked();
    for (unsigned int i = 0; i < FAKE_SLOTS; i++) {
        g_devices[i].energy_base_mj = 0;
        g_devices[i].energy_origin_ns = at;
    }
    unlock_state();
}

/* The clock event reasons dev reports (NVML's nvmlClocksEventReason* bits). */
FAKE_EXPORT int fake_nvml_set_clocks_event_reasons(unsigned int dev, unsigned long long reasons) {
    if (dev >= FAKE_SLOTS) {
        return -1;
    }
    lock_control();
    g_devices[dev].clock_reasons = reasons;
    unlock_state();
    return 0;
}

/* The SM clock dev reports, in MHz. */
FAKE_EXPORT int fake_nvml_set_sm_clock(unsigned int dev, unsigned int mhz) {
    if (dev >= FAKE_SLOTS) {
        return -1;
    }
    lock_control();
    g_devices[dev].sm_mhz = mhz;
    unlock_state();
    return 0;
}

/* How many nvmlInit calls have not been matched by nvmlShutdown. */
FAKE_EXPORT unsigned int fake_nvml_init_count(void) {
    lock_state();
    unsigned int n = g_init_count;
    unlock_state();
    return n;
}

/* The used memory a read of dev would report now, without counting a call. */
FAKE_EXPORT unsigned long long fake_nvml_current_used(unsigned int dev) {
    if (dev >= FAKE_SLOTS) {
        return 0;
    }
    lock_state();
    unsigned long long used = used_now_locked(&g_devices[dev]);
    unlock_state();
    return used;
}

/* ---- CUDA driver API: the fake libcuda ----
 *
 * The same library answers the CUDA driver calls gpuspan selftest makes, so a
 * link named libcuda.so.1 next to libnvidia-ml.so.1 is one library with one
 * state: a context or an allocation raises the device's used memory and this
 * process's entry in its compute process list, as on a real GPU, and freeing
 * lowers them again. Allocations are rounded up to 2 MiB, as the driver's are.
 * CUDA's devices are the GPUs, in order, each GPU in MIG mode replaced by its
 * MIG instances; a CUdevice is the device slot. CUDA_VISIBLE_DEVICES, read at
 * cuInit, narrows and orders them as CUDA does: a comma-separated list of GPU
 * indexes, GPU-... or MIG-... UUIDs (or unique prefixes of them), in the order
 * given; a GPU in MIG mode stands for its instances; the list ends at the first
 * entry that names no device, and an empty one hides every device.
 * cuDeviceGetUuid answers a MIG instance with its GPU's UUID, as the real one
 * does; cuDeviceGetUuid_v2 with the instance's own.
 *
 *      FAKE_CUDA_CONTEXT_MIB   what a primary context takes (default 500)
 *      FAKE_CUDA_FAIL_ALLOC    1: every allocation fails with out of memory
 */

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;
typedef struct CUuuid_st {
    char bytes[16];
} CUuuid;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_INVALID_CONTEXT 201

#define FAKE_CUDA_GRANULARITY (2ull * FAKE_MIB)
#define FAKE_CUDA_MAX_ALLOCATIONS 1024u

typedef struct fake_allocation {
    CUdeviceptr ptr;
    unsigned int dev;
    unsigned long long bytes;
} fake_allocation;

static int g_cuda_initialized;
static unsigned int g_cuda_contexts[FAKE_SLOTS]; /* primary context retains */
static fake_allocation g_allocations[FAKE_CUDA_MAX_ALLOCATIONS];
static CUdeviceptr g_next_ptr = 0x700000000000ull;
static __thread int g_cuda_current = -1;

static unsigned long long cuda_context_bytes(void) {
    unsigned long long mib = 500;
    env_ull("FAKE_CUDA_CONTEXT_MIB", &mib);
    return mib * FAKE_MIB;
}

/* Adds (or takes away) bytes held by this process on dev: the device's used
 * memory and the process's compute entry, which appears with its first byte. */
static void hold_locked(unsigned int dev, unsigned long long bytes, int add) {
    struct nvmlDevice_st *d = &g_devices[dev];
    unsigned int pid = (unsigned int)getpid();
    fake_process *mine = NULL;
    for (unsigned int i = 0; i < d->compute_count; i++) {
        if (d->compute[i].pid == pid) {
            mine = &d->compute[i];
        }
    }
    if (mine == NULL && add && d->compute_count < FAKE_MAX_PROCESSES) {
        mine = &d->compute[d->compute_count++];
        mine->pid = pid;
        mine->used = 0;
    }
    if (add) {
        d->used += bytes;
        if (mine != NULL) {
            mine->used += bytes;
        }
    } else {
        d->used = d->used > bytes ? d->used - bytes : 0;
        if (mine != NULL) {
            mine->used = mine->used > bytes ? mine->used - bytes : 0;
        }
    }
    account_locked(d);
}

/* CUDA_VISIBLE_DEVICES as cuInit read it; g_cuda_visible_set is 0 when unset. */
static char g_cuda_visible[1024];
static int g_cuda_visible_set;

/* Appends slot to the n slots unless it is there already; returns the count. */
static unsigned int add_slot(unsigned int *slots, unsigned int n, unsigned int slot) {
    for (unsigned int i = 0; i < n; i++) {
        if (slots[i] == slot) {
            return n;
        }
    }
    slots[n] = slot;
    return n + 1;
}

/* Appends gpu's CUDA devices (the GPU, or its MIG instances) as add_slot does. */
static unsigned int add_gpu_locked(unsigned int *slots, unsigned int n, unsigned int gpu) {
    if (!g_devices[gpu].mig_mode) {
        return add_slot(slots, n, gpu);
    }
    for (unsigned int m = 0; m < g_devices[gpu].mig_count; m++) {
        n = add_slot(slots, n, mig_slot(gpu, m));
    }
    return n;
}

/* The slot whose UUID starts with the len bytes of prefix: among the GPUs for
 * "GPU-", among their MIG instances for "MIG-"; -1 when none. */
static int slot_by_uuid_locked(const char *prefix, size_t len) {
    int mig = strncmp(prefix, "MIG-", 4) == 0;
    for (unsigned int gpu = 0; gpu < g_device_count; gpu++) {
        unsigned int count = mig ? (g_devices[gpu].mig_mode ? g_devices[gpu].mig_count : 0) : 1;
        for (unsigned int m = 0; m < count; m++) {
            unsigned int slot = mig ? mig_slot(gpu, m) : gpu;
            if (strncmp(g_devices[slot].uuid, prefix, len) == 0) {
                return (int)slot;
            }
        }
    }
    return -1;
}

/* CUDA's devices in order, as device slots; returns how many. */
static unsigned int cuda_devices_locked(unsigned int *slots) {
    unsigned int n = 0;
    if (!g_cuda_visible_set) {
        for (unsigned int gpu = 0; gpu < g_device_count; gpu++) {
            n = add_gpu_locked(slots, n, gpu);
        }
        return n;
    }
    const char *entry = g_cuda_visible;
    while (*entry != '\0') {
        size_t len = strcspn(entry, ",");
        while (len > 0 && entry[0] == ' ') {
            entry++;
            len--;
        }
        while (len > 0 && entry[len - 1] == ' ') {
            len--;
        }
        if (len > 4 && (strncmp(entry, "GPU-", 4) == 0 || strncmp(entry, "MIG-", 4) == 0)) {
            int slot = slot_by_uuid_locked(entry, len);
            if (slot < 0) {
                break;
            }
            n = (unsigned int)slot < g_device_count ? add_gpu_locked(slots, n, (unsigned int)slot)
                                                     : add_slot(slots, n, (unsigned int)slot);
        } else {
            char *end = NULL;
            unsigned long gpu = strtoul(entry, &end, 10);
            if (len == 0 || end != entry + len || gpu >= g_device_count) {
                break;
            }
            n = add_gpu_locked(slots, n, (unsigned int)gpu);
        }
        entry += strcspn(entry, ",");
        if (*entry == ',') {
            entry++;
        }
    }
    return n;
}

/* Whether dev is one of CUDA's devices now. */
static int cuda_device_locked(CUdevice dev) {
    unsigned int slots[FAKE_SLOTS];
    unsigned int n = cuda_devices_locked(slots);
    for (unsigned int i = 0; i < n; i++) {
        if (slots[i] == (unsigned int)dev) {
            return 1;
        }
    }
    return 0;
}

/* For cuda_enter: a call that takes no device, one that has no output. */
#define CUDA_ANY_DEVICE (-1)
static const char k_no_output;

/* The prologue of every call but cuInit: takes the lock (held on return,
 * whatever the result), then checks that cuInit ran, that dev is a device
 * (CUDA_ANY_DEVICE: the call takes none) and that out, the call's output, was
 * given. */
static CUresult cuda_enter(CUdevice dev, const void *out) {
    lock_state();
    if (!g_env_applied && !g_controlled) {
        apply_env_locked();
    }
    if (!g_cuda_initialized) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if (dev != CUDA_ANY_DEVICE && (dev < 0 || !cuda_device_locked(dev))) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    return out == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuInit(unsigned int flags) {
    (void)flags;
    lock_state();
    if (!g_env_applied && !g_controlled) {
        apply_env_locked();
    }
    if (!g_cuda_initialized) {
        const char *visible = getenv("CUDA_VISIBLE_DEVICES");
        g_cuda_visible_set = visible != NULL;
        copy_str(g_cuda_visible, sizeof(g_cuda_visible), visible != NULL ? visible : "");
    }
    g_cuda_initialized = 1;
    unlock_state();
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDriverGetVersion(int *version) {
    if (version == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *version = FAKE_CUDA_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetCount(int *count) {
    CUresult rc = cuda_enter(CUDA_ANY_DEVICE, count);
    if (rc == CUDA_SUCCESS) {
        unsigned int slots[FAKE_SLOTS];
        *count = (int)cuda_devices_locked(slots);
    }
    unlock_state();
    return rc;
}

FAKE_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    CUresult rc = cuda_enter(CUDA_ANY_DEVICE, device);
    if (rc == CUDA_SUCCESS) {
        unsigned int slots[FAKE_SLOTS];
        unsigned int n = cuda_devices_locked(slots);
        if (ordinal < 0 || (unsigned int)ordinal >= n) {
            rc = CUDA_ERROR_INVALID_DEVICE;
        } else {
            *device = (CUdevice)slots[ordinal];
        }
    }
    unlock_state();
    return rc;
}

FAKE_EXPORT CUresult cuDeviceGetName(char *name, int length, CUdevice dev) {
    CUresult rc = cuda_enter(dev, length > 0 ? name : NULL);
    if (rc == CUDA_SUCCESS) {
        copy_str(name, (size_t)length, g_devices[dev].name);
    }
    unlock_state();
    return rc;
}

/* The 16 bytes a "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (or MIG-...) UUID spells in hex. */
static void uuid_bytes(CUuuid *uuid, const char *text) {
    const char *hex = text + 4;
    unsigned int n = 0;
    memset(uuid->bytes, 0, sizeof(uuid->bytes));
    while (*hex != '\0' && n < 32) {
        char c = *hex++;
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0) {
            continue;
        }
        uuid->bytes[n / 2] = (char)(uuid->bytes[n / 2] | (v << (n % 2 == 0 ? 4 : 0)));
        n++;
    }
}

/* As NVIDIA documents it: on a MIG instance, the UUID of the GPU that holds it. */
FAKE_EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) {
    CUresult rc = cuda_enter(dev, uuid);
    if (rc == CUDA_SUCCESS) {
        const struct nvmlDevice_st *d = &g_devices[dev];
        uuid_bytes(uuid, d->is_mig ? g_devices[d->index].uuid : d->uuid);
    }
    unlock_state();
    return rc;
}

/* The device's own UUID, a MIG instance's included (the same as NVML's). */
FAKE_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) {
    CUresult rc = cuda_enter(dev, uuid);
    if (rc == CUDA_SUCCESS) {
        uuid_bytes(uuid, g_devices[dev].uuid);
    }
    unlock_state();
    return rc;
}

FAKE_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    CUresult rc = cuda_enter(dev, bytes);
    if (rc == CUDA_SUCCESS) {
        *bytes = (size_t)g_devices[dev].total;
    }
    unlock_state();
    return rc;
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev) {
    CUresult rc = cuda_enter(dev, ctx);
    if (rc == CUDA_SUCCESS) {
        if (g_cuda_contexts[dev]++ == 0) {
            hold_locked((unsigned int)dev, cuda_context_bytes(), 1);
        }
        *ctx = (CUcontext)&g_cuda_contexts[dev];
    }
    unlock_state();
    return rc;
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    CUresult rc = cuda_enter(dev, &k_no_output);
    if (rc == CUDA_SUCCESS && g_cuda_contexts[dev] == 0) {
        rc = CUDA_ERROR_INVALID_CONTEXT;
    }
    if (rc == CUDA_SUCCESS && --g_cuda_contexts[dev] == 0) {
        hold_locked((unsigned int)dev, cuda_context_bytes(), 0);
    }
    unlock_state();
    return rc;
}

FAKE_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
    CUresult rc = cuda_enter(CUDA_ANY_DEVICE, &k_no_output);
    if (rc == CUDA_SUCCESS) {
        if (ctx == NULL) {
            g_cuda_current = -1;
        } else {
            unsigned int *retains = (unsigned int *)ctx;
            if (retains < g_cuda_contexts || retains >= g_cuda_contexts + FAKE_SLOTS || *retains == 0) {
                rc = CUDA_ERROR_INVALID_CONTEXT;
            } else {
                g_cuda_current = (int)(retains - g_cuda_contexts);
            }
        }
    }
    unlock_state();
    return rc;
}

FAKE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t bytes) {
    CUresult rc = cuda_enter(CUDA_ANY_DEVICE, bytes > 0 ? ptr : NULL);
    if (rc == CUDA_SUCCESS && g_cuda_current < 0) {
        rc = CUDA_ERROR_INVALID_CONTEXT;
    }
    const char *fail = getenv("FAKE_CUDA_FAIL_ALLOC");
    unsigned long long rounded =
        ((unsigned long long)bytes + FAKE_CUDA_GRANULARITY - 1) / FAKE_CUDA_GRANULARITY * FAKE_CUDA_GRANULARITY;
    if (rc == CUDA_SUCCESS) {
        struct nvmlDevice_st *d = &g_devices[g_cuda_current];
        if ((fail != NULL && strcmp(fail, "1") == 0) || d->used + rounded > d->total) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    fake_allocation *slot = NULL;
    for (unsigned int i = 0; rc == CUDA_SUCCESS && i < FAKE_CUDA_MAX_ALLOCATIONS && slot == NULL; i++) {
        if (g_allocations[i].ptr == 0) {
            slot = &g_allocations[i];
        }
    }
    if (rc == CUDA_SUCCESS && slot == NULL) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (rc == CUDA_SUCCESS) {
        slot->ptr = g_next_ptr;
        slot->dev = (unsigned int)g_cuda_current;
        slot->bytes = rounded;
        g_next_ptr += rounded;
        hold_locked(slot->dev, rounded, 1);
        *ptr = slot->ptr;
    }
    unlock_state();
    return rc;
}

FAKE_EXPORT CUresult cuMemFree_v2(CUdeviceptr ptr) {
    CUresult rc = cuda_enter(CUDA_ANY_DEVICE, &k_no_output);
    fake_allocation *slot = NULL;
    for (unsigned int i = 0; rc == CUDA_SUCCESS && i < FAKE_CUDA_MAX_ALLOCATIONS; i++) {
        if (g_allocations[i].ptr == ptr && ptr != 0) {
            slot = &g_allocations[i];
        }
    }
    if (rc == CUDA_SUCCESS && slot == NULL) {
        rc = CUDA_ERROR_INVALID_VALUE;
    }
    if (rc == CUDA_SUCCESS) {
        hold_locked(slot->dev, slot->bytes, 0);
        memset(slot, 0, sizeof(*slot));
    }
    unlock_state();
    return rc;
}

FAKE_EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
    CUresult rc = cuda_enter(CUDA_ANY_DEVICE, total_bytes != NULL ? free_bytes : NULL);
    if (rc == CUDA_SUCCESS && g_cuda_current < 0) {
        rc = CUDA_ERROR_INVALID_CONTEXT;
    }
    if (rc == CUDA_SUCCESS) {
        struct nvmlDevice_st *d = &g_devices[g_cuda_current];
        unsigned long long used = used_now_locked(d);
        *total_bytes = (size_t)d->total;
        *free_bytes = (size_t)(d->total > used ? d->total - used : 0);
    }
    unlock_state();
    return rc;
}

static const char *cuda_error_text(CUresult error, int name) {
    switch (error) {
    case CUDA_SUCCESS: return name ? "CUDA_SUCCESS" : "no error";
    case CUDA_ERROR_INVALID_VALUE: return name ? "CUDA_ERROR_INVALID_VALUE" : "invalid argument";
    case CUDA_ERROR_OUT_OF_MEMORY: return name ? "CUDA_ERROR_OUT_OF_MEMORY" : "out of memory";
    case CUDA_ERROR_NOT_INITIALIZED: return name ? "CUDA_ERROR_NOT_INITIALIZED" : "initialization error";
    case CUDA_ERROR_INVALID_DEVICE: return name ? "CUDA_ERROR_INVALID_DEVICE" : "invalid device ordinal";
    case CUDA_ERROR_INVALID_CONTEXT: return name ? "CUDA_ERROR_INVALID_CONTEXT" : "invalid device context";
    default: return NULL;
    }
}

FAKE_EXPORT CUresult cuGetErrorString(CUresult error, const char **text) {
    if (text == NULL || cuda_error_text(error, 0) == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *text = cuda_error_text(error, 0);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGetErrorName(CUresult error, const char **text) {
    if (text == NULL || cuda_error_text(error, 1) == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *text = cuda_error_text(error, 1);
    return CUDA_SUCCESS;
}
