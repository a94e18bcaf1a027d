/* Part of fake_nvml.c (included there, not compiled alone): MIG: the GPU instances, as NVML lists them. */

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
