//! The node agent end to end: registration, lease, pod lifecycle, restarts,
//! images, environment and volumes, deletion, adoption, admission, scale.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use orchestra_node::runtime::{ContainerFilter, ContainerState, RuntimeBackend, SandboxFilter};
use serde_json::json;

use crate::support::*;

const LONG: Duration = Duration::from_secs(20);

async fn events_for(client: &kube::Client, name: &str) -> Vec<(String, String)> {
    let api: Api<Event> = Api::namespaced(client.clone(), "default");
    let list = api.list(&ListParams::default()).await.unwrap();
    list.items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_and_lease() {
    let cluster = cluster().await;
    let node = start(&cluster, "reg-1", "10.1.0.0/24", |c| {
        c.zone = Some("zone-a".into());
        c.region = Some("region-1".into());
        c.instance_type = Some("sim.large".into());
        c.labels.insert("team".into(), "blue".into());
        c.register_with_taints.push(k8s_openapi::api::core::v1::Taint {
            key: "dedicated".into(),
            value: Some("infra".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        });
        c.kubelet_port = 10350;
    });
    tokio::time::timeout(LONG, node.handle.registered()).await.expect("registers");
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    eventually(LONG, "node Ready", || {
        let nodes = nodes.clone();
        async move {
            let n = nodes.get("reg-1").await.unwrap();
            n.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True" && c.reason.as_deref() == Some("KubeletReady"))
            })
        }
    })
    .await;
    let n = nodes.get("reg-1").await.unwrap();
    let labels = n.metadata.labels.clone().unwrap();
    assert_eq!(labels["kubernetes.io/hostname"], "reg-1");
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert!(labels.contains_key("kubernetes.io/arch"));
    assert_eq!(labels["topology.kubernetes.io/zone"], "zone-a");
    assert_eq!(labels["topology.kubernetes.io/region"], "region-1");
    assert_eq!(labels["node.kubernetes.io/instance-type"], "sim.large");
    assert_eq!(labels["team"], "blue");
    assert_eq!(n.spec.as_ref().unwrap().taints.as_ref().unwrap()[0].key, "dedicated");
    let status = n.status.unwrap();
    assert_eq!(status.capacity.as_ref().unwrap()["cpu"].0, "4");
    assert_eq!(status.capacity.as_ref().unwrap()["pods"].0, "110");
    assert_eq!(status.allocatable.as_ref().unwrap()["memory"].0, "8388608Ki");
    let addresses = status.addresses.unwrap();
    assert!(addresses.iter().any(|a| a.type_ == "InternalIP" && a.address == "127.0.0.1"));
    assert!(addresses.iter().any(|a| a.type_ == "Hostname" && a.address == "reg-1"));
    assert_eq!(status.daemon_endpoints.unwrap().kubelet_endpoint.unwrap().port, 10350);
    let info = status.node_info.unwrap();
    assert_eq!(info.container_runtime_version, format!("orchestra-sim://{}", env!("CARGO_PKG_VERSION")));
    assert_eq!(info.kubelet_version, "v1.33.0");
    assert_eq!(info.operating_system, "linux");
    assert!(!info.kernel_version.is_empty() && !info.os_image.is_empty());
    let conditions = status.conditions.unwrap();
    for (t, s) in [("MemoryPressure", "False"), ("DiskPressure", "False"), ("PIDPressure", "False"), ("Ready", "True")]
    {
        assert!(conditions.iter().any(|c| c.type_ == t && c.status == s), "{t}");
    }

    // The lease: holder, duration, owner, renewals.
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), "kube-node-lease");
    eventually(LONG, "the node's lease", || {
        let leases = leases.clone();
        async move { leases.get_opt("reg-1").await.unwrap().is_some() }
    })
    .await;
    let first = leases.get("reg-1").await.unwrap();
    let spec = first.spec.clone().unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("reg-1"));
    assert_eq!(spec.lease_duration_seconds, Some(40));
    let renewed = spec.renew_time.unwrap();
    eventually(LONG, "lease renewed with an owner", || {
        let leases = leases.clone();
        let renewed = renewed.clone();
        async move {
            let l = leases.get("reg-1").await.unwrap();
            let owned = l.metadata.owner_references.iter().flatten().any(|o| o.kind == "Node" && o.name == "reg-1");
            owned && l.spec.and_then(|s| s.renew_time).is_some_and(|t| t.0 > renewed.0)
        }
    })
    .await;
    assert!(node.handle.stats().lease_renewals >= 2);

    // Node events: Starting, RegisteredNode, NodeReady.
    eventually(LONG, "node events", || {
        let client = cluster.client.clone();
        async move {
            let reasons: Vec<String> = events_for(&client, "reg-1").await.into_iter().map(|(r, _)| r).collect();
            ["Starting", "RegisteredNode", "NodeReady"].iter().all(|r| reasons.iter().any(|x| x == r))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_until_the_node_has_a_pod_cidr() {
    let cluster = cluster().await;
    let root = std::sync::Arc::new(tempfile::tempdir().unwrap());
    let node = start_with(
        &cluster.client,
        config("cidr-1", root.path(), None),
        orchestra_node::runtime::sim::SimRuntime::default(),
        root.clone(),
    );
    node.handle.registered().await;
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    let ready = |n: &Node| {
        n.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status.clone())
    };
    eventually(LONG, "NotReady", || {
        let nodes = nodes.clone();
        async move { ready(&nodes.get("cidr-1").await.unwrap()).as_deref() == Some("False") }
    })
    .await;
    create_pod(&cluster.client, pod_json("early", "cidr-1", &[("c", &[])])).await;
    nodes
        .patch("cidr-1", &PatchParams::default(), &Patch::Merge(json!({"spec": {"podCIDR": "10.77.3.0/24"}})))
        .await
        .unwrap();
    eventually(LONG, "Ready", || {
        let nodes = nodes.clone();
        async move { ready(&nodes.get("cidr-1").await.unwrap()).as_deref() == Some("True") }
    })
    .await;
    let pod = wait_pod(&cluster.client, "default", "early", "Running", |p| phase(p) == "Running").await;
    let ip = pod.status.unwrap().pod_ip.unwrap();
    assert!(ip.starts_with("10.77.3."), "{ip}");
    assert_eq!(node.handle.pod_cidr().as_deref(), Some("10.77.3.0/24"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_runs_with_ip_conditions_and_events() {
    let cluster = cluster().await;
    let node = start(&cluster, "run-1", "10.2.0.0/24", |_| {});
    create_pod(
        &cluster.client,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
            "spec": {"nodeName": "run-1", "containers": [
                {"name": "nginx", "image": "nginx:1.27", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}}},
                {"name": "sidecar", "image": "busybox:1.36", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}}}
            ]}
        }),
    )
    .await;
    let pod = wait_pod(&cluster.client, "default", "web", "Running and Ready", |p| {
        phase(p) == "Running" && condition(p, "Ready") == Some("True")
    })
    .await;
    let status = pod.status.clone().unwrap();
    assert!(status.pod_ip.as_deref().unwrap().starts_with("10.2.0."));
    assert_eq!(status.pod_ips.unwrap().len(), 1);
    assert_eq!(status.host_ip.as_deref(), Some("127.0.0.1"));
    assert_eq!(status.host_ips.unwrap()[0].ip, "127.0.0.1");
    assert!(status.start_time.is_some());
    assert_eq!(status.qos_class.as_deref(), Some("Guaranteed"));
    for t in ["PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready", "PodScheduled"] {
        assert_eq!(condition(&pod, t), Some("True"), "{t}");
    }
    let c = container(&pod, "nginx").unwrap();
    assert!(c.ready && c.started == Some(true));
    assert_eq!(c.restart_count, 0);
    assert!(c.container_id.as_deref().unwrap().starts_with("orchestra://"));
    assert!(c.image_id.starts_with("sha256:"));
    assert_eq!(c.image, "nginx:1.27");
    assert!(c.state.as_ref().unwrap().running.as_ref().unwrap().started_at.is_some());
    // What the runtime got: labels, log path, limits.
    let id = c.container_id.as_deref().unwrap().trim_start_matches("orchestra://").to_string();
    let cfg = node.runtime.container_config(&id).unwrap();
    assert_eq!(cfg.labels["io.kubernetes.pod.name"], "web");
    assert_eq!(cfg.labels["io.kubernetes.pod.namespace"], "default");
    assert_eq!(cfg.labels["io.kubernetes.pod.uid"], pod.metadata.uid.clone().unwrap());
    assert_eq!(cfg.labels["io.kubernetes.container.name"], "nginx");
    assert_eq!(cfg.log_path, std::path::PathBuf::from("nginx/0.log"));
    assert_eq!(cfg.resources.cpu_limit_millis, Some(100));
    assert_eq!(cfg.resources.memory_limit_bytes, Some(64 << 20));
    let sandboxes = node.runtime.list_pod_sandboxes(&SandboxFilter::default()).await.unwrap();
    assert_eq!(sandboxes.len(), 1);
    assert_eq!(sandboxes[0].labels["io.kubernetes.pod.uid"], pod.metadata.uid.clone().unwrap());
    assert_eq!(node.handle.running_pods(), 1);
    eventually(LONG, "pod events", || {
        let client = cluster.client.clone();
        async move {
            let reasons: Vec<String> = events_for(&client, "web").await.into_iter().map(|(r, _)| r).collect();
            ["Pulling", "Pulled", "Created", "Started"].iter().all(|r| reasons.iter().any(|x| x == r))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_containers_run_in_order() {
    let cluster = cluster().await;
    let node = start(&cluster, "init-1", "10.3.0.0/24", |_| {});
    create_pod(
        &cluster.client,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "ordered", "namespace": "default"},
            "spec": {"nodeName": "init-1",
                "initContainers": [
                    {"name": "first", "image": "busybox", "env": [{"name": "SIM_EXIT_AFTER_MS", "value": "150"}]},
                    {"name": "second", "image": "busybox", "env": [{"name": "SIM_EXIT_AFTER_MS", "value": "50"}]}
                ],
                "containers": [{"name": "app", "image": "busybox"}]}
        }),
    )
    .await;
    let pending = wait_pod(&cluster.client, "default", "ordered", "initializing", |p| {
        container(p, "first").is_some_and(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
    })
    .await;
    assert_eq!(phase(&pending), "Pending");
    assert_eq!(condition(&pending, "Initialized"), Some("False"));
    assert_eq!(waiting_reason(&pending, "app"), Some("PodInitializing"));
    assert_eq!(waiting_reason(&pending, "second"), Some("PodInitializing"));
    let pod = wait_pod(&cluster.client, "default", "ordered", "Running", |p| phase(p) == "Running").await;
    assert_eq!(condition(&pod, "Initialized"), Some("True"));
    for init in ["first", "second"] {
        let t = container(&pod, init).unwrap().state.clone().unwrap().terminated.unwrap();
        assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")), "{init}");
    }
    let order: Vec<String> = node.runtime.containers().into_iter().map(|(s, _)| s.name).collect();
    assert_eq!(order, ["first", "second", "app"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_policies_and_crash_loop_back_off() {
    let cluster = cluster().await;
    let _node = start(&cluster, "rp-1", "10.4.0.0/24", |_| {});
    let failing: &[(&str, &str)] = &[("SIM_EXIT_AFTER_MS", "20"), ("SIM_EXIT_CODE", "3")];
    let done: &[(&str, &str)] = &[("SIM_EXIT_AFTER_MS", "20"), ("SIM_EXIT_CODE", "0")];
    let with_policy = |name: &str, policy: &str, env: &[(&str, &str)]| {
        let mut p = pod_json(name, "rp-1", &[("c", env)]);
        p["spec"]["restartPolicy"] = json!(policy);
        p
    };
    create_pod(&cluster.client, with_policy("never-fails", "Never", failing)).await;
    create_pod(&cluster.client, with_policy("onfailure-ok", "OnFailure", done)).await;
    create_pod(&cluster.client, with_policy("always-crashes", "Always", failing)).await;
    let recovers: &[(&str, &str)] =
        &[("SIM_EXIT_AFTER_MS", "20"), ("SIM_EXIT_CODE", "1"), ("SIM_EXIT_UNTIL_ATTEMPT", "2")];
    create_pod(&cluster.client, with_policy("onfailure-recovers", "OnFailure", recovers)).await;

    let with_failing_init = |name: &str, policy: &str| {
        let mut p = pod_json(name, "rp-1", &[("app", &[])]);
        p["spec"]["restartPolicy"] = json!(policy);
        p["spec"]["initContainers"] = json!([{"name": "init", "image": "busybox", "env": [
            {"name": "SIM_EXIT_AFTER_MS", "value": "20"}, {"name": "SIM_EXIT_CODE", "value": "1"}]}]);
        p
    };
    create_pod(&cluster.client, with_failing_init("init-never", "Never")).await;
    create_pod(&cluster.client, with_failing_init("init-always", "Always")).await;

    let failed = wait_pod(&cluster.client, "default", "never-fails", "Failed", |p| phase(p) == "Failed").await;
    let t = container(&failed, "c").unwrap().state.clone().unwrap().terminated.unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (3, Some("Error")));
    assert_eq!(condition(&failed, "Ready"), Some("False"));
    let ok = wait_pod(&cluster.client, "default", "onfailure-ok", "Succeeded", |p| phase(p) == "Succeeded").await;
    assert_eq!(container(&ok, "c").unwrap().restart_count, 0);
    assert_eq!(condition(&ok, "Ready"), Some("False"));

    let looping = wait_pod(&cluster.client, "default", "always-crashes", "CrashLoopBackOff after restarts", |p| {
        waiting_reason(p, "c") == Some("CrashLoopBackOff") && container(p, "c").unwrap().restart_count >= 2
    })
    .await;
    let c = container(&looping, "c").unwrap();
    let message = c.state.clone().unwrap().waiting.unwrap().message.unwrap();
    let uid = looping.metadata.uid.clone().unwrap();
    assert!(
        message.starts_with("back-off ")
            && message.ends_with(&format!("restarting failed container=c pod=always-crashes_default({uid})")),
        "{message}"
    );
    assert_eq!(c.last_state.clone().unwrap().terminated.unwrap().exit_code, 3);
    assert_eq!(phase(&looping), "Running");

    let recovered = wait_pod(&cluster.client, "default", "onfailure-recovers", "running after two restarts", |p| {
        container(p, "c").is_some_and(|c| c.restart_count == 2 && c.state.as_ref().is_some_and(|s| s.running.is_some()))
    })
    .await;
    assert_eq!(phase(&recovered), "Running");
    let init_never = wait_pod(&cluster.client, "default", "init-never", "Failed", |p| phase(p) == "Failed").await;
    assert_eq!(waiting_reason(&init_never, "app"), Some("PodInitializing"));
    let init_always = wait_pod(&cluster.client, "default", "init-always", "init retried", |p| {
        container(p, "init").is_some_and(|c| c.restart_count >= 2)
    })
    .await;
    assert_eq!(phase(&init_always), "Pending");
    assert_eq!(condition(&init_always, "Initialized"), Some("False"));
    eventually(LONG, "BackOff event", || {
        let client = cluster.client.clone();
        async move { events_for(&client, "always-crashes").await.iter().any(|(r, _)| r == "BackOff") }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_images_back_off() {
    let cluster = cluster().await;
    let _node = start(&cluster, "img-1", "10.5.0.0/24", |_| {});
    let mut p = pod_json("missing-image", "img-1", &[("c", &[])]);
    p["spec"]["containers"][0]["image"] = json!("registry.example/does-not-exist:1");
    create_pod(&cluster.client, p).await;
    let pod = wait_pod(&cluster.client, "default", "missing-image", "ErrImagePull", |p| {
        waiting_reason(p, "c") == Some("ErrImagePull")
    })
    .await;
    assert_eq!(phase(&pod), "Pending");
    let message = container(&pod, "c").unwrap().state.clone().unwrap().waiting.unwrap().message.unwrap();
    assert!(message.contains("does-not-exist"), "{message}");
    wait_pod(&cluster.client, "default", "missing-image", "ImagePullBackOff", |p| {
        waiting_reason(p, "c") == Some("ImagePullBackOff")
    })
    .await;
    eventually(LONG, "Failed and BackOff events", || {
        let client = cluster.client.clone();
        async move {
            let events = events_for(&client, "missing-image").await;
            events.iter().any(|(r, n)| r == "Failed" && n == "Error: ErrImagePull")
                && events.iter().any(|(r, n)| r == "BackOff" && n.starts_with("Back-off pulling image"))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_and_volumes_reach_the_runtime() {
    let cluster = cluster().await;
    let node = start(&cluster, "env-1", "10.6.0.0/24", |_| {});
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "settings"}, "data": {"color": "blue", "mode": "fast"}}))
            .unwrap(),
    )
    .await
    .unwrap();
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(cluster.client.clone(), "default");
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "backend"}, "spec": {"clusterIP": "127.96.0.20", "ports": [{"port": 80}]}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(cluster.client.clone(), "default");
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "creds"}, "data": {"password": "aHVudGVyMg=="}}))
                .unwrap(),
        )
        .await
        .unwrap();
    create_pod(
        &cluster.client,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "envy", "namespace": "default", "labels": {"app": "envy"}, "annotations": {"note": "hi"}},
            "spec": {"nodeName": "env-1", "serviceAccountName": "default",
                "containers": [{
                    "name": "c", "image": "busybox",
                    "command": ["/bin/echo", "$(GREETING)"], "args": ["$(POD_IP)", "$$(POD_IP)"],
                    "envFrom": [{"prefix": "CFG_", "configMapRef": {"name": "settings"}}],
                    "env": [
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                        {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
                        {"name": "COLOR", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "color"}}},
                        {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
                        {"name": "GREETING", "value": "hello $(POD_NAME) on $(NODE)"}
                    ],
                    "volumeMounts": [
                        {"name": "cfg", "mountPath": "/etc/cfg"},
                        {"name": "sec", "mountPath": "/etc/sec"},
                        {"name": "info", "mountPath": "/etc/info"},
                        {"name": "scratch", "mountPath": "/data", "subPath": "sub"}
                    ]
                }],
                "volumes": [
                    {"name": "cfg", "configMap": {"name": "settings", "items": [{"key": "color", "path": "colour"}]}},
                    {"name": "sec", "secret": {"secretName": "creds", "defaultMode": 256}},
                    {"name": "info", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
                    {"name": "scratch", "emptyDir": {}}
                ]}
        }),
    )
    .await;
    let pod = wait_pod(&cluster.client, "default", "envy", "Running", |p| phase(p) == "Running").await;
    let ip = pod.status.clone().unwrap().pod_ip.unwrap();
    let id = container(&pod, "c").unwrap().container_id.clone().unwrap().trim_start_matches("orchestra://").to_string();
    let cfg = node.runtime.container_config(&id).unwrap();
    let env = |k: &str| cfg.envs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(env("CFG_color").as_deref(), Some("blue"));
    assert_eq!(env("CFG_mode").as_deref(), Some("fast"));
    assert_eq!(env("POD_NAME").as_deref(), Some("envy"));
    assert_eq!(env("POD_IP"), Some(ip.clone()));
    assert_eq!(env("NODE").as_deref(), Some("env-1"));
    assert_eq!(env("APP").as_deref(), Some("envy"));
    assert_eq!(env("MEM").as_deref(), Some("8192"));
    assert_eq!(env("COLOR").as_deref(), Some("blue"));
    assert_eq!(env("PASSWORD").as_deref(), Some("hunter2"));
    assert_eq!(env("GREETING").as_deref(), Some("hello envy on env-1"));
    assert_eq!(env("BACKEND_SERVICE_HOST").as_deref(), Some("127.96.0.20"));
    assert_eq!(env("BACKEND_PORT").as_deref(), Some("tcp://127.96.0.20:80"));
    assert_eq!(cfg.command, ["/bin/echo", "hello envy on env-1"]);
    assert_eq!(cfg.args, [ip.as_str(), "$(POD_IP)"]);
    let mount = |p: &str| cfg.mounts.iter().find(|m| m.container_path == std::path::Path::new(p)).unwrap().clone();
    assert_eq!(std::fs::read_to_string(mount("/etc/cfg").host_path.join("colour")).unwrap(), "blue");
    assert!(mount("/etc/cfg").read_only);
    assert_eq!(std::fs::read_to_string(mount("/etc/sec").host_path.join("password")).unwrap(), "hunter2");
    assert_eq!(std::fs::read_to_string(mount("/etc/info").host_path.join("labels")).unwrap(), "app=\"envy\"");
    let scratch = mount("/data");
    assert!(!scratch.read_only && scratch.host_path.is_dir() && scratch.host_path.ends_with("scratch/sub"));
    let uid = pod.metadata.uid.clone().unwrap();
    assert!(scratch.host_path.starts_with(node.root.path().join("pods").join(&uid).join("volumes")));
    // Through the simulated exec: the container sees its files.
    let out = node
        .runtime
        .exec_sync(&id, &["cat".to_string(), "/etc/cfg/colour".to_string()], Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(out.stdout, b"blue");

    // Deleting the pod removes its volumes.
    Api::<Pod>::namespaced(cluster.client.clone(), "default").delete("envy", &DeleteParams::default()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    eventually(LONG, "pod gone and volumes removed", || {
        let pods = pods.clone();
        let dir = node.root.path().join("pods").join(&uid);
        async move { pods.get_opt("envy").await.unwrap().is_none() && !dir.exists() }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_config_is_a_config_error_until_it_appears() {
    let cluster = cluster().await;
    let _node = start(&cluster, "cfg-1", "10.7.0.0/24", |_| {});
    let mut p = pod_json("needs-config", "cfg-1", &[("c", &[])]);
    p["spec"]["containers"][0]["env"] =
        json!([{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "late", "key": "x"}}}]);
    create_pod(&cluster.client, p).await;
    let pod = wait_pod(&cluster.client, "default", "needs-config", "CreateContainerConfigError", |p| {
        waiting_reason(p, "c") == Some("CreateContainerConfigError")
    })
    .await;
    let message = container(&pod, "c").unwrap().state.clone().unwrap().waiting.unwrap().message.unwrap();
    assert_eq!(message, "configmap \"late\" not found");
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "late"}, "data": {"x": "1"}})).unwrap(),
    )
    .await
    .unwrap();
    wait_pod(&cluster.client, "default", "needs-config", "Running", |p| phase(p) == "Running").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projected_tokens_fail_the_mount_until_the_account_exists() {
    use k8s_openapi::api::core::v1::ServiceAccount;
    let cluster = cluster().await;
    let node = start(&cluster, "tok-1", "10.19.0.0/24", |_| {});
    let mut p = pod_json("token-user", "tok-1", &[("c", &[])]);
    p["spec"]["serviceAccountName"] = json!("robot");
    p["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "access", "mountPath": "/var/run/secrets/tokens"}]);
    p["spec"]["volumes"] = json!([{"name": "access", "projected": {"defaultMode": 0o600, "sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
        {"serviceAccountToken": {"path": "vault", "audience": "vault", "expirationSeconds": 600}},
    ]}}]);
    create_pod(&cluster.client, p).await;
    // No such account: the token request is refused, the pod waits.
    let client = cluster.client.clone();
    eventually(LONG, "a FailedMount event naming the missing account", || {
        let client = client.clone();
        async move {
            events_for(&client, "token-user").await.iter().any(|(reason, note)| {
                reason == "FailedMount" && note.contains("failed to fetch token: serviceaccounts \"robot\" not found")
            })
        }
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    assert_ne!(phase(&pods.get("token-user").await.unwrap()), "Running");
    // Once it exists, the retried mount gets tokens bound to the pod.
    let accounts: Api<ServiceAccount> = Api::namespaced(cluster.client.clone(), "default");
    accounts
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "robot"}})).unwrap())
        .await
        .unwrap();
    let pod = wait_pod(&cluster.client, "default", "token-user", "Running", |p| phase(p) == "Running").await;
    let id = container(&pod, "c").unwrap().container_id.clone().unwrap().trim_start_matches("orchestra://").to_string();
    let cfg = node.runtime.container_config(&id).unwrap();
    let dir = cfg.mounts.iter().find(|m| m.container_path.ends_with("tokens")).unwrap().host_path.clone();
    let claims = |file: &str| {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(file);
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600, "{file}");
        let token = std::fs::read_to_string(path).unwrap();
        let payload = token.split('.').nth(1).unwrap().to_owned();
        use base64::Engine as _;
        let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).unwrap();
        serde_json::from_slice::<serde_json::Value>(&payload).unwrap()
    };
    let (api, vault) = (claims("token"), claims("vault"));
    let uid = pod.metadata.uid.clone().unwrap();
    for claims in [&api, &vault] {
        assert_eq!(claims["sub"], "system:serviceaccount:default:robot", "{claims}");
        assert_eq!(claims["kubernetes.io"]["pod"]["uid"], uid.as_str(), "{claims}");
        assert_eq!(claims["kubernetes.io"]["pod"]["name"], "token-user", "{claims}");
    }
    assert_eq!(vault["aud"], json!(["vault"]));
    assert_eq!(vault["exp"].as_i64().unwrap() - vault["iat"].as_i64().unwrap(), 600);
    assert_eq!(api["exp"].as_i64().unwrap() - api["iat"].as_i64().unwrap(), 3607);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_and_forced_deletion() {
    let cluster = cluster().await;
    let node = start(&cluster, "del-1", "10.8.0.0/24", |_| {});
    let mut graceful = pod_json("graceful", "del-1", &[("a", &[]), ("b", &[("SIM_STOP_DELAY_MS", "100")])]);
    graceful["spec"]["containers"][0]["lifecycle"] = json!({"preStop": {"exec": {"command": ["false"]}}});
    create_pod(&cluster.client, graceful).await;
    create_pod(&cluster.client, pod_json("forced", "del-1", &[("a", &[])])).await;
    for name in ["graceful", "forced"] {
        wait_pod(&cluster.client, "default", name, "Running", |p| phase(p) == "Running").await;
    }
    assert_eq!(node.runtime.running_containers(), 3);
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    pods.delete("graceful", &DeleteParams::default()).await.unwrap();
    let deleting = pods.get("graceful").await.unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some(), "a bound pod is deleted gracefully");
    eventually(LONG, "graceful pod gone", || {
        let pods = pods.clone();
        async move { pods.get_opt("graceful").await.unwrap().is_none() }
    })
    .await;
    pods.delete("forced", &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await.unwrap();
    eventually(LONG, "containers stopped and sandboxes removed", || {
        let rt = node.runtime.clone();
        async move {
            rt.running_containers() == 0 && rt.list_pod_sandboxes(&SandboxFilter::default()).await.unwrap().is_empty()
        }
    })
    .await;
    eventually(LONG, "workers gone", || {
        let h = node.handle.clone();
        async move { h.pods() == 0 }
    })
    .await;
    eventually(LONG, "Killing events", || {
        let client = cluster.client.clone();
        async move {
            let events = events_for(&client, "graceful").await;
            events.iter().filter(|(r, _)| r == "Killing").count() == 2
                && events.iter().any(|(r, _)| r == "FailedPreStopHook")
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_post_start_hooks_restart_the_container() {
    let cluster = cluster().await;
    let _node = start(&cluster, "hook-1", "10.16.0.0/24", |_| {});
    let mut p = pod_json("hooked", "hook-1", &[("c", &[])]);
    p["spec"]["containers"][0]["lifecycle"] = json!({"postStart": {"exec": {"command": ["sh", "-c", "exit 2"]}}});
    create_pod(&cluster.client, p).await;
    wait_pod(&cluster.client, "default", "hooked", "restarted", |p| {
        container(p, "c").is_some_and(|c| c.restart_count >= 1)
    })
    .await;
    eventually(LONG, "FailedPostStartHook", || {
        let client = cluster.client.clone();
        async move { events_for(&client, "hooked").await.iter().any(|(r, _)| r == "FailedPostStartHook") }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_pods_keep_status_and_free_their_sandbox() {
    let cluster = cluster().await;
    let node = start(&cluster, "term-1", "10.9.0.0/24", |_| {});
    let mut p = pod_json("job", "term-1", &[("c", &[("SIM_EXIT_AFTER_MS", "30"), ("SIM_LOG", "done")])]);
    p["spec"]["restartPolicy"] = json!("Never");
    create_pod(&cluster.client, p).await;
    let pod = wait_pod(&cluster.client, "default", "job", "Succeeded", |p| phase(p) == "Succeeded").await;
    eventually(LONG, "sandbox removed", || {
        let rt = node.runtime.clone();
        async move { rt.list_pod_sandboxes(&SandboxFilter::default()).await.unwrap().is_empty() }
    })
    .await;
    assert_eq!(node.runtime.ipam().in_use(), 0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let later = Api::<Pod>::namespaced(cluster.client.clone(), "default").get("job").await.unwrap();
    assert_eq!(later.status, pod.status, "a terminal pod's status stays");
    // Its log file stays for `kubectl logs`.
    let uid = pod.metadata.uid.clone().unwrap();
    let log = node.root.path().join("logs").join(format!("default_job_{uid}")).join("c/0.log");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.ends_with(" stdout F done\n"), "{text}");
    // Deleting it is immediate.
    Api::<Pod>::namespaced(cluster.client.clone(), "default").delete("job", &DeleteParams::default()).await.unwrap();
    eventually(LONG, "gone", || {
        let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
        async move { pods.get_opt("job").await.unwrap().is_none() }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_restart_adopts_running_containers_and_removes_orphans() {
    let cluster = cluster().await;
    let node = start(&cluster, "adopt-1", "10.10.0.0/24", |_| {});
    create_pod(&cluster.client, pod_json("keeper", "adopt-1", &[("c", &[])])).await;
    create_pod(&cluster.client, pod_json("orphan", "adopt-1", &[("c", &[])])).await;
    let before = wait_pod(&cluster.client, "default", "keeper", "Running", |p| phase(p) == "Running").await;
    wait_pod(&cluster.client, "default", "orphan", "Running", |p| phase(p) == "Running").await;
    let id_before = container(&before, "c").unwrap().container_id.clone();
    let (runtime, root) = node.stop().await;
    assert_eq!(runtime.running_containers(), 2, "containers outlive the agent");
    // While the agent is down, "orphan" is force-deleted.
    Api::<Pod>::namespaced(cluster.client.clone(), "default")
        .delete("orphan", &DeleteParams { grace_period_seconds: Some(0), ..Default::default() })
        .await
        .unwrap();
    // A sandbox of another node on the same runtime is never touched.
    runtime
        .run_pod_sandbox(&orchestra_node::runtime::PodSandboxConfig {
            metadata: orchestra_node::runtime::PodSandboxMetadata {
                name: "x".into(),
                namespace: "y".into(),
                uid: "foreign".into(),
                attempt: 0,
            },
            labels: [("io.kubernetes.pod.uid".to_string(), "foreign".to_string())].into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let node = start_with(&cluster.client, config("adopt-1", root.path(), Some("10.10.0.0/24")), runtime.clone(), root);
    eventually(LONG, "orphan removed", || {
        let rt = runtime.clone();
        // The orphan's sandbox goes after its container has stopped.
        async move {
            rt.list_pod_sandboxes(&SandboxFilter::default()).await.unwrap().len() == 2 && rt.running_containers() == 1
        }
    })
    .await;
    let after = wait_pod(&cluster.client, "default", "keeper", "still Running", |p| phase(p) == "Running").await;
    let c = container(&after, "c").unwrap();
    assert_eq!(c.container_id, id_before, "the same container, adopted");
    assert_eq!(c.restart_count, 0);
    let containers = runtime.list_containers(&ContainerFilter::default()).await.unwrap();
    assert_eq!(containers.iter().filter(|c| c.state == ContainerState::Running).count(), 1);
    assert_eq!(node.handle.pods(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_that_do_not_fit_are_rejected() {
    let cluster = cluster().await;
    let _node = start(&cluster, "fit-1", "10.11.0.0/24", |_| {});
    let mut big = pod_json("big", "fit-1", &[("c", &[])]);
    big["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "3"}});
    create_pod(&cluster.client, big).await;
    wait_pod(&cluster.client, "default", "big", "Running", |p| phase(p) == "Running").await;
    let mut bigger = pod_json("bigger", "fit-1", &[("c", &[])]);
    bigger["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "2"}});
    create_pod(&cluster.client, bigger).await;
    let rejected = wait_pod(&cluster.client, "default", "bigger", "Failed", |p| phase(p) == "Failed").await;
    let status = rejected.status.unwrap();
    assert_eq!(status.reason.as_deref(), Some("OutOfcpu"));
    assert_eq!(
        status.message.as_deref(),
        Some("Pod was rejected: Node didn't have enough resource: cpu, requested: 2000, used: 3000, capacity: 4000")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_gate_readiness_and_restart_unhealthy_containers() {
    let cluster = cluster().await;
    let _node = start(&cluster, "probe-1", "10.12.0.0/24", |_| {});
    create_pod(
        &cluster.client,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "probed", "namespace": "default"},
            "spec": {"nodeName": "probe-1", "terminationGracePeriodSeconds": 1, "containers": [
                {"name": "never-ready", "image": "busybox",
                 "readinessProbe": {"exec": {"command": ["false"]}, "periodSeconds": 1}},
                {"name": "ready", "image": "busybox",
                 "startupProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1},
                 "readinessProbe": {"exec": {"command": ["sh", "-c", "test -d /data"]}, "periodSeconds": 1},
                 "volumeMounts": [{"name": "d", "mountPath": "/data"}]},
                {"name": "unhealthy", "image": "busybox",
                 "livenessProbe": {"exec": {"command": ["false"]}, "periodSeconds": 1, "failureThreshold": 1}}
            ], "volumes": [{"name": "d", "emptyDir": {}}]}
        }),
    )
    .await;
    let pod = wait_pod(&cluster.client, "default", "probed", "liveness restarts and readiness", |p| {
        container(p, "ready").is_some_and(|c| c.ready)
            && container(p, "unhealthy").is_some_and(|c| c.restart_count >= 1)
    })
    .await;
    assert!(!container(&pod, "never-ready").unwrap().ready);
    assert_eq!(condition(&pod, "Ready"), Some("False"));
    assert_eq!(condition(&pod, "ContainersReady"), Some("False"));
    eventually(LONG, "Unhealthy and Killing events", || {
        let client = cluster.client.clone();
        async move {
            let events = events_for(&client, "probed").await;
            events.iter().any(|(r, n)| r == "Unhealthy" && n.starts_with("Liveness probe failed"))
                && events.iter().any(|(r, n)| r == "Unhealthy" && n.starts_with("Readiness probe failed"))
                && events
                    .iter()
                    .any(|(r, n)| r == "Killing" && n == "Container unhealthy failed liveness probe, will be restarted")
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_deadline_fails_the_pod() {
    let cluster = cluster().await;
    let node = start(&cluster, "dl-1", "10.13.0.0/24", |_| {});
    let mut p = pod_json("deadline", "dl-1", &[("c", &[])]);
    p["spec"]["activeDeadlineSeconds"] = json!(1);
    create_pod(&cluster.client, p).await;
    let pod = wait_pod(&cluster.client, "default", "deadline", "Failed", |p| phase(p) == "Failed").await;
    assert_eq!(pod.status.as_ref().unwrap().reason.as_deref(), Some("DeadlineExceeded"));
    eventually(LONG, "containers stopped", || {
        let rt = node.runtime.clone();
        async move { rt.running_containers() == 0 }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_pods_and_mirror_pods() {
    let cluster = cluster().await;
    let manifests = tempfile::tempdir().unwrap();
    let manifest = |image: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\n  namespace: kube-system\nspec:\n  containers:\n  - name: etcd\n    image: {image}\n"
        )
    };
    std::fs::write(manifests.path().join("etcd.yaml"), manifest("etcd:3.5")).unwrap();
    let dir = manifests.path().to_path_buf();
    let node = start(&cluster, "static-1", "10.14.0.0/24", |c| c.static_pod_path = Some(dir));
    let mirror =
        wait_pod(&cluster.client, "kube-system", "etcd-static-1", "mirror Running", |p| phase(p) == "Running").await;
    let annotations = mirror.metadata.annotations.clone().unwrap();
    assert_eq!(annotations["kubernetes.io/config.source"], "file");
    let hash = annotations["kubernetes.io/config.hash"].clone();
    assert_eq!(annotations["kubernetes.io/config.mirror"], hash);
    let owner = &mirror.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Node", "static-1"));
    let sandboxes = node.runtime.list_pod_sandboxes(&SandboxFilter::default()).await.unwrap();
    assert_eq!(sandboxes[0].labels["io.kubernetes.pod.uid"], hash, "the static pod runs under its hash");

    // A deleted mirror pod comes back; the static pod keeps running.
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "kube-system");
    pods.delete("etcd-static-1", &DeleteParams::default()).await.unwrap();
    let old_uid = mirror.metadata.uid.clone();
    wait_pod(&cluster.client, "kube-system", "etcd-static-1", "mirror recreated with status", |p| {
        p.metadata.uid != old_uid && p.metadata.deletion_timestamp.is_none() && phase(p) == "Running"
    })
    .await;
    assert_eq!(node.runtime.running_containers(), 1);

    // An edited manifest restarts the pod under a new hash.
    std::fs::write(manifests.path().join("etcd.yaml"), manifest("etcd:3.6")).unwrap();
    let updated = wait_pod(&cluster.client, "kube-system", "etcd-static-1", "new image running", |p| {
        phase(p) == "Running" && container(p, "etcd").is_some_and(|c| c.image == "etcd:3.6")
    })
    .await;
    assert_ne!(updated.metadata.annotations.unwrap()["kubernetes.io/config.hash"], hash);
    eventually(LONG, "one sandbox left", || {
        let rt = node.runtime.clone();
        async move {
            rt.list_pod_sandboxes(&SandboxFilter::default()).await.unwrap().len() == 1 && rt.running_containers() == 1
        }
    })
    .await;

    // A removed manifest stops the pod and deletes the mirror.
    std::fs::remove_file(manifests.path().join("etcd.yaml")).unwrap();
    eventually(LONG, "static pod stopped, mirror gone", || {
        let rt = node.runtime.clone();
        let pods = pods.clone();
        async move { rt.running_containers() == 0 && pods.get_opt("etcd-static-1").await.unwrap().is_none() }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_pods_run_without_the_api_server() {
    // A client that reaches nothing: registration keeps failing.
    let manifests = tempfile::tempdir().unwrap();
    std::fs::write(
        manifests.path().join("web.json"),
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web"},"spec":{"containers":[{"name":"c","image":"nginx"}]}}"#,
    )
    .unwrap();
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let root = std::sync::Arc::new(tempfile::tempdir().unwrap());
    let mut c = crate::support::config("offline-1", root.path(), Some("10.15.0.0/24"));
    c.static_pod_path = Some(manifests.path().to_path_buf());
    let node = start_with(&client, c, orchestra_node::runtime::sim::SimRuntime::default(), root);
    eventually(LONG, "static pod running offline", || {
        let rt = node.runtime.clone();
        async move { rt.running_containers() == 1 }
    })
    .await;
    assert!(!node.handle.is_registered());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_agents_many_pods() {
    const NODES: usize = 50;
    const PODS: usize = 20;
    let cluster = cluster().await;
    let shared = orchestra_node::agent::SharedPods::start(cluster.client.clone());
    let mut nodes = Vec::new();
    for i in 0..NODES {
        let root = std::sync::Arc::new(tempfile::tempdir().unwrap());
        let mut c = config(&format!("scale-{i}"), root.path(), Some(&format!("10.{}.{}.0/24", 100 + i / 200, i % 200)));
        c.node_status_update_frequency = Duration::from_secs(1);
        c.lease_renew_interval = Duration::from_secs(2);
        let runtime = orchestra_node::runtime::sim::SimRuntime::new(
            orchestra_node::runtime::sim::SimConfig::default().with_write_logs(false),
        );
        nodes.push(start_shared(&cluster.client, c, runtime, root, Some(shared.clone())));
    }
    for n in &nodes {
        tokio::time::timeout(LONG, n.handle.registered()).await.expect("registered");
    }
    assert_eq!(shared.subscribers(), NODES);
    let started = std::time::Instant::now();
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    let mut creates = Vec::new();
    for i in 0..NODES {
        for j in 0..PODS {
            let pod: Pod =
                serde_json::from_value(pod_json(&format!("p-{i}-{j}"), &format!("scale-{i}"), &[("c", &[])])).unwrap();
            let pods = pods.clone();
            creates.push(async move { pods.create(&PostParams::default(), &pod).await.unwrap() });
        }
    }
    futures::future::join_all(creates).await;
    let created_at = started.elapsed();
    eventually(Duration::from_secs(40), "every pod running", || {
        let nodes = &nodes;
        async move { nodes.iter().all(|n| n.handle.running_pods() == PODS) }
    })
    .await;
    let running_at = started.elapsed();
    eventually(Duration::from_secs(40), "every pod reported Running", || {
        let pods = pods.clone();
        async move {
            let list = pods.list(&ListParams::default()).await.unwrap();
            list.items.iter().filter(|p| phase(p) == "Running").count() == NODES * PODS
        }
    })
    .await;
    eprintln!(
        "{} pods on {NODES} agents: created after {:?}, running after {:?}, reported after {:?}",
        NODES * PODS,
        created_at,
        running_at,
        started.elapsed()
    );
    let ips: std::collections::HashSet<String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| p.status.as_ref().unwrap().pod_ip.clone().unwrap())
        .collect();
    assert_eq!(ips.len(), NODES * PODS, "every pod has its own IP");
}

/// Idle agents' CPU: `NODE_AGENTS=5000 cargo test -p orchestra-node --release
/// --test node idle_agents -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check"]
async fn idle_agents_heartbeat_cpu() {
    fn cpu_seconds() -> f64 {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let fields: Vec<&str> = stat.rsplit(')').next().unwrap().split_whitespace().collect();
        let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
        ticks / 100.0
    }
    let n: usize = std::env::var("NODE_AGENTS").ok().and_then(|v| v.parse().ok()).unwrap_or(500);
    let window: u64 = std::env::var("NODE_WINDOW_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(30);
    let cluster = cluster().await;
    let root = std::sync::Arc::new(tempfile::tempdir().unwrap());
    let shared = (std::env::var("NODE_SHARED_PODS").as_deref() != Ok("0"))
        .then(|| orchestra_node::agent::SharedPods::start(cluster.client.clone()));
    let mut nodes = Vec::new();
    for i in 0..n {
        let mut c = orchestra_node::agent::NodeConfig::new(format!("idle-{i}"))
            .root_dir(root.path().join(i.to_string()))
            .fixed_capacity(4000, 8 << 30)
            .pod_cidr(format!("10.{}.{}.0/24", i / 250, i % 250));
        let secs = |name: &str, default: u64| {
            Duration::from_secs(std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default))
        };
        c.housekeeping_interval = secs("NODE_HOUSEKEEPING_SECS", 10);
        c.lease_renew_interval = secs("NODE_LEASE_SECS", 10);
        c.node_status_update_frequency = secs("NODE_STATUS_SECS", 10);
        let runtime = orchestra_node::runtime::sim::SimRuntime::new(
            orchestra_node::runtime::sim::SimConfig::default().with_write_logs(false),
        );
        nodes.push(start_shared(&cluster.client, c, runtime, root.clone(), shared.clone()));
    }
    let started = std::time::Instant::now();
    for node in &nodes {
        node.handle.registered().await;
    }
    eprintln!("{n} agents registered in {:?}", started.elapsed());
    tokio::time::sleep(Duration::from_secs(15)).await;
    let (cpu0, t0) = (cpu_seconds(), std::time::Instant::now());
    tokio::time::sleep(Duration::from_secs(window)).await;
    let pct = 100.0 * (cpu_seconds() - cpu0) / t0.elapsed().as_secs_f64();
    let renewals: u64 = nodes.iter().map(|n| n.handle.stats().lease_renewals).sum();
    eprintln!("heartbeat_cpu_pct={pct:.1} agents={n} lease_renewals={renewals}");
}

/// Pod IPs from a `127.0.0.0/8` CIDR are bindable on Linux's loopback: the
/// test plays the container's server and the agent probes it over TCP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_and_tcp_probes_reach_the_pod_ip() {
    let cluster = cluster().await;
    // A CIDR of its own per test process, so parallel runs do not collide.
    let cidr = format!("127.{}.{}.0/24", 40 + std::process::id() % 200, (std::process::id() / 200) % 250);
    let _node = start(&cluster, "net-1", &cidr, |_| {});
    create_pod(
        &cluster.client,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "served", "namespace": "default"},
            "spec": {"nodeName": "net-1", "containers": [{
                "name": "web", "image": "nginx",
                "ports": [{"name": "http", "containerPort": 18080}],
                "readinessProbe": {"httpGet": {"path": "/ready", "port": "http", "httpHeaders": [{"name": "X-Check", "value": "1"}]}, "periodSeconds": 1},
                "livenessProbe": {"tcpSocket": {"port": 18080}, "periodSeconds": 1, "initialDelaySeconds": 1, "failureThreshold": 30}
            }]}
        }),
    )
    .await;
    let pod = wait_pod(&cluster.client, "default", "served", "Running", |p| phase(p) == "Running").await;
    assert_eq!(condition(&pod, "Ready"), Some("False"), "nothing listens yet");
    let ip = pod.status.unwrap().pod_ip.unwrap();
    let listener = tokio::net::TcpListener::bind((ip.as_str(), 18080)).await.expect("pod IPs are bindable on loopback");
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut s, _)) = listener.accept().await {
            let seen_tx = seen_tx.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 2048];
                let n = s.read(&mut buf).await.unwrap_or(0);
                if n > 0 {
                    let _ = seen_tx.send(String::from_utf8_lossy(&buf[..n]).into_owned());
                    let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await;
                }
            });
        }
    });
    let ready =
        wait_pod(&cluster.client, "default", "served", "Ready", |p| condition(p, "Ready") == Some("True")).await;
    assert!(container(&ready, "web").unwrap().ready);
    let request = tokio::time::timeout(LONG, seen_rx.recv()).await.unwrap().unwrap();
    assert!(request.starts_with("GET /ready HTTP/1.1\r\n") && request.contains("X-Check: 1\r\n"), "{request}");
    assert_eq!(container(&ready, "web").unwrap().restart_count, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_network_pods_take_the_node_address() {
    let cluster = cluster().await;
    let node = start(&cluster, "hostnet-1", "10.17.0.0/24", |_| {});
    let mut p = pod_json("hostnet", "hostnet-1", &[("c", &[])]);
    p["spec"]["hostNetwork"] = json!(true);
    create_pod(&cluster.client, p).await;
    let pod = wait_pod(&cluster.client, "default", "hostnet", "Running", |p| phase(p) == "Running").await;
    let status = pod.status.unwrap();
    assert_eq!(status.pod_ip, status.host_ip);
    assert_eq!(node.runtime.ipam().in_use(), 0, "no pod network address used");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_that_lost_its_containers_restarts_them_counting_on() {
    let cluster = cluster().await;
    let node = start(&cluster, "lost-1", "10.18.0.0/24", |_| {});
    create_pod(&cluster.client, pod_json("survivor", "lost-1", &[("c", &[])])).await;
    let before = wait_pod(&cluster.client, "default", "survivor", "Running", |p| phase(p) == "Running").await;
    let (_old_runtime, root) = node.stop().await;
    let fresh = orchestra_node::runtime::sim::SimRuntime::default();
    let _node = start_with(&cluster.client, config("lost-1", root.path(), Some("10.18.0.0/24")), fresh.clone(), root);
    let after = wait_pod(&cluster.client, "default", "survivor", "running again", |p| {
        container(p, "c")
            .is_some_and(|c| c.restart_count == 1 && c.container_id != container(&before, "c").unwrap().container_id)
    })
    .await;
    assert_eq!(phase(&after), "Running");
    assert_eq!(fresh.running_containers(), 1);
    let (status, config) = fresh.containers().pop().unwrap();
    assert_eq!((status.attempt, config.log_path), (1, std::path::PathBuf::from("c/1.log")));
}
