/* Part of fake_nvml.c (included there, not compiled alone): The state locked and read as a call sees it: injected errors, timelines, used memory, power and the energy counter. */

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
