//! Whether this process may act as leader: a term with a deadline kept on the local clock, read
//! by everything that acts on it.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// `until` encodings besides a deadline (nanoseconds after `base`, between the two). A term is
/// one-shot: once lost or resigned it never leads again (a new elector campaigns anew).
pub(super) const NOT_LEADING: u64 = 0;
const LOST: u64 = u64::MAX - 2;
const ALWAYS: u64 = u64::MAX - 1;
const RESIGNED: u64 = u64::MAX;

struct LeadershipState {
    base: Instant,
    until: AtomicU64,
    signal: watch::Sender<bool>,
    /// A leadership this one lives within (an Embedded scheduler's, within its operator's): it
    /// ends the moment the parent's does.
    parent: std::sync::OnceLock<Leadership>,
}

/// Whether this process may act as leader, shared by everything that acts on it. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Leadership(Arc<LeadershipState>);

/// What [`Leadership`] holds now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Term {
    NotLeading,
    Until(Instant),
    Always,
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Leadership").field(&self.term()).finish()
    }
}

impl Leadership {
    pub(super) fn new(until: u64) -> Self {
        let (signal, _) = watch::channel(until == ALWAYS);
        Self(Arc::new(LeadershipState {
            base: Instant::now(),
            until: AtomicU64::new(until),
            signal,
            parent: std::sync::OnceLock::new(),
        }))
    }

    /// Makes this leadership end with `parent`'s: leading only while both lead, its deadline never
    /// later than the parent's (so an elector renewing it stops at the parent's deadline too).
    pub(crate) fn within(&self, parent: Leadership) {
        let _ = self.0.parent.set(parent);
    }

    fn parent(&self) -> Option<&Leadership> {
        self.0.parent.get()
    }

    /// Leadership of a process that runs without leader election: leading until [`Self::resign`].
    pub(crate) fn always() -> Self {
        Self::new(ALWAYS)
    }

    fn term(&self) -> Term {
        let own = match self.0.until.load(Ordering::Acquire) {
            NOT_LEADING | LOST | RESIGNED => Term::NotLeading,
            ALWAYS => Term::Always,
            nanos => {
                let until = self.0.base + Duration::from_nanos(nanos);
                if Instant::now() < until {
                    Term::Until(until)
                } else {
                    Term::NotLeading
                }
            }
        };
        match (own, self.parent().map(Leadership::term)) {
            (_, Some(Term::NotLeading)) | (Term::NotLeading, _) => Term::NotLeading,
            (own, None | Some(Term::Always)) => own,
            (Term::Always, Some(parent)) => parent,
            (Term::Until(a), Some(Term::Until(b))) => Term::Until(a.min(b)),
        }
    }

    /// Leading right now: the renew deadline has not passed (checked here, on the clock).
    pub(crate) fn is_leader(&self) -> bool {
        self.term() != Term::NotLeading
    }

    /// A `watch` of [`Self::is_leader`]: turns true when the lease is acquired and false the moment
    /// the renew deadline passes, the lease is taken over, or [`Self::resign`] is called.
    pub(crate) fn watch(&self) -> watch::Receiver<bool> {
        self.0.signal.subscribe()
    }

    /// Resolves once leading (at once when leading now).
    pub(crate) async fn acquired(&self) {
        let mut signal = self.watch();
        while !self.is_leader() {
            if signal.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Resolves once not leading (at once when not leading now), on this process's clock: a stalled
    /// elector task cannot delay it past the deadline.
    pub(crate) async fn lost(&self) {
        let mut signal = self.watch();
        loop {
            let until = match self.term() {
                Term::NotLeading => return,
                Term::Until(until) => Some(until),
                Term::Always => None,
            };
            let deadline = async {
                match until {
                    Some(until) => tokio::time::sleep_until(until.into()).await,
                    None => std::future::pending().await,
                }
            };
            let parent_lost = async {
                match self.parent() {
                    Some(p) => Box::pin(p.lost()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = deadline => {}
                _ = parent_lost => {}
                changed = signal.changed() => if changed.is_err() { return },
            }
        }
    }

    /// Stops acting as leader for good (shutting down): [`Self::is_leader`] is false from now on,
    /// whatever the elector renews. The elector releases the lease when told to stop.
    pub(crate) fn resign(&self) {
        self.0.until.store(RESIGNED, Ordering::Release);
        self.0.signal.send_replace(false);
    }

    /// Leads until `until`: starts the term or extends it while it lasts; false once it ended (the
    /// deadline passed, lost or resigned).
    pub(super) fn lead_until(&self, until: Instant) -> bool {
        let nanos = |at: Instant| {
            u64::try_from(at.saturating_duration_since(self.0.base).as_nanos())
                .unwrap_or(LOST - 1)
                .clamp(1, LOST - 1)
        };
        let (until, now) = (nanos(until), nanos(Instant::now()));
        let set = self
            .0
            .until
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                (cur == NOT_LEADING || (cur < LOST && now < cur)).then_some(until)
            })
            .is_ok();
        if set {
            self.0
                .signal
                .send_if_modified(|leading| !std::mem::replace(leading, true));
        }
        set
    }

    /// Ends the term as lost (unless resigned already).
    pub(super) fn stop_leading(&self) {
        let _ = self
            .0
            .until
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                (cur != RESIGNED).then_some(LOST)
            });
        self.0.signal.send_replace(false);
    }

