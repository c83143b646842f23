//! The ClusterIPs and NodePorts of Services, as upstream's Service REST
//! storage allocates them.
//!
//! Each allocated value is one store key, `/registry/ranges/serviceips/<ip>`
//! or `/registry/ranges/servicenodeports/<port>`, naming the Service that
//! holds it: a claim is a create of that key, so two Services can never get
//! the same value, and a requested value that is taken is refused (422).
//! A create claims before it writes the Service and gives its claims back
//! when the write fails; an update claims what it adds and releases what it
//! dropped once written; a delete releases what the Service held. A crash
//! between a claim and the write leaves a key no Service holds: the
//! [repair](repair) pass, run periodically by the server, releases such keys
//! once two passes in a row found them unchanged and orphaned, records the
//! values Services hold without a key (a store restored from elsewhere), and
//! reports values two Services hold.

use std::collections::{BTreeMap, HashSet};
use std::net::Ipv4Addr;
use std::ops::RangeInclusive;
use std::sync::Weak;
use std::time::Duration;

use orchestra_store::{Error as StoreError, KeyValue, Revision, Store};
use serde_json::{Value, json};

use super::list::list_prefix;
use super::state::State;
use crate::api::net::Ipv4Cidr;
use crate::api::{ApiError, ErrorTarget, FieldError};

/// Where the claims on ClusterIPs are kept.
const IP_PREFIX: &str = "/registry/ranges/serviceips/";

/// Where the claims on NodePorts are kept.
const PORT_PREFIX: &str = "/registry/ranges/servicenodeports/";

/// Random picks tried before a scan for a free value.
const RANDOM_TRIES: usize = 16;

/// The addresses of `cidr` Services may get: all but the network and
/// broadcast addresses (upstream's allocator skips both), as integers.
fn usable(cidr: &Ipv4Cidr) -> RangeInclusive<u32> {
    let first = u32::from(cidr.network());
    let last = first + (cidr.size() - 1) as u32;
    if cidr.prefix() >= 31 { first..=last } else { first + 1..=last - 1 }
}

/// The ranges Services' values come from (upstream's
/// `--service-cluster-ip-range` and `--service-node-port-range`).
///
/// The default ClusterIP range is a loopback block, `127.96.0.0/12`, so
/// that a service proxy can listen on ClusterIPs without privileges.
///
/// ```
/// use orchestra_core::server::ServiceRanges;
///
/// let ranges = ServiceRanges::default().with_cluster_ips("10.96.0.0/16".parse().unwrap()).with_node_ports(31000..=31999);
/// assert_eq!(ranges.cluster_ips.to_string(), "10.96.0.0/16");
/// assert_eq!(ServiceRanges::default().node_ports, 30000..=32767);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServiceRanges {
    /// Where ClusterIPs come from.
    pub cluster_ips: Ipv4Cidr,
    /// Where NodePorts come from.
    pub node_ports: RangeInclusive<u16>,
}

impl Default for ServiceRanges {
    fn default() -> Self {
        ServiceRanges {
            cluster_ips: Ipv4Cidr::new(Ipv4Addr::new(127, 96, 0, 0), 12).expect("a /12"),
            node_ports: 30000..=32767,
        }
    }
}

impl ServiceRanges {
    /// Sets [`cluster_ips`](Self::cluster_ips).
    pub fn with_cluster_ips(mut self, cidr: Ipv4Cidr) -> ServiceRanges {
        self.cluster_ips = cidr;
        self
    }

    /// Sets [`node_ports`](Self::node_ports).
    pub fn with_node_ports(mut self, ports: RangeInclusive<u16>) -> ServiceRanges {
        self.node_ports = ports;
        self
    }

    /// The first address of the range, which upstream gives the `kubernetes`
    /// Service.
    pub fn first_ip(&self) -> Ipv4Addr {
        Ipv4Addr::from(*usable(&self.cluster_ips).start())
    }

    /// Where dynamic ClusterIPs are picked first: above the lower band that
    /// upstream keeps for requested ones (a sixteenth of the range, 16 to
    /// 256 addresses), falling back to the whole range when it is full.
    fn dynamic_ips(&self) -> RangeInclusive<u32> {
        let usable = usable(&self.cluster_ips);
        let size = u64::from(usable.end() - usable.start()) + 1;
        let band = (size / 16).clamp(16, 256);
        if size <= band { usable } else { usable.start() + band as u32..=*usable.end() }
    }
}

