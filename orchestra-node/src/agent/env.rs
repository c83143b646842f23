//! Container environment as the kubelet builds it: `envFrom` (with prefix),
//! then `env` in order, each value `$(VAR)`-expanded against what was
//! defined before it; values from the downward API (`fieldRef`,
//! `resourceFieldRef`), ConfigMaps and Secrets; then `command` and `args`
//! expanded against the result.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, ObjectFieldSelector, Pod, ResourceFieldSelector, Secret, Service,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::config::Resources;
use super::resources::{int_value, milli_value};

/// Why a container's configuration cannot be built: the pod shows
/// `CreateContainerConfigError` with this message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvError {
    /// A referenced ConfigMap does not exist.
    #[error("configmap {0:?} not found")]
    ConfigMapNotFound(String),
    /// A referenced Secret does not exist.
    #[error("secret {0:?} not found")]
    SecretNotFound(String),
    /// A referenced key is missing.
    #[error("couldn't find key {key} in {kind} {namespace}/{name}")]
    KeyNotFound {
        /// `ConfigMap` or `Secret`.
        kind: &'static str,
        /// The object's namespace.
        namespace: String,
        /// The object's name.
        name: String,
        /// The key.
        key: String,
    },
    /// A `fieldRef` or `resourceFieldRef` the agent does not know.
    #[error("unsupported {0}")]
    Unsupported(String),
}

/// Expands `$(VAR)` references in `input` as Kubernetes does: a defined
/// variable is replaced, an undefined one is left as written, `$$` is an
/// escaped `$` (so `$$(VAR)` yields `$(VAR)`), any other `$` stays.
pub fn expand(input: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let bytes = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut i = 0;
    let mut literal_from = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && i + 1 < bytes.len() {
            match bytes[i + 1] {
                b'$' => {
                    out.push_str(&input[literal_from..i]);
                    out.push('$');
                    i += 2;
                    literal_from = i;
                    continue;
                }
                b'(' => {
                    if let Some(close) = input[i + 2..].find(')') {
                        let name = &input[i + 2..i + 2 + close];
                        out.push_str(&input[literal_from..i]);
                        match lookup(name) {
                            Some(value) => out.push_str(&value),
                            None => out.push_str(&input[i..i + 3 + close]),
                        }
                        i += 3 + close;
                        literal_from = i;
                        continue;
                    }
                }
                _ => {}
            }
        }
        i += 1;
    }
    out.push_str(&input[literal_from..]);
    out
}

/// What the downward API needs besides the pod itself.
#[derive(Debug, Clone, Default)]
pub struct EnvContext {
    /// The node's name (`spec.nodeName` may not be set for static pods).
    pub node_name: String,
    /// `status.hostIPs`.
    pub host_ips: Vec<String>,
    /// `status.podIPs`.
    pub pod_ips: Vec<String>,
    /// The node's allocatable: the value of unset limits.
    pub allocatable: Resources,
    /// Service link variables ([`service_env`]), when the pod enables them.
    pub services: Vec<(String, String)>,
}

/// ConfigMaps and Secrets fetched for a pod, by name (`None`: not found),
/// and the service account tokens its projected volumes need.
#[derive(Debug, Clone, Default)]
pub struct Objects {
    /// ConfigMaps.
    pub config_maps: HashMap<String, Option<ConfigMap>>,
    /// Secrets.
    pub secrets: HashMap<String, Option<Secret>>,
    /// Tokens by audience and lifetime, or why the API refused them.
    pub tokens: HashMap<super::tokens::TokenKey, Result<String, String>>,
}

/// One referenced object: (is it a Secret, its name).
pub type ObjectRef = (bool, String);

