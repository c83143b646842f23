//! Every component as its own process, as on separate hosts: `orchestra
//! apiserver`, `scheduler`, `controller-manager` and two `node`s, each
//! reaching the API server through the admin kubeconfig; kubectl runs a
//! Deployment on them and reads its logs through the API server.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use orchestra::testing::Kubectl;

use super::support::{eventually, terminate};

/// A child process stopped with SIGTERM when dropped (tests that panic
/// included), so node agents stop their containers.
struct Process(Option<Child>);

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(child) = self.0.take() {
            terminate(child);
        }
    }
}

/// Starts `orchestra <args>` and waits for its line containing `ready`.
fn spawn(args: &[&str], data: &Path) -> Process {
    let mut child = Command::new(env!("CARGO_BIN_EXE_orchestra"))
        .args(args)
        .arg(data)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the orchestra binary starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    loop {
        let line = lines.next().unwrap_or_else(|| panic!("orchestra {args:?} exited before ready")).unwrap();
        if line.contains("ready") {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    Process(Some(child))
}

#[test]
fn every_component_runs_as_its_own_process() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let admin = Kubectl::with_kubeconfig(d.join("admin.kubeconfig"));
    let kubeconfig = admin.kubeconfig().to_str().unwrap();
    let apiserver = spawn(&["apiserver", "--listen", "127.0.0.1:0", "--data-dir"], d);
    // A pod address range of its own: `orchestra up` tests may run beside
    // this one, and pod addresses are host loopback addresses.
    let controllers = spawn(
        &["controller-manager", "--kubeconfig", kubeconfig, "--cluster-cidr", "127.128.0.0/10", "--identity"],
        Path::new("cm-1"),
    );
    let scheduler = spawn(&["scheduler", "--kubeconfig", kubeconfig, "--identity"], Path::new("sched-1"));
    let node_a = spawn(
        &[
            "node",
            "--name",
            "host-a",
            "--node-ip",
            "127.0.30.1",
            "--kubelet-port",
            "0",
            "--kubeconfig",
            kubeconfig,
            "--data-dir",
        ],
        &d.join("host-a"),
    );
    let node_b = spawn(
        &[
            "node",
            "--name",
            "host-b",
            "--node-ip",
            "127.0.30.2",
            "--kubelet-port",
            "0",
            "--kubeconfig",
            kubeconfig,
            "--data-dir",
        ],
        &d.join("host-b"),
    );
    eventually("2 Ready nodes", Duration::from_secs(60), || {
        let (ok, out, err) = admin.run(&["get", "nodes"]).into_parts();
        if ok && out.lines().filter(|l| l.contains(" Ready ")).count() == 2 {
            Ok(())
        } else {
            Err(format!("{out}{err}"))
        }
    });
    let (ok, out, err) =
        admin.run(&["create", "deployment", "echo", "--image=orchestra/echo", "--replicas=2"]).into_parts();
    assert!(ok, "{out}{err}");
    let pod = eventually("2 echo pods Running", Duration::from_secs(90), || {
        let (ok, out, err) = admin.run(&["get", "pods", "-l", "app=echo", "--no-headers"]).into_parts();
        let running: Vec<&str> = out.lines().filter(|l| l.contains("Running")).collect();
        if ok && running.len() == 2 {
            Ok(running[0].split_whitespace().next().unwrap().to_owned())
        } else {
            Err(format!("{out}{err}"))
        }
    });
    let logs = eventually("logs through the API server", Duration::from_secs(30), || {
        let (ok, out, err) = admin.run(&["logs", &pod]).into_parts();
        if ok && out.contains("listening") { Ok(out) } else { Err(format!("{out}{err}")) }
    });
    assert!(logs.contains(&format!("echo: pod {pod} listening on http://127.128.")), "{logs}");
    drop((node_a, node_b, scheduler, controllers, apiserver));
}
