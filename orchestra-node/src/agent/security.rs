//! A container's effective security context, as the kubelet determines it:
//! the container's `securityContext` fields win over the pod's
//! (`runAsUser`, `runAsGroup`, `runAsNonRoot`); capabilities, `privileged`
//! and `allowPrivilegeEscalation` are the container's alone; the pod's
//! `fsGroup` and `supplementalGroups` become supplementary groups. The
//! runtime gets the result as a [`SecurityContext`]; volumes get the pod's
//! [`fs_user`] and `fsGroup` for their files' ownership.

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::runtime::SecurityContext;

/// What `container` of `pod` asks the runtime for.
pub(crate) fn container_security(pod: &Pod, container: &Container) -> SecurityContext {
    let pod_sc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let sc = container.security_context.as_ref();
    let mut supplemental_groups: Vec<i64> = pod_sc.and_then(|p| p.fs_group).into_iter().collect();
    supplemental_groups.extend(pod_sc.and_then(|p| p.supplemental_groups.clone()).unwrap_or_default());
    let caps = sc.and_then(|c| c.capabilities.as_ref());
    SecurityContext {
        run_as_user: sc.and_then(|c| c.run_as_user).or_else(|| pod_sc.and_then(|p| p.run_as_user)),
        run_as_group: sc.and_then(|c| c.run_as_group).or_else(|| pod_sc.and_then(|p| p.run_as_group)),
        supplemental_groups,
        run_as_non_root: sc.and_then(|c| c.run_as_non_root).or_else(|| pod_sc.and_then(|p| p.run_as_non_root))
            == Some(true),
        privileged: sc.and_then(|c| c.privileged) == Some(true),
        allow_privilege_escalation: sc.and_then(|c| c.allow_privilege_escalation),
        add_capabilities: caps.and_then(|c| c.add.clone()).unwrap_or_default(),
        drop_capabilities: caps.and_then(|c| c.drop.clone()).unwrap_or_default(),
    }
}

/// The uid every container of the pod (init containers included) runs
/// as, when they all name the same one (upstream's `FsUserFrom`): the
/// owner of the pod's projected service account tokens.
pub(crate) fn fs_user(pod: &Pod) -> Option<i64> {
    let spec = pod.spec.as_ref()?;
    let pod_user = spec.security_context.as_ref().and_then(|p| p.run_as_user);
    let mut user = None;
    for c in spec.init_containers.iter().flatten().chain(&spec.containers) {
        let uid = c.security_context.as_ref().and_then(|s| s.run_as_user).or(pod_user)?;
        if user.is_some_and(|u| u != uid) {
            return None;
        }
        user = Some(uid);
    }
    user
}

/// The pod's `fsGroup`.
pub(crate) fn fs_group(pod: &Pod) -> Option<i64> {
    pod.spec.as_ref()?.security_context.as_ref()?.fs_group
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Capabilities, PodSecurityContext, PodSpec, SecurityContext as ContainerSc};

    use super::*;

    fn pod(pod_sc: Option<PodSecurityContext>, containers: Vec<Option<ContainerSc>>) -> Pod {
        let containers = containers
            .into_iter()
            .enumerate()
            .map(|(i, sc)| Container { name: format!("c{i}"), security_context: sc, ..Default::default() })
            .collect();
        Pod { spec: Some(PodSpec { security_context: pod_sc, containers, ..Default::default() }), ..Default::default() }
    }

    #[test]
    fn the_container_wins_over_the_pod() {
        let pod_sc = PodSecurityContext {
            run_as_user: Some(1000),
            run_as_group: Some(2000),
            run_as_non_root: Some(true),
            fs_group: Some(3000),
            supplemental_groups: Some(vec![4000, 5000]),
            ..Default::default()
        };
        // (pod's, container's, expected)
        #[rustfmt::skip]
        let cases: Vec<(Option<PodSecurityContext>, Option<ContainerSc>, SecurityContext)> = vec![
            (None, None, SecurityContext::default()),
            (Some(pod_sc.clone()), None, SecurityContext {
                run_as_user: Some(1000), run_as_group: Some(2000), run_as_non_root: true,
                supplemental_groups: vec![3000, 4000, 5000], ..Default::default() }),
            (Some(pod_sc.clone()),
             Some(ContainerSc { run_as_user: Some(0), run_as_non_root: Some(false), ..Default::default() }),
             SecurityContext { run_as_user: Some(0), run_as_group: Some(2000), run_as_non_root: false,
                               supplemental_groups: vec![3000, 4000, 5000], ..Default::default() }),
            (None,
             Some(ContainerSc {
                 privileged: Some(true), allow_privilege_escalation: Some(true),
                 capabilities: Some(Capabilities { add: Some(vec!["NET_ADMIN".into()]), drop: Some(vec!["ALL".into()]) }),
                 ..Default::default() }),
             SecurityContext { privileged: true, allow_privilege_escalation: Some(true),
                               add_capabilities: vec!["NET_ADMIN".into()], drop_capabilities: vec!["ALL".into()],
                               ..Default::default() }),
            (None, Some(ContainerSc { allow_privilege_escalation: Some(false), ..Default::default() }),
             SecurityContext { allow_privilege_escalation: Some(false), ..Default::default() }),
        ];
        for (pod_sc, sc, expected) in cases {
            let p = pod(pod_sc, vec![sc]);
            let c = &p.spec.as_ref().unwrap().containers[0];
            assert_eq!(container_security(&p, c), expected);
        }
    }

    #[test]
    fn fs_user_needs_one_user_for_every_container() {
        let user = |uid: i64| Some(ContainerSc { run_as_user: Some(uid), ..Default::default() });
        let pod_user = Some(PodSecurityContext { run_as_user: Some(7), fs_group: Some(9), ..Default::default() });
        // (pod's, containers', expected fsUser)
        type Case = (Option<PodSecurityContext>, Vec<Option<ContainerSc>>, Option<i64>);
        #[rustfmt::skip]
        let cases: Vec<Case> = vec![
            (None, vec![None], None),
            (None, vec![user(5), user(5)], Some(5)),
            (None, vec![user(5), user(6)], None),
            (None, vec![user(5), None], None),
            (pod_user.clone(), vec![None, user(7)], Some(7)),
            (pod_user.clone(), vec![None, user(8)], None),
        ];
        for (pod_sc, containers, expected) in cases {
            assert_eq!(fs_user(&pod(pod_sc, containers)), expected);
        }
        assert_eq!(fs_group(&pod(pod_user, vec![None])), Some(9));
        assert_eq!(fs_group(&pod(None, vec![None])), None);
    }
}
