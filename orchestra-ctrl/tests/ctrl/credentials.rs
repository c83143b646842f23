//! `TokenRequestCredentials` against an API server over HTTPS: a
//! controller's client authenticates as its own service account (created
//! when missing), not as the manager whose kubeconfig it was made from.

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, ObjectMeta, PostParams};
use orchestra::testing::TestCluster;
use orchestra_ctrl::credentials::{ControllerCredentials, TokenRequestCredentials};

/// Who `client` authenticates as.
async fn whoami(client: kube::Client) -> String {
    let review = SelfSubjectReview { metadata: ObjectMeta::default(), status: None };
    let review = Api::<SelfSubjectReview>::all(client).create(&PostParams::default(), &review).await.unwrap();
    review.status.and_then(|s| s.user_info).and_then(|u| u.username).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controllers_act_as_their_own_service_accounts() {
    let cluster = TestCluster::start().await;
    let kubectl = cluster.kubectl().await;
    let config = orchestra_core::client::config_from_kubeconfig(kubectl.kubeconfig()).await.unwrap();
    let manager = kube::Client::try_from(config.clone()).unwrap();
    let manager_name = whoami(manager.clone()).await;
    let accounts: Api<ServiceAccount> = Api::namespaced(cluster.client(), "kube-system");
    assert!(accounts.get_opt("replicaset-controller").await.unwrap().is_none());

    let credentials = TokenRequestCredentials::new(manager, config);
    let client = credentials.client("replicaset-controller").await.expect("a client");
    assert_eq!(whoami(client.clone()).await, "system:serviceaccount:kube-system:replicaset-controller");
    assert_ne!(manager_name, "system:serviceaccount:kube-system:replicaset-controller");
    assert!(accounts.get_opt("replicaset-controller").await.unwrap().is_some(), "the account was created");

    // An account that exists is used as it is; each controller has its own.
    let other = credentials.client("deployment-controller").await.expect("a client");
    assert_eq!(whoami(other).await, "system:serviceaccount:kube-system:deployment-controller");
    let again = credentials.client("replicaset-controller").await.expect("a client");
    assert_eq!(whoami(again).await, "system:serviceaccount:kube-system:replicaset-controller");
}
