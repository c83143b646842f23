//! Who a container's program runs as and what it may do: a
//! [`SecurityContext`] resolved against what the host allows into a uid,
//! a gid, supplementary groups, a capability bounding set and
//! `no_new_privs`, applied by `setpriv` (util-linux), the last program the
//! prelude `exec`s before the container's own.
//!
//! - **User**: `runAsUser`, else the runtime's default user
//!   ([`ProcessRuntimeConfig::default_user`](super::ProcessRuntimeConfig::default_user),
//!   65534 `nobody`: the host's programs are the image, and running them as
//!   root would hand a pod the host), or root for a `privileged` container
//!   that names no user. Group: `runAsGroup`, else the user's primary group
//!   in the host's `/etc/passwd`, else the default user's group (never gid
//!   0 by accident). Supplementary groups: `fsGroup` and
//!   `supplementalGroups`, as the agent passes them.
//! - **Capabilities** (bounding set): Docker's default set, minus `drop`,
//!   plus `add` (`ALL` on either side as upstream); every capability when
//!   `privileged`. A non-root user starts with empty permitted and
//!   effective sets whatever the bounding set (the kernel clears them on
//!   the switch from root, and `no_new_privs` keeps file capabilities from
//!   raising them). The inheritable set is always emptied.
//! - **`no_new_privs`**: set unless the container is `privileged` or says
//!   `allowPrivilegeEscalation: true`. Stricter than upstream, which sets it
//!   only for an explicit `false`: with the host's binaries as the image, a
//!   set-uid program is the host's.
//! - **`runAsNonRoot`** with uid 0 refuses the container with the kubelet's
//!   message (`CreateContainerConfigError`).
//!
//! When the agent is not root it cannot switch users or shrink the bounding
//! set: containers run as the agent's user (and `runAsNonRoot` is judged
//! against that uid), with `no_new_privs` when `setpriv` is there.

use std::ffi::OsString;

use crate::runtime::{RuntimeError, SecurityContext};

/// Every capability Linux knows (5.9 and later), named as `setpriv` and
/// `capabilities(7)` name them without their `CAP_` prefix, in bit order.
pub(crate) const ALL_CAPABILITIES: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// The capabilities Docker and containerd give a container by default.
pub(crate) const DEFAULT_CAPABILITIES: [&str; 14] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "FSETID",
    "FOWNER",
    "MKNOD",
    "NET_RAW",
    "SETGID",
    "SETUID",
    "SETFCAP",
    "SETPCAP",
    "NET_BIND_SERVICE",
    "SYS_CHROOT",
    "KILL",
    "AUDIT_WRITE",
];

/// What the host lets the runtime do, and its defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Powers {
    /// The agent is root and `setpriv` is there: users switch, the
    /// bounding set shrinks.
    pub switch_users: bool,
    /// `setpriv` is there (`no_new_privs` needs no privilege).
    pub setpriv: bool,
    /// The agent's own uid and gid (what containers run as when users do
    /// not switch).
    pub agent: (u32, u32),
    /// uid and gid of containers that name no user.
    pub default_user: (u32, u32),
}

/// A container's resolved identity and privileges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Privileges {
    /// The uid the program runs as.
    pub uid: u32,
    /// Its primary gid.
    pub gid: u32,
    /// Its supplementary groups (sorted, without duplicates).
    pub groups: Vec<u32>,
    /// Whether `setpriv` switches to `uid`/`gid`/`groups` (otherwise they
    /// are the agent's own).
    pub switch: bool,
    /// The capability bounding set; `None`: left as the agent's.
    pub bounding: Option<Vec<&'static str>>,
    /// Set `no_new_privs`.
    pub no_new_privs: bool,
}

/// `NET_ADMIN` and `CAP_NET_ADMIN` (any case) → the known name.
fn capability(name: &str) -> Result<&'static str, RuntimeError> {
    let upper = name.to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    ALL_CAPABILITIES
        .iter()
        .find(|c| **c == bare)
        .copied()
        .ok_or_else(|| RuntimeError::CreateFailed(format!("unknown capability {:?}", format!("CAP_{bare}"))))
}

