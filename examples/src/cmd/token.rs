//! `orchestra token create`: a bootstrap token for joining nodes, as
//! `kubeadm token create` makes one: a Secret of type
//! `bootstrap.kubernetes.io/token` in `kube-system`, for authentication and
//! signing, in kubeadm's node group (which the default RBAC bindings let
//! ask for node certificates and have them approved), expiring after a TTL.
//! Prints the token.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;
use orchestra::core::auth::bootstrap_token::{BootstrapToken, KUBEADM_GROUP, NAMESPACE};

/// `orchestra token ...`.
#[derive(clap::Subcommand)]
pub enum Token {
    /// Creates a bootstrap token and prints it.
    Create(CreateArgs),
}

/// Options of `orchestra token create`.
#[derive(clap::Args)]
pub struct CreateArgs {
    /// Kubeconfig of a user who may create Secrets in `kube-system`.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// How long the token is valid (`0s`: forever), e.g. `24h`, `30m`.
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    ttl: Duration,
    /// Extra groups of the token's user (`auth-extra-groups`), each
    /// `system:bootstrappers:...`.
    #[arg(long, default_value = KUBEADM_GROUP, value_delimiter = ',')]
    groups: Vec<String>,
}

/// `90s`, `30m`, `24h`, `7d`, or a number of seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    let number: u64 = number.parse().map_err(|_| format!("{text:?} is not a duration such as 24h"))?;
    let seconds = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        _ => return Err(format!("{text:?} is not a duration such as 24h")),
    };
    Ok(Duration::from_secs(number * seconds))
}

/// Runs `orchestra token`.
pub async fn run(command: Token) -> Result<(), Box<dyn std::error::Error>> {
    let Token::Create(args) = command;
    let client = orchestra::core::client::from_kubeconfig(&args.kubeconfig).await?;
    let token = BootstrapToken::generate()?;
    let expiration = (!args.ttl.is_zero()).then(|| {
        let at = k8s_openapi::jiff::Timestamp::now() + args.ttl;
        at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    });
    let groups: Vec<&str> = args.groups.iter().map(String::as_str).filter(|g| !g.is_empty()).collect();
    let secret: Secret = serde_json::from_value(token.secret(expiration.as_deref(), &groups))?;
    Api::<Secret>::namespaced(client, NAMESPACE).create(&PostParams::default(), &secret).await?;
    println!("{token}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        for (text, seconds) in [("90", 90), ("90s", 90), ("30m", 1800), ("24h", 86400), ("2d", 172800)] {
            assert_eq!(parse_duration(text), Ok(Duration::from_secs(seconds)), "{text}");
        }
        for text in ["", "h", "1w", "-1h"] {
            assert!(parse_duration(text).is_err(), "{text}");
        }
    }
}
