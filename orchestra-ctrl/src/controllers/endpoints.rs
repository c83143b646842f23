//! The Endpoints and EndpointSlice controllers (one reconciler writes both):
//! for every Service with a selector, the ready and not-ready addresses of
//! matching pods and the resolved target ports, in an `Endpoints` object of
//! the Service's name and in EndpointSlices of at most [`MAX_PER_SLICE`]
//! endpoints labelled `kubernetes.io/service-name`. Pod changes reach the
//! Service's queue key at once, so updates follow within the queue latency.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, ObjectReference, Pod, Service,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort as SlicePort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::{Api, Client};

use super::util::{is_ready, owner_reference, workload_selects};
use crate::controller::Controller;
use crate::informer::{Informer, ObjectKey, SharedInformerFactory};
use crate::{Action, Error};

/// Name of the controller.
pub const NAME: &str = "endpoint-controller";
/// Most endpoints in one EndpointSlice.
pub const MAX_PER_SLICE: usize = 100;
/// Label tying a slice to its Service.
pub const SERVICE_NAME: &str = "kubernetes.io/service-name";
/// Label naming the slice's manager.
pub const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
/// Our value of [`MANAGED_BY`].
pub const MANAGER: &str = "endpointslice-controller.k8s.io";

/// What the reconciler works with.
pub struct Context {
    /// Client for writes.
    pub client: Client,
    /// Shared pod cache.
    pub pods: Arc<Informer<Pod>>,
    /// Shared Endpoints cache.
    pub endpoints: Arc<Informer<Endpoints>>,
    /// Shared EndpointSlice cache.
    pub slices: Arc<Informer<EndpointSlice>>,
}

fn service_selector(svc: &Service) -> Option<LabelSelector> {
    let sel = svc.spec.as_ref()?.selector.clone()?;
    if sel.is_empty() {
        return None;
    }
    Some(LabelSelector { match_labels: Some(sel), match_expressions: None })
}

/// The port number a service port targets on `pod` (named ports looked up
/// among the pod's container ports).
pub fn target_port(port: &k8s_openapi::api::core::v1::ServicePort, pod: &Pod) -> Option<i32> {
    match port.target_port.clone() {
        None => Some(port.port),
        Some(IntOrString::Int(i)) => Some(i),
        Some(IntOrString::String(name)) => pod
            .spec
            .as_ref()?
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .map(|p| p.container_port),
    }
}

/// Endpoints of `svc` among `pods`: (ready, not ready) addresses and ports.
/// Pods that terminated (`Succeeded`, `Failed`), are being deleted or have
/// no address yet are left out (upstream's `ShouldPodBeInEndpoints`); with
/// `publishNotReadyAddresses` every other pod counts as ready.
pub fn compute(svc: &Service, pods: &[Arc<Pod>]) -> Vec<EndpointSubset> {
    let Some(selector) = service_selector(svc) else {
        return Vec::new();
    };
    let ports = svc.spec.as_ref().and_then(|s| s.ports.clone()).unwrap_or_default();
    let publish_not_ready = svc.spec.as_ref().and_then(|s| s.publish_not_ready_addresses).unwrap_or(false);
    // Group pods by their resolved port list (name, number, protocol), as
    // upstream does: (ready, not ready) addresses per group.
    type Ports = Vec<(Option<String>, i32, String)>;
    let mut groups: BTreeMap<Ports, (Vec<EndpointAddress>, Vec<EndpointAddress>)> = BTreeMap::new();
    for pod in pods {
        let terminal = matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"));
        if !workload_selects(&selector, pod.metadata.labels.as_ref())
            || pod.metadata.deletion_timestamp.is_some()
            || terminal
        {
            continue;
        }
        let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()).filter(|i| !i.is_empty()) else {
            continue;
        };
        let resolved: Vec<_> = ports
            .iter()
            .filter_map(|p| {
                target_port(p, pod).map(|n| (p.name.clone(), n, p.protocol.clone().unwrap_or_else(|| "TCP".into())))
            })
            .collect();
        let address = EndpointAddress {
            ip,
            node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            target_ref: Some(ObjectReference {
                kind: Some("Pod".into()),
                namespace: pod.metadata.namespace.clone(),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
                ..Default::default()
            }),
            hostname: None,
        };
        let entry = groups.entry(resolved).or_default();
        if publish_not_ready || is_ready(pod) {
            entry.0.push(address);
        } else {
            entry.1.push(address);
        }
    }
    groups
        .into_iter()
        .map(|(ports, (mut ready, mut not_ready))| {
            ready.sort_by(|a, b| a.ip.cmp(&b.ip));
            not_ready.sort_by(|a, b| a.ip.cmp(&b.ip));
            EndpointSubset {
                addresses: (!ready.is_empty()).then_some(ready),
                not_ready_addresses: (!not_ready.is_empty()).then_some(not_ready),
                ports: Some(
                    ports
                        .into_iter()
                        .map(|(name, port, protocol)| EndpointPort {
                            name,
                            port,
                            protocol: Some(protocol),
                            app_protocol: None,
                        })
                        .collect(),
                ),
            }
        })
        .collect()
}

