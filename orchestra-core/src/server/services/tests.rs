//! Service allocation as vectors: creates, updates, releases and repair
//! passes against a store.

use std::sync::Arc;

use orchestra_store::MemStore;

use super::*;

const SERVICES: &str = "/registry/services/specs/";

fn ranges() -> ServiceRanges {
    // 62 usable addresses (a lower band of 16), 10 NodePorts.
    ServiceRanges::default().with_cluster_ips("127.96.0.0/26".parse().unwrap()).with_node_ports(30000..=30009)
}

fn target() -> ErrorTarget {
    ErrorTarget { group: String::new(), resource: "services".into(), kind: "Service".into(), name: "s".into() }
}

fn service(name: &str, spec: Value) -> Value {
    json!({"metadata": {"namespace": "default", "name": name, "uid": format!("uid-{name}")}, "spec": spec})
}

fn tcp(port: u16) -> Value {
    json!({"port": port, "protocol": "TCP"})
}

/// Allocates for a create and stores the Service as the server would.
async fn create(store: &dyn Store, mut service: Value) -> Result<Value, ApiError> {
    let claims = allocate(&ranges(), store, &target(), &mut service, None, false).await?;
    let key = format!("{SERVICES}default/{}", service["metadata"]["name"].as_str().unwrap());
    store.put(&key, serde_json::to_vec(&service).unwrap().into(), None).await.unwrap();
    claims.settle(store, true).await;
    Ok(service)
}

async fn claims(store: &dyn Store) -> Vec<String> {
    let mut keys = Vec::new();
    for prefix in [IP_PREFIX, PORT_PREFIX] {
        list_prefix(store, prefix, |kv| keys.push(kv.key.clone())).await.unwrap();
    }
    keys
}

fn ip_of(service: &Value) -> u32 {
    u32::from(service["spec"]["clusterIP"].as_str().unwrap().parse::<Ipv4Addr>().unwrap())
}

#[test]
fn usable_addresses() {
    #[rustfmt::skip]
    let cases: [(&str, Option<(u32, u32)>); 6] = [
        ("127.96.0.0/12", Some((0x7f60_0001, 0x7f6f_fffe))),
        ("10.0.0.0/30", Some((0x0a00_0001, 0x0a00_0002))),
        ("10.0.0.0/31", Some((0x0a00_0000, 0x0a00_0001))),
        ("10.0.0.7/32", Some((0x0a00_0007, 0x0a00_0007))),
        ("10.0.0.0", None),
        ("::1/64", None),
    ];
    for (text, expected) in cases {
        let parsed = text.parse::<Ipv4Cidr>().ok().map(|c| (*usable(&c).start(), *usable(&c).end()));
        assert_eq!(parsed, expected, "{text}");
    }
    assert_eq!(ServiceRanges::default().first_ip(), Ipv4Addr::new(127, 96, 0, 1));
    assert_eq!(ranges().dynamic_ips(), 0x7f60_0011..=0x7f60_003e, "above a lower band of 16");
}

