//! The controller manager: a chosen set of controllers run in one process
//! behind one leader election.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::watch;

use crate::informer::SharedInformerFactory;
use crate::leader::{Fence, LeaderElector};

/// What a controller gets when the manager starts it.
#[derive(Clone)]
pub struct ManagerContext {
    /// The shared informers of the process.
    pub factory: SharedInformerFactory,
    /// The fencing token of the current leadership term.
    pub fence: Fence,
    /// Becomes `true` when the controller must stop.
    pub stop: watch::Receiver<bool>,
}

impl ManagerContext {
    /// A future completing when the controller must stop.
    pub fn stopped(&self) -> impl Future<Output = ()> + Send + 'static + use<> {
        let mut stop = self.stop.clone();
        async move {
            let _ = stop.wait_for(|s| *s).await;
        }
    }
}

type Starter = Box<dyn FnOnce(ManagerContext) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// Runs named controllers together.
pub struct ControllerManager {
    factory: SharedInformerFactory,
    controllers: Vec<(String, Starter)>,
}

impl ControllerManager {
    /// A manager whose controllers share `factory`'s informers.
    pub fn new(factory: SharedInformerFactory) -> Self {
        Self { factory, controllers: Vec::new() }
    }

    /// Adds a controller started with the manager's context.
    pub fn with<F, Fut>(mut self, name: &str, start: F) -> Self
    where
        F: FnOnce(ManagerContext) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.controllers.push((name.into(), Box::new(move |ctx| Box::pin(start(ctx)))));
        self
    }

    /// Names of the controllers added.
    pub fn names(&self) -> Vec<String> {
        self.controllers.iter().map(|(n, _)| n.clone()).collect()
    }

    async fn run_all(self, fence: Fence, stop: watch::Receiver<bool>) {
        let mut tasks = Vec::new();
        for (name, start) in self.controllers {
            tracing::info!(controller = %name, "starting");
            tasks.push(tokio::spawn(start(ManagerContext {
                // Every write of the term carries its fence.
                factory: self.factory.with_client(fence.client(self.factory.client())),
                fence: fence.clone(),
                stop: stop.clone(),
            })));
        }
        for t in tasks {
            let _ = t.await;
        }
    }

    /// Runs every controller without election until `shutdown`.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) {
        let (tx, rx) = watch::channel(false);
        let all = tokio::spawn(self.run_all(Fence::always(), rx));
        shutdown.await;
        let _ = tx.send(true);
        let _ = all.await;
    }

    /// Runs every controller while `elector` holds the lease, until
    /// `shutdown` or loss of leadership; the lease is released at the end.
    pub async fn run_elected(
        self,
        elector: Arc<LeaderElector>,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), kube::Error> {
        elector.run(move |fence, stop| self.run_all(fence, stop), shutdown).await
    }
}