/// The slices for `subsets`, at most [`MAX_PER_SLICE`] endpoints each;
/// without any endpoint, one empty placeholder slice, as upstream keeps.
pub fn slices(svc: &Service, subsets: &[EndpointSubset]) -> Vec<EndpointSlice> {
    let name = svc.metadata.name.clone().unwrap_or_default();
    let slice = |index: usize, endpoints: Vec<Endpoint>, ports: Vec<SlicePort>| EndpointSlice {
        metadata: ObjectMeta {
            name: Some(format!("{name}-{index}")),
            namespace: svc.metadata.namespace.clone(),
            labels: Some(
                [(SERVICE_NAME.to_string(), name.clone()), (MANAGED_BY.to_string(), MANAGER.to_string())].into(),
            ),
            owner_references: Some(vec![owner_reference(svc)]),
            ..Default::default()
        },
        address_type: "IPv4".into(),
        endpoints,
        ports: Some(ports),
    };
    let mut out = Vec::new();
    for subset in subsets {
        let ports: Vec<SlicePort> = subset
            .ports
            .iter()
            .flatten()
            .map(|p| SlicePort {
                name: p.name.clone(),
                port: Some(p.port),
                protocol: p.protocol.clone(),
                app_protocol: None,
            })
            .collect();
        let endpoints: Vec<Endpoint> = subset
            .addresses
            .iter()
            .flatten()
            .map(|a| (a, true))
            .chain(subset.not_ready_addresses.iter().flatten().map(|a| (a, false)))
            .map(|(a, ready)| Endpoint {
                addresses: vec![a.ip.clone()],
                conditions: Some(EndpointConditions {
                    ready: Some(ready),
                    serving: Some(ready),
                    terminating: Some(false),
                }),
                node_name: a.node_name.clone(),
                target_ref: a.target_ref.clone(),
                ..Default::default()
            })
            .collect();
        for chunk in endpoints.chunks(MAX_PER_SLICE) {
            out.push(slice(out.len(), chunk.to_vec(), ports.clone()));
        }
    }
    if out.is_empty() {
        out.push(slice(0, Vec::new(), Vec::new()));
    }
    out
}

async fn put<K>(api: &Api<K>, current: Option<Arc<K>>, mut wanted: K) -> Result<(), Error>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = wanted.meta().name.clone().unwrap_or_default();
    match current {
        None => match api.create(&PostParams::default(), &wanted).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Err(Error::Other("created meanwhile".into())),
            Err(e) => Err(e.into()),
        },
        Some(current) => {
            wanted.meta_mut().resource_version = current.meta().resource_version.clone();
            wanted.meta_mut().uid = current.meta().uid.clone();
            wanted.meta_mut().creation_timestamp = current.meta().creation_timestamp.clone();
            wanted.meta_mut().managed_fields = current.meta().managed_fields.clone();
            wanted.meta_mut().generation = current.meta().generation;
            let same = serde_json::to_value(&wanted).ok() == serde_json::to_value(current.as_ref()).ok();
            if !same {
                api.replace(&name, &PostParams::default(), &wanted).await?;
            }
            Ok(())
        }
    }
}

