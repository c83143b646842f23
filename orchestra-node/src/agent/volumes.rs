//! Pod volumes as host directories, as the kubelet lays them out:
//! `<root_dir>/pods/<uid>/volumes/kubernetes.io~<kind>/<name>`. emptyDir is
//! an empty directory; configMap, secret, downwardAPI and projected volumes
//! are directories of files written from their sources (rewritten on every
//! resync, stale files removed; projected service account tokens come from
//! [`tokens`](super::tokens)); hostPath is the host path itself. Containers
//! get them as [`Mount`]s (with `subPath`).
//!
//! Ownership, as the kubelet sets it, so that a container running as an
//! unprivileged user reads its volumes: an emptyDir is mode 0777; with the
//! pod's `fsGroup`, every file and directory of an emptyDir, configMap,
//! secret, downwardAPI or projected volume belongs to that group, files
//! group-readable (and group-writable in an emptyDir), directories
//! set-gid. A projected service account token is mode 0600 when the pod
//! has an `fsGroup` or all its containers run as one user, and then
//! owned by that user (else the volume's `defaultMode`, 0644).

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{ConfigMap, Container, DownwardAPIVolumeFile, KeyToPath, Pod, Secret, Volume};

use super::env::{EnvContext, ObjectRef, Objects, field_value, format_map, resource_value};
use super::security;
use crate::runtime::Mount;

/// Why a pod's volumes cannot be set up (event `FailedMount`; the pod waits
/// in `ContainerCreating`).
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// A non-optional ConfigMap is missing.
    #[error("MountVolume.SetUp failed for volume {volume:?} : configmap {name:?} not found")]
    ConfigMapNotFound {
        /// The volume.
        volume: String,
        /// The ConfigMap.
        name: String,
    },
    /// A non-optional Secret is missing.
    #[error("MountVolume.SetUp failed for volume {volume:?} : secret {name:?} not found")]
    SecretNotFound {
        /// The volume.
        volume: String,
        /// The Secret.
        name: String,
    },
    /// An item names a key the object lacks.
    #[error("MountVolume.SetUp failed for volume {volume:?} : configmap or secret {name:?} has no key {key:?}")]
    KeyNotFound {
        /// The volume.
        volume: String,
        /// The object.
        name: String,
        /// The key.
        key: String,
    },
    /// A path escapes its volume (`..`, absolute).
    #[error("MountVolume.SetUp failed for volume {volume:?} : invalid path {path:?}")]
    InvalidPath {
        /// The volume.
        volume: String,
        /// The path.
        path: String,
    },
    /// A downward API item could not be computed.
    #[error("MountVolume.SetUp failed for volume {volume:?} : {message}")]
    DownwardApi {
        /// The volume.
        volume: String,
        /// Why.
        message: String,
    },
    /// A projected service account token could not be had.
    #[error("MountVolume.SetUp failed for volume {volume:?} : failed to fetch token: {message}")]
    Token {
        /// The volume.
        volume: String,
        /// Why (the API's refusal).
        message: String,
    },
    /// A volume mount names no volume of the pod.
    #[error("volume {0:?} not found in the pod")]
    NoSuchVolume(String),
    /// The host filesystem failed.
    #[error("MountVolume.SetUp failed: {0}")]
    Io(#[from] std::io::Error),
}

/// `<root_dir>/pods/<uid>`.
pub fn pod_dir(root_dir: &Path, uid: &str) -> PathBuf {
    root_dir.join("pods").join(uid)
}

/// The ConfigMaps and Secrets a pod's volumes refer to.
pub fn volume_references(pod: &Pod) -> Vec<ObjectRef> {
    let mut out = Vec::new();
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        if let Some(cm) = &v.config_map {
            out.push((false, cm.name.clone()));
        }
        if let Some(s) = &v.secret {
            out.push((true, s.secret_name.clone().unwrap_or_default()));
        }
        for source in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(cm) = &source.config_map {
                out.push((false, cm.name.clone()));
            }
            if let Some(s) = &source.secret {
                out.push((true, s.name.clone()));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

fn kind_of(v: &Volume) -> &'static str {
    if v.config_map.is_some() {
        "configmap"
    } else if v.secret.is_some() {
        "secret"
    } else if v.downward_api.is_some() {
        "downward-api"
    } else if v.projected.is_some() {
        "projected"
    } else {
        "empty-dir"
    }
}

fn check_relative(volume: &str, path: &str) -> Result<PathBuf, VolumeError> {
    let p = Path::new(path);
    if path.is_empty() || !p.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(VolumeError::InvalidPath { volume: volume.into(), path: path.into() });
    }
    Ok(p.to_path_buf())
}