fn id(value: i64, what: &str) -> Result<u32, RuntimeError> {
    u32::try_from(value)
        .ok()
        .filter(|v| *v != u32::MAX)
        .ok_or_else(|| RuntimeError::CreateFailed(format!("{what} {value} is not a valid id")))
}

/// The primary group of `uid` in the host's user database.
fn primary_group(uid: u32) -> Option<u32> {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)).ok().flatten().map(|user| user.gid.as_raw())
}

/// The bounding set: Docker's default, minus `drop`, plus `add`; `ALL`
/// drops (or adds) every capability, applied before the named ones as
/// containerd does.
fn bounding_set(sc: &SecurityContext) -> Result<Vec<&'static str>, RuntimeError> {
    let is_all = |c: &String| c.eq_ignore_ascii_case("ALL");
    let add =
        sc.add_capabilities.iter().filter(|c| !is_all(c)).map(|c| capability(c)).collect::<Result<Vec<_>, _>>()?;
    let drop =
        sc.drop_capabilities.iter().filter(|c| !is_all(c)).map(|c| capability(c)).collect::<Result<Vec<_>, _>>()?;
    let mut set: Vec<&'static str> = if sc.add_capabilities.iter().any(is_all) {
        ALL_CAPABILITIES.to_vec()
    } else if sc.drop_capabilities.iter().any(is_all) {
        Vec::new()
    } else {
        DEFAULT_CAPABILITIES.to_vec()
    };
    if !sc.add_capabilities.iter().any(is_all) {
        set.retain(|c| !drop.contains(c));
    }
    for cap in add {
        if !set.contains(&cap) {
            set.push(cap);
        }
    }
    // In bit order, as /proc/self/status shows them.
    set.sort_by_key(|c| ALL_CAPABILITIES.iter().position(|k| k == c));
    Ok(set)
}

impl Privileges {
    /// Resolves `sc` for container `container` of pod `pod` (the kubelet's
    /// `name_namespace(uid)`). Refuses a `runAsNonRoot` container that
    /// would run as root, and capabilities Linux does not know.
    pub(crate) fn resolve(
        sc: &SecurityContext,
        powers: &Powers,
        pod: &str,
        container: &str,
    ) -> Result<Self, RuntimeError> {
        let bounding = if sc.privileged { None } else { Some(bounding_set(sc)?) };
        let no_new_privs = powers.setpriv && !sc.privileged && sc.allow_privilege_escalation != Some(true);
        let groups = |list: &[i64]| -> Result<Vec<u32>, RuntimeError> {
            let mut groups = list.iter().map(|g| id(*g, "supplemental group")).collect::<Result<Vec<_>, _>>()?;
            groups.sort_unstable();
            groups.dedup();
            Ok(groups)
        };
        let privileges = if powers.switch_users {
            let uid = match sc.run_as_user {
                Some(uid) => id(uid, "runAsUser")?,
                None if sc.privileged => 0,
                None => powers.default_user.0,
            };
            let gid = match sc.run_as_group {
                Some(gid) => id(gid, "runAsGroup")?,
                None if sc.run_as_user.is_none() && !sc.privileged => powers.default_user.1,
                None => primary_group(uid).unwrap_or(powers.default_user.1),
            };
            Privileges { uid, gid, groups: groups(&sc.supplemental_groups)?, switch: true, bounding, no_new_privs }
        } else {
            Privileges {
                uid: powers.agent.0,
                gid: powers.agent.1,
                groups: Vec::new(),
                switch: false,
                bounding: None,
                no_new_privs,
            }
        };
        if sc.run_as_non_root && privileges.uid == 0 {
            let message = if sc.run_as_user == Some(0) {
                format!("container's runAsUser breaks non-root policy (pod: {pod:?}, container: {container})")
            } else {
                format!("container has runAsNonRoot and image will run as root (pod: {pod:?}, container: {container})")
            };
            return Err(RuntimeError::ConfigRefused(message));
        }
        Ok(privileges)
    }

