//! Starting a test cluster and a scheduler for tests.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, PostParams};
use orchestra::testing::TestCluster;
use orchestra_sched::config::SchedulerConfiguration;
use orchestra_sched::scheduler::SchedulerBuilder;

/// A test cluster (the API server alone) and an administrator's client of it.
pub async fn cluster() -> (TestCluster, kube::Client) {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    (cluster, client)
}

/// Starts a scheduler with `config`.
pub fn start(client: &kube::Client, config: SchedulerConfiguration) -> tokio::task::JoinHandle<()> {
    let s = SchedulerBuilder::new(client.clone()).config(config).build().expect("scheduler builds");
    tokio::spawn(async move {
        let _ = s.run().await;
    })
}

/// Creates nodes.
pub async fn create_nodes(client: &kube::Client, nodes: Vec<Node>) {
    let api: Api<Node> = Api::all(client.clone());
    for n in nodes {
        api.create(&PostParams::default(), &n).await.expect("node created");
    }
}

/// Creates a pod (uid and resourceVersion cleared). A priority set in the
/// spec becomes the PriorityClass `priority-<value>`, created if need be:
/// the Priority admission plugin computes the priority from the class, as
/// upstream's, and refuses a pod that sets it itself.
pub async fn create_pod(client: &kube::Client, mut pod: Pod) -> Pod {
    pod.metadata.uid = None;
    let spec = pod.spec.get_or_insert_with(Default::default);
    if let (Some(value), None) = (spec.priority.take(), &spec.priority_class_name) {
        let name = format!("priority-{value}");
        let class = PriorityClass {
            metadata: kube::api::ObjectMeta { name: Some(name.clone()), ..Default::default() },
            value,
            ..Default::default()
        };
        match Api::<PriorityClass>::all(client.clone()).create(&PostParams::default(), &class).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(e) => panic!("priority class created: {e}"),
        }
        spec.priority_class_name = Some(name);
    }
    let ns = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    Api::<Pod>::namespaced(client.clone(), &ns).create(&PostParams::default(), &pod).await.expect("pod created")
}

/// Waits until `check` holds for the pod, up to 10 s.
pub async fn wait_pod(client: &kube::Client, ns: &str, name: &str, check: impl Fn(&Pod) -> bool) -> Pod {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    for _ in 0..200 {
        if let Ok(p) = api.get(name).await
            && check(&p)
        {
            return p;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("pod {ns}/{name} never reached the expected state: {:?}", api.get(name).await.ok().and_then(|p| p.status));
}

/// The pod's node.
pub fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
}
