/* Part of fake_nvml.c (included there, not compiled alone): The fake_nvml_* control functions tests call to change the state. */

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

/* Sets *points to count points (at_ns[i], values[i]) on the heap, NULL for none: 0, or -1
 * when an array is missing or memory runs out. */
static int new_points(const unsigned long long *at_ns, const unsigned long long *values, unsigned int count,
                      fake_point **points) {
    *points = NULL;
    if (count == 0) {
        return 0;
    }
    if (at_ns == NULL || values == NULL) {
        return -1;
    }
    fake_point *made = malloc(sizeof(fake_point) * count);
    if (made == NULL) {
        return -1;
    }
    for (unsigned int i = 0; i < count; i++) {
        made[i].at_ns = at_ns[i];
        made[i].used = values[i];
    }
    *points = made;
    return 0;
}

/* Used memory of dev follows the entry with the largest at_ns <= the time
 * since the timeline clock started; before the first entry, and with
 * count 0 (which clears), the value of fake_nvml_set_memory applies. */
FAKE_EXPORT int fake_nvml_set_timeline(unsigned int dev, const unsigned long long *at_ns,
                                       const unsigned long long *used, unsigned int count) {
    fake_point *points = NULL;
    if (dev >= FAKE_SLOTS || new_points(at_ns, used, count, &points) != 0) {
        return -1;
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
    fake_point *points = NULL;
    if (dev >= FAKE_SLOTS || new_points(at_ns, mw, count, &points) != 0) {
        return -1;
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
