//! The image catalog of a node: which host program an image name stands for.
//!
//! A backend without container images (the process backend) still has to
//! answer `image: orchestra/echo` in a pod spec. [`ImageCatalog`] maps image
//! references to [`ImageEntry`]s: an entrypoint (executable and leading
//! arguments), default arguments, default environment and a size to report
//! in `node.status.images`.
//!
//! # Names
//!
//! References are normalised as Docker and Kubernetes do: the registry
//! defaults to `docker.io`, a one-component repository on `docker.io` gets
//! `library/`, the tag defaults to `latest`. So `orchestra/echo`,
//! `orchestra/echo:latest` and `docker.io/orchestra/echo:latest` name the
//! same image, and `busybox` is `docker.io/library/busybox:latest`.
//!
//! The rule for tags: an entry registered **with a tag** (`orchestra/echo:1.0`)
//! answers to that tag only. An entry registered **without a tag**
//! (`orchestra/echo`) answers to every tag of its repository that has no
//! entry of its own (a host program has no versions; register
//! `orchestra/echo:2.0` separately to give that tag another program). A
//! reference by digest (`orchestra/echo@sha256:…`) or by image id
//! (`sha256:…`) answers when the digest is the entry's [image id](ImageEntry::image_id).
//!
//! # Command and arguments
//!
//! [`resolve_command`] follows Kubernetes exactly: `command` set in the spec
//! → `command + args` (the image's arguments are ignored); only `args` →
//! image entrypoint + `args`; neither → image entrypoint + image arguments.
//!
//! # Files
//!
//! [`ImageCatalog::load`] reads YAML or JSON (JSON is read as YAML):
//!
//! ```yaml
//! images:
//!   - name: orchestra/echo
//!     entrypoint: [/bin/echo]
//!     args: [hello]
//!     env: {GREETING: hi}
//!     sizeBytes: 1048576
//!   - name: orchestra/sleep:1.0
//!     entrypoint: [/bin/sleep]
//!     args: ["3600"]
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{Image, RuntimeError};

/// The registry of references without one.
pub const DEFAULT_REGISTRY: &str = "docker.io";
/// The tag of references without one.
pub const DEFAULT_TAG: &str = "latest";

/// What an image stands for: a host program and its defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageEntry {
    /// Executable and leading arguments (Docker's `ENTRYPOINT`); never empty.
    pub entrypoint: Vec<String>,
    /// Default arguments (Docker's `CMD`), replaced by the spec's `args`.
    #[serde(default)]
    pub args: Vec<String>,
    /// Default environment (Docker's `ENV`); the container's own variables win.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Size reported in `node.status.images`.
    #[serde(default)]
    pub size_bytes: u64,
}

impl ImageEntry {
    /// An entry running `entrypoint` (executable and leading arguments).
    pub fn new<I, S>(entrypoint: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            entrypoint: entrypoint.into_iter().map(Into::into).collect(),
            args: Vec::new(),
            env: BTreeMap::new(),
            size_bytes: 0,
        }
    }

    /// Sets the default arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// Adds a default environment variable.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(name.into(), value.into());
        self
    }

    /// Sets the reported size.
    pub fn size_bytes(mut self, size: u64) -> Self {
        self.size_bytes = size;
        self
    }

    /// `sha256:<hex>` of the entry's canonical JSON: equal entries have equal
    /// ids, whatever names they are registered under.
    pub fn image_id(&self) -> String {
        let canonical = serde_json::to_vec(self).expect("an image entry serialises");
        let digest = ring::digest::digest(&ring::digest::SHA256, &canonical);
        let mut id = String::with_capacity(7 + 64);
        id.push_str("sha256:");
        for byte in digest.as_ref() {
            id.push_str(&format!("{byte:02x}"));
        }
        id
    }
}