/// Files of one volume: relative path → (content, mode, owner uid when
/// not root).
type Files = BTreeMap<PathBuf, (Vec<u8>, u32, Option<u32>)>;

/// Who a pod's volume files belong to: the pod's `fsGroup`, and the one
/// user all its containers run as ([`security::fs_user`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Ownership {
    user: Option<u32>,
    group: Option<u32>,
}

impl Ownership {
    fn of(pod: &Pod) -> Self {
        let id = |v: Option<i64>| v.and_then(|v| u32::try_from(v).ok());
        Ownership { user: id(security::fs_user(pod)), group: id(security::fs_group(pod)) }
    }
}

/// A file or directory's mode with `fsGroup`'s bits (upstream's
/// `SetVolumeOwnership`): group-readable (and writable unless
/// `read_only`), directories group-searchable and set-gid.
fn group_mode(mode: u32, dir: bool, read_only: bool) -> u32 {
    let mut mode = mode | if read_only { 0o440 } else { 0o660 };
    if dir {
        mode |= 0o2000 | 0o110;
    }
    mode
}

/// `path` handed to `user` (when given) and `group` (when given).
fn chown(path: &Path, user: Option<u32>, group: Option<u32>) -> std::io::Result<()> {
    if user.is_none() && group.is_none() {
        return Ok(());
    }
    std::os::unix::fs::lchown(path, user, group)
}

/// An emptyDir (or a writable directory below one): mode 0777, or with an
/// `fsGroup`, owned by it, group-writable and set-gid.
fn writable_dir(dir: &Path, group: Option<u32>) -> std::io::Result<()> {
    if dir.is_dir() {
        // Set up once: what the containers do to it later is theirs.
        return Ok(());
    }
    std::fs::create_dir_all(dir)?;
    let mode = match group {
        Some(_) => group_mode(0o777, true, false),
        None => 0o777,
    };
    chown(dir, None, group)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
}

fn key_files(
    volume: &str,
    name: &str,
    data: BTreeMap<String, Vec<u8>>,
    items: Option<&Vec<KeyToPath>>,
    default_mode: u32,
    files: &mut Files,
) -> Result<(), VolumeError> {
    match items {
        Some(items) if !items.is_empty() => {
            for item in items {
                let content = data.get(&item.key).ok_or_else(|| VolumeError::KeyNotFound {
                    volume: volume.into(),
                    name: name.into(),
                    key: item.key.clone(),
                })?;
                let mode = item.mode.map(|m| m as u32).unwrap_or(default_mode);
                files.insert(check_relative(volume, &item.path)?, (content.clone(), mode, None));
            }
        }
        _ => {
            for (key, content) in data {
                files.insert(check_relative(volume, &key)?, (content, default_mode, None));
            }
        }
    }
    Ok(())
}

fn config_map_bytes(cm: &ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut data: BTreeMap<String, Vec<u8>> =
        cm.data.iter().flatten().map(|(k, v)| (k.clone(), v.clone().into_bytes())).collect();
    for (k, v) in cm.binary_data.iter().flatten() {
        data.insert(k.clone(), v.0.clone());
    }
    data
}

fn secret_bytes(s: &Secret) -> BTreeMap<String, Vec<u8>> {
    let mut data: BTreeMap<String, Vec<u8>> = s.data.iter().flatten().map(|(k, v)| (k.clone(), v.0.clone())).collect();
    for (k, v) in s.string_data.iter().flatten() {
        data.insert(k.clone(), v.clone().into_bytes());
    }
    data
}

