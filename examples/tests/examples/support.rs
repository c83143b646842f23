//! What the tests of the `orchestra` binary share: clean termination,
//! polling. (kubectl is `orchestra::testing::Kubectl`.)

use std::process::{Child, Command};
use std::time::{Duration, Instant};

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