/// The argv a container runs, by Kubernetes' rules: spec `command` replaces
/// the entrypoint and drops the image's arguments; spec `args` replace the
/// image's arguments.
pub fn resolve_command(entry: &ImageEntry, command: &[String], args: &[String]) -> Vec<String> {
    let mut argv = Vec::new();
    if !command.is_empty() {
        argv.extend_from_slice(command);
        argv.extend_from_slice(args);
    } else {
        argv.extend_from_slice(&entry.entrypoint);
        argv.extend_from_slice(if args.is_empty() { &entry.args } else { args });
    }
    argv
}

/// A parsed, normalised image reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ImageReference {
    /// Full repository name, registry included: `docker.io/library/busybox`.
    pub name: String,
    /// The tag, if the reference has one.
    pub tag: Option<String>,
    /// The digest (`sha256:…`), if the reference has one.
    pub digest: Option<String>,
}

/// A reference that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid reference format {reference:?}: {reason}")]
pub struct InvalidReference {
    /// The reference as given.
    pub reference: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl ImageReference {
    /// Parses and normalises `reference` (`[registry/]path[:tag][@digest]`).
    pub fn parse(reference: &str) -> Result<Self, InvalidReference> {
        let invalid = |reason| InvalidReference { reference: reference.to_owned(), reason };
        if reference.is_empty() {
            return Err(invalid("empty reference"));
        }
        if reference.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(invalid("whitespace in reference"));
        }
        let (rest, digest) = match reference.split_once('@') {
            Some((rest, digest)) => {
                let (algorithm, hex) = digest.split_once(':').ok_or_else(|| invalid("digest is not algorithm:hex"))?;
                if algorithm.is_empty() || hex.is_empty() || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                    return Err(invalid("digest is not algorithm:hex"));
                }
                (rest, Some(digest.to_ascii_lowercase()))
            }
            None => (reference, None),
        };
        let (path, tag) = match rest.rfind(':') {
            Some(colon) if !rest[colon..].contains('/') => (&rest[..colon], Some(&rest[colon + 1..])),
            _ => (rest, None),
        };
        if let Some(tag) = tag {
            let valid = !tag.is_empty()
                && tag.len() <= 128
                && !tag.starts_with(['.', '-'])
                && tag.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
            if !valid {
                return Err(invalid("invalid tag"));
            }
        }
        let mut components: Vec<&str> = path.split('/').collect();
        let registry = if components.len() > 1
            && (components[0].contains(['.', ':'])
                || components[0] == "localhost"
                || components[0].chars().any(|c| c.is_ascii_uppercase()))
        {
            let registry = components.remove(0);
            if registry == "index.docker.io" { DEFAULT_REGISTRY } else { registry }
        } else {
            DEFAULT_REGISTRY
        };
        for component in &components {
            let valid = !component.is_empty()
                && component
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'))
                && component.starts_with(|c: char| c.is_ascii_alphanumeric())
                && component.ends_with(|c: char| c.is_ascii_alphanumeric());
            if !valid {
                return Err(invalid("repository name must be lowercase alphanumerics separated by '.', '_' or '-'"));
            }
        }
        let repository = components.join("/");
        let repository = if registry == DEFAULT_REGISTRY && components.len() == 1 {
            format!("library/{repository}")
        } else {
            repository
        };
        Ok(Self { name: format!("{registry}/{repository}"), tag: tag.map(str::to_owned), digest })
    }

    /// The tag, `latest` when the reference has none.
    pub fn tag_or_default(&self) -> &str {
        self.tag.as_deref().unwrap_or(DEFAULT_TAG)
    }
}

impl fmt::Display for ImageReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

