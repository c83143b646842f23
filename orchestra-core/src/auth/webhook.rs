//! Where a webhook authenticator or authorizer sends its reviews: upstream's
//! webhook configuration file, a kubeconfig whose cluster is the remote
//! service and whose user is the API server.

use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use serde_json::Value;

use super::https::HttpsClient;
use crate::tls::pki::Credential;

/// The API version of the reviews a webhook is sent and answers
/// (kube-apiserver's `--authentication-token-webhook-version` and
/// `--authorization-webhook-version`): `v1` or `v1beta1`.
///
/// ```
/// use orchestra_core::auth::ReviewVersion;
///
/// assert_eq!("v1beta1".parse::<ReviewVersion>(), Ok(ReviewVersion::V1Beta1));
/// assert_eq!(ReviewVersion::V1.api_version("authorization.k8s.io"), "authorization.k8s.io/v1");
/// assert!("v2".parse::<ReviewVersion>().is_err());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReviewVersion {
    /// `v1`.
    #[default]
    V1,
    /// `v1beta1`: the same reviews, except that a SubjectAccessReview's
    /// groups are `spec.group`.
    V1Beta1,
}

impl ReviewVersion {
    /// `<group>/v1` or `<group>/v1beta1`.
    pub fn api_version(self, group: &str) -> String {
        match self {
            ReviewVersion::V1 => format!("{group}/v1"),
            ReviewVersion::V1Beta1 => format!("{group}/v1beta1"),
        }
    }
}

impl std::str::FromStr for ReviewVersion {
    type Err = String;

    fn from_str(version: &str) -> Result<ReviewVersion, String> {
        match version {
            "v1" => Ok(ReviewVersion::V1),
            "v1beta1" => Ok(ReviewVersion::V1Beta1),
            other => Err(format!("unsupported webhook review version {other:?}: v1 or v1beta1")),
        }
    }
}

/// A webhook configuration that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("webhook configuration: {0}")]
pub struct WebhookConfigError(pub String);

/// The remote service of a webhook: its HTTPS URL, the CAs its certificate
/// is checked against, and the API server's credential towards it.
///
/// Read from upstream's webhook configuration file (a kubeconfig; the
/// current context, else the first cluster and user):
///
/// ```
/// use orchestra_core::auth::WebhookConfig;
///
/// let kubeconfig = r#"
/// apiVersion: v1
/// kind: Config
/// clusters:
/// - name: authn
///   cluster:
///     server: https://authn.example.com/authenticate
/// users:
/// - name: apiserver
///   user:
///     token: secret
/// contexts:
/// - name: webhook
///   context: {cluster: authn, user: apiserver}
/// current-context: webhook
/// "#;
/// let config = WebhookConfig::from_kubeconfig(kubeconfig, None).unwrap();
/// assert_eq!(config.server, "https://authn.example.com/authenticate");
/// assert_eq!(config.token.as_deref(), Some("secret"));
/// assert!(WebhookConfig::from_kubeconfig("clusters: []", None).is_err());
/// ```
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    /// The URL reviews are posted to (`https`).
    pub server: String,
    /// CAs of the service's certificate (PEM); `None`, the system's.
    pub ca_pem: Option<String>,
    /// The client certificate presented.
    pub client_certificate: Option<Credential>,
    /// A bearer token sent.
    pub token: Option<String>,
}

impl WebhookConfig {
    /// A service at `server`, checked against the system's CAs.
    pub fn new(server: impl Into<String>) -> WebhookConfig {
        WebhookConfig { server: server.into(), ca_pem: None, client_certificate: None, token: None }
    }

    /// Reads a webhook configuration file; relative paths in it are
    /// relative to its directory.
    pub fn from_kubeconfig_file(path: impl AsRef<Path>) -> Result<WebhookConfig, WebhookConfigError> {
        let path = path.as_ref();
        let contents = std::fs::read_to_string(path)
            .map_err(|e| WebhookConfigError(format!("cannot read {}: {e}", path.display())))?;
        WebhookConfig::from_kubeconfig(&contents, path.parent())
    }

