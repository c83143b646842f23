//! How a container's process is started: the executable's resolution, and
//! the `sh` prelude that joins the container's cgroup and sets up its
//! volumes in a private mount namespace before `exec`ing the program (no
//! `pre_exec`: the workspace forbids `unsafe`).
//!
//! # Volumes in a private mount namespace
//!
//! The container is started as
//! `unshare --mount --propagation private -- sh -c <prelude> sh <argv...>`:
//! `unshare` and `sh` `exec` one another and the prelude ends with `exec`,
//! so the container's program keeps the pid (and process group) the
//! runtime spawned. In the private namespace the prelude bind-mounts each
//! volume's host path at its `container_path` (read-only ones remounted
//! `ro`). Nothing of this reaches the host's mount table.
//!
//! A mount point that does not exist is never created on the host. The
//! prelude *shadows* its nearest existing ancestor instead: a tmpfs holding
//! a replica of that directory (every entry bind-mounted back, symlinks
//! copied) is mounted over it in the namespace, and the missing directories
//! are created in that tmpfs. When the nearest existing ancestor is `/`
//! itself (`/data` on a host without `/data`), the replica of `/` is built
//! in the namespace's scratch tmpfs and the program runs `chroot`ed into
//! it. The container sees the host's files plus its volumes; the host sees
//! nothing.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use crate::runtime::Mount;

use super::logs::EXEC_MARKER;

/// `PATH` given to containers whose environment has none (Docker's default).
pub(crate) const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Host programs the prelude uses, found once at start-up.
#[derive(Debug, Clone)]
pub(crate) struct Tools {
    pub sh: PathBuf,
    pub unshare: Option<PathBuf>,
    pub nsenter: Option<PathBuf>,
    pub mount: Option<PathBuf>,
    pub mkdir: Option<PathBuf>,
    pub ln: Option<PathBuf>,
    pub readlink: Option<PathBuf>,
    pub chroot: Option<PathBuf>,
    pub chmod: Option<PathBuf>,
    /// Gives `exec` with a terminal its own session (util-linux).
    pub setsid: Option<PathBuf>,
    /// Switches user and drops privileges before the program (util-linux).
    pub setpriv: Option<PathBuf>,
}

fn which(program: &str) -> Option<PathBuf> {
    DEFAULT_PATH.split(':').map(|dir| Path::new(dir).join(program)).find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

impl Tools {
    pub(crate) fn find() -> Option<Self> {
        Some(Self {
            sh: which("sh")?,
            unshare: which("unshare"),
            nsenter: which("nsenter"),
            mount: which("mount"),
            mkdir: which("mkdir"),
            ln: which("ln"),
            readlink: which("readlink"),
            chroot: which("chroot"),
            chmod: which("chmod"),
            setsid: which("setsid"),
            setpriv: which("setpriv"),
        })
    }

    /// Whether every program the mount prelude needs is there.
    pub(crate) fn can_mount(&self) -> bool {
        self.unshare.is_some()
            && self.nsenter.is_some()
            && self.mount.is_some()
            && self.mkdir.is_some()
            && self.ln.is_some()
            && self.readlink.is_some()
            && self.chroot.is_some()
            && self.chmod.is_some()
    }
}

/// Where `path` (as the container sees it) lives on the host: under the
/// volume with the longest matching `container_path`, or as is.
pub(crate) fn host_view(path: &Path, mounts: &[Mount]) -> PathBuf {
    mounts
        .iter()
        .filter_map(|m| path.strip_prefix(&m.container_path).ok().map(|rest| (m, rest)))
        .max_by_key(|(m, _)| m.container_path.components().count())
        .map(|(m, rest)| if rest.as_os_str().is_empty() { m.host_path.clone() } else { m.host_path.join(rest) })
        .unwrap_or_else(|| path.to_path_buf())
}

/// An executable found for `argv[0]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Executable {
    /// Its path as the container sees it.
    pub container_path: PathBuf,
    /// Its path on the host.
    pub host_path: PathBuf,
}

/// Finds `argv0` as runc does: a name with a `/` as a path (relative to the
/// working directory), otherwise along the container's `PATH`. The error is
/// runc's message.
pub(crate) fn resolve_executable(
    argv0: &str,
    path_env: &str,
    working_dir: &Path,
    mounts: &[Mount],
) -> Result<Executable, String> {
    let check = |candidate: PathBuf| -> Option<Result<Executable, String>> {
        let host = host_view(&candidate, mounts);
        let meta = std::fs::metadata(&host).ok()?;
        if !meta.is_file() {
            return None;
        }
        Some(if meta.permissions().mode() & 0o111 != 0 {
            Ok(Executable { container_path: candidate, host_path: host })
        } else {
            Err(format!("exec: {argv0:?}: permission denied"))
        })
    };
    if argv0.is_empty() {
        return Err("no command specified".to_owned());
    }
    if argv0.contains('/') {
        let path = if argv0.starts_with('/') { PathBuf::from(argv0) } else { working_dir.join(argv0) };
        return check(path).unwrap_or_else(|| Err(format!("exec: {argv0:?}: stat {argv0}: no such file or directory")));
    }
    for dir in path_env.split(':') {
        let dir = if dir.is_empty() { working_dir.to_path_buf() } else { working_dir.join(dir) };
        if let Some(found) = check(dir.join(argv0)) {
            return found;
        }
    }
    Err(format!("exec: {argv0:?}: executable file not found in $PATH"))
}