/// The ConfigMaps and Secrets a container's environment refers to.
pub fn env_references(container: &Container) -> Vec<ObjectRef> {
    let mut out = Vec::new();
    for from in container.env_from.iter().flatten() {
        if let Some(r) = &from.config_map_ref {
            out.push((false, r.name.clone()));
        }
        if let Some(r) = &from.secret_ref {
            out.push((true, r.name.clone()));
        }
    }
    for var in container.env.iter().flatten() {
        if let Some(from) = &var.value_from {
            if let Some(r) = &from.config_map_key_ref {
                out.push((false, r.name.clone()));
            }
            if let Some(r) = &from.secret_key_ref {
                out.push((true, r.name.clone()));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

fn config_map_data(cm: &ConfigMap) -> BTreeMap<String, String> {
    let mut data = cm.data.clone().unwrap_or_default();
    for (k, v) in cm.binary_data.iter().flatten() {
        data.insert(k.clone(), String::from_utf8_lossy(&v.0).into_owned());
    }
    data
}

fn secret_data(secret: &Secret) -> BTreeMap<String, String> {
    let mut data: BTreeMap<String, String> =
        secret.data.iter().flatten().map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned())).collect();
    for (k, v) in secret.string_data.iter().flatten() {
        data.insert(k.clone(), v.clone());
    }
    data
}

fn bracket_key(path: &str, prefix: &str) -> Option<String> {
    let rest = path.strip_prefix(prefix)?.strip_prefix("['")?.strip_suffix("']")?;
    Some(rest.to_owned())
}

/// The value of a downward API `fieldRef` (env form: single values only).
pub fn field_value(pod: &Pod, field: &ObjectFieldSelector, ctx: &EnvContext) -> Result<String, EnvError> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let path = field.field_path.as_str();
    if let Some(key) = bracket_key(path, "metadata.labels") {
        return Ok(meta.labels.as_ref().and_then(|l| l.get(&key).cloned()).unwrap_or_default());
    }
    if let Some(key) = bracket_key(path, "metadata.annotations") {
        return Ok(meta.annotations.as_ref().and_then(|l| l.get(&key).cloned()).unwrap_or_default());
    }
    Ok(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "metadata.labels" => format_map(meta.labels.as_ref()),
        "metadata.annotations" => format_map(meta.annotations.as_ref()),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_else(|| ctx.node_name.clone()),
        "spec.serviceAccountName" => spec.and_then(|s| s.service_account_name.clone()).unwrap_or_default(),
        "status.hostIP" => ctx.host_ips.first().cloned().unwrap_or_default(),
        "status.hostIPs" => ctx.host_ips.join(","),
        "status.podIP" => ctx.pod_ips.first().cloned().unwrap_or_default(),
        "status.podIPs" => ctx.pod_ips.join(","),
        other => return Err(EnvError::Unsupported(format!("fieldPath {other:?}"))),
    })
}

/// `key="value"` lines, sorted, as downward API volumes write labels.
pub fn format_map(map: Option<&BTreeMap<String, String>>) -> String {
    map.into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}\n", serde_json::to_string(v).unwrap_or_default()))
        .collect::<String>()
        .trim_end_matches('\n')
        .to_owned()
}

/// The value of a `resourceFieldRef` for `container` (limits default to the
/// node's allocatable).
pub fn resource_value(
    container: &Container,
    selector: &ResourceFieldSelector,
    ctx: &EnvContext,
) -> Result<String, EnvError> {
    let resources = container.resources.as_ref();
    let (kind, name) = selector
        .resource
        .split_once('.')
        .ok_or_else(|| EnvError::Unsupported(format!("resource {:?}", selector.resource)))?;
    let map = match kind {
        "limits" => resources.and_then(|r| r.limits.as_ref()),
        "requests" => resources.and_then(|r| r.requests.as_ref()),
        _ => return Err(EnvError::Unsupported(format!("resource {:?}", selector.resource))),
    };
    let set = map.and_then(|m| m.get(name));
    let divisor = selector.divisor.clone().unwrap_or_else(|| Quantity("1".into()));
    let ceil_div = |value: u64, divisor: u64| if divisor == 0 { value } else { value.div_ceil(divisor) };
    match name {
        "cpu" => {
            let millis = set.map(milli_value).unwrap_or(if kind == "limits" { ctx.allocatable.cpu_millis } else { 0 });
            Ok(ceil_div(millis, milli_value(&divisor).max(1)).to_string())
        }
        "memory" | "ephemeral-storage" => {
            let fallback = if kind != "limits" {
                0
            } else if name == "memory" {
                ctx.allocatable.memory_bytes
            } else {
                ctx.allocatable.ephemeral_storage_bytes
            };
            let bytes = set.map(int_value).unwrap_or(fallback);
            Ok(ceil_div(bytes, int_value(&divisor).max(1)).to_string())
        }
        other => match set {
            Some(q) => Ok(ceil_div(int_value(q), int_value(&divisor).max(1)).to_string()),
            None => Err(EnvError::Unsupported(format!("resource {other:?}"))),
        },
    }
}

