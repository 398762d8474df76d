//! The client's request budget (`--kube-api-qps`, `--kube-api-burst`): a token bucket every
//! request of the client takes a token from before it is sent, as client-go's rate limiter.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

/// How many requests a second the client may send on average (`qps`), and how many at once
/// above that (`burst`, at least 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestBudget {
    /// Requests a second; the budget is off at 0.
    pub qps: f64,
    /// The bucket's size.
    pub burst: u32,
}

impl RequestBudget {
    /// Whether it limits anything.
    pub fn limits(self) -> bool {
        self.qps > 0.0
    }
}

/// The bucket: `tokens` as of `at`.
#[derive(Debug)]
struct Bucket {
    budget: RequestBudget,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new(budget: RequestBudget, now: Instant) -> Bucket {
        Bucket { budget, tokens: f64::from(budget.burst.max(1)), at: now }
    }

    /// Takes a token at `now`, or says how long until one is there.
    fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let refilled = self.tokens + now.saturating_duration_since(self.at).as_secs_f64() * self.budget.qps;
        self.tokens = refilled.min(f64::from(self.budget.burst.max(1)));
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.budget.qps))
        }
    }
}

/// The layer putting [`Budgeted`] on the client's service.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BudgetLayer(pub RequestBudget);

impl<S> Layer<S> for BudgetLayer {
    type Service = Budgeted<S>;

    fn layer(&self, inner: S) -> Budgeted<S> {
        Budgeted { inner, bucket: Bucket::new(self.0, Instant::now()), taken: false, sleep: None }
    }
}

/// A service that is ready only once a token was taken for the next request. The client's buffer
/// calls it from one task, so requests wait their turn there.
#[derive(Debug)]
pub(crate) struct Budgeted<S> {
    inner: S,
    bucket: Bucket,
    /// A token was taken for the next call.
    taken: bool,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl<S: Service<R>, R> Service<R> for Budgeted<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        while !self.taken {
            if let Some(sleep) = self.sleep.as_mut() {
                ready!(sleep.as_mut().poll(cx));
                self.sleep = None;
            }
            match self.bucket.take(Instant::now()) {
                Ok(()) => self.taken = true,
                Err(wait) => self.sleep = Some(Box::pin(tokio::time::sleep(wait))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> S::Future {
        self.taken = false;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use tower::ServiceExt as _;

    use super::*;

    /// The instants, from the start, at which `count` requests got through a budget of `qps` and
    /// `burst`.
    async fn sent(qps: f64, burst: u32, count: usize) -> Vec<Duration> {
        let start = Instant::now();
        let inner = tower::service_fn(move |(): ()| async move { Ok::<_, Infallible>(start.elapsed()) });
        let mut service = BudgetLayer(RequestBudget { qps, burst }).layer(inner);
        let mut times = Vec::new();
        for _ in 0..count {
            times.push(service.ready().await.unwrap().call(()).await.unwrap());
        }
        times
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_goes_at_once_and_the_rest_at_the_rate() {
        let times = sent(10.0, 3, 6).await;
        let millis: Vec<u128> = times.iter().map(Duration::as_millis).collect();
        assert_eq!(millis, [0, 0, 0, 100, 200, 300]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_bucket_refills_while_idle_up_to_the_burst() {
        let mut bucket = Bucket::new(RequestBudget { qps: 2.0, burst: 2 }, Instant::now());
        let now = Instant::now();
        assert!(bucket.take(now).is_ok() && bucket.take(now).is_ok());
        assert_eq!(bucket.take(now), Err(Duration::from_millis(500)));
        let later = now + Duration::from_secs(60);
        assert!(bucket.take(later).is_ok() && bucket.take(later).is_ok(), "refilled to the burst");
        assert_eq!(bucket.take(later), Err(Duration::from_millis(500)), "not beyond it");
    }

    #[tokio::test(start_paused = true)]
    async fn a_part_of_a_token_shortens_the_wait_for_the_rest() {
        let mut bucket = Bucket::new(RequestBudget { qps: 2.0, burst: 1 }, Instant::now());
        let now = Instant::now();
        assert!(bucket.take(now).is_ok());
        let quarter = now + Duration::from_millis(250);
        assert_eq!(bucket.take(quarter), Err(Duration::from_millis(250)), "half a token there: half the wait");
    }

    #[test]
    fn a_budget_of_zero_qps_limits_nothing() {
        assert!(!RequestBudget { qps: 0.0, burst: 1 }.limits());
        assert!(RequestBudget { qps: 0.5, burst: 1 }.limits());
    }
}
