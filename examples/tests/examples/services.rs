//! Services' ClusterIPs and NodePorts through `orchestra apiserver
//! --service-cluster-ip-range --service-node-port-range`, driven by kubectl:
//! allocated from the ranges, requested ones honoured or refused with
//! upstream's messages, kept across updates and restarts, released on
//! delete.

use std::net::Ipv4Addr;

use orchestra::testing::Kubectl;

use super::support::apiserver;

const RANGES: [&str; 4] = ["--service-cluster-ip-range", "127.96.0.0/24", "--service-node-port-range", "30100-30199"];

fn manifest(name: &str, spec: &str) -> String {
    format!("apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  ports:\n  - port: 80\n{spec}")
}

#[test]
fn cluster_ips_and_node_ports_come_from_the_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let admin = Kubectl::with_kubeconfig(dir.path().join("admin.kubeconfig"));
    let run = |args: &[&str], input: Option<&str>| {
        let (ok, out, err) = admin.run_with_input(args, input).into_parts();
        assert!(ok, "kubectl {args:?}: {out}{err}");
        out
    };
    let refused = |args: &[&str], input: Option<&str>| {
        let (ok, out, err) = admin.run_with_input(args, input).into_parts();
        assert!(!ok, "kubectl {args:?} succeeded: {out}");
        err
    };
    let field = |name: &str, path: &str| run(&["get", "service", name, "-o", &format!("jsonpath={{{path}}}")], None);
    let server = apiserver(dir.path(), &RANGES);

    run(&["create", "service", "clusterip", "web", "--tcp=80:8080"], None);
    let ip: Ipv4Addr = field("web", ".spec.clusterIP").parse().unwrap();
    assert_eq!(ip.octets()[..3], [127, 96, 0], "{ip}");
    assert_eq!(field("web", ".spec.clusterIPs[0]"), ip.to_string());
    assert_eq!(field("web", ".spec.ipFamilyPolicy"), "SingleStack");

    run(&["create", "service", "nodeport", "np", "--tcp=80:8080", "--node-port=30150"], None);
    assert_eq!(field("np", ".spec.ports[0].nodePort"), "30150");
    let error = refused(&["create", "service", "nodeport", "np2", "--tcp=80:8080", "--node-port=30150"], None);
    assert!(
        error.contains("spec.ports[0].nodePort: Invalid value: 30150: provided port is already allocated"),
        "{error}"
    );
    let error = refused(&["create", "service", "nodeport", "np3", "--tcp=80:8080", "--node-port=30000"], None);
    assert!(error.contains("The range of valid ports is 30100-30199"), "{error}");
    run(&["create", "service", "nodeport", "auto", "--tcp=80:8080"], None);
    let port: u16 = field("auto", ".spec.ports[0].nodePort").parse().unwrap();
    assert!((30100..=30199).contains(&port) && port != 30150, "{port}");

    let taken = manifest("copy", &format!("  clusterIP: {ip}\n"));
    let error = refused(&["apply", "-f", "-"], Some(&taken));
    assert!(error.contains(&format!("failed to allocate IP {ip}: provided IP is already allocated")), "{error}");
    let outside = manifest("outside", "  clusterIP: 10.0.0.10\n");
    let error = refused(&["apply", "-f", "-"], Some(&outside));
    assert!(error.contains("The range of valid IPs is 127.96.0.0/24"), "{error}");
    run(&["create", "service", "clusterip", "headless", "--clusterip=None"], None);
    assert_eq!(field("headless", ".spec.clusterIP"), "None");

    // Applied twice without a ClusterIP: the second apply keeps it.
    let applied = manifest("applied", "  type: NodePort\n");
    run(&["apply", "-f", "-"], Some(&applied));
    let (applied_ip, applied_port) = (field("applied", ".spec.clusterIP"), field("applied", ".spec.ports[0].nodePort"));
    run(&["apply", "-f", "-"], Some(&format!("{applied}  sessionAffinity: ClientIP\n")));
    assert_eq!(
        (field("applied", ".spec.clusterIP"), field("applied", ".spec.ports[0].nodePort")),
        (applied_ip, applied_port)
    );
    let error = refused(
        &[
            "patch",
            "service",
            "applied",
            "-p",
            r#"{"spec":{"clusterIP":"127.96.0.200","clusterIPs":["127.96.0.200"]}}"#,
        ],
        None,
    );
    assert!(error.contains("may not change once set"), "{error}");

    // A deleted Service's values are free again at once.
    run(&["delete", "service", "web", "np"], None);
    run(&["apply", "-f", "-"], Some(&taken));
    assert_eq!(field("copy", ".spec.clusterIP"), ip.to_string());
    run(&["create", "service", "nodeport", "np2", "--tcp=80:8080", "--node-port=30150"], None);

    // After a restart, what is allocated stays allocated.
    server.stop();
    let _server = apiserver(dir.path(), &RANGES);
    assert_eq!(field("copy", ".spec.clusterIP"), ip.to_string());
    let error = refused(&["create", "service", "nodeport", "np4", "--tcp=80:8080", "--node-port=30150"], None);
    assert!(error.contains("provided port is already allocated"), "{error}");
}