/// The container's environment: `PATH` (Docker's default unless the image
/// or the container sets one), the image's variables, `HOSTNAME`, the
/// container's own variables (later entries win), then the runtime's
/// `extra` (`ORCHESTRA_POD_IP`...), which nothing overrides.
pub(crate) fn environment(
    image_env: &BTreeMap<String, String>,
    hostname: &str,
    envs: &[(String, String)],
    extra: &[(&str, String)],
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    env.insert("PATH".to_owned(), DEFAULT_PATH.to_owned());
    env.extend(image_env.iter().map(|(k, v)| (k.clone(), v.clone())));
    if !hostname.is_empty() {
        env.insert("HOSTNAME".to_owned(), hostname.to_owned());
    }
    env.extend(envs.iter().cloned());
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
    env
}

/// `'…'`-quotes for `sh`.
pub(crate) fn quote(text: &OsStr) -> Vec<u8> {
    let mut out = vec![b'\''];
    for &b in text.as_bytes() {
        if b == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(b);
        }
    }
    out.push(b'\'');
    out
}

fn q(path: impl AsRef<OsStr>) -> Vec<u8> {
    quote(path.as_ref())
}

/// What the prelude has to do.
#[derive(Debug)]
pub(crate) struct Prelude<'a> {
    /// `cgroup.procs` files to write the pid to.
    pub cgroup_procs: Vec<PathBuf>,
    /// Volumes to mount (namespace mode only).
    pub mounts: &'a [Mount],
    /// The container's scratch directory for the namespace's tmpfs (must
    /// exist on the host; only the namespace mounts over it).
    pub scratch: &'a Path,
    /// Working directory to `cd` to at the end.
    pub working_dir: &'a Path,
    /// The container's environment (what `cd` changes is put back).
    pub env: &'a BTreeMap<String, String>,
    /// Paths to cover, after the volumes are mounted (namespace mode only).
    pub hidden: &'a [Hidden],
    /// `setpriv` and its options, `exec`ed with the program (`None`: the
    /// program is `exec`ed directly).
    pub setpriv: Option<(&'a Path, &'a [OsString])>,
    /// Every mount of the namespace is made read-only but these paths
    /// (and what is mounted below them), for a container that runs as
    /// root: uid 0 owns the host's files (namespace mode only).
    pub writable: Option<&'a [PathBuf]>,
}

/// What stays writable for a root container whose host is made
/// read-only: its writable volumes, its fresh working directory (when it
/// has no other), and the scratch places every program expects.
pub(crate) fn writable_paths(mounts: &[Mount], fresh_working_dir: Option<&Path>) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = ["/tmp", "/var/tmp", "/dev/shm"].iter().map(PathBuf::from).collect();
    paths.extend(mounts.iter().filter(|m| !m.read_only).map(|m| normalise(&m.container_path)));
    paths.extend(fresh_working_dir.map(normalise));
    paths
}

/// A path covered in the container's mount namespace: a directory by an
/// empty read-only tmpfs (holding only the mount points of `reexposed`),
/// a file by an empty read-only file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hidden {
    /// The path as the container sees it.
    pub path: PathBuf,
    /// A directory (else a file).
    pub dir: bool,
    /// What stays visible inside: paths relative to `path` that are
    /// volumes' mount points or the working directory, with whether each
    /// is a directory and read-only.
    pub reexposed: Vec<Reexposed>,
}

/// A path inside a [`Hidden`] directory that stays visible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reexposed {
    /// Relative to the hidden directory.
    pub relative: PathBuf,
    /// A directory (else a file).
    pub dir: bool,
    /// Bound read-only.
    pub read_only: bool,
}