/// Faults of building or loading a catalog.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// An entry's name is not an image reference.
    #[error(transparent)]
    InvalidReference(#[from] InvalidReference),
    /// An entry names a digest: entries are registered by name (and tag).
    #[error("image {0:?}: register entries by name or name:tag, not by digest")]
    DigestName(String),
    /// An entry has no entrypoint.
    #[error("image {0:?}: the entrypoint is empty")]
    EmptyEntrypoint(String),
    /// Two entries have the same name.
    #[error("image {0:?} is registered twice")]
    Duplicate(String),
    /// The file could not be read.
    #[error("reading image catalog {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a catalog.
    #[error("parsing image catalog {path}: {source}")]
    Parse {
        /// The file.
        path: String,
        /// Why.
        source: serde_yaml::Error,
    },
}

/// An image the catalog resolved a reference to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedImage {
    /// `sha256:…` of the entry.
    pub id: String,
    /// The normalised reference it answers to, as a `repo:tag`.
    pub repo_tag: String,
    /// The entry.
    pub entry: Arc<ImageEntry>,
}

/// Catalog key: full repository name and tag (`None`: a tag-less entry).
type Key = (String, Option<String>);

/// The images of a node: reference → host program. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct ImageCatalog {
    /// `(repository name, tag)`; a `None` tag is a tag-less entry.
    entries: Arc<BTreeMap<Key, Arc<ImageEntry>>>,
}

/// Builds an [`ImageCatalog`]; [`build`](CatalogBuilder::build) checks the
/// names and entries.
///
/// ```
/// use orchestra_node::runtime::images::{CatalogError, ImageCatalog, ImageEntry};
///
/// let catalog = ImageCatalog::builder()
///     .image("orchestra/echo", ImageEntry::new(["/bin/echo"]).args(["hello"]))
///     .image("orchestra/sleep:1.0", ImageEntry::new(["/bin/sleep"]).args(["3600"]))
///     .build()?;
/// // A tag-less entry answers to every tag; a tagged one to its tag only.
/// assert_eq!(catalog.resolve("docker.io/orchestra/echo:2.0")?.entry.entrypoint, ["/bin/echo"]);
/// assert!(catalog.resolve("orchestra/sleep:2.0").is_err());
///
/// let empty = ImageCatalog::builder().image("orchestra/none", ImageEntry::new(Vec::<String>::new())).build();
/// assert!(matches!(empty, Err(CatalogError::EmptyEntrypoint(_))));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Default)]
pub struct CatalogBuilder {
    images: Vec<(String, ImageEntry)>,
}

impl CatalogBuilder {
    /// Registers `entry` under `name` (`repo` or `repo:tag`; see the module
    /// docs for what a tag-less name answers to).
    pub fn image(mut self, name: impl Into<String>, entry: ImageEntry) -> Self {
        self.images.push((name.into(), entry));
        self
    }