/// The environment of `container`, in order, later definitions replacing
/// earlier ones in place.
pub fn container_env(
    pod: &Pod,
    container: &Container,
    ctx: &EnvContext,
    objects: &Objects,
) -> Result<Vec<(String, String)>, EnvError> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let mut order: Vec<String> = Vec::new();
    let mut values: HashMap<String, String> = HashMap::new();
    let set = |order: &mut Vec<String>, values: &mut HashMap<String, String>, k: String, v: String| {
        if values.insert(k.clone(), v).is_none() {
            order.push(k);
        }
    };
    // Service variables come first: the pod's own variables override them.
    for (k, v) in &ctx.services {
        set(&mut order, &mut values, k.clone(), v.clone());
    }
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let data = if let Some(r) = &from.config_map_ref {
            match objects.config_maps.get(&r.name).cloned().flatten() {
                Some(cm) => config_map_data(&cm),
                None if r.optional == Some(true) => continue,
                None => return Err(EnvError::ConfigMapNotFound(r.name.clone())),
            }
        } else if let Some(r) = &from.secret_ref {
            match objects.secrets.get(&r.name).cloned().flatten() {
                Some(s) => secret_data(&s),
                None if r.optional == Some(true) => continue,
                None => return Err(EnvError::SecretNotFound(r.name.clone())),
            }
        } else {
            continue;
        };
        for (k, v) in data {
            let name = format!("{prefix}{k}");
            if name.is_empty() || name.contains('=') {
                continue;
            }
            set(&mut order, &mut values, name, v);
        }
    }
    for var in container.env.iter().flatten() {
        let value = if let Some(from) = &var.value_from {
            if let Some(field) = &from.field_ref {
                field_value(pod, field, ctx)?
            } else if let Some(resource) = &from.resource_field_ref {
                resource_value(container, resource, ctx)?
            } else if let Some(r) = &from.config_map_key_ref {
                let optional = r.optional == Some(true);
                match objects.config_maps.get(&r.name).cloned().flatten() {
                    Some(cm) => match config_map_data(&cm).get(&r.key) {
                        Some(v) => v.clone(),
                        None if optional => continue,
                        None => {
                            return Err(EnvError::KeyNotFound {
                                kind: "ConfigMap",
                                namespace,
                                name: r.name.clone(),
                                key: r.key.clone(),
                            });
                        }
                    },
                    None if optional => continue,
                    None => return Err(EnvError::ConfigMapNotFound(r.name.clone())),
                }
            } else if let Some(r) = &from.secret_key_ref {
                let optional = r.optional == Some(true);
                match objects.secrets.get(&r.name).cloned().flatten() {
                    Some(s) => match secret_data(&s).get(&r.key) {
                        Some(v) => v.clone(),
                        None if optional => continue,
                        None => {
                            return Err(EnvError::KeyNotFound {
                                kind: "Secret",
                                namespace,
                                name: r.name.clone(),
                                key: r.key.clone(),
                            });
                        }
                    },
                    None if optional => continue,
                    None => return Err(EnvError::SecretNotFound(r.name.clone())),
                }
            } else {
                String::new()
            }
        } else {
            let raw = var.value.clone().unwrap_or_default();
            expand(&raw, &|name| values.get(name).cloned())
        };
        set(&mut order, &mut values, var.name.clone(), value);
    }
    Ok(order
        .into_iter()
        .map(|k| {
            let v = values.remove(&k).unwrap_or_default();
            (k, v)
        })
        .collect())
}

