/* Part of fake_nvml.c (included there, not compiled alone): The CUDA driver API: the fake libcuda selftest loads. */

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
