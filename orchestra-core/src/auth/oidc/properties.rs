//! Property tests of OIDC ID tokens: no text authenticates and none
//! panics; a token the issuer signed authenticates, any change to it is
//! refused; for generated claims, the decision agrees with a reference
//! reading of the checks (audience, expiry, not-before, username and
//! groups claims).

use std::time::Instant;

use proptest::prelude::*;
use serde_json::json;

use super::tests::Signer;
use super::*;
use crate::auth::AuthenticatorChain;
use crate::properties::config;

const ISSUER: &str = "https://issuer.example";

/// An authenticator holding the issuer's key already (nothing is fetched:
/// a key id it lacks is refused as "fetched recently"), in a chain, with a
/// runtime to drive it.
struct Fixture {
    signer: Signer,
    chain: AuthenticatorChain,
    runtime: tokio::runtime::Runtime,
}

impl Fixture {
    fn new(groups: bool) -> Fixture {
        let signer = Signer::ec();
        let mut options = OidcOptions::new(ISSUER, "kubernetes");
        options.signing_algs = vec!["RS256".into(), "ES256".into()];
        options.min_refresh_interval = Duration::from_secs(3600);
        if groups {
            options.groups_claim = Some("groups".into());
        }
        let authenticator = OidcAuthenticator::new(options).unwrap();
        let key = Key::from_jwk(&signer.jwk("k")).unwrap();
        *authenticator.keys.write().unwrap() = Arc::new(KeySet { keys: vec![key] });
        authenticator.refresh.try_lock().unwrap().last = Some(Instant::now());
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        Fixture { signer, chain: AuthenticatorChain::new().with(authenticator), runtime }
    }

    fn token(&self, claims: &Value) -> String {
        self.signer.sign("k", claims)
    }

    fn authenticate(&self, token: &str) -> Option<Result<UserInfo, AuthError>> {
        let request = http::Request::get("/api").header("authorization", format!("Bearer {token}")).body(()).ok()?;
        Some(self.runtime.block_on(self.chain.authenticate(&request.into_parts().0)))
    }
}

fn valid_claims() -> Value {
    json!({"iss": ISSUER, "aud": "kubernetes", "sub": "alice", "exp": now_secs() + 3600})
}

