//! The scheduler's API clients, limited as upstream's are: `clientConnection.qps` and `burst` as a
//! token bucket per client (client-go's rate limiter), plus a bound on requests in flight and a
//! timeout on every request. Watches are long-lived and pass unlimited (the server ends them after
//! their `timeoutSeconds`, and the watcher gives up on one that stays silent longer).
//!
//! [`Clients`] gives each kind of traffic a bucket of its own, so informers re-listing, status
//! patches and events never delay a bind (kubernetes #135900). The clients that act as leader
//! (binds and writes) are gated on [`Leadership`]: nothing is sent once it ends, and a request not
//! yet answered is abandoned then.
//!
//! The bound on requests in flight is ours: kube-rs speaks HTTP/1.1, so every request in flight holds
//! a TLS connection (tens of KB on each side) where client-go multiplexes streams on one HTTP/2
//! connection. A burst of binding cycles would otherwise open hundreds of connections.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use tokio::sync::Semaphore;

use super::leader_election::Leadership;
use super::metrics::rest_client_metrics;

/// Requests in flight per client at most; 64 keep the API server's binding path saturated (the
/// benchmark's null binder reaches the ceiling with as many).
pub(crate) const MAX_IN_FLIGHT: usize = 64;

/// A request other than a watch is answered (response headers in) within this or fails. client-go
/// closes a silent connection after ~45 s with HTTP/2 pings; HTTP/1.1 has none, so every request
/// carries its own bound.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a request was not answered.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RequestError {
    #[error("no answer from the API server within {0:?}")]
    Timeout(Duration),
    #[error("not sent: this scheduler is not the leader (any more)")]
    NotLeader,
}

/// The scheduler's clients, each with a token bucket of its own.
#[derive(Clone)]
pub(crate) struct Clients {
    /// Lists and watches.
    pub informers: Client,
    /// `pods/binding` only, gated on leadership.
    pub binds: Client,
    /// Everything else the leader writes (status patches, preemption deletes, PV/PVC updates).
    pub writes: Client,
    /// Events (upstream's event client is its own too); not gated, they report what was done.
    pub events: Client,
}

impl Clients {
    pub(crate) fn new(client: &Client, qps: f32, burst: i32, leadership: &Leadership) -> Self {
        let gated = |c: &Client| {
            limit(
                c.clone(),
                qps,
                burst,
                REQUEST_TIMEOUT,
                Some(leadership.clone()),
            )
        };
        Self {
            informers: limited(client.clone(), qps, burst),
            binds: gated(client),
            writes: gated(client),
            events: limited(client.clone(), qps, burst),
        }
    }
}

/// A client that sends through `client` within `qps`/`burst` (no rate limit when `qps <= 0`, as
/// client-go), [`MAX_IN_FLIGHT`] and [`REQUEST_TIMEOUT`].
pub(crate) fn limited(client: Client, qps: f32, burst: i32) -> Client {
    limit(client, qps, burst, REQUEST_TIMEOUT, None)
}

fn limit(
    client: Client,
    qps: f32,
    burst: i32,
    timeout: Duration,
    gate: Option<Leadership>,
) -> Client {
    let namespace = client.default_namespace().to_string();
    let service = Limited {
        inner: client,
        rate: token_bucket(qps, burst).map(Arc::new),
        in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        timeout,
        gate,
    };
    Client::new(service, namespace)
}

/// client-go's token bucket: `burst` tokens, refilled at `qps` per second.
fn token_bucket(qps: f32, burst: i32) -> Option<DefaultDirectRateLimiter> {
    if !qps.is_finite() || qps <= 0.0 {
        return None;
    }
    let period = Duration::from_secs_f64(1.0 / f64::from(qps));
    let burst = NonZeroU32::new(burst.max(1).unsigned_abs()).unwrap_or(NonZeroU32::MIN);
    Quota::with_period(period).map(|q| RateLimiter::direct(q.allow_burst(burst)))
}

#[derive(Clone)]
struct Limited {
    inner: Client,
    rate: Option<Arc<DefaultDirectRateLimiter>>,
    in_flight: Arc<Semaphore>,
    timeout: Duration,
    /// Send only while leading.
    gate: Option<Leadership>,
}