fn downward_files(
    volume: &str,
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    default_mode: u32,
    ctx: &EnvContext,
    files: &mut Files,
) -> Result<(), VolumeError> {
    let err = |message: String| VolumeError::DownwardApi { volume: volume.into(), message };
    for item in items {
        let value = if let Some(field) = &item.field_ref {
            match field.field_path.as_str() {
                "metadata.labels" => format_map(pod.metadata.labels.as_ref()),
                "metadata.annotations" => format_map(pod.metadata.annotations.as_ref()),
                _ => field_value(pod, field, ctx).map_err(|e| err(e.to_string()))?,
            }
        } else if let Some(resource) = &item.resource_field_ref {
            let name = resource.container_name.clone().unwrap_or_default();
            let container = pod
                .spec
                .iter()
                .flat_map(|s| s.containers.iter().chain(s.init_containers.iter().flatten()))
                .find(|c| c.name == name)
                .ok_or_else(|| err(format!("container {name:?} not found")))?;
            resource_value(container, resource, ctx).map_err(|e| err(e.to_string()))?
        } else {
            continue;
        };
        let mode = item.mode.map(|m| m as u32).unwrap_or(default_mode);
        files.insert(check_relative(volume, &item.path)?, (value.into_bytes(), mode, None));
    }
    Ok(())
}

/// The files a content volume should hold (`None` for emptyDir-like ones).
fn volume_files(
    pod: &Pod,
    v: &Volume,
    objects: &Objects,
    ctx: &EnvContext,
    owners: Ownership,
) -> Result<Option<Files>, VolumeError> {
    let mut files = Files::new();
    let volume = v.name.as_str();
    if let Some(cm) = &v.config_map {
        let mode = cm.default_mode.map(|m| m as u32).unwrap_or(0o644);
        match objects.config_maps.get(&cm.name).cloned().flatten() {
            Some(found) => key_files(volume, &cm.name, config_map_bytes(&found), cm.items.as_ref(), mode, &mut files)?,
            None if cm.optional == Some(true) => {}
            None => return Err(VolumeError::ConfigMapNotFound { volume: volume.into(), name: cm.name.clone() }),
        }
    } else if let Some(s) = &v.secret {
        let name = s.secret_name.clone().unwrap_or_default();
        let mode = s.default_mode.map(|m| m as u32).unwrap_or(0o644);
        match objects.secrets.get(&name).cloned().flatten() {
            Some(found) => key_files(volume, &name, secret_bytes(&found), s.items.as_ref(), mode, &mut files)?,
            None if s.optional == Some(true) => {}
            None => return Err(VolumeError::SecretNotFound { volume: volume.into(), name }),
        }
    } else if let Some(d) = &v.downward_api {
        let mode = d.default_mode.map(|m| m as u32).unwrap_or(0o644);
        downward_files(volume, pod, d.items.as_deref().unwrap_or_default(), mode, ctx, &mut files)?;
    } else if let Some(p) = &v.projected {
        let default_mode = p.default_mode.map(|m| m as u32).unwrap_or(0o644);
        for source in p.sources.iter().flatten() {
            if let Some(cm) = &source.config_map {
                match objects.config_maps.get(&cm.name).cloned().flatten() {
                    Some(found) => key_files(
                        volume,
                        &cm.name,
                        config_map_bytes(&found),
                        cm.items.as_ref(),
                        default_mode,
                        &mut files,
                    )?,
                    None if cm.optional == Some(true) => {}
                    None => {
                        return Err(VolumeError::ConfigMapNotFound { volume: volume.into(), name: cm.name.clone() });
                    }
                }
            }
            if let Some(s) = &source.secret {
                match objects.secrets.get(&s.name).cloned().flatten() {
                    Some(found) => {
                        key_files(volume, &s.name, secret_bytes(&found), s.items.as_ref(), default_mode, &mut files)?
                    }
                    None if s.optional == Some(true) => {}
                    None => return Err(VolumeError::SecretNotFound { volume: volume.into(), name: s.name.clone() }),
                }
            }
            if let Some(d) = &source.downward_api {
                downward_files(volume, pod, d.items.as_deref().unwrap_or_default(), default_mode, ctx, &mut files)?;
            }
            if let Some(t) = &source.service_account_token {
                let key = (t.audience.clone().unwrap_or_default(), t.expiration_seconds);
                let token = match objects.tokens.get(&key) {
                    Some(Ok(token)) => token.clone(),
                    Some(Err(message)) => {
                        return Err(VolumeError::Token { volume: volume.into(), message: message.clone() });
                    }
                    None => {
                        let message = "no token was requested".to_owned();
                        return Err(VolumeError::Token { volume: volume.into(), message });
                    }
                };
                // Private to the pod's user or group when it has one.
                let mode = if owners.user.is_some() || owners.group.is_some() { 0o600 } else { default_mode };
                files.insert(check_relative(volume, &t.path)?, (token.into_bytes(), mode, owners.user));
            }
        }
    } else {
        return Ok(None);
    }
    Ok(Some(files))
}

