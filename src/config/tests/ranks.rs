//! A rank's position, its job's directory and the devices it measures, from each
//! launcher's variables.

use super::super::*;
use super::with_env;

#[test]
fn launcher_variables_give_rank_and_a_per_rank_directory() {
    let env = [
        ("RANK", "3"),
        ("LOCAL_RANK", "1"),
        ("WORLD_SIZE", "8"),
        ("TORCHELASTIC_RUN_ID", "job42"),
    ];
    let settings = with_env(&env, || resolve(&CodeSettings::default())).unwrap();
    assert_eq!(
        settings.rank,
        Rank {
            rank: Some(3),
            local_rank: Some(1),
            world_size: Some(8),
            job_id: Some("job42".into()),
        }
    );
    assert_eq!(
        settings.run_dir(),
        PathBuf::from("gpuspan-runs/job42/rank-3")
    );
    let slurm = [
        ("SLURM_PROCID", "5"),
        ("SLURM_NTASKS", "16"),
        ("SLURM_JOB_ID", "777"),
    ];
    let settings = with_env(&slurm, || resolve(&CodeSettings::default())).unwrap();
    assert_eq!(settings.rank.rank, Some(5));
    assert_eq!(settings.run_id, "slurm-777");
    assert_eq!(settings.rank.job_id.as_deref(), Some("777"));
    // torchrun without a rendezvous id says `none`; gpuspan run's id comes next.
    let placeholder = [("TORCHELASTIC_RUN_ID", "none"), ("GPUSPAN_JOB_ID", "run-1")];
    let settings = with_env(&placeholder, || resolve(&CodeSettings::default())).unwrap();
    assert_eq!(settings.rank.job_id.as_deref(), Some("run-1"));
}

#[test]
fn mpirun_s_variables_give_the_rank_too() {
    let open_mpi = [
        ("OMPI_COMM_WORLD_RANK", "6"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "2"),
        ("OMPI_COMM_WORLD_SIZE", "8"),
    ];
    let settings = with_env(&open_mpi, || resolve(&CodeSettings::default())).unwrap();
    let rank = &settings.rank;
    assert_eq!(
        (rank.rank, rank.local_rank, rank.world_size),
        (Some(6), Some(2), Some(8))
    );
    let mpich = [
        ("PMI_RANK", "1"),
        ("MPI_LOCALRANKID", "1"),
        ("PMI_SIZE", "2"),
    ];
    let settings = with_env(&mpich, || resolve(&CodeSettings::default())).unwrap();
    let rank = &settings.rank;
    assert_eq!(
        (rank.rank, rank.local_rank, rank.world_size),
        (Some(1), Some(1), Some(2))
    );
}

/// The run directory and job id of a rank started with `env`.
fn job_of(env: &[(&str, &str)], code: CodeSettings) -> (PathBuf, Option<String>) {
    let settings = with_env(env, || resolve(&code)).unwrap();
    (settings.run_dir(), settings.rank.job_id)
}