    /// Parses a webhook configuration; relative file paths are resolved
    /// against `base_dir` (the working directory when `None`).
    pub fn from_kubeconfig(contents: &str, base_dir: Option<&Path>) -> Result<WebhookConfig, WebhookConfigError> {
        let error = |message: String| WebhookConfigError(message);
        let config: Value = serde_yaml::from_str(contents).map_err(|e| error(format!("not a kubeconfig: {e}")))?;
        let named = |list: &str, name: Option<&str>, field: &str| -> Result<Value, WebhookConfigError> {
            let entries = config.get(list).and_then(Value::as_array).cloned().unwrap_or_default();
            let entry = match name {
                Some(name) => entries.into_iter().find(|e| e.get("name").and_then(Value::as_str) == Some(name)),
                None => entries.into_iter().next(),
            };
            match entry {
                Some(entry) => Ok(entry.get(field).cloned().unwrap_or(Value::Null)),
                None if name.is_some() => Err(error(format!("no entry {:?} in {list}", name.unwrap_or_default()))),
                None => Err(error(format!("no {list} given"))),
            }
        };
        let context = match config.get("current-context").and_then(Value::as_str).filter(|c| !c.is_empty()) {
            Some(current) => named("contexts", Some(current), "context")?,
            None => Value::Null,
        };
        let cluster_name = context.get("cluster").and_then(Value::as_str);
        let user_name = context.get("user").and_then(Value::as_str);
        let cluster = named("clusters", cluster_name, "cluster")?;
        let user = match named("users", user_name, "user") {
            Ok(user) => user,
            Err(_) if user_name.is_none() => Value::Null,
            Err(e) => return Err(e),
        };
        let server = cluster
            .get("server")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| error("the cluster has no server".into()))?;
        if !server.starts_with("https://") {
            return Err(error(format!("the server {server:?} must be an https URL")));
        }
        if cluster.get("insecure-skip-tls-verify").and_then(Value::as_bool) == Some(true) {
            return Err(error("insecure-skip-tls-verify is not supported: give certificate-authority".into()));
        }
        let ca_pem = read_pem(&cluster, "certificate-authority-data", "certificate-authority", base_dir)?;
        let (client_certificate, token) = user_credentials(&user, base_dir)?;
        let config = WebhookConfig { server: server.to_owned(), ca_pem, client_certificate, token };
        config.client()?;
        Ok(config)
    }

    /// The HTTPS client this configuration makes.
    pub(crate) fn client(&self) -> Result<HttpsClient, WebhookConfigError> {
        HttpsClient::new(self.ca_pem.as_deref(), self.client_certificate.as_ref()).map_err(WebhookConfigError)
    }

    /// Posts `review` to the service, retrying transport errors and 5xx
    /// answers with upstream's backoff (500ms, ×1.5, 3 attempts); the
    /// answer, which must be a 2xx with a JSON body.
    pub(crate) async fn post(&self, client: &HttpsClient, review: &Value) -> Result<Value, String> {
        let mut delay = Duration::from_millis(500);
        let mut attempt = 1;
        loop {
            let outcome = client.post_json(&self.server, review, self.token.as_deref()).await;
            let retriable = match &outcome {
                Err(_) => true,
                Ok((status, _)) => status.is_server_error() || *status == http::StatusCode::TOO_MANY_REQUESTS,
            };
            if !retriable || attempt == 3 {
                return match outcome? {
                    (status, answer) if status.is_success() && answer.is_object() => Ok(answer),
                    (status, _) if status.is_success() => {
                        Err(format!("{}: the answer is not a JSON object", self.server))
                    }
                    (status, answer) => Err(format!("{}: {status}: {}", self.server, answer)),
                };
            }
            tokio::time::sleep(delay).await;
            delay = delay.mul_f32(1.5);
            attempt += 1;
        }
    }
}

/// A kubeconfig entry's PEM text: inline (`<data>`, base64) or from the
/// file `<file>` names, relative to `base_dir`.
fn read_pem(
    entry: &Value,
    data: &str,
    file: &str,
    base_dir: Option<&Path>,
) -> Result<Option<String>, WebhookConfigError> {
    let error = |message: String| WebhookConfigError(message);
    if let Some(encoded) = entry.get(data).and_then(Value::as_str) {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|e| error(format!("{data} is not base64: {e}")))?;
        return String::from_utf8(bytes).map(Some).map_err(|_| error(format!("{data} is not PEM text")));
    }
    let Some(path) = entry.get(file).and_then(Value::as_str) else { return Ok(None) };
    let path = match base_dir {
        Some(dir) if Path::new(path).is_relative() => dir.join(path),
        _ => Path::new(path).to_path_buf(),
    };
    std::fs::read_to_string(&path).map(Some).map_err(|e| error(format!("{file}: cannot read {}: {e}", path.display())))
}

