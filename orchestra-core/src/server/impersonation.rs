//! User impersonation (`kubectl --as`, `--as-group`, `--as-uid`): a request
//! with `Impersonate-*` headers acts as the user they name, if the
//! authenticated requester may `impersonate` that user, each group, the
//! UID and each extra value, as upstream's impersonation filter checks.

use http::HeaderMap;

use super::State;
use crate::api::ApiError;
use crate::auth::{Attributes, Decision, UserInfo};

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA_PREFIX: &str = "impersonate-extra-";

/// What the `Impersonate-*` headers of a request ask for.
#[derive(Debug, Default, PartialEq)]
struct Requested {
    user: Option<String>,
    groups: Vec<String>,
    uid: Option<String>,
    /// (key, value) pairs; a key is percent-decoded and lower case.
    extra: Vec<(String, String)>,
}

fn requested(headers: &HeaderMap) -> Result<Requested, ApiError> {
    let text = |value: &http::HeaderValue| {
        value.to_str().map(str::to_owned).map_err(|_| ApiError::bad_request("impersonation headers must be ASCII"))
    };
    let mut requested = Requested::default();
    for (name, value) in headers {
        let name = name.as_str();
        if name == USER {
            requested.user = Some(text(value)?);
        } else if name == GROUP {
            requested.groups.push(text(value)?);
        } else if name == UID {
            requested.uid = Some(text(value)?);
        } else if let Some(key) = name.strip_prefix(EXTRA_PREFIX) {
            requested.extra.push((percent_decode(key).to_lowercase(), text(value)?));
        }
    }
    Ok(requested)
}

/// `%xx` escapes decoded (extra keys may hold `/` and the like).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The user a request acts as: `requester` itself without `Impersonate-*`
/// headers, else the impersonated user once the authorizer allowed each
/// part; a refused part is upstream's 403 (`users "bob" is forbidden: User
/// "alice" cannot impersonate resource "users" ...`).
pub(crate) async fn acting_user(
    state: &State,
    headers: &HeaderMap,
    path: &str,
    requester: UserInfo,
) -> Result<UserInfo, ApiError> {
    let requested = requested(headers)?;
    if requested == Requested::default() {
        return Ok(requester);
    }
    let Some(name) = requested.user else {
        return Err(ApiError::bad_request(
            "impersonating groups, a UID or extra fields requires impersonating a user (Impersonate-User)",
        ));
    };
    let check = |group: &str, resource: &str, subresource: &str, namespace: &str, object: &str| Attributes {
        user: requester.clone(),
        verb: "impersonate".into(),
        resource_request: true,
        api_group: group.into(),
        resource: resource.into(),
        subresource: subresource.into(),
        namespace: namespace.into(),
        name: object.into(),
        path: path.into(),
    };
    let account = name.strip_prefix("system:serviceaccount:").and_then(|rest| rest.split_once(':'));
    let mut checks = vec![match account {
        Some((namespace, account)) => check("", "serviceaccounts", "", namespace, account),
        None => check("", "users", "", "", &name),
    }];
    checks.extend(requested.groups.iter().map(|group| check("", "groups", "", "", group)));
    if let Some(uid) = &requested.uid {
        checks.push(check("authentication.k8s.io", "uids", "", "", uid));
    }
    for (key, value) in &requested.extra {
        checks.push(check("authentication.k8s.io", "userextras", key, "", value));
    }
    for attributes in &checks {
        let reason = match state.authorizer.authorize(attributes).await {
            Decision::Allow => continue,
            Decision::Deny(reason) | Decision::NoOpinion(reason) => reason,
        };
        return Err(super::forbidden(attributes, &reason));
    }
    let mut groups = requested.groups;
    if let (Some((namespace, _)), true) = (account, groups.is_empty()) {
        groups = vec!["system:serviceaccounts".into(), format!("system:serviceaccounts:{namespace}")];
    }
    let implied = if name == "system:anonymous" { "system:unauthenticated" } else { "system:authenticated" };
    if !groups.iter().any(|g| g == implied) {
        groups.push(implied.into());
    }
    let mut user = UserInfo { name, uid: requested.uid.unwrap_or_default(), groups, ..Default::default() };
    for (key, value) in requested.extra {
        user.extra.entry(key).or_default().push(value);
    }
    Ok(user)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_read_as_upstream_sends_them() {
        let mut headers = HeaderMap::new();
        headers.insert(USER, "system:serviceaccount:ns:robot".parse().unwrap());
        headers.append(GROUP, "a".parse().unwrap());
        headers.append(GROUP, "b".parse().unwrap());
        headers.insert("impersonate-extra-example.com%2fscopes", "read".parse().unwrap());
        let requested = requested(&headers).unwrap();
        assert_eq!(requested.user.as_deref(), Some("system:serviceaccount:ns:robot"));
        assert_eq!(requested.groups, ["a", "b"]);
        assert_eq!(requested.extra, [("example.com/scopes".to_owned(), "read".to_owned())]);
        assert_eq!(super::requested(&HeaderMap::new()).unwrap(), Requested::default());
        assert_eq!(percent_decode("a%2Fb%zz"), "a/b%zz");
    }
}
