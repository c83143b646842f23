//! The audit flags `orchestra apiserver` and `orchestra up` share,
//! kube-apiserver's: `--audit-policy-file`, `--audit-log-path`,
//! `--audit-log-maxsize`, `--audit-log-maxbackup`, `--audit-log-maxage`.

use std::path::PathBuf;

use orchestra::control_plane::ControlPlaneBuilder;
use orchestra::core::audit::{Auditor, LogBackend, LogOptions, Policy};

/// Audit options.
#[derive(clap::Args, Debug, Default)]
pub struct AuditArgs {
    /// The audit policy: upstream's `audit.k8s.io/v1` Policy (YAML or JSON).
    #[arg(long)]
    pub audit_policy_file: Option<PathBuf>,
    /// Where audit events are written as JSON lines (`-`: standard output).
    #[arg(long)]
    pub audit_log_path: Option<PathBuf>,
    /// The audit log's size at which it is rotated, in megabytes (0: 100).
    #[arg(long, default_value_t = 0)]
    pub audit_log_maxsize: u64,
    /// How many rotated audit logs are kept (0: all).
    #[arg(long, default_value_t = 0)]
    pub audit_log_maxbackup: usize,
    /// How many days a rotated audit log is kept (0: no limit).
    #[arg(long, default_value_t = 0)]
    pub audit_log_maxage: u64,
}

impl AuditArgs {
    /// `builder` with auditing on, if the flags ask for it.
    pub fn apply(&self, builder: ControlPlaneBuilder) -> Result<ControlPlaneBuilder, Box<dyn std::error::Error>> {
        let (policy, path) = match (&self.audit_policy_file, &self.audit_log_path) {
            (None, None) => return Ok(builder),
            (Some(policy), Some(path)) => (policy, path),
            (Some(_), None) => return Err("--audit-policy-file needs --audit-log-path".into()),
            (None, Some(_)) => return Err("--audit-log-path needs --audit-policy-file".into()),
        };
        let policy = Policy::from_file(policy)?;
        let options = LogOptions::new(path)
            .max_size_megabytes(self.audit_log_maxsize)
            .max_backups(self.audit_log_maxbackup)
            .max_age_days(self.audit_log_maxage);
        let auditor = Auditor::new(policy).with_sink(LogBackend::open(options)?);
        Ok(builder.configure_api_server(move |api| api.audit(auditor)))
    }
}
