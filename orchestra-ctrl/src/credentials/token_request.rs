//! Controller credentials for a controller manager that runs as its own
//! process: tokens of the controllers' service accounts, asked for with the
//! TokenRequest API (`serviceaccounts/<name>/token`) under the manager's own
//! identity and renewed before they expire, as upstream's
//! `SAControllerClientBuilder`.

use std::future::Future;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use http::HeaderValue;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, ObjectMeta, PostParams};
use parking_lot::RwLock;

use super::{ClientFuture, ControllerCredentials, NAMESPACE};

/// How long the tokens asked for live by default (upstream's choice: one
/// hour, renewed at 80%).
pub const DEFAULT_EXPIRATION: Duration = Duration::from_secs(3600);

/// How long a failed renewal waits before the next attempt.
const RETRY: Duration = Duration::from_secs(10);

/// Gives each controller a client that authenticates with a token of its
/// service account in `kube-system`, created (with the account, if missing)
/// by the manager's own client.
///
/// The manager's identity needs `get` and `create` on `serviceaccounts` and
/// `create` on `serviceaccounts/token` in `kube-system`, which the default
/// `system:kube-controller-manager` role grants.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use orchestra_ctrl::controllers::ControllerManagerConfig;
/// use orchestra_ctrl::credentials::TokenRequestCredentials;
///
/// let config = orchestra_core::client::config_from_kubeconfig("controller-manager.kubeconfig").await?;
/// let manager = kube::Client::try_from(config.clone())?;
/// let credentials = TokenRequestCredentials::new(manager, config);
/// let controllers = ControllerManagerConfig::default().with_credentials(Arc::new(credentials));
/// # let _ = controllers;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct TokenRequestCredentials {
    manager: kube::Client,
    /// The cluster's address and CA, without the manager's own credentials.
    cluster: kube::Config,
    expiration: Duration,
}

impl TokenRequestCredentials {
    /// Credentials asked for with `manager`, for clients of the cluster
    /// `config` describes. The credentials in `config` (client certificate,
    /// token, exec plugin) are not used by the controllers' clients.
    pub fn new(manager: kube::Client, mut config: kube::Config) -> Self {
        config.auth_info = Default::default();
        TokenRequestCredentials { manager, cluster: config, expiration: DEFAULT_EXPIRATION }
    }

    /// Sets how long the tokens asked for live (at least 10 minutes, as the
    /// API server's minimum).
    pub fn with_expiration(mut self, expiration: Duration) -> Self {
        self.expiration = expiration.max(Duration::from_secs(600));
        self
    }
}

impl ControllerCredentials for TokenRequestCredentials {
    fn client(&self, service_account: &str) -> ClientFuture {
        let this = self.clone();
        let account = service_account.to_owned();
        Box::pin(async move {
            let (token, lifetime) = this.token(&account).await?;
            let header = Arc::new(RwLock::new(token));
            let issuer = this.clone();
            let renewed = account.clone();
            let issue = move || {
                let (issuer, account) = (issuer.clone(), renewed.clone());
                async move { issuer.token(&account).await }
            };
            tokio::spawn(renew(Arc::downgrade(&header), issue, account, lifetime, RETRY));
            let inner = kube::Client::try_from(this.cluster.clone())?;
            let namespace = this.cluster.default_namespace.clone();
            Ok(kube::Client::new(BearerService { inner, token: header }, namespace))
        })
    }
}

impl TokenRequestCredentials {
    /// A new token of `account` (created if missing) as an `Authorization`
    /// header, and how long it lives.
    async fn token(&self, account: &str) -> Result<(HeaderValue, Duration), kube::Error> {
        let accounts: Api<ServiceAccount> = Api::namespaced(self.manager.clone(), NAMESPACE);
        if accounts.get_opt(account).await?.is_none() {
            let object = ServiceAccount {
                metadata: ObjectMeta { name: Some(account.to_owned()), ..Default::default() },
                ..Default::default()
            };
            match accounts.create(&PostParams::default(), &object).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(error) => return Err(error),
            }
        }
        let request = TokenRequest {
            spec: TokenRequestSpec { expiration_seconds: Some(self.expiration.as_secs() as i64), ..Default::default() },
            ..Default::default()
        };
        let issued = accounts.create_token_request(account, &PostParams::default(), &request).await?;
        let status = issued
            .status
            .ok_or_else(|| kube::Error::Service("the API server answered a TokenRequest without a token".into()))?;
        let header = HeaderValue::try_from(format!("Bearer {}", status.token))
            .map_err(|_| kube::Error::Service("the API server returned a token that is not a header value".into()))?;
        let left = status.expiration_timestamp.0.as_second() - k8s_openapi::jiff::Timestamp::now().as_second();
        Ok((header, Duration::from_secs(left.max(1).unsigned_abs())))
    }
}