/// client-go's request metrics for one request: its status code, or `<error>` when it got no
/// answer (a transport error, a timeout).
fn record(
    method: &str,
    result: &Result<Response<Body>, kube::Error>,
    started: Instant,
    request_size: Option<u64>,
) {
    let (code, response_size) = match result {
        Ok(resp) => (
            resp.status().as_u16().to_string(),
            resp.headers()
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse().ok()),
        ),
        Err(kube::Error::Api(status)) => (status.code.to_string(), None),
        Err(_) => ("<error>".to_string(), None),
    };
    rest_client_metrics().observe(
        method,
        &code,
        started.elapsed(),
        (request_size, response_size),
    );
}

fn is_watch<B>(req: &Request<B>) -> bool {
    req.uri()
        .query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"))
}

impl tower::Service<Request<Body>> for Limited {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<Response<Body>, kube::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let method = req.method().as_str().to_string();
            let request_size = hyper::body::Body::size_hint(req.body()).exact();
            if is_watch(&req) {
                let started = Instant::now();
                let result = this.inner.send(req).await;
                record(&method, &result, started, request_size);
                return result;
            }
            if let Some(rate) = &this.rate {
                let waiting = Instant::now();
                rate.until_ready().await;
                rest_client_metrics().observe_rate_limiter(&method, waiting.elapsed());
            }
            // Held until the response headers are in; the semaphore is never closed.
            let _permit = this.in_flight.acquire().await;
            let started = Instant::now();
            let timed_out = || kube::Error::Service(RequestError::Timeout(this.timeout).into());
            let send = tokio::time::timeout(this.timeout, this.inner.send(req));
            let Some(leadership) = &this.gate else {
                let result = send.await.unwrap_or_else(|_| Err(timed_out()));
                record(&method, &result, started, request_size);
                return result;
            };
            let not_leader = || kube::Error::Service(RequestError::NotLeader.into());
            if !leadership.is_leader() {
                return Err(not_leader());
            }
            let result = tokio::select! {
                biased;
                _ = leadership.lost() => Err(not_leader()),
                r = send => r.unwrap_or_else(|_| Err(timed_out())),
            };
            record(&method, &result, started, request_size);
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// An API stand-in that answers `{}` after 20 ms (or never, when `silent`) and records how many
    /// requests it saw and the most it saw at once.
    #[derive(Clone, Default)]
    struct Counting {
        silent: bool,
        seen: Arc<AtomicUsize>,
        now: Arc<AtomicUsize>,
        max: Arc<AtomicUsize>,
    }

    impl Counting {
        fn silent() -> Self {
            Self {
                silent: true,
                ..Self::default()
            }
        }
    }

    impl tower::Service<Request<Body>> for Counting {
        type Response = Response<Body>;
        type Error = std::convert::Infallible;
        type Future = BoxFuture<'static, Result<Response<Body>, Self::Error>>;

        fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _req: Request<Body>) -> Self::Future {
            let this = self.clone();
            Box::pin(async move {
                this.seen.fetch_add(1, Ordering::SeqCst);
                if this.silent {
                    std::future::pending::<()>().await;
                }
                let n = this.now.fetch_add(1, Ordering::SeqCst) + 1;
                this.max.fetch_max(n, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                this.now.fetch_sub(1, Ordering::SeqCst);
                Ok(Response::new(Body::from(b"{}".to_vec())))
            })
        }
    }