    /// `setpriv`'s options (before `--`); empty when there is nothing to
    /// apply.
    pub(crate) fn setpriv_args(&self) -> Vec<OsString> {
        let mut args: Vec<String> = Vec::new();
        if self.switch {
            args.push(format!("--reuid={}", self.uid));
            args.push(format!("--regid={}", self.gid));
            if self.groups.is_empty() {
                args.push("--clear-groups".to_owned());
            } else {
                let list: Vec<String> = self.groups.iter().map(u32::to_string).collect();
                args.push(format!("--groups={}", list.join(",")));
            }
        }
        if let Some(bounding) = &self.bounding {
            let mut set = "-all".to_owned();
            for cap in bounding {
                set.push_str(",+");
                set.push_str(&cap.to_ascii_lowercase());
            }
            args.push(format!("--bounding-set={set}"));
            args.push("--inh-caps=-all".to_owned());
        }
        if self.no_new_privs {
            args.push("--no-new-privs".to_owned());
        }
        args.into_iter().map(OsString::from).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: Powers = Powers { switch_users: true, setpriv: true, agent: (0, 0), default_user: (65534, 65534) };

    fn sc() -> SecurityContext {
        SecurityContext::default()
    }

    fn args(p: &Privileges) -> String {
        p.setpriv_args().iter().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ")
    }

    const DEFAULT_SET: &str = "+chown,+dac_override,+fowner,+fsetid,+kill,+setgid,+setuid,+setpcap,\
                               +net_bind_service,+net_raw,+sys_chroot,+mknod,+audit_write,+setfcap";

    #[test]
    fn security_contexts_become_setpriv_arguments() {
        let not_root = Powers { switch_users: false, setpriv: true, agent: (1000, 1000), ..ROOT };
        let no_setpriv = Powers { switch_users: false, setpriv: false, agent: (0, 0), ..ROOT };
        // (what the pod asks, what the host allows, expected setpriv options)
        #[rustfmt::skip]
        let cases: Vec<(&str, SecurityContext, &Powers, String)> = vec![
            ("nothing set: nobody, default caps, no_new_privs", sc(), &ROOT,
             format!("--reuid=65534 --regid=65534 --clear-groups --bounding-set=-all,{DEFAULT_SET} --inh-caps=-all --no-new-privs")),
            ("runAsUser, runAsGroup, groups deduplicated",
             SecurityContext { run_as_user: Some(1000), run_as_group: Some(3000), supplemental_groups: vec![2000, 4000, 2000], ..sc() }, &ROOT,
             format!("--reuid=1000 --regid=3000 --groups=2000,4000 --bounding-set=-all,{DEFAULT_SET} --inh-caps=-all --no-new-privs")),
            ("root asked for: uid 0, its group from /etc/passwd",
             SecurityContext { run_as_user: Some(0), ..sc() }, &ROOT,
             format!("--reuid=0 --regid=0 --clear-groups --bounding-set=-all,{DEFAULT_SET} --inh-caps=-all --no-new-privs")),
            ("a uid unknown to /etc/passwd gets the default group, not 0",
             SecurityContext { run_as_user: Some(424242), ..sc() }, &ROOT,
             format!("--reuid=424242 --regid=65534 --clear-groups --bounding-set=-all,{DEFAULT_SET} --inh-caps=-all --no-new-privs")),
            ("drop ALL, add one (CAP_ prefix and case ignored)",
             SecurityContext { drop_capabilities: vec!["ALL".into()], add_capabilities: vec!["cap_net_bind_service".into()], ..sc() }, &ROOT,
             "--reuid=65534 --regid=65534 --clear-groups --bounding-set=-all,+net_bind_service --inh-caps=-all --no-new-privs".into()),
            ("drop some, add some",
             SecurityContext { drop_capabilities: vec!["NET_RAW".into(), "MKNOD".into(), "SETUID".into(), "SETGID".into(), "SETPCAP".into(),
                                                      "SETFCAP".into(), "AUDIT_WRITE".into(), "KILL".into(), "SYS_CHROOT".into(), "FSETID".into(),
                                                      "FOWNER".into(), "DAC_OVERRIDE".into()],
                               add_capabilities: vec!["NET_ADMIN".into()], ..sc() }, &ROOT,
             "--reuid=65534 --regid=65534 --clear-groups --bounding-set=-all,+chown,+net_bind_service,+net_admin --inh-caps=-all --no-new-privs".into()),
            ("add ALL keeps every capability in the bounding set",
             SecurityContext { add_capabilities: vec!["ALL".into()], drop_capabilities: vec!["NET_RAW".into()], ..sc() }, &ROOT,
             format!("--reuid=65534 --regid=65534 --clear-groups --bounding-set=-all,{} --inh-caps=-all --no-new-privs",
                     ALL_CAPABILITIES.iter().map(|c| format!("+{}", c.to_ascii_lowercase())).collect::<Vec<_>>().join(","))),
            ("allowPrivilegeEscalation: true lifts no_new_privs",
             SecurityContext { allow_privilege_escalation: Some(true), ..sc() }, &ROOT,
             format!("--reuid=65534 --regid=65534 --clear-groups --bounding-set=-all,{DEFAULT_SET} --inh-caps=-all")),
            ("allowPrivilegeEscalation: false sets it",
             SecurityContext { allow_privilege_escalation: Some(false), ..sc() }, &ROOT,
             format!("--reuid=65534 --regid=65534 --clear-groups --bounding-set=-all,{DEFAULT_SET} --inh-caps=-all --no-new-privs")),
            ("privileged: root, every capability, no no_new_privs",
             SecurityContext { privileged: true, ..sc() }, &ROOT,
             "--reuid=0 --regid=0 --clear-groups".into()),
            ("privileged with a user keeps the user",
             SecurityContext { privileged: true, run_as_user: Some(1000), run_as_group: Some(1000), ..sc() }, &ROOT,
             "--reuid=1000 --regid=1000 --clear-groups".into()),
            ("agent not root: its own user, no_new_privs only",
             SecurityContext { run_as_user: Some(2000), ..sc() }, &not_root,
             "--no-new-privs".into()),
            ("no setpriv: nothing to apply", sc(), &no_setpriv, String::new()),
        ];
        for (name, sc, powers, expected) in cases {
            let resolved = Privileges::resolve(&sc, powers, "p_ns(uid)", "c").unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(args(&resolved), expected, "{name}");
        }
    }

    #[test]
    fn run_as_non_root_and_bad_values_are_refused() {
        let no_setpriv = Powers { switch_users: false, setpriv: false, agent: (0, 0), ..ROOT };
        let non_root = |user: Option<i64>| SecurityContext { run_as_non_root: true, run_as_user: user, ..sc() };
        // (context, powers, expected error or the uid it runs as)
        #[rustfmt::skip]
        let cases: Vec<(SecurityContext, &Powers, Result<u32, String>)> = vec![
            (non_root(Some(0)), &ROOT,
             Err("container's runAsUser breaks non-root policy (pod: \"p_ns(uid)\", container: c)".into())),
            (non_root(None), &ROOT, Ok(65534)),
            (non_root(Some(1000)), &ROOT, Ok(1000)),
            (SecurityContext { privileged: true, ..non_root(None) }, &ROOT,
             Err("container has runAsNonRoot and image will run as root (pod: \"p_ns(uid)\", container: c)".into())),
            // The agent cannot switch: root it is.
            (non_root(Some(1000)), &no_setpriv,
             Err("container has runAsNonRoot and image will run as root (pod: \"p_ns(uid)\", container: c)".into())),
            (SecurityContext { add_capabilities: vec!["NET_FLY".into()], ..sc() }, &ROOT,
             Err("failed to create container: unknown capability \"CAP_NET_FLY\"".into())),
            (SecurityContext { run_as_user: Some(-1), ..sc() }, &ROOT,
             Err("failed to create container: runAsUser -1 is not a valid id".into())),
            (SecurityContext { supplemental_groups: vec![1 << 40], ..sc() }, &ROOT,
             Err(format!("failed to create container: supplemental group {} is not a valid id", 1i64 << 40))),
        ];
        for (sc, powers, expected) in cases {
            let got = Privileges::resolve(&sc, powers, "p_ns(uid)", "c").map(|p| p.uid).map_err(|e| e.to_string());
            assert_eq!(got, expected, "{sc:?}");
        }
        assert!(matches!(
            Privileges::resolve(&non_root(Some(0)), &ROOT, "p", "c"),
            Err(RuntimeError::ConfigRefused(_))
        ));
    }
}
