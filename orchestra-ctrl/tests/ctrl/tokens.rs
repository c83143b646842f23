//! The token controller against an API server that accepts the tokens it
//! writes: a token Secret is filled, its token authenticates as the service
//! account over HTTPS, and deleting the account deletes the Secret and
//! invalidates the token.

use std::time::Duration;

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use orchestra::testing::TestCluster;
use orchestra_ctrl::controllers::serviceaccount_token::{self, ACCOUNT_NAME, ACCOUNT_UID, SECRET_TYPE, TokenConfig};
use orchestra_ctrl::informer::SharedInformerFactory;
use tokio::sync::watch;

use super::support::eventually;

/// Who `token` authenticates as over HTTPS (`None`: refused with 401).
async fn whoami(cluster: &TestCluster, token: &str) -> Option<String> {
    let client = cluster.client_with_token(token).await;
    let review = SelfSubjectReview { metadata: ObjectMeta::default(), status: None };
    match Api::<SelfSubjectReview>::all(client).create(&PostParams::default(), &review).await {
        Ok(r) => r.status.and_then(|s| s.user_info).and_then(|u| u.username),
        Err(kube::Error::Api(s)) if s.code == 401 => None,
        Err(e) => panic!("whoami: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_secrets_are_filled_and_go_with_their_account() {
    // The API server accepts the tokens of the cluster's signer.
    let cluster = TestCluster::start().await;
    let signer = cluster.handle().token_signer().clone();
    let client = cluster.client();
    let (stop, stopped) = watch::channel(false);
    let config = TokenConfig::new(signer).with_root_ca("-----BEGIN CERTIFICATE-----\nCA\n");
    let controller =
        tokio::spawn(serviceaccount_token::run(SharedInformerFactory::new(client.clone()), config, async move {
            let mut rx = stopped;
            let _ = rx.wait_for(|s| *s).await;
        }));

    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    let account = ServiceAccount {
        metadata: ObjectMeta { name: Some("robot".into()), ..Default::default() },
        ..Default::default()
    };
    let account = accounts.create(&PostParams::default(), &account).await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let empty = |name: &str, annotations: &[(&str, &str)]| Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            annotations: Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..Default::default()
        },
        type_: Some(SECRET_TYPE.into()),
        ..Default::default()
    };
    secrets.create(&PostParams::default(), &empty("robot-token", &[(ACCOUNT_NAME, "robot")])).await.unwrap();
    // A Secret for an account that does not exist is deleted.
    secrets.create(&PostParams::default(), &empty("ghost-token", &[(ACCOUNT_NAME, "ghost")])).await.unwrap();

    eventually(Duration::from_secs(10), "the token Secret is filled", || {
        let secrets = secrets.clone();
        async move { secrets.get("robot-token").await.unwrap().data.is_some_and(|d| d.contains_key("token")) }
    })
    .await;
    let filled = secrets.get("robot-token").await.unwrap();
    let data = filled.data.as_ref().unwrap();
    assert_eq!(data["namespace"].0, b"default");
    assert!(data["ca.crt"].0.starts_with(b"-----BEGIN CERTIFICATE-----"));
    assert_eq!(filled.metadata.annotations.as_ref().unwrap()[ACCOUNT_UID], account.metadata.uid.clone().unwrap());
    let token = String::from_utf8(data["token"].0.clone()).unwrap();
    assert_eq!(whoami(&cluster, &token).await.as_deref(), Some("system:serviceaccount:default:robot"));
    eventually(Duration::from_secs(10), "the orphan token Secret is deleted", || {
        let secrets = secrets.clone();
        async move { secrets.get_opt("ghost-token").await.unwrap().is_none() }
    })
    .await;

    // The account goes: so do its Secret and the token's validity.
    accounts.delete("robot", &DeleteParams::default()).await.unwrap();
    eventually(Duration::from_secs(10), "the token Secret goes with its account", || {
        let secrets = secrets.clone();
        async move { secrets.get_opt("robot-token").await.unwrap().is_none() }
    })
    .await;
    assert_eq!(whoami(&cluster, &token).await, None);
    let _ = stop.send(true);
    controller.await.unwrap();
}
