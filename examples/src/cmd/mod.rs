//! The subcommands of the `orchestra` binary.

pub mod apiserver;
pub mod audit;
pub mod controller_manager;
pub mod image;
pub mod images;
pub mod node;
pub mod scheduler;
pub mod store_demo;
pub mod token;
pub mod up;

use orchestra::core::auth::ReviewVersion;
use orchestra::core::auth::admission::{PodSecurityConfig, PodSecurityLevel};

/// Pods' address space in the reference assembly: inside 127.0.0.0/8, so
/// every pod address is a loopback address a process can bind on Linux
/// without any set-up (see `orchestra_node::network`); below the Services'
/// ClusterIPs, `127.96.0.0/12`.
pub const CLUSTER_CIDR: &str = "127.64.0.0/11";

/// Completes on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

pub use orchestra::control_plane::default_identity;

/// The API server's authentication, authorization and admission flags, as
/// kube-apiserver's.
#[derive(clap::Args)]
pub struct AuthArgs {
    /// Let requests without credentials in as `system:anonymous` (group
    /// `system:unauthenticated`), limited by the authorizers like anyone.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub anonymous_auth: bool,
    /// The authorizers, in order: `Node`, `RBAC`, `Webhook`, `ABAC`,
    /// `AlwaysAllow`, `AlwaysDeny`.
    #[arg(long, default_value = "Node,RBAC", value_parser = parse_modes)]
    pub authorization_mode: std::vec::Vec<orchestra::core::auth::AuthorizationMode>,
    /// Admission plugins to leave out of the default chain, e.g.
    /// `PodSecurity,ResourceQuota`.
    #[arg(long, value_delimiter = ',')]
    pub disable_admission_plugins: Vec<String>,
    /// The ABAC policies (`--authorization-mode=ABAC`): one
    /// `abac.authorization.kubernetes.io/v1beta1` Policy per line.
    #[arg(long)]
    pub authorization_policy_file: Option<std::path::PathBuf>,
    /// The authorization webhook (`--authorization-mode=Webhook`): a
    /// kubeconfig naming its HTTPS URL, CA and the client certificate.
    #[arg(long)]
    pub authorization_webhook_config_file: Option<std::path::PathBuf>,
    /// How long the webhook's allowed answers are cached.
    #[arg(long, default_value = "5m0s", value_parser = parse_duration)]
    pub authorization_webhook_cache_authorized_ttl: std::time::Duration,
    /// How long the webhook's other answers are cached.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub authorization_webhook_cache_unauthorized_ttl: std::time::Duration,
    /// The version of the SubjectAccessReviews sent to the webhook, `v1`
    /// or `v1beta1` (upstream's default).
    #[arg(long, default_value = "v1beta1")]
    pub authorization_webhook_version: ReviewVersion,
    /// Bearer tokens checked by a webhook with TokenReviews: a kubeconfig
    /// naming its HTTPS URL, CA and the client certificate.
    #[arg(long)]
    pub authentication_token_webhook_config_file: Option<std::path::PathBuf>,
    /// kube-apiserver's admission configuration (kind
    /// `AdmissionConfiguration`): the `kubeConfigFile` of the
    /// MutatingAdmissionWebhook and ValidatingAdmissionWebhook plugins'
    /// `WebhookAdmissionConfiguration` holds the credentials presented to
    /// webhooks, users named after the webhooks' hosts.
    #[arg(long)]
    pub admission_control_config_file: Option<std::path::PathBuf>,
    /// How long the token webhook's answers are cached.
    #[arg(long, default_value = "2m0s", value_parser = parse_duration)]
    pub authentication_token_webhook_cache_ttl: std::time::Duration,
    /// The version of the TokenReviews sent to the token webhook, `v1` or
    /// `v1beta1` (upstream's default). The reviews carry the API server's
    /// audience (its service account issuer), which the answers' audiences
    /// must include when they name any.
    #[arg(long, default_value = "v1beta1")]
    pub authentication_token_webhook_version: ReviewVersion,
    /// OpenID Connect: the issuer's https URL (tokens' `iss`); turns OIDC on.
    #[arg(long)]
    pub oidc_issuer_url: Option<String>,
    /// OpenID Connect: the client id tokens must be issued for (`aud`).
    #[arg(long)]
    pub oidc_client_id: Option<String>,
    /// OpenID Connect: the claim naming the user.
    #[arg(long, default_value = "sub")]
    pub oidc_username_claim: String,
    /// OpenID Connect: prefix of user names (default `<issuer>#` unless the
    /// username claim is `email`; `-`: none).
    #[arg(long)]
    pub oidc_username_prefix: Option<String>,
    /// OpenID Connect: the claim listing the user's groups.
    #[arg(long)]
    pub oidc_groups_claim: Option<String>,
    /// OpenID Connect: prefix of group names.
    #[arg(long, default_value = "")]
    pub oidc_groups_prefix: String,
    /// OpenID Connect: the CAs of the issuer's certificate (default: the
    /// system's).
    #[arg(long)]
    pub oidc_ca_file: Option<std::path::PathBuf>,
    /// OpenID Connect: `claim=value` pairs tokens must carry (repeatable,
    /// or comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub oidc_required_claim: Vec<String>,
    /// OpenID Connect: the signing algorithms accepted.
    #[arg(long, default_value = "RS256", value_delimiter = ',')]
    pub oidc_signing_algs: Vec<String>,
    /// Accept bootstrap tokens (Secrets of type
    /// `bootstrap.kubernetes.io/token` in `kube-system`, made by `orchestra
    /// token create`), with which nodes join (`orchestra node
    /// --bootstrap-token`).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub enable_bootstrap_token_auth: bool,
    /// The Pod Security Standard enforced in namespaces without a
    /// `pod-security.kubernetes.io/enforce` label (`kube-system`,
    /// `kube-public` and `kube-node-lease` are exempt). `baseline` refuses
    /// hostPath volumes, privileged containers and host namespaces; label a
    /// namespace `pod-security.kubernetes.io/enforce=privileged` to allow
    /// them there.
    #[arg(long, value_enum, default_value_t = PodSecurityEnforce::Baseline)]
    pub pod_security_enforce: PodSecurityEnforce,
}

