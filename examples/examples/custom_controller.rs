//! A controller of your own for a kind of your own: each `Website` (a
//! Rust-typed kind, served as `custom_kind` serves its own) is published as
//! a ConfigMap `<name>-html` holding its page, owned by the Website, and
//! the Website's status says where. A finalizer deletes the ConfigMap before
//! the Website goes; an empty page is refused with the controller's own
//! error and waits for a change instead of being retried.
//!
//! ```text
//! cargo run -p orchestra-examples --example custom_controller
//! ```

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use orchestra::core::api::ResourceInfo;
use orchestra::ctrl::ErrorPolicy;
use orchestra::ctrl::finalizer::{Event, FinalizerError, finalizer};
use orchestra::ctrl::manager::ManagerContext;
use orchestra::prelude::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The finalizer standing for the ConfigMap.
pub const FINALIZER: &str = "example.com/website";

/// A static page to publish.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Website {
    /// `example.com/v1`.
    pub api_version: String,
    /// `Website`.
    pub kind: String,
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The page.
    pub spec: WebsiteSpec,
    /// Where it was published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<WebsiteStatus>,
}

/// The page to publish.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct WebsiteSpec {
    /// Its HTML.
    pub html: String,
}

/// Where the page was published.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebsiteStatus {
    /// The ConfigMap holding `index.html`.
    pub config_map: String,
}

impl k8s_openapi::Resource for Website {
    const API_VERSION: &'static str = "example.com/v1";
    const GROUP: &'static str = "example.com";
    const KIND: &'static str = "Website";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "websites";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::ListableResource for Website {
    const LIST_KIND: &'static str = "WebsiteList";
}

impl k8s_openapi::Metadata for Website {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl Website {
    /// A website named `name` showing `html`.
    pub fn new(name: &str, html: &str) -> Website {
        let metadata = ObjectMeta { name: Some(name.into()), ..Default::default() };
        let (api_version, kind) = ("example.com/v1".into(), "Website".into());
        Website { api_version, kind, metadata, spec: WebsiteSpec { html: html.into() }, status: None }
    }
}

/// How the API server serves the kind.
pub fn resource() -> ResourceInfo {
    ResourceInfo::of::<Website>().with_status()
}

/// What goes wrong in a reconcile, in the controller's own terms.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec cannot be published: retrying will not help.
    #[error("website {0} has an empty page")]
    EmptyPage(String),
    /// The API server refused a write.
    #[error(transparent)]
    Api(#[from] kube::Error),
}

/// Publishes a live Website, deletes the ConfigMap of a deleted one.
pub async fn reconcile(site: Arc<Website>, client: Arc<Client>) -> Result<Action, FinalizerError<Error>> {
    let namespace = site.namespace().unwrap_or_default();
    let sites: Api<Website> = Api::namespaced((*client).clone(), &namespace);
    let maps: Api<ConfigMap> = Api::namespaced((*client).clone(), &namespace);
    let statuses = sites.clone();
    finalizer(&sites, FINALIZER, site, |event| async move {
        match event {
            Event::Apply(site) => {
                if site.spec.html.is_empty() {
                    return Err(Error::EmptyPage(site.name_any()));
                }
                let name = format!("{}-html", site.name_any());
                let map = ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        owner_references: site.controller_owner_ref(&()).map(|owner| vec![owner]),
                        ..Default::default()
                    },
                    data: Some([("index.html".to_owned(), site.spec.html.clone())].into()),
                    ..Default::default()
                };
                maps.patch(&name, &PatchParams::apply("website-controller").force(), &Patch::Apply(&map)).await?;
                let status = WebsiteStatus { config_map: name };
                let patch = serde_json::json!({ "status": status });
                statuses.patch_status(&site.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
            }
            Event::Cleanup(site) => {
                let deleted = maps.delete(&format!("{}-html", site.name_any()), &DeleteParams::default()).await;
                match deleted {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 404 => {} // gone already
                    Err(error) => return Err(error.into()),
                }
            }
        }
        Ok::<_, Error>(Action::await_change())
    })
    .await
}

/// The error policy: an empty page waits for the user to change it; any
/// other failure is retried with the work queue's backoff.
pub struct WaitForFix;

impl ErrorPolicy<Website, FinalizerError<Error>, Client> for WaitForFix {
    fn on_error(&self, _: Arc<Website>, error: &FinalizerError<Error>, _: Arc<Client>) -> Option<Action> {
        matches!(error, FinalizerError::ApplyFailed(Error::EmptyPage(_))).then(Action::await_change)
    }
}

/// Runs the controller until the control plane stops it.
pub async fn run_controller(ctx: ManagerContext) {
    let client = Arc::new(ctx.factory.client().clone());
    Controller::<Website>::for_(&ctx.factory)
        .owns::<ConfigMap>()
        .error_policy(WaitForFix)
        .run(reconcile, client, ctx.stopped())
        .await;
}

