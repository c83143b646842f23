//! What the tests of the `orchestra` binary share: starting it and
//! stopping it cleanly, polling, who a kubeconfig is. (kubectl is
//! `orchestra::testing::Kubectl`.)

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use orchestra::testing::Kubectl;

/// A running `orchestra` process, stopped with SIGTERM when dropped, also
/// when a test panics.
pub struct Running(Option<Child>);

impl Running {
    /// Stops it with SIGTERM and checks that it exits cleanly.
    pub fn stop(mut self) {
        terminate_within(self.0.take().expect("running"), Duration::from_secs(60));
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
            for _ in 0..300 {
                if child.try_wait().ok().flatten().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
        }
    }
}

/// Runs the `orchestra` binary with `args` until a line containing `ready`;
/// returns it running and the lines it printed until then. Its further
/// output is drained so that it never blocks on a full pipe.
pub fn start<I, S>(args: I) -> (Running, String)
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    start_until(args, "ready")
}

/// [`start`], until a line containing `last`.
pub fn start_until<I, S>(args: I, last: &str) -> (Running, String)
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<_> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let mut child = Command::new(env!("CARGO_BIN_EXE_orchestra"))
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the orchestra binary starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = String::new();
    loop {
        let line =
            lines.next().unwrap_or_else(|| panic!("orchestra {args:?} exited before {last:?}:\n{seen}")).unwrap();
        seen.push_str(&line);
        seen.push('\n');
        if line.contains(last) {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    (Running(Some(child)), seen)
}

/// Starts `orchestra apiserver --data-dir data_dir` on a free loopback
/// port, with `extra` arguments, and waits for its `ready` line.
pub fn apiserver(data_dir: &Path, extra: &[&str]) -> Running {
    let args = ["apiserver", "--listen", "127.0.0.1:0", "--data-dir"].map(OsStr::new);
    start(args.into_iter().chain([data_dir.as_os_str()]).chain(extra.iter().map(OsStr::new))).0
}

/// The user a kubeconfig authenticates as (`kubectl auth whoami`).
pub fn whoami(kubeconfig: &Path) -> String {
    let kubectl = Kubectl::with_kubeconfig(kubeconfig);
    let output = kubectl.run(&["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]);
    assert!(output.success, "{}", output.stderr);
    output.stdout
}

/// Sends SIGTERM and waits (at most `within`) for a clean exit.
pub fn terminate_within(mut child: Child, within: Duration) {
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "exit status after SIGTERM: {status}");
            return;
        }
        assert!(Instant::now() < deadline, "still running {within:?} after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Polls `check` until it returns `Some`, for at most `timeout`; panics with
/// `what` and the last observation otherwise.
pub fn eventually<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match check() {
            Ok(value) => return value,
            Err(last) if Instant::now() >= deadline => panic!("{what}: not within {timeout:?}; last: {last}"),
            Err(_) => std::thread::sleep(Duration::from_millis(250)),
        }
    }
}