/// Where Services' ClusterIPs and NodePorts come from, as kube-apiserver's
/// flags.
#[derive(clap::Args)]
pub struct ServiceArgs {
    /// The ClusterIPs' range, an IPv4 CIDR. The default is a loopback
    /// block, on which a service proxy listens without privileges.
    #[arg(long, default_value = "127.96.0.0/12")]
    pub service_cluster_ip_range: orchestra::core::api::net::Ipv4Cidr,
    /// The NodePorts' range, `first-last`.
    #[arg(long, default_value = "30000-32767", value_parser = parse_port_range)]
    pub service_node_port_range: std::ops::RangeInclusive<u16>,
}

impl ServiceArgs {
    /// `builder` serving Services from these ranges.
    pub fn apply(
        &self,
        builder: orchestra::control_plane::ControlPlaneBuilder,
    ) -> orchestra::control_plane::ControlPlaneBuilder {
        use orchestra::core::server::{ServerOptions, ServiceRanges};
        let ranges = ServiceRanges::default()
            .with_cluster_ips(self.service_cluster_ip_range)
            .with_node_ports(self.service_node_port_range.clone());
        builder.server_options(ServerOptions::default().with_service_ranges(ranges))
    }
}

/// `first-last`, as `--service-node-port-range` takes it.
fn parse_port_range(text: &str) -> Result<std::ops::RangeInclusive<u16>, String> {
    let parse =
        |port: &str| port.trim().parse::<u16>().map_err(|_| format!("{text:?}: expected first-last, e.g. 30000-32767"));
    let (first, last) =
        text.split_once('-').ok_or_else(|| format!("{text:?}: expected first-last, e.g. 30000-32767"))?;
    let (first, last) = (parse(first)?, parse(last)?);
    if first == 0 || first > last {
        return Err(format!("{text:?}: the first port must be positive and not above the last"));
    }
    Ok(first..=last)
}

/// A level of the Pod Security Standards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PodSecurityEnforce {
    /// No restriction (upstream's default).
    Privileged,
    /// No known privilege escalation.
    Baseline,
    /// Hardened: non-root, no privilege escalation, all capabilities dropped.
    Restricted,
}

impl PodSecurityEnforce {
    /// PodSecurity admission's configuration enforcing this level outside
    /// the system namespaces.
    pub fn config(self) -> PodSecurityConfig {
        let level = match self {
            PodSecurityEnforce::Privileged => PodSecurityLevel::Privileged,
            PodSecurityEnforce::Baseline => PodSecurityLevel::Baseline,
            PodSecurityEnforce::Restricted => PodSecurityLevel::Restricted,
        };
        PodSecurityConfig::default().enforce(level).exempt_namespaces(SYSTEM_NAMESPACES)
    }
}

