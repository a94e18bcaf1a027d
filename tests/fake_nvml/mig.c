/* Part of fake_nvml.c (included there, not compiled alone): MIG: the GPU instances, as NVML lists them. */

/* ---- MIG ----
 * A GPU in MIG mode (fake_nvml_set_mig, FAKE_NVML_MIG) has instances
 * 0..count-1, each a device of its own with its own memory, processes and
 * UUID (MIG-...). Asked of a MIG handle, the mode queries fail with
 * INVALID_ARGUMENT, as NVML's do. */

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                              unsigned int *pendingMode) {
    ENTER_GPU(F_nvmlDeviceGetMigMode, device, currentMode, NVML_ERROR_INVALID_ARGUMENT);
    if (pendingMode == NULL) {
        rc = NVML_ERROR_INVALID_ARGUMENT;
    } else {
        *currentMode = d->mig_mode ? 1u : 0u;
        *pendingMode = *currentMode;
    }
    return leave_device(rc);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    ENTER_GPU(F_nvmlDeviceGetMaxMigDeviceCount, device, count, NVML_ERROR_INVALID_ARGUMENT);
    *count = FAKE_MAX_MIG;
    return leave_device(rc);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                             nvmlDevice_t *migDevice) {
    ENTER_GPU(F_nvmlDeviceGetMigDeviceHandleByIndex, device, migDevice, NVML_ERROR_INVALID_ARGUMENT);
    if (index >= FAKE_MAX_MIG) {
        rc = NVML_ERROR_INVALID_ARGUMENT;
    } else if (!d->mig_mode) {
        rc = NVML_ERROR_NOT_SUPPORTED;
    } else if (index >= d->mig_count) {
        rc = NVML_ERROR_NOT_FOUND;
    } else {
        *migDevice = &g_devices[mig_slot(d->index, index)];
    }
    return leave_device(rc);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
    ENTER_DEVICE(F_nvmlDeviceIsMigDeviceHandle, device, isMigDevice);
    *isMigDevice = d->is_mig ? 1u : 0u;
    return leave_device(rc);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                                      nvmlDevice_t *device) {
    ENTER_DEVICE(F_nvmlDeviceGetDeviceHandleFromMigDeviceHandle, migDevice, device);
    if (!d->is_mig) {
        rc = NVML_ERROR_INVALID_ARGUMENT;
    } else {
        *device = &g_devices[d->index];
    }
    return leave_device(rc);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy) {
    ENTER_GPU(F_nvmlDeviceGetTotalEnergyConsumption, device, energy, NVML_ERROR_NOT_SUPPORTED);
    *energy = energy_now_locked(d);
    return leave_device(rc);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    ENTER_GPU(F_nvmlDeviceGetPowerUsage, device, power, NVML_ERROR_NOT_SUPPORTED);
    *power = (unsigned int)power_at_locked(d, power_clock_locked());
    return leave_device(rc);
}

static nvmlReturn_t clocks_event_reasons(int f, nvmlDevice_t device, unsigned long long *reasons) {
    ENTER_DEVICE(f, device, reasons);
    *reasons = d->clock_reasons;
    return leave_device(rc);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons) {
    return clocks_event_reasons(F_nvmlDeviceGetCurrentClocksEventReasons, device, reasons);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                                   unsigned long long *reasons) {
    return clocks_event_reasons(F_nvmlDeviceGetCurrentClocksThrottleReasons, device, reasons);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int *clock) {
    ENTER_DEVICE(F_nvmlDeviceGetClockInfo, device, clock);
    if (type != NVML_CLOCK_SM) {
        rc = NVML_ERROR_NOT_SUPPORTED;
    } else {
        *clock = d->sm_mhz;
    }
    return leave_device(rc);
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
    ENTER_DEVICE(f, device, infoCount);
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
    return leave_device(rc);
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
