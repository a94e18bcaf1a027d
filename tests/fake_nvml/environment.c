/* Part of fake_nvml.c (included there, not compiled alone): The FAKE_NVML_* variables, read at the first nvmlInit. */

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
