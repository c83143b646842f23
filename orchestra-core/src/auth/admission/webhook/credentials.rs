//! The credentials the API server presents to admission webhooks
//! (upstream's `WebhookAdmissionConfiguration.kubeConfigFile`): a
//! kubeconfig whose users are named after the webhooks' hosts.

use std::path::Path;

use serde_json::Value;

use crate::auth::webhook::{WebhookConfigError, user_credentials};
use crate::tls::pki::Credential;

/// What the server presents to one webhook host: a client certificate, a
/// bearer token, or both.
#[derive(Clone, Default)]
pub(crate) struct ClientAuth {
    pub identity: Option<Credential>,
    pub token: Option<String>,
}

/// Credentials for admission webhooks, by host, read from a kubeconfig
/// whose `users` are named after the hosts they are for, as upstream's:
/// `host:port`, `*.domain:port` for every host of a domain on that port,
/// `host` and `*.domain` for port 443, `*` for any host. A Service's webhook is the host `<service>.<namespace>.svc`
/// on its port. Webhooks no user matches are called without credentials.
///
/// ```
/// use orchestra_core::auth::admission::WebhookClientAuth;
///
/// let kubeconfig = r#"
/// users:
/// - name: "hooks.example.com:8443"
///   user: {token: "for-the-hooks"}
/// - name: "*.webhooks.svc"
///   user: {token: "for-the-services"}
/// "#;
/// let auth = WebhookClientAuth::from_kubeconfig(kubeconfig, None).unwrap();
/// assert_eq!(auth.token_for("hooks.example.com:8443"), Some("for-the-hooks"));
/// assert_eq!(auth.token_for("policy.webhooks.svc:443"), Some("for-the-services"));
/// assert_eq!(auth.token_for("other.example.com:443"), None);
/// ```
#[derive(Clone, Default)]
pub struct WebhookClientAuth {
    users: Vec<(String, ClientAuth)>,
}

impl std::fmt::Debug for WebhookClientAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hosts: Vec<&str> = self.users.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("WebhookClientAuth").field("hosts", &hosts).finish()
    }
}

impl WebhookClientAuth {
    /// Reads a kubeconfig file; relative paths in it are relative to its
    /// directory.
    pub fn from_kubeconfig_file(path: impl AsRef<Path>) -> Result<WebhookClientAuth, WebhookConfigError> {
        let path = path.as_ref();
        let contents = read(path)?;
        WebhookClientAuth::from_kubeconfig(&contents, path.parent())
    }

    /// Parses a kubeconfig's `users`; relative file paths are resolved
    /// against `base_dir` (the working directory when `None`).
    pub fn from_kubeconfig(contents: &str, base_dir: Option<&Path>) -> Result<WebhookClientAuth, WebhookConfigError> {
        let config: Value = serde_yaml::from_str(contents)
            .map_err(|e| WebhookConfigError(format!("the webhooks' kubeconfig is not a kubeconfig: {e}")))?;
        let mut users = Vec::new();
        for entry in config.get("users").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
            let name = entry.get("name").and_then(Value::as_str).unwrap_or_default();
            if name.is_empty() {
                return Err(WebhookConfigError("a user of the webhooks' kubeconfig has no name".into()));
            }
            let user = entry.get("user").cloned().unwrap_or(Value::Null);
            let (identity, token) =
                user_credentials(&user, base_dir).map_err(|e| WebhookConfigError(format!("user {name:?}: {}", e.0)))?;
            users.push((name.to_owned(), ClientAuth { identity, token }));
        }
        Ok(WebhookClientAuth { users })
    }

    /// The credentials an admission configuration file (kube-apiserver's
    /// `--admission-control-config-file`, kind `AdmissionConfiguration`)
    /// gives `plugin` (`ValidatingAdmissionWebhook` or
    /// `MutatingAdmissionWebhook`): the `kubeConfigFile` of its
    /// `WebhookAdmissionConfiguration`, inline or in the file its `path`
    /// names. None configured: no credentials.
    pub fn from_admission_configuration_file(
        path: impl AsRef<Path>,
        plugin: &str,
    ) -> Result<WebhookClientAuth, WebhookConfigError> {
        let path = path.as_ref();
        let dir = path.parent();
        let config = yaml(&read(path)?, path)?;
        if config.get("kind").and_then(Value::as_str) != Some("AdmissionConfiguration") {
            return Err(WebhookConfigError(format!("{}: not an AdmissionConfiguration", path.display())));
        }
        let plugins = config.get("plugins").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let Some(entry) = plugins.iter().find(|p| p.get("name").and_then(Value::as_str) == Some(plugin)) else {
            return Ok(WebhookClientAuth::default());
        };
        let (configuration, dir) = match (entry.get("configuration"), entry.get("path").and_then(Value::as_str)) {
            (Some(inline), _) => (inline.clone(), dir.map(Path::to_path_buf)),
            (None, Some(file)) => {
                let file = relative_to(dir, file);
                (yaml(&read(&file)?, &file)?, file.parent().map(Path::to_path_buf))
            }
            (None, None) => return Ok(WebhookClientAuth::default()),
        };
        if configuration.get("kind").and_then(Value::as_str) != Some("WebhookAdmissionConfiguration") {
            return Err(WebhookConfigError(format!(
                "{plugin}: the configuration is not a WebhookAdmissionConfiguration"
            )));
        }
        match configuration.get("kubeConfigFile").and_then(Value::as_str).filter(|f| !f.is_empty()) {
            Some(kubeconfig) => WebhookClientAuth::from_kubeconfig_file(relative_to(dir.as_deref(), kubeconfig)),
            None => Ok(WebhookClientAuth::default()),
        }
    }

    /// The bearer token presented to `target` (`host:port`), if any.
    pub fn token_for(&self, target: &str) -> Option<&str> {
        self.resolve(target)?.token.as_deref()
    }

    /// The credentials for `target` (`host:port`), in upstream's order: the
    /// exact name, `*.` and each parent domain, the same without a `:443`
    /// port, then `*`.
    pub(crate) fn resolve(&self, target: &str) -> Option<&ClientAuth> {
        let find = |name: &str| self.users.iter().find(|(user, _)| user == name).map(|(_, auth)| auth);
        let by_domain = |host: &str| {
            find(host).or_else(|| {
                let labels: Vec<&str> = host.split('.').collect();
                (1..labels.len()).find_map(|i| find(&format!("*.{}", labels[i..].join("."))))
            })
        };
        by_domain(target).or_else(|| target.strip_suffix(":443").and_then(by_domain)).or_else(|| find("*"))
    }
}