#[test]
fn every_rank_of_an_mpi_job_gets_the_job_s_directory_from_its_launcher() {
    // Open MPI 4's mpirun: its job id, and the key it draws for each job (the job id
    // alone is a hash of host and pid, which a later job may draw again).
    let open_mpi = [
        ("OMPI_COMM_WORLD_RANK", "1"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ("OMPI_COMM_WORLD_SIZE", "2"),
        ("OMPI_MCA_ess_base_jobid", "1150091265"),
        (
            "OMPI_MCA_orte_precondition_transports",
            "403dbbd1686a868a-4de8afb20a99d069",
        ),
        ("PMIX_NAMESPACE", "1150091265"),
        ("PMIX_RANK", "1"),
    ];
    assert_eq!(
        job_of(&open_mpi, CodeSettings::default()),
        (
            PathBuf::from("gpuspan-runs/ompi-1150091265-403dbbd1686a868a/rank-1"),
            Some("1150091265".into())
        )
    );
    // A PMIx launcher (Open MPI 5's prterun, SLURM's srun --mpi=pmix): its namespace,
    // made one directory name.
    let pmix = [
        ("PMIX_RANK", "3"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("PMIX_NAMESPACE", "prterun-node/a-4242@1"),
    ];
    let settings = with_env(&pmix, || resolve(&CodeSettings::default())).unwrap();
    assert_eq!(settings.rank.rank, Some(3), "PMIX_RANK gives the rank");
    assert_eq!(
        settings.run_dir(),
        PathBuf::from("gpuspan-runs/pmix-prterun-node-a-4242@1/rank-3")
    );
    assert_eq!(
        settings.rank.job_id.as_deref(),
        Some("prterun-node/a-4242@1")
    );
    // A PMI-1 launcher that names its key-value space.
    let pmi = [
        ("PMI_RANK", "0"),
        ("PMI_SIZE", "2"),
        ("PMI_KVSNAME", "kvs_4242_0"),
    ];
    assert_eq!(
        job_of(&pmi, CodeSettings::default()).0,
        PathBuf::from("gpuspan-runs/pmi-kvs_4242_0/rank-0")
    );
    // Two steps of one SLURM allocation are two jobs.
    let srun = [
        ("SLURM_PROCID", "1"),
        ("SLURM_NTASKS", "2"),
        ("SLURM_JOB_ID", "777"),
        ("SLURM_STEP_ID", "2"),
    ];
    assert_eq!(
        job_of(&srun, CodeSettings::default()),
        (
            PathBuf::from("gpuspan-runs/slurm-777.2/rank-1"),
            Some("777.2".into())
        )
    );
}

#[test]
fn gpuspan_run_s_job_id_names_the_directory_when_no_launcher_does() {
    // MPICH's Hydra gives its ranks no job id; `gpuspan run -- mpiexec ...` does.
    let hydra = [
        ("PMI_RANK", "1"),
        ("MPI_LOCALRANKID", "1"),
        ("PMI_SIZE", "2"),
        ("GPUSPAN_JOB_ID", "20250102-030405-42"),
    ];
    assert_eq!(
        job_of(&hydra, CodeSettings::default()),
        (
            PathBuf::from("gpuspan-runs/20250102-030405-42/rank-1"),
            Some("20250102-030405-42".into())
        )
    );
    // The launcher's id still comes first: one `gpuspan run` per node of one job.
    let mut under_mpirun = hydra.to_vec();
    under_mpirun.push(("OMPI_MCA_ess_base_jobid", "99"));
    assert_eq!(
        job_of(&under_mpirun, CodeSettings::default()),
        (
            PathBuf::from("gpuspan-runs/ompi-99/rank-1"),
            Some("99".into())
        )
    );
    // The job id set in code names the directory too; the run id set anywhere wins.
    let code = CodeSettings {
        job_id: Some("sweep-7".into()),
        ..CodeSettings::default()
    };
    assert_eq!(
        job_of(&hydra, code).0,
        PathBuf::from("gpuspan-runs/sweep-7/rank-1")
    );
    let mut named = hydra.to_vec();
    named.push(("GPUSPAN_RUN_ID", "mine"));
    assert_eq!(
        job_of(&named, CodeSettings::default()).0,
        PathBuf::from("gpuspan-runs/mine/rank-1")
    );
}

#[test]
fn none_and_blank_ids_are_no_ids_for_the_job_and_the_directory_alike() {
    // torchrun's placeholder where a rendezvous has no id (a static rendezvous).
    let torchrun = [
        ("RANK", "1"),
        ("LOCAL_RANK", "1"),
        ("WORLD_SIZE", "2"),
        ("TORCHELASTIC_RUN_ID", "none"),
        ("SLURM_JOB_ID", " "),
        ("GPUSPAN_JOB_ID", ""),
    ];
    let settings = with_env(&torchrun, || resolve(&CodeSettings::default())).unwrap();
    assert_eq!(settings.rank.job_id, None);
    assert_ne!(settings.run_id, "none");
    assert!(settings.run_id_is_own, "{}", settings.run_id);
    assert!(
        settings
            .run_id
            .ends_with(&format!("-{}", std::process::id())),
        "a directory of this process's own: {}",
        settings.run_id
    );
    let mut with_id = torchrun.to_vec();
    with_id.push(("PMIX_NAMESPACE", "none"));
    with_id.push(("OMPI_MCA_ess_base_jobid", ""));
    with_id.retain(|(k, _)| *k != "GPUSPAN_JOB_ID");
    with_id.push(("GPUSPAN_JOB_ID", "run-1"));
    let settings = with_env(&with_id, || resolve(&CodeSettings::default())).unwrap();
    assert_eq!(settings.rank.job_id.as_deref(), Some("run-1"));
    assert_eq!(
        settings.run_dir(),
        PathBuf::from("gpuspan-runs/run-1/rank-1")
    );
    assert!(!settings.run_id_is_own);
}

#[test]
fn a_rank_measures_its_own_device_unless_a_scope_is_given() {
    let of = |env: &[(&str, &str)], code: CodeSettings| {
        with_env(env, || resolve(&code)).unwrap().devices
    };
    let rank = [("LOCAL_RANK", "1"), ("CUDA_VISIBLE_DEVICES", "4,6")];
    assert_eq!(
        of(&rank, CodeSettings::default()),
        DeviceScope::parse("6").unwrap()
    );
    let chosen = [("LOCAL_RANK", "1"), ("GPUSPAN_DEVICES", "4,6")];
    assert_eq!(
        of(&chosen, CodeSettings::default()),
        DeviceScope::parse("4,6").unwrap()
    );
    let collector = CodeSettings {
        whole_node: true,
        ..CodeSettings::default()
    };
    assert_eq!(of(&rank, collector), DeviceScope::parse("4,6").unwrap());
}

#[test]
fn amd_and_intel_devices_follow_their_runtimes_lists_and_the_rank() {
    use crate::source::drm::scope::Visible;
    let of = |env: &[(&str, &str)]| {
        with_env(env, || resolve(&CodeSettings::default()))
            .unwrap()
            .drm_devices
    };
    let scope = of(&[
        ("ROCR_VISIBLE_DEVICES", "1,2,3"),
        ("HIP_VISIBLE_DEVICES", "0,2"),
        ("CUDA_VISIBLE_DEVICES", "1"),
        ("ZE_AFFINITY_MASK", "0.1"),
        ("LOCAL_RANK", "1"),
    ]);
    assert_eq!(
        scope.amd,
        vec![
            Visible::parse("1,2,3").unwrap(),
            Visible::parse("0,2").unwrap()
        ]
    );
    assert_eq!(scope.intel, Some(Visible::parse_ze("0").unwrap()));
    assert_eq!(scope.position, Some(1));
    // HIP honours CUDA_VISIBLE_DEVICES when HIP_VISIBLE_DEVICES is unset.
    let cuda = of(&[("CUDA_VISIBLE_DEVICES", "1")]);
    assert_eq!(cuda.amd, vec![Visible::parse("1").unwrap()]);
    let chosen = of(&[("GPUSPAN_DEVICES", "2"), ("ROCR_VISIBLE_DEVICES", "0")]);
    assert_eq!(chosen.chosen, Some(DeviceScope::parse("2").unwrap()));
    assert!(chosen.amd.is_empty());
    let err = with_env(&[("ZE_AFFINITY_MASK", "gpu0")], || {
        resolve(&CodeSettings::default())
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("ZE_AFFINITY_MASK") && err.contains("gpu0"),
        "{err}"
    );
}

#[test]
fn the_kernel_s_file_roots_default_to_sys_and_proc() {
    let settings = with_env(&[], || resolve(&CodeSettings::default())).unwrap();
    assert_eq!(settings.roots.sysfs, PathBuf::from("/sys"));
    assert_eq!(settings.roots.procfs, PathBuf::from("/proc"));
    let env = [
        ("GPUSPAN_SYSFS_ROOT", "/tmp/sys"),
        ("GPUSPAN_PROCFS_ROOT", "/tmp/proc"),
    ];
    let settings = with_env(&env, || resolve(&CodeSettings::default())).unwrap();
    assert_eq!(settings.roots.sysfs, PathBuf::from("/tmp/sys"));
    assert_eq!(settings.roots.procfs, PathBuf::from("/tmp/proc"));
}

#[test]
fn a_kernel_file_root_that_is_a_file_is_refused_naming_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sys");
    std::fs::write(&file, "not a directory").unwrap();
    let file = file.to_str().unwrap();
    for var in ["GPUSPAN_SYSFS_ROOT", "GPUSPAN_PROCFS_ROOT"] {
        let err = with_env(&[(var, file)], || resolve(&CodeSettings::default()))
            .map(drop)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(var) && err.contains(file) && err.contains("directory"),
            "{err}"
        );
    }
    let code = CodeSettings {
        sysfs_root: Some(file.into()),
        ..CodeSettings::default()
    };
    let err = with_env(&[], || resolve(&code))
        .map(drop)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("sysfs_root") && err.contains("directory"),
        "{err}"
    );
}

