//! Static pods: pods read from manifest files on the node rather than from
//! the API server, and the mirror pods that show them in the API.
//!
//! A manifest `web.yaml` holding pod `web` on node `n1` runs as pod
//! `web-n1`, whose UID (and `kubernetes.io/config.hash`) derives from the
//! manifest's content, the file and the node, so an edited manifest is a new
//! pod: the old one is stopped, the new one started.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Pod, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

/// Annotation: where a pod came from (`file`, `api`).
pub const ANNOTATION_CONFIG_SOURCE: &str = "kubernetes.io/config.source";
/// Annotation: the static pod's hash (its UID on the node).
pub const ANNOTATION_CONFIG_HASH: &str = "kubernetes.io/config.hash";
/// Annotation: marks a mirror pod; its value is the static pod's hash.
pub const ANNOTATION_CONFIG_MIRROR: &str = "kubernetes.io/config.mirror";
/// Annotation: when the agent first saw the manifest.
pub const ANNOTATION_CONFIG_SEEN: &str = "kubernetes.io/config.seen";

/// A manifest that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StaticPodError {
    /// Not a Pod in YAML or JSON.
    #[error("{file}: {message}")]
    Invalid {
        /// The file.
        file: String,
        /// Why.
        message: String,
    },
    /// The directory cannot be read.
    #[error("reading {0}: {1}")]
    Io(String, std::io::Error),
}

/// A static pod read from a manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct StaticPod {
    /// The manifest it came from.
    pub file: PathBuf,
    /// The pod as the agent runs it (name, UID, annotations, node set).
    pub pod: Pod,
}

impl StaticPod {
    /// Its UID (= its config hash).
    pub fn uid(&self) -> &str {
        self.pod.metadata.uid.as_deref().unwrap_or_default()
    }
}

/// A stable 128-bit hash (two FNV-1a 64-bit lanes) as 32 hex digits.
pub fn stable_hash(parts: &[&[u8]]) -> String {
    let lane = |seed: u64| {
        let mut h = seed;
        for part in parts {
            for &b in part.iter().chain(&[0xffu8]) {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x100_0000_01b3);
            }
        }
        h
    };
    format!("{:016x}{:016x}", lane(0xcbf2_9ce4_8422_2325), lane(0x84222325_cbf29ce4))
}

/// Parses one manifest into the static pod the agent runs.
pub fn parse_manifest(file: &Path, content: &[u8], node_name: &str) -> Result<StaticPod, StaticPodError> {
    let invalid = |message: String| StaticPodError::Invalid { file: file.display().to_string(), message };
    let value: serde_json::Value = serde_yaml::from_slice(content).map_err(|e| invalid(e.to_string()))?;
    let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or_default();
    if kind != "Pod" {
        return Err(invalid(format!("kind {kind:?} is not Pod")));
    }
    let mut pod: Pod = serde_json::from_value(value).map_err(|e| invalid(e.to_string()))?;
    let name =
        pod.metadata.name.clone().filter(|n| !n.is_empty()).ok_or_else(|| invalid("the pod has no name".into()))?;
    let hash = stable_hash(&[content, file.display().to_string().as_bytes(), node_name.as_bytes()]);
    let meta = &mut pod.metadata;
    meta.name = Some(format!("{name}-{node_name}"));
    meta.namespace = Some(meta.namespace.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| "default".into()));
    meta.uid = Some(hash.clone());
    meta.resource_version = None;
    let annotations = meta.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(ANNOTATION_CONFIG_SOURCE.into(), "file".into());
    annotations.insert(ANNOTATION_CONFIG_HASH.into(), hash);
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.node_name = Some(node_name.into());
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    if !tolerations.iter().any(|t| t.operator.as_deref() == Some("Exists") && t.key.is_none()) {
        tolerations.push(Toleration {
            operator: Some("Exists".into()),
            effect: Some("NoExecute".into()),
            ..Default::default()
        });
    }
    Ok(StaticPod { file: file.to_path_buf(), pod })
}

/// Reads every `*.yaml`, `*.yml` and `*.json` manifest of `dir` (hidden
/// files skipped). Bad manifests are reported, the others still returned.
pub fn load_dir(dir: &Path, node_name: &str) -> (Vec<StaticPod>, Vec<StaticPodError>) {
    let mut pods = Vec::new();
    let mut errors = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (pods, errors),
        Err(e) => return (pods, vec![StaticPodError::Io(dir.display().to_string(), e)]),
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            let hidden = p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.'));
            let ext = p.extension().map(|e| e.to_string_lossy().to_lowercase());
            !hidden && p.is_file() && matches!(ext.as_deref(), Some("yaml" | "yml" | "json"))
        })
        .collect();
    files.sort();
    for file in files {
        match std::fs::read(&file) {
            Ok(content) => match parse_manifest(&file, &content, node_name) {
                Ok(p) => pods.push(p),
                Err(e) => errors.push(e),
            },
            Err(e) => errors.push(StaticPodError::Io(file.display().to_string(), e)),
        }
    }
    (pods, errors)
}