/// Any JSON value, shallow.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        "[a-z]{0,8}".prop_map(Value::from),
        Just(Value::from("kubernetes")),
    ];
    leaf.prop_recursive(2, 8, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::btree_map("[a-z]{1,3}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A claim that is absent (`None`), one of `interesting`, or any JSON.
fn claim(interesting: Vec<Value>) -> impl Strategy<Value = Option<Value>> {
    prop_oneof![1 => Just(None), 3 => proptest::sample::select(interesting).prop_map(Some), 1 => any_json().prop_map(Some)]
}

/// Whether the checks pass, read independently of the authenticator.
fn reference(claims: &Value, now: i64) -> Result<(String, Vec<String>), ()> {
    let audience_ok = match &claims["aud"] {
        Value::String(a) => a == "kubernetes",
        Value::Array(list) => list.iter().any(|a| *a == "kubernetes"),
        _ => false,
    };
    let exp_ok = claims["exp"].as_f64().is_some_and(|exp| (now as f64) <= exp.trunc());
    let nbf_ok = match claims.get("nbf") {
        Some(nbf) => nbf.as_f64().is_none_or(|nbf| nbf.trunc() <= (now + 300) as f64),
        None => true,
    };
    let sub = claims["sub"].as_str();
    let groups = match claims.get("groups") {
        None | Some(Value::Null) => Some(Vec::new()),
        Some(Value::String(g)) => Some(vec![g.clone()]),
        Some(Value::Array(list)) => list.iter().map(|g| g.as_str().map(String::from)).collect(),
        Some(_) => None,
    };
    match (audience_ok && exp_ok && nbf_ok, sub, groups) {
        (true, Some(sub), Some(groups)) => Ok((format!("{ISSUER}#{sub}"), groups)),
        _ => Err(()),
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn no_text_is_a_token(text in "\\PC{0,200}", parts in proptest::collection::vec("[A-Za-z0-9_-]{0,60}", 0..5)) {
        let fixture = Fixture::new(false);
        for token in [text, parts.join(".")] {
            if let Some(outcome) = fixture.authenticate(&token) {
                prop_assert!(outcome.is_err(), "{:?} authenticated: {:?}", token, outcome);
            }
        }
    }

    #[test]
    fn signed_tokens_authenticate_and_changed_ones_do_not(
        at in any::<prop::sample::Index>(),
        replacement in proptest::sample::select(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.=+/ ".to_vec()),
        cut in any::<prop::sample::Index>(),
    ) {
        let fixture = Fixture::new(false);
        let token = fixture.token(&valid_claims());
        let user = fixture.authenticate(&token).unwrap().unwrap();
        prop_assert_eq!(user.name, format!("{ISSUER}#alice"));

        let at = at.index(token.len());
        let mut changed = token.clone();
        changed.replace_range(at..=at, &char::from(replacement).to_string());
        if changed != token && let Some(outcome) = fixture.authenticate(&changed) {
            prop_assert!(outcome.is_err(), "changed at {}: {:?}", at, outcome);
        }
        let truncated = &token[..cut.index(token.len())];
        prop_assert!(fixture.authenticate(truncated).unwrap().is_err(), "truncated to {}", truncated.len());
    }

    #[test]
    fn forged_signatures_and_headers_never_verify(
        signature in proptest::collection::vec(any::<u8>(), 0..80),
        header in any_json(),
        padding in 0usize..100_000,
    ) {
        let fixture = Fixture::new(false);
        let token = fixture.token(&valid_claims());
        let (signed, _) = token.rsplit_once('.').unwrap();
        let forged = format!("{signed}.{}", B64.encode(&signature));
        prop_assert!(fixture.authenticate(&forged).unwrap().is_err());

        let (_, rest) = token.split_once('.').unwrap();
        let huge = json!({"alg": "ES256", "kid": "k", "pad": "x".repeat(padding)});
        for header in [header, huge] {
            let token = format!("{}.{rest}", B64.encode(header.to_string()));
            prop_assert!(fixture.authenticate(&token).unwrap().is_err(), "header {}", header);
        }
        // Another key's signature under our key id.
        let stranger = Signer::ec().sign("k", &valid_claims());
        prop_assert!(fixture.authenticate(&stranger).unwrap().is_err());
    }

    #[test]
    fn claims_are_checked_as_the_reference_reads_them(
        aud in claim(vec![json!("kubernetes"), json!("other"), json!(["x", "kubernetes"]), json!([])]),
        exp_offset in claim(vec![json!(3600), json!(-10), json!(100.5), json!("3600")]),
        nbf_offset in claim(vec![json!(0), json!(200), json!(400), json!(-100)]),
        sub in claim(vec![json!("alice"), json!(""), json!(7)]),
        groups in claim(vec![json!("dev"), json!(["dev", "ops"]), json!([1]), json!(null)]),
    ) {
        let fixture = Fixture::new(true);
        let now = now_secs();
        let mut claims = json!({"iss": ISSUER});
        let relative = |offset: Value| match offset.as_f64() {
            // Offsets from now, as whole or fractional seconds.
            Some(offset) if offset.fract() == 0.0 && offset.abs() < 1e9 => json!(now + offset as i64),
            Some(offset) if offset.abs() < 1e9 => json!(now as f64 + offset),
            _ => offset,
        };
        for (name, value) in [
            ("aud", aud),
            ("exp", exp_offset.map(relative)),
            ("nbf", nbf_offset.map(relative)),
            ("sub", sub),
            ("groups", groups),
        ] {
            if let Some(value) = value {
                claims[name] = value;
            }
        }
        let token = fixture.token(&claims);
        let before = now_secs();
        let got = fixture.authenticate(&token).unwrap();
        let expected = reference(&claims, before);
        // A claim on the boundary of a second that ticked meanwhile.
        prop_assume!(expected == reference(&claims, now_secs()));
        // The chain adds system:authenticated to every user.
        let got = got.map(|user| {
            let groups = user.groups.into_iter().filter(|g| g != "system:authenticated").collect();
            (user.name, groups)
        });
        prop_assert_eq!(got.map_err(|_| ()), expected, "claims {}", claims);
    }
}