/// A kubeconfig user's client certificate and bearer token.
pub(crate) fn user_credentials(
    user: &Value,
    base_dir: Option<&Path>,
) -> Result<(Option<Credential>, Option<String>), WebhookConfigError> {
    let cert = read_pem(user, "client-certificate-data", "client-certificate", base_dir)?;
    let key = read_pem(user, "client-key-data", "client-key", base_dir)?;
    let certificate = match (cert, key) {
        (Some(cert_pem), Some(key_pem)) => Some(Credential { cert_pem, key_pem }),
        (None, None) => None,
        _ => return Err(WebhookConfigError("the user needs both a client certificate and a client key".into())),
    };
    let token = match user.get("token").and_then(Value::as_str) {
        Some(token) => Some(token.to_owned()),
        None => read_pem(user, "", "tokenFile", base_dir)?.map(|t| t.trim().to_owned()),
    };
    Ok((certificate, token))
}

/// A time-bounded cache of webhook answers, keyed by the SHA-256 of what
/// was asked (so that tokens are never kept in memory in the clear).
#[derive(Debug)]
pub(crate) struct AnswerCache<T> {
    entries: std::sync::Mutex<std::collections::HashMap<[u8; 32], (std::time::Instant, T)>>,
}

impl<T> Default for AnswerCache<T> {
    fn default() -> AnswerCache<T> {
        AnswerCache { entries: Default::default() }
    }
}

/// Entries beyond which expired ones are dropped on insert (and all, if
/// none has expired).
const CACHE_LIMIT: usize = 8192;

impl<T: Clone> AnswerCache<T> {
    pub(crate) fn key(input: &[u8]) -> [u8; 32] {
        let digest = ring::digest::digest(&ring::digest::SHA256, input);
        digest.as_ref().try_into().expect("SHA-256 is 32 bytes")
    }

    /// The answer stored for `key`, if it has not expired.
    pub(crate) fn get(&self, key: &[u8; 32]) -> Option<T> {
        let entries = self.entries.lock().expect("cache lock");
        entries.get(key).filter(|(expires, _)| *expires > std::time::Instant::now()).map(|(_, v)| v.clone())
    }