/// One value a Service holds: a ClusterIP or a NodePort.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Held {
    Ip(u32),
    Port(u16),
}

impl Held {
    fn key(self) -> String {
        match self {
            Held::Ip(ip) => format!("{IP_PREFIX}{}", Ipv4Addr::from(ip)),
            Held::Port(port) => format!("{PORT_PREFIX}{port}"),
        }
    }

    fn of_key(key: &str) -> Option<Held> {
        if let Some(ip) = key.strip_prefix(IP_PREFIX) {
            return ip.parse::<Ipv4Addr>().ok().map(|ip| Held::Ip(ip.into()));
        }
        key.strip_prefix(PORT_PREFIX)?.parse().ok().map(Held::Port)
    }
}

/// The Service a claim names.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Owner {
    namespace: String,
    name: String,
    uid: String,
}

impl Owner {
    fn of(service: &Value) -> Owner {
        let meta = &service["metadata"];
        let field = |f: &str| meta[f].as_str().unwrap_or_default().to_owned();
        Owner { namespace: field("namespace"), name: field("name"), uid: field("uid") }
    }

    /// `<namespace>/<name>`.
    fn service(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    fn encode(&self) -> bytes::Bytes {
        serde_json::to_vec(&json!({"namespace": self.namespace, "name": self.name, "uid": self.uid}))
            .expect("JSON values serialize")
            .into()
    }

    fn decode(value: &[u8]) -> Option<Owner> {
        let value: Value = serde_json::from_slice(value).ok()?;
        let field = |f: &str| value[f].as_str().map(str::to_owned);
        Some(Owner { namespace: field("namespace")?, name: field("name")?, uid: field("uid")? })
    }
}

/// Whether a Service of `service`'s type has a ClusterIP field at all.
fn has_cluster_ip(service: &Value) -> bool {
    service["spec"]["type"].as_str() != Some("ExternalName")
}

/// Whether its ports get NodePorts.
fn wants_node_ports(service: &Value) -> bool {
    match service["spec"]["type"].as_str() {
        Some("NodePort") => true,
        Some("LoadBalancer") => service["spec"]["allocateLoadBalancerNodePorts"] != false,
        _ => false,
    }
}

/// Whether it gets a health check NodePort.
fn wants_health_check_port(service: &Value) -> bool {
    service["spec"]["type"] == "LoadBalancer" && service["spec"]["externalTrafficPolicy"] == "Local"
}

/// The values `service` holds, as written.
fn held(service: &Value) -> Vec<Held> {
    let spec = &service["spec"];
    let mut held = Vec::new();
    if has_cluster_ip(service)
        && let Some(ip) = spec["clusterIP"].as_str().and_then(|ip| ip.parse::<Ipv4Addr>().ok())
    {
        held.push(Held::Ip(ip.into()));
    }
    let ports = spec["ports"].as_array().into_iter().flatten().filter_map(|p| p["nodePort"].as_u64());
    let health = spec["healthCheckNodePort"].as_u64();
    for port in ports.chain(health).filter_map(|p| u16::try_from(p).ok()).filter(|p| *p > 0) {
        if !held.contains(&Held::Port(port)) {
            held.push(Held::Port(port));
        }
    }
    held
}

/// Copies onto an update what the stored Service was given and the update
/// leaves out (upstream's `patchAllocatedValues`): a client that sends back
/// a Service without its ClusterIP or NodePorts keeps them. Values the new
/// type has no use for are dropped where the update left them as they were
/// (upstream's `dropTypeDependentFields`): a NodePort Service turned into a
/// ClusterIP one loses its NodePorts, an ExternalName one its ClusterIP.
pub(crate) fn keep_allocated(old: &Value, new: &mut Value) {
    let old_spec = &old["spec"];
    let same_port = |a: &Value, b: &Value| {
        a["port"] == b["port"] && a["protocol"].as_str().unwrap_or("TCP") == b["protocol"].as_str().unwrap_or("TCP")
    };
    let old_ports = old_spec["ports"].as_array().cloned().unwrap_or_default();
    let (had_ip, has_ip) = (has_cluster_ip(old), has_cluster_ip(new));
    let (had_ports, has_ports) = (wants_node_ports(old), wants_node_ports(new));
    let (had_health, has_health) = (wants_health_check_port(old), wants_health_check_port(new));
    if had_ip && has_ip {
        let spec = &mut new["spec"];
        if spec["clusterIP"].as_str().is_none_or(str::is_empty) && !old_spec["clusterIP"].is_null() {
            spec["clusterIP"] = old_spec["clusterIP"].clone();
            if spec["clusterIPs"].as_array().is_none_or(Vec::is_empty) {
                spec["clusterIPs"] = old_spec["clusterIPs"].clone();
            }
        }
    } else if had_ip
        && !has_ip
        && let Some(spec) = new["spec"].as_object_mut()
    {
        for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            if spec.get(field) == old_spec.get(field) {
                spec.remove(field);
            }
        }
    }
    for port in new["spec"]["ports"].as_array_mut().into_iter().flatten() {
        let Some(old_port) = old_ports.iter().find(|old| same_port(old, port)) else { continue };
        let node_port = port["nodePort"].as_u64().unwrap_or(0);
        if had_ports && has_ports && node_port == 0 && old_port["nodePort"].as_u64().is_some() {
            port["nodePort"] = old_port["nodePort"].clone();
        } else if had_ports && !has_ports && node_port != 0 && port["nodePort"] == old_port["nodePort"] {
            port.as_object_mut().expect("a port with a nodePort is an object").remove("nodePort");
        }
    }
    let spec = &mut new["spec"];
    let health = spec["healthCheckNodePort"].as_u64().unwrap_or(0);
    if had_health && has_health && health == 0 && old_spec["healthCheckNodePort"].as_u64().is_some() {
        spec["healthCheckNodePort"] = old_spec["healthCheckNodePort"].clone();
    } else if had_health
        && !has_health
        && health != 0
        && spec["healthCheckNodePort"] == old_spec["healthCheckNodePort"]
        && let Some(spec) = spec.as_object_mut()
    {
        spec.remove("healthCheckNodePort");
    }
}