    pub(super) fn resigned(&self) -> bool {
        self.0.until.load(Ordering::Acquire) == RESIGNED
    }

    /// The deadline of the current term, if leading on a lease.
    pub(super) fn deadline(&self) -> Option<Instant> {
        match self.term() {
            Term::Until(until) => Some(until),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn leadership_ends_at_the_deadline_on_its_own() {
        let leadership = Leadership::new(NOT_LEADING);
        assert!(!leadership.is_leader());
        let signal = leadership.watch();
        assert!(leadership.lead_until(Instant::now() + Duration::from_millis(300)));
        assert!(leadership.is_leader());
        assert!(*signal.borrow());
        let start = Instant::now();
        // Nothing renews: `lost` resolves at the deadline, and `is_leader` agrees without any task.
        tokio::time::timeout(Duration::from_secs(5), leadership.lost())
            .await
            .unwrap();
        assert!(start.elapsed() >= Duration::from_millis(250));
        assert!(!leadership.is_leader());
    }

    #[tokio::test]
    async fn a_renewal_moves_the_deadline() {
        let leadership = Leadership::new(NOT_LEADING);
        leadership.lead_until(Instant::now() + Duration::from_millis(200));
        let lost = leadership.clone();
        let waiter = tokio::spawn(async move { lost.lost().await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        leadership.lead_until(Instant::now() + Duration::from_millis(600));
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(!waiter.is_finished(), "lost before the renewed deadline");
        assert!(leadership.is_leader());
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        assert!(!leadership.is_leader());
    }

    #[tokio::test]
    async fn a_term_that_ended_is_not_extended() {
        let leadership = Leadership::new(NOT_LEADING);
        assert!(leadership.lead_until(Instant::now() + Duration::from_millis(100)));
        tokio::time::sleep(Duration::from_millis(150)).await;
        // A renewal answered after the deadline does not bring leadership back.
        assert!(!leadership.lead_until(Instant::now() + Duration::from_secs(60)));
        assert!(!leadership.is_leader());
        leadership.stop_leading();
        assert!(!leadership.lead_until(Instant::now() + Duration::from_secs(60)));
        assert!(!*leadership.watch().borrow());
    }

    #[tokio::test]
    async fn resigning_is_final() {
        let leadership = Leadership::new(NOT_LEADING);
        leadership.lead_until(Instant::now() + Duration::from_secs(60));
        let signal = leadership.watch();
        leadership.resign();
        assert!(!leadership.is_leader());
        assert!(!*signal.borrow());
        assert!(!leadership.lead_until(Instant::now() + Duration::from_secs(60)));
        assert!(!leadership.is_leader());
        tokio::time::timeout(Duration::from_secs(1), leadership.lost())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_leadership_within_another_ends_at_the_others_deadline() {
        let operator = Leadership::new(NOT_LEADING);
        let embedded = Leadership::new(NOT_LEADING);
        embedded.within(operator.clone());
        assert!(embedded.lead_until(Instant::now() + Duration::from_secs(60)));
        // The operator does not lead: neither does its Embedded scheduler.
        assert!(!embedded.is_leader());
        let operator_until = Instant::now() + Duration::from_millis(300);
        assert!(operator.lead_until(operator_until));
        assert!(embedded.is_leader());
        assert_eq!(embedded.deadline(), Some(operator_until));
        let start = Instant::now();
        tokio::time::timeout(Duration::from_secs(5), embedded.lost())
            .await
            .unwrap();
        assert!(start.elapsed() >= Duration::from_millis(250));
        assert!(!embedded.is_leader());
        // Its own renewals cannot bring it back while the operator does not lead.
        embedded.lead_until(Instant::now() + Duration::from_secs(60));
        assert!(!embedded.is_leader());
    }

    #[tokio::test]
    async fn without_election_a_process_leads_until_it_resigns() {
        let leadership = Leadership::always();
        assert!(leadership.is_leader());
        assert!(*leadership.watch().borrow());
        tokio::time::timeout(Duration::from_secs(1), leadership.acquired())
            .await
            .unwrap();
        assert!(
            tokio::time::timeout(Duration::from_millis(200), leadership.lost())
                .await
                .is_err()
        );
        leadership.resign();
        assert!(!leadership.is_leader());
    }
}
