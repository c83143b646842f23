//! Property tests of service account tokens as bearer credentials: no text
//! authenticates, and none panics; a token the signer issued authenticates,
//! and any change to it (a character, a truncation, a signature from
//! elsewhere, an oversized header) is refused with a 401.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use orchestra_store::MemStore;
use proptest::prelude::*;

use super::*;
use crate::auth::AuthenticatorChain;
use crate::properties::config;

/// A signer, a chain holding only its authenticator, and a runtime to drive
/// it, shared by the cases of one property.
struct Fixture {
    signer: Arc<TokenSigner>,
    chain: AuthenticatorChain,
    runtime: tokio::runtime::Runtime,
}

impl Fixture {
    fn new() -> Fixture {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let signer = Arc::new(TokenSigner::generate(DEFAULT_ISSUER).unwrap());
        let store: Arc<dyn Store> = {
            let _runtime = runtime.enter();
            Arc::new(MemStore::new())
        };
        let account = serde_json::json!({"metadata": {"name": "robot", "namespace": "ci", "uid": "u-1"}});
        runtime.block_on(async {
            let value = serde_json::to_vec(&account).unwrap().into();
            store.put("/registry/serviceaccounts/ci/robot", value, None).await.unwrap();
        });
        let authenticator = ServiceAccountAuthenticator::new(signer.clone(), store, vec![DEFAULT_ISSUER.into()]);
        Fixture { signer, chain: AuthenticatorChain::new().with(authenticator), runtime }
    }

    fn token(&self) -> String {
        self.signer.sign(&self.signer.claims("ci", "robot", "u-1", vec![DEFAULT_ISSUER.into()], 3600, None))
    }

    /// What the chain makes of `Authorization: Bearer <token>`; `None` when
    /// the header cannot carry it (the client could not send it).
    fn authenticate(&self, token: &str) -> Option<Result<UserInfo, crate::auth::AuthError>> {
        let request = http::Request::get("/api").header("authorization", format!("Bearer {token}")).body(()).ok()?;
        Some(self.runtime.block_on(self.chain.authenticate(&request.into_parts().0)))
    }
}

/// A character of a compact JWS, or one that breaks it.
fn jws_char() -> impl Strategy<Value = char> {
    prop_oneof![
        8 => proptest::sample::select(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".to_vec()).prop_map(char::from),
        1 => proptest::sample::select(vec!['.', '=', '+', '/', ' ', '\u{e9}']),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn no_text_is_a_token(text in "\\PC{0,200}", parts in proptest::collection::vec("[A-Za-z0-9_-]{0,60}", 0..5)) {
        let fixture = Fixture::new();
        for token in [text, parts.join(".")] {
            prop_assert_eq!(fixture.signer.verify(&token).ok().flatten(), None);
            if let Some(outcome) = fixture.authenticate(&token) {
                prop_assert!(outcome.is_err(), "{:?} authenticated: {:?}", token, outcome);
            }
        }
    }

    #[test]
    fn issued_tokens_authenticate_and_changed_ones_do_not(
        at in any::<prop::sample::Index>(),
        replacement in jws_char(),
        cut in any::<prop::sample::Index>(),
    ) {
        let fixture = Fixture::new();
        let token = fixture.token();
        let user = fixture.authenticate(&token).unwrap().unwrap();
        prop_assert_eq!(user.name, "system:serviceaccount:ci:robot");

        let at = at.index(token.len());
        let mut changed = token.clone();
        changed.replace_range(at..=at, &replacement.to_string());
        if changed != token && let Some(outcome) = fixture.authenticate(&changed) {
            prop_assert!(outcome.is_err(), "changed at {}: {:?}", at, outcome);
        }
        let truncated = &token[..cut.index(token.len())];
        prop_assert!(fixture.authenticate(truncated).unwrap().is_err(), "truncated to {}", truncated.len());
    }

    #[test]
    fn signatures_from_elsewhere_never_verify(signature in proptest::collection::vec(any::<u8>(), 0..80), kid in "[A-Za-z0-9_-]{0,30}") {
        let fixture = Fixture::new();
        let token = fixture.token();
        let (signed, _) = token.rsplit_once('.').unwrap();
        let forged = format!("{signed}.{}", B64.encode(&signature));
        prop_assert!(fixture.signer.verify(&forged).is_err(), "a forged signature verified");
        prop_assert!(fixture.authenticate(&forged).unwrap().is_err());

        // Another key's token, however its header names the key.
        let stranger = TokenSigner::generate(DEFAULT_ISSUER).unwrap();
        let foreign = stranger.sign(&stranger.claims("ci", "robot", "u-1", vec![DEFAULT_ISSUER.into()], 3600, None));
        let (_, payload_and_signature) = foreign.split_once('.').unwrap();
        let our_header = token.split('.').next().unwrap();
        for token in [foreign.clone(), format!("{our_header}.{payload_and_signature}")] {
            prop_assert!(fixture.authenticate(&token).unwrap().is_err());
        }
        let header = serde_json::json!({"alg": "ES256", "kid": kid});
        let relabelled = format!("{}.{payload_and_signature}", B64.encode(header.to_string()));
        prop_assert!(fixture.authenticate(&relabelled).unwrap().is_err());
    }

    #[test]
    fn huge_and_odd_headers_are_refused(padding in 0usize..200_000, alg in "[A-Z0-9]{0,6}", junk in any::<Vec<u8>>()) {
        let fixture = Fixture::new();
        let token = fixture.token();
        let (_, rest) = token.split_once('.').unwrap();
        let headers = [
            serde_json::json!({"alg": "ES256", "kid": "k", "pad": "x".repeat(padding)}).to_string().into_bytes(),
            serde_json::json!({"alg": alg, "kid": null}).to_string().into_bytes(),
            junk,
        ];
        for header in headers {
            let token = format!("{}.{rest}", B64.encode(&header));
            prop_assert!(fixture.authenticate(&token).unwrap().is_err());
        }
    }
}
