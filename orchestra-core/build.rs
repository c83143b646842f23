//! Compiles the Kubernetes `.proto` files shipped in the `k8s-rs-pb` crate
//! package (a build dependency, its Rust code compiled out) into one
//! `FileDescriptorSet`, `$OUT_DIR/kubernetes.fds`, which the API server's
//! protobuf transcoder (`server/protobuf.rs`) embeds.
//!
//! The package directory is found, in order, from `ORCHESTRA_K8S_PROTOS` (a
//! directory holding `api/`, `apimachinery/`, …), the cargo registry sources
//! under `$CARGO_HOME`, and `cargo metadata`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The pinned package (see the root `Cargo.toml`) and the Kubernetes minor
/// version whose protos are used (the one `/version` reports).
const PACKAGE: &str = "k8s-rs-pb";
const PACKAGE_VERSION: &str = "0.5.0";
const KUBERNETES: &str = "v1_33";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=ORCHESTRA_K8S_PROTOS");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let target = out.join("kubernetes.fds");
    if std::env::var_os("CARGO_FEATURE_SERVER").is_none() {
        // Only the server decodes protobuf; keep the include_bytes! target valid.
        std::fs::write(&target, []).expect("OUT_DIR is writable");
        return;
    }
    let root = proto_root().unwrap_or_else(|| {
        panic!(
            "cannot find the .proto files of {PACKAGE} {PACKAGE_VERSION}; \
             set ORCHESTRA_K8S_PROTOS to its src/{KUBERNETES} directory"
        )
    });
    let mut files = Vec::new();
    collect(&root, &root, &mut files);
    files.sort();
    assert!(!files.is_empty(), "no .proto files under {}", root.display());
    let set = protox::compile(&files, [&root])
        .unwrap_or_else(|e| panic!("compiling the Kubernetes protos under {}: {e:?}", root.display()));
    std::fs::write(&target, prost::Message::encode_to_vec(&set)).expect("OUT_DIR is writable");
}

/// `src/v1_NN` of the package, if found.
fn proto_root() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("ORCHESTRA_K8S_PROTOS") {
        return Some(PathBuf::from(dir));
    }
    let package = format!("{PACKAGE}-{PACKAGE_VERSION}");
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    if let Some(home) = cargo_home
        && let Ok(registries) = std::fs::read_dir(home.join("registry/src"))
    {
        for registry in registries.flatten() {
            let dir = registry.path().join(&package).join("src").join(KUBERNETES);
            if dir.is_dir() {
                return Some(dir);
            }
        }
    }
    from_cargo_metadata()
}

/// Asks `cargo metadata` where the package is (vendored sources, other
/// registries).
fn from_cargo_metadata() -> Option<PathBuf> {
    let cargo = std::env::var_os("CARGO")?;
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?).join("Cargo.toml");
    let mut command = Command::new(cargo);
    command.args(["metadata", "--format-version=1", "--offline"]);
    // Without a platform filter, cargo wants every platform's dependencies.
    if let Some(host) = std::env::var_os("HOST") {
        command.arg("--filter-platform").arg(host);
    }
    let output = command.arg("--manifest-path").arg(&manifest).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    // Find `"name":"k8s-rs-pb","version":"0.5.0"` … `"manifest_path":"…"` without
    // a JSON parser in the build dependencies.
    let needle = format!("\"name\":\"{PACKAGE}\",\"version\":\"{PACKAGE_VERSION}\"");
    let start = text.find(&needle)?;
    let rest = &text[start..];
    let key = "\"manifest_path\":\"";
    let path_start = rest.find(key)? + key.len();
    let path_end = rest[path_start..].find('"')? + path_start;
    let manifest_path = PathBuf::from(&rest[path_start..path_end]);
    let dir = manifest_path.parent()?.join("src").join(KUBERNETES);
    dir.is_dir().then_some(dir)
}

/// Every `.proto` file under `dir`, relative to `root`.
fn collect(root: &Path, dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(root, &path, files);
        } else if path.extension().is_some_and(|e| e == "proto") {
            files.push(path.strip_prefix(root).expect("under root").to_owned());
        }
    }
}
