//! Impersonation (`k8s.io/apiserver/pkg/endpoints/filters/impersonation.go`): `Impersonate-User`,
//! `Impersonate-Group` (repeatable), `Impersonate-Uid` and `Impersonate-Extra-*` headers make the
//! request act as another user, once the requester is authorized for the `impersonate` verb on
//! each: `users`, `serviceaccounts` (for `system:serviceaccount:<ns>:<name>`), `groups`, `uids`,
//! `userextras/<key>`. `kubectl --as`/`--as-group` send them.

use http::HeaderMap;

use super::{ALL_AUTHENTICATED, ALL_UNAUTHENTICATED, ANONYMOUS, Attributes, AuthorizationMode, authorize, forbidden};
use crate::admission_seam::UserInfo;
use crate::status::ApiError;
use crate::store::Store;

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA_PREFIX: &str = "impersonate-extra-";

fn values<'a>(headers: &'a HeaderMap, name: &str) -> Vec<&'a str> {
    headers.get_all(name).iter().filter_map(|v| v.to_str().ok()).collect()
}

/// The user a request acts as: `requester` itself without impersonation headers, else the
/// impersonated user (403 when the requester may not impersonate it, 400 for groups without a user).
pub fn acting_user(
    store: &Store,
    mode: Option<AuthorizationMode>,
    requester: UserInfo,
    headers: &HeaderMap,
) -> Result<UserInfo, ApiError> {
    let users = values(headers, USER);
    let groups = values(headers, GROUP);
    let uids = values(headers, UID);
    let extras: Vec<(String, &str)> = headers
        .iter()
        .filter_map(|(k, v)| {
            let key = k.as_str().strip_prefix(EXTRA_PREFIX)?;
            Some((key.to_string(), v.to_str().ok()?))
        })
        .collect();
    if users.is_empty() && groups.is_empty() && uids.is_empty() && extras.is_empty() {
        return Ok(requester);
    }
    let Some(username) = users.first().map(|u| u.to_string()) else {
        return Err(ApiError::Internal(
            "requested impersonation of groups, uid or extra without impersonating a user".into(),
        ));
    };
    let check = |attrs: Attributes| -> Result<(), ApiError> {
        let Some(mode) = mode else { return Ok(()) };
        let d = authorize(store, mode, &requester, &attrs);
        if d.allowed {
            Ok(())
        } else {
            Err(forbidden(&requester, &attrs, &d.reason))
        }
    };
    let mut impersonated_groups: Vec<String> = Vec::new();
    match username
        .strip_prefix("system:serviceaccount:")
        .and_then(|r| r.split_once(':'))
    {
        Some((ns, name)) => {
            check(Attributes::resource("impersonate", "", "serviceaccounts", ns, name))?;
            if groups.is_empty() {
                impersonated_groups = vec!["system:serviceaccounts".into(), format!("system:serviceaccounts:{ns}")];
            }
        }
        None => check(Attributes::resource("impersonate", "", "users", "", &username))?,
    }
    for g in &groups {
        check(Attributes::resource("impersonate", "", "groups", "", g))?;
        impersonated_groups.push(g.to_string());
    }
    for u in &uids {
        check(Attributes::resource(
            "impersonate",
            "authentication.k8s.io",
            "uids",
            "",
            u,
        ))?;
    }
    for (key, value) in &extras {
        check(
            Attributes::resource("impersonate", "authentication.k8s.io", "userextras", "", value).with_subresource(key),
        )?;
    }
    // Everyone but the anonymous user is authenticated, unless the groups say otherwise.
    if username == ANONYMOUS {
        if !impersonated_groups.iter().any(|g| g == ALL_UNAUTHENTICATED) {
            impersonated_groups.push(ALL_UNAUTHENTICATED.into());
        }
    } else if !impersonated_groups
        .iter()
        .any(|g| g == ALL_AUTHENTICATED || g == ALL_UNAUTHENTICATED)
    {
        impersonated_groups.push(ALL_AUTHENTICATED.into());
    }
    Ok(UserInfo {
        username,
        uid: uids.first().map(|u| u.to_string()).unwrap_or_default(),
        groups: impersonated_groups,
    })
}
