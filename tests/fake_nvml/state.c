/* Part of fake_nvml.c (included there, not compiled alone): The fake driver's state: devices, MIG instances, accounting, injected errors and latencies, and the live file that scripts them. */

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
