/* Part of fake_nvml.c (included there, not compiled alone): The NVML entry points nvml-wrapper calls. */

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

/* Ends a per-device query that enter_device opened: releases the lock, returns rc. */
static nvmlReturn_t leave_device(nvmlReturn_t rc) {
    unlock_state();
    return rc;
}

/* Opens a per-device query through enter_device: declares `d`, the device, and `rc`, what
 * the query returns, or returns enter_device's error. The query ends with leave_device. */
#define ENTER_DEVICE(f, device, out)                     \
    struct nvmlDevice_st *d = NULL;                      \
    int rc = enter_device((f), (device), (out), &d);     \
    if (rc != NVML_SUCCESS) {                            \
        return rc;                                       \
    }

/* ENTER_DEVICE for a query NVML answers for whole GPUs only: asked of a MIG instance, it
 * fails with mig_error. */
#define ENTER_GPU(f, device, out, mig_error)             \
    ENTER_DEVICE(f, device, out)                         \
    if (d->is_mig) {                                     \
        return leave_device(mig_error);                  \
    }

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    ENTER_DEVICE(F_nvmlDeviceGetName, device, name);
    return leave_device(put_string(name, length, d->name));
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    ENTER_DEVICE(F_nvmlDeviceGetUUID, device, uuid);
    return leave_device(put_string(uuid, length, d->uuid));
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    ENTER_DEVICE(F_nvmlDeviceGetIndex, device, index);
    *index = d->index;
    return leave_device(rc);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    ENTER_DEVICE(F_nvmlDeviceGetMemoryInfo, device, memory);
    unsigned long long used = used_now_locked(d);
    memory->total = d->total;
    memory->used = used;
    memory->free = d->total > used ? d->total - used : 0;
    return leave_device(rc);
}

/* Milliseconds every memory read blocks for before it starts, as a driver call on a GPU
 * that fell off the bus can: 0 (the default) for none. Read without the lock on purpose. */
static volatile unsigned int g_hang_ms;

FAKE_EXPORT void fake_nvml_set_hang(unsigned int ms) {
    g_hang_ms = ms;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    if (g_hang_ms > 0) {
        usleep((useconds_t)g_hang_ms * 1000u);
    }
    ENTER_DEVICE(F_nvmlDeviceGetMemoryInfo_v2, device, memory);
    if (memory->version != nvmlMemory_v2) {
        rc = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    } else {
        unsigned long long used = used_now_locked(d);
        memory->total = d->total;
        memory->reserved = 0;
        memory->used = used;
        memory->free = d->total > used ? d->total - used : 0;
    }
    return leave_device(rc);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    /* NVML has no utilization counters per MIG instance. */
    ENTER_GPU(F_nvmlDeviceGetUtilizationRates, device, utilization, NVML_ERROR_NOT_SUPPORTED);
    utilization->gpu = d->util_gpu;
    utilization->memory = d->util_memory;
    return leave_device(rc);
}

/* Whether d keeps accounting: as NVML, never on a GPU in MIG mode or its
 * instances, whatever was asked. */
static int accounting_locked(const struct nvmlDevice_st *d) {
    return d->accounting && !d->mig_mode && d < &g_devices[FAKE_MAX_DEVICES];
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetAccountingMode(nvmlDevice_t device, int *mode) {
    ENTER_DEVICE(F_nvmlDeviceGetAccountingMode, device, mode);
    *mode = accounting_locked(d); /* NVML_FEATURE_ENABLED is 1, DISABLED 0 */
    return leave_device(rc);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetAccountingStats(nvmlDevice_t device, unsigned int pid,
                                                      nvmlAccountingStats_t *stats) {
    ENTER_DEVICE(F_nvmlDeviceGetAccountingStats, device, stats);
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
    return leave_device(rc);
}
