//! The webhook configurations a server's
//! [`MutatingAdmissionWebhook`](crate::auth::admission::MutatingAdmissionWebhook) and
//! [`ValidatingAdmissionWebhook`](crate::auth::admission::ValidatingAdmissionWebhook)
//! plugins read: from the cache the server keeps from a watch of its store,
//! with the server's registry for equivalent resources.

use std::sync::Arc;

use async_trait::async_trait;

use super::reader::ServerObjects;
use crate::api::{ApiError, Registry};
use crate::auth::admission::webhook::{Configurations, Kind, Webhook, WebhookCache};

pub(crate) struct ServerWebhooks {
    pub cache: Arc<WebhookCache>,
    pub objects: ServerObjects,
}

#[async_trait]
impl Configurations for ServerWebhooks {
    async fn webhooks(&self, kind: Kind) -> Result<Arc<[Arc<Webhook>]>, ApiError> {
        self.cache.webhooks(kind)
    }

    fn registry(&self) -> Result<Arc<Registry>, ApiError> {
        Ok(self.objects.state()?.registry())
    }
}
