//! An admission plugin and an authorizer of your own, added to the API
//! server's chains of an embedded control plane.
//!
//! - `OwnerLabel` (admission): stamps every new ConfigMap with the label
//!   `example.com/created-by=<user>` (mutating phase) and refuses ConfigMaps
//!   that carry a `password` key (validating phase: 422, nothing stored).
//! - `ReadOnlyInterns` (authorizer): members of the group `interns` may
//!   do nothing but read (`get`, `list`, `watch`), whatever roles they are
//!   given; on reads, and on anyone else, it has no opinion, so the default
//!   authorizers (Node, then RBAC) decide. The program gives `interns` the
//!   `edit` role in `default`: RBAC would let them write, and
//!   `ReadOnlyInterns`, asked first, denies it.
//!
//! ```text
//! cargo run -p orchestra-examples --example admission_and_authz
//! ```

use async_trait::async_trait;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::RoleBinding;
use orchestra::core::api::{ApiError, ErrorTarget, FieldError};
use orchestra::core::auth::admission::{AdmissionRequest, Operation};
use orchestra::core::auth::{Attributes, Decision};
use orchestra::prelude::*;

/// The label `OwnerLabel` sets.
pub const CREATED_BY: &str = "example.com/created-by";

/// Labels new ConfigMaps with their creator; refuses plain-text passwords.
pub struct OwnerLabel;

#[async_trait]
impl AdmissionPlugin for OwnerLabel {
    fn name(&self) -> &str {
        "OwnerLabel"
    }

    async fn mutate(&self, request: &mut AdmissionRequest<'_>) -> Result<(), ApiError> {
        if request.operation != Operation::Create || request.resource.kind != "ConfigMap" {
            return Ok(());
        }
        if let Some(object) = request.object.as_mut() {
            let labels = &mut object["metadata"]["labels"];
            if labels.is_null() {
                *labels = serde_json::json!({});
            }
            // User names may hold ':' (system:admin), which a label value may not.
            labels[CREATED_BY] = request.user.name.replace(':', ".").into();
        }
        Ok(())
    }

    async fn validate(&self, request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
        let has_password = request.object.as_ref().is_some_and(|o| !o["data"]["password"].is_null());
        if request.resource.kind == "ConfigMap" && has_password {
            let resource = request.resource;
            let target = ErrorTarget {
                group: resource.group.clone(),
                resource: resource.plural.clone(),
                kind: resource.kind.clone(),
                name: request.name.to_owned(),
            };
            let error = FieldError::invalid("data.password", "<hidden>", "passwords belong in Secrets");
            return Err(ApiError::invalid(&target, vec![error]));
        }
        Ok(())
    }
}

/// Interns may read, nothing more, whatever RBAC grants them.
pub struct ReadOnlyInterns;

#[async_trait]
impl Authorizer for ReadOnlyInterns {
    async fn authorize(&self, attributes: &Attributes) -> Decision {
        let intern = attributes.user.groups.iter().any(|g| g == "interns");
        match attributes.verb.as_str() {
            _ if !intern => Decision::no_opinion(),
            "get" | "list" | "watch" => Decision::no_opinion(),
            verb => Decision::Deny(format!("interns may not {verb}")),
        }
    }
}

/// What the program saw: the creator label, and the HTTP codes of the
/// refused intern write and password ConfigMap.
#[derive(Debug)]
pub struct Outcome {
    /// The label `OwnerLabel` put on the admin's ConfigMap.
    pub created_by: Option<String>,
    /// The code an intern's create got.
    pub intern_create: u16,
    /// Whether an intern could list ConfigMaps.
    pub intern_list_ok: bool,
    /// The code a ConfigMap with a password got.
    pub password: u16,
}

fn config_map(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "data": data.iter().map(|(k, v)| (k.to_string(), serde_json::Value::from(*v))).collect::<serde_json::Map<_, _>>(),
    }))
    .expect("a ConfigMap")
}

fn code(result: Result<ConfigMap, kube::Error>) -> u16 {
    match result {
        Ok(_) => 201,
        Err(kube::Error::Api(status)) => status.code,
        Err(other) => panic!("unexpected error: {other}"),
    }
}

/// Starts the control plane with both extensions and exercises them.
pub async fn run() -> Result<Outcome, Box<dyn std::error::Error>> {
    let cluster = ControlPlane::builder().admission(OwnerLabel).authorizer(ReadOnlyInterns).start().await?;
    let admin: Api<ConfigMap> = Api::default_namespaced(cluster.client());
    let intern: Api<ConfigMap> = Api::default_namespaced(cluster.client_as("alice", &["interns"]));

    // Interns get the default `edit` role in `default`.
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "interns-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "interns"}],
    }))?;
    Api::<RoleBinding>::default_namespaced(cluster.client()).create(&PostParams::default(), &binding).await?;
    // RBAC decides from a cache its watch fills: the binding takes effect
    // a moment after it is written, as upstream's.
    for _ in 0..50 {
        if intern.list(&ListParams::default()).await.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    let created = admin.create(&PostParams::default(), &config_map("settings", &[("mode", "fast")])).await?;
    let intern_create = code(intern.create(&PostParams::default(), &config_map("mine", &[])).await);
    let intern_list_ok = intern.list(&ListParams::default()).await.is_ok();
    let password = code(admin.create(&PostParams::default(), &config_map("creds", &[("password", "x")])).await);
    cluster.shutdown().await?;
    Ok(Outcome { created_by: created.labels().get(CREATED_BY).cloned(), intern_create, intern_list_ok, password })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let outcome = run().await?;
    println!("admin's ConfigMap labelled {CREATED_BY}={}", outcome.created_by.as_deref().unwrap_or("-"));
    println!("an intern's create answered {}", outcome.intern_create);
    println!("an intern's list {}", if outcome.intern_list_ok { "succeeded" } else { "failed" });
    println!("a ConfigMap with a password answered {}", outcome.password);
    Ok(())
}
