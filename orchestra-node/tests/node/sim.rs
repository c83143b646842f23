//! The RuntimeBackend conformance suite against the simulated backend.

use std::sync::Arc;
use std::time::Duration;

use orchestra_node::runtime::RuntimeBackend;
use orchestra_node::runtime::sim::workloads;
use orchestra_node::runtime::sim::{SimConfig, SimRuntime};
use orchestra_node::testing::{ExecWorkload, ExitingWorkload, RuntimeBuilder, StubbornWorkload, Suite, Workloads};

/// Simulated runtimes, with workloads in their terms.
struct SimBuilder {
    dir: tempfile::TempDir,
}

#[async_trait::async_trait]
impl RuntimeBuilder for SimBuilder {
    async fn build(&self) -> Arc<dyn RuntimeBackend> {
        Arc::new(SimRuntime::new(SimConfig::default()))
    }

    fn workloads(&self) -> Workloads {
        let line = "hello from orchestra";
        let mut workloads = Workloads::new(
            workloads::long_running(),
            ExitingWorkload { config: workloads::exiting(line, 3), line: line.into(), exit_code: 3 },
            workloads::UNKNOWN_IMAGE,
            self.dir.path(),
        );
        workloads.ignores_sigterm =
            Some(StubbornWorkload { config: workloads::ignores_sigterm("ready"), ready_line: "ready".into() });
        let (command, stdout_contains) = workloads::exec();
        workloads.exec = Some(ExecWorkload { command, stdout_contains });
        workloads.host_ip = Some("127.0.0.1".parse().unwrap());
        workloads.patience = Duration::from_secs(20);
        workloads
    }
}

#[tokio::test]
async fn the_simulated_runtime_passes_the_conformance_suite() {
    Suite::test_all(&SimBuilder { dir: tempfile::tempdir().unwrap() }).await;
}
