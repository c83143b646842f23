//! Every component as its own process, as on separate hosts: `orchestra
//! apiserver`, `scheduler`, `controller-manager` and two `node`s, each with
//! its own identity: the scheduler and the controller manager with the
//! kubeconfigs the API server writes for them (each controller then as its
//! own service account), the nodes joined with a bootstrap token. kubectl
//! runs a Deployment on them and reads its logs through the API server.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use orchestra::testing::Kubectl;

use super::support::{eventually, start, whoami};

#[test]
fn every_component_runs_as_its_own_process() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let admin = Kubectl::with_kubeconfig(d.join("admin.kubeconfig"));
    let data = d.to_str().unwrap();
    let (apiserver, ready) =
        start(["apiserver", "--listen", "127.0.0.1:0", "--enable-bootstrap-token-auth", "true", "--data-dir", data]);
    let url = ready.split("ready on ").nth(1).and_then(|rest| rest.split_whitespace().next()).unwrap().to_owned();
    let pki = |file: &str| d.join("pki").join(file).to_str().unwrap().to_owned();

    // The scheduler and the controller manager have identities of their
    // own, with their default roles only.
    let scheduler_kubeconfig = d.join("scheduler.kubeconfig");
    let manager_kubeconfig = d.join("controller-manager.kubeconfig");
    assert_eq!(whoami(&scheduler_kubeconfig), "system:kube-scheduler");
    assert_eq!(whoami(&manager_kubeconfig), "system:kube-controller-manager");
    for kubeconfig in [&scheduler_kubeconfig, &manager_kubeconfig] {
        assert_eq!(std::fs::metadata(kubeconfig).unwrap().permissions().mode() & 0o777, 0o600);
        let can = Kubectl::with_kubeconfig(kubeconfig).run(&["auth", "can-i", "create", "deployments"]);
        assert_eq!(can.stdout.trim(), "no", "{}{}", can.stdout, can.stderr);
    }
    // A pod address range of its own: `orchestra up` tests may run beside
    // this one, and pod addresses are host loopback addresses.
    let (controllers, _) = start([
        "controller-manager",
        "--kubeconfig",
        manager_kubeconfig.to_str().unwrap(),
        "--cluster-cidr",
        "127.128.0.0/10",
        "--root-ca-file",
        &pki("ca.crt"),
        "--cluster-signing-cert-file",
        &pki("ca.crt"),
        "--cluster-signing-key-file",
        &pki("ca.key"),
        "--identity",
        "cm-1",
    ]);
    let (scheduler, _) =
        start(["scheduler", "--kubeconfig", scheduler_kubeconfig.to_str().unwrap(), "--identity", "sched-1"]);

    // Nodes join with a bootstrap token: their CSRs are approved and signed
    // by the controller manager, and they go on as `system:node:<name>`.
    let output = Command::new(env!("CARGO_BIN_EXE_orchestra"))
        .args(["token", "create", "--ttl", "1h", "--kubeconfig"])
        .arg(admin.kubeconfig())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let token = String::from_utf8(output.stdout).unwrap().trim().to_owned();
    let node = |name: &str, ip: &str| {
        let data = d.join(name);
        let args = [
            "node",
            "--name",
            name,
            "--node-ip",
            ip,
            "--kubelet-port",
            "0",
            "--bootstrap-token",
            &token,
            "--server",
            &url,
            "--ca-file",
            &pki("ca.crt"),
            "--data-dir",
            data.to_str().unwrap(),
        ];
        let (process, _) = start(args);
        assert_eq!(whoami(&data.join("kubelet.kubeconfig")), format!("system:node:{name}"));
        process
    };
    let node_a = node("host-a", "127.0.30.1");
    let node_b = node("host-b", "127.0.30.2");
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
    // A node reads only what its pods use; the 403 says why, in upstream's
    // words.
    assert!(admin.run(&["create", "secret", "generic", "unused", "--from-literal=k=v"]).success);
    let kubelet = Kubectl::with_kubeconfig(d.join("host-a").join("kubelet.kubeconfig"));
    let (ok, _, err) = kubelet.run(&["get", "secret", "unused"]).into_parts();
    let expected = "Error from server (Forbidden): secrets \"unused\" is forbidden: User \"system:node:host-a\" \
                    cannot get resource \"secrets\" in API group \"\" in the namespace \"default\": no relationship \
                    found between node \"host-a\" and this object";
    assert!(!ok && err.contains(expected), "{err}");
    // The controllers wrote as their own service accounts, which the
    // controller manager created to ask for their tokens.
    let (ok, out, err) = admin.run(&["get", "serviceaccounts", "-n", "kube-system", "-o", "name"]).into_parts();
    assert!(ok, "{err}");
    for account in ["deployment-controller", "replicaset-controller", "certificate-controller"] {
        assert!(out.contains(&format!("serviceaccount/{account}\n")), "{account} missing: {out}");
    }
    drop((node_a, node_b, scheduler, controllers, apiserver));
}
