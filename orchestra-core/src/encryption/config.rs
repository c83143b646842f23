//! `EncryptionConfiguration`: which resources are encrypted, by which
//! providers, parsed from upstream's file format and resolved to store
//! prefixes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use serde::Deserialize;

use super::{AesGcm, Identity, Provider, Secretbox};
use crate::api::Registry;

/// Why an encryption configuration was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The text is not an `EncryptionConfiguration` (YAML or JSON).
    #[error("parsing the encryption configuration: {0}")]
    Parse(String),
    /// The configuration parses but says something invalid.
    #[error("invalid encryption configuration: {0}")]
    Invalid(String),
}

/// One named key of an `aesgcm` or `secretbox` provider.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProviderKey {
    /// The key's name, part of the prefix of what it encrypts.
    pub name: String,
    /// The key itself (the file holds it base64-encoded).
    pub secret: Vec<u8>,
}

impl ProviderKey {
    /// A key named `name`.
    pub fn new(name: impl Into<String>, secret: impl Into<Vec<u8>>) -> ProviderKey {
        ProviderKey { name: name.into(), secret: secret.into() }
    }
}

impl std::fmt::Debug for ProviderKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderKey").field("name", &self.name).field("secret", &"<redacted>").finish()
    }
}

/// One entry of a resource's `providers` list.
#[derive(Clone)]
#[non_exhaustive]
pub enum ProviderConfig {
    /// `aesgcm`: AES-GCM, keys of 16, 24 or 32 bytes, the first key writes.
    AesGcm {
        /// The keys, in order.
        keys: Vec<ProviderKey>,
    },
    /// `secretbox`: XSalsa20-Poly1305, 32-byte keys, the first key writes.
    Secretbox {
        /// The keys, in order.
        keys: Vec<ProviderKey>,
    },
    /// `identity`: no encryption.
    Identity,
    /// A provider of one's own.
    Custom(Arc<dyn Provider>),
}

impl std::fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProviderConfig::AesGcm { keys } => f.debug_struct("AesGcm").field("keys", keys).finish(),
            ProviderConfig::Secretbox { keys } => f.debug_struct("Secretbox").field("keys", keys).finish(),
            ProviderConfig::Identity => f.write_str("Identity"),
            ProviderConfig::Custom(p) => f.debug_tuple("Custom").field(&p.prefix()).finish(),
        }
    }
}

/// The providers of one group of resources, in order: the first writes.
pub(crate) type Providers = Arc<[Arc<dyn Provider>]>;

/// Which store prefixes are encrypted, by which providers.
///
/// Parsed from upstream's file ([`parse`](Self::parse),
/// [`from_file`](Self::from_file)) or built with
/// [`with_rule`](Self::with_rule); used by
/// [`EncryptedStore`](super::EncryptedStore).
///
/// ```
/// use orchestra_core::encryption::{EncryptionConfig, ProviderConfig, ProviderKey};
///
/// let config = EncryptionConfig::new()
///     .with_rule(
///         &["secrets", "configmaps"],
///         vec![
///             ProviderConfig::Secretbox { keys: vec![ProviderKey::new("key1", [9u8; 32])] },
///             ProviderConfig::Identity,
///         ],
///     )
///     .unwrap();
/// assert_eq!(config.writer_prefix("/registry/secrets/default/s"), Some("k8s:enc:secretbox:v1:key1:"));
/// assert_eq!(config.writer_prefix("/registry/pods/default/p"), None);
/// ```
#[derive(Clone, Default)]
pub struct EncryptionConfig {
    /// Store prefixes with their providers, in the configuration's order:
    /// the first matching a key decides.
    rules: Vec<(String, Providers)>,
    /// The resource names configured so far, for the duplicate and masking
    /// checks.
    names: Vec<String>,
}