/// Starts a control plane running the controller, creates a Website, reads
/// what the controller published, deletes the Website and checks its
/// ConfigMap went with it. Returns what was seen, as lines.
pub async fn run() -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let cluster = ControlPlane::builder()
        .configure_api_server(|server| server.register(resource()))
        .controller("website", run_controller)
        .start()
        .await?;
    let sites: Api<Website> = Api::default_namespaced(cluster.client());
    let maps: Api<ConfigMap> = Api::default_namespaced(cluster.client());
    sites.create(&PostParams::default(), &Website::new("home", "<h1>Hello</h1>")).await?;
    let mut seen = Vec::new();
    for _ in 0..200 {
        if let Some(status) = sites.get("home").await?.status {
            let map = maps.get(&status.config_map).await?;
            let page = map.data.unwrap_or_default().remove("index.html").unwrap_or_default();
            seen.push(format!("website home published as ConfigMap {}: {page}", status.config_map));
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sites.delete("home", &DeleteParams::default()).await?;
    for _ in 0..200 {
        if sites.get_opt("home").await?.is_none() && maps.get_opt("home-html").await?.is_none() {
            seen.push("website home deleted, its ConfigMap with it".to_owned());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.shutdown().await?;
    Ok(seen)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seen = run().await?;
    seen.iter().for_each(|line| println!("{line}"));
    if seen.len() == 2 { Ok(()) } else { Err("the controller did not publish and clean up in time".into()) }
}

#[cfg(test)]
mod tests {
    use orchestra::testing::ctrl::FakeCluster;

    use super::*;

    struct Case {
        what: &'static str,
        html: &'static str,
        finalizers: &'static [&'static str],
        deleted: bool,
        /// The page of a ConfigMap there before the reconcile.
        page_before: Option<&'static str>,
        /// `Ok(())` or the error's message.
        outcome: Result<(), &'static str>,
        writes: &'static [&'static str],
        page_after: Option<&'static str>,
    }

    const PUBLISH: &[&str] = &["patch configmaps default/site-html", "patch websites/status default/site"];
    const CLEAN_UP: &[&str] = &["delete configmaps default/site-html", "patch websites default/site"];

    #[tokio::test]
    async fn reconcile_publishes_refuses_and_cleans_up() {
        let cases = [
            Case {
                what: "a new website gets the finalizer, nothing else yet",
                html: "<p>hi</p>",
                finalizers: &[],
                deleted: false,
                page_before: None,
                outcome: Ok(()),
                writes: &["patch websites default/site"],
                page_after: None,
            },
            Case {
                what: "with the finalizer: the page is published, the status says where",
                html: "<p>hi</p>",
                finalizers: &[FINALIZER],
                deleted: false,
                page_before: None,
                outcome: Ok(()),
                writes: PUBLISH,
                page_after: Some("<p>hi</p>"),
            },
            Case {
                what: "an outdated page is brought up to date",
                html: "<p>new</p>",
                finalizers: &[FINALIZER],
                deleted: false,
                page_before: Some("<p>old</p>"),
                outcome: Ok(()),
                writes: PUBLISH,
                page_after: Some("<p>new</p>"),
            },
            Case {
                what: "an empty page is refused with the controller's error, nothing written",
                html: "",
                finalizers: &[FINALIZER],
                deleted: false,
                page_before: None,
                outcome: Err("failed to apply object: website site has an empty page"),
                writes: &[],
                page_after: None,
            },
            Case {
                what: "deleted: the ConfigMap goes, then the finalizer",
                html: "<p>hi</p>",
                finalizers: &[FINALIZER],
                deleted: true,
                page_before: Some("<p>hi</p>"),
                outcome: Ok(()),
                writes: CLEAN_UP,
                page_after: None,
            },
            Case {
                what: "deleted with its ConfigMap gone already: the finalizer goes",
                html: "<p>hi</p>",
                finalizers: &[FINALIZER],
                deleted: true,
                page_before: None,
                outcome: Ok(()),
                writes: CLEAN_UP,
                page_after: None,
            },
        ];
        for case in cases {
            let mut site = Website::new("site", case.html);
            site.metadata.namespace = Some("default".into());
            site.metadata.finalizers = Some(case.finalizers.iter().map(|f| f.to_string()).collect());
            if case.deleted {
                site.metadata.deletion_timestamp =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()));
            }
            let mut fake = FakeCluster::builder().resource(resource()).object(&site);
            let map = |page: &str| ConfigMap {
                metadata: ObjectMeta {
                    name: Some("site-html".into()),
                    namespace: site.metadata.namespace.clone(),
                    ..Default::default()
                },
                data: Some([("index.html".to_owned(), page.to_owned())].into()),
                ..Default::default()
            };
            if let Some(page) = case.page_before {
                fake = fake.object(&map(page));
            }
            let fake = fake.build().await;
            // The object as a controller's cache holds it: uid and resourceVersion included.
            let site: Website = fake.get("default", "site").await.expect("seeded");
            let client = Arc::new(fake.client());
            let result = reconcile(Arc::new(site.clone()), client.clone()).await;
            match (&result, case.outcome) {
                (Ok(action), Ok(())) => assert_eq!(*action, Action::AwaitChange, "{}", case.what),
                (Err(error), Err(message)) => {
                    assert_eq!(error.to_string(), message, "{}", case.what);
                    // The error policy: an empty page waits for a change.
                    assert_eq!(
                        WaitForFix.on_error(Arc::new(site), error, client),
                        Some(Action::AwaitChange),
                        "{}",
                        case.what
                    );
                }
                (result, _) => panic!("{}: {result:?}", case.what),
            }
            assert_eq!(fake.writes(), case.writes, "{}", case.what);
            let page = fake.get::<ConfigMap>("default", "site-html").await.and_then(|m| m.data?.remove("index.html"));
            assert_eq!(page.as_deref(), case.page_after, "{}", case.what);
            if case.outcome.is_ok() && case.page_after.is_some() {
                let status = fake.get::<Website>("default", "site").await.and_then(|s| s.status);
                assert_eq!(status, Some(WebsiteStatus { config_map: "site-html".into() }), "{}", case.what);
            }
        }
    }
}
