//! A kind of your own, written as a Rust type, served by the API server
//! like a built-in one: discovery, OpenAPI v3 (so `kubectl apply` and
//! `kubectl explain` work), strict decoding (unknown or mistyped fields are
//! refused), the `status` subresource, a short name — and a typed
//! `kube::Api<Backup>` for Rust clients.
//!
//! ```text
//! cargo run -p orchestra-examples --example custom_kind
//! ```

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use orchestra::core::api::ResourceInfo;
use orchestra::prelude::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A database backup: what to back up and how often.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Backup {
    /// `example.com/v1`.
    #[serde(default = "Backup::api_version")]
    pub api_version: String,
    /// `Backup`.
    #[serde(default = "Backup::kind")]
    pub kind: String,
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What the user asks for.
    pub spec: BackupSpec,
    /// What a controller observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<BackupStatus>,
}

/// The desired backup.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupSpec {
    /// The database to back up.
    pub database: String,
    /// When, in cron syntax.
    pub schedule: String,
    /// How many backups to keep.
    #[serde(default)]
    pub retain: u32,
}

/// The observed backup.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupStatus {
    /// When the last backup finished (RFC 3339).
    pub last_success: Option<String>,
}

impl Backup {
    fn api_version() -> String {
        <Backup as k8s_openapi::Resource>::API_VERSION.into()
    }

    fn kind() -> String {
        <Backup as k8s_openapi::Resource>::KIND.into()
    }

    /// A backup named `name` of `database`.
    pub fn new(name: &str, database: &str, schedule: &str) -> Backup {
        Backup {
            api_version: Backup::api_version(),
            kind: Backup::kind(),
            metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
            spec: BackupSpec { database: database.into(), schedule: schedule.into(), retain: 7 },
            status: None,
        }
    }
}

// The kind's names: what makes it a Kubernetes resource to the API server
// (`ResourceInfo::of`) and to kube-rs (`Api<Backup>`).
impl k8s_openapi::Resource for Backup {
    const API_VERSION: &'static str = "example.com/v1";
    const GROUP: &'static str = "example.com";
    const KIND: &'static str = "Backup";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "backups";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::ListableResource for Backup {
    const LIST_KIND: &'static str = "BackupList";
}

impl k8s_openapi::Metadata for Backup {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// How the API server serves the kind: from the Rust type (schema, strict
/// decoding), with a status subresource and the short name `bk`.
pub fn resource() -> ResourceInfo {
    ResourceInfo::of::<Backup>().short_names(&["bk"]).with_status()
}

/// Starts a control plane serving the kind, creates a backup through the
/// typed API, reports its status, and lists what is stored.
pub async fn run() -> Result<Vec<Backup>, Box<dyn std::error::Error>> {
    let cluster = ControlPlane::builder().configure_api_server(|server| server.register(resource())).start().await?;
    let backups: Api<Backup> = Api::default_namespaced(cluster.client());
    backups.create(&PostParams::default(), &Backup::new("nightly", "orders", "0 3 * * *")).await?;
    let status = serde_json::json!({"status": {"lastSuccess": "2026-01-01T03:00:00Z"}});
    backups.patch_status("nightly", &PatchParams::default(), &Patch::Merge(&status)).await?;
    let stored = backups.list(&ListParams::default()).await?.items;
    cluster.shutdown().await?;
    Ok(stored)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    for backup in run().await? {
        let last = backup.status.as_ref().and_then(|s| s.last_success.clone()).unwrap_or_default();
        println!(
            "{} backs up {} at '{}', last success {last}",
            backup.name_any(),
            backup.spec.database,
            backup.spec.schedule
        );
    }
    Ok(())
}