fn sync_files(dir: &Path, files: &Files, group: Option<u32>) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    if group.is_some() {
        chown(dir, None, group)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(group_mode(0o755, true, true)))?;
    }
    // Remove what is no longer wanted.
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        for entry in std::fs::read_dir(&current)? {
            let entry = entry?;
            let path = entry.path();
            let relative = path.strip_prefix(dir).unwrap_or(&path).to_path_buf();
            if entry.file_type()?.is_dir() {
                if files.keys().any(|f| f.starts_with(&relative)) {
                    stack.push(path);
                } else {
                    std::fs::remove_dir_all(&path)?;
                }
            } else if !files.contains_key(&relative) {
                std::fs::remove_file(&path)?;
            }
        }
    }
    for (relative, (content, mode, user)) in files {
        let path = dir.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
            if group.is_some() {
                for sub in relative.ancestors().skip(1).filter(|a| !a.as_os_str().is_empty()) {
                    let sub = dir.join(sub);
                    chown(&sub, None, group)?;
                    std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(group_mode(0o755, true, true)))?;
                }
            }
        }
        let mode = if group.is_some() { group_mode(*mode, false, true) } else { *mode };
        let (want_uid, want_gid) = (user.unwrap_or(0), group.unwrap_or(0));
        let same = std::fs::read(&path).is_ok_and(|old| &old == content)
            && std::fs::metadata(&path).is_ok_and(|m| {
                use std::os::unix::fs::MetadataExt;
                m.permissions().mode() & 0o7777 == mode
                    && (user.is_none() || m.uid() == want_uid)
                    && (group.is_none() || m.gid() == want_gid)
            });
        if same {
            continue;
        }
        let tmp = path.with_file_name(format!(
            ".{}.tmp",
            path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
        ));
        {
            let mut file = std::fs::File::create(&tmp)?;
            file.write_all(content)?;
        }
        chown(&tmp, *user, group)?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
        std::fs::rename(&tmp, &path)?;
    }
    Ok(())
}

/// Creates (or refreshes) every volume of `pod` under `root_dir`; returns the
/// host directory of each volume by name.
pub fn setup_volumes(
    root_dir: &Path,
    pod: &Pod,
    objects: &Objects,
    ctx: &EnvContext,
) -> Result<HashMap<String, PathBuf>, VolumeError> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let base = pod_dir(root_dir, &uid).join("volumes");
    let owners = Ownership::of(pod);
    let mut out = HashMap::new();
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        if let Some(host) = &v.host_path {
            let path = PathBuf::from(&host.path);
            if matches!(host.type_.as_deref(), Some("DirectoryOrCreate")) {
                std::fs::create_dir_all(&path)?;
            } else if matches!(host.type_.as_deref(), Some("FileOrCreate")) && !path.exists() {
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::File::create(&path)?;
            }
            out.insert(v.name.clone(), path);
            continue;
        }
        let dir = base.join(format!("kubernetes.io~{}", kind_of(v))).join(&v.name);
        match volume_files(pod, v, objects, ctx, owners)? {
            Some(files) => sync_files(&dir, &files, owners.group)?,
            None => writable_dir(&dir, owners.group)?,
        }
        out.insert(v.name.clone(), dir);
    }
    Ok(out)
}

/// Whether volume `name` of `pod` is one whose content the agent writes
/// (mounted read-only, as Kubernetes does).
fn read_only_volume(pod: &Pod, name: &str) -> bool {
    pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()).find(|v| v.name == name).is_some_and(|v| {
        v.config_map.is_some() || v.secret.is_some() || v.downward_api.is_some() || v.projected.is_some()
    })
}

