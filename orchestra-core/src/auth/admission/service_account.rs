//! ServiceAccount: every pod runs as a service account that exists, and
//! gets that account's token, the cluster CA and its namespace in a
//! projected volume at [`TOKEN_MOUNT_PATH`].

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{AdmissionPlugin, AdmissionRequest, ObjectReader, Operation, ResourceRef};
use crate::api::{ApiError, ErrorTarget, FieldError};

const SERVICE_ACCOUNTS: ResourceRef<'static> = ResourceRef::new("", "v1", "serviceaccounts");

/// The account a pod that names none runs as.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";

/// Where every container finds `token`, `ca.crt` and `namespace`.
pub const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The prefix of the projected volume's name; five random characters follow.
pub const TOKEN_VOLUME_PREFIX: &str = "kube-api-access-";

/// The lifetime the projected token asks for: an hour and seven seconds,
/// upstream's marker that a token is one of these volumes'.
pub const TOKEN_EXPIRATION_SECONDS: i64 = 3607;

/// The ConfigMap every namespace holds with the cluster CA (key `ca.crt`),
/// kept by the root-ca-cert-publisher controller.
pub const ROOT_CA_CONFIG_MAP: &str = "kube-root-ca.crt";

/// The annotation that marks a mirror pod.
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The account annotation that limits its pods to the secrets it lists.
pub const ENFORCE_MOUNTABLE_SECRETS_ANNOTATION: &str = "kubernetes.io/enforce-mountable-secrets";

/// How often the lookup of a missing `default` account is tried, and how
/// long apart: the serviceaccount controller creates it just after its
/// namespace, so a pod created at once may come before it.
const DEFAULT_LOOKUPS: usize = 10;
const DEFAULT_LOOKUP_INTERVAL: Duration = Duration::from_millis(150);

/// The admission plugin that gives pods their service account, like
/// upstream's plugin of the same name.
///
/// On pod creates (mirror pods aside):
///
/// - `spec.serviceAccountName` defaults to `default`; an account that does
///   not exist is refused with 403 (`error looking up service account
///   <ns>/<name>: ...`). A missing `default` is looked up again for about
///   1.5 s, as the serviceaccount controller creates it just after its
///   namespace.
/// - Unless `automountServiceAccountToken` is false on the pod, or unset on
///   the pod and false on the account, the pod gets a projected volume
///   `kube-api-access-<5 random>` (a token for its account, expiring after
///   3607 s, at `token`; `ca.crt` from the ConfigMap `kube-root-ca.crt`; its
///   namespace at `namespace`) mounted read-only at [`TOKEN_MOUNT_PATH`] in
///   every container and init container that mounts nothing there.
/// - A pod without `imagePullSecrets` gets the account's.
/// - An account annotated `kubernetes.io/enforce-mountable-secrets: "true"`
///   refuses pods that use secrets (volumes, environment, image pull
///   secrets) it does not list.
///
/// Mirror pods are not changed; they may not name a service account, use
/// secrets or project tokens (403). Pod updates keep the account the
/// create set: changing `spec.serviceAccountName` is refused (422).
///
/// Reads go through an [`ObjectReader`]
/// ([`ApiServerBuilder::object_reader`](crate::server::ApiServerBuilder::object_reader)
/// for the server's own). The plugin belongs in a chain only where a
/// serviceaccount controller creates the `default` accounts, or every pod
/// naming none is refused.
///
/// ```
/// use std::sync::Arc;
/// use orchestra_core::auth::admission::{AdmissionChain, ServiceAccount, StaticObjects};
///
/// let chain = AdmissionChain::new().with(ServiceAccount::new(Arc::new(StaticObjects::new())));
/// assert_eq!(chain.names().collect::<Vec<_>>(), [ServiceAccount::NAME]);
/// ```
#[derive(Clone)]
pub struct ServiceAccount {
    objects: Arc<dyn ObjectReader>,
    default_lookups: usize,
    lookup_interval: Duration,
}

impl ServiceAccount {
    /// The plugin's name.
    pub const NAME: &'static str = "ServiceAccount";

    /// The plugin, reading ServiceAccounts from `objects`.
    pub fn new(objects: Arc<dyn ObjectReader>) -> ServiceAccount {
        ServiceAccount { objects, default_lookups: DEFAULT_LOOKUPS, lookup_interval: DEFAULT_LOOKUP_INTERVAL }
    }

