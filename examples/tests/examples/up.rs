//! `orchestra up --runtime process`, driven with the installed kubectl as a
//! user would: nodes, the control plane's pods, a Deployment of the echo
//! image (logs, a killed container restarted, scale, rolling update, undo),
//! an unknown image, an unschedulable pod, namespace deletion stopping the
//! processes, and a restart on the same directory.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use orchestra::testing::Kubectl;
use serde_json::Value;

use super::support::{Running, eventually, start_until};

/// Starts `orchestra up` with `nodes` nodes on free ports and waits for
/// `ready` and the `export KUBECONFIG=` line that follows it.
pub(super) fn start(data_dir: &Path, nodes: usize) -> Running {
    let nodes = nodes.to_string();
    let args = ["up", "--runtime", "process", "--nodes", &nodes, "--listen", "127.0.0.1:0", "--kubelet-port", "0"];
    let args = args.map(std::ffi::OsStr::new).into_iter().chain(["--data-dir".as_ref(), data_dir.as_os_str()]);
    let (cluster, printed) = start_until(args, "export KUBECONFIG=");
    assert!(printed.contains("ready"), "{printed}");
    cluster
}

fn json(kubectl: &Kubectl, args: &[&str]) -> Result<Value, String> {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let (ok, out, err) = kubectl.run(&all).into_parts();
    if !ok {
        return Err(err);
    }
    serde_json::from_str(&out).map_err(|e| e.to_string())
}

fn items(list: &Value) -> Vec<Value> {
    list["items"].as_array().cloned().unwrap_or_default()
}

fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or_default()
}

fn ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

/// Running and Ready pods of `app=echo` in `ns`, as (name, node, ip, restarts).
fn echo_pods(kubectl: &Kubectl, ns: &str) -> Result<Vec<(String, String, String, i64)>, String> {
    let list = json(kubectl, &["-n", ns, "get", "pods", "-l", "app=echo"])?;
    Ok(items(&list)
        .iter()
        .filter(|p| phase(p) == "Running" && ready(p) && p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| {
            (
                p["metadata"]["name"].as_str().unwrap_or_default().to_owned(),
                p["spec"]["nodeName"].as_str().unwrap_or_default().to_owned(),
                p["status"]["podIP"].as_str().unwrap_or_default().to_owned(),
                p["status"]["containerStatuses"][0]["restartCount"].as_i64().unwrap_or(-1),
            )
        })
        .collect())
}

/// Host processes whose environment says they run with pod IP `ip`.
fn processes_of(ip: &str) -> Vec<u32> {
    let needle = format!("ORCHESTRA_POD_IP={ip}");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else { continue };
        if environ.split(|&b| b == 0).any(|var| var == needle.as_bytes()) {
            found.push(pid);
        }
    }
    found
}

/// An HTTP GET to `ip:8080`, answered body.
fn http_get(ip: &str) -> Result<String, String> {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect((ip, 8080)).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    stream.write_all(b"GET /hello HTTP/1.1\r\nhost: echo\r\nconnection: close\r\n\r\n").map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream.read_to_string(&mut response).map_err(|e| e.to_string())?;
    Ok(response)
}

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: echo, namespace: demo}
spec:
  replicas: 3
  selector: {matchLabels: {app: echo}}
  strategy: {rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}
  template:
    metadata: {labels: {app: echo}}
    spec:
      terminationGracePeriodSeconds: 5
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app: echo}}}
      containers:
      - name: echo
        image: orchestra/echo
        env: [{name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]
        ports: [{containerPort: 8080}]
        readinessProbe: {httpGet: {path: /ready, port: 8080}, periodSeconds: 1}
        resources: {requests: {cpu: 10m, memory: 16Mi}}
"#;

const BAD_PODS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: no-such-image, namespace: demo}
spec:
  containers: [{name: app, image: orchestra/does-not-exist:1.0}]
---
apiVersion: v1
kind: Pod
metadata: {name: too-big, namespace: demo}
spec:
  containers:
  - {name: app, image: orchestra/pause, resources: {requests: {cpu: "1000"}}}
"#;