/// What the container must not see, given the paths to hide (absolute,
/// as on the host), its volumes, the fresh working directory the runtime
/// made for it (when the container names none) and the runtime's scratch
/// directory for it:
///
/// - each hidden path that exists, and its view through every volume
///   whose host path contains it (a `hostPath` volume of `/` shows the
///   hidden paths under its mount point);
/// - not a path covered by another one, nor one a volume is mounted at
///   exactly (the volume covers it already);
/// - inside each, the volumes mounted below it and the fresh working
///   directory stay visible (a working directory the container names
///   under a hidden path stays hidden: the container cannot start);
/// - files first, then directories, the one holding `scratch` (where the
///   prelude stages its mounts) last.
pub(crate) fn hidden_paths(
    paths: &[PathBuf],
    mounts: &[Mount],
    fresh_working_dir: Option<&Path>,
    scratch: &Path,
) -> Vec<Hidden> {
    let mut targets: Vec<(PathBuf, bool)> = Vec::new();
    for path in paths {
        let path = normalise(path);
        let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
        let dir = meta.is_dir();
        targets.push((path.clone(), dir));
        for m in mounts {
            let host = normalise(&m.host_path);
            if let Ok(rest) = path.strip_prefix(&host) {
                targets.push((normalise(&m.container_path).join(rest), dir));
            }
        }
    }
    targets.sort();
    targets.dedup();
    let covered = |path: &Path, all: &[(PathBuf, bool)]| all.iter().any(|(p, _)| p != path && path.starts_with(p));
    let snapshot = targets.clone();
    targets.retain(|(path, _)| !covered(path, &snapshot));
    targets.retain(|(path, _)| !mounts.iter().any(|m| normalise(&m.container_path) == *path));
    let working_dir = fresh_working_dir.map(normalise);
    let mut hidden: Vec<Hidden> = targets
        .into_iter()
        .map(|(path, dir)| {
            let mut reexposed = Vec::new();
            if dir {
                for m in mounts {
                    let target = normalise(&m.container_path);
                    if let Ok(relative) = target.strip_prefix(&path) {
                        let is_dir = std::fs::metadata(&m.host_path).is_ok_and(|meta| meta.is_dir());
                        reexposed.push(Reexposed {
                            relative: relative.to_owned(),
                            dir: is_dir,
                            read_only: m.read_only,
                        });
                    }
                }
                // The fresh working directory, unless it is the hidden
                // directory itself.
                if let Some(relative) = working_dir.as_ref().and_then(|w| w.strip_prefix(&path).ok())
                    && !relative.as_os_str().is_empty()
                    && working_dir.as_ref().is_some_and(|w| w.is_dir())
                {
                    reexposed.push(Reexposed { relative: relative.to_owned(), dir: true, read_only: false });
                }
                // Outer mount points first: an inner one is bound with them.
                reexposed.sort_by_key(|r| r.relative.components().count());
                let outer: Vec<PathBuf> = reexposed.iter().map(|r| r.relative.clone()).collect();
                reexposed.retain(|r| !outer.iter().any(|o| *o != r.relative && r.relative.starts_with(o)));
            }
            Hidden { path, dir, reexposed }
        })
        .collect();
    let scratch = normalise(scratch);
    hidden.sort_by_key(|h| (h.dir, scratch.starts_with(&h.path)));
    hidden
}

/// `cd` sets `PWD` and `OLDPWD`: puts them back as the container's
/// environment has them (unset when it has not).
fn restore_pwd(env: &BTreeMap<String, String>) -> Vec<u8> {
    let mut s = Vec::new();
    for name in ["PWD", "OLDPWD"] {
        match env.get(name) {
            Some(value) => {
                s.extend_from_slice(format!("export {name}=").as_bytes());
                s.extend(q(value));
            }
            None => s.extend_from_slice(format!("unset {name}").as_bytes()),
        }
        s.extend_from_slice(b"; ");
    }
    s
}

/// Whether a mount point's first component is missing on the host, so the
/// prelude has to replicate `/` and `chroot`.
pub(crate) fn needs_root_shadow(mounts: &[Mount]) -> bool {
    mounts.iter().any(|m| {
        m.container_path
            .components()
            .find(|c| matches!(c, Component::Normal(_)))
            .is_some_and(|first| std::fs::symlink_metadata(Path::new("/").join(first)).is_err())
    })
}

