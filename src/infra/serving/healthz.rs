//! `/healthz`, `/livez` and `/readyz` as `k8s.io/apiserver/pkg/server/healthz` serves them: named
//! checks, each also at `/<path>/<check>`; `?verbose` lists them; `?exclude=<check>` skips one; a
//! failing check turns the answer into a 500 that names it (its reason is only given at its own
//! path, which is not always allowed by authorization).

use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Response, StatusCode};

/// One check: Ok, or why not.
pub(crate) type CheckFn = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// The checks of one path (`healthz`, `livez` or `readyz`).
#[derive(Clone)]
pub(crate) struct HealthChecks {
    name: &'static str,
    checks: Vec<(&'static str, CheckFn)>,
}

/// upstream's `ping` check: the process answers.
pub(crate) fn ping() -> (&'static str, CheckFn) {
    ("ping", Arc::new(|| Ok(())))
}

impl HealthChecks {
    /// `checks` of `/<name>`; with none, the `ping` check alone, as upstream.
    pub(crate) fn new(name: &'static str, checks: Vec<(&'static str, CheckFn)>) -> Self {
        let checks = if checks.is_empty() {
            vec![ping()]
        } else {
            checks
        };
        Self { name, checks }
    }

    /// The answer for `path` (`/<name>` or `/<name>/<check>`), or `None` when it is not ours.
    pub(crate) fn answer(&self, path: &str, query: Option<&str>) -> Option<Response<Full<Bytes>>> {
        let rest = path.strip_prefix('/')?.strip_prefix(self.name)?;
        if rest.is_empty() || rest == "/" {
            return Some(self.root(query));
        }
        let check = rest.strip_prefix('/')?;
        let (_, f) = self.checks.iter().find(|(n, _)| *n == check)?;
        Some(match f() {
            Ok(()) => super::text(StatusCode::OK, "ok"),
            Err(e) => super::text(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("internal server error: {e}\n"),
            ),
        })
    }

    fn root(&self, query: Option<&str>) -> Response<Full<Bytes>> {
        let params: Vec<(&str, &str)> = query
            .unwrap_or("")
            .split('&')
            .filter(|kv| !kv.is_empty())
            .map(|kv| kv.split_once('=').unwrap_or((kv, "")))
            .collect();
        let verbose = params.iter().any(|(k, _)| *k == "verbose");
        let mut excluded: Vec<&str> = params
            .iter()
            .filter(|(k, _)| *k == "exclude")
            .map(|(_, v)| *v)
            .collect();
        let mut out = String::new();
        let mut failed = false;
        for (name, check) in &self.checks {
            if let Some(i) = excluded.iter().position(|e| e == name) {
                excluded.remove(i);
                out.push_str(&format!("[+]{name} excluded: ok\n"));
                continue;
            }
            match check() {
                Ok(()) => out.push_str(&format!("[+]{name} ok\n")),
                Err(e) => {
                    failed = true;
                    tracing::debug!(check = name, error = %e, "{} check failed", self.name);
                    out.push_str(&format!("[-]{name} failed: reason withheld\n"));
                }
            }
        }
        if !excluded.is_empty() {
            let quoted: Vec<String> = excluded.iter().map(|e| format!("{e:?}")).collect();
            out.push_str(&format!(
                "warn: some health checks cannot be excluded: no matches for {}\n",
                quoted.join(",")
            ));
        }
        if failed {
            out.push_str(&format!("{} check failed\n", self.name));
            return super::text(StatusCode::INTERNAL_SERVER_ERROR, &out);
        }
        if !verbose {
            return super::text(StatusCode::OK, "ok");
        }
        out.push_str(&format!("{} check passed\n", self.name));
        super::text(StatusCode::OK, &out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn body(resp: Response<Full<Bytes>>) -> (u16, String) {
        let status = resp.status().as_u16();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }

    fn checks(leading_ok: bool) -> HealthChecks {
        let le: CheckFn = Arc::new(move || {
            if leading_ok {
                Ok(())
            } else {
                Err("failed election to renew leadership on lease ksched-p".into())
            }
        });
        HealthChecks::new("healthz", vec![("leaderElection", le)])
    }

    #[tokio::test]
    async fn healthz_answers_as_the_apiserver_library_does() {
        let ok = checks(true);
        assert_eq!(
            body(ok.answer("/healthz", None).unwrap()).await,
            (200, "ok".into())
        );
        assert_eq!(
            body(ok.answer("/healthz", Some("verbose")).unwrap()).await,
            (200, "[+]leaderElection ok\nhealthz check passed\n".into())
        );
        assert_eq!(
            body(ok.answer("/healthz/leaderElection", None).unwrap()).await,
            (200, "ok".into())
        );
        assert!(ok.answer("/healthz/nope", None).is_none());
        assert!(ok.answer("/healthzz", None).is_none());
        assert!(ok.answer("/readyz", None).is_none());
    }

    #[tokio::test]
    async fn a_failing_check_withholds_its_reason_except_at_its_own_path() {
        let bad = checks(false);
        assert_eq!(
            body(bad.answer("/healthz", None).unwrap()).await,
            (
                500,
                "[-]leaderElection failed: reason withheld\nhealthz check failed\n".into()
            )
        );
        assert_eq!(
            body(bad.answer("/healthz/leaderElection", None).unwrap()).await,
            (
                500,
                "internal server error: failed election to renew leadership on lease ksched-p\n"
                    .into()
            )
        );
        assert_eq!(
            body(
                bad.answer("/healthz", Some("exclude=leaderElection"))
                    .unwrap()
            )
            .await,
            (200, "ok".into())
        );
    }

    #[tokio::test]
    async fn without_checks_ping_answers() {
        let livez = HealthChecks::new("livez", vec![]);
        assert_eq!(
            body(livez.answer("/livez/ping", None).unwrap()).await,
            (200, "ok".into())
        );
    }
}
