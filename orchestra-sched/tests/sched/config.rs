//! Scheduler configurations read from files on disk (YAML and JSON), built
//! into profiles and run.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use orchestra_sched::config::SchedulerConfiguration;
use orchestra_sched::framework::Handle;
use orchestra_sched::profile::Profile;
use orchestra_sched::registry::Registry;
use orchestra_sched::scheduler::SchedulerBuilder;
use orchestra_sched::testing::{NodeBuilder, PodBuilder};

use super::support::*;

const YAML: &str = r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
parallelism: 4
percentageOfNodesToScore: 30
podInitialBackoffSeconds: 2
podMaxBackoffSeconds: 20
leaderElection:
  leaderElect: false
  resourceName: my-scheduler
profiles:
- schedulerName: default-scheduler
- schedulerName: packing
  percentageOfNodesToScore: 50
  plugins:
    multiPoint:
      disabled:
      - name: NodeResourcesBalancedAllocation
    score:
      enabled:
      - name: NodeResourcesFit
        weight: 5
    filter:
      disabled:
      - name: NodePorts
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
"#;

const JSON: &str = r#"{
  "apiVersion": "kubescheduler.config.k8s.io/v1",
  "kind": "KubeSchedulerConfiguration",
  "parallelism": 4,
  "percentageOfNodesToScore": 30,
  "podInitialBackoffSeconds": 2,
  "podMaxBackoffSeconds": 20,
  "leaderElection": {"leaderElect": false, "resourceName": "my-scheduler"},
  "profiles": [
    {"schedulerName": "default-scheduler"},
    {
      "schedulerName": "packing",
      "percentageOfNodesToScore": 50,
      "plugins": {
        "multiPoint": {"disabled": [{"name": "NodeResourcesBalancedAllocation"}]},
        "score": {"enabled": [{"name": "NodeResourcesFit", "weight": 5}]},
        "filter": {"disabled": [{"name": "NodePorts"}]}
      },
      "pluginConfig": [
        {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}
      ]
    }
  ]
}"#;

/// Writes `text` to `name` in a new temporary directory.
fn write(name: &str, text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("file written");
    (dir, path)
}

/// What the file says, as read back.
fn check(cfg: &SchedulerConfiguration) {
    assert_eq!(cfg.kind.as_deref(), Some("KubeSchedulerConfiguration"));
    assert_eq!((cfg.parallelism, cfg.percentage_of_nodes_to_score), (4, Some(30)));
    assert_eq!((cfg.pod_initial_backoff_seconds, cfg.pod_max_backoff_seconds), (2, 20));
    assert_eq!(cfg.leader_election.resource_name, "my-scheduler");
    assert_eq!(cfg.leader_election.resource_namespace, "kube-system", "defaulted");
    let names: Vec<_> = cfg.profiles.iter().map(|p| p.scheduler_name.as_str()).collect();
    assert_eq!(names, ["default-scheduler", "packing"]);
    let packing = &cfg.profiles[1];
    assert_eq!(packing.percentage_of_nodes_to_score, Some(50));
    assert_eq!(packing.plugin_config.len(), 1);
    assert_eq!(packing.plugin_config[0].args["scoringStrategy"]["type"], "MostAllocated");
    // The profiles build from the default registry as configured.
    let p = Profile::build(packing, &Registry::default(), &Handle::default()).expect("packing builds");
    let scores: Vec<_> = p.score.iter().map(|(s, w)| (s.name(), *w)).collect();
    assert!(scores.contains(&("NodeResourcesFit", 5)), "{scores:?}");
    assert!(scores.iter().all(|(n, _)| *n != "NodeResourcesBalancedAllocation"), "{scores:?}");
    assert!(p.filter.iter().all(|f| f.name() != "NodePorts"));
    assert!(p.filter.iter().any(|f| f.name() == "NodeResourcesFit"));
    assert_eq!(p.percentage_of_nodes_to_score, Some(50));
    let default = Profile::build(&cfg.profiles[0], &Registry::default(), &Handle::default()).expect("default builds");
    assert!(default.filter.iter().any(|f| f.name() == "NodePorts"));
}

#[test]
fn loads_from_a_yaml_file() {
    let (_dir, path) = write("scheduler.yaml", YAML);
    let cfg = SchedulerConfiguration::from_file(&path).expect("YAML file loads");
    check(&cfg);
}

#[test]
fn loads_from_a_json_file_as_the_same_configuration() {
    let (_dir, json) = write("scheduler.json", JSON);
    let (_dir2, yaml) = write("scheduler.yaml", YAML);
    let cfg = SchedulerConfiguration::from_file(&json).expect("JSON file loads");
    check(&cfg);
    assert_eq!(cfg, SchedulerConfiguration::from_file(&yaml).unwrap());
}

#[test]
fn bad_files_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let missing = SchedulerConfiguration::from_file(dir.path().join("missing.yaml")).unwrap_err();
    assert!(missing.to_string().starts_with("scheduler configuration: "), "{missing}");
    let (_dir, path) = write("bad.json", r#"{"profiles": [{"schedulerName": 7, "plugins": "#);
    assert!(SchedulerConfiguration::from_file(&path).is_err());
    let (_dir, path) = write("bad.yaml", "profiles:\n- plugins: {}\n");
    let err = SchedulerConfiguration::from_file(&path).unwrap_err();
    assert!(err.to_string().contains("schedulerName"), "a profile needs its name: {err}");
}

/// Both profiles of the file serve their pods: default-scheduler pods
/// spread over the nodes, `packing` (MostAllocated) pods go to one.
#[tokio::test]
async fn a_scheduler_runs_the_profiles_of_a_file() {
    let (_dir, path) = write("scheduler.yaml", YAML);
    let cfg = SchedulerConfiguration::from_file(&path).unwrap();
    let (_cluster, client) = cluster().await;
    create_nodes(&client, (0..2).map(|i| NodeBuilder::new(&format!("n{i}")).cpu("4").memory("8Gi").build()).collect())
        .await;
    let s = SchedulerBuilder::new(client.clone()).config(cfg).build().expect("scheduler builds");
    assert_eq!(
        s.profiles().iter().map(|p| p.scheduler_name.as_str()).collect::<Vec<_>>(),
        ["default-scheduler", "packing"]
    );
    tokio::spawn(async move {
        let _ = s.run().await;
    });
    let placed = async |prefix: &str, scheduler: &str| {
        let mut nodes = HashSet::new();
        for i in 0..3 {
            let name = format!("{prefix}{i}");
            create_pod(&client, PodBuilder::new(&name).scheduler(scheduler).cpu("500m").memory("256Mi").build()).await;
            let p = wait_pod(&client, "default", &name, |p| node_of(p).is_some()).await;
            nodes.insert(node_of(&p).unwrap().to_owned());
        }
        nodes
    };
    assert_eq!(placed("spread", "default-scheduler").await.len(), 2, "LeastAllocated spreads");
    assert_eq!(placed("pack", "packing").await.len(), 1, "MostAllocated packs");
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    assert_eq!(
        api.list(&ListParams::default()).await.unwrap().items.iter().filter(|p| node_of(p).is_some()).count(),
        6
    );
}
