//! `orchestra controller-manager`: the built-in controllers as their own
//! process behind one leader election, reaching the API server through a
//! kubeconfig.

use std::path::PathBuf;
use std::sync::Arc;

use orchestra_core::tls::csr::CertificateAuthority;
use orchestra_core::tls::pki::Credential;
use orchestra_core::tokens::{DEFAULT_ISSUER, TokenSigner};
use orchestra_ctrl::controllers::csrsigning::SigningConfig;
use orchestra_ctrl::controllers::serviceaccount_token::TokenConfig;
use orchestra_ctrl::controllers::{self, ControllerManagerConfig};
use orchestra_ctrl::credentials::TokenRequestCredentials;
use orchestra_ctrl::informer::SharedInformerFactory;
use orchestra_ctrl::leader::LeaderElector;

/// Options of `orchestra controller-manager`.
#[derive(clap::Args)]
pub struct Args {
    /// Kubeconfig to reach the API server with.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Pods' address space, split into one pod CIDR per node.
    #[arg(long, default_value = crate::cmd::CLUSTER_CIDR)]
    cluster_cidr: String,
    /// Prefix length of each node's pod CIDR.
    #[arg(long, default_value_t = 24)]
    node_cidr_mask_size: u8,
    /// Signing key of service account token Secrets (the API server's
    /// `pki/sa.key`); without it the token controller does not run.
    #[arg(long)]
    service_account_private_key_file: Option<PathBuf>,
    /// The CA certificate put into token Secrets as `ca.crt` and published
    /// in every namespace's `kube-root-ca.crt` ConfigMap.
    #[arg(long)]
    root_ca_file: Option<PathBuf>,
    /// The cluster CA's certificate CertificateSigningRequests are signed
    /// with (the API server's `pki/ca.crt`); with
    /// `--cluster-signing-key-file`, turns the `csrsigning` controller on.
    #[arg(long, requires = "cluster_signing_key_file")]
    cluster_signing_cert_file: Option<PathBuf>,
    /// The cluster CA's key (`pki/ca.key`).
    #[arg(long, requires = "cluster_signing_cert_file")]
    cluster_signing_key_file: Option<PathBuf>,
    /// The longest validity of a signed certificate, in seconds.
    #[arg(long, default_value_t = controllers::csrsigning::DEFAULT_MAX_DURATION.as_secs())]
    cluster_signing_duration_seconds: u64,
    /// Run each controller as its own service account in `kube-system`
    /// (tokens asked for with the TokenRequest API under this process's
    /// identity), as upstream's `--use-service-account-credentials`; off,
    /// every controller writes as the kubeconfig's user.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    use_service_account_credentials: bool,
    /// This instance's identity in leader election.
    #[arg(long)]
    identity: Option<String>,
    /// Controllers to run, as kube-controller-manager's flag: `*` turns on
    /// every controller on by default, `name` turns one on, `-name` one off
    /// (e.g. `--controllers '*,-nodeipam'`).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "*",
        allow_hyphen_values = true,
        long_help = controllers_help()
    )]
    controllers: Vec<String>,
}

/// The long help of `--controllers`, naming the built-in controllers.
fn controllers_help() -> String {
    let names: Vec<&str> = controllers::BUILTIN.iter().map(|d| d.name).collect();
    format!(
        "Controllers to run, as kube-controller-manager's flag: `*` turns on every controller on by default, \
         `name` turns one on, `-name` one off (e.g. `--controllers '*,-nodeipam'`). Names: {}.",
        names.join(", ")
    )
}

/// The controller manager's configuration from the flags (without the
/// token controller's key, read separately).
fn config(args: &Args) -> ControllerManagerConfig {
    ControllerManagerConfig::default()
        .with_cluster_cidr(Some(args.cluster_cidr.clone()))
        .with_node_cidr_mask_size(args.node_cidr_mask_size)
        .with_controllers(args.controllers.clone())
}

/// Runs the controllers (once elected) until SIGTERM or Ctrl-C.
pub async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    // An unknown controller name fails before anything else is done.
    config(&args).enabled()?;
    let cluster = orchestra_core::client::config_from_kubeconfig(&args.kubeconfig).await?;
    let client = kube::Client::try_from(cluster.clone())?;
    let identity = args.identity.clone().unwrap_or_else(super::default_identity);
    let root_ca = args.root_ca_file.as_ref().map(std::fs::read_to_string).transpose()?;
    let service_account_tokens = match &args.service_account_private_key_file {
        Some(key) => {
            let mut tokens = TokenConfig::new(Arc::new(TokenSigner::load_existing(key, DEFAULT_ISSUER)?));
            tokens.root_ca = root_ca.clone();
            Some(tokens)
        }
        None => None,
    };
    let csr_signing = match (&args.cluster_signing_cert_file, &args.cluster_signing_key_file) {
        (Some(cert), Some(key)) => {
            let read = |path: &PathBuf| std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()));
            let ca = Credential { cert_pem: read(cert)?, key_pem: read(key)? };
            let duration = std::time::Duration::from_secs(args.cluster_signing_duration_seconds);
            Some(SigningConfig::new(CertificateAuthority::new(ca)?).with_max_duration(duration))
        }
        _ => None,
    };
    let mut config = config(&args)
        .with_service_account_tokens(service_account_tokens)
        .with_root_ca(root_ca)
        .with_csr_signing(csr_signing);
    if args.use_service_account_credentials {
        config = config.with_credentials(Arc::new(TokenRequestCredentials::new(client.clone(), cluster)));
    }
    let manager = controllers::builtin(SharedInformerFactory::new(client.clone()), config)?;
    let elector = Arc::new(LeaderElector::new(client, "kube-system", "kube-controller-manager", &identity));
    println!("orchestra controller-manager {identity} ready ({})", manager.names().join(", "));
    manager.run_elected(elector, super::shutdown_signal()).await?;
    println!("orchestra controller-manager stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn parse(extra: &[&str]) -> Args {
        let mut argv = vec!["controller-manager", "--kubeconfig", "k"];
        argv.extend_from_slice(extra);
        Cli::try_parse_from(argv).expect("parses").args
    }

    #[test]
    fn controllers_flag_selects_like_kube_controller_manager() {
        assert_eq!(parse(&[]).controllers, ["*"]);
        assert_eq!(
            parse(&["--controllers", "*,-nodeipam,-garbagecollector"]).controllers,
            ["*", "-nodeipam", "-garbagecollector"]
        );
        assert_eq!(parse(&["--controllers", "-deployment"]).controllers, ["-deployment"]);
        let enabled = config(&parse(&["--controllers", "deployment,replicaset"])).enabled().unwrap();
        assert_eq!(enabled, ["replicaset", "deployment"]);
        let enabled = config(&parse(&["--controllers=*,-nodeipam"])).enabled().unwrap();
        assert!(!enabled.contains(&"nodeipam") && enabled.contains(&"endpoints"), "{enabled:?}");
        let error = config(&parse(&["--controllers", "*,bogus"])).enabled().unwrap_err();
        assert!(error.to_string().contains("\"bogus\" is not in the list of known controllers"), "{error}");
    }
}