/// Creates on an empty store: what the Service gets, or the error.
#[tokio::test]
async fn creates() {
    enum Expect {
        /// The ClusterIP (None: dynamic, from the upper band) and NodePorts.
        Gets(Option<&'static str>, usize),
        Headless,
        NoClusterIp,
        /// 422 on this field, with this in the message.
        Invalid(&'static str, &'static str),
    }
    use Expect::*;
    #[rustfmt::skip]
    let cases = [
        ("dynamic", json!({"ports": [tcp(80)]}), Gets(None, 0)),
        ("requested", json!({"clusterIP": "127.96.0.5", "ports": [tcp(80)]}), Gets(Some("127.96.0.5"), 0)),
        ("requested in clusterIPs", json!({"clusterIPs": ["127.96.0.6"]}), Gets(Some("127.96.0.6"), 0)),
        ("headless", json!({"clusterIP": "None"}), Headless),
        ("external name", json!({"type": "ExternalName", "externalName": "example.com"}), NoClusterIp),
        ("node ports", json!({"type": "NodePort", "ports": [tcp(80), tcp(443)]}), Gets(None, 2)),
        ("requested node port", json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30003}]}), Gets(None, 1)),
        ("load balancer", json!({"type": "LoadBalancer", "ports": [tcp(80)]}), Gets(None, 1)),
        ("load balancer without node ports", json!({"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false, "ports": [tcp(80)]}), Gets(None, 0)),
        ("local load balancer", json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "ports": [tcp(80)]}), Gets(None, 2)),
        ("one node port for two protocols", json!({"type": "NodePort", "ports": [
            {"port": 53, "protocol": "TCP", "nodePort": 30005}, {"port": 53, "protocol": "UDP", "nodePort": 30005}]}), Gets(None, 1)),
        ("out of range", json!({"clusterIP": "10.0.0.1"}), Invalid("spec.clusterIPs", "is not in the valid range. The range of valid IPs is 127.96.0.0/26")),
        ("network address", json!({"clusterIP": "127.96.0.0"}), Invalid("spec.clusterIPs", "not in the valid range")),
        ("not an address", json!({"clusterIP": "ten"}), Invalid("spec.clusterIPs[0]", "must be a valid IP address")),
        ("IPv6", json!({"clusterIP": "fd00::1"}), Invalid("spec.clusterIPs[0]", "only IPv4")),
        ("node port out of range", json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 80}]}), Invalid("spec.ports[0].nodePort", "The range of valid ports is 30000-30009")),
        ("node port on a ClusterIP Service", json!({"ports": [{"port": 80, "nodePort": 30001}]}), Invalid("spec.ports[0].nodePort", "Forbidden: may not be used when `type` is 'ClusterIP'")),
    ];
    for (name, spec, expected) in cases {
        let store = MemStore::new();
        let result = create(&store, service("s", spec)).await;
        let held = claims(&store).await;
        match (result, expected) {
            (Ok(created), Gets(ip, ports)) => {
                let spec = &created["spec"];
                match ip {
                    Some(ip) => assert_eq!(spec["clusterIP"], ip, "{name}"),
                    None => assert!(ranges().dynamic_ips().contains(&ip_of(&created)), "{name}: {spec}"),
                }
                assert_eq!(spec["clusterIPs"], json!([spec["clusterIP"]]), "{name}");
                assert_eq!(
                    (spec["ipFamilies"].clone(), spec["ipFamilyPolicy"].clone()),
                    (json!(["IPv4"]), json!("SingleStack")),
                    "{name}"
                );
                let node_ports = held.iter().filter(|k| k.starts_with(PORT_PREFIX)).count();
                assert_eq!(node_ports, ports, "{name}: {held:?}");
                for port in spec["ports"].as_array().into_iter().flatten() {
                    assert_eq!(port["nodePort"].is_u64(), ports > 0, "{name}: {port}");
                }
                assert_eq!(held.len(), 1 + ports, "{name}: the IP and the ports are claimed: {held:?}");
            }
            (Ok(created), Headless) => {
                assert_eq!(
                    (created["spec"]["clusterIP"].clone(), created["spec"]["clusterIPs"].clone()),
                    (json!("None"), json!(["None"])),
                    "{name}"
                );
                assert!(held.is_empty(), "{name}");
            }
            (Ok(created), NoClusterIp) => {
                assert!(created["spec"]["clusterIP"].is_null(), "{name}");
                assert!(held.is_empty(), "{name}");
            }
            (Err(error), Invalid(field, message)) => {
                assert_eq!(error.code, 422, "{name}");
                assert!(
                    error.message.contains(&format!("{field}: ")) && error.message.contains(message),
                    "{name}: {}",
                    error.message
                );
                assert!(held.is_empty(), "{name}: a refused create holds nothing: {held:?}");
            }
            (other, _) => panic!("{name}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn taken_values_are_refused_and_nothing_is_kept() {
    let store = MemStore::new();
    create(
        &store,
        service(
            "a",
            json!({"clusterIP": "127.96.0.5", "type": "NodePort", "ports": [{"port": 80, "nodePort": 30001}]}),
        ),
    )
    .await
    .unwrap();
    let cases = [
        (
            json!({"clusterIP": "127.96.0.5"}),
            "spec.clusterIPs: Invalid value: [\"127.96.0.5\"]: failed to allocate IP 127.96.0.5: provided IP is already allocated",
        ),
        (
            json!({"clusterIP": "127.96.0.6", "type": "NodePort", "ports": [{"port": 80, "nodePort": 30001}]}),
            "spec.ports[0].nodePort: Invalid value: 30001: provided port is already allocated",
        ),
    ];
    for (spec, message) in cases {
        let error = create(&store, service("b", spec)).await.unwrap_err();
        assert_eq!((error.code, error.message.contains(message)), (422, true), "{}", error.message);
        // The IP claimed before the port was refused is given back.
        assert_eq!(claims(&store).await.len(), 2, "only a's claims remain");
    }
}

#[tokio::test]
async fn a_full_range_is_an_error() {
    let store = MemStore::new();
    for i in 0..10 {
        create(&store, service(&format!("s{i}"), json!({"type": "NodePort", "ports": [tcp(80)]}))).await.unwrap();
    }
    let error = create(&store, service("full", json!({"type": "NodePort", "ports": [tcp(80)]}))).await.unwrap_err();
    assert_eq!(
        (error.code, error.message.as_str()),
        (500, "Internal error occurred: failed to allocate a nodePort: range is full")
    );
    // Of 62 addresses, the lower band's are given once the upper ones are gone.
    let store = MemStore::new();
    let mut ips = HashSet::new();
    for i in 0..62 {
        ips.insert(ip_of(&create(&store, service(&format!("s{i}"), json!({}))).await.unwrap()));
    }
    assert_eq!(ips.len(), 62);
    assert_eq!(create(&store, service("full", json!({}))).await.unwrap_err().code, 500);
}

#[tokio::test]
async fn dry_runs_fill_in_and_claim_nothing() {
    let store = MemStore::new();
    let mut dry = service("s", json!({"type": "NodePort", "ports": [tcp(80)]}));
    allocate(&ranges(), &store, &target(), &mut dry, None, true).await.unwrap().settle(&store, true).await;
    assert!(dry["spec"]["clusterIP"].is_string() && dry["spec"]["ports"][0]["nodePort"].is_u64());
    assert!(claims(&store).await.is_empty());
}

/// An update's name, what it sends, the Service's ClusterIP and NodePorts
/// after it (or the error) and the claims kept.
type Update = (&'static str, Value, Result<(&'static str, Vec<u64>), &'static str>, usize);

/// Updates of a stored Service.
#[tokio::test]
async fn updates() {
    let stored = || {
        service(
            "s",
            json!({"type": "NodePort", "clusterIP": "127.96.0.5", "ports": [
            {"port": 80, "protocol": "TCP", "nodePort": 30001}, {"port": 443, "protocol": "TCP", "nodePort": 30002}]}),
        )
    };
    #[rustfmt::skip]
    let cases: [Update; 6] = [
        ("values left out are kept", json!({"type": "NodePort", "ports": [tcp(80), tcp(443)]}),
            Ok(("127.96.0.5", vec![30001, 30002])), 3),
        ("a port added gets one, a port dropped gives its back", json!({"type": "NodePort", "ports": [tcp(80), tcp(8080)]}),
            Ok(("127.96.0.5", vec![30001, 0])), 3),
        ("turned into ClusterIP, the NodePorts go", json!({"type": "ClusterIP", "ports": [
            {"port": 80, "protocol": "TCP", "nodePort": 30001}, {"port": 443, "protocol": "TCP", "nodePort": 30002}]}),
            Ok(("127.96.0.5", vec![])), 1),
        ("the ClusterIP may not change", json!({"type": "NodePort", "clusterIP": "127.96.0.9", "ports": [tcp(80)]}),
            Err("spec.clusterIPs[0]: Invalid value: \"127.96.0.9\": may not change once set"), 3),
        ("turned into ExternalName, the ClusterIP goes", json!({"type": "ExternalName", "externalName": "example.com",
            "clusterIP": "127.96.0.5", "clusterIPs": ["127.96.0.5"]}),
            Ok(("", vec![])), 0),
        ("a NodePort changed is claimed", json!({"type": "NodePort", "ports": [
            {"port": 80, "protocol": "TCP", "nodePort": 30007}, tcp(443)]}),
            Ok(("127.96.0.5", vec![30007, 30002])), 3),
    ];
    for (name, spec, expected, kept) in cases {
        let store = MemStore::new();
        let old = create(&store, stored()).await.unwrap();
        let mut new = service("s", spec);
        keep_allocated(&old, &mut new);
        let result = allocate(&ranges(), &store, &target(), &mut new, Some(&old), false).await;
        match (result, expected) {
            (Ok(claims), Ok((ip, ports))) => {
                claims.settle(&store, true).await;
                assert_eq!(new["spec"]["clusterIP"].as_str().unwrap_or_default(), ip, "{name}");
                let got: Vec<u64> = new["spec"]["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|p| p["nodePort"].as_u64())
                    .collect();
                match ports.iter().position(|p| *p == 0) {
                    // A new port's value is any free one.
                    Some(at) => {
                        assert_eq!((got.len(), got[..at].to_vec()), (ports.len(), ports[..at].to_vec()), "{name}")
                    }
                    None => assert_eq!(got, ports, "{name}"),
                }
            }
            (Err(error), Err(message)) => {
                assert_eq!(error.code, 422, "{name}");
                assert!(error.message.contains(message), "{name}: {}", error.message);
            }
            (other, _) => panic!("{name}: {:?}", other.map(|_| new)),
        }
        assert_eq!(claims(&store).await.len(), kept, "{name}: {:?}", claims(&store).await);
    }
}

#[tokio::test]
async fn deletes_release_only_their_own() {
    let store = MemStore::new();
    let a = create(&store, service("a", json!({"clusterIP": "127.96.0.5"}))).await.unwrap();
    // A Service recreated under the same name holds a new claim: the old
    // object's release leaves it.
    release_all(&store, &a).await;
    assert!(claims(&store).await.is_empty());
    let b = create(&store, service("a", json!({"clusterIP": "127.96.0.5"}))).await.unwrap();
    let mut stale = b.clone();
    stale["metadata"]["uid"] = "another".into();
    release_all(&store, &stale).await;
    assert_eq!(claims(&store).await, [format!("{IP_PREFIX}127.96.0.5")]);
}

#[tokio::test]
async fn repair_passes() {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let store = &*store;
    create(store, service("a", json!({"clusterIP": "127.96.0.5"}))).await.unwrap();
    // A claim whose Service was never written (a crash between the two).
    let orphan = Owner { namespace: "default".into(), name: "gone".into(), uid: "x".into() };
    store.create(&Held::Port(30004).key(), orphan.encode(), None).await.unwrap();
    // A Service written without its claim (a restored store), and another
    // holding the same address.
    for (name, ip) in [("b", "127.96.0.7"), ("c", "127.96.0.7"), ("d", "127.96.0.5")] {
        let written = service(name, json!({"clusterIP": ip}));
        store
            .put(&format!("{SERVICES}default/{name}"), serde_json::to_vec(&written).unwrap().into(), None)
            .await
            .unwrap();
    }
    let mut suspects = HashSet::new();
    let first = repair(store, SERVICES, &mut suspects).await.unwrap();
    assert_eq!(first.released, Vec::<String>::new(), "an orphan is only suspected at first");
    assert_eq!(first.recorded, [format!("{IP_PREFIX}127.96.0.7")]);
    let mut doubles = first.doubly_held.clone();
    doubles.sort();
    assert_eq!(
        doubles,
        [
            (format!("{IP_PREFIX}127.96.0.5"), "default/d".into()),
            (format!("{IP_PREFIX}127.96.0.7"), "default/c".into())
        ]
    );
    let second = repair(store, SERVICES, &mut suspects).await.unwrap();
    assert_eq!(second.released, [format!("{PORT_PREFIX}30004")]);
    assert!(second.recorded.is_empty());
    assert_eq!(claims(store).await, [format!("{IP_PREFIX}127.96.0.5"), format!("{IP_PREFIX}127.96.0.7")]);
    // A claim taken between two passes is not released by the second.
    store.create(&Held::Port(30005).key(), orphan.encode(), None).await.unwrap();
    assert!(repair(store, SERVICES, &mut suspects).await.unwrap().released.is_empty());
}
