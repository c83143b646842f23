//! The names most programs built on Orchestra use: `use orchestra::prelude::*;`.

pub use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
pub use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
pub use kube::{Client, Resource, ResourceExt};

#[cfg(all(feature = "server", feature = "node"))]
pub use crate::control_plane::NodeRuntime;
#[cfg(feature = "server")]
pub use crate::control_plane::{ControlPlane, ControlPlaneHandle, Listener};
#[cfg(feature = "server")]
pub use orchestra_core::auth::admission::{AdmissionChain, AdmissionPlugin};
#[cfg(feature = "server")]
pub use orchestra_core::auth::{Authenticator, AuthenticatorChain, Authorizer, AuthorizerChain, UserInfo};
#[cfg(feature = "server")]
pub use orchestra_core::server::ApiServer;

#[cfg(feature = "store")]
pub use orchestra_store::{MemStore, Store};

pub use orchestra_ctrl::controller::Controller;
pub use orchestra_ctrl::informer::SharedInformerFactory;
#[cfg(feature = "ctrl")]
pub use orchestra_ctrl::{Action, Reconciler};

pub use orchestra_sched::config::SchedulerConfiguration;
#[cfg(feature = "sched")]
pub use orchestra_sched::registry::Registry;

#[cfg(feature = "node")]
pub use orchestra_node::runtime::RuntimeBackend;

#[cfg(feature = "testing")]
pub use crate::testing::TestCluster;