impl std::fmt::Debug for EncryptionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut map = f.debug_map();
        for (prefix, providers) in &self.rules {
            map.entry(prefix, &providers.iter().map(|p| p.prefix()).collect::<Vec<_>>());
        }
        map.finish()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct File {
    api_version: String,
    kind: String,
    #[serde(default)]
    resources: Vec<ResourceEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResourceEntry {
    resources: Vec<String>,
    providers: Vec<ProviderEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderEntry {
    aesgcm: Option<KeysEntry>,
    secretbox: Option<KeysEntry>,
    identity: Option<serde_json::Value>,
    aescbc: Option<serde_json::Value>,
    kms: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeysEntry {
    keys: Vec<KeyEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyEntry {
    name: String,
    secret: String,
}

impl EncryptionConfig {
    /// A configuration that encrypts nothing.
    pub fn new() -> EncryptionConfig {
        EncryptionConfig::default()
    }

    /// Reads upstream's `EncryptionConfiguration` from `path`.
    pub fn from_file(path: &Path) -> Result<EncryptionConfig, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Io { path: path.to_owned(), source })?;
        EncryptionConfig::parse(&text)
    }

    /// Parses upstream's `apiserver.config.k8s.io/v1`
    /// `EncryptionConfiguration`, YAML or JSON. Resource names are upstream's:
    /// `secrets` (core group), `deployments.apps`, `*.` (every core
    /// resource), `*.apps` (every resource of a group), `*.*` (everything).
    pub fn parse(text: &str) -> Result<EncryptionConfig, ConfigError> {
        let file: File = serde_yaml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        if file.kind != "EncryptionConfiguration" {
            return Err(ConfigError::Invalid(format!("kind is {:?}, not EncryptionConfiguration", file.kind)));
        }
        if !matches!(file.api_version.as_str(), "apiserver.config.k8s.io/v1" | "apiserver.config.k8s.io/v1beta1") {
            return Err(ConfigError::Invalid(format!(
                "apiVersion is {:?}, not apiserver.config.k8s.io/v1",
                file.api_version
            )));
        }
        let mut config = EncryptionConfig::new();
        for (i, entry) in file.resources.into_iter().enumerate() {
            let providers = entry
                .providers
                .into_iter()
                .enumerate()
                .map(|(j, p)| provider_config(p).map_err(|e| invalid(format!("resources[{i}].providers[{j}]: {e}"))))
                .collect::<Result<Vec<_>, _>>()?;
            let names: Vec<&str> = entry.resources.iter().map(String::as_str).collect();
            config = config.with_rule(&names, providers).map_err(|e| match e {
                ConfigError::Invalid(message) => invalid(format!("resources[{i}]: {message}")),
                other => other,
            })?;
        }
        Ok(config)
    }

    /// Adds a rule: `resources` (named as in the file) are written by the
    /// first of `providers` and read by any of them. A resource named by an
    /// earlier rule, or covered by an earlier wildcard, is refused (it would
    /// never be matched).
    pub fn with_rule(mut self, resources: &[&str], providers: Vec<ProviderConfig>) -> Result<Self, ConfigError> {
        if resources.is_empty() {
            return Err(invalid("a rule names no resources".into()));
        }
        let built = build_providers(providers)?;
        let registry = Registry::builtin();
        for &name in resources {
            self.check_name(name)?;
            for prefix in prefixes(name, &registry) {
                self.rules.push((prefix, built.clone()));
            }
            self.names.push(name.to_owned());
        }
        Ok(self)
    }

    fn check_name(&self, name: &str) -> Result<(), ConfigError> {
        let (plural, group) = name.split_once('.').unwrap_or((name, ""));
        if plural.is_empty() || name.chars().any(|c| c.is_ascii_uppercase() || c == '/' || c.is_whitespace()) {
            return Err(invalid(format!("{name:?} is not a resource name (plural, lower case, `.group` after it)")));
        }
        if plural == "*" && group.contains('*') && group != "*" {
            return Err(invalid(format!("{name:?}: only `*.*` may have a wildcard group")));
        }
        for earlier in &self.names {
            let masks = earlier == name
                || earlier == "*.*"
                || earlier.strip_prefix("*.").is_some_and(|g| !g.is_empty() && g == group)
                || (earlier == "*." && !name.contains('.'));
            if masks {
                return Err(invalid(format!("{name:?} is already covered by {earlier:?}, named earlier")));
            }
        }
        Ok(())
    }

    /// The providers of the resource stored under `key`, if it is encrypted.
    pub(crate) fn providers(&self, key: &str) -> Option<&Providers> {
        self.rules.iter().find(|(prefix, _)| key.starts_with(prefix.as_str())).map(|(_, providers)| providers)
    }

    /// The prefix new values written to `key` get (`""` for `identity`),
    /// or `None` if `key`'s resource is not configured.
    pub fn writer_prefix(&self, key: &str) -> Option<&str> {
        self.providers(key).map(|providers| providers[0].prefix())
    }

    /// True if no resource is configured.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

fn invalid(message: String) -> ConfigError {
    ConfigError::Invalid(message)
}

fn provider_config(entry: ProviderEntry) -> Result<ProviderConfig, String> {
    let keys = |entry: KeysEntry| -> Result<Vec<ProviderKey>, String> {
        entry
            .keys
            .into_iter()
            .map(|key| {
                let secret = base64::engine::general_purpose::STANDARD
                    .decode(key.secret.trim())
                    .map_err(|e| format!("key {:?}: the secret is not base64: {e}", key.name))?;
                Ok(ProviderKey::new(key.name, secret))
            })
            .collect()
    };
    let ProviderEntry { aesgcm, secretbox, identity, aescbc, kms } = entry;
    let set = [aesgcm.is_some(), secretbox.is_some(), identity.is_some(), aescbc.is_some(), kms.is_some()];
    if set.iter().filter(|s| **s).count() != 1 {
        return Err("exactly one of aesgcm, secretbox, identity must be set".into());
    }
    if aescbc.is_some() || kms.is_some() {
        return Err("only the aesgcm, secretbox and identity providers are supported".into());
    }
    Ok(match (aesgcm, secretbox) {
        (Some(entry), _) => ProviderConfig::AesGcm { keys: keys(entry)? },
        (_, Some(entry)) => ProviderConfig::Secretbox { keys: keys(entry)? },
        _ => ProviderConfig::Identity,
    })
}

/// One provider per key, in order.
fn build_providers(configs: Vec<ProviderConfig>) -> Result<Providers, ConfigError> {
    if configs.is_empty() {
        return Err(invalid("a rule has no providers".into()));
    }
    let mut built: Vec<Arc<dyn Provider>> = Vec::new();
    for config in configs {
        let (scheme, keys) = match config {
            ProviderConfig::Identity => {
                built.push(Arc::new(Identity));
                continue;
            }
            ProviderConfig::Custom(provider) => {
                built.push(provider);
                continue;
            }
            ProviderConfig::AesGcm { keys } => ("aesgcm", keys),
            ProviderConfig::Secretbox { keys } => ("secretbox", keys),
        };
        if keys.is_empty() {
            return Err(invalid(format!("{scheme} has no keys")));
        }
        for (i, key) in keys.iter().enumerate() {
            if key.name.is_empty() || key.name.contains(':') {
                return Err(invalid(format!("{scheme} key {:?}: a name is non-empty and has no ':'", key.name)));
            }
            if keys[..i].iter().any(|k| k.name == key.name) {
                return Err(invalid(format!("{scheme} key name {:?} is used twice", key.name)));
            }
            let provider: Option<Arc<dyn Provider>> = match scheme {
                "aesgcm" => AesGcm::new(&key.name, &key.secret).map(|p| Arc::new(p) as _),
                _ => Secretbox::new(&key.name, &key.secret).map(|p| Arc::new(p) as _),
            };
            let expected = if scheme == "aesgcm" { "16, 24 or 32" } else { "32" };
            built.push(provider.ok_or_else(|| {
                invalid(format!("{scheme} key {:?} is {} bytes, not {expected}", key.name, key.secret.len()))
            })?);
        }
    }
    Ok(built.into())
}

/// The store prefixes a resource name covers.
fn prefixes(name: &str, registry: &Registry) -> Vec<String> {
    let (plural, group) = name.split_once('.').unwrap_or((name, ""));
    let mut out: Vec<String> = Vec::new();
    match (plural, group) {
        ("*", "*") => out.push("/registry/".into()),
        ("*", "") => {
            for version in registry.versions("") {
                for info in registry.resources("", &version) {
                    out.push(info.storage_prefix());
                }
            }
        }
        ("*", group) => out.push(format!("/registry/{group}/")),
        (plural, group) => {
            for version in registry.versions(group) {
                if let Some(info) = registry.get(group, &version, plural) {
                    out.push(info.storage_prefix());
                }
            }
            if out.is_empty() {
                out.push(if group.is_empty() {
                    format!("/registry/{plural}/")
                } else {
                    format!("/registry/{group}/{plural}/")
                });
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY16: &str = "AAAAAAAAAAAAAAAAAAAAAA==";
    const KEY32: &str = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";

    fn file(resources: &str) -> String {
        format!("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n{resources}")
    }

    #[test]
    fn parses_upstream_files_and_resolves_prefixes() {
        // (file, key, expected writer prefix: None = not encrypted)
        let cases: &[(String, &str, Option<&str>)] = &[
            (
                file(&format!(
                    "- resources: [secrets]\n  providers:\n  - aesgcm:\n      keys:\n      - {{name: k1, secret: {KEY32}}}\n      - {{name: k0, secret: {KEY16}}}\n  - identity: {{}}\n"
                )),
                "/registry/secrets/default/s",
                Some("k8s:enc:aesgcm:v1:k1:"),
            ),
            (
                file(&format!(
                    "- resources: [secrets]\n  providers:\n  - aesgcm:\n      keys:\n      - {{name: k1, secret: {KEY32}}}\n"
                )),
                "/registry/configmaps/default/c",
                None,
            ),
            (
                file(&format!(
                    "- resources: [configmaps, deployments.apps]\n  providers:\n  - secretbox:\n      keys:\n      - {{name: sb, secret: {KEY32}}}\n"
                )),
                "/registry/apps/deployments/default/d",
                Some("k8s:enc:secretbox:v1:sb:"),
            ),
            (file("- resources: [secrets]\n  providers:\n  - identity: {}\n"), "/registry/secrets/a/b", Some("")),
            (
                file(&format!("- resources: ['*.']\n  providers:\n  - secretbox:\n      keys: [{{name: a, secret: {KEY32}}}]\n")),
                "/registry/namespaces/default",
                Some("k8s:enc:secretbox:v1:a:"),
            ),
            (
                file(&format!("- resources: ['*.']\n  providers:\n  - secretbox:\n      keys: [{{name: a, secret: {KEY32}}}]\n")),
                "/registry/apps/deployments/default/d",
                None,
            ),
            (
                file(&format!("- resources: ['*.apps']\n  providers:\n  - secretbox:\n      keys: [{{name: a, secret: {KEY32}}}]\n")),
                "/registry/apps/replicasets/default/r",
                Some("k8s:enc:secretbox:v1:a:"),
            ),
            (
                file(&format!(
                    "- resources: [secrets]\n  providers:\n  - identity: {{}}\n- resources: ['*.*']\n  providers:\n  - secretbox:\n      keys: [{{name: all, secret: {KEY32}}}]\n"
                )),
                "/registry/example.com/widgets/default/w",
                Some("k8s:enc:secretbox:v1:all:"),
            ),
            (
                // JSON is YAML too.
                format!(
                    r#"{{"apiVersion":"apiserver.config.k8s.io/v1","kind":"EncryptionConfiguration","resources":[{{"resources":["events.events.k8s.io"],"providers":[{{"aesgcm":{{"keys":[{{"name":"j","secret":"{KEY16}"}}]}}}}]}}]}}"#
                ),
                "/registry/events/default/e",
                Some("k8s:enc:aesgcm:v1:j:"),
            ),
        ];
        for (text, key, expected) in cases {
            let config = EncryptionConfig::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(config.writer_prefix(key), *expected, "{key} in\n{text}");
        }
    }

    #[test]
    fn refuses_invalid_files_with_the_reason() {
        let cases: &[(String, &str)] = &[
            ("kind: Other\napiVersion: apiserver.config.k8s.io/v1\n".into(), "not EncryptionConfiguration"),
            ("kind: EncryptionConfiguration\napiVersion: v1\n".into(), "apiVersion"),
            ("resources: [".into(), "parsing"),
            (file("- resources: [secrets]\n  providers: []\n"), "no providers"),
            (file("- resources: []\n  providers:\n  - identity: {}\n"), "no resources"),
            (file("- resources: [secrets]\n  providers:\n  - aesgcm:\n      keys: []\n"), "aesgcm has no keys"),
            (
                file("- resources: [secrets]\n  providers:\n  - aesgcm:\n      keys: [{name: k, secret: AAAA}]\n"),
                "3 bytes, not 16, 24 or 32",
            ),
            (
                file(&format!("- resources: [secrets]\n  providers:\n  - secretbox:\n      keys: [{{name: k, secret: {KEY16}}}]\n")),
                "16 bytes, not 32",
            ),
            (
                file("- resources: [secrets]\n  providers:\n  - secretbox:\n      keys: [{name: k, secret: '!!'}]\n"),
                "not base64",
            ),
            (
                file(&format!(
                    "- resources: [secrets]\n  providers:\n  - aesgcm:\n      keys: [{{name: k, secret: {KEY16}}}, {{name: k, secret: {KEY32}}}]\n"
                )),
                "used twice",
            ),
            (file("- resources: [secrets]\n  providers:\n  - aescbc: {}\n"), "only the aesgcm, secretbox and identity"),
            (file("- resources: [secrets]\n  providers:\n  - {identity: {}, aescbc: {}}\n"), "exactly one"),
            (file("- resources: [secrets, secrets]\n  providers:\n  - identity: {}\n"), "already covered"),
            (
                file("- resources: ['*.']\n  providers:\n  - identity: {}\n- resources: [secrets]\n  providers:\n  - identity: {}\n"),
                "already covered by \"*.\"",
            ),
            (
                file("- resources: ['*.*']\n  providers:\n  - identity: {}\n- resources: [deployments.apps]\n  providers:\n  - identity: {}\n"),
                "already covered",
            ),
            (file("- resources: [Secrets]\n  providers:\n  - identity: {}\n"), "not a resource name"),
            (file("- resources: [secrets]\n  providers:\n  - identity: {}\n  extra: 1\n"), "unknown field"),
        ];
        for (text, expected) in cases {
            match EncryptionConfig::parse(text) {
                Ok(config) => panic!("accepted {text}: {config:?}"),
                Err(e) => assert!(e.to_string().contains(expected), "{text}: {e} (expected {expected:?})"),
            }
        }
    }
}