    /// The projected volume source the plugin adds to pods (upstream's
    /// `TokenVolumeSource`).
    ///
    /// ```
    /// use orchestra_core::auth::admission::ServiceAccount;
    ///
    /// let source = ServiceAccount::token_volume_source();
    /// assert_eq!(source["sources"][0]["serviceAccountToken"]["expirationSeconds"], 3607);
    /// ```
    pub fn token_volume_source() -> Value {
        json!({
            "defaultMode": 0o644,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": TOKEN_EXPIRATION_SECONDS, "path": "token"}},
                {"configMap": {"name": ROOT_CA_CONFIG_MAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [
                    {"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}},
                ]}},
            ],
        })
    }

    /// The account `namespace`/`name`; `default` is looked up again a few
    /// times before it counts as missing.
    async fn account(&self, namespace: &str, name: &str) -> Result<Arc<Value>, String> {
        let lookups = if name == DEFAULT_SERVICE_ACCOUNT { self.default_lookups.max(1) } else { 1 };
        for attempt in 0..lookups {
            if attempt > 0 && !self.lookup_interval.is_zero() {
                tokio::time::sleep(self.lookup_interval).await;
            }
            match self.objects.get(SERVICE_ACCOUNTS, Some(namespace), name).await {
                Ok(Some(account)) => return Ok(account),
                Ok(None) => {}
                Err(error) => return Err(error.message),
            }
        }
        Err(format!("serviceaccount {name:?} not found"))
    }

    async fn account_or_refuse(&self, request: &AdmissionRequest<'_>, name: &str) -> Result<Arc<Value>, ApiError> {
        let namespace = request.namespace.unwrap_or_default();
        self.account(namespace, name)
            .await
            .map_err(|error| request.forbidden(format!("error looking up service account {namespace}/{name}: {error}")))
    }

    async fn admit_create(&self, request: &mut AdmissionRequest<'_>) -> Result<(), ApiError> {
        let Some(pod) = request.object.as_ref() else { return Ok(()) };
        if is_mirror_pod(pod) {
            return Ok(());
        }
        let name = match pod["spec"]["serviceAccountName"].as_str().filter(|n| !n.is_empty()) {
            Some(name) => name,
            // The deprecated field, as the API's conversion reads it.
            None => pod["spec"]["serviceAccount"].as_str().filter(|n| !n.is_empty()).unwrap_or(DEFAULT_SERVICE_ACCOUNT),
        }
        .to_owned();
        let account = self.account_or_refuse(request, &name).await?;
        let pod = request.object.as_mut().expect("checked above");
        pod["spec"]["serviceAccountName"] = name.clone().into();
        pod["spec"]["serviceAccount"] = name.into();
        if automounts(pod, &account) {
            mount_token(pod);
        }
        let pull_secrets = &account["imagePullSecrets"];
        if pod["spec"]["imagePullSecrets"].as_array().is_none_or(Vec::is_empty)
            && pull_secrets.as_array().is_some_and(|s| !s.is_empty())
        {
            pod["spec"]["imagePullSecrets"] = pull_secrets.clone();
        }
        Ok(())
    }

    async fn validate_create(&self, request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
        let Some(pod) = request.object.as_ref() else { return Ok(()) };
        if is_mirror_pod(pod) {
            return validate_mirror_pod(request, pod);
        }
        let Some(name) = pod["spec"]["serviceAccountName"].as_str().filter(|n| !n.is_empty()) else {
            let namespace = request.namespace.unwrap_or_default();
            return Err(request.forbidden(format!("no service account specified for pod {namespace}/{}", request.name)));
        };
        let account = self.account_or_refuse(request, name).await?;
        if account["metadata"]["annotations"][ENFORCE_MOUNTABLE_SECRETS_ANNOTATION] == "true" {
            limit_secret_references(&account, pod).map_err(|reason| request.forbidden(reason))?;
        }
        Ok(())
    }