#[test]
fn orchestra_up_runs_a_cluster_that_kubectl_drives() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let kubectl = Kubectl::with_kubeconfig(d.join("admin.kubeconfig"));
    let cluster = start(d, 3);

    // Nodes: three, Ready, with the runtime's version and addresses.
    let nodes = eventually("3 Ready nodes", Duration::from_secs(60), || {
        let (ok, out, err) = kubectl.run(&["get", "nodes", "-o", "wide"]).into_parts();
        let ready = out.lines().filter(|l| l.contains(" Ready ")).count();
        if ok && ready == 3 { Ok(out) } else { Err(format!("{out}{err}")) }
    });
    for name in ["orchestra-control-plane", "orchestra-worker", "orchestra-worker2"] {
        assert!(nodes.contains(name), "{nodes}");
    }
    assert!(
        nodes.contains("orchestra-process://") && nodes.contains("127.0.10.1") && nodes.contains("control-plane"),
        "{nodes}"
    );

    // The control plane, as mirror pods in kube-system.
    eventually("the control plane's pods Running", Duration::from_secs(60), || {
        let (ok, out, err) = kubectl.run(&["get", "pods", "-n", "kube-system"]).into_parts();
        let running = ["etcd-", "kube-apiserver-", "kube-controller-manager-", "kube-scheduler-"].iter().all(|p| {
            out.lines().any(|l| l.starts_with(&format!("{p}orchestra-control-plane")) && l.contains("Running"))
        });
        if ok && running { Ok(()) } else { Err(format!("{out}{err}")) }
    });
    let (ok, out, err) = kubectl.run(&["cluster-info"]).into_parts();
    assert!(ok && out.contains("Kubernetes control plane is running at https://127.0.0.1:"), "{out}{err}");

    // A Deployment of the echo image: 3 pods, Running, on 3 nodes, with IPs.
    let (ok, out, err) = kubectl.run(&["create", "namespace", "demo"]).into_parts();
    assert!(ok, "{out}{err}");
    let (ok, out, err) = kubectl.run_with_input(&["apply", "-f", "-"], Some(DEPLOYMENT)).into_parts();
    assert!(ok, "{out}{err}");
    let pods = eventually("3 echo pods Ready", Duration::from_secs(90), || {
        let pods = echo_pods(&kubectl, "demo")?;
        if pods.len() == 3 { Ok(pods) } else { Err(format!("{pods:?}")) }
    });
    let mut nodes: Vec<_> = pods.iter().map(|p| p.1.clone()).collect();
    nodes.sort();
    nodes.dedup();
    assert_eq!(nodes.len(), 3, "one pod per node: {pods:?}");
    let (name, _, ip, _) = pods[0].clone();
    assert!(ip.starts_with("127."), "pod IP {ip}");
    let answer = http_get(&ip).unwrap();
    assert!(answer.contains(&format!("pod: {name}")) && answer.contains("GET /hello"), "{answer}");
    let logs = eventually("the echo server's logs", Duration::from_secs(20), || {
        let (ok, out, err) = kubectl.run(&["-n", "demo", "logs", &name]).into_parts();
        if ok && out.contains("GET /hello") { Ok(out) } else { Err(format!("{out}{err}")) }
    });
    assert!(logs.contains(&format!("echo: pod {name} listening on http://{ip}:8080")), "{logs}");

    // exec (WebSocket, through the API server): both streams and the exit
    // code, stdin to its end, and a terminal of the client's size.
    let script = ["-n", "demo", "exec", &name, "--", "sh", "-c", "echo out; echo err >&2; exit 3"];
    let exec = kubectl.run(&script);
    assert_eq!((exec.code, exec.stdout.as_str()), (3, "out\n"), "{}", exec.stderr);
    assert!(
        exec.stderr.starts_with("err\n") && exec.stderr.contains("command terminated with exit code 3"),
        "{}",
        exec.stderr
    );
    let exec = kubectl.run_with_input(&["-n", "demo", "exec", "-i", &name, "--", "cat"], Some("to stdin\nand on\n"));
    assert_eq!((exec.code, exec.stdout.as_str()), (0, "to stdin\nand on\n"), "{}", exec.stderr);
    let line = format!(
        "stty cols 91 rows 27; kubectl --kubeconfig={} --cache-dir={} -n demo exec -it {name} -- sh -c 'tty; stty size'",
        kubectl.kubeconfig().display(),
        kubectl.cache_dir().display()
    );
    let terminal = Command::new("script").args(["-qec", &line, "/dev/null"]).stdin(Stdio::null()).output().unwrap();
    let shown = String::from_utf8_lossy(&terminal.stdout);
    assert!(terminal.status.success() && shown.contains("/dev/pts/") && shown.contains("27 91"), "{shown}");

    // Kill the container's process: the agent restarts it.
    let victims = processes_of(&ip);
    assert!(!victims.is_empty(), "the echo process of {ip} is visible");
    for pid in victims {
        let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
    }
    eventually("the killed container restarted", Duration::from_secs(60), || {
        let pods = echo_pods(&kubectl, "demo")?;
        match pods.iter().find(|p| p.0 == name) {
            Some(p) if p.3 == 1 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    let (ok, out, err) = kubectl.run(&["-n", "demo", "get", "pod", &name]).into_parts();
    assert!(
        ok && out.lines().nth(1).is_some_and(|l| l.split_whitespace().nth(3) == Some("1")),
        "RESTARTS 1:\n{out}{err}"
    );
    let (ok, out, err) = kubectl.run(&["-n", "demo", "logs", &name, "--previous"]).into_parts();
    assert!(ok && out.contains("listening"), "{out}{err}");

    // Scale, roll out a new image, undo.
    let (ok, out, err) = kubectl.run(&["-n", "demo", "scale", "deployment/echo", "--replicas=5"]).into_parts();
    assert!(ok, "{out}{err}");
    eventually("5 echo pods Ready", Duration::from_secs(90), || {
        let pods = echo_pods(&kubectl, "demo")?;
        if pods.len() == 5 { Ok(()) } else { Err(format!("{pods:?}")) }
    });
    let (ok, out, err) =
        kubectl.run(&["-n", "demo", "set", "image", "deployment/echo", "echo=orchestra/echo:2.0"]).into_parts();
    assert!(ok, "{out}{err}");
    let (ok, out, err) =
        kubectl.run(&["-n", "demo", "rollout", "status", "deployment/echo", "--timeout=120s"]).into_parts();
    assert!(ok && out.contains("successfully rolled out"), "{out}{err}");
    let images = json(&kubectl, &["-n", "demo", "get", "pods", "-l", "app=echo"]).unwrap();
    assert!(
        items(&images)
            .iter()
            .filter(|p| phase(p) == "Running")
            .all(|p| p["spec"]["containers"][0]["image"] == "orchestra/echo:2.0")
    );
    let (ok, out, err) = kubectl.run(&["-n", "demo", "rollout", "undo", "deployment/echo"]).into_parts();
    assert!(ok, "{out}{err}");
    let (ok, out, err) =
        kubectl.run(&["-n", "demo", "rollout", "status", "deployment/echo", "--timeout=120s"]).into_parts();
    assert!(ok && out.contains("successfully rolled out"), "{out}{err}");
    let deployment = json(&kubectl, &["-n", "demo", "get", "deployment", "echo"]).unwrap();
    assert_eq!(deployment["spec"]["template"]["spec"]["containers"][0]["image"], "orchestra/echo");

    // An unknown image and a pod too big for any node.
    let (ok, out, err) = kubectl.run_with_input(&["apply", "-f", "-"], Some(BAD_PODS)).into_parts();
    assert!(ok, "{out}{err}");
    eventually("ImagePullBackOff", Duration::from_secs(60), || {
        let (ok, out, err) = kubectl.run(&["-n", "demo", "get", "pod", "no-such-image"]).into_parts();
        if ok && out.contains("ImagePullBackOff") { Ok(()) } else { Err(format!("{out}{err}")) }
    });
    eventually("FailedScheduling in describe", Duration::from_secs(30), || {
        let (ok, out, err) = kubectl.run(&["-n", "demo", "describe", "pod", "too-big"]).into_parts();
        if ok && out.contains("FailedScheduling") && out.contains("Insufficient cpu") && out.contains("Pending") {
            Ok(())
        } else {
            Err(format!("{out}{err}"))
        }
    });

    // Deleting the namespace removes everything in it and stops the processes.
    let ips: Vec<String> = echo_pods(&kubectl, "demo").unwrap().into_iter().map(|p| p.2).collect();
    assert!(ips.iter().all(|ip| !processes_of(ip).is_empty()), "every echo pod has a process");
    let (ok, out, err) = kubectl.run(&["delete", "namespace", "demo", "--timeout=120s"]).into_parts();
    assert!(ok, "{out}{err}");
    eventually("the namespace gone", Duration::from_secs(60), || {
        let (ok, out, err) = kubectl.run(&["get", "namespace", "demo"]).into_parts();
        if !ok && err.contains("NotFound") { Ok(()) } else { Err(format!("{out}{err}")) }
    });
    eventually("the echo processes stopped", Duration::from_secs(30), || {
        let left: Vec<_> = ips.iter().filter(|ip| !processes_of(ip).is_empty()).collect();
        if left.is_empty() { Ok(()) } else { Err(format!("{left:?}")) }
    });

    // A Deployment that must survive a restart of the whole cluster.
    let (ok, out, err) = kubectl.run(&["create", "namespace", "demo"]).into_parts();
    assert!(ok, "{out}{err}");
    let (ok, out, err) = kubectl.run_with_input(&["apply", "-f", "-"], Some(DEPLOYMENT)).into_parts();
    assert!(ok, "{out}{err}");
    eventually("3 echo pods Ready before the restart", Duration::from_secs(90), || {
        let pods = echo_pods(&kubectl, "demo")?;
        if pods.len() == 3 { Ok(()) } else { Err(format!("{pods:?}")) }
    });
    cluster.stop();
    let cluster = start(d, 3);
    let pods = eventually("3 echo pods Ready after the restart", Duration::from_secs(120), || {
        let pods = echo_pods(&kubectl, "demo")?;
        if pods.len() == 3 { Ok(pods) } else { Err(format!("{pods:?}")) }
    });
    let answer =
        eventually("the echo server answers after the restart", Duration::from_secs(30), || http_get(&pods[0].2));
    assert!(answer.contains("pod: "), "{answer}");
    cluster.stop();
}
