//! # orchestra-sched
//!
//! A Kubernetes-compatible scheduler as a library: the scheduling framework
//! (one trait per extension point in [`framework`], status codes, cycle
//! state), a [`Registry`](registry::Registry) of plugins by name, profiles
//! built from configuration ([`config`], YAML/JSON or code), the scheduling
//! [`queue`] (active, backoff, unschedulable with cluster-event hints), the
//! [`cache`] of node infos with assumed and nominated pods and per-cycle
//! [`snapshot`]s (kept by the scheduling loop and brought up to date with
//! only the node infos changed since), the
//! decision [`algorithm`] (percentageOfNodesToScore, parallel filter and
//! score), the built-in [`plugins`] (filters, scores, DefaultPreemption,
//! DefaultBinder), the [`listers`] of volumes, claims, classes and
//! disruption budgets, and the [`Scheduler`](scheduler::Scheduler) that watches
//! nodes and pods through the API and binds through `pods/binding`, behind
//! the controller runtime's leader election (`orchestra_ctrl::leader`) when
//! configured.
//!
//! Where this crate sits among Orchestra's crates, and the rule that only
//! the API server touches the store: the repository's
//! [ARCHITECTURE.md](https://github.com/orchestra-rs/orchestra/blob/main/ARCHITECTURE.md).
//!
//! ```no_run
//! # async fn run(client: kube::Client) -> Result<(), orchestra_sched::scheduler::Error> {
//! use orchestra_sched::scheduler::SchedulerBuilder;
//! SchedulerBuilder::new(client).build()?.run().await
//! # }
//! ```

pub mod algorithm;
pub mod cache;
pub mod config;
pub mod events;
pub mod framework;
pub mod listers;
pub mod metrics;
pub mod node_info;
pub mod plugins;
pub mod profile;
pub mod queue;
pub mod registry;
pub mod resource;
pub mod scheduler;
pub mod snapshot;
pub mod testing;