fn read(path: &Path) -> Result<String, WebhookConfigError> {
    std::fs::read_to_string(path).map_err(|e| WebhookConfigError(format!("cannot read {}: {e}", path.display())))
}

fn yaml(contents: &str, path: &Path) -> Result<Value, WebhookConfigError> {
    serde_yaml::from_str(contents).map_err(|e| WebhookConfigError(format!("{}: {e}", path.display())))
}

fn relative_to(dir: Option<&Path>, file: &str) -> std::path::PathBuf {
    match dir {
        Some(dir) if Path::new(file).is_relative() => dir.join(file),
        _ => Path::new(file).to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_match_hosts_as_upstream() {
        let kubeconfig = r#"
users:
- {name: "a.example.com:8443", user: {token: exact}}
- {name: "a.example.com", user: {token: no-port}}
- {name: "*.example.com", user: {token: domain}}
- {name: "*.svc", user: {token: services}}
- {name: "*", user: {token: anyone}}
"#;
        let auth = WebhookClientAuth::from_kubeconfig(kubeconfig, None).unwrap();
        let cases = [
            ("a.example.com:8443", "exact"),
            // Names with a port are tried first, then without `:443`.
            ("a.example.com:443", "no-port"),
            ("b.example.com:443", "domain"),
            ("b.deep.example.com:443", "domain"),
            ("b.example.com:9443", "anyone"),
            ("hooks.webhooks.svc:443", "services"),
            ("127.0.0.1:8443", "anyone"),
        ];
        for (target, token) in cases {
            assert_eq!(auth.token_for(target), Some(token), "{target}");
        }
        let no_port = WebhookClientAuth::from_kubeconfig("users: [{name: a.example.com, user: {token: t}}]", None);
        assert_eq!(no_port.unwrap().token_for("a.example.com:443"), Some("t"));
        assert!(WebhookClientAuth::from_kubeconfig("users: [{user: {token: t}}]", None).is_err());
        let half = "users: [{name: x, user: {client-certificate-data: eA==}}]";
        assert!(WebhookClientAuth::from_kubeconfig(half, None).unwrap_err().0.contains("client key"));
    }

    #[test]
    fn admission_configurations_name_the_kubeconfig() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("hooks.kubeconfig"), "users: [{name: '*', user: {token: t}}]").unwrap();
        std::fs::write(
            dir.path().join("validating.yaml"),
            "apiVersion: apiserver.config.k8s.io/v1\nkind: WebhookAdmissionConfiguration\nkubeConfigFile: hooks.kubeconfig\n",
        )
        .unwrap();
        let config = dir.path().join("admission.yaml");
        std::fs::write(
            &config,
            r#"apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: MutatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: hooks.kubeconfig
- name: ValidatingAdmissionWebhook
  path: validating.yaml
"#,
        )
        .unwrap();
        for plugin in ["MutatingAdmissionWebhook", "ValidatingAdmissionWebhook"] {
            let auth = WebhookClientAuth::from_admission_configuration_file(&config, plugin).unwrap();
            assert_eq!(auth.token_for("anything:443"), Some("t"), "{plugin}");
        }
        let none = WebhookClientAuth::from_admission_configuration_file(&config, "PodSecurity").unwrap();
        assert_eq!(none.token_for("anything:443"), None);
        std::fs::write(&config, "kind: Other\n").unwrap();
        assert!(WebhookClientAuth::from_admission_configuration_file(&config, "MutatingAdmissionWebhook").is_err());
    }
}
