//! A minimal command-line parser for `harness = false` benchmark targets.
//!
//! `cargo bench` runs a target as `<binary> [filters/flags after --] --bench`,
//! so the parser ignores a bare `--bench` and accepts `--flag value` or
//! `--flag=value` pairs plus boolean `--flag`s.

use std::collections::HashMap;
use std::str::FromStr;

/// Parsed arguments: flags with their (optional) values.
#[derive(Debug, Default)]
pub struct Args {
    values: HashMap<String, Option<String>>,
    used: std::cell::RefCell<Vec<String>>,
}

impl Args {
    /// Parses `std::env::args()` (skipping the program name). `switches` are
    /// the flags that take no value; every other `--flag` takes one.
    pub fn from_env(switches: &[&str]) -> Result<Args, String> {
        Args::parse(std::env::args().skip(1), switches)
    }

    /// Parses `args`; see [`Args::from_env`].
    pub fn parse(args: impl IntoIterator<Item = String>, switches: &[&str]) -> Result<Args, String> {
        let mut values = HashMap::new();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            if arg == "--bench" {
                continue;
            }
            let Some(flag) = arg.strip_prefix("--") else {
                return Err(format!("unexpected argument {arg:?}"));
            };
            match flag.split_once('=') {
                Some((name, value)) => {
                    values.insert(name.to_owned(), Some(value.to_owned()));
                }
                None if switches.contains(&flag) => {
                    values.insert(flag.to_owned(), None);
                }
                None => {
                    let value = args
                        .next()
                        .filter(|v| !v.starts_with("--"))
                        .ok_or_else(|| format!("--{flag} is not a switch, so it needs a value"))?;
                    values.insert(flag.to_owned(), Some(value));
                }
            }
        }
        Ok(Args { values, used: Default::default() })
    }

    /// True if the boolean `--name` was given.
    pub fn flag(&self, name: &str) -> bool {
        self.used.borrow_mut().push(name.to_owned());
        self.values.contains_key(name)
    }

    /// The value of `--name`, parsed, or `default` if absent.
    pub fn get<T: FromStr>(&self, name: &str, default: T) -> Result<T, String>
    where
        T::Err: std::fmt::Display,
    {
        self.used.borrow_mut().push(name.to_owned());
        match self.values.get(name) {
            None => Ok(default),
            Some(None) => Err(format!("--{name} needs a value")),
            Some(Some(v)) => v.parse().map_err(|e| format!("--{name} {v:?}: {e}")),
        }
    }

    /// The comma-separated list value of `--name`, or `default` if absent.
    pub fn list<T>(&self, name: &str, default: &[T]) -> Result<Vec<T>, String>
    where
        T: FromStr + Clone,
        T::Err: std::fmt::Display,
    {
        self.used.borrow_mut().push(name.to_owned());
        match self.values.get(name) {
            None => Ok(default.to_vec()),
            Some(None) => Err(format!("--{name} needs a value")),
            Some(Some(v)) => v
                .split(',')
                .filter(|s| !s.is_empty())
                .map(|s| s.trim().parse().map_err(|e| format!("--{name} {s:?}: {e}")))
                .collect(),
        }
    }

    /// Fails if a flag was given that none of the accessors asked about.
    pub fn finish(&self) -> Result<(), String> {
        let used = self.used.borrow();
        let mut unknown: Vec<&String> = self.values.keys().filter(|k| !used.contains(k)).collect();
        unknown.sort();
        match unknown.first() {
            None => Ok(()),
            Some(flag) => Err(format!("unknown flag --{flag}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_flags_values_and_lists() {
        let args = ["--bench", "--quick", "--clients=1,16", "--duration", "2.5"].map(String::from);
        let args = Args::parse(args, &["quick"]).unwrap();
        assert!(args.flag("quick"));
        assert_eq!(args.list::<usize>("clients", &[]).unwrap(), vec![1, 16]);
        assert_eq!(args.get::<f64>("duration", 0.0).unwrap(), 2.5);
        assert_eq!(args.get::<u32>("absent", 7).unwrap(), 7);
        args.finish().unwrap();
        let args = Args::parse(["--nope".to_string(), "1".to_string()], &[]).unwrap();
        assert!(args.finish().is_err());
    }
}