#[test]
fn device_scope_prefers_gpuspan_devices_over_cuda_visible_devices() {
    let env = [("GPUSPAN_DEVICES", "1"), ("CUDA_VISIBLE_DEVICES", "0")];
    let settings = with_env(&env, || resolve(&CodeSettings::default())).unwrap();
    assert_eq!(settings.devices, DeviceScope::parse("1").unwrap());
    let env = [("CUDA_VISIBLE_DEVICES", "")];
    let settings = with_env(&env, || resolve(&CodeSettings::default())).unwrap();
    assert_eq!(
        settings.devices,
        DeviceScope::parse("").unwrap(),
        "empty means none"
    );
}

#[test]
fn hip_s_device_is_the_one_rocr_then_hip_leave_at_its_ordinal() {
    // ROCm's order is KFD's: GPU-7b1d0e6f5a4c3b21 (node 1), then GPU-2a8c4c9f3b6e1d52.
    let sysfs = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/drm/two-amd-gpus-with-kfd/sys"
    );
    let hip = |env: &[(&str, &str)], ordinal| {
        let mut env = env.to_vec();
        env.push(("GPUSPAN_SYSFS_ROOT", sysfs));
        with_env(&env, || hip_device(ordinal))
    };
    const FIRST: &str = "GPU-7b1d0e6f5a4c3b21";
    const SECOND: &str = "GPU-2a8c4c9f3b6e1d52";
    assert_eq!(hip(&[], 1).unwrap(), SECOND);
    assert_eq!(hip(&[("ROCR_VISIBLE_DEVICES", "1")], 0).unwrap(), SECOND);
    assert_eq!(
        hip(
            &[
                ("ROCR_VISIBLE_DEVICES", "1,0"),
                ("HIP_VISIBLE_DEVICES", "1")
            ],
            0
        )
        .unwrap(),
        FIRST
    );
    // HIP honours CUDA_VISIBLE_DEVICES when HIP_VISIBLE_DEVICES is unset, not beside it.
    assert_eq!(hip(&[("CUDA_VISIBLE_DEVICES", "1")], 0).unwrap(), SECOND);
    assert_eq!(
        hip(
            &[("HIP_VISIBLE_DEVICES", "0"), ("CUDA_VISIBLE_DEVICES", "1")],
            0
        )
        .unwrap(),
        FIRST
    );
    assert_eq!(
        hip(&[("ROCR_VISIBLE_DEVICES", "GPU-2a8c")], 0).unwrap(),
        SECOND
    );
    let err = hip(&[("HIP_VISIBLE_DEVICES", "gpu0")], 0)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("HIP_VISIBLE_DEVICES") && err.contains("gpu0"),
        "{err}"
    );
}

#[test]
fn without_the_kernel_s_files_hip_s_device_is_the_entry_its_lists_give() {
    let hip = |env: &[(&str, &str)], ordinal| {
        let mut env = env.to_vec();
        env.push(("GPUSPAN_SYSFS_ROOT", "/nonexistent/sys"));
        with_env(&env, || hip_device(ordinal)).unwrap()
    };
    assert_eq!(hip(&[], 1), "1");
    assert_eq!(
        hip(
            &[
                ("ROCR_VISIBLE_DEVICES", "3,5"),
                ("HIP_VISIBLE_DEVICES", "1")
            ],
            0
        ),
        "5"
    );
    assert_eq!(
        hip(&[("ROCR_VISIBLE_DEVICES", "GPU-abc,GPU-def")], 1),
        "GPU-def"
    );
}