    fn validate_update(request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
        let (Some(pod), Some(old)) = (request.object.as_ref(), request.old_object) else { return Ok(()) };
        let new = pod["spec"]["serviceAccountName"].as_str().unwrap_or_default();
        let old = old["spec"]["serviceAccountName"].as_str().unwrap_or_default();
        if new == old {
            return Ok(());
        }
        let target = ErrorTarget {
            group: request.resource.group.clone(),
            resource: request.resource.plural.clone(),
            kind: request.resource.kind.clone(),
            name: request.name.to_owned(),
        };
        Err(ApiError::invalid(&target, vec![FieldError::invalid("spec.serviceAccountName", new, "field is immutable")]))
    }
}

fn is_mirror_pod(pod: &Value) -> bool {
    pod["metadata"]["annotations"].get(MIRROR_ANNOTATION).is_some()
}

/// Upstream's `shouldAutomount`: the pod's setting, else the account's,
/// else yes.
fn automounts(pod: &Value, account: &Value) -> bool {
    pod["spec"]["automountServiceAccountToken"]
        .as_bool()
        .or_else(|| account["automountServiceAccountToken"].as_bool())
        .unwrap_or(true)
}

/// Mounts a new token volume at [`TOKEN_MOUNT_PATH`] in every container
/// and init container that mounts nothing there, adding the volume if
/// any does.
fn mount_token(pod: &mut Value) {
    let spec = &mut pod["spec"];
    let taken: BTreeSet<String> = spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str().map(str::to_owned))
        .collect();
    let volume_name = loop {
        let name = crate::server::generated_name(TOKEN_VOLUME_PREFIX);
        if !taken.contains(&name) {
            break name;
        }
    };
    let mut needed = false;
    for list in ["initContainers", "containers"] {
        let Some(containers) = spec[list].as_array_mut() else { continue };
        for container in containers {
            let mounts_there = container["volumeMounts"]
                .as_array()
                .is_some_and(|mounts| mounts.iter().any(|m| m["mountPath"] == TOKEN_MOUNT_PATH));
            if mounts_there {
                continue;
            }
            let mount = json!({"name": volume_name, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH});
            match container["volumeMounts"].as_array_mut() {
                Some(mounts) => mounts.push(mount),
                None => container["volumeMounts"] = json!([mount]),
            }
            needed = true;
        }
    }
    if needed {
        let volume = json!({"name": volume_name, "projected": ServiceAccount::token_volume_source()});
        match spec["volumes"].as_array_mut() {
            Some(volumes) => volumes.push(volume),
            None => spec["volumes"] = json!([volume]),
        }
    }
}

/// Every container of `pod`, init containers first, with the word
/// upstream's messages use for it.
fn containers(pod: &Value) -> impl Iterator<Item = (&'static str, &Value)> {
    let list = |field: &'static str, word: &'static str| {
        pod["spec"][field].as_array().into_iter().flatten().map(move |c| (word, c))
    };
    list("initContainers", "init container").chain(list("containers", "container"))
}

/// Upstream's mirror pod rules: a node agent's static pod uses no
/// service account and no secret.
fn validate_mirror_pod(request: &AdmissionRequest<'_>, pod: &Value) -> Result<(), ApiError> {
    if pod["spec"]["serviceAccountName"].as_str().is_some_and(|n| !n.is_empty()) {
        return Err(request.forbidden("a mirror pod may not reference service accounts"));
    }
    if !secret_names(pod).is_empty() {
        return Err(request.forbidden("a mirror pod may not reference secrets"));
    }
    let projects_tokens = volumes(pod)
        .filter_map(|v| v["projected"]["sources"].as_array())
        .flatten()
        .any(|source| !source["serviceAccountToken"].is_null());
    if projects_tokens {
        return Err(request.forbidden("a mirror pod may not use ServiceAccountToken volume projections"));
    }
    Ok(())
}

fn volumes(pod: &Value) -> impl Iterator<Item = &Value> {
    pod["spec"]["volumes"].as_array().into_iter().flatten()
}

