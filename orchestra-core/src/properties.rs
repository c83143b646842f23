//! What the property tests of the parsers and evaluators share.

use proptest::test_runner::Config;

/// The cases each property runs: 256 by default, a few seconds for the
/// whole crate; `PROPTEST_CASES` raises (or lowers) it for a longer run.
/// Failures are printed with their shrunk input, never written into the
/// source tree.
pub(crate) fn config() -> Config {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(256);
    Config { cases, failure_persistence: None, ..Config::default() }
}