    /// Checks every name and entry.
    pub fn build(self) -> Result<ImageCatalog, CatalogError> {
        let mut entries = BTreeMap::new();
        for (name, entry) in self.images {
            let reference = ImageReference::parse(&name)?;
            if reference.digest.is_some() {
                return Err(CatalogError::DigestName(name));
            }
            if entry.entrypoint.is_empty() || entry.entrypoint[0].is_empty() {
                return Err(CatalogError::EmptyEntrypoint(name));
            }
            if entries.insert((reference.name, reference.tag), Arc::new(entry)).is_some() {
                return Err(CatalogError::Duplicate(name));
            }
        }
        Ok(ImageCatalog { entries: Arc::new(entries) })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CatalogFile {
    #[serde(default)]
    images: Vec<NamedEntry>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NamedEntry {
    name: String,
    entrypoint: Vec<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    size_bytes: u64,
}

impl ImageCatalog {
    /// A catalog builder.
    pub fn builder() -> CatalogBuilder {
        CatalogBuilder::default()
    }

    /// Parses a catalog from YAML or JSON text (see the module docs).
    pub fn from_yaml(text: &str) -> Result<Self, CatalogError> {
        Self::parse(text, "<text>")
    }

    /// Reads a catalog file, YAML or JSON.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, CatalogError> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| CatalogError::Io { path: shown.clone(), source })?;
        Self::parse(&text, &shown)
    }

    fn parse(text: &str, path: &str) -> Result<Self, CatalogError> {
        let file: CatalogFile =
            serde_yaml::from_str(text).map_err(|source| CatalogError::Parse { path: path.to_owned(), source })?;
        file.images
            .into_iter()
            .fold(Self::builder(), |builder, e| {
                builder.image(
                    e.name,
                    ImageEntry { entrypoint: e.entrypoint, args: e.args, env: e.env, size_bytes: e.size_bytes },
                )
            })
            .build()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the catalog has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The image `reference` stands for, or [`RuntimeError::ImageNotFound`]
    /// worded as a registry would.
    pub fn resolve(&self, reference: &str) -> Result<ResolvedImage, RuntimeError> {
        let not_found = |message: String| RuntimeError::ImageNotFound { image: reference.to_owned(), message };
        // An image id.
        if let Some(hex) = reference.strip_prefix("sha256:")
            && !hex.is_empty()
            && hex.chars().all(|c| c.is_ascii_hexdigit())
        {
            let wanted = reference.to_ascii_lowercase();
            return self
                .entries
                .iter()
                .find(|(_, entry)| entry.image_id() == wanted)
                .map(|(key, entry)| Self::resolved(key, entry))
                .ok_or_else(|| not_found(format!("image id {wanted}: not found in the image catalog")));
        }
        let parsed = ImageReference::parse(reference).map_err(|e| not_found(e.to_string()))?;
        let shown = format!("{}:{}", parsed.name, parsed.tag_or_default());
        let candidates = [(parsed.name.clone(), Some(parsed.tag_or_default().to_owned())), (parsed.name.clone(), None)];
        let found = match (&parsed.digest, &parsed.tag) {
            // name@digest: any entry of the repository with that id.
            (Some(digest), None) => {
                self.entries.iter().find(|((name, _), entry)| *name == parsed.name && entry.image_id() == *digest)
            }
            // name:tag@digest: the tag's entry, if its id matches.
            (Some(digest), Some(_)) => candidates
                .iter()
                .find_map(|key| self.entries.get_key_value(key))
                .filter(|(_, entry)| entry.image_id() == *digest),
            (None, _) => candidates.iter().find_map(|key| self.entries.get_key_value(key)),
        };
        found.map(|(key, entry)| {
            let mut resolved = Self::resolved(key, entry);
            if key.1.is_none() {
                resolved.repo_tag = shown.clone();
            }
            resolved
        })
        .ok_or_else(|| {
            not_found(format!(
                "failed to resolve reference \"{parsed}\": pull access denied, repository does not exist or may require \
                 authorization: {shown} not found in the image catalog"
            ))
        })
    }

    fn resolved((name, tag): &Key, entry: &Arc<ImageEntry>) -> ResolvedImage {
        ResolvedImage {
            id: entry.image_id(),
            repo_tag: format!("{name}:{}", tag.as_deref().unwrap_or(DEFAULT_TAG)),
            entry: entry.clone(),
        }
    }

    /// Every image, entries with equal content merged into one image with
    /// several `repo_tags` (as a registry shares layers between tags). A
    /// tag-less entry is listed as `repo:latest`.
    pub fn images(&self) -> Vec<Image> {
        let mut by_id: BTreeMap<String, Image> = BTreeMap::new();
        for (key, entry) in self.entries.iter() {
            let resolved = Self::resolved(key, entry);
            let image = by_id.entry(resolved.id.clone()).or_insert_with(|| Image {
                id: resolved.id.clone(),
                repo_tags: Vec::new(),
                size_bytes: entry.size_bytes,
            });
            if !image.repo_tags.contains(&resolved.repo_tag) {
                image.repo_tags.push(resolved.repo_tag);
            }
        }
        by_id.into_values().collect()
    }

    /// The image `reference` stands for as [`Image`], `None` when unknown.
    pub fn image(&self, reference: &str) -> Option<Image> {
        let resolved = self.resolve(reference).ok()?;
        self.images().into_iter().find(|image| image.id == resolved.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn references_normalise_like_docker() {
        let cases = [
            ("busybox", "docker.io/library/busybox", None),
            ("orchestra/echo", "docker.io/orchestra/echo", None),
            ("orchestra/echo:latest", "docker.io/orchestra/echo", Some("latest")),
            ("docker.io/orchestra/echo:1.0", "docker.io/orchestra/echo", Some("1.0")),
            ("index.docker.io/library/busybox", "docker.io/library/busybox", None),
            ("localhost:5000/app:v2", "localhost:5000/app", Some("v2")),
            ("registry.k8s.io/pause:3.10", "registry.k8s.io/pause", Some("3.10")),
            ("localhost/app", "localhost/app", None),
        ];
        for (input, name, tag) in cases {
            let parsed = ImageReference::parse(input).unwrap();
            assert_eq!((parsed.name.as_str(), parsed.tag.as_deref()), (name, tag), "{input}");
        }
        let digest = ImageReference::parse("orchestra/echo@sha256:ABCD").unwrap();
        assert_eq!(digest.digest.as_deref(), Some("sha256:abcd"));
        assert_eq!(digest.to_string(), "docker.io/orchestra/echo@sha256:abcd");
        for bad in
            ["", "orchestra/Echo", "echo:", "echo:-x", "a//b", "echo@sha256", "with space", "echo@sha256:xyz", "-echo"]
        {
            assert!(ImageReference::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn tags_follow_the_documented_rule() {
        let catalog = ImageCatalog::builder()
            .image("orchestra/echo", ImageEntry::new(["/bin/echo"]))
            .image("orchestra/echo:2.0", ImageEntry::new(["/bin/echo", "two"]))
            .image("orchestra/sleep:1.0", ImageEntry::new(["/bin/sleep"]))
            .build()
            .unwrap();
        let id = |r: &str| catalog.resolve(r).map(|i| i.id);
        let echo = id("orchestra/echo").unwrap();
        for same in [
            "orchestra/echo:latest",
            "docker.io/orchestra/echo:latest",
            "docker.io/orchestra/echo",
            "orchestra/echo:1.7",
        ] {
            assert_eq!(id(same).unwrap(), echo, "{same}");
        }
        assert_ne!(id("orchestra/echo:2.0").unwrap(), echo);
        assert_eq!(catalog.resolve("orchestra/echo:1.7").unwrap().repo_tag, "docker.io/orchestra/echo:1.7");
        // A tagged entry answers to its tag only.
        assert!(id("orchestra/sleep:1.0").is_ok());
        for missing in ["orchestra/sleep", "orchestra/sleep:latest", "orchestra/sleep:1.1", "orchestra/nope", "echo"] {
            match catalog.resolve(missing) {
                Err(RuntimeError::ImageNotFound { image, message }) => {
                    assert_eq!(image, missing);
                    assert!(message.contains("pull access denied"), "{message}");
                    assert!(message.contains("not found in the image catalog"), "{message}");
                }
                other => panic!("{missing}: {other:?}"),
            }
        }
        // By image id and by digest.
        assert_eq!(id(&echo).unwrap(), echo);
        assert_eq!(id(&format!("orchestra/echo@{echo}")).unwrap(), echo);
        assert!(id(&format!("orchestra/sleep@{echo}")).is_err());
        assert!(id("sha256:0000").is_err());
        assert!(matches!(catalog.resolve("Bad Name"), Err(RuntimeError::ImageNotFound { .. })));
    }

    #[test]
    fn ids_are_stable_and_equal_entries_merge() {
        let entry = ImageEntry::new(["/bin/sh", "-c"]).args(["true"]).env("A", "1").size_bytes(10);
        let id = entry.image_id();
        assert!(id.starts_with("sha256:") && id.len() == 7 + 64, "{id}");
        assert_eq!(entry.clone().image_id(), id);
        assert_ne!(entry.clone().env("A", "2").image_id(), id);
        let catalog = ImageCatalog::builder()
            .image("a/one", entry.clone())
            .image("b/two:3", entry)
            .image("c/other", ImageEntry::new(["/bin/true"]))
            .build()
            .unwrap();
        let images = catalog.images();
        assert_eq!(images.len(), 2);
        let merged = images.iter().find(|i| i.id == id).unwrap();
        assert_eq!(merged.repo_tags, ["docker.io/a/one:latest", "docker.io/b/two:3"]);
        assert_eq!(merged.size_bytes, 10);
        assert_eq!(catalog.image("a/one:9").unwrap().id, id);
        assert!(catalog.image("a/nine").is_none());
    }

    #[test]
    fn builder_refuses_bad_entries() {
        let build = |name: &str, entry: ImageEntry| ImageCatalog::builder().image(name, entry).build();
        assert!(matches!(build("UPPER", ImageEntry::new(["x"])), Err(CatalogError::InvalidReference(_))));
        assert!(matches!(build("a@sha256:00", ImageEntry::new(["x"])), Err(CatalogError::DigestName(_))));
        assert!(matches!(build("a", ImageEntry::new(Vec::<String>::new())), Err(CatalogError::EmptyEntrypoint(_))));
        let twice = ImageCatalog::builder()
            .image("a", ImageEntry::new(["x"]))
            .image("docker.io/library/a", ImageEntry::new(["y"]))
            .build();
        assert!(matches!(twice, Err(CatalogError::Duplicate(_))));
    }

    #[test]
    fn command_and_args_follow_kubernetes() {
        let entry = ImageEntry::new(["/bin/echo", "-n"]).args(["default"]);
        let none: Vec<String> = Vec::new();
        assert_eq!(resolve_command(&entry, &none, &none), strings(&["/bin/echo", "-n", "default"]));
        assert_eq!(resolve_command(&entry, &none, &strings(&["mine"])), strings(&["/bin/echo", "-n", "mine"]));
        assert_eq!(resolve_command(&entry, &strings(&["/bin/cat"]), &none), strings(&["/bin/cat"]));
        assert_eq!(
            resolve_command(&entry, &strings(&["/bin/cat", "-u"]), &strings(&["f"])),
            strings(&["/bin/cat", "-u", "f"])
        );
    }

    #[test]
    fn catalogs_load_from_yaml_and_json() {
        let yaml = "images:\n  - name: orchestra/echo\n    entrypoint: [/bin/echo]\n    args: [hello]\n    env: {GREETING: hi}\n    sizeBytes: 1024\n  - name: orchestra/sleep:1.0\n    entrypoint: [/bin/sleep, \"3600\"]\n";
        let catalog = ImageCatalog::from_yaml(yaml).unwrap();
        assert_eq!(catalog.len(), 2);
        let echo = catalog.resolve("orchestra/echo").unwrap();
        assert_eq!(echo.entry.args, ["hello"]);
        assert_eq!(echo.entry.env["GREETING"], "hi");
        assert_eq!(echo.entry.size_bytes, 1024);

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.json");
        std::fs::write(&path, r#"{"images": [{"name": "orchestra/echo", "entrypoint": ["/bin/echo"], "args": ["hello"], "env": {"GREETING": "hi"}, "sizeBytes": 1024}]}"#).unwrap();
        let from_json = ImageCatalog::load(&path).unwrap();
        assert_eq!(from_json.resolve("orchestra/echo").unwrap(), echo);

        std::fs::write(&path, "images: [{name: x, entrypoint: [a], colour: blue}]").unwrap();
        assert!(matches!(ImageCatalog::load(&path), Err(CatalogError::Parse { .. })));
        assert!(matches!(ImageCatalog::load(dir.path().join("missing")), Err(CatalogError::Io { .. })));
    }
}
