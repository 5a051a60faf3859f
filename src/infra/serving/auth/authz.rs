//! Authorization: members of `system:masters`, the always-allowed paths, else a
//! `SubjectAccessReview` of the non-resource URL and the request's verb.

use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

use super::{AuthSetupError, REVIEW_TIMEOUT, Refusal, TtlCache, User, digest};

/// One always-allowed path: exact, or a prefix when it ended in `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum PathRule {
    Exact(String),
    Prefix(String),
}

pub(super) fn path_rules(paths: &[String]) -> Result<Vec<PathRule>, AuthSetupError> {
    let mut rules = Vec::new();
    for p in paths.iter().filter(|p| !p.is_empty()) {
        // A leading slash is optional, as upstream's.
        let p = if p.starts_with('/') {
            p.clone()
        } else {
            format!("/{p}")
        };
        match p.strip_suffix('*') {
            Some(prefix) if prefix.contains('*') => {
                return Err(AuthSetupError::Path(format!(
                    "{p}: only a trailing * is allowed"
                )));
            }
            Some(prefix) => rules.push(PathRule::Prefix(prefix.to_string())),
            None if p.contains('*') => {
                return Err(AuthSetupError::Path(format!(
                    "{p}: only a trailing * is allowed"
                )));
            }
            None => rules.push(PathRule::Exact(p)),
        }
    }
    Ok(rules)
}

/// Access decisions by SubjectAccessReview.
pub(super) struct AccessReviewer {
    pub(super) api: Api<SubjectAccessReview>,
    pub(super) cache: TtlCache<(bool, String)>,
    pub(super) allow_ttl: Duration,
    pub(super) deny_ttl: Duration,
}

impl AccessReviewer {
    /// (allowed, reason).
    async fn review(&self, user: &User, verb: &str, path: &str) -> Result<(bool, String), String> {
        let extra = serde_json::to_string(&user.extra).unwrap_or_default();
        let groups = user.groups.join("\n");
        let key = digest(&[&user.name, &user.uid, &groups, &extra, verb, path]);
        if let Some(cached) = self.cache.get(&key) {
            return Ok(cached);
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: (!user.uid.is_empty()).then(|| user.uid.clone()),
                groups: Some(user.groups.clone()),
                extra: (!user.extra.is_empty()).then(|| user.extra.clone().into_iter().collect()),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_string()),
                    verb: Some(verb.to_string()),
                }),
                resource_attributes: None,
            },
            ..SubjectAccessReview::default()
        };
        let answer = tokio::time::timeout(
            REVIEW_TIMEOUT,
            self.api.create(&PostParams::default(), &review),
        )
        .await
        .map_err(|_| "the subject access review was not answered in time".to_string())?
        .map_err(|e| format!("subject access review: {e}"))?;
        let status = answer.status.unwrap_or_default();
        let decision = (status.allowed, status.reason.unwrap_or_default());
        let ttl = if decision.0 {
            self.allow_ttl
        } else {
            self.deny_ttl
        };
        self.cache.put(key, decision.clone(), ttl);
        Ok(decision)
    }
}

/// Authorizes requests as kube-scheduler's delegating authorizer does.
pub(crate) struct Authorizer {
    pub(super) always_allow: Vec<PathRule>,
    pub(super) privileged_groups: Vec<String>,
    pub(super) reviews: Option<AccessReviewer>,
}

impl Authorizer {
    pub(crate) async fn authorize(
        &self,
        user: &User,
        method: &str,
        path: &str,
    ) -> Result<(), Refusal> {
        if user
            .groups
            .iter()
            .any(|g| self.privileged_groups.contains(g))
        {
            return Ok(());
        }
        let path_allowed = self.always_allow.iter().any(|rule| match rule {
            PathRule::Exact(p) => p == path,
            PathRule::Prefix(p) => path.starts_with(p.as_str()),
        });
        if path_allowed {
            return Ok(());
        }
        let verb = method.to_ascii_lowercase();
        let forbidden = |reason: String| Refusal::Forbidden {
            user: user.name.clone(),
            reason: format!("User {:?} cannot {verb} path {path:?}{reason}", user.name),
        };
        let Some(reviews) = &self.reviews else {
            return Err(forbidden(String::new()));
        };
        match reviews.review(user, &verb, path).await {
            Ok((true, _)) => Ok(()),
            Ok((false, reason)) if reason.is_empty() => Err(forbidden(reason)),
            Ok((false, reason)) => Err(forbidden(format!(": {reason}"))),
            Err(e) => Err(Refusal::Error(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ANONYMOUS, MASTERS};
    use super::*;

    fn authorizer(paths: &[&str]) -> Authorizer {
        let paths: Vec<String> = paths.iter().map(|s| s.to_string()).collect();
        Authorizer {
            always_allow: path_rules(&paths).unwrap(),
            privileged_groups: vec![MASTERS.into()],
            reviews: None,
        }
    }

    #[tokio::test]
    async fn always_allowed_paths_and_masters_pass_others_are_forbidden() {
        let a = authorizer(&["/healthz", "readyz", "/debug/*"]);
        let anon = User::anonymous();
        assert!(a.authorize(&anon, "GET", "/healthz").await.is_ok());
        assert!(a.authorize(&anon, "GET", "/readyz").await.is_ok());
        assert!(
            a.authorize(&anon, "GET", "/debug/pprof/profile")
                .await
                .is_ok()
        );
        // Exact paths are exact: a check under /healthz needs authorization, as upstream.
        let err = a
            .authorize(&anon, "GET", "/healthz/leaderElection")
            .await
            .unwrap_err();
        assert_eq!(
            err,
            Refusal::Forbidden {
                user: ANONYMOUS.into(),
                reason: r#"User "system:anonymous" cannot get path "/healthz/leaderElection""#
                    .into()
            }
        );
        let admin = User::named("admin".into(), vec![MASTERS.into()]);
        assert!(a.authorize(&admin, "GET", "/metrics").await.is_ok());
    }

    #[test]
    fn a_star_is_only_allowed_at_the_end() {
        let bad = vec!["/a*/b".to_string()];
        assert!(path_rules(&bad).is_err());
    }
}