impl Prelude<'_> {
    /// The `sh -c` script: joins the cgroup, mounts the volumes, `cd`s,
    /// prints [`EXEC_MARKER`] to stderr and `exec`s `"$@"`. Failures print
    /// `orchestra: …` to stderr and exit 125 before the marker.
    pub(crate) fn script(&self, tools: &Tools) -> OsString {
        let mut s: Vec<u8> = Vec::new();
        let marker = OsStr::from_bytes(EXEC_MARKER);
        s.extend_from_slice(b"_orc_fail() { printf 'orchestra: %s\\n' \"$*\" >&2; exit 125; }\n");
        for procs in &self.cgroup_procs {
            s.extend_from_slice(b"echo $$ > ");
            s.extend(q(procs));
            s.extend_from_slice(b" || _orc_fail 'cannot join cgroup ");
            s.extend(OsStr::new(&procs.display().to_string().replace('\'', "")).as_bytes());
            s.extend_from_slice(b"'\n");
        }
        let root_shadow = !self.mounts.is_empty() && needs_root_shadow(self.mounts);
        let exec: Vec<u8> = match self.setpriv {
            Some((setpriv, args)) => {
                let mut exec = b"exec ".to_vec();
                exec.extend(q(setpriv));
                for arg in args {
                    exec.push(b' ');
                    exec.extend(q(arg));
                }
                exec.extend_from_slice(b" -- \"$@\"");
                exec
            }
            None => b"exec \"$@\"".to_vec(),
        };
        if !self.mounts.is_empty() || !self.hidden.is_empty() || self.writable.is_some() {
            let tool = |t: &Option<PathBuf>| q(t.as_ref().expect("can_mount checked"));
            let (mount, mkdir, ln, readlink, chmod) =
                (tool(&tools.mount), tool(&tools.mkdir), tool(&tools.ln), tool(&tools.readlink), tool(&tools.chmod));
            let line = |s: &mut Vec<u8>, parts: &[&[u8]]| {
                for part in parts {
                    s.extend_from_slice(part);
                }
                s.push(b'\n');
            };
            line(&mut s, &[b"_orc_ns=", &q(self.scratch)]);
            line(&mut s, &[&mount, b" -t tmpfs -o mode=0755 orchestra-scratch \"$_orc_ns\" || _orc_fail 'cannot mount the scratch tmpfs'"]);
            // _orc_replicate SRC DST: every entry of SRC bound (or, for
            // symlinks, copied) into the fresh directory DST.
            line(&mut s, &[b"_orc_replicate() {"]);
            line(&mut s, &[b"  for _orc_e in \"$1\"/* \"$1\"/.[!.]* \"$1\"/..?*; do"]);
            line(&mut s, &[b"    [ -e \"$_orc_e\" ] || [ -L \"$_orc_e\" ] || continue"]);
            line(&mut s, &[b"    _orc_n=\"$2/${_orc_e##*/}\""]);
            line(
                &mut s,
                &[b"    if [ -L \"$_orc_e\" ]; then ", &ln, b" -s \"$(", &readlink, b" \"$_orc_e\")\" \"$_orc_n\""],
            );
            line(
                &mut s,
                &[
                    b"    elif [ -d \"$_orc_e\" ]; then ",
                    &mkdir,
                    b" \"$_orc_n\" && ",
                    &mount,
                    b" --rbind \"$_orc_e\" \"$_orc_n\"",
                ],
            );
            // An entry that vanished meanwhile (a temporary file) is skipped.
            line(&mut s, &[b"    else : > \"$_orc_n\" && ", &mount, b" --bind \"$_orc_e\" \"$_orc_n\"; fi \\"]);
            line(&mut s, &[b"      || { [ ! -e \"$_orc_e\" ] && [ ! -L \"$_orc_e\" ]; } || _orc_fail \"cannot replicate $_orc_e\""]);
            line(&mut s, &[b"  done"]);
            line(&mut s, &[b"}"]);
            // _orc_shadow DIR: DIR replaced (in this namespace) by a tmpfs replica.
            line(&mut s, &[b"_orc_k=0"]);
            line(&mut s, &[b"_orc_shadow() {"]);
            line(&mut s, &[b"  _orc_k=$((_orc_k + 1)); _orc_s=\"$_orc_ns/shadow$_orc_k\""]);
            line(
                &mut s,
                &[
                    b"  ",
                    &mkdir,
                    b" \"$_orc_s\" && ",
                    &mount,
                    b" -t tmpfs orchestra-shadow \"$_orc_s\" || _orc_fail \"cannot shadow $1\"",
                ],
            );
            line(&mut s, &[b"  ", &chmod, b" --reference=\"$1\" \"$_orc_s\""]);
            line(&mut s, &[b"  _orc_replicate \"$1\" \"$_orc_s\""]);
            line(&mut s, &[b"  ", &mount, b" --move \"$_orc_s\" \"$1\" || _orc_fail \"cannot shadow $1\""]);
            line(&mut s, &[b"}"]);
            line(&mut s, &[b"_orc_created='\n'"]);
            if root_shadow {
                line(&mut s, &[b"_orc_r=\"$_orc_ns/root\""]);
                line(
                    &mut s,
                    &[
                        &mkdir,
                        b" \"$_orc_r\" && ",
                        &mount,
                        b" -t tmpfs -o mode=0755 orchestra-root \"$_orc_r\" || _orc_fail 'cannot mount the root tmpfs'",
                    ],
                );
                line(&mut s, &[b"_orc_replicate / \"$_orc_r\""]);
            } else {
                line(&mut s, &[b"_orc_r="]);
            }
            let mut mounts: Vec<&Mount> = self.mounts.iter().collect();
            mounts.sort_by_key(|m| m.container_path.components().count());
            for m in mounts {
                let target = normalise(&m.container_path);
                let is_file = std::fs::metadata(&m.host_path).is_ok_and(|meta| !meta.is_dir());
                line(&mut s, &[b"_orc_t=\"$_orc_r\"", &q(&target)]);
                line(&mut s, &[b"if [ ! -e \"$_orc_t\" ]; then"]);
                line(&mut s, &[b"  _orc_a=\"${_orc_t%/*}\""]);
                line(&mut s, &[b"  while [ -n \"$_orc_a\" ] && [ \"$_orc_a\" != \"$_orc_r\" ] && [ ! -e \"$_orc_a\" ]; do _orc_a=\"${_orc_a%/*}\"; done"]);
                // Never create anything on the host's own root.
                line(&mut s, &[b"  [ -n \"$_orc_a$_orc_r\" ] || _orc_fail \"refusing to create $_orc_t on the host\""]);
                line(&mut s, &[b"  if [ -n \"$_orc_a\" ] && [ \"$_orc_a\" != \"$_orc_r\" ]; then"]);
                line(
                    &mut s,
                    &[b"    case \"$_orc_created\" in *\"\n$_orc_a\n\"*) ;; *) _orc_shadow \"$_orc_a\";; esac"],
                );
                line(&mut s, &[b"  fi"]);
                if is_file {
                    line(&mut s, &[b"  ", &mkdir, b" -p \"${_orc_t%/*}\" && : > \"$_orc_t\" || _orc_fail \"cannot create mount point $_orc_t\""]);
                } else {
                    line(
                        &mut s,
                        &[b"  ", &mkdir, b" -p \"$_orc_t\" || _orc_fail \"cannot create mount point $_orc_t\""],
                    );
                }
                line(&mut s, &[b"  _orc_p=\"$_orc_t\""]);
                line(&mut s, &[b"  while [ -n \"$_orc_p\" ] && [ \"$_orc_p\" != \"$_orc_a\" ]; do _orc_created=\"$_orc_created$_orc_p\n\"; _orc_p=\"${_orc_p%/*}\"; done"]);
                line(&mut s, &[b"fi"]);
                line(
                    &mut s,
                    &[
                        &mount,
                        b" --rbind ",
                        &q(&m.host_path),
                        b" \"$_orc_t\" || _orc_fail \"cannot mount ",
                        &q_inner(&m.host_path),
                        b" at $_orc_t\"",
                    ],
                );
                if m.read_only {
                    line(
                        &mut s,
                        &[&mount, b" -o remount,bind,ro \"$_orc_t\" || _orc_fail \"cannot make $_orc_t read-only\""],
                    );
                }
            }
            // The hidden paths, after the volumes: a volume's host path may
            // lie under one (the agent's state directory holds them all).
            line(&mut s, &[b"_orc_j=0"]);
            for h in self.hidden {
                let target: &[u8] = &q(&h.path);
                let what = q_inner(&h.path);
                line(&mut s, &[b"_orc_j=$((_orc_j + 1)); _orc_h=\"$_orc_ns/hide$_orc_j\""]);
                if !h.dir {
                    line(
                        &mut s,
                        &[
                            b": > \"$_orc_h\" && ",
                            &chmod,
                            b" 000 \"$_orc_h\" && ",
                            &mount,
                            b" --bind \"$_orc_h\" \"$_orc_r\"",
                            target,
                            b" && ",
                            &mount,
                            b" -o remount,bind,ro \"$_orc_r\"",
                            target,
                            b" || _orc_fail \"cannot hide ",
                            &what,
                            b"\"",
                        ],
                    );
                    continue;
                }
                line(
                    &mut s,
                    &[
                        &mkdir,
                        b" \"$_orc_h\" && ",
                        &mount,
                        b" -t tmpfs -o mode=0755 orchestra-hidden \"$_orc_h\" || _orc_fail \"cannot hide ",
                        &what,
                        b"\"",
                    ],
                );
                for r in &h.reexposed {
                    let inside: &[u8] = &q(Path::new("/").join(&r.relative));
                    let source: &[u8] = &q(h.path.join(&r.relative));
                    let kept = q_inner(&h.path.join(&r.relative));
                    let create: Vec<u8> = if r.dir {
                        [&mkdir[..], b" -p \"$_orc_h\"", inside].concat()
                    } else {
                        let parent = q(Path::new("/").join(r.relative.parent().unwrap_or(Path::new(""))));
                        [&mkdir[..], b" -p \"$_orc_h\"", &parent, b" && : > \"$_orc_h\"", inside].concat()
                    };
                    line(
                        &mut s,
                        &[
                            &create,
                            b" && ",
                            &mount,
                            b" --rbind \"$_orc_r\"",
                            source,
                            b" \"$_orc_h\"",
                            inside,
                            b" || _orc_fail \"cannot keep ",
                            &kept,
                            b" visible\"",
                        ],
                    );
                    if r.read_only {
                        line(
                            &mut s,
                            &[
                                &mount,
                                b" -o remount,bind,ro \"$_orc_h\"",
                                inside,
                                b" || _orc_fail \"cannot make ",
                                &kept,
                                b" read-only\"",
                            ],
                        );
                    }
                }
                line(
                    &mut s,
                    &[
                        &mount,
                        b" -o remount,ro \"$_orc_h\" && ",
                        &mount,
                        b" --move \"$_orc_h\" \"$_orc_r\"",
                        target,
                        b" || _orc_fail \"cannot hide ",
                        &what,
                        b"\"",
                    ],
                );
            }
            if let Some(writable) = self.writable {
                // Each writable path made a mount of its own (bound onto
                // itself with what is mounted below it, hidden paths
                // included), then every other mount of the namespace
                // remounted read-only.
                let mut keep: Vec<u8> = Vec::new();
                for path in writable {
                    let path: &[u8] = &q(path);
                    line(
                        &mut s,
                        &[
                            b"[ ! -d \"$_orc_r\"",
                            path,
                            b" ] || ",
                            &mount,
                            b" --rbind \"$_orc_r\"",
                            path,
                            b" \"$_orc_r\"",
                            path,
                            b" || _orc_fail 'cannot keep a writable path'",
                        ],
                    );
                    if !keep.is_empty() {
                        keep.push(b'|');
                    }
                    keep.extend_from_slice(&[&b"\"$_orc_r\""[..], path, b"|\"$_orc_r\"", path, b"/*"].concat());
                }
                line(&mut s, &[b"while read -r _ _ _ _ _orc_m _; do"]);
                line(
                    &mut s,
                    &[
                        b"  case \"$_orc_m\" in ",
                        &keep,
                        b") ;; *) ",
                        &mount,
                        b" -o remount,bind,ro \"$_orc_m\" 2>/dev/null;; esac",
                    ],
                );
                line(&mut s, &[b"done < /proc/self/mountinfo"]);
                line(&mut s, &[b"[ ! -w \"$_orc_r/etc\" ] || _orc_fail 'cannot make the host read-only'"]);
            }
            if root_shadow {
                let chroot = tool(&tools.chroot);
                let mut inner = b"cd \"$1\" || { printf 'orchestra: cannot enter the working directory %s\\n' \"$1\" >&2; exit 125; }; ".to_vec();
                inner.extend(restore_pwd(self.env));
                inner.extend_from_slice(b"shift; printf '%s\\n' \"$1\" >&2; shift; ");
                inner.extend_from_slice(&exec);
                line(&mut s, &[b"cd \"$_orc_r\" || _orc_fail 'cannot enter the root replica'"]);
                line(
                    &mut s,
                    &[
                        b"exec ",
                        &chroot,
                        b" . ",
                        &q(&tools.sh),
                        b" -c ",
                        &q(OsStr::from_bytes(&inner)),
                        b" sh ",
                        &q(self.working_dir),
                        b" ",
                        &q(marker),
                        b" \"$@\"",
                    ],
                );
                return OsString::from_vec(s);
            }
        }
        s.extend_from_slice(b"cd ");
        s.extend(q(self.working_dir));
        s.extend_from_slice(b" || _orc_fail 'cannot enter the working directory'\n");
        s.extend(restore_pwd(self.env));
        s.extend_from_slice(b"\nprintf '%s\\n' ");
        s.extend(q(marker));
        s.extend_from_slice(b" >&2\n");
        s.extend_from_slice(&exec);
        s.push(b'\n');
        OsString::from_vec(s)
    }
}