/// What a write of a Service claimed, to give back if the write fails, and
/// what it no longer holds, to release once it is written.
#[derive(Debug)]
#[must_use = "claims are released when the write fails, releases done when it succeeds"]
pub(crate) struct Claims {
    claimed: Vec<Held>,
    dropped: Vec<Held>,
    owner: Owner,
}

impl Claims {
    /// Settles the claims once the write is done: gives back what it
    /// claimed if it failed, releases what the Service no longer holds if
    /// it succeeded.
    pub(crate) async fn settle(self, store: &dyn Store, written: bool) {
        let values = if written { &self.dropped } else { &self.claimed };
        release(store, &self.owner, values).await;
    }
}

/// Fills in a created or updated Service's ClusterIP and NodePorts and
/// claims the values it newly holds. `old` is the stored Service of an
/// update (already merged in with [`keep_allocated`]). A dry run checks
/// and fills in but claims nothing.
pub(crate) async fn allocate(
    ranges: &ServiceRanges,
    store: &dyn Store,
    target: &ErrorTarget,
    service: &mut Value,
    old: Option<&Value>,
    dry_run: bool,
) -> Result<Claims, ApiError> {
    let owner = Owner::of(service);
    let old_held: Vec<Held> = old.map(held).unwrap_or_default();
    let mut allocation = Allocation { store, target, owner, dry_run, old_held, claimed: Vec::new() };
    // Each value is claimed before the next is picked, so that a failure
    // halfway gives back only what this write claimed.
    if let Err(error) = allocation.fill(ranges, service, old).await {
        release(store, &allocation.owner, &allocation.claimed).await;
        return Err(error);
    }
    let now = held(service);
    let Allocation { owner, old_held, claimed, .. } = allocation;
    let dropped = old_held.into_iter().filter(|h| !now.contains(h)).collect();
    Ok(Claims { claimed, dropped, owner })
}

/// One write's allocation: what it claims values for, and what it claimed.
struct Allocation<'a> {
    store: &'a dyn Store,
    target: &'a ErrorTarget,
    owner: Owner,
    /// Only look: claim nothing.
    dry_run: bool,
    /// What the Service held before this write: kept without a new claim.
    old_held: Vec<Held>,
    /// What this write claimed so far.
    claimed: Vec<Held>,
}

/// The 422 refusing `field` of the Service `target` with `message`.
fn refuse(target: &ErrorTarget, field: &str, message: String) -> ApiError {
    let error = FieldError { reason: "FieldValueInvalid", field: field.to_owned(), message };
    ApiError::invalid(target, vec![error])
}