    /// Stores `value` for `ttl` (nothing for a zero TTL).
    pub(crate) fn put(&self, key: [u8; 32], value: T, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let now = std::time::Instant::now();
        let mut entries = self.entries.lock().expect("cache lock");
        if entries.len() >= CACHE_LIMIT {
            entries.retain(|_, (expires, _)| *expires > now);
            if entries.len() >= CACHE_LIMIT {
                entries.clear();
            }
        }
        entries.insert(key, (now + ttl, value));
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::json;

    use super::*;
    use crate::tls::pki::Pki;

    /// A webhook service on loopback over HTTPS that requires the client
    /// certificate of its CA and answers each review with `answer`.
    pub(crate) struct TestWebhook {
        pub(crate) config: WebhookConfig,
        /// The requests received.
        pub(crate) calls: Arc<AtomicUsize>,
        /// The last review received.
        pub(crate) last: Arc<std::sync::Mutex<Value>>,
        _dir: tempfile::TempDir,
    }

    impl TestWebhook {
        pub(crate) async fn start(answer: impl Fn(&Value) -> (u16, Value) + Send + Sync + 'static) -> TestWebhook {
            let dir = tempfile::tempdir().unwrap();
            let pki = Pki::load_or_create(dir.path(), &[]).unwrap();
            let serving = pki.issue_serving("webhook", &["127.0.0.1".to_owned()]).unwrap();
            let tls = crate::tls::server_config(&serving, pki.ca_pem(), crate::tls::ClientAuth::Required).unwrap();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let calls = Arc::new(AtomicUsize::new(0));
            let last = Arc::new(std::sync::Mutex::new(Value::Null));
            let (seen, record) = (calls.clone(), last.clone());
            let answer = Arc::new(answer);
            let router = axum::Router::new().route(
                "/review",
                axum::routing::post(move |axum::Json(review): axum::Json<Value>| {
                    let answer = answer.clone();
                    seen.fetch_add(1, Ordering::SeqCst);
                    *record.lock().unwrap() = review.clone();
                    async move {
                        let (code, body) = answer(&review);
                        (http::StatusCode::from_u16(code).unwrap(), axum::Json(body))
                    }
                }),
            );
            let options = crate::tls::ListenOptions::default().with_tls(tls);
            tokio::spawn(crate::tls::serve(listener, router, options, std::future::pending()));
            let client = pki.issue_client("kube-apiserver", None).unwrap();
            let config = WebhookConfig {
                server: format!("https://127.0.0.1:{port}/review"),
                ca_pem: Some(pki.ca_pem().to_owned()),
                client_certificate: Some(client),
                token: None,
            };
            TestWebhook { config, calls, last, _dir: dir }
        }
    }

    #[test]
    fn kubeconfigs_name_the_service_and_the_credential() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::load_or_create(dir.path(), &[]).unwrap();
        let client = pki.issue_client("apiserver", None).unwrap();
        std::fs::write(dir.path().join("ca.pem"), pki.ca_pem()).unwrap();
        std::fs::write(dir.path().join("client.pem"), &client.cert_pem).unwrap();
        std::fs::write(dir.path().join("client.key"), &client.key_pem).unwrap();
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let files = "clusters:\n- name: c\n  cluster: {server: 'https://h/x', certificate-authority: ca.pem}\n\
                     users:\n- name: u\n  user: {client-certificate: client.pem, client-key: client.key}\n\
                     contexts:\n- name: w\n  context: {cluster: c, user: u}\ncurrent-context: w\n";
        let data = format!(
            "clusters:\n- name: c\n  cluster: {{server: 'https://h/y', certificate-authority-data: {}}}\n",
            b64(pki.ca_pem())
        );
        /// (server, has a CA, has a client certificate) or an error.
        type Expected = Result<(&'static str, bool, bool), &'static str>;
        let cases: Vec<(&str, String, Expected)> = vec![
            ("files relative to the config", files.to_owned(), Ok(("https://h/x", true, true))),
            ("inline CA, no user", data, Ok(("https://h/y", true, false))),
            ("plain http", "clusters:\n- name: c\n  cluster: {server: 'http://h'}\n".into(), Err("https URL")),
            ("no clusters", "users: []\n".into(), Err("no clusters given")),
            (
                "unknown context",
                "clusters:\n- name: c\n  cluster: {server: 'https://h'}\ncurrent-context: nope\n".into(),
                Err("no entry \"nope\" in contexts"),
            ),
            (
                "skip verification",
                "clusters:\n- name: c\n  cluster: {server: 'https://h', insecure-skip-tls-verify: true}\n".into(),
                Err("insecure-skip-tls-verify"),
            ),
            (
                "certificate without key",
                "clusters:\n- name: c\n  cluster: {server: 'https://h', certificate-authority: ca.pem}\n\
                 users:\n- name: u\n  user: {client-certificate: client.pem}\n"
                    .into(),
                Err("both a client certificate and a client key"),
            ),
        ];
        for (name, contents, expected) in cases {
            let parsed = WebhookConfig::from_kubeconfig(&contents, Some(dir.path()));
            match (expected, parsed) {
                (Ok((server, ca, cert)), Ok(config)) => {
                    assert_eq!(config.server, server, "{name}");
                    assert_eq!(config.ca_pem.is_some(), ca, "{name}");
                    assert_eq!(config.client_certificate.is_some(), cert, "{name}");
                }
                (Err(message), Err(error)) => assert!(error.0.contains(message), "{name}: {error}"),
                (expected, got) => panic!("{name}: expected {expected:?}, got {got:?}"),
            }
        }
    }

    #[tokio::test]
    async fn posts_retry_server_errors_and_refuse_bad_answers() {
        /// (name, status, body, outcome, requests made)
        type Case = (&'static str, u16, Value, Result<(), &'static str>, usize);
        let cases: Vec<Case> = vec![
            ("ok", 200, json!({"status": {}}), Ok(()), 1),
            ("client error", 400, json!({"message": "bad"}), Err("400"), 1),
            ("server error, retried", 500, json!({}), Err("500"), 3),
            ("not an object", 200, json!([1]), Err("not a JSON object"), 1),
        ];
        for (name, code, body, expected, calls) in cases {
            let webhook = TestWebhook::start(move |_| (code, body.clone())).await;
            let client = webhook.config.client().unwrap();
            let outcome = webhook.config.post(&client, &json!({"kind": "TokenReview"})).await;
            match (expected, outcome) {
                (Ok(()), Ok(_)) => {}
                (Err(message), Err(error)) => assert!(error.contains(message), "{name}: {error}"),
                (expected, got) => panic!("{name}: expected {expected:?}, got {got:?}"),
            }
            assert_eq!(webhook.calls.load(Ordering::SeqCst), calls, "{name}");
        }
    }

    #[test]
    fn cached_answers_expire() {
        let cache = AnswerCache::default();
        let (a, b) = (AnswerCache::<u8>::key(b"a"), AnswerCache::<u8>::key(b"b"));
        cache.put(a, 1u8, Duration::from_secs(60));
        cache.put(b, 2u8, Duration::ZERO);
        assert_eq!(cache.get(&a), Some(1));
        assert_eq!(cache.get(&b), None, "a zero TTL caches nothing");
        cache.put(a, 3u8, Duration::from_nanos(1));
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(cache.get(&a), None);
    }
}