/// Whether a pod from the API is a mirror pod.
pub fn is_mirror(pod: &Pod) -> bool {
    pod.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(ANNOTATION_CONFIG_MIRROR))
}

/// The mirror pod of `static_pod`, owned by the Node.
pub fn mirror_pod(static_pod: &Pod, node_name: &str, node_uid: &str) -> Pod {
    let mut pod = static_pod.clone();
    pod.status = None;
    let meta = &mut pod.metadata;
    let hash = meta.uid.take().unwrap_or_default();
    meta.resource_version = None;
    meta.annotations.get_or_insert_with(BTreeMap::new).insert(ANNOTATION_CONFIG_MIRROR.into(), hash);
    meta.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node_name.into(),
        uid: node_uid.into(),
        controller: Some(true),
        block_owner_deletion: None,
    }]);
    pod
}

/// The static pod hash a mirror pod stands for.
pub fn mirror_hash(pod: &Pod) -> Option<&str> {
    pod.metadata.annotations.as_ref().and_then(|a| a.get(ANNOTATION_CONFIG_MIRROR)).map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str =
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: nginx\n";

    #[test]
    fn hashing_is_stable_and_sensitive() {
        let a = parse_manifest(Path::new("/m/web.yaml"), MANIFEST.as_bytes(), "n1").unwrap();
        let b = parse_manifest(Path::new("/m/web.yaml"), MANIFEST.as_bytes(), "n1").unwrap();
        assert_eq!(a.uid(), b.uid());
        assert_eq!(a.uid().len(), 32);
        let other_node = parse_manifest(Path::new("/m/web.yaml"), MANIFEST.as_bytes(), "n2").unwrap();
        assert_ne!(a.uid(), other_node.uid());
        let edited = MANIFEST.replace("nginx", "nginx:2");
        assert_ne!(a.uid(), parse_manifest(Path::new("/m/web.yaml"), edited.as_bytes(), "n1").unwrap().uid());
        assert_ne!(stable_hash(&[b"ab", b"c"]), stable_hash(&[b"a", b"bc"]));
        let pod = &a.pod;
        assert_eq!(pod.metadata.name.as_deref(), Some("web-n1"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("default"));
        let ann = pod.metadata.annotations.as_ref().unwrap();
        assert_eq!(ann[ANNOTATION_CONFIG_SOURCE], "file");
        assert_eq!(ann[ANNOTATION_CONFIG_HASH], a.uid());
        assert_eq!(pod.spec.as_ref().unwrap().node_name.as_deref(), Some("n1"));
        let mirror = mirror_pod(pod, "n1", "node-uid");
        assert!(is_mirror(&mirror));
        assert_eq!(mirror_hash(&mirror), Some(a.uid()));
        assert_eq!(mirror.metadata.uid, None);
        assert_eq!(mirror.metadata.owner_references.as_ref().unwrap()[0].kind, "Node");
    }

    #[test]
    fn directory_scan_takes_yaml_yml_json() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), MANIFEST).unwrap();
        std::fs::write(dir.path().join("b.yml"), MANIFEST.replace("web", "api")).unwrap();
        let json = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j","namespace":"kube-system"},"spec":{"containers":[{"name":"c","image":"x"}]}}"#;
        std::fs::write(dir.path().join("c.json"), json).unwrap();
        std::fs::write(dir.path().join("d.txt"), MANIFEST).unwrap();
        std::fs::write(dir.path().join(".e.yaml"), MANIFEST).unwrap();
        std::fs::write(dir.path().join("f.yaml"), "kind: Service\n").unwrap();
        let (pods, errors) = load_dir(dir.path(), "n1");
        let names: Vec<_> = pods.iter().map(|p| p.pod.metadata.name.clone().unwrap()).collect();
        assert_eq!(names, ["web-n1", "api-n1", "j-n1"]);
        assert_eq!(pods[2].pod.metadata.namespace.as_deref(), Some("kube-system"));
        assert_eq!(errors.len(), 1);
        assert!(load_dir(&dir.path().join("missing"), "n1").0.is_empty());
    }
}
