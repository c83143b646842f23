//! Integration tests: the scheduler against an in-process API server.

mod sched {
    pub mod affinity;
    pub mod basic;
    pub mod config;
    pub mod framework;
    pub mod kubectl;
    pub mod leader;
    pub mod parallel;
    pub mod preemption;
    pub mod support;
    pub mod throughput;
    pub mod volumes;
}