/// The mounts of `container` given the volumes' host directories.
/// `subPath`s are created inside writable volumes when missing.
pub fn container_mounts(
    pod: &Pod,
    container: &Container,
    volumes: &HashMap<String, PathBuf>,
) -> Result<Vec<Mount>, VolumeError> {
    let mut mounts = Vec::new();
    for m in container.volume_mounts.iter().flatten() {
        let dir = volumes.get(&m.name).ok_or_else(|| VolumeError::NoSuchVolume(m.name.clone()))?;
        let read_only = m.read_only.unwrap_or(false) || read_only_volume(pod, &m.name);
        let host_path = match m.sub_path.as_deref().filter(|s| !s.is_empty()) {
            Some(sub) => {
                let sub = check_relative(&m.name, sub)?;
                let path = dir.join(sub);
                if !path.exists() && !read_only {
                    // With the volume's own mode and group, as the kubelet
                    // makes a missing subPath.
                    std::fs::create_dir_all(&path)?;
                    let root = std::fs::metadata(dir)?;
                    std::os::unix::fs::lchown(&path, None, Some(std::os::unix::fs::MetadataExt::gid(&root)))?;
                    std::fs::set_permissions(
                        &path,
                        std::fs::Permissions::from_mode(root.permissions().mode() & 0o7777),
                    )?;
                }
                path
            }
            None => dir.clone(),
        };
        mounts.push(Mount { container_path: PathBuf::from(&m.mount_path), host_path, read_only });
    }
    Ok(mounts)
}