/// The Docker-links-style variables of `services` as the kubelet injects
/// them (`WEB_SERVICE_HOST`, `WEB_SERVICE_PORT`, `WEB_PORT_80_TCP_ADDR`...),
/// headless services skipped, sorted by service name.
pub fn service_env(services: &[Service]) -> Vec<(String, String)> {
    let mut services: Vec<&Service> = services.iter().collect();
    services.sort_by_key(|s| s.metadata.name.clone());
    let mut out = Vec::new();
    for svc in services {
        let Some(spec) = svc.spec.as_ref() else { continue };
        let Some(ip) = spec.cluster_ip.as_deref().filter(|ip| !ip.is_empty() && *ip != "None") else { continue };
        let name = svc.metadata.name.clone().unwrap_or_default().to_uppercase().replace('-', "_");
        let ports = spec.ports.as_deref().unwrap_or_default();
        let Some(first) = ports.first() else { continue };
        out.push((format!("{name}_SERVICE_HOST"), ip.to_owned()));
        out.push((format!("{name}_SERVICE_PORT"), first.port.to_string()));
        for p in ports {
            if let Some(port_name) = p.name.as_deref().filter(|n| !n.is_empty()) {
                out.push((
                    format!("{name}_SERVICE_PORT_{}", port_name.to_uppercase().replace('-', "_")),
                    p.port.to_string(),
                ));
            }
        }
        let proto = |p: &k8s_openapi::api::core::v1::ServicePort| p.protocol.clone().unwrap_or_else(|| "TCP".into());
        out.push((format!("{name}_PORT"), format!("{}://{ip}:{}", proto(first).to_lowercase(), first.port)));
        for p in ports {
            let protocol = proto(p);
            let prefix = format!("{name}_PORT_{}_{}", p.port, protocol.to_uppercase());
            out.push((prefix.clone(), format!("{}://{ip}:{}", protocol.to_lowercase(), p.port)));
            out.push((format!("{prefix}_PROTO"), protocol.to_lowercase()));
            out.push((format!("{prefix}_PORT"), p.port.to_string()));
            out.push((format!("{prefix}_ADDR"), ip.to_owned()));
        }
    }
    out
}