/// The secrets a pod uses anywhere (upstream's `VisitPodSecretNames`).
fn secret_names(pod: &Value) -> BTreeSet<&str> {
    let mut names = BTreeSet::new();
    let spec = &pod["spec"];
    names.extend(spec["imagePullSecrets"].as_array().into_iter().flatten().filter_map(|s| s["name"].as_str()));
    for (_, container) in containers(pod) {
        for env in container["env"].as_array().into_iter().flatten() {
            names.extend(env["valueFrom"]["secretKeyRef"]["name"].as_str());
        }
        for from in container["envFrom"].as_array().into_iter().flatten() {
            names.extend(from["secretRef"]["name"].as_str());
        }
    }
    for volume in volumes(pod) {
        names.extend(volume["secret"]["secretName"].as_str());
        for source in volume["projected"]["sources"].as_array().into_iter().flatten() {
            names.extend(source["secret"]["name"].as_str());
        }
        for kind in ["azureFile", "cephfs", "cinder", "flexVolume", "rbd", "scaleIO", "iscsi", "storageos", "csi"] {
            names.extend(volume[kind]["secretRef"]["name"].as_str());
        }
        names.extend(volume["azureFile"]["secretName"].as_str());
    }
    names.retain(|name| !name.is_empty());
    names
}

/// Upstream's `limitSecretReferences`: secret volumes, secret environment
/// variables and image pull secrets must be among the account's.
fn limit_secret_references(account: &Value, pod: &Value) -> Result<(), String> {
    let account_name = account["metadata"]["name"].as_str().unwrap_or_default();
    let listed = |field: &str| -> BTreeSet<&str> {
        account[field].as_array().into_iter().flatten().filter_map(|s| s["name"].as_str()).collect()
    };
    let mountable = listed("secrets");
    for volume in volumes(pod) {
        if let Some(secret) = volume["secret"]["secretName"].as_str().filter(|s| !mountable.contains(s)) {
            return Err(format!(
                "volume with secret.secretName=\"{secret}\" is not allowed because service account \
                 {account_name} does not reference that secret"
            ));
        }
    }
    for (word, container) in containers(pod) {
        let container_name = container["name"].as_str().unwrap_or_default();
        for env in container["env"].as_array().into_iter().flatten() {
            let Some(secret) = env["valueFrom"]["secretKeyRef"]["name"].as_str() else { continue };
            if !mountable.contains(secret) {
                let env_name = env["name"].as_str().unwrap_or_default();
                return Err(format!(
                    "{word} {container_name} with envVar {env_name} referencing secret.secretName=\"{secret}\" \
                     is not allowed because service account {account_name} does not reference that secret"
                ));
            }
        }
    }
    let pull_secrets = listed("imagePullSecrets");
    for (i, secret) in pod["spec"]["imagePullSecrets"].as_array().into_iter().flatten().enumerate() {
        let name = secret["name"].as_str().unwrap_or_default();
        if !pull_secrets.contains(name) {
            return Err(format!(
                "imagePullSecrets[{i}].name=\"{name}\" is not allowed because service account {account_name} \
                 does not reference that imagePullSecret"
            ));
        }
    }
    Ok(())
}

#[async_trait]
impl AdmissionPlugin for ServiceAccount {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn handles(&self, operation: Operation) -> bool {
        matches!(operation, Operation::Create | Operation::Update)
    }

    async fn mutate(&self, request: &mut AdmissionRequest<'_>) -> Result<(), ApiError> {
        if !request.writes("", "pods") {
            return Ok(());
        }
        if request.operation == Operation::Create {
            return self.admit_create(request).await;
        }
        // An update that leaves the account out keeps the one the create set.
        let (Some(pod), Some(old)) = (request.object.as_mut(), request.old_object) else { return Ok(()) };
        super::keep_unset_spec_fields(pod, old, &["serviceAccountName", "serviceAccount"]);
        Ok(())
    }

