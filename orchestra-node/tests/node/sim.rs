//! The RuntimeBackend conformance suite against the simulated backend.

use std::time::Duration;

use orchestra_node::runtime::sim::workloads;
use orchestra_node::testing::{ExecWorkload, ExitingWorkload, StubbornWorkload, Workloads};
use orchestra_node::{SimConfig, SimRuntime};

#[tokio::test]
async fn the_simulated_runtime_passes_the_conformance_suite() {
    let dir = tempfile::tempdir().unwrap();
    let line = "hello from orchestra";
    let mut suite = Workloads::new(
        workloads::long_running(),
        ExitingWorkload { config: workloads::exiting(line, 3), line: line.into(), exit_code: 3 },
        workloads::UNKNOWN_IMAGE,
        dir.path(),
    );
    suite.ignores_sigterm =
        Some(StubbornWorkload { config: workloads::ignores_sigterm("ready"), ready_line: "ready".into() });
    let (command, stdout_contains) = workloads::exec();
    suite.exec = Some(ExecWorkload { command, stdout_contains });
    suite.host_ip = Some("127.0.0.1".parse().unwrap());
    suite.patience = Duration::from_secs(20);
    orchestra_node::testing::run_all(|| async { SimRuntime::new(SimConfig::default()) }, suite).await;
}