/// `command` and `args` with `$(VAR)` expanded against `env`.
pub fn expand_command(container: &Container, env: &[(String, String)]) -> (Vec<String>, Vec<String>) {
    let map: HashMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let lookup = |name: &str| map.get(name).map(|v| v.to_string());
    let all = |list: &Option<Vec<String>>| list.iter().flatten().map(|s| expand(s, &lookup)).collect();
    (all(&container.command), all(&container.args))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::{
        ConfigMapEnvSource, ConfigMapKeySelector, EnvFromSource, EnvVar, EnvVarSource, PodSpec, ResourceRequirements,
        SecretKeySelector,
    };
    use kube::api::ObjectMeta;

    #[test]
    fn expansion_table() {
        let vars: HashMap<&str, &str> = [("A", "a"), ("B", "$(A)"), ("EMPTY", "")].into();
        let lookup = |n: &str| vars.get(n).map(|v| v.to_string());
        let cases = [
            ("plain", "plain"),
            ("$(A)", "a"),
            ("x$(A)y$(A)", "xaya"),
            ("$(B)", "$(A)"),
            ("$(UNDEFINED)", "$(UNDEFINED)"),
            ("$$(A)", "$(A)"),
            ("$$$(A)", "$a"),
            ("$$", "$"),
            ("$", "$"),
            ("$A", "$A"),
            ("$(A", "$(A"),
            ("$(EMPTY)-", "-"),
            ("trailing $", "trailing $"),
            ("ünï$(A)cödé", "ünïacödé"),
        ];
        for (input, want) in cases {
            assert_eq!(expand(input, &lookup), want, "{input}");
        }
    }

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("prod".into()),
                uid: Some("u-1".into()),
                labels: Some([("app".to_string(), "web".to_string())].into()),
                annotations: Some([("note".to_string(), "hi".to_string())].into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("n1".into()),
                service_account_name: Some("sa".into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn field(path: &str) -> Option<EnvVarSource> {
        Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector { field_path: path.into(), api_version: None }),
            ..Default::default()
        })
    }

    fn var(name: &str, value: &str) -> EnvVar {
        EnvVar { name: name.into(), value: Some(value.into()), value_from: None }
    }

    fn from(name: &str, source: Option<EnvVarSource>) -> EnvVar {
        EnvVar { name: name.into(), value: None, value_from: source }
    }

    #[test]
    fn env_with_downward_api_config_maps_and_secrets() {
        let ctx = EnvContext {
            node_name: "n1".into(),
            host_ips: vec!["10.0.0.1".into()],
            pod_ips: vec!["10.244.0.5".into()],
            allocatable: Resources { cpu_millis: 4000, memory_bytes: 8 << 30, ..Default::default() },
            ..Default::default()
        };
        let cm = ConfigMap {
            data: Some([("color".to_string(), "blue".to_string()), ("size".to_string(), "L".to_string())].into()),
            ..Default::default()
        };
        let secret =
            Secret { data: Some([("pw".to_string(), ByteString(b"s3cret".to_vec()))].into()), ..Default::default() };
        let objects = Objects {
            config_maps: [("cfg".to_string(), Some(cm))].into(),
            secrets: [("sec".to_string(), Some(secret)), ("gone".to_string(), None)].into(),
            ..Default::default()
        };
        let container = Container {
            name: "c".into(),
            env_from: Some(vec![EnvFromSource {
                prefix: Some("CFG_".into()),
                config_map_ref: Some(ConfigMapEnvSource { name: "cfg".into(), optional: None }),
                secret_ref: None,
            }]),
            env: Some(vec![
                from("POD", field("metadata.name")),
                from("NS", field("metadata.namespace")),
                from("UID", field("metadata.uid")),
                from("APP", field("metadata.labels['app']")),
                from("NOTE", field("metadata.annotations['note']")),
                from("NODE", field("spec.nodeName")),
                from("SA", field("spec.serviceAccountName")),
                from("HOST_IP", field("status.hostIP")),
                from("POD_IP", field("status.podIP")),
                from("POD_IPS", field("status.podIPs")),
                from(
                    "CPU_LIMIT",
                    Some(EnvVarSource {
                        resource_field_ref: Some(ResourceFieldSelector {
                            resource: "limits.cpu".into(),
                            divisor: Some(Quantity("1m".into())),
                            container_name: None,
                        }),
                        ..Default::default()
                    }),
                ),
                from(
                    "MEM_REQ",
                    Some(EnvVarSource {
                        resource_field_ref: Some(ResourceFieldSelector {
                            resource: "requests.memory".into(),
                            divisor: Some(Quantity("1Mi".into())),
                            container_name: None,
                        }),
                        ..Default::default()
                    }),
                ),
                from(
                    "COLOR",
                    Some(EnvVarSource {
                        config_map_key_ref: Some(ConfigMapKeySelector {
                            name: "cfg".into(),
                            key: "color".into(),
                            optional: None,
                        }),
                        ..Default::default()
                    }),
                ),
                from(
                    "PW",
                    Some(EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector {
                            name: "sec".into(),
                            key: "pw".into(),
                            optional: None,
                        }),
                        ..Default::default()
                    }),
                ),
                from(
                    "OPT",
                    Some(EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector {
                            name: "gone".into(),
                            key: "x".into(),
                            optional: Some(true),
                        }),
                        ..Default::default()
                    }),
                ),
                var("GREETING", "hello $(POD) in $(NS), $$(POD) $(NOPE)"),
                var("CFG_SIZE", "XL"),
            ]),
            resources: Some(ResourceRequirements {
                requests: Some([("memory".to_string(), Quantity("64Mi".into()))].into()),
                ..Default::default()
            }),
            command: Some(vec!["echo".into(), "$(GREETING)".into()]),
            args: Some(vec!["$(COLOR)".into(), "$$(COLOR)".into()]),
            ..Default::default()
        };
        assert_eq!(
            env_references(&container),
            [(false, "cfg".to_string()), (true, "gone".to_string()), (true, "sec".to_string())]
        );
        let env = container_env(&pod(), &container, &ctx, &objects).unwrap();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(env[0], ("CFG_color".to_string(), "blue".to_string()));
        assert_eq!(get("CFG_SIZE"), Some("XL"));
        assert_eq!(env.iter().filter(|(k, _)| k == "CFG_SIZE").count(), 1);
        for (k, v) in [
            ("POD", "web"),
            ("NS", "prod"),
            ("UID", "u-1"),
            ("APP", "web"),
            ("NOTE", "hi"),
            ("NODE", "n1"),
            ("SA", "sa"),
            ("HOST_IP", "10.0.0.1"),
            ("POD_IP", "10.244.0.5"),
            ("POD_IPS", "10.244.0.5"),
            ("CPU_LIMIT", "4000"),
            ("MEM_REQ", "64"),
            ("COLOR", "blue"),
            ("PW", "s3cret"),
            ("GREETING", "hello web in prod, $(POD) $(NOPE)"),
        ] {
            assert_eq!(get(k), Some(v), "{k}");
        }
        assert_eq!(get("OPT"), None);
        let (command, args) = expand_command(&container, &env);
        assert_eq!(command, ["echo", "hello web in prod, $(POD) $(NOPE)"]);
        assert_eq!(args, ["blue", "$(COLOR)"]);
    }

    #[test]
    fn service_links_like_docker() {
        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "redis-primary"},
            "spec": {"clusterIP": "10.0.0.11", "ports": [{"name": "redis", "port": 6379}, {"port": 53, "protocol": "UDP"}]}
        }))
        .unwrap();
        let headless: Service = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "h"}, "spec": {"clusterIP": "None", "ports": [{"port": 1}]}}),
        )
        .unwrap();
        let env = service_env(&[svc, headless]);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("REDIS_PRIMARY_SERVICE_HOST"), Some("10.0.0.11"));
        assert_eq!(get("REDIS_PRIMARY_SERVICE_PORT"), Some("6379"));
        assert_eq!(get("REDIS_PRIMARY_SERVICE_PORT_REDIS"), Some("6379"));
        assert_eq!(get("REDIS_PRIMARY_PORT"), Some("tcp://10.0.0.11:6379"));
        assert_eq!(get("REDIS_PRIMARY_PORT_53_UDP"), Some("udp://10.0.0.11:53"));
        assert_eq!(get("REDIS_PRIMARY_PORT_53_UDP_PROTO"), Some("udp"));
        assert_eq!(get("REDIS_PRIMARY_PORT_6379_TCP_ADDR"), Some("10.0.0.11"));
        assert!(!env.iter().any(|(k, _)| k.starts_with("H_")));
        // The pod's own variables win and may refer to them.
        let ctx = EnvContext { services: env.clone(), ..Default::default() };
        let container = Container {
            name: "c".into(),
            env: Some(vec![
                var("URL", "redis://$(REDIS_PRIMARY_SERVICE_HOST)"),
                var("REDIS_PRIMARY_SERVICE_PORT", "1"),
            ]),
            ..Default::default()
        };
        let out = container_env(&pod(), &container, &ctx, &Objects::default()).unwrap();
        let get = |k: &str| out.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("URL"), Some("redis://10.0.0.11"));
        assert_eq!(get("REDIS_PRIMARY_SERVICE_PORT"), Some("1"));
    }

    #[test]
    fn missing_references_are_config_errors() {
        let ctx = EnvContext::default();
        let objects =
            Objects { config_maps: [("cfg".to_string(), Some(ConfigMap::default()))].into(), ..Default::default() };
        let with = |source: EnvVarSource| Container {
            name: "c".into(),
            env: Some(vec![from("X", Some(source))]),
            ..Default::default()
        };
        let missing_key = with(EnvVarSource {
            config_map_key_ref: Some(ConfigMapKeySelector { name: "cfg".into(), key: "k".into(), optional: None }),
            ..Default::default()
        });
        assert_eq!(
            container_env(&pod(), &missing_key, &ctx, &objects).unwrap_err().to_string(),
            "couldn't find key k in ConfigMap prod/cfg"
        );
        let missing_secret = with(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector { name: "s".into(), key: "k".into(), optional: Some(false) }),
            ..Default::default()
        });
        assert_eq!(
            container_env(&pod(), &missing_secret, &ctx, &objects).unwrap_err().to_string(),
            "secret \"s\" not found"
        );
    }
}