/// The `sh -c` script of `exec_sync`: joins the container's cgroup, `cd`s
/// to its working directory and `exec`s `"$@"` (exit 126 when it cannot).
pub(crate) fn exec_script(
    cgroup_procs: &[PathBuf],
    working_dir: &Path,
    env: &BTreeMap<String, String>,
    setpriv: Option<(&Path, &[OsString])>,
) -> OsString {
    let mut s: Vec<u8> = Vec::new();
    for procs in cgroup_procs {
        s.extend_from_slice(b"echo $$ > ");
        s.extend(q(procs));
        s.extend_from_slice(b" || exit 126\n");
    }
    s.extend_from_slice(b"cd ");
    s.extend(q(working_dir));
    s.extend_from_slice(b" || exit 126\n");
    s.extend(restore_pwd(env));
    s.extend_from_slice(b"\nexec ");
    if let Some((setpriv, args)) = setpriv {
        s.extend(q(setpriv));
        for arg in args {
            s.push(b' ');
            s.extend(q(arg));
        }
        s.extend_from_slice(b" -- ");
    }
    s.extend_from_slice(b"\"$@\"\n");
    OsString::from_vec(s)
}

/// A path's text safe inside a `"…"` string of `sh` (for messages only).
fn q_inner(path: &Path) -> Vec<u8> {
    path.as_os_str().as_bytes().iter().copied().filter(|b| !matches!(b, b'"' | b'$' | b'`' | b'\\')).collect()
}