/// Namespaces PodSecurity leaves alone: the control plane's.
const SYSTEM_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];

impl AuthArgs {
    /// `builder` with these flags' anonymous access, admission plugins left
    /// out, PodSecurity's level, authenticators (after
    /// those already added: OIDC, then the token webhook, as upstream
    /// orders them) and authorizers.
    pub fn apply(
        &self,
        mut builder: orchestra::control_plane::ControlPlaneBuilder,
    ) -> Result<orchestra::control_plane::ControlPlaneBuilder, Box<dyn std::error::Error>> {
        use orchestra::core::auth::service_account::DEFAULT_ISSUER;
        use orchestra::core::auth::{
            AbacAuthorizer, OidcAuthenticator, OidcOptions, WebhookAuthorizer, WebhookConfig, WebhookTokenAuthenticator,
        };
        builder = builder
            .allow_anonymous(self.anonymous_auth)
            .authorization_modes(&self.authorization_mode)
            .disable_admission_plugins(self.disable_admission_plugins.iter().cloned())
            .pod_security(self.pod_security_enforce.config());
        if self.enable_bootstrap_token_auth {
            builder = builder.configure_api_server(|api| api.bootstrap_tokens());
        }
        match (&self.oidc_issuer_url, &self.oidc_client_id) {
            (Some(issuer), Some(client_id)) => {
                let mut options = OidcOptions::new(issuer, client_id);
                options.username_claim = self.oidc_username_claim.clone();
                options.username_prefix = self.oidc_username_prefix.clone();
                options.groups_claim = self.oidc_groups_claim.clone();
                options.groups_prefix = self.oidc_groups_prefix.clone();
                if let Some(path) = &self.oidc_ca_file {
                    let pem =
                        std::fs::read_to_string(path).map_err(|e| format!("--oidc-ca-file {}: {e}", path.display()))?;
                    options.ca_pem = Some(pem);
                }
                for pair in self.oidc_required_claim.iter().filter(|p| !p.is_empty()) {
                    let (claim, value) = pair
                        .split_once('=')
                        .ok_or_else(|| format!("--oidc-required-claim {pair:?}: expected claim=value"))?;
                    options.required_claims.insert(claim.to_owned(), value.to_owned());
                }
                options.signing_algs = self.oidc_signing_algs.clone();
                builder = builder.authenticator(OidcAuthenticator::new(options)?);
            }
            (None, None) => {}
            (Some(_), None) => return Err("--oidc-issuer-url needs --oidc-client-id".into()),
            (None, Some(_)) => return Err("--oidc-client-id needs --oidc-issuer-url".into()),
        }
        if let Some(path) = &self.authentication_token_webhook_config_file {
            let config = WebhookConfig::from_kubeconfig_file(path)?;
            let webhook = WebhookTokenAuthenticator::new(config)?
                .cache_ttl(self.authentication_token_webhook_cache_ttl)
                .version(self.authentication_token_webhook_version)
                .audiences([DEFAULT_ISSUER]);
            builder = builder.authenticator(webhook);
        }
        if let Some(path) = &self.authorization_webhook_config_file {
            let config = WebhookConfig::from_kubeconfig_file(path)?;
            let webhook = WebhookAuthorizer::new(config)?
                .cache_ttls(
                    self.authorization_webhook_cache_authorized_ttl,
                    self.authorization_webhook_cache_unauthorized_ttl,
                )
                .version(self.authorization_webhook_version);
            builder = builder.webhook_authorizer(webhook);
        }
        if let Some(path) = &self.admission_control_config_file {
            use orchestra::core::auth::admission::WebhookClientAuth;
            let mutating = WebhookClientAuth::from_admission_configuration_file(path, "MutatingAdmissionWebhook")?;
            let validating = WebhookClientAuth::from_admission_configuration_file(path, "ValidatingAdmissionWebhook")?;
            builder = builder.admission_webhook_client_auth(mutating, validating);
        }
        if let Some(path) = &self.authorization_policy_file {
            builder = builder.abac_authorizer(AbacAuthorizer::read(path)?);
        }
        Ok(builder)
    }
}

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    match orchestra::core::server::parse_go_duration(text) {
        Some(duration) => Ok(duration.unwrap_or_default()),
        None => Err(format!("{text:?} is not a duration such as 2m0s or 30s")),
    }
}

fn parse_modes(list: &str) -> Result<Vec<orchestra::core::auth::AuthorizationMode>, String> {
    orchestra::core::auth::AuthorizationMode::parse_list(list).map_err(|e| e.to_string())
}
