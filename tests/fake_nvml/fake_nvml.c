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

/* The parts below make one translation unit (they share static state); each is one concern. */
#include "abi.h"
#include "state.c"
#include "readings.c"
#include "environment.c"
#include "entry_points.c"
#include "mig.c"
#include "control.c"
#include "cuda.c"