impl Allocation<'_> {
    async fn fill(&mut self, ranges: &ServiceRanges, service: &mut Value, old: Option<&Value>) -> Result<(), ApiError> {
        if has_cluster_ip(service) {
            let spec = &service["spec"];
            let requested = match spec["clusterIP"].as_str().filter(|ip| !ip.is_empty()) {
                Some(ip) => Some(ip.to_owned()),
                None => spec["clusterIPs"][0].as_str().filter(|ip| !ip.is_empty()).map(str::to_owned),
            };
            let old_ip = old.filter(|old| has_cluster_ip(old)).and_then(|old| old["spec"]["clusterIP"].as_str());
            if let Some(old_ip) = old_ip.filter(|ip| !ip.is_empty())
                && requested.as_deref() != Some(old_ip)
            {
                let value = requested.unwrap_or_default();
                let error = FieldError::invalid("spec.clusterIPs[0]", &value, "may not change once set");
                return Err(ApiError::invalid(self.target, vec![error]));
            }
            let ip = match requested.as_deref() {
                Some("None") => "None".to_owned(),
                Some(text) => self.requested_ip(&ranges.cluster_ips, text).await?.to_string(),
                None => {
                    let usable = [ranges.dynamic_ips(), usable(&ranges.cluster_ips)];
                    let Some(ip) = self.pick(&usable, Held::Ip).await? else {
                        return Err(ApiError::internal("failed to allocate a serviceIP: range is full"));
                    };
                    Ipv4Addr::from(ip).to_string()
                }
            };
            let spec = &mut service["spec"];
            spec["clusterIP"] = ip.clone().into();
            spec["clusterIPs"] = json!([ip]);
            if spec["ipFamilies"].as_array().is_none_or(Vec::is_empty) {
                spec["ipFamilies"] = json!(["IPv4"]);
            }
            if spec["ipFamilyPolicy"].as_str().is_none_or(str::is_empty) {
                spec["ipFamilyPolicy"] = "SingleStack".into();
            }
        }
        let node_ports = wants_node_ports(service);
        let count = service["spec"]["ports"].as_array().map_or(0, Vec::len);
        let mut given = std::collections::BTreeSet::new();
        for index in 0..count {
            let field = format!("spec.ports[{index}].nodePort");
            let requested = service["spec"]["ports"][index]["nodePort"].as_u64().unwrap_or(0);
            if !node_ports {
                if requested != 0 {
                    let kind = service["spec"]["type"].as_str().unwrap_or("ClusterIP");
                    return Err(refuse(
                        self.target,
                        &field,
                        format!("Forbidden: may not be used when `type` is '{kind}'"),
                    ));
                }
                continue;
            }
            // One Service may use a NodePort for two protocols of a port.
            let number = match u16::try_from(requested).ok().filter(|p| *p > 0) {
                Some(port) if given.contains(&port) => port,
                requested => self.node_port(&ranges.node_ports, &field, requested).await?,
            };
            given.insert(number);
            service["spec"]["ports"][index]["nodePort"] = number.into();
        }
        if wants_health_check_port(service) {
            const FIELD: &str = "spec.healthCheckNodePort";
            let requested = service["spec"]["healthCheckNodePort"].as_u64().unwrap_or(0);
            let requested = u16::try_from(requested).ok().filter(|p| *p > 0);
            if let Some(port) = requested.filter(|port| given.contains(port)) {
                return Err(refuse(
                    self.target,
                    FIELD,
                    format!("Invalid value: {port}: provided port is already allocated"),
                ));
            }
            let port = self.node_port(&ranges.node_ports, FIELD, requested).await?;
            service["spec"]["healthCheckNodePort"] = port.into();
        }
        Ok(())
    }

    /// A requested ClusterIP: checked against `cidr` and claimed unless the
    /// Service held it already.
    async fn requested_ip(&mut self, cidr: &Ipv4Cidr, text: &str) -> Result<Ipv4Addr, ApiError> {
        let Ok(ip) = text.parse::<Ipv4Addr>() else {
            let detail = if text.parse::<std::net::IpAddr>().is_ok() {
                "only IPv4 is served (a single-stack cluster)"
            } else {
                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
            };
            return Err(ApiError::invalid(self.target, vec![FieldError::invalid("spec.clusterIPs[0]", text, detail)]));
        };
        let held = Held::Ip(ip.into());
        if self.old_held.contains(&held) {
            return Ok(ip);
        }
        let target = self.target;
        let refuse = |why: String| {
            let message = format!("Invalid value: [\"{ip}\"]: failed to allocate IP {ip}: {why}");
            refuse(target, "spec.clusterIPs", message)
        };
        if !usable(cidr).contains(&u32::from(ip)) {
            return Err(refuse(format!(
                "the provided IP ({ip}) is not in the valid range. The range of valid IPs is {cidr}"
            )));
        }
        if !self.claim(held).await? {
            return Err(refuse("provided IP is already allocated".into()));
        }
        Ok(ip)
    }

    /// The NodePort of `field`: `requested` checked against `range` and
    /// claimed unless the Service held it already, or a free one picked.
    async fn node_port(
        &mut self,
        range: &RangeInclusive<u16>,
        field: &str,
        requested: Option<u16>,
    ) -> Result<u16, ApiError> {
        let Some(port) = requested else {
            let span = u32::from(*range.start())..=u32::from(*range.end());
            return match self.pick(std::slice::from_ref(&span), |p| Held::Port(p as u16)).await? {
                Some(port) => Ok(port as u16),
                None => Err(ApiError::internal("failed to allocate a nodePort: range is full")),
            };
        };
        if self.old_held.contains(&Held::Port(port)) {
            return Ok(port);
        }
        let target = self.target;
        let refuse = |why: String| refuse(target, field, format!("Invalid value: {port}: {why}"));
        if !range.contains(&port) {
            return Err(refuse(format!(
                "provided port is not in the valid range. The range of valid ports is {}-{}",
                range.start(),
                range.end()
            )));
        }
        if !self.claim(Held::Port(port)).await? {
            return Err(refuse("provided port is already allocated".into()));
        }
        Ok(port)
    }

    /// Claims `held`: false if another holds it. A dry run only looks.
    async fn claim(&mut self, held: Held) -> Result<bool, ApiError> {
        let key = held.key();
        if self.dry_run {
            return Ok(self.store.get(&key).await.map_err(ApiError::internal)?.is_none());
        }
        match self.store.create(&key, self.owner.encode(), None).await {
            Ok(_) => {
                self.claimed.push(held);
                Ok(true)
            }
            Err(StoreError::AlreadyExists { .. }) => Ok(false),
            Err(error) => Err(ApiError::internal(format!("failed to allocate {key}: {error}"))),
        }
    }

    /// Picks and claims a free value: random ones from the first range,
    /// then a scan of each range from a random point. `None` when all are
    /// taken.
    async fn pick(
        &mut self,
        ranges: &[RangeInclusive<u32>],
        held: impl Fn(u32) -> Held,
    ) -> Result<Option<u32>, ApiError> {
        let random = || uuid::Uuid::new_v4().as_u64_pair().0;
        let size = |range: &RangeInclusive<u32>| u64::from(range.end() - range.start()) + 1;
        if let Some(first) = ranges.first() {
            for _ in 0..RANDOM_TRIES {
                let value = first.start() + (random() % size(first)) as u32;
                if self.claim(held(value)).await? {
                    return Ok(Some(value));
                }
            }
        }
        for range in ranges {
            // The taken values, read once; then each free one is tried from
            // a random offset (another writer may take it first).
            let prefix = match held(*range.start()) {
                Held::Ip(_) => IP_PREFIX,
                Held::Port(_) => PORT_PREFIX,
            };
            let mut taken = HashSet::new();
            list_prefix(self.store, prefix, |kv| {
                taken.insert(Held::of_key(&kv.key));
            })
            .await
            .map_err(ApiError::internal)?;
            let start = random() % size(range);
            for offset in 0..size(range) {
                let value = range.start() + ((start + offset) % size(range)) as u32;
                if !taken.contains(&Some(held(value))) && self.claim(held(value)).await? {
                    return Ok(Some(value));
                }
            }
        }
        Ok(None)
    }
}

