//! The token controller (upstream's `serviceaccount-token`): fills every
//! Secret of type `kubernetes.io/service-account-token` with a legacy token
//! for the service account its `kubernetes.io/service-account.name`
//! annotation names, with the cluster's CA certificate and the namespace,
//! and deletes such Secrets once their service account is gone (or was
//! created again under another UID). As on Kubernetes since 1.24, it does
//! not create token Secrets by itself: users create them empty.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::{Api, Client};
use orchestra_core::tokens::TokenSigner;

use crate::controller::Controller;
use crate::informer::{Informer, ObjectKey, SharedInformerFactory};
use crate::{Action, Error};

/// Name of the controller.
pub const NAME: &str = "serviceaccount-token-controller";
/// The Secret type this controller fills.
pub const SECRET_TYPE: &str = "kubernetes.io/service-account-token";
/// Annotation naming the service account of a token Secret.
pub const ACCOUNT_NAME: &str = "kubernetes.io/service-account.name";
/// Annotation recording its UID (set by this controller).
pub const ACCOUNT_UID: &str = "kubernetes.io/service-account.uid";

/// What the controller signs with and hands out.
///
/// Built with [`new`](Self::new) (the signer is required) and the `with_*`
/// setters, so that a new setting is not a breaking change:
///
/// ```
/// use std::sync::Arc;
/// use orchestra_core::tokens::TokenSigner;
/// use orchestra_ctrl::controllers::serviceaccount_token::TokenConfig;
///
/// let signer = Arc::new(TokenSigner::generate("https://kubernetes.default.svc").unwrap());
/// let config = TokenConfig::new(signer).with_root_ca("-----BEGIN CERTIFICATE-----\n");
/// assert!(config.root_ca.is_some());
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TokenConfig {
    /// The key (the API server's service account signing key).
    pub signer: Arc<TokenSigner>,
    /// The cluster's CA certificate (PEM) for `ca.crt`, if any.
    pub root_ca: Option<String>,
}

impl TokenConfig {
    /// Signs with `signer` and hands out no `ca.crt`.
    pub fn new(signer: Arc<TokenSigner>) -> Self {
        Self { signer, root_ca: None }
    }

    /// Sets [`root_ca`](Self::root_ca), the PEM handed out as `ca.crt`.
    pub fn with_root_ca(mut self, pem: impl Into<String>) -> Self {
        self.root_ca = Some(pem.into());
        self
    }
}

/// What the reconciler works with.
pub struct Context {
    /// Client for writes.
    pub client: Client,
    /// The shared ServiceAccount cache.
    pub accounts: Arc<Informer<ServiceAccount>>,
    /// Key and CA.
    pub config: TokenConfig,
}

/// What a token Secret needs, given its service account (`None`: gone).
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Not a token Secret, being deleted, or complete.
    Nothing,
    /// Its service account is gone or was recreated: delete it.
    Delete,
    /// Write the token, `ca.crt`, `namespace` and the account's UID.
    Fill,
}

/// Decides what `secret` needs (upstream's `syncSecret`).
pub fn plan(secret: &Secret, account: Option<&ServiceAccount>, with_ca: bool) -> Plan {
    if secret.type_.as_deref() != Some(SECRET_TYPE) || secret.metadata.deletion_timestamp.is_some() {
        return Plan::Nothing;
    }
    let annotations = secret.metadata.annotations.as_ref();
    let annotation = |k: &str| annotations.and_then(|a| a.get(k)).filter(|v| !v.is_empty());
    if annotation(ACCOUNT_NAME).is_none() {
        return Plan::Nothing;
    }
    let Some(account) = account else { return Plan::Delete };
    let uid = account.metadata.uid.as_deref().unwrap_or("");
    if account.metadata.deletion_timestamp.is_some() || annotation(ACCOUNT_UID).is_some_and(|u| u != uid) {
        return Plan::Delete;
    }
    let data = secret.data.as_ref();
    let has = |k: &str| data.and_then(|d| d.get(k)).is_some_and(|v| !v.0.is_empty());
    if has("token") && has("namespace") && (has("ca.crt") || !with_ca) && annotation(ACCOUNT_UID).is_some() {
        Plan::Nothing
    } else {
        Plan::Fill
    }
}

/// `secret` with its token, CA, namespace and account UID written in.
pub fn filled(secret: &Secret, account: &ServiceAccount, config: &TokenConfig) -> Secret {
    let namespace = secret.metadata.namespace.clone().unwrap_or_default();
    let account_name = account.metadata.name.clone().unwrap_or_default();
    let uid = account.metadata.uid.clone().unwrap_or_default();
    let mut next = secret.clone();
    let data = next.data.get_or_insert_with(BTreeMap::new);
    let has_token = data.get("token").is_some_and(|v| !v.0.is_empty());
    if !has_token {
        let name = secret.metadata.name.as_deref().unwrap_or("");
        let token = config.signer.sign(&config.signer.legacy_claims(&namespace, &account_name, &uid, name));
        data.insert("token".into(), ByteString(token.into_bytes()));
    }
    data.insert("namespace".into(), ByteString(namespace.into_bytes()));
    if let Some(ca) = &config.root_ca {
        data.insert("ca.crt".into(), ByteString(ca.clone().into_bytes()));
    }
    next.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(ACCOUNT_UID.into(), uid);
    next
}