/// Removes everything the agent kept for the pod (`<root_dir>/pods/<uid>`).
pub fn cleanup(root_dir: &Path, uid: &str) -> std::io::Result<()> {
    match std::fs::remove_dir_all(pod_dir(root_dir, uid)) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::{
        ConfigMapVolumeSource, DownwardAPIVolumeSource, EmptyDirVolumeSource, ObjectFieldSelector, PodSpec,
        ProjectedVolumeSource, SecretProjection, SecretVolumeSource, VolumeMount, VolumeProjection,
    };
    use kube::api::ObjectMeta;

    fn volume(name: &str) -> Volume {
        Volume { name: name.into(), ..Default::default() }
    }

    #[test]
    fn volumes_are_written_mounted_refreshed_and_removed() {
        let root = tempfile::tempdir().unwrap();
        let mut cfg = volume("cfg");
        cfg.config_map = Some(ConfigMapVolumeSource {
            name: "app".into(),
            items: Some(vec![KeyToPath { key: "a".into(), path: "dir/a.txt".into(), mode: Some(0o600) }]),
            ..Default::default()
        });
        let mut sec = volume("sec");
        sec.secret = Some(SecretVolumeSource {
            secret_name: Some("creds".into()),
            default_mode: Some(0o400),
            ..Default::default()
        });
        let mut down = volume("info");
        down.downward_api = Some(DownwardAPIVolumeSource {
            items: Some(vec![
                DownwardAPIVolumeFile {
                    path: "labels".into(),
                    field_ref: Some(ObjectFieldSelector { field_path: "metadata.labels".into(), api_version: None }),
                    ..Default::default()
                },
                DownwardAPIVolumeFile {
                    path: "name".into(),
                    field_ref: Some(ObjectFieldSelector { field_path: "metadata.name".into(), api_version: None }),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        });
        let mut proj = volume("all");
        proj.projected = Some(ProjectedVolumeSource {
            sources: Some(vec![VolumeProjection {
                secret: Some(SecretProjection { name: "missing".into(), optional: Some(true), ..Default::default() }),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let mut scratch = volume("scratch");
        scratch.empty_dir = Some(EmptyDirVolumeSource::default());
        let container = Container {
            name: "c".into(),
            volume_mounts: Some(vec![
                VolumeMount { name: "cfg".into(), mount_path: "/etc/app".into(), ..Default::default() },
                VolumeMount {
                    name: "scratch".into(),
                    mount_path: "/data".into(),
                    sub_path: Some("sub".into()),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                uid: Some("uid-1".into()),
                labels: Some([("app".to_string(), "web".to_string()), ("tier".to_string(), "1".to_string())].into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![container.clone()],
                volumes: Some(vec![cfg, sec, down, proj, scratch]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            volume_references(&pod),
            [(false, "app".to_string()), (true, "creds".to_string()), (true, "missing".to_string())]
        );
        let mut objects = Objects::default();
        assert!(matches!(
            setup_volumes(root.path(), &pod, &objects, &EnvContext::default()),
            Err(VolumeError::ConfigMapNotFound { .. })
        ));
        objects.config_maps.insert(
            "app".into(),
            Some(ConfigMap { data: Some([("a".to_string(), "one".to_string())].into()), ..Default::default() }),
        );
        objects.secrets.insert(
            "creds".into(),
            Some(Secret {
                data: Some([("pw".to_string(), ByteString(b"hunter2".to_vec()))].into()),
                ..Default::default()
            }),
        );
        objects.secrets.insert("missing".into(), None);
        let dirs = setup_volumes(root.path(), &pod, &objects, &EnvContext::default()).unwrap();
        let read = |v: &str, f: &str| std::fs::read_to_string(dirs[v].join(f)).unwrap();
        assert_eq!(read("cfg", "dir/a.txt"), "one");
        assert_eq!(std::fs::metadata(dirs["cfg"].join("dir/a.txt")).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(read("sec", "pw"), "hunter2");
        assert_eq!(std::fs::metadata(dirs["sec"].join("pw")).unwrap().permissions().mode() & 0o777, 0o400);
        assert_eq!(read("info", "labels"), "app=\"web\"\ntier=\"1\"");
        assert_eq!(read("info", "name"), "p");
        assert!(dirs["scratch"].ends_with("pods/uid-1/volumes/kubernetes.io~empty-dir/scratch"));
        let mounts = container_mounts(&pod, &container, &dirs).unwrap();
        assert_eq!(mounts[0].container_path, PathBuf::from("/etc/app"));
        assert!(mounts[0].read_only);
        assert!(!mounts[1].read_only);
        assert!(mounts[1].host_path.ends_with("scratch/sub") && mounts[1].host_path.is_dir());

        // A changed ConfigMap is rewritten, stale keys disappear.
        objects.config_maps.insert(
            "app".into(),
            Some(ConfigMap { data: Some([("b".to_string(), "two".to_string())].into()), ..Default::default() }),
        );
        let mut pod2 = pod.clone();
        pod2.spec.as_mut().unwrap().volumes.as_mut().unwrap()[0].config_map.as_mut().unwrap().items = None;
        let dirs = setup_volumes(root.path(), &pod2, &objects, &EnvContext::default()).unwrap();
        assert_eq!(read("cfg", "b"), "two");
        assert!(!dirs["cfg"].join("dir").exists());

        cleanup(root.path(), "uid-1").unwrap();
        assert!(!pod_dir(root.path(), "uid-1").exists());
        cleanup(root.path(), "uid-1").unwrap();
    }

    #[test]
    fn projected_tokens_are_written_with_their_path_and_mode_or_fail_the_mount() {
        use k8s_openapi::api::core::v1::ServiceAccountTokenProjection;
        let root = tempfile::tempdir().unwrap();
        let mut access = volume("kube-api-access-x");
        access.projected = Some(ProjectedVolumeSource {
            default_mode: Some(0o640),
            sources: Some(vec![
                VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        path: "token".into(),
                        expiration_seconds: Some(3607),
                        audience: None,
                    }),
                    ..Default::default()
                },
                VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        path: "vault/token".into(),
                        expiration_seconds: None,
                        audience: Some("vault".into()),
                    }),
                    ..Default::default()
                },
            ]),
        });
        let pod = Pod {
            metadata: ObjectMeta { name: Some("p".into()), uid: Some("uid-2".into()), ..Default::default() },
            spec: Some(PodSpec { volumes: Some(vec![access]), ..Default::default() }),
            ..Default::default()
        };
        let api = (String::new(), Some(3607));
        let vault = ("vault".to_owned(), None);
        let refused = "serviceaccounts \"default\" is forbidden: nope".to_owned();
        type Tokens = Vec<(crate::agent::tokens::TokenKey, Result<String, String>)>;
        /// The two tokens as written, or the mount's error.
        type Written = Result<(&'static str, &'static str), String>;
        let setup = |tokens: Tokens| {
            let objects = Objects { tokens: tokens.into_iter().collect(), ..Default::default() };
            setup_volumes(root.path(), &pod, &objects, &EnvContext::default())
        };
        // (tokens at hand, expected: (token, vault token) or the error)
        #[rustfmt::skip]
        let cases: Vec<(Tokens, Written)> = vec![
            (vec![(api.clone(), Ok("one".into())), (vault.clone(), Ok("v1".into()))], Ok(("one", "v1"))),
            // A refreshed token replaces the file.
            (vec![(api.clone(), Ok("two".into())), (vault.clone(), Ok("v1".into()))], Ok(("two", "v1"))),
            (vec![(api.clone(), Ok("two".into())), (vault.clone(), Err(refused.clone()))],
             Err(format!("MountVolume.SetUp failed for volume \"kube-api-access-x\" : failed to fetch token: {refused}"))),
            (vec![(api.clone(), Ok("two".into()))],
             Err("MountVolume.SetUp failed for volume \"kube-api-access-x\" : failed to fetch token: no token was requested".into())),
        ];
        for (tokens, expected) in cases {
            let outcome = setup(tokens).map_err(|e| e.to_string()).map(|dirs| {
                let dir = &dirs["kube-api-access-x"];
                let mode = std::fs::metadata(dir.join("token")).unwrap().permissions().mode() & 0o777;
                assert_eq!(mode, 0o640);
                (
                    std::fs::read_to_string(dir.join("token")).unwrap(),
                    std::fs::read_to_string(dir.join("vault/token")).unwrap(),
                )
            });
            assert_eq!(outcome, expected.map(|(a, b)| (a.to_owned(), b.to_owned())));
        }
    }

    #[test]
    fn volumes_belong_to_the_pods_user_and_fs_group() {
        use k8s_openapi::api::core::v1::{PodSecurityContext, SecurityContext, ServiceAccountTokenProjection};
        use std::os::unix::fs::MetadataExt;
        let mut access = volume("token");
        access.projected = Some(ProjectedVolumeSource {
            sources: Some(vec![VolumeProjection {
                service_account_token: Some(ServiceAccountTokenProjection {
                    path: "token".into(),
                    expiration_seconds: None,
                    audience: None,
                }),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let mut cfg = volume("cfg");
        cfg.config_map = Some(ConfigMapVolumeSource { name: "app".into(), ..Default::default() });
        let mut scratch = volume("scratch");
        scratch.empty_dir = Some(EmptyDirVolumeSource::default());
        let pod = |pod_sc: Option<PodSecurityContext>, user: Option<i64>| Pod {
            metadata: ObjectMeta { name: Some("p".into()), uid: Some("uid-own".into()), ..Default::default() },
            spec: Some(PodSpec {
                security_context: pod_sc,
                containers: vec![Container {
                    name: "c".into(),
                    security_context: Some(SecurityContext { run_as_user: user, ..Default::default() }),
                    ..Default::default()
                }],
                volumes: Some(vec![access.clone(), cfg.clone(), scratch.clone()]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let objects = Objects {
            tokens: [((String::new(), None), Ok("t".to_owned()))].into(),
            config_maps: [(
                "app".to_owned(),
                Some(ConfigMap { data: Some([("a".to_string(), "one".to_string())].into()), ..Default::default() }),
            )]
            .into(),
            ..Default::default()
        };
        let group = |g: i64| Some(PodSecurityContext { fs_group: Some(g), ..Default::default() });
        // (pod, expected (mode, uid, gid) of: token, configMap file, emptyDir)
        type Owned = (u32, u32, u32);
        #[rustfmt::skip]
        let cases: Vec<(Pod, [Owned; 3])> = vec![
            // Nothing set: readable by anyone, an emptyDir writable by anyone.
            (pod(None, None), [(0o644, 0, 0), (0o644, 0, 0), (0o777, 0, 0)]),
            // One user: the token is theirs alone.
            (pod(None, Some(1000)), [(0o600, 1000, 0), (0o644, 0, 0), (0o777, 0, 0)]),
            // fsGroup: group-readable, set-gid emptyDir.
            (pod(group(2000), None), [(0o640, 0, 2000), (0o644, 0, 2000), (0o2777, 0, 2000)]),
            (pod(group(2000), Some(1000)), [(0o640, 1000, 2000), (0o644, 0, 2000), (0o2777, 0, 2000)]),
        ];
        for (pod, expected) in cases {
            let root = tempfile::tempdir().unwrap();
            let dirs = setup_volumes(root.path(), &pod, &objects, &EnvContext::default()).unwrap();
            let owned = |path: PathBuf| {
                let m = std::fs::metadata(path).unwrap();
                (m.permissions().mode() & 0o7777, m.uid(), m.gid())
            };
            let got =
                [owned(dirs["token"].join("token")), owned(dirs["cfg"].join("a")), owned(dirs["scratch"].clone())];
            assert_eq!(got, expected, "{:?}", pod.spec.unwrap().security_context);
            // A second sync leaves them as they are.
            setup_volumes(root.path(), &pod, &objects, &EnvContext::default()).unwrap();
            assert_eq!(owned(dirs["token"].join("token")), expected[0]);
        }
    }

    #[test]
    fn paths_cannot_escape() {
        assert!(check_relative("v", "../x").is_err());
        assert!(check_relative("v", "/etc/passwd").is_err());
        assert!(check_relative("v", "a/b").is_ok());
    }
}