/// `/a/./b/` → `/a/b` (`..` is refused earlier).
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        if let Component::Normal(c) = c {
            out.push(c);
        }
    }
    out
}

/// Refuses mount points that are not absolute or that climb with `..`.
pub(crate) fn check_mount(mount: &Mount) -> Result<(), String> {
    let path = &mount.container_path;
    if !path.is_absolute() || path.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(format!("mount path {:?} must be absolute without \"..\"", path.display()));
    }
    if normalise(path) == Path::new("/") {
        return Err("cannot mount a volume over /".to_owned());
    }
    if !mount.host_path.exists() {
        return Err(format!("failed to stat host path {:?}: no such file or directory", mount.host_path.display()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mount(container: &str, host: &str) -> Mount {
        Mount { container_path: container.into(), host_path: host.into(), read_only: false }
    }

    #[test]
    fn executables_resolve_like_runc() {
        let wd = Path::new("/");
        let sh = resolve_executable("sh", DEFAULT_PATH, wd, &[]).unwrap();
        assert!(sh.container_path.ends_with("sh") && sh.container_path == sh.host_path);
        assert_eq!(resolve_executable("/bin/sh", "", wd, &[]).unwrap().container_path, Path::new("/bin/sh"));
        assert_eq!(
            resolve_executable("no-such-program", DEFAULT_PATH, wd, &[]).unwrap_err(),
            "exec: \"no-such-program\": executable file not found in $PATH"
        );
        assert!(resolve_executable("/nope/x", "", wd, &[]).unwrap_err().contains("no such file"));
        assert!(resolve_executable("", "", wd, &[]).is_err());
        // Through a volume: the container path is kept, the host path checked.
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("run.sh");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mounts = [mount("/scripts", dir.path().to_str().unwrap())];
        let data = dir.path().join("data.txt");
        std::fs::write(&data, "").unwrap();
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(resolve_executable("/scripts/data.txt", "", wd, &mounts).unwrap_err().contains("permission denied"));
        let found = resolve_executable("/scripts/run.sh", "", wd, &mounts).unwrap();
        assert_eq!(
            (found.container_path.as_path(), found.host_path.as_path()),
            (Path::new("/scripts/run.sh"), script.as_path())
        );
        assert_eq!(resolve_executable("run.sh", "/scripts", wd, &mounts).unwrap().host_path, script);
        let relative = resolve_executable("./run.sh", "", Path::new("/scripts"), &mounts).unwrap();
        assert_eq!(relative.host_path, script);
    }

    #[test]
    fn host_view_takes_the_deepest_volume() {
        let mounts = [mount("/data", "/h/data"), mount("/data/sub", "/h/sub")];
        assert_eq!(host_view(Path::new("/data/x"), &mounts), Path::new("/h/data/x"));
        assert_eq!(host_view(Path::new("/data/sub/y"), &mounts), Path::new("/h/sub/y"));
        assert_eq!(host_view(Path::new("/data/sub"), &mounts), Path::new("/h/sub"));
        assert_eq!(host_view(Path::new("/datax"), &mounts), Path::new("/datax"));
    }

    #[test]
    fn environment_layers_in_order() {
        let image: BTreeMap<String, String> = [("PATH".into(), "/img".into()), ("A".into(), "image".into())].into();
        let envs = vec![
            ("A".to_owned(), "first".to_owned()),
            ("A".to_owned(), "container".to_owned()),
            ("HOSTNAME".to_owned(), "mine".to_owned()),
        ];
        let env = environment(&image, "pod", &envs, &[("ORCHESTRA_POD_IP", "127.0.0.5".to_owned())]);
        assert_eq!(env["PATH"], "/img");
        assert_eq!(env["A"], "container");
        assert_eq!(env["HOSTNAME"], "mine");
        assert_eq!(env["ORCHESTRA_POD_IP"], "127.0.0.5");
        let env = environment(
            &BTreeMap::new(),
            "pod",
            &[("ORCHESTRA_POD_IP".to_owned(), "x".to_owned())],
            &[("ORCHESTRA_POD_IP", "y".to_owned())],
        );
        assert_eq!(
            (env["PATH"].as_str(), env["HOSTNAME"].as_str(), env["ORCHESTRA_POD_IP"].as_str()),
            (DEFAULT_PATH, "pod", "y")
        );
    }

    #[test]
    fn quoting_survives_sh() {
        let nasty = OsStr::new("it's a \"path\" with $HOME and `x`");
        let mut script = b"printf %s ".to_vec();
        script.extend(quote(nasty));
        let out = std::process::Command::new("sh").arg("-c").arg(OsStr::from_bytes(&script)).output().unwrap();
        assert_eq!(out.stdout, nasty.as_bytes());
    }

    #[test]
    fn only_a_missing_top_level_directory_needs_a_root_replica() {
        assert!(!needs_root_shadow(&[mount("/tmp/not/there", "/")]));
        assert!(!needs_root_shadow(&[]));
        assert!(needs_root_shadow(&[mount("/tmp/x", "/"), mount("/orchestra-surely-absent/data", "/")]));
    }

    #[test]
    fn the_exec_script_restores_the_environment() {
        let env: BTreeMap<String, String> = [("PWD".to_owned(), "/kept".to_owned())].into();
        let script = exec_script(&[], Path::new("/tmp"), &env, None);
        let out = std::process::Command::new("sh")
            .env_clear()
            .env("PWD", "/kept")
            .arg("-c")
            .arg(&script)
            .args(["sh", "env"])
            .output()
            .unwrap();
        // `cd` changed neither PWD (given: kept) nor OLDPWD (not given: unset).
        assert_eq!(String::from_utf8_lossy(&out.stdout), "PWD=/kept\n");
    }

    #[test]
    fn hidden_paths_keep_volumes_and_the_working_directory() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        for dir in ["data/pki", "data/pods/v", "data/state/work", "host", "mnt", "elsewhere"] {
            std::fs::create_dir_all(r.join(dir)).unwrap();
        }
        std::fs::write(r.join("admin.kubeconfig"), "").unwrap();
        let m = |container: &str, host: &str, read_only: bool| Mount {
            container_path: r.join(container),
            host_path: r.join(host),
            read_only,
        };
        let kept = |relative: &str, read_only: bool| Reexposed { relative: relative.into(), dir: true, read_only };
        let hide = |path: &str, dir: bool, reexposed: Vec<Reexposed>| Hidden { path: r.join(path), dir, reexposed };
        let scratch = r.join("data/state/scratch");
        let paths = [r.join("data"), r.join("data/pki"), r.join("admin.kubeconfig"), r.join("missing")];
        // (volumes, fresh working directory, expected hidden paths in order)
        #[rustfmt::skip]
        let cases: Vec<(Vec<Mount>, Option<&str>, Vec<Hidden>)> = vec![
            // A volume from inside the data directory, mounted outside it:
            // nothing to keep; the file first, the directory with scratch last.
            (vec![m("mnt", "data/pods/v", true)], Some("elsewhere"),
             vec![hide("admin.kubeconfig", false, vec![]), hide("data", true, vec![])]),
            // The fresh working directory under the data directory stays.
            (vec![], Some("data/state/work"),
             vec![hide("admin.kubeconfig", false, vec![]), hide("data", true, vec![kept("state/work", false)])]),
            // One the container names there does not.
            (vec![], None, vec![hide("admin.kubeconfig", false, vec![]), hide("data", true, vec![])]),
            // A volume mounted under the data directory stays, read-only
            // as it was.
            (vec![m("data/pods/v", "host", true)], None,
             vec![hide("admin.kubeconfig", false, vec![]), hide("data", true, vec![kept("pods/v", true)])]),
            // A hostPath of the data's parent shows it at the mount point:
            // hidden there too.
            (vec![m("mnt", "", false)], Some("elsewhere"),
             vec![hide("admin.kubeconfig", false, vec![]), hide("mnt/admin.kubeconfig", false, vec![]),
                  hide("mnt/data", true, vec![]), hide("data", true, vec![])]),
            // A volume mounted right at the hidden path replaces it already.
            (vec![m("data", "host", false)], None, vec![hide("admin.kubeconfig", false, vec![])]),
        ];
        for (mounts, working_dir, expected) in cases {
            let working_dir = working_dir.map(|w| r.join(w));
            assert_eq!(hidden_paths(&paths, &mounts, working_dir.as_deref(), &scratch), expected, "{mounts:?}");
        }
    }

    #[test]
    fn mounts_are_checked() {
        assert!(check_mount(&mount("relative", "/")).is_err());
        assert!(check_mount(&mount("/a/../b", "/")).is_err());
        assert!(check_mount(&mount("/", "/")).is_err());
        assert!(check_mount(&mount("/a", "/no/such/host/path")).is_err());
        assert!(check_mount(&mount("/a/./b/", "/")).is_ok());
        assert_eq!(normalise(Path::new("/a/./b/")), Path::new("/a/b"));
    }
}