/// Replaces the token in `cell` with one from `issue` at 80% of its
/// lifetime, for as long as a client holds the cell; a failed attempt is
/// retried every `retry` ([`RETRY`]) until one succeeds (the token in use stays until
/// then, even past its expiry: the API server's 401s say why).
async fn renew<Issue, Issued>(
    cell: Weak<RwLock<HeaderValue>>,
    mut issue: Issue,
    account: String,
    lifetime: Duration,
    retry: Duration,
) where
    Issue: FnMut() -> Issued,
    Issued: Future<Output = Result<(HeaderValue, Duration), kube::Error>>,
{
    let mut wait = lifetime.mul_f64(0.8);
    loop {
        tokio::time::sleep(wait).await;
        if cell.strong_count() == 0 {
            return;
        }
        match issue().await {
            Ok((token, lifetime)) => {
                let Some(cell) = cell.upgrade() else { return };
                *cell.write() = token;
                wait = lifetime.mul_f64(0.8);
            }
            Err(error) => {
                tracing::warn!(%error, account, "renewing a controller's service account token failed");
                wait = retry;
            }
        }
    }
}

/// Sends each request through `inner` (which knows the cluster's address
/// and CA) with the current token.
#[derive(Clone)]
struct BearerService {
    inner: kube::Client,
    token: Arc<RwLock<HeaderValue>>,
}

impl tower::Service<http::Request<kube::client::Body>> for BearerService {
    type Response = http::Response<kube::client::Body>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<Self::Response, kube::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), kube::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: http::Request<kube::client::Body>) -> Self::Future {
        let mut token = self.token.read().clone();
        token.set_sensitive(true);
        request.headers_mut().insert(http::header::AUTHORIZATION, token);
        let inner = self.inner.clone();
        Box::pin(async move { inner.send(request).await })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use super::*;

    /// What the issuer answers at each call: a token and its lifetime in
    /// milliseconds, or a failure.
    type Answer = Result<(&'static str, u64), &'static str>;

    #[tokio::test]
    async fn tokens_are_renewed_at_80_percent_and_failures_retried() {
        // (the first token's lifetime, the issuer's answers in order, when
        // each call is due (ms), the token held at the end); failures are
        // retried every 100 ms.
        type Case = (u64, Vec<Answer>, Vec<u64>, &'static str);
        let cases: Vec<Case> = vec![
            // Each renewal at 80 % of the lifetime of the token it replaces.
            (1000, vec![Ok(("b", 500)), Ok(("c", 1000))], vec![800, 1200], "c"),
            // A failed renewal keeps the token in use and is retried.
            (1000, vec![Err("down"), Err("down"), Ok(("b", 1000))], vec![800, 900, 1000], "b"),
        ];
        for (i, (lifetime, answers, due, held)) in cases.into_iter().enumerate() {
            let cell = Arc::new(RwLock::new(HeaderValue::from_static("a")));
            let answers = Arc::new(Mutex::new(answers.into_iter().collect::<VecDeque<_>>()));
            let calls = Arc::new(Mutex::new(Vec::new()));
            let start = tokio::time::Instant::now();
            let issue = {
                let (answers, calls) = (answers.clone(), calls.clone());
                move || {
                    calls.lock().unwrap().push(start.elapsed());
                    let answer = answers.lock().unwrap().pop_front().expect("an answer for every call");
                    futures::future::ready(match answer {
                        Ok((token, ms)) => Ok((HeaderValue::from_static(token), Duration::from_millis(ms))),
                        Err(reason) => Err(kube::Error::Service(reason.into())),
                    })
                }
            };
            let lifetime = Duration::from_millis(lifetime);
            let task =
                tokio::spawn(renew(Arc::downgrade(&cell), issue, "sa".into(), lifetime, Duration::from_millis(100)));
            let deadline = start + Duration::from_secs(10);
            while calls.lock().unwrap().len() < due.len() && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let seen = calls.lock().unwrap().clone();
            assert_eq!(seen.len(), due.len(), "case {i}: calls at {seen:?}");
            // Sleeps never end early: each call came at or after its due time.
            for (at, due) in seen.iter().zip(&due) {
                assert!(*at >= Duration::from_millis(*due), "case {i}: calls at {seen:?}, due {due} ms");
            }
            assert_eq!(*cell.read(), held, "case {i}");
            // Once no client holds the token, the task ends at its next wake-up.
            drop(cell);
            answers.lock().unwrap().push_back(Ok(("unused", 100)));
            tokio::time::timeout(Duration::from_secs(5), task).await.expect("the renewal task ends").unwrap();
            assert_eq!(calls.lock().unwrap().len(), due.len(), "case {i}: no call for a dropped token");
        }
    }
}
