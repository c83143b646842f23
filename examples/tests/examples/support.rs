//! What the tests of the `orchestra` binary share: kubectl with a private
//! kubeconfig and cache, clean termination, polling.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Runs the installed kubectl against the cluster whose admin kubeconfig is
/// in `dir`: (success, stdout, stderr).
pub fn kubectl(dir: &Path, args: &[&str]) -> (bool, String, String) {
    kubectl_with_input(dir, args, None)
}

/// [`kubectl`] with `input` on its stdin (`apply -f -`).
pub fn kubectl_with_input(dir: &Path, args: &[&str], input: Option<&str>) -> (bool, String, String) {
    let (code, out, err) = kubectl_exit(dir, args, input);
    (code == 0, out, err)
}

/// [`kubectl_with_input`], answering kubectl's exit code.
pub fn kubectl_exit(dir: &Path, args: &[&str], input: Option<&str>) -> (i32, String, String) {
    use std::io::Write as _;
    let mut child = Command::new("kubectl")
        .arg(format!("--kubeconfig={}", dir.join("admin.kubeconfig").display()))
        .arg(format!("--cache-dir={}", dir.join("kubectl-cache").display()))
        .args(args)
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl is installed");
    if let Some(input) = input {
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    }
    let output = child.wait_with_output().unwrap();
    let code = output.status.code().unwrap_or(-1);
    (code, String::from_utf8_lossy(&output.stdout).into_owned(), String::from_utf8_lossy(&output.stderr).into_owned())
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

/// Sends SIGTERM and waits for a clean exit.
pub fn terminate(child: Child) {
    terminate_within(child, Duration::from_secs(15));
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