/// Releases `values` claimed by `owner` (keys another holds are left).
async fn release(store: &dyn Store, owner: &Owner, values: &[Held]) {
    for held in values {
        let key = held.key();
        match store.get(&key).await {
            Ok(Some(kv)) if Owner::decode(&kv.value).as_ref() == Some(owner) => {
                if let Err(error) = store.delete(&key, Some(kv.mod_revision)).await {
                    tracing::warn!(key, %error, "could not release a Service's value; the repair pass will");
                }
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(key, %error, "could not release a Service's value; the repair pass will"),
        }
    }
}

/// Releases what a deleted Service held.
pub(crate) async fn release_all(store: &dyn Store, service: &Value) {
    release(store, &Owner::of(service), &held(service)).await;
}

/// What one repair pass found and did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Repaired {
    /// Claims no Service holds, seen unchanged in the previous pass too,
    /// deleted.
    pub released: Vec<String>,
    /// Values Services held without a claim, claimed for them.
    pub recorded: Vec<String>,
    /// Values held by a Service other than the one claiming them: (key,
    /// the Service that holds it too).
    pub doubly_held: Vec<(String, String)>,
}

/// One pass of the repair loop. `suspects` carries the orphaned claims
/// (key, revision) from one pass to the next: a claim is released only when
/// it was orphaned, unchanged, in the previous pass too, so that a create
/// between its claim and its write is never undone.
pub(crate) async fn repair(
    store: &dyn Store,
    services_prefix: &str,
    suspects: &mut HashSet<(String, Revision)>,
) -> Result<Repaired, StoreError> {
    let mut claims: Vec<KeyValue> = Vec::new();
    for prefix in [IP_PREFIX, PORT_PREFIX] {
        list_prefix(store, prefix, |kv| claims.push(kv.clone())).await?;
    }
    // Listed after the claims: a Service written since holds its claims.
    let mut holders: BTreeMap<Held, Vec<Owner>> = BTreeMap::new();
    list_prefix(store, services_prefix, |kv| {
        let Ok(service) = serde_json::from_slice::<Value>(&kv.value) else { return };
        let owner = Owner::of(&service);
        for value in held(&service) {
            holders.entry(value).or_default().push(owner.clone());
        }
    })
    .await?;
    let mut repaired = Repaired::default();
    let mut next_suspects = HashSet::new();
    let mut claimed = HashSet::new();
    for kv in &claims {
        let Some(value) = Held::of_key(&kv.key) else { continue };
        claimed.insert(value);
        let owner = Owner::decode(&kv.value);
        let holders = holders.get(&value).map(Vec::as_slice).unwrap_or_default();
        if holders.iter().any(|holder| Some(holder) == owner.as_ref()) {
            let others = holders.iter().filter(|holder| Some(*holder) != owner.as_ref());
            repaired.doubly_held.extend(others.map(|other| (kv.key.clone(), other.service())));
            continue;
        }
        let suspect = (kv.key.clone(), kv.mod_revision);
        if suspects.contains(&suspect) {
            match store.delete(&kv.key, Some(kv.mod_revision)).await {
                Ok(_) => repaired.released.push(kv.key.clone()),
                Err(StoreError::Conflict { .. } | StoreError::NotFound { .. }) => {}
                Err(error) => return Err(error),
            }
        } else {
            next_suspects.insert(suspect);
        }
    }
    for (value, holders) in &holders {
        if claimed.contains(value) {
            continue;
        }
        let Some((first, rest)) = holders.split_first() else { continue };
        let key = value.key();
        match store.create(&key, first.encode(), None).await {
            Ok(_) => repaired.recorded.push(key.clone()),
            Err(StoreError::AlreadyExists { .. }) => {}
            Err(error) => return Err(error),
        }
        repaired.doubly_held.extend(rest.iter().map(|other| (key.clone(), other.service())));
    }
    *suspects = next_suspects;
    Ok(repaired)
}

/// Starts the repair loop of a server: a pass now, then one every
/// `interval`, until the server is dropped.
pub(crate) fn spawn_repair(state: Weak<State>, services_prefix: String, interval: Duration) {
    tokio::spawn(async move {
        let mut suspects = HashSet::new();
        loop {
            {
                let Some(state) = state.upgrade() else { return };
                match repair(&*state.store, &services_prefix, &mut suspects).await {
                    Ok(repaired) => {
                        for key in &repaired.released {
                            tracing::info!(key, "released a Service value no Service holds");
                        }
                        for key in &repaired.recorded {
                            tracing::info!(key, "recorded a Service value held without a record");
                        }
                        for (key, service) in &repaired.doubly_held {
                            tracing::warn!(key, service, "a Service holds a value allocated to another");
                        }
                    }
                    Err(error) => tracing::warn!(%error, "repairing Service allocations failed; retrying"),
                }
            }
            tokio::time::sleep(interval).await;
        }
    });
}

#[cfg(test)]
mod tests;