    async fn validate(&self, request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
        if !request.writes("", "pods") {
            return Ok(());
        }
        match request.operation {
            Operation::Create => self.validate_create(request).await,
            _ => Self::validate_update(request),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::UserInfo;
    use crate::auth::admission::StaticObjects;
    use crate::auth::admission::testing::{admit, pods};

    /// Accounts in namespace `ns`, read without waiting between lookups.
    fn plugin(accounts: &[Value]) -> (ServiceAccount, Arc<StaticObjects>) {
        let objects = Arc::new(StaticObjects::new());
        for account in accounts {
            objects.insert(SERVICE_ACCOUNTS, account.clone());
        }
        let mut plugin = ServiceAccount::new(objects.clone());
        plugin.lookup_interval = Duration::ZERO;
        (plugin, objects)
    }

    fn account(name: &str, extra: Value) -> Value {
        let mut account = json!({"metadata": {"name": name, "namespace": "ns"}});
        if let (Some(account), Some(extra)) = (account.as_object_mut(), extra.as_object()) {
            account.extend(extra.clone());
        }
        account
    }

    fn pod(spec: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": spec})
    }

    fn create(plugin: &ServiceAccount, pod: Value) -> Result<Value, String> {
        let user = UserInfo::anonymous();
        let (admitted, _) = admit(plugin, Operation::Create, &pods(), Some("ns"), &user, Some(pod), None);
        admitted.map(Option::unwrap).map_err(|e| format!("{} {}", e.code, e.message))
    }

    /// The names of the volumes mounted at the token path, per container.
    fn token_mounts(pod: &Value) -> Vec<Option<String>> {
        containers(pod)
            .map(|(_, c)| {
                c["volumeMounts"].as_array().into_iter().flatten().find(|m| m["mountPath"] == TOKEN_MOUNT_PATH).map(
                    |m| {
                        let name = m["name"].as_str().unwrap();
                        assert!(m["readOnly"] == true || !name.starts_with(TOKEN_VOLUME_PREFIX), "{name}");
                        m["name"].as_str().unwrap().to_owned()
                    },
                )
            })
            .collect()
    }

    fn token_volumes(pod: &Value) -> Vec<&Value> {
        volumes(pod).filter(|v| v["name"].as_str().unwrap().starts_with(TOKEN_VOLUME_PREFIX)).collect()
    }

    #[test]
    fn creates_get_an_account_and_a_token_volume() {
        let containers = json!([{"name": "a"}, {"name": "b"}]);
        let own_mount =
            json!([{"name": "a", "volumeMounts": [{"name": "mine", "mountPath": TOKEN_MOUNT_PATH}]}, {"name": "b"}]);
        let forbidden = |m: &str| Err(format!(r#"403 pods "p" is forbidden: {m}"#));
        // (accounts, pod spec, expected: account name and whether each
        // container mounts the new volume, or the refusal)
        type Expected = Result<(&'static str, Vec<bool>), String>;
        #[rustfmt::skip]
        let cases: Vec<(&str, Vec<Value>, Value, Expected)> = vec![
            ("default account, two containers", vec![account("default", json!({}))],
             json!({"containers": containers}), Ok(("default", vec![true, true]))),
            ("init containers are mounted too", vec![account("default", json!({}))],
             json!({"initContainers": [{"name": "i"}], "containers": [{"name": "a"}]}), Ok(("default", vec![true, true]))),
            ("named account", vec![account("robot", json!({}))],
             json!({"serviceAccountName": "robot", "containers": containers}), Ok(("robot", vec![true, true]))),
            ("the deprecated field names it", vec![account("robot", json!({}))],
             json!({"serviceAccount": "robot", "containers": containers}), Ok(("robot", vec![true, true]))),
            ("a container mounting the path keeps its own", vec![account("default", json!({}))],
             json!({"containers": own_mount}), Ok(("default", vec![false, true]))),
            ("pod opts out", vec![account("default", json!({}))],
             json!({"automountServiceAccountToken": false, "containers": containers}), Ok(("default", vec![false, false]))),
            ("account opts out", vec![account("default", json!({"automountServiceAccountToken": false}))],
             json!({"containers": containers}), Ok(("default", vec![false, false]))),
            ("pod overrides the account", vec![account("default", json!({"automountServiceAccountToken": false}))],
             json!({"automountServiceAccountToken": true, "containers": containers}), Ok(("default", vec![true, true]))),
            ("missing default", vec![], json!({"containers": containers}),
             forbidden(r#"error looking up service account ns/default: serviceaccount "default" not found"#)),
            ("missing named account", vec![account("default", json!({}))],
             json!({"serviceAccountName": "ghost", "containers": containers}),
             forbidden(r#"error looking up service account ns/ghost: serviceaccount "ghost" not found"#)),
        ];
        for (name, accounts, spec, expected) in cases {
            let (plugin, _) = plugin(&accounts);
            let outcome = create(&plugin, pod(spec)).map(|pod| {
                let volumes = token_volumes(&pod);
                let mounts = token_mounts(&pod);
                let mounted: Vec<bool> =
                    mounts.iter().map(|m| m.as_deref().is_some_and(|m| m.starts_with(TOKEN_VOLUME_PREFIX))).collect();
                match mounted.iter().any(|m| *m) {
                    true => {
                        assert_eq!(volumes.len(), 1, "{name}");
                        let volume = volumes[0];
                        let volume_name = volume["name"].as_str().unwrap();
                        assert_eq!(volume_name.len(), TOKEN_VOLUME_PREFIX.len() + 5, "{name}");
                        assert!(mounts.iter().flatten().all(|m| m == volume_name || m == "mine"), "{name}");
                        assert_eq!(volume["projected"], ServiceAccount::token_volume_source(), "{name}");
                    }
                    false => assert!(volumes.is_empty(), "{name}"),
                }
                assert_eq!(pod["spec"]["serviceAccount"], pod["spec"]["serviceAccountName"], "{name}");
                (pod["spec"]["serviceAccountName"].as_str().unwrap().to_owned(), mounted)
            });
            let expected = expected.map(|(account, mounted)| (account.to_owned(), mounted));
            assert_eq!(outcome, expected, "{name}");
        }
    }

    #[test]
    fn the_token_volume_gets_a_free_name_and_the_sources_upstream_uses() {
        let (plugin, _) = plugin(&[account("default", json!({}))]);
        let pod =
            create(&plugin, pod(json!({"volumes": [{"name": "data", "emptyDir": {}}], "containers": [{"name": "a"}]})))
                .unwrap();
        let volumes = pod["spec"]["volumes"].as_array().unwrap();
        assert_eq!(volumes.len(), 2);
        assert_eq!(volumes[0]["name"], "data");
        let suffix = volumes[1]["name"].as_str().unwrap().strip_prefix(TOKEN_VOLUME_PREFIX).unwrap();
        assert!(suffix.bytes().all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b)), "{suffix}");
        assert_eq!(
            volumes[1]["projected"]["sources"],
            json!([
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ])
        );
        assert_eq!(volumes[1]["projected"]["defaultMode"], 420);
    }

    #[test]
    fn image_pull_secrets_come_from_the_account_when_the_pod_has_none() {
        let pulls = json!({"imagePullSecrets": [{"name": "registry"}]});
        let cases = [
            (json!({"containers": [{"name": "a"}]}), json!([{"name": "registry"}])),
            (json!({"imagePullSecrets": [{"name": "own"}], "containers": [{"name": "a"}]}), json!([{"name": "own"}])),
        ];
        for (spec, expected) in cases {
            let (plugin, _) = plugin(&[account("default", pulls.clone())]);
            let pod = create(&plugin, pod(spec.clone())).unwrap();
            assert_eq!(pod["spec"]["imagePullSecrets"], expected, "{spec}");
        }
    }

    #[test]
    fn a_default_account_created_while_the_plugin_waits_is_found() {
        let (mut plugin, objects) = plugin(&[]);
        plugin.lookup_interval = Duration::from_millis(20);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let user = UserInfo::anonymous();
        let admitted = runtime.block_on(async {
            let creator = tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                objects.insert(SERVICE_ACCOUNTS, account("default", json!({})));
            });
            let pods = pods();
            let mut request = AdmissionRequest {
                operation: Operation::Create,
                resource: &pods,
                subresource: None,
                namespace: Some("ns"),
                name: "p",
                object: Some(pod(json!({"containers": [{"name": "a"}]}))),
                old_object: None,
                user: &user,
                dry_run: false,
            };
            plugin.mutate(&mut request).await.unwrap();
            plugin.validate(&request).await.unwrap();
            creator.await.unwrap();
            request.object.unwrap()
        });
        assert_eq!(admitted["spec"]["serviceAccountName"], "default");
        assert_eq!(token_volumes(&admitted).len(), 1);
    }

    #[test]
    fn mirror_pods_are_not_changed_and_use_no_account() {
        let mirror =
            |spec: Value| json!({"metadata": {"name": "p", "annotations": {MIRROR_ANNOTATION: "hash"}}, "spec": spec});
        let forbidden = |m: &str| Err(format!(r#"403 pods "p" is forbidden: {m}"#));
        let plain = json!({"containers": [{"name": "a"}]});
        #[rustfmt::skip]
        let cases = [
            (plain.clone(), Ok(mirror(plain.clone()))),
            (json!({"serviceAccountName": "default", "containers": [{"name": "a"}]}),
             forbidden("a mirror pod may not reference service accounts")),
            (json!({"containers": [{"name": "a", "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]}),
             forbidden("a mirror pod may not reference secrets")),
            (json!({"volumes": [{"name": "v", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}], "containers": [{"name": "a"}]}),
             forbidden("a mirror pod may not use ServiceAccountToken volume projections")),
        ];
        // No account exists: a mirror pod needs none.
        let (plugin, _) = plugin(&[]);
        for (spec, expected) in cases {
            assert_eq!(create(&plugin, mirror(spec.clone())), expected, "{spec}");
        }
    }

    #[test]
    fn enforce_mountable_secrets_limits_the_secrets_pods_use() {
        let enforcing = account(
            "default",
            json!({
                "metadata": {"name": "default", "namespace": "ns", "annotations": {ENFORCE_MOUNTABLE_SECRETS_ANNOTATION: "true"}},
                "secrets": [{"name": "allowed"}],
                "imagePullSecrets": [{"name": "pull"}],
            }),
        );
        let forbidden = |m: &str| Err(format!(r#"403 pods "p" is forbidden: {m}"#));
        let env = |secret: &str| json!([{"name": "X", "valueFrom": {"secretKeyRef": {"name": secret, "key": "k"}}}]);
        #[rustfmt::skip]
        let cases: [(Value, Value, Result<(), String>); 7] = [
            (enforcing.clone(), json!({"volumes": [{"name": "v", "secret": {"secretName": "allowed"}}], "containers": [{"name": "a"}]}), Ok(())),
            (enforcing.clone(), json!({"volumes": [{"name": "v", "secret": {"secretName": "other"}}], "containers": [{"name": "a"}]}),
             forbidden(r#"volume with secret.secretName="other" is not allowed because service account default does not reference that secret"#)),
            (enforcing.clone(), json!({"containers": [{"name": "a", "env": env("allowed")}]}), Ok(())),
            (enforcing.clone(), json!({"initContainers": [{"name": "i", "env": env("other")}], "containers": [{"name": "a"}]}),
             forbidden(r#"init container i with envVar X referencing secret.secretName="other" is not allowed because service account default does not reference that secret"#)),
            (enforcing.clone(), json!({"containers": [{"name": "a", "env": env("other")}]}),
             forbidden(r#"container a with envVar X referencing secret.secretName="other" is not allowed because service account default does not reference that secret"#)),
            (enforcing.clone(), json!({"imagePullSecrets": [{"name": "other"}], "containers": [{"name": "a"}]}),
             forbidden(r#"imagePullSecrets[0].name="other" is not allowed because service account default does not reference that imagePullSecret"#)),
            // Without the annotation nothing is limited.
            (account("default", json!({})), json!({"volumes": [{"name": "v", "secret": {"secretName": "other"}}], "containers": [{"name": "a"}]}), Ok(())),
        ];
        for (account, spec, expected) in cases {
            let (plugin, _) = plugin(&[account]);
            assert_eq!(create(&plugin, pod(spec.clone())).map(|_| ()), expected, "{spec}");
        }
    }

    #[test]
    fn updates_keep_the_account() {
        let old = pod(json!({"serviceAccountName": "robot", "serviceAccount": "robot"}));
        let user = UserInfo::anonymous();
        #[rustfmt::skip]
        let cases = [
            (pod(json!({"serviceAccountName": "robot"})), Ok(Some("robot"))),
            (pod(json!({})), Ok(Some("robot"))),
            (pod(json!({"serviceAccountName": "other"})),
             Err((422, r#"Pod "p" is invalid: spec.serviceAccountName: Invalid value: "other": field is immutable"#.to_owned()))),
        ];
        let (plugin, _) = plugin(&[]);
        for (new, expected) in cases {
            let (admitted, _) =
                admit(&plugin, Operation::Update, &pods(), Some("ns"), &user, Some(new.clone()), Some(&old));
            let outcome = admitted
                .map(|pod| pod.unwrap()["spec"]["serviceAccountName"].as_str().map(str::to_owned))
                .map_err(|e| (e.code, e.message));
            assert_eq!(outcome, expected.map(|name| name.map(str::to_owned)), "{new}");
        }
    }
}