/// Writes the Endpoints and EndpointSlices of a Service.
pub async fn reconcile(svc: Arc<Service>, ctx: Arc<Context>) -> Result<Action, Error> {
    let key = ObjectKey::of(svc.as_ref());
    let namespace = key.namespace.clone().unwrap_or_default();
    if service_selector(&svc).is_none() || svc.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let pods = ctx.pods.by_namespace(&namespace);
    let subsets = compute(&svc, &pods);
    let endpoints = Endpoints {
        metadata: ObjectMeta {
            name: Some(key.name.clone()),
            namespace: Some(namespace.clone()),
            labels: svc.metadata.labels.clone(),
            ..Default::default()
        },
        subsets: (!subsets.is_empty()).then(|| subsets.clone()),
    };
    let api: Api<Endpoints> = Api::namespaced(ctx.client.clone(), &namespace);
    put(&api, ctx.endpoints.get(&key), endpoints).await?;

    let wanted = slices(&svc, &subsets);
    let slice_api: Api<EndpointSlice> = Api::namespaced(ctx.client.clone(), &namespace);
    let existing: Vec<Arc<EndpointSlice>> = ctx
        .slices
        .by_label(SERVICE_NAME, &key.name)
        .into_iter()
        .filter(|s| s.metadata.namespace.as_deref() == Some(namespace.as_str()))
        .collect();
    let wanted_names: Vec<String> = wanted.iter().filter_map(|s| s.metadata.name.clone()).collect();
    for slice in wanted {
        let name = slice.metadata.name.clone().unwrap_or_default();
        let current = ctx.slices.get(&ObjectKey::new(&namespace, &name));
        put(&slice_api, current, slice).await?;
    }
    for old in existing {
        let name = old.metadata.name.clone().unwrap_or_default();
        if !wanted_names.contains(&name) {
            match slice_api.delete(&name, &DeleteParams::default()).await {
                Ok(_) | Err(kube::Error::Api(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(Action::await_change())
}

/// Runs the controller until `shutdown`.
pub async fn run(factory: SharedInformerFactory, workers: usize, shutdown: impl Future<Output = ()> + Send) {
    let services = factory.informer::<Service>();
    let ctx = Arc::new(Context {
        client: factory.client().clone(),
        pods: factory.informer::<Pod>(),
        endpoints: factory.informer::<Endpoints>(),
        slices: factory.informer::<EndpointSlice>(),
    });
    Controller::<Service>::for_(&factory)
        .watches::<Pod>(move |pod| {
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            services
                .by_namespace(&ns)
                .iter()
                .filter(|s| service_selector(s).is_some_and(|sel| workload_selects(&sel, pod.metadata.labels.as_ref())))
                .map(|s| ObjectKey::of(s.as_ref()))
                .collect()
        })
        .name(NAME)
        .concurrency(workers)
        .run(reconcile, ctx, shutdown)
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus, ServicePort, ServiceSpec};

    fn svc() -> Service {
        Service {
            metadata: ObjectMeta { name: Some("web".into()), namespace: Some("default".into()), ..Default::default() },
            spec: Some(ServiceSpec {
                selector: Some([("app".to_string(), "web".to_string())].into()),
                ports: Some(vec![ServicePort {
                    port: 80,
                    target_port: Some(IntOrString::Int(8080)),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn pod(name: &str, ip: &str, app: &str, ready: bool) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                labels: Some([("app".to_string(), app.to_string())].into()),
                ..Default::default()
            },
            spec: None,
            status: Some(PodStatus {
                pod_ip: Some(ip.into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        })
    }

    mod reconcile {
        //! One reconcile against a [`FakeCluster`]: objects in, requests
        //! and objects out.

        use super::super::*;
        use crate::testing::FakeCluster;
        use serde_json::json;

        fn service(selector: bool) -> Service {
            let mut svc = json!({
                "metadata": {"name": "web", "namespace": "default", "uid": "svc-uid", "labels": {"tier": "front"}},
                "spec": {"ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
            });
            if selector {
                svc["spec"]["selector"] = json!({"app": "web"});
            }
            serde_json::from_value(svc).unwrap()
        }

        /// A pod of `app` at `ip` (no address with `None`) serving `http` on 8080.
        fn pod(name: &str, app: &str, ip: Option<&str>, ready: bool) -> Pod {
            let mut pod = json!({
                "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "labels": {"app": app}},
                "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "i", "ports": [{"name": "http", "containerPort": 8080}]}]},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
            });
            if let Some(ip) = ip {
                pod["status"]["podIP"] = json!(ip);
            }
            serde_json::from_value(pod).unwrap()
        }

        fn phase(mut pod: Pod, phase: &str) -> Pod {
            pod.status.as_mut().unwrap().phase = Some(phase.into());
            pod
        }

        fn publishing(mut svc: Service) -> Service {
            svc.spec.as_mut().unwrap().publish_not_ready_addresses = Some(true);
            svc
        }

        async fn context(fake: &FakeCluster) -> Arc<Context> {
            Arc::new(Context {
                client: fake.client(),
                pods: fake.informer::<Pod>().await,
                endpoints: fake.informer::<Endpoints>().await,
                slices: fake.informer::<EndpointSlice>().await,
            })
        }

        async fn reconcile_web(fake: &FakeCluster, ctx: &Arc<Context>) {
            let svc: Service = fake.get("default", "web").await.expect("the Service exists");
            assert_eq!(reconcile(Arc::new(svc), ctx.clone()).await.expect("reconciles"), Action::await_change());
        }

        /// `(ready IPs, not-ready IPs, ports)` of the Endpoints object.
        async fn endpoints(fake: &FakeCluster) -> Option<(Vec<String>, Vec<String>, Vec<i32>)> {
            let ep: Endpoints = fake.get("default", "web").await?;
            let subsets = ep.subsets.unwrap_or_default();
            let ips = |f: fn(&EndpointSubset) -> Option<&Vec<EndpointAddress>>| {
                subsets.iter().flat_map(|s| f(s).into_iter().flatten().map(|a| a.ip.clone())).collect::<Vec<_>>()
            };
            let ports = subsets.iter().flat_map(|s| s.ports.iter().flatten().map(|p| p.port)).collect();
            Some((ips(|s| s.addresses.as_ref()), ips(|s| s.not_ready_addresses.as_ref()), ports))
        }

        /// `(name, [(ip, ready)])` of every slice of the Service.
        async fn slices(fake: &FakeCluster) -> Vec<(String, Vec<(String, bool)>)> {
            fake.list::<EndpointSlice>("default")
                .await
                .into_iter()
                .map(|s| {
                    assert_eq!(s.metadata.labels.as_ref().unwrap()[SERVICE_NAME], "web");
                    assert_eq!(s.metadata.labels.as_ref().unwrap()[MANAGED_BY], MANAGER);
                    assert_eq!(s.metadata.owner_references.as_ref().unwrap()[0].uid, "svc-uid");
                    let endpoints = s
                        .endpoints
                        .iter()
                        .map(|e| (e.addresses[0].clone(), e.conditions.as_ref().and_then(|c| c.ready) == Some(true)))
                        .collect();
                    (s.metadata.name.unwrap(), endpoints)
                })
                .collect()
        }

        type Expected = Option<(Vec<&'static str>, Vec<&'static str>, Vec<i32>)>;
        /// Name, Service, pods → writes and the Endpoints' addresses and ports.
        type Row = (&'static str, Service, Vec<Pod>, &'static [&'static str], Expected);

        #[tokio::test]
        async fn table() {
            let web = || vec![pod("a", "web", Some("10.0.0.2"), true), pod("b", "web", Some("10.0.0.1"), false)];
            let rows: Vec<Row> = vec![
                (
                    "ready and not-ready pods, named target port resolved",
                    service(true),
                    [web(), vec![pod("other", "db", Some("10.0.0.9"), true), pod("no-ip", "web", None, true)]].concat(),
                    &["create endpoints default/web", "create endpointslices default/web-0"],
                    Some((vec!["10.0.0.2"], vec!["10.0.0.1"], vec![8080])),
                ),
                (
                    "no pods: an empty Endpoints object and a placeholder slice",
                    service(true),
                    vec![],
                    &["create endpoints default/web", "create endpointslices default/web-0"],
                    Some((vec![], vec![], vec![])),
                ),
                ("no selector: not ours", service(false), web(), &[], None),
                (
                    "terminated pods are left out",
                    service(true),
                    [
                        web(),
                        vec![
                            phase(pod("done", "web", Some("10.0.0.7"), false), "Succeeded"),
                            phase(pod("failed", "web", Some("10.0.0.8"), false), "Failed"),
                        ],
                    ]
                    .concat(),
                    &["create endpoints default/web", "create endpointslices default/web-0"],
                    Some((vec!["10.0.0.2"], vec!["10.0.0.1"], vec![8080])),
                ),
                (
                    "publishNotReadyAddresses: every address is ready",
                    publishing(service(true)),
                    web(),
                    &["create endpoints default/web", "create endpointslices default/web-0"],
                    Some((vec!["10.0.0.1", "10.0.0.2"], vec![], vec![8080])),
                ),
            ];
            for (name, svc, pods, writes, expected) in rows {
                let fake = FakeCluster::builder().object(&svc).objects(&pods).build().await;
                let ctx = context(&fake).await;
                reconcile_web(&fake, &ctx).await;
                assert_eq!(fake.writes(), writes, "{name}");
                let expected = expected.map(|(r, n, p)| {
                    (
                        r.into_iter().map(String::from).collect::<Vec<_>>(),
                        n.into_iter().map(String::from).collect::<Vec<_>>(),
                        p,
                    )
                });
                assert_eq!(endpoints(&fake).await, expected, "{name}");
                if let Some((ready, not_ready, _)) = &expected
                    && writes.len() == 2
                {
                    let endpoints: Vec<(String, bool)> = ready
                        .iter()
                        .map(|ip| (ip.clone(), true))
                        .chain(not_ready.iter().map(|ip| (ip.clone(), false)))
                        .collect();
                    assert_eq!(slices(&fake).await, vec![("web-0".to_string(), endpoints)], "{name}");
                }
                let ep: Option<Endpoints> = fake.get("default", "web").await;
                if let Some(ep) = ep {
                    // The Service's labels are copied.
                    assert_eq!(ep.metadata.labels.unwrap()["tier"], "front", "{name}");
                }
            }
        }

        #[tokio::test]
        async fn up_to_date_objects_are_not_written_again() {
            let pods = [pod("a", "web", Some("10.0.0.2"), true), pod("b", "web", Some("10.0.0.1"), false)];
            let fake = FakeCluster::builder().object(&service(true)).objects(&pods).build().await;
            let ctx = context(&fake).await;
            reconcile_web(&fake, &ctx).await;
            assert_eq!(fake.writes().len(), 2);
            fake.sync::<Endpoints>().await;
            fake.sync::<EndpointSlice>().await;
            fake.clear_actions();
            reconcile_web(&fake, &ctx).await;
            assert_eq!(fake.writes(), Vec::<String>::new());
        }

        #[tokio::test]
        async fn changes_update_and_extra_slices_go() {
            let pods = [pod("a", "web", Some("10.0.0.2"), true), pod("b", "web", Some("10.0.0.1"), false)];
            let fake = FakeCluster::builder().object(&service(true)).objects(&pods).build().await;
            let ctx = context(&fake).await;
            reconcile_web(&fake, &ctx).await;
            // b becomes ready, a leftover slice of the Service appears.
            fake.add(&pod("b", "web", Some("10.0.0.1"), true)).await;
            let mut extra = slices_of(&service(true), &compute(&service(true), &[Arc::new(pods[0].clone())]));
            let mut leftover = extra.remove(0);
            leftover.metadata.name = Some("web-1".into());
            fake.add(&leftover).await;
            fake.sync::<Pod>().await;
            fake.sync::<Endpoints>().await;
            fake.sync::<EndpointSlice>().await;
            fake.clear_actions();
            reconcile_web(&fake, &ctx).await;
            assert_eq!(
                fake.writes(),
                [
                    "update endpoints default/web",
                    "update endpointslices default/web-0",
                    "delete endpointslices default/web-1"
                ]
            );
            assert_eq!(endpoints(&fake).await, Some((vec!["10.0.0.1".into(), "10.0.0.2".into()], vec![], vec![8080])));
            let expected =
                vec![("web-0".to_string(), vec![("10.0.0.1".to_string(), true), ("10.0.0.2".to_string(), true)])];
            assert_eq!(slices(&fake).await, expected);
        }

        fn slices_of(svc: &Service, subsets: &[EndpointSubset]) -> Vec<EndpointSlice> {
            super::super::slices(svc, subsets)
        }
    }

    #[test]
    fn ready_and_not_ready_addresses() {
        let pods = vec![
            pod("a", "10.0.0.2", "web", true),
            pod("b", "10.0.0.1", "web", false),
            pod("c", "10.0.0.3", "other", true),
        ];
        let subsets = compute(&svc(), &pods);
        assert_eq!(subsets.len(), 1);
        let s = &subsets[0];
        assert_eq!(s.addresses.as_ref().unwrap()[0].ip, "10.0.0.2");
        assert_eq!(s.not_ready_addresses.as_ref().unwrap()[0].ip, "10.0.0.1");
        assert_eq!(s.ports.as_ref().unwrap()[0].port, 8080);
    }

    #[test]
    fn slices_hold_at_most_100() {
        let pods: Vec<_> =
            (0..250).map(|i| pod(&format!("p{i}"), &format!("10.1.{}.{}", i / 200, i % 200), "web", true)).collect();
        let subsets = compute(&svc(), &pods);
        let slices = slices(&svc(), &subsets);
        let sizes: Vec<usize> = slices.iter().map(|s| s.endpoints.len()).collect();
        assert_eq!(sizes, [100, 100, 50]);
        assert!(slices.iter().all(|s| s.metadata.labels.as_ref().unwrap()[SERVICE_NAME] == "web"));
    }
}