    /// Sends `count` GETs of `uri` at once through a limited client; the most seen at once.
    async fn most_at_once(uri: &str, count: usize) -> usize {
        let api = Counting::default();
        let client = limited(Client::new(api.clone(), "default"), 0.0, 0);
        let sends = (0..count).map(|_| {
            let request = Request::get(uri).body(Body::empty()).unwrap();
            client.send(request)
        });
        for response in futures::future::join_all(sends).await {
            assert!(response.is_ok());
        }
        api.max.load(Ordering::SeqCst)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_in_flight_are_bounded() {
        let most = most_at_once("/api/v1/namespaces/a/pods/p/binding", 3 * MAX_IN_FLIGHT).await;
        assert!(most <= MAX_IN_FLIGHT, "{most} in flight");
        assert!(most > 1, "requests were not concurrent at all");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn watches_are_not_bounded() {
        let most = most_at_once("/api/v1/pods?watch=true", 2 * MAX_IN_FLIGHT).await;
        assert!(most > MAX_IN_FLIGHT, "only {most} watches at once");
    }

    async fn get(client: Client) -> Result<Response<Body>, kube::Error> {
        let request = Request::get("/api/v1/namespaces/a/pods/p")
            .body(Body::empty())
            .unwrap();
        client.send(request).await
    }

    fn not_leader(err: &kube::Error) -> bool {
        matches!(err, kube::Error::Service(e) if matches!(e.downcast_ref(), Some(RequestError::NotLeader)))
    }

    #[tokio::test]
    async fn a_request_without_answer_times_out() {
        let api = Counting::silent();
        let client = limit(
            Client::new(api.clone(), "default"),
            0.0,
            0,
            Duration::from_millis(200),
            None,
        );
        let start = Instant::now();
        let err = get(client.clone()).await.unwrap_err();
        assert!(
            matches!(&err, kube::Error::Service(e) if matches!(e.downcast_ref(), Some(RequestError::Timeout(_)))),
            "{err}"
        );
        assert!(start.elapsed() < Duration::from_secs(5));
        assert_eq!(api.seen.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_gated_client_sends_nothing_once_leadership_ended() {
        let api = Counting::default();
        let leadership = Leadership::always();
        let client = limit(
            Client::new(api.clone(), "default"),
            0.0,
            0,
            REQUEST_TIMEOUT,
            Some(leadership.clone()),
        );
        assert!(get(client.clone()).await.is_ok());
        leadership.resign();
        let err = get(client.clone()).await.unwrap_err();
        assert!(not_leader(&err), "{err}");
        assert_eq!(
            api.max.load(Ordering::SeqCst),
            1,
            "only the first request was sent"
        );
    }

    #[tokio::test]
    async fn a_request_in_flight_is_abandoned_when_leadership_ends() {
        let leadership = Leadership::always();
        let client = limit(
            Client::new(Counting::silent(), "default"),
            0.0,
            0,
            REQUEST_TIMEOUT,
            Some(leadership.clone()),
        );
        let in_flight = tokio::spawn(get(client.clone()));
        tokio::time::sleep(Duration::from_millis(100)).await;
        leadership.resign();
        let result = tokio::time::timeout(Duration::from_secs(5), in_flight)
            .await
            .expect("abandoned at once, not at the request timeout")
            .unwrap();
        assert!(not_leader(&result.unwrap_err()));
    }

    fn request(uri: &str) -> Request<()> {
        Request::get(uri).body(()).unwrap()
    }

    #[test]
    fn watches_are_told_apart() {
        assert!(is_watch(&request(
            "/api/v1/pods?watch=true&resourceVersion=5"
        )));
        assert!(is_watch(&request("/api/v1/pods?fieldSelector=x&watch=1")));
        assert!(!is_watch(&request("/api/v1/pods?limit=500")));
        assert!(!is_watch(&request("/api/v1/namespaces/a/pods/p/binding")));
        assert!(!is_watch(&request("/api/v1/pods?watchy=true")));
    }

    #[test]
    fn no_rate_limit_without_positive_qps() {
        assert!(token_bucket(0.0, 100).is_none());
        assert!(token_bucket(-1.0, 100).is_none());
        assert!(token_bucket(f32::NAN, 100).is_none());
    }

    #[test]
    fn burst_then_qps() {
        let bucket = token_bucket(10.0, 5).unwrap();
        for i in 0..5 {
            assert!(bucket.check().is_ok(), "request {i} of the burst");
        }
        assert!(bucket.check().is_err(), "the burst is spent");
    }

    #[tokio::test]
    async fn refills_at_qps() {
        let bucket = token_bucket(20.0, 1).unwrap();
        let start = Instant::now();
        for _ in 0..3 {
            bucket.until_ready().await;
        }
        // One token at once, two more at 20/s: at least ~100 ms.
        assert!(start.elapsed() >= Duration::from_millis(90));
    }
}
