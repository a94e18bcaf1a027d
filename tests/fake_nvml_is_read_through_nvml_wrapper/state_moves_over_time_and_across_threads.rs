//! The fake's state over time and across threads: a scripted timeline, separate instances in
//! one process, a reader thread that sees the test thread's writes, and a resident set followed.

use super::*;

#[test]
fn timeline_scripts_used_memory_over_time() {
    let fake = FakeNvml::build();
    fake.set_memory(0, 777, 141 * GIB);
    fake.set_timeline(
        0,
        &[(Duration::ZERO, 1000), (Duration::from_millis(50), 5000)],
    );
    let nvml = init(&fake);
    let device = nvml.device_by_index(0).unwrap();

    let started = Instant::now();
    fake.start_timeline();
    let first = device.memory_info().unwrap().used;
    if started.elapsed() < Duration::from_millis(50) {
        assert_eq!(first, 1000);
    } else {
        // Only on a machine too slow to read within 50 ms.
        assert_eq!(first, 5000);
    }

    thread::sleep(Duration::from_millis(80));
    let later = device.memory_info().unwrap();
    assert_eq!(later.used, 5000);
    assert_eq!(later.free, 141 * GIB - 5000);
    assert_eq!(fake.current_used(0), 5000);

    // Restarting the clock goes back to the first point.
    fake.start_timeline();
    let again = device.memory_info().unwrap().used;
    assert!(again == 1000 || again == 5000);

    // Clearing the timeline falls back to the set value.
    fake.set_timeline(0, &[]);
    assert_eq!(device.memory_info().unwrap().used, 777);
}

#[test]
fn timeline_before_its_first_point_reports_the_set_value() {
    let fake = FakeNvml::build();
    fake.set_memory(0, 2 * GIB, 141 * GIB);
    fake.set_timeline(0, &[(Duration::from_secs(3600), 9 * GIB)]);
    fake.start_timeline();
    let nvml = init(&fake);
    let device = nvml.device_by_index(0).unwrap();
    assert_eq!(device.memory_info().unwrap().used, 2 * GIB);
}

#[test]
fn two_instances_in_one_process_keep_separate_state() {
    let a = FakeNvml::build();
    let b = FakeNvml::build();
    assert_ne!(a.path(), b.path());
    assert_eq!(a.path().file_name().unwrap(), "libnvidia-ml.so.1");

    a.set_device_count(1);
    a.set_memory(0, 11 * GIB, 141 * GIB);
    b.set_device_count(3);
    b.set_memory(0, 22 * GIB, 80 * GIB);
    b.set_memory(2, 33 * GIB, 80 * GIB);

    let nvml_a = init(&a);
    let nvml_b = init(&b);

    assert_eq!(nvml_a.device_count().unwrap(), 1);
    assert_eq!(nvml_b.device_count().unwrap(), 3);
    let ma = nvml_a.device_by_index(0).unwrap().memory_info().unwrap();
    let mb = nvml_b.device_by_index(0).unwrap().memory_info().unwrap();
    assert_eq!((ma.used, ma.total), (11 * GIB, 141 * GIB));
    assert_eq!((mb.used, mb.total), (22 * GIB, 80 * GIB));
    let mb2 = nvml_b.device_by_index(2).unwrap().memory_info().unwrap();
    assert_eq!(mb2.used, 33 * GIB);

    assert_eq!(a.call_count("nvmlDeviceGetMemoryInfo_v2"), 1);
    assert_eq!(b.call_count("nvmlDeviceGetMemoryInfo_v2"), 2);

    a.set_error("nvmlDeviceGetMemoryInfo", None, code::GPU_IS_LOST);
    assert!(matches!(
        nvml_a.device_by_index(0).unwrap().memory_info(),
        Err(NvmlError::GpuLost)
    ));
    assert_eq!(
        nvml_b
            .device_by_index(0)
            .unwrap()
            .memory_info()
            .unwrap()
            .used,
        22 * GIB
    );
}

#[test]
fn a_reader_thread_sees_writes_from_the_test_thread() {
    let fake = FakeNvml::build();
    let nvml = Arc::new(init(&fake));
    let stop = Arc::new(AtomicBool::new(false));

    let reader = {
        let nvml = Arc::clone(&nvml);
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            let device = nvml.device_by_index(0).unwrap();
            let mut reads = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let mem = device.memory_info().unwrap();
                // Every read is one consistent state: used + free = total.
                assert_eq!(mem.used + mem.free, mem.total);
                reads += 1;
            }
            reads
        })
    };

    let reads_so_far = || fake.call_count("nvmlDeviceGetMemoryInfo_v2");
    let wait_for_reads = |at_least: u64| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while reads_so_far() < at_least {
            assert!(Instant::now() < deadline, "the reader thread never read");
            thread::yield_now();
        }
    };
    // Writes overlap reads: the reader has read before and reads after.
    wait_for_reads(1);
    for i in 1..=2000u64 {
        fake.set_memory(0, i * MIB, 2 * i * MIB);
    }
    wait_for_reads(reads_so_far() + 1);
    stop.store(true, Ordering::Relaxed);
    let reads = reader.join().unwrap();

    assert!(reads >= 2);
    assert_eq!(fake.call_count("nvmlDeviceGetMemoryInfo_v2"), reads);
    let last = nvml.device_by_index(0).unwrap().memory_info().unwrap();
    assert_eq!((last.used, last.total), (2000 * MIB, 4000 * MIB));
}

#[test]
fn follow_rss_adds_the_readers_resident_set() {
    let fake = FakeNvml::build();
    fake.set_memory(0, MIB, 141 * GIB);
    fake.set_follow_rss(0, true);
    let nvml = init(&fake);
    let used = nvml.device_by_index(0).unwrap().memory_info().unwrap().used;
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let resident_pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap();
    let rss = resident_pages * page;
    // The test process is resident with more than a MiB; the two RSS reads
    // differ by what was allocated in between, not by much.
    assert!(used > 2 * MIB, "{used}");
    assert!(
        used.abs_diff(MIB + rss) < 64 * MIB,
        "{used} vs {}",
        MIB + rss
    );

    fake.set_follow_rss(0, false);
    assert_eq!(
        nvml.device_by_index(0).unwrap().memory_info().unwrap().used,
        MIB
    );
}