/// The service account `namespace/name`: from the cache, else from the API
/// (a Secret created right after its account may be seen first).
async fn account(ctx: &Context, namespace: &str, name: &str) -> Result<Option<ServiceAccount>, Error> {
    if let Some(found) = ctx.accounts.get(&ObjectKey::new(namespace, name)) {
        return Ok(Some((*found).clone()));
    }
    Ok(Api::<ServiceAccount>::namespaced(ctx.client.clone(), namespace).get_opt(name).await?)
}

/// Brings one token Secret in line with its service account.
pub async fn reconcile(secret: Arc<Secret>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = secret.metadata.namespace.clone().unwrap_or_default();
    let name = secret.metadata.name.clone().unwrap_or_default();
    let account_name =
        secret.metadata.annotations.as_ref().and_then(|a| a.get(ACCOUNT_NAME)).cloned().unwrap_or_default();
    // Not a token Secret with an account to look up (another type, being
    // deleted, no annotation): nothing to fetch or do.
    if plan(&secret, None, false) == Plan::Nothing {
        return Ok(Action::await_change());
    }
    let account = account(&ctx, &namespace, &account_name).await?;
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    match plan(&secret, account.as_ref(), ctx.config.root_ca.is_some()) {
        Plan::Nothing => {}
        Plan::Delete => {
            let params = DeleteParams {
                preconditions: Some(Preconditions { uid: secret.metadata.uid.clone(), resource_version: None }),
                ..Default::default()
            };
            match api.delete(&name, &params).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Plan::Fill => {
            let account = account.expect("a fill has an account");
            // A replace at the cached resourceVersion: a conflict means a
            // newer version is on its way, which is reconciled in turn.
            match api.replace(&name, &PostParams::default(), &filled(&secret, &account, &ctx.config)).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(Action::await_change())
}

/// Runs the controller until `shutdown`.
pub async fn run(factory: SharedInformerFactory, config: TokenConfig, shutdown: impl Future<Output = ()> + Send) {
    let secrets = factory.informer::<Secret>();
    let ctx =
        Arc::new(Context { client: factory.client().clone(), accounts: factory.informer::<ServiceAccount>(), config });
    Controller::<Secret>::for_(&factory)
        .watches::<ServiceAccount>(move |sa| {
            // A changed or deleted account: its token Secrets.
            let namespace = sa.metadata.namespace.clone().unwrap_or_default();
            let name = sa.metadata.name.as_deref().unwrap_or("");
            secrets
                .by_index("namespace", &namespace)
                .into_iter()
                .filter(|s| {
                    s.metadata.annotations.as_ref().and_then(|a| a.get(ACCOUNT_NAME)).is_some_and(|n| n == name)
                })
                .map(|s| ObjectKey::new(&namespace, s.metadata.name.as_deref().unwrap_or("")))
                .collect()
        })
        .name(NAME)
        .concurrency(2)
        .run(reconcile, ctx, shutdown)
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use orchestra_core::tokens::{DEFAULT_ISSUER, VerifiedToken};

    fn secret(annotations: &[(&str, &str)], data: &[(&str, &str)]) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("robot-token".into()),
                namespace: Some("ci".into()),
                annotations: Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..Default::default()
            },
            type_: Some(SECRET_TYPE.into()),
            data: Some(data.iter().map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec()))).collect()),
            ..Default::default()
        }
    }

    fn account(uid: &str) -> ServiceAccount {
        ServiceAccount {
            metadata: ObjectMeta {
                name: Some("robot".into()),
                namespace: Some("ci".into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn plans_follow_the_secret_and_its_account() {
        let named = [(ACCOUNT_NAME, "robot")];
        let complete = [("token", "t"), ("namespace", "ci"), ("ca.crt", "pem")];
        let with_uid = [(ACCOUNT_NAME, "robot"), (ACCOUNT_UID, "u-1")];
        let cases: Vec<(&str, Secret, Option<ServiceAccount>, bool, Plan)> = vec![
            ("empty token secret", secret(&named, &[]), Some(account("u-1")), true, Plan::Fill),
            ("no account annotation", secret(&[], &[]), Some(account("u-1")), true, Plan::Nothing),
            ("account gone", secret(&named, &[]), None, true, Plan::Delete),
            ("account recreated", secret(&with_uid, &complete), Some(account("u-2")), true, Plan::Delete),
            ("complete", secret(&with_uid, &complete), Some(account("u-1")), true, Plan::Nothing),
            ("CA missing", secret(&with_uid, &complete[..2]), Some(account("u-1")), true, Plan::Fill),
            ("no CA configured", secret(&with_uid, &complete[..2]), Some(account("u-1")), false, Plan::Nothing),
            ("UID not recorded yet", secret(&named, &complete), Some(account("u-1")), true, Plan::Fill),
            ("other type", Secret { type_: Some("Opaque".into()), ..secret(&named, &[]) }, None, true, Plan::Nothing),
        ];
        for (name, s, a, with_ca, want) in cases {
            assert_eq!(plan(&s, a.as_ref(), with_ca), want, "{name}");
        }
        let mut deleting = secret(&named, &[]);
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()));
        assert_eq!(plan(&deleting, None, true), Plan::Nothing);
    }

    #[test]
    fn filled_secrets_hold_a_legacy_token_of_the_account() {
        let signer = Arc::new(TokenSigner::generate(DEFAULT_ISSUER).unwrap());
        let config = TokenConfig::new(signer.clone()).with_root_ca("PEM");
        let out = filled(&secret(&[(ACCOUNT_NAME, "robot")], &[]), &account("u-1"), &config);
        let data = out.data.as_ref().unwrap();
        assert_eq!(data["namespace"].0, b"ci");
        assert_eq!(data["ca.crt"].0, b"PEM");
        assert_eq!(out.metadata.annotations.as_ref().unwrap()[ACCOUNT_UID], "u-1");
        let token = String::from_utf8(data["token"].0.clone()).unwrap();
        let Some(VerifiedToken::Legacy(claims)) = signer.verify(&token).unwrap() else { panic!("a legacy token") };
        assert_eq!(
            (claims.sub.as_str(), claims.secret_name.as_str(), claims.service_account_uid.as_str()),
            ("system:serviceaccount:ci:robot", "robot-token", "u-1")
        );
        // An existing token is kept.
        let again = filled(&out, &account("u-1"), &config);
        assert_eq!(again.data.unwrap()["token"].0, token.as_bytes());
    }

    #[tokio::test]
    async fn one_reconcile_fills_or_deletes() {
        use crate::testing::FakeCluster;
        let signer = Arc::new(TokenSigner::generate(DEFAULT_ISSUER).unwrap());
        let config = TokenConfig::new(signer.clone()).with_root_ca("PEM");
        let named = [(ACCOUNT_NAME, "robot")];
        let rows: [(&str, Option<ServiceAccount>, Secret, &[&str]); 4] = [
            ("filled for its account", Some(account("u-1")), secret(&named, &[]), &["update secrets ci/robot-token"]),
            ("deleted without its account", None, secret(&named, &[]), &["delete secrets ci/robot-token"]),
            (
                "deleted when its account was recreated",
                Some(account("u-2")),
                secret(
                    &[(ACCOUNT_NAME, "robot"), (ACCOUNT_UID, "u-1")],
                    &[("token", "t"), ("namespace", "ci"), ("ca.crt", "PEM")],
                ),
                &["delete secrets ci/robot-token"],
            ),
            (
                "another Secret is left alone",
                Some(account("u-1")),
                Secret { type_: Some("Opaque".into()), ..secret(&named, &[]) },
                &[],
            ),
        ];
        for (name, account, secret, writes) in rows {
            let fake = FakeCluster::builder().objects(&account).object(&secret).build().await;
            let ctx = Arc::new(Context {
                client: fake.client(),
                accounts: fake.informer::<ServiceAccount>().await,
                config: config.clone(),
            });
            let stored: Secret = fake.get("ci", "robot-token").await.unwrap();
            assert_eq!(reconcile(Arc::new(stored), ctx).await.unwrap(), Action::await_change(), "{name}");
            assert_eq!(fake.writes(), writes, "{name}");
            let after: Option<Secret> = fake.get("ci", "robot-token").await;
            if writes.first().is_some_and(|w| w.starts_with("delete")) {
                assert!(after.is_none(), "{name}");
                // Guarded by the Secret's uid.
                let delete = fake.actions().into_iter().find(|a| a.verb == "delete").unwrap();
                assert_eq!(delete.body.unwrap()["preconditions"]["uid"], "uid-robot-token", "{name}");
            } else if !writes.is_empty() {
                let data = after.unwrap().data.unwrap();
                let token = String::from_utf8(data["token"].0.clone()).unwrap();
                assert!(matches!(signer.verify(&token), Ok(Some(VerifiedToken::Legacy(_)))), "{name}");
                assert_eq!(data["ca.crt"].0, b"PEM", "{name}");
            }
        }
    }
}
